"""Reading one run directory with the pure-Python reader: the reference semantics of the
runs table (``esopt.study.tables``; the Arrow fast path, ``esopt.study.arrow_read``, must match it).

A run directory is ``<sweep>/runs/<run_id>/{summary.json, metrics.jsonl}`` plus the optional
analysis files (``sparsity.json``, ``drift.json``, ``forgetting.json``, ``connectivity.json``). A run that cannot be
read (no/corrupt summary.json, missing keys) is skipped with a reason, never fatal.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from esopt.core.config import ANALYSES

ID_COLUMNS = ("run_id", "status", "error", "algo", "task", "model", "params", "pop", "sigma", "lr",
              "seed", "iterations", "tokens_generated", "wall_s", "sweep")
REQUIRED = ("status", "algo", "model")
UPDATE_STATS = ("update_top_share", "update_l2")   # drift.json's, as plain runs-table columns
NUMERIC_ID_COLUMNS = ("params", "pop", "sigma", "lr", "seed", "iterations", "tokens_generated", "wall_s")

# Per-problem and per-member lists are dropped from the tables; emptying them in the raw bytes
# before parsing is the main speed-up (parsing is the cost). Values are numbers, so `[^]]*`.
_DROP_LISTS = [(re.compile(rb'"%s"\s*:\s*\[[^\]]*\]' % k), b'"%s": []' % k)   # constant replacement:
               for k in (b"correct_counts", b"greedy_correct", b"rewards")]      # no per-match Python


def drop_lists(raw: bytes, which: slice = slice(None)) -> bytes:
    for pattern, empty in _DROP_LISTS[which]:
        raw = pattern.sub(empty, raw)
    return raw


SUMMARY_LISTS, METRICS_LISTS = slice(0, 2), slice(2, 3)   # what each file kind carries

# Arrow's JSON reader recurses on the C stack: a line nested ~20,000 deep kills the process
# (SIGSEGV). Lines with more opening brackets than this go to the Python reader instead, which
# counts a line too deep for it (RecursionError) as unreadable. esopt's own lines have ~20.
MAX_BRACKETS = 1000


def bracket_heavy(blob: bytes) -> bool:
    """Whether a line of ``blob`` has more than MAX_BRACKETS opening brackets (two C-speed
    counts over the whole blob decide for almost every file; only a heavy one is split)."""
    if blob.count(b"[") + blob.count(b"{") <= MAX_BRACKETS:
        return False
    return any(ln.count(b"[") + ln.count(b"{") > MAX_BRACKETS for ln in blob.split(b"\n"))


def copy_of(folder: str, s: dict) -> str | None:
    """The run a summary names when that is not its folder's (a copied or renamed run folder,
    counted once under its own run_id), else None. Summaries without a run_id are their folder's."""
    rid = s.get("run_id")
    return None if rid is None or rid == folder else str(rid)[:80]


def copy_reason(rid: str) -> str:
    return f"its summary.json names run {rid!r}: a copied or renamed run folder (counted once, as {rid!r})"


# ---------------------------------------------------------------------------------------
# flattening
def flatten(d: dict, prefix: str = "", out: dict | None = None) -> dict:
    """Flatten one JSON object into scalar columns.

    ``{"pass@k": {"1": v}}`` -> ``pass@1``; ``{"pass@k_ci": {"1": [lo, hi]}}`` -> ``pass@1_lo``,
    ``pass@1_hi``; ``{"greedy_ci": [lo, hi]}`` -> ``greedy_lo``, ``greedy_hi``; other nested
    dicts -> ``outer.inner``; other lists are dropped (per-problem / per-member lists).
    """
    out = {} if out is None else out
    for key, v in d.items():
        if isinstance(v, dict):
            if key.endswith("@k"):
                for k, x in v.items():
                    if not isinstance(x, (dict, list)):
                        out[f"{prefix}{key[:-1]}{k}"] = x
            elif key.endswith("@k_ci"):
                for k, x in v.items():
                    if isinstance(x, list) and len(x) == 2:
                        out[f"{prefix}{key[:-4]}{k}_lo"], out[f"{prefix}{key[:-4]}{k}_hi"] = x
            else:
                flatten(v, f"{prefix}{key}.", out)
        elif isinstance(v, list):
            if key.endswith("_ci") and len(v) == 2:
                out[f"{prefix}{key[:-3]}_lo"], out[f"{prefix}{key[:-3]}_hi"] = v
        else:
            out[prefix + key] = v
    return out


# ---------------------------------------------------------------------------------------
# reading one run
@dataclass
class RunRead:
    run_id: str
    row: dict | None = None               # the runs-table row, None when skipped
    skip: str | None = None               # why it was skipped
    lines: list = field(default_factory=list)   # parsed metrics lines
    bad_lines: int = 0
    notes: list = field(default_factory=list)


def parse_jsonl(data: bytes) -> tuple[list, int]:
    """Parse metrics.jsonl bytes -> (objects, number of unparseable lines).

    Fast path: one json.loads over ``[l1,l2,...]``; on any error (e.g. a torn last line of a
    running run) fall back to line by line and count the bad ones.
    """
    data = drop_lists(data)
    lines = [ln for ln in data.split(b"\n") if ln.strip()]
    if not lines:
        return [], 0
    try:
        objs = json.loads(b"[" + b",".join(lines) + b"]")
        if all(isinstance(o, dict) for o in objs):
            return objs, 0
    except (ValueError, RecursionError):
        pass
    objs, bad = [], 0
    for ln in lines:
        try:
            o = json.loads(ln)
        except (ValueError, RecursionError):   # RecursionError: a line nested too deep
            bad += 1
            continue
        if isinstance(o, dict):
            objs.append(o)
        else:
            bad += 1
    return objs, bad


def _summary_row(run_id: str, s: dict) -> dict:
    """summary.json -> one flat row (see ID_COLUMNS for the fixed leading columns)."""
    model = s["model"]
    row = {
        "run_id": run_id, "status": s["status"], "error": s.get("error"), "algo": s["algo"],
        "task": s.get("task")["name"] if isinstance(s.get("task"), dict) else s.get("task"),
        "model": model["name"] if isinstance(model, dict) else model,
        "params": model.get("params") if isinstance(model, dict) else None,
    }
    for key in ("pop", "sigma", "lr", "seed", "iterations", "tokens_generated", "wall_s", "sweep"):
        row[key] = s.get(key)
    for key in ("base", "final"):
        if isinstance(s.get(key), dict):
            flatten(s[key], f"{key}_", row)
    for i, ph in enumerate(s.get("phases") or []):
        if isinstance(ph, dict):
            row[f"phase{i + 1}_algo"] = ph.get("algo")
            row[f"phase{i + 1}_iterations"] = ph.get("iterations")
            if isinstance(ph.get("eval"), dict):
                flatten(ph["eval"], f"phase{i + 1}_", row)
    eff = s.get("effective") if isinstance(s.get("effective"), dict) else {}
    if eff.get("es_noise") is not None:  # low-rank ES is EGGROLL, not the study's full-rank ES
        row["es_noise"] = eff["es_noise"]
    skip = set(row) | {"base", "final", "phases", "config", "model", "task", "run_id"}
    for key, v in s.items():  # anything else a later version adds (attempts, effective, ...)
        if key not in skip:
            if isinstance(v, dict):
                flatten(v, f"{key}.", row)
            elif not isinstance(v, list):
                row[key] = v
    return row


def analysis_columns(path: Path, names: set, notes: list, root: str | None = None) -> dict:
    """Scalars of the optional analysis files beside a run, as ``<analysis>_<key>`` columns; drift's
    ``update_top_share`` and ``update_l2`` also as those plain names (claim 9 reads them)."""
    row: dict = {}
    for name in ANALYSES:
        if f"{name}.json" in names:
            if links_out(str(path / f"{name}.json"), root):
                notes.append(f"run {path.name}: {name}.json links outside the sweep directory; ignored")
                continue
            try:
                a = json.loads((path / f"{name}.json").read_bytes())
                flatten(a if isinstance(a, dict) else {"value": a}, f"{name}_", row)
            except (ValueError, OSError) as e:
                notes.append(f"run {path.name}: {name}.json unreadable ({type(e).__name__}); ignored")
    for key in UPDATE_STATS:     # the update's size and density (claim 9), any trained run: drift.json's
        if row.get(f"drift_{key}") is not None:
            row[key] = row[f"drift_{key}"]
    return row


def summary_row(run_id: str, raw: bytes | None) -> tuple[dict | None, str | None]:
    """summary.json bytes -> (runs-table row, None) or (None, why it is skipped). Never raises."""
    if raw is None:
        return None, "no summary.json (not started, or not a run directory)"
    try:
        s = json.loads(drop_lists(raw))
    except ValueError as e:
        return None, f"corrupt summary.json: {str(e).splitlines()[0]}"
    except RecursionError:
        return None, "corrupt summary.json: nested too deep"
    if not isinstance(s, dict):
        return None, f"corrupt summary.json: a JSON {type(s).__name__}, not an object"
    missing = [k for k in REQUIRED if k not in s or s[k] is None]
    if isinstance(s.get("model"), dict) and s["model"].get("name") is None:
        missing.append("model.name")
    if missing:
        return None, f"summary.json lacks {', '.join(missing)}"
    if copy_of(run_id, s):
        return None, copy_reason(copy_of(run_id, s))
    try:
        row = _summary_row(run_id, s)
    except (KeyError, TypeError, AttributeError) as e:
        return None, f"summary.json has an unexpected shape ({type(e).__name__}: {e})"
    bad = [k for k in NUMERIC_ID_COLUMNS if not _number_or_null(row.get(k))]
    if bad:
        k = bad[0]
        return None, (f"summary.json: {'model.params' if k == 'params' else k} is not a number "
                      f"({str(row[k])[:40]!r})")
    return row, None


def no_metrics_note(run_id: str) -> str:
    """The note for a run recorded past its start whose metrics.jsonl is gone (its curves would
    silently be missing from the page)."""
    return f"run {run_id}: no metrics.jsonl (deleted?): its curves are missing from the tables and the page"


def _number_or_null(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def read_run(path: Path, root: str | None = None) -> RunRead:
    """Read one run directory with the pure-Python reader; never raises for bad content."""
    rr = RunRead(path.name)
    names, summ, metr = read_raw(path, root)
    if names is None:
        rr.skip = summ if isinstance(summ, str) else "unreadable run directory"
        return rr
    rr.row, rr.skip = summary_row(path.name, summ)
    if rr.row is not None:
        rr.row.update(analysis_columns(path, names, rr.notes, root))
        rr.lines, rr.bad_lines = parse_jsonl(metr)
        rr.row["n_lines"] = len(rr.lines)
        if "metrics.jsonl" not in names and rr.row.get("status") != "running":
            rr.notes.append(no_metrics_note(rr.run_id))
    return rr


def links_out(path: str, root: str | None) -> bool:
    """Whether ``path`` is a symlink whose target lies outside ``root`` (a real path; the sweep
    directory): its content is not read. ``root`` None: the directory holding ``path``'s run."""
    if not os.path.islink(path):
        return False
    root = root or os.path.realpath(os.path.dirname(os.path.dirname(path)))
    target = os.path.realpath(path)
    return os.path.commonpath([root, target]) != root


OUTSIDE = "a symlink to {} outside the sweep directory (not followed)"
ALIAS = "a symlink to {} (a run is counted once, from its own folder)"


def read_raw(path: Path, root: str | None = None):
    """(file names, summary bytes, metrics bytes) of one run directory; IO only. A run whose
    directory, summary.json or metrics.jsonl links out of ``root`` (the sweep directory's real
    path): (None, why, b"")."""
    try:
        d = str(path)
        if links_out(d, root):
            return None, OUTSIDE.format(os.path.realpath(d)), b""
        if os.path.islink(d):
            return None, ALIAS.format(os.readlink(d)), b""
        names = set(os.listdir(d))
        summ = metr = None
        for name in ("summary.json", "metrics.jsonl"):
            if name in names and links_out(os.path.join(d, name), root):
                return None, f"{name}: " + OUTSIDE.format(os.path.realpath(os.path.join(d, name))), b""
        if "summary.json" in names:
            with open(os.path.join(d, "summary.json"), "rb") as f:
                summ = f.read()
        if "metrics.jsonl" in names:
            with open(os.path.join(d, "metrics.jsonl"), "rb") as f:
                metr = f.read()
        metr = metr or b""
    except OSError:
        return None, None, b""
    return names, summ, metr
