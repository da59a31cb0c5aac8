"""A sweep's tables: one row per run, every metrics line (``load`` -> ``Aggregate``).

Reads only run directories (``<sweep>/runs/<run_id>/{summary.json, metrics.jsonl}`` plus the
optional analysis files ``sparsity.json``, ``drift.json``, ``forgetting.json``);
``write_tables`` writes:

    runs.parquet, runs.csv   one row per run: ids, status, hyperparameters, model size,
                             base_* / final_* / phase<i>_* metrics, tokens, wall time, analyses
    curves.parquet           every metrics.jsonl line, with run_id and its line number; nested
                             dicts flattened (pass@k {"1": v} -> pass@1, pass@k_ci -> pass@1_lo/_hi)

A run directory that cannot be read (no/corrupt summary.json, missing keys) is skipped and
listed, never fatal.

How it stays fast (10,000 runs in a few CPU seconds): threads read the files; per chunk of
runs, all summaries and all metrics lines go through Arrow's C++ JSON reader at once (after
the per-problem / per-member lists are cut from the raw bytes with a regex), and nested
columns are flattened column-wise. Anything Arrow cannot read exactly (a corrupt summary, a
bad line, a type that changes) sends that chunk's stage to the pure-Python reader
(:func:`read_run` semantics), which is the reference; ``load(fast=False)`` forces it.
"""

from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from esopt.core.config import ANALYSES
from esopt.core.errors import ConfigError
from esopt.core.store import atomic_path
ID_COLUMNS = ("run_id", "status", "error", "algo", "task", "model", "params", "pop", "sigma", "lr",
              "seed", "iterations", "tokens_generated", "wall_s", "sweep")
REQUIRED = ("status", "algo", "model")
NUMERIC_ID_COLUMNS = ("params", "pop", "sigma", "lr", "seed", "iterations", "tokens_generated", "wall_s")

# Per-problem and per-member lists are dropped from the tables; emptying them in the raw bytes
# before parsing is the main speed-up (parsing is the cost). Values are numbers, so `[^]]*`.
_DROP_LISTS = [(re.compile(rb'"%s"\s*:\s*\[[^\]]*\]' % k), b'"%s": []' % k)   # constant replacement:
               for k in (b"correct_counts", b"greedy_correct", b"rewards")]      # no per-match Python


def _drop_lists(raw: bytes, which: slice = slice(None)) -> bytes:
    for pattern, empty in _DROP_LISTS[which]:
        raw = pattern.sub(empty, raw)
    return raw


SUMMARY_LISTS, METRICS_LISTS = slice(0, 2), slice(2, 3)   # what each file kind carries


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


def metric_column(metric: str, columns) -> str:
    """``pass@1`` -> ``final_pass@1`` (a full column name is accepted as is)."""
    name = metric if metric in columns else f"final_{metric}"
    if name not in columns:
        avail = sorted((c[6:] for c in columns if c.startswith("final_") and _is_metric(c[6:])),
                       key=lambda m: (m.split("@")[0], int(m.split("@")[1]) if "@" in m else 0))
        raise ConfigError(f"metric {metric!r} not found in the runs; available: {', '.join(avail) or 'none'}")
    return name


def _is_metric(name: str) -> bool:
    return bool(re.fullmatch(r"(pass|maj)@\d+|greedy|entropy|format", name))


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


def _parse_jsonl(data: bytes) -> tuple[list, int]:
    """Parse metrics.jsonl bytes -> (objects, number of unparseable lines).

    Fast path: one json.loads over ``[l1,l2,...]``; on any error (e.g. a torn last line of a
    running run) fall back to line by line and count the bad ones.
    """
    data = _drop_lists(data)
    lines = [ln for ln in data.split(b"\n") if ln.strip()]
    if not lines:
        return [], 0
    try:
        objs = json.loads(b"[" + b",".join(lines) + b"]")
        if all(isinstance(o, dict) for o in objs):
            return objs, 0
    except ValueError:
        pass
    objs, bad = [], 0
    for ln in lines:
        try:
            o = json.loads(ln)
        except ValueError:
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
    skip = set(row) | {"base", "final", "phases", "config", "model", "task", "run_id"}
    for key, v in s.items():  # anything else a later version adds (attempts, effective, ...)
        if key not in skip:
            if isinstance(v, dict):
                flatten(v, f"{key}.", row)
            elif not isinstance(v, list):
                row[key] = v
    return row


def _analysis_columns(path: Path, names: set, notes: list) -> dict:
    """Scalars of the optional analysis files beside a run, as ``<analysis>_<key>`` columns."""
    row: dict = {}
    for name in ANALYSES:
        if f"{name}.json" in names:
            try:
                a = json.loads((path / f"{name}.json").read_bytes())
                flatten(a if isinstance(a, dict) else {"value": a}, f"{name}_", row)
            except (ValueError, OSError) as e:
                notes.append(f"run {path.name}: {name}.json unreadable ({type(e).__name__}); ignored")
    return row


def summary_row(run_id: str, raw: bytes | None) -> tuple[dict | None, str | None]:
    """summary.json bytes -> (runs-table row, None) or (None, why it is skipped). Never raises."""
    if raw is None:
        return None, "no summary.json (not started, or not a run directory)"
    try:
        s = json.loads(_drop_lists(raw))
    except ValueError as e:
        return None, f"corrupt summary.json: {str(e).splitlines()[0]}"
    if not isinstance(s, dict):
        return None, f"corrupt summary.json: a JSON {type(s).__name__}, not an object"
    missing = [k for k in REQUIRED if k not in s or s[k] is None]
    if isinstance(s.get("model"), dict) and s["model"].get("name") is None:
        missing.append("model.name")
    if missing:
        return None, f"summary.json lacks {', '.join(missing)}"
    try:
        return _summary_row(run_id, s), None
    except (KeyError, TypeError, AttributeError) as e:
        return None, f"summary.json has an unexpected shape ({type(e).__name__}: {e})"


def read_run(path: Path) -> RunRead:
    """Read one run directory with the pure-Python reader; never raises for bad content."""
    rr = RunRead(path.name)
    names, summ, metr = _read_raw(path)
    if names is None:
        rr.skip = "unreadable run directory"
        return rr
    rr.row, rr.skip = summary_row(path.name, summ)
    if rr.row is not None:
        rr.row.update(_analysis_columns(path, names, rr.notes))
        rr.lines, rr.bad_lines = _parse_jsonl(metr)
        rr.row["n_lines"] = len(rr.lines)
    return rr


# ---------------------------------------------------------------------------------------
# tables
def _to_arrow(columns: dict[str, list]) -> pa.Table:
    """Columns of Python values -> Arrow table; a column of mixed types becomes strings."""
    arrays = {}
    for name, values in columns.items():
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            arrays[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
        if pa.types.is_null(arrays[name].type):
            arrays[name] = arrays[name].cast(pa.float64())
    return pa.table(arrays)


def rows_table(rows: list[dict], run_ids: list[str] | None = None, line_no: list[int] | None = None) -> pa.Table:
    """List of flat dicts (possibly different keys) -> one Arrow table, missing = null.

    Rows are grouped by their key tuple and each group is turned into columns with one
    ``zip(*rows)`` (C speed) instead of per-row appends.
    """
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(tuple(r), []).append(i)
    tables = []
    for keys, idx in groups.items():
        vals = [tuple(rows[i].values()) for i in idx]
        cols = dict(zip(keys, map(list, zip(*vals)))) if keys else {}
        if run_ids is not None:
            cols = {"run_id": [run_ids[i] for i in idx], "line": [line_no[i] for i in idx], **cols}
        tables.append(_to_arrow(cols))
    if not tables:
        return pa.table({})
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # same column, incompatible types: strings
        names = list(dict.fromkeys(n for t in tables for n in t.column_names))
        merged = {n: [] for n in names}
        for t in tables:
            d = t.to_pydict()
            for n in names:
                merged[n].extend(d.get(n, [None] * t.num_rows))
        return _to_arrow(merged)


def _curve_rows(reads: list[RunRead]):
    """Flatten every metrics line; lines without nested values take a fast path."""
    rows, run_ids, line_no = [], [], []
    for rr in reads:
        for j, line in enumerate(rr.lines):
            if any(isinstance(v, (dict, list)) for v in line.values()):
                line = flatten(line)
            rows.append(line)
            run_ids.append(rr.run_id)
            line_no.append(j)
    return rows, run_ids, line_no


# ---------------------------------------------------------------------------------------
# fast path: Arrow's C++ JSON reader over a whole chunk of runs (the Python path above is the
# reference and the fallback: any chunk Arrow cannot read exactly is re-read by read_run)
def _arrow_flat(prefix: str, key: str, arr, out: dict) -> None:
    """Arrow twin of :func:`flatten` for one column (same naming rules)."""
    t = arr.type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            child, sub = pc.struct_field(arr, [i]), t.field(i).name
            if key.endswith("@k"):
                if not (pa.types.is_struct(child.type) or pa.types.is_list(child.type)):
                    out.setdefault(f"{prefix}{key[:-1]}{sub}", child)
            elif key.endswith("@k_ci"):
                _arrow_pair(f"{prefix}{key[:-4]}{sub}", child, out)
            else:
                _arrow_flat(f"{prefix}{key}.", sub, child, out)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        if key.endswith("_ci"):
            _arrow_pair(f"{prefix}{key[:-3]}", arr, out)
    else:
        out.setdefault(prefix + key, arr.cast(pa.float64()) if pa.types.is_null(t) else arr)


def _arrow_struct(prefix: str, arr, out: dict) -> None:
    """Flatten a struct column's fields with ``prefix`` (like ``flatten(d, prefix)``)."""
    for i in range(arr.type.num_fields):
        _arrow_flat(prefix, arr.type.field(i).name, pc.struct_field(arr, [i]), out)


def _arrow_pair(name: str, arr, out: dict) -> None:
    """[lo, hi] list column -> name_lo, name_hi (dropped unless every list has two items)."""
    if not pa.types.is_list(arr.type):
        return
    n = pc.list_value_length(arr)
    if pc.all(pc.equal(n, 2)).as_py() in (True, None) and not pa.types.is_struct(arr.type.value_type):
        if pc.max(n).as_py() is None:
            return
        out.setdefault(f"{name}_lo", pc.list_element(arr, 0))
        out.setdefault(f"{name}_hi", pc.list_element(arr, 1))


_JSON_PARSE = None


def _read_json_lines(buf: bytes) -> pa.Table:
    import io
    import pyarrow.json as pj

    global _JSON_PARSE
    _JSON_PARSE = _JSON_PARSE or pj.ParseOptions(unexpected_field_behavior="infer")
    return pj.read_json(io.BytesIO(buf), read_options=pj.ReadOptions(block_size=1 << 22),
                        parse_options=_JSON_PARSE)


def _arrow_summaries(ids: list[str], raws: list[bytes]) -> pa.Table:
    """Summaries (one JSON object each) -> runs-table rows; raises if any is unusable."""
    # A JSON document has newlines only between tokens (strings escape them): one per line.
    tab = _read_json_lines(_drop_lists(b"\n".join(r.replace(b"\n", b"").replace(b"\r", b"") for r in raws),
                                       SUMMARY_LISTS))
    if tab.num_rows != len(ids):
        raise ValueError("row count mismatch")
    cols = {c: tab.column(c) for c in tab.column_names}
    for k in REQUIRED:
        if k not in cols or cols[k].null_count:
            raise ValueError(f"missing {k}")
    out: dict = {"run_id": pa.array(ids, pa.string()), "status": cols["status"], "error": cols.get("error")}
    model = cols["model"]
    if pa.types.is_struct(model.type):
        names = [model.type.field(i).name for i in range(model.type.num_fields)]
        if "name" not in names or pc.struct_field(model, [names.index("name")]).null_count:
            raise ValueError("missing model.name")
        out["algo"] = cols["algo"]
        task = cols.get("task")
        if task is not None and pa.types.is_struct(task.type):
            raise ValueError("task is a dict")  # rare: the Python path handles it
        out["task"] = task
        out["model"] = pc.struct_field(model, [names.index("name")])
        out["params"] = pc.struct_field(model, [names.index("params")]) if "params" in names else None
    else:
        raise ValueError("model is not a dict")
    for key in ("pop", "sigma", "lr", "seed", "iterations", "tokens_generated", "wall_s", "sweep"):
        out[key] = cols.get(key)
    for key in ("base", "final"):
        if key in cols and pa.types.is_struct(cols[key].type):
            _arrow_struct(f"{key}_", cols[key], out)
    if "phases" in cols and pa.types.is_list(cols["phases"].type):
        ph = cols["phases"]
        if not pa.types.is_struct(ph.type.value_type) and pc.max(pc.list_value_length(ph)).as_py():
            raise ValueError("phases of unexpected shape")
        ph = ph.combine_chunks() if isinstance(ph, pa.ChunkedArray) else ph
        lengths = pc.fill_null(pc.list_value_length(ph), 0)
        for i in range(pc.max(lengths).as_py() or 0):
            has = pc.greater(lengths, i)                   # runs with an i-th phase (sequences)
            el = pc.list_element(ph.filter(has), i)
            names = [el.type.field(j).name for j in range(el.type.num_fields)]
            leaves: dict = {}
            for f in ("algo", "iterations"):
                if f in names:
                    leaves[f"phase{i + 1}_{f}"] = pc.struct_field(el, [names.index(f)])
            if "eval" in names:
                _arrow_struct(f"phase{i + 1}_", pc.struct_field(el, [names.index("eval")]), leaves)
            for name, leaf in leaves.items():           # back to one value per run, null elsewhere
                leaf = leaf.combine_chunks() if isinstance(leaf, pa.ChunkedArray) else leaf
                out[name] = pc.replace_with_mask(pa.nulls(len(ph), leaf.type), has, leaf)
    skip = set(out) | {"base", "final", "phases", "config", "model", "task", "run_id"}
    for key, arr in cols.items():
        if key not in skip:
            _arrow_flat("", key, arr, flat := {})
            for k, v in flat.items():
                out.setdefault(k, v)
    out = {k: v for k, v in out.items() if v is not None}
    return pa.table(out)


def _arrow_curves(ids: list[str], blobs: list[bytes]) -> tuple[pa.Table, list[int], list[int]]:
    """metrics.jsonl contents -> curves table (+ lines per run, torn lines dropped per run)."""
    parts, counts, bad = [], [], []
    for data in blobs:
        nbad = 0
        if data and not data.endswith(b"\n"):                    # a torn last line?
            cut = data.rfind(b"\n") + 1
            try:
                json.loads(data[cut:])
                data += b"\n"
            except ValueError:
                data, nbad = data[:cut], 1
        if data.startswith(b"\n") or b"\n\n" in data or b"\r" in data:   # blank lines: normalise
            data = b"".join(ln + b"\n" for ln in data.split(b"\n") if ln.strip())
        parts.append(data)
        counts.append(data.count(b"\n"))
        bad.append(nbad)
    total = sum(counts)
    if not total:
        return pa.table({}), counts, bad
    tab = _read_json_lines(_drop_lists(b"".join(parts), METRICS_LISTS))
    if tab.num_rows != total:
        raise ValueError("row count mismatch")
    out = {"run_id": pa.array(np.repeat(np.array(ids, dtype=object), counts).tolist(), pa.string()),
           "line": pa.array(np.concatenate([np.arange(c) for c in counts]), pa.int64())}
    for key in tab.column_names:
        _arrow_flat("", key, tab.column(key), out)
    return pa.table(out), counts, bad


def _read_raw(path: Path):
    """(file names, summary bytes, metrics bytes) of one run directory; IO only."""
    try:
        d = str(path)
        names = set(os.listdir(d))
        summ = metr = None
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


_FALLBACKS: list[str] = []   # stages the Arrow path handed to Python (reported in timings)


def _read_chunk(paths: list[Path], raws: list) -> tuple[list[pa.Table], list[pa.Table], list[dict], list[str]]:
    """Runs and curves tables of one chunk of run directories.

    Arrow's reader takes the whole chunk at once; if it cannot (a corrupt or oddly shaped
    summary, a bad metrics line, types that change), that stage is redone per run in Python,
    which finds and skips the bad runs/lines.
    """
    ids = [p.name for p in paths]
    notes: list[str] = []
    skipped = [{"run_id": ids[i], "reason": "unreadable run directory"}
               for i, r in enumerate(raws) if r[0] is None]
    idx = [i for i, r in enumerate(raws) if r[0] is not None]
    runs = None
    try:
        if not all(raws[i][1] for i in idx):
            raise ValueError("missing summaries")
        runs = _arrow_summaries([ids[i] for i in idx], [raws[i][1] for i in idx])
    except (ValueError, KeyError, TypeError, pa.ArrowException):
        _FALLBACKS.append("summaries")
        rows, keep = [], []
        for i in idx:
            row, why = summary_row(ids[i], raws[i][1])
            if row is None:
                skipped.append({"run_id": ids[i], "reason": why})
            else:
                rows.append(row)
                keep.append(i)
        idx = keep
        runs = rows_table(rows) if rows else None
    if runs is None:
        return [], [], skipped, notes
    good = [ids[i] for i in idx]
    try:
        curves, counts, bad = _arrow_curves(good, [raws[i][2] for i in idx])
    except (ValueError, KeyError, TypeError, pa.ArrowException):
        _FALLBACKS.append("curves")
        reads = []
        for i in idx:
            rr = RunRead(ids[i])
            rr.lines, rr.bad_lines = _parse_jsonl(raws[i][2])
            reads.append(rr)
        crows, cids, cline = _curve_rows(reads)
        curves = rows_table(crows, cids, cline)
        counts, bad = [len(r.lines) for r in reads], [r.bad_lines for r in reads]
    notes += [f"run {rid}: {b} unparseable metrics line(s) skipped (torn write?)"
              for rid, b in zip(good, bad) if b]
    if "n_lines" not in runs.column_names:
        runs = runs.append_column("n_lines", pa.array(counts, pa.int64()))
    extra = [{"run_id": ids[i], **_analysis_columns(paths[i], raws[i][0], notes)} for i in idx
             if any(f"{a}.json" in raws[i][0] for a in ANALYSES)]
    if any(len(e) > 1 for e in extra):                    # align analysis columns to the runs
        where = {rid: i for i, rid in enumerate(runs.column("run_id").to_pylist())}
        at = [where[e["run_id"]] for e in extra]
        for name, col in rows_table(extra).to_pydict().items():
            if name != "run_id" and name not in runs.column_names:
                full = [None] * runs.num_rows
                for i, v in zip(at, col):
                    full[i] = v
                runs = runs.append_column(name, _to_arrow({name: full}).column(0))
    return [runs], [curves] if curves.num_rows else [], skipped, notes


def _read_chunk_python(paths: list[Path]):
    """The reference reader: every run through :func:`read_run` (pure Python)."""
    reads = [read_run(p) for p in paths]
    good = [r for r in reads if r.row is not None]
    skipped = [{"run_id": r.run_id, "reason": r.skip} for r in reads if r.row is None]
    notes = [n for r in reads for n in r.notes]
    notes += [f"run {r.run_id}: {r.bad_lines} unparseable metrics line(s) skipped (torn write?)"
              for r in good if r.bad_lines]
    crows, cids, cline = _curve_rows(good)
    return ([rows_table([r.row for r in good])] if good else [],
            [rows_table(crows, cids, cline)] if crows else [], skipped, notes)


def _map_threads(fn, items: list, threads: int) -> list:
    """[fn(x) for x in items] on ``threads`` threads, one contiguous slice each (IO-bound fn)."""
    if threads <= 1 or len(items) < 64:
        return [fn(x) for x in items]
    step = -(-len(items) // threads)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        parts = pool.map(lambda sl: [fn(x) for x in sl], [items[i:i + step] for i in range(0, len(items), step)])
    return [r for part in parts for r in part]


def _concat(tables: list[pa.Table]) -> pa.Table:
    if not tables:
        return pa.table({})
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return rows_table([r for t in tables for r in t.to_pylist()])


# ---------------------------------------------------------------------------------------
# the whole aggregate
@dataclass
class Aggregate:
    sweep_dir: Path
    runs: pd.DataFrame                    # one row per readable run
    curves: pd.DataFrame                  # every metrics line
    skipped: list[dict]                   # [{"run_id", "reason"}]
    notes: list[str]                      # what is missing / odd, for the page and the log
    metric: str | None = None             # the runs-table column the fit and page use
    trend: dict | None = None
    timings: dict = field(default_factory=dict)
    tables: tuple | None = None           # (runs, curves) as Arrow tables, written as they are
    claims: dict | None = None            # esopt.study.claims result (claims.json), when computed


def find_runs_dir(sweep_dir: Path) -> Path:
    """``<sweep>/runs`` (or the directory itself if it directly holds run directories)."""
    if not sweep_dir.exists():
        raise ConfigError(f"no such directory: {sweep_dir}")
    if not sweep_dir.is_dir():
        raise ConfigError(f"not a directory: {sweep_dir}")
    runs = sweep_dir / "runs"
    if runs.is_dir():
        return runs
    if any((p / "summary.json").exists() for p in sweep_dir.iterdir() if p.is_dir()):
        return sweep_dir
    raise ConfigError(f"no runs in {sweep_dir} (expected {runs}/<run_id>/summary.json)")


def load(sweep_dir: str | os.PathLike, *, threads: int = 4, chunk: int = 2000, fast: bool = True) -> Aggregate:
    """Read every run directory of a sweep into tables (no fit, no page).

    ``fast=False`` forces the pure-Python reader (the reference the Arrow path must match).
    """
    t0 = time.perf_counter()
    sweep_dir = Path(sweep_dir)
    runs_dir = find_runs_dir(sweep_dir)
    with os.scandir(runs_dir) as it:
        paths = [runs_dir / n for n in sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))]
    if not paths:
        raise ConfigError(f"no runs in {runs_dir} (it is empty)")
    run_tabs, curve_tabs, skipped, notes = [], [], [], []
    t_io = 0.0
    _FALLBACKS.clear()
    for c0 in range(0, len(paths), chunk):
        part = paths[c0:c0 + chunk]
        t = time.perf_counter()
        # threads overlap the file reads (the GIL is released during IO)
        raws = _map_threads(_read_raw, part, threads)
        t_io += time.perf_counter() - t
        r, c, s, n = _read_chunk(part, raws) if fast else _read_chunk_python(part)
        run_tabs += r
        curve_tabs += c
        skipped += s
        notes += n
    t_read = time.perf_counter()
    if not run_tabs:
        raise ConfigError(f"no readable runs in {runs_dir}: {len(skipped)} skipped "
                          f"(first: {skipped[0]['run_id']}: {skipped[0]['reason']})")
    runs = _concat(run_tabs)
    for i, name in enumerate(runs.column_names):        # all-null text columns stay text
        if name in ("status", "error", "algo", "task", "model", "sweep") and pa.types.is_null(runs.schema.field(i).type):
            runs = runs.set_column(i, name, runs.column(i).cast(pa.string()))
        elif name in ("status", "error", "algo", "task", "model", "sweep") and pa.types.is_floating(runs.schema.field(i).type) and runs.column(i).null_count == runs.num_rows:
            runs = runs.set_column(i, name, pa.nulls(runs.num_rows, pa.string()))
    for i, name in enumerate(runs.column_names):        # all-null numbers (pop of base runs) stay numbers
        if name in NUMERIC_ID_COLUMNS and pa.types.is_null(runs.schema.field(i).type):
            runs = runs.set_column(i, name, runs.column(i).cast(pa.float64()))
    for name in ID_COLUMNS:                               # minimal summaries still get every id column
        if name not in runs.column_names:
            runs = runs.append_column(name, pa.nulls(runs.num_rows, pa.string() if name in
                                      ("error", "task", "sweep") else pa.float64()))
    lead = [c for c in ID_COLUMNS if c in runs.column_names]
    runs_t = runs.sort_by("run_id").select(lead + [c for c in runs.column_names if c not in lead])
    curves_t = _concat(curve_tabs)
    if curves_t.num_rows:
        curves_t = curves_t.sort_by([("run_id", "ascending"), ("line", "ascending")])
    runs, curves = runs_t.to_pandas(), curves_t.to_pandas()
    notes += _metric_set_notes(runs)
    agg = Aggregate(sweep_dir, runs, curves, skipped, notes, tables=(runs_t, curves_t))
    agg.timings = {"io_s": t_io, "parse_s": t_read - t0 - t_io, "tables_s": time.perf_counter() - t_read,
                   "runs": len(paths), "python_fallbacks": list(_FALLBACKS) if fast else ["all"]}
    return agg


def _metric_set_notes(runs: pd.DataFrame) -> list[str]:
    """Say when runs report different metric sets (columns present for only some runs)."""
    has_final = runs.filter(like="final_").notna().any(axis=1) if len(runs) else pd.Series(dtype=bool)
    cols = [c for c in runs.columns if c.startswith("final_") and _is_metric(c[6:])]
    partial = [c for c in cols if 0 < runs.loc[has_final, c].notna().sum() < has_final.sum()]
    if not partial:
        return []
    show = ", ".join(f"{c[6:]} ({int(runs[c].notna().sum())}/{int(has_final.sum())})" for c in partial[:6])
    return [f"runs report different metric sets; missing values are NaN: {show}"
            + (" ..." if len(partial) > 6 else "")]


def write_tables(agg: Aggregate, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"runs.parquet": out / "runs.parquet", "runs.csv": out / "runs.csv",
             "curves.parquet": out / "curves.parquet"}
    import pyarrow.csv as pcsv

    runs, curves = agg.tables or (pa.Table.from_pandas(agg.runs, preserve_index=False),
                                  pa.Table.from_pandas(agg.curves, preserve_index=False))
    for name, write in (("runs.parquet", lambda p: pq.write_table(runs, p)),
                        ("curves.parquet", lambda p: pq.write_table(curves, p)),
                        ("runs.csv", lambda p: pcsv.write_csv(runs, p))):
        with atomic_path(paths[name]) as tmp:
            write(str(tmp))
    return paths
