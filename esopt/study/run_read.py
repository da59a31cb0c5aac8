"""The one reader of the results format: run directories -> the runs table (one row per run)
and the curves table (every metrics line), as Arrow tables (``esopt.study.tables.load`` makes a
sweep's :class:`~esopt.study.tables.Aggregate` of them).

A run directory is ``<sweep>/runs/<run_id>/{summary.json, metrics.jsonl}`` plus the optional
analysis files (``sparsity.json``, ``drift.json``, ``forgetting.json``, ``connectivity.json``). A run
that cannot be read (no/corrupt summary.json, missing keys) is skipped with a reason, never fatal.

How it reads (:func:`read_runs`). Threads read the files; per chunk of runs, all summaries and
all metrics lines go through Arrow's C++ JSON reader at once, after the per-problem / per-member
lists are cut from the raw bytes with a regex, and nested columns are flattened column-wise
(:func:`arrow_summaries`, :func:`arrow_curves`). Where Arrow cannot read a group exactly (a
corrupt or oddly shaped summary, a copied run folder, a bad metrics line, a type that changes),
the group is halved until the file it trips on stands alone, and only that file is read per file
with Python's json (:func:`summary_row`, :func:`parse_jsonl`), which also says why a run is
skipped. The per-file reader gives the rows Arrow gives (``per_file=True`` reads every file
with it: the tests compare the two). Two cases go to the per-file reader before Arrow is tried:
a file nested deeper than Arrow's reader can take (:data:`MAX_BRACKETS`; that file only), and a
chunk whose runs carry more than :data:`MAX_COLUMNS` distinct keys (the whole chunk, built into
the :func:`sparse_table`).
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from esopt.core.config import ANALYSES
from esopt.core.store import dumps

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
# (SIGSEGV). Files with a line with more opening brackets than this go to the per-file reader, which
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


READ_THREADS = 4         # threads reading run files (IO-bound: they overlap while the GIL is released)
RUNS_PER_CHUNK = 2000    # run directories parsed together by one Arrow pass
THREADED_MIN = 64        # fewer files than this are read on the calling thread
ARROW_BLOCK = 1 << 22    # bytes per block of Arrow's JSON reader (a chunk's summaries or lines)
MAX_COLUMNS = 500        # columns of a table; keys beyond (the rarest) go to OTHER_KEYS as JSON
OTHER_KEYS = "other_keys"
_KEY = re.compile(rb'[{,]\s*"([^"\\]*(?:\\.[^"\\]*)*)"\s*:')   # a JSON object key in raw bytes
ARROW_ERRORS = (ValueError, KeyError, TypeError, pa.ArrowException)   # Arrow cannot read a group exactly


# ---------------------------------------------------------------------------------------
# the files
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


def map_threads(fn, items: list, threads: int) -> list:
    """[fn(x) for x in items] on ``threads`` threads, one contiguous slice each (IO-bound fn)."""
    if threads <= 1 or len(items) < THREADED_MIN:
        return [fn(x) for x in items]
    step = -(-len(items) // threads)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        parts = pool.map(lambda sl: [fn(x) for x in sl], [items[i:i + step] for i in range(0, len(items), step)])
    return [r for part in parts for r in part]


# ---------------------------------------------------------------------------------------
# the per-file reader (Python's json): the reference semantics, and where Arrow cannot read a file
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


# ---------------------------------------------------------------------------------------
# Arrow: a whole group of runs at once, flattened column-wise with flatten's naming rules
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
    import pyarrow.json as pj

    global _JSON_PARSE
    _JSON_PARSE = _JSON_PARSE or pj.ParseOptions(unexpected_field_behavior="infer")
    return pj.read_json(io.BytesIO(buf), read_options=pj.ReadOptions(block_size=ARROW_BLOCK),
                        parse_options=_JSON_PARSE)


def summaries_blob(raws: list[bytes]) -> bytes:
    """Summaries as one JSON object a line, their per-problem lists cut: what Arrow reads. (A
    JSON document has newlines only between tokens, strings escape them: one per line.)"""
    return drop_lists(b"\n".join(r.translate(None, b"\r\n") for r in raws), SUMMARY_LISTS)


def arrow_summaries(ids: list[str], blob: bytes) -> pa.Table:
    """The :func:`summaries_blob` of runs ``ids`` -> runs-table rows; raises if any is unusable."""
    tab = _read_json_lines(blob)
    if tab.num_rows != len(ids):
        raise ValueError("row count mismatch")
    cols = {c: tab.column(c) for c in tab.column_names}
    named = cols.get("run_id")                           # a copied folder: the Python path names it
    if named is not None and not pa.types.is_null(named.type):
        if not pa.types.is_string(named.type) or not pc.all(
                pc.or_kleene(pc.is_null(named), pc.equal(named, pa.array(ids, pa.string())))).as_py():
            raise ValueError("a summary names another run")
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
    for k in NUMERIC_ID_COLUMNS:  # a string (or bool) in one summary: the Python path skips it
        if k in out and not (pa.types.is_integer(out[k].type) or pa.types.is_floating(out[k].type)
                             or pa.types.is_null(out[k].type)):
            raise ValueError(f"{k} is not numeric")
    return pa.table(out)


def arrow_curves(ids: list[str], blobs: list[bytes]) -> tuple[pa.Table, list[int], list[int]]:
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
    tab = _read_json_lines(drop_lists(b"".join(parts), METRICS_LISTS))
    if tab.num_rows != total:
        raise ValueError("row count mismatch")
    out = {"run_id": pa.array(np.repeat(np.array(ids, dtype=object), counts).tolist(), pa.string()),
           "line": pa.array(np.concatenate([np.arange(c) for c in counts]), pa.int64())}
    for key in tab.column_names:
        _arrow_flat("", key, tab.column(key), out)
    return pa.table(out), counts, bad


# ---------------------------------------------------------------------------------------
# tables from the per-file reader's rows
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


def distinct_keys(blob: bytes) -> int:
    """About how many distinct keys (any depth) the JSON in ``blob`` has: a cheap scan that
    tells a sweep whose runs each carry keys of their own (one column each) before any table
    is built."""
    return len(set(_KEY.findall(blob)))


def sparse_table(rows: list[dict], lead: dict[str, list] | None = None, cap: int | None = None) -> pa.Table:
    """List of flat dicts -> Arrow table with at most ``cap`` columns besides ``lead``: the
    keys most rows carry get a column each (in first-seen order); the rest, per row, one JSON
    object in :data:`OTHER_KEYS`. Built column by column from each key's (row, value) pairs,
    so many distinct keys cost memory in proportion to the values, not rows x keys."""
    n = len(rows)
    where: dict[str, tuple[list[int], list]] = {}
    for i, r in enumerate(rows):
        for k, v in r.items():
            e = where.get(k)
            if e is None:
                e = where[k] = ([], [])
            e[0].append(i)
            e[1].append(v)
    keep = set(sorted(where, key=lambda k: -len(where[k][0]))[:MAX_COLUMNS if cap is None else cap])
    cols = dict(lead or {})
    other: dict[int, dict] = {}
    for k, (idx, vals) in where.items():
        if k not in keep:
            for i, v in zip(idx, vals):
                other.setdefault(i, {})[k] = v
            continue
        arr = _to_arrow({k: vals}).column(0).combine_chunks()
        if len(idx) < n:
            mask = np.zeros(n, dtype=bool)
            mask[idx] = True
            arr = pc.replace_with_mask(pa.nulls(n, arr.type), pa.array(mask), arr)
        cols[k] = arr
    if other:
        cols[OTHER_KEYS] = pa.array([dumps(other[i], sort_keys=True) if i in other else None for i in range(n)],
                                    pa.string())
    return pa.table(cols)


def _rows_table(rows: list[dict], run_ids=None, line_no=None) -> pa.Table:
    """:func:`rows_table`, or :func:`sparse_table` when the rows carry more than MAX_COLUMNS keys."""
    if len({k for r in rows for k in r}) <= MAX_COLUMNS:
        return rows_table(rows, run_ids, line_no)
    return sparse_table(rows, None if run_ids is None else {"run_id": run_ids, "line": line_no})


def _ends(blob: bytes) -> bytes:
    """The first and the last full line of a metrics file: the sample whose keys tell a wide
    sweep (each run's lines share their keys) without scanning every line."""
    first = blob[:blob.find(b"\n") + 1]
    last = blob[blob.rfind(b"\n", 0, max(len(blob) - 1, 0)) + 1:]
    return first + last


def _curve_rows(reads: list[tuple[str, list]]):
    """Flatten every metrics line of ``(run_id, lines)`` pairs; lines without nested values
    take a fast path."""
    rows, run_ids, line_no = [], [], []
    for rid, lines in reads:
        for j, line in enumerate(lines):
            if any(isinstance(v, (dict, list)) for v in line.values()):
                line = flatten(line)
            rows.append(line)
            run_ids.append(rid)
            line_no.append(j)
    return rows, run_ids, line_no


def _untyped_nulls(t: pa.Table) -> pa.Table:
    """``t`` with its all-null columns of null type: a column no row of a table fills says nothing
    about its type (the per-file reader's rows make it float64), the other tables' type is kept."""
    for i, col in enumerate(t.columns):
        if t.num_rows and col.null_count == t.num_rows and not pa.types.is_null(col.type):
            t = t.set_column(i, t.field(i).name, pa.nulls(t.num_rows))
    return t


def concat(tables: list[pa.Table]) -> pa.Table:
    """Tables -> one, a column missing from a table null there (a column of incompatible types:
    strings, as :func:`rows_table` makes them)."""
    if not tables:
        return pa.table({})
    if len(tables) == 1:
        return tables[0]
    tables = [_untyped_nulls(t) for t in tables]
    try:
        out = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return rows_table([r for t in tables for r in t.to_pylist()])
    for i, f in enumerate(out.schema):
        if pa.types.is_null(f.type):                      # null in every table: as _to_arrow makes it
            out = out.set_column(i, f.name, out.column(i).cast(pa.float64()))
    return out


# ---------------------------------------------------------------------------------------
# reading run directories
@dataclass
class RunsRead:
    """What :func:`read_runs` read: the runs and curves tables per chunk, the runs it skipped
    (``{"run_id", "reason"}``), the notes, and how many runs each stage read per file."""
    runs: list[pa.Table] = field(default_factory=list)
    curves: list[pa.Table] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    per_file: dict = field(default_factory=lambda: {"summaries": 0, "curves": 0})
    io_s: float = 0.0


def arrow_groups(items: list[int], parse) -> tuple[list, list[int]]:
    """``parse`` (Arrow) over ``items`` at once; where it fails, over each half, down to single
    items: ``([(group, parse(group)), ...], [items Arrow cannot read alone])``."""
    if not items:
        return [], []
    try:
        return [(items, parse(items))], []
    except ARROW_ERRORS:
        if len(items) == 1:
            return [], items
    mid = len(items) // 2
    read, bad = arrow_groups(items[:mid], parse)
    read2, bad2 = arrow_groups(items[mid:], parse)
    return read + read2, bad + bad2


def _summaries(ids: list[str], summ: list, idx: list[int], per_file: bool, out: RunsRead):
    """The runs table of the readable runs among ``idx`` and their indices (Arrow's first)."""
    alone = [i for i in idx if per_file or not summ[i] or bracket_heavy(summ[i])]
    rest = [i for i in idx if i not in set(alone)]
    blob = summaries_blob([summ[i] for i in rest]) if rest else b""
    if distinct_keys(blob) > MAX_COLUMNS:
        alone, rest = idx, []                              # one column per key: the sparse table
    read, bad = arrow_groups(rest, lambda g: arrow_summaries(   # the whole chunk's blob is made once
        [ids[i] for i in g], blob if g is rest else summaries_blob([summ[i] for i in g])))
    tabs, good = [t for _, t in read], [i for g, _ in read for i in g]
    rows = []
    for i in sorted(alone + bad):
        row, why = summary_row(ids[i], summ[i])
        if row is None:
            out.skipped.append({"run_id": ids[i], "reason": why})
        else:
            rows.append(row)
            good.append(i)
    out.per_file["summaries"] += len(alone) + len(bad)
    if rows:
        tabs.append(_rows_table(rows))
    return (concat(tabs) if tabs else None), good


def _curves(ids: list[str], metr: list, idx: list[int], per_file: bool, out: RunsRead):
    """The curves table of runs ``idx``, with the lines each has and the unparseable lines each had."""
    alone = [i for i in idx if per_file or bracket_heavy(metr[i])]
    rest = [i for i in idx if i not in set(alone)]
    if rest and distinct_keys(b"".join(_ends(metr[i]) for i in rest)) > MAX_COLUMNS:
        alone, rest = idx, []
    read, bad = arrow_groups(rest, lambda g: arrow_curves([ids[i] for i in g], [metr[i] for i in g]))
    tabs, counts, torn = [], {}, {}
    for g, (tab, n, b) in read:
        if tab.num_rows:
            tabs.append(tab)
        counts.update(zip(g, n))
        torn.update(zip(g, b))
    reads = []
    for i in sorted(alone + bad):
        lines, torn[i] = parse_jsonl(metr[i])
        counts[i] = len(lines)
        reads.append((ids[i], lines))
    out.per_file["curves"] += len(alone) + len(bad)
    crows, cids, cline = _curve_rows(reads)
    if crows:
        tabs.append(_rows_table(crows, cids, cline))
    return tabs, counts, torn


def read_chunk(paths: list[Path], raws: list, root: str | None, out: RunsRead, per_file: bool = False) -> None:
    """Read one chunk of run directories (``raws``: their :func:`read_raw`) into ``out``."""
    ids = [p.name for p in paths]
    out.skipped += [{"run_id": ids[i], "reason": r[1] if isinstance(r[1], str) else "unreadable run directory"}
                    for i, r in enumerate(raws) if r[0] is None]
    idx = [i for i, r in enumerate(raws) if r[0] is not None]
    runs, good = _summaries(ids, [r[1] for r in raws], idx, per_file, out)
    if runs is None:
        return
    good.sort()
    curves, counts, torn = _curves(ids, [r[2] for r in raws], good, per_file, out)
    out.notes += [f"run {ids[i]}: {torn[i]} unparseable metrics line(s) skipped (torn write?)"
                  for i in good if torn[i]]
    status = dict(zip(runs.column("run_id").to_pylist(), runs.column("status").to_pylist()))
    out.notes += [no_metrics_note(ids[i]) for i in good
                  if "metrics.jsonl" not in raws[i][0] and status.get(ids[i]) != "running"]
    where = {rid: j for j, rid in enumerate(runs.column("run_id").to_pylist())}
    if "n_lines" not in runs.column_names:
        n_lines = [0] * runs.num_rows
        for i in good:
            n_lines[where[ids[i]]] = counts[i]
        runs = runs.append_column("n_lines", pa.array(n_lines, pa.int64()))
    extra = [{"run_id": ids[i], **analysis_columns(paths[i], raws[i][0], out.notes, root)} for i in good
             if any(f"{a}.json" in raws[i][0] for a in ANALYSES)]
    if any(len(e) > 1 for e in extra):                    # align analysis columns to the runs
        at = [where[e["run_id"]] for e in extra]
        for name, col in rows_table(extra).to_pydict().items():
            if name != "run_id" and name not in runs.column_names:
                full = [None] * runs.num_rows
                for i, v in zip(at, col):
                    full[i] = v
                runs = runs.append_column(name, _to_arrow({name: full}).column(0))
    out.runs.append(runs)
    out.curves += curves


def read_runs(paths: list[Path], root: str | None = None, *, threads: int = READ_THREADS,
              chunk: int = RUNS_PER_CHUNK, per_file: bool = False) -> RunsRead:
    """Read run directories ``paths`` (of the sweep directory ``root``, a real path: symlinks out
    of it are not followed) chunk by chunk. ``per_file=True`` reads every file with the per-file
    reader (the tests' check that it gives the rows Arrow gives)."""
    out = RunsRead()
    for c0 in range(0, len(paths), chunk):
        part = paths[c0:c0 + chunk]
        t = time.perf_counter()
        raws = map_threads(lambda p: read_raw(p, root), part, threads)   # threads overlap the reads
        out.io_s += time.perf_counter() - t
        read_chunk(part, raws, root, out, per_file)
    return out
