"""A sweep's tables: one row per run, every metrics line (``load`` -> ``Aggregate``).

Reads only run directories (``<sweep>/runs/<run_id>/{summary.json, metrics.jsonl}`` plus the
optional analysis files ``sparsity.json``, ``drift.json``, ``forgetting.json``, ``connectivity.json``;
drift's ``update_top_share`` and ``update_l2`` also as plain columns, for claim 9);
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

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from esopt.core.config import ANALYSES
from esopt.core.errors import ConfigError
from esopt.core.store import atomic_path, dumps
from esopt.study.arrow_read import arrow_curves, arrow_summaries
from esopt.study.run_read import (ID_COLUMNS, NUMERIC_ID_COLUMNS, REQUIRED, RunRead, analysis_columns,
                                  bracket_heavy, flatten, no_metrics_note, parse_jsonl, read_raw, read_run,
                                  summary_row)

__all__ = ["ID_COLUMNS", "MAX_COLUMNS", "NUMERIC_ID_COLUMNS", "OTHER_KEYS", "REQUIRED", "Aggregate", "RunRead", "find_runs_dir", "flatten",
           "load", "metric_column", "read_run", "rows_table", "sparse_table", "summary_row", "write_tables"]
READ_THREADS = 4         # threads reading run files (IO-bound: they overlap while the GIL is released)
RUNS_PER_CHUNK = 2000    # run directories parsed together by one Arrow pass
THREADED_MIN = 64        # fewer files than this are read on the calling thread
NOTED_COLUMNS = 6        # metric columns named in the "different metric sets" note
MAX_COLUMNS = 500        # columns of a table; keys beyond (the rarest) go to OTHER_KEYS as JSON
OTHER_KEYS = "other_keys"
_KEY = re.compile(rb'[{,]\s*"((?:[^"\\]|\\.)*)"\s*:')   # a JSON object key in raw bytes


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


_FALLBACKS: list[str] = []   # stages the Arrow path handed to Python (reported in timings)


def _read_chunk(paths: list[Path], raws: list, root: str | None = None
                ) -> tuple[list[pa.Table], list[pa.Table], list[dict], list[str]]:
    """Runs and curves tables of one chunk of run directories.

    Arrow's reader takes the whole chunk at once; if it cannot (a corrupt or oddly shaped
    summary, a bad metrics line, types that change), that stage is redone per run in Python,
    which finds and skips the bad runs/lines.
    """
    ids = [p.name for p in paths]
    notes: list[str] = []
    skipped = [{"run_id": ids[i], "reason": r[1] if isinstance(r[1], str) else "unreadable run directory"}
               for i, r in enumerate(raws) if r[0] is None]
    idx = [i for i, r in enumerate(raws) if r[0] is not None]
    runs = None
    try:
        if not all(raws[i][1] for i in idx):
            raise ValueError("missing summaries")
        if distinct_keys(b"".join(raws[i][1] for i in idx)) > MAX_COLUMNS:
            raise ValueError("too many distinct keys for one column each")
        if any(bracket_heavy(raws[i][1]) for i in idx):
            raise ValueError("a summary nested too deep for Arrow's reader")
        runs = arrow_summaries([ids[i] for i in idx], [raws[i][1] for i in idx])
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
        runs = _rows_table(rows) if rows else None
    if runs is None:
        return [], [], skipped, notes
    good = [ids[i] for i in idx]
    try:
        if distinct_keys(b"".join(_ends(raws[i][2]) for i in idx)) > MAX_COLUMNS:
            raise ValueError("too many distinct keys for one column each")
        if any(bracket_heavy(raws[i][2]) for i in idx):
            raise ValueError("a metrics line nested too deep for Arrow's reader")
        curves, counts, bad = arrow_curves(good, [raws[i][2] for i in idx])
    except (ValueError, KeyError, TypeError, pa.ArrowException):
        _FALLBACKS.append("curves")
        reads = []
        for i in idx:
            rr = RunRead(ids[i])
            rr.lines, rr.bad_lines = parse_jsonl(raws[i][2])
            reads.append(rr)
        crows, cids, cline = _curve_rows(reads)
        curves = _rows_table(crows, cids, cline)
        counts, bad = [len(r.lines) for r in reads], [r.bad_lines for r in reads]
    notes += [f"run {rid}: {b} unparseable metrics line(s) skipped (torn write?)"
              for rid, b in zip(good, bad) if b]
    status = dict(zip(runs.column("run_id").to_pylist(), runs.column("status").to_pylist()))
    notes += [no_metrics_note(ids[i]) for i in idx
              if "metrics.jsonl" not in raws[i][0] and status.get(ids[i]) != "running"]
    if "n_lines" not in runs.column_names:
        runs = runs.append_column("n_lines", pa.array(counts, pa.int64()))
    extra = [{"run_id": ids[i], **analysis_columns(paths[i], raws[i][0], notes, root)} for i in idx
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


def _read_chunk_python(paths: list[Path], root: str | None = None):
    """The reference reader: every run through :func:`read_run` (pure Python)."""
    reads = [read_run(p, root) for p in paths]
    good = [r for r in reads if r.row is not None]
    skipped = [{"run_id": r.run_id, "reason": r.skip} for r in reads if r.row is None]
    notes = [n for r in reads for n in r.notes]
    notes += [f"run {r.run_id}: {r.bad_lines} unparseable metrics line(s) skipped (torn write?)"
              for r in good if r.bad_lines]
    crows, cids, cline = _curve_rows(good)
    return ([_rows_table([r.row for r in good])] if good else [],
            [_rows_table(crows, cids, cline)] if crows else [], skipped, notes)


def _map_threads(fn, items: list, threads: int) -> list:
    """[fn(x) for x in items] on ``threads`` threads, one contiguous slice each (IO-bound fn)."""
    if threads <= 1 or len(items) < THREADED_MIN:
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


def find_runs_dir(sweep_dir: str | os.PathLike) -> Path:
    """``<sweep>/runs`` (or the directory itself if it directly holds run directories)."""
    sweep_dir = Path(sweep_dir)
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


def load(sweep_dir: str | os.PathLike, *, threads: int = READ_THREADS, chunk: int = RUNS_PER_CHUNK, fast: bool = True) -> Aggregate:
    """Read every run directory of a sweep into tables (no fit, no page).

    ``fast=False`` forces the pure-Python reader (the reference the Arrow path must match).
    Symlinks out of the sweep directory (a run directory, a summary.json) are not followed:
    those runs are skipped and listed.
    """
    t0 = time.perf_counter()
    sweep_dir = Path(sweep_dir)
    runs_dir = find_runs_dir(sweep_dir)
    root = os.path.realpath(sweep_dir)
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
        raws = _map_threads(lambda p: read_raw(p, root), part, threads)
        t_io += time.perf_counter() - t
        r, c, s, n = _read_chunk(part, raws, root) if fast else _read_chunk_python(part, root)
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
    for name, t in (("runs", runs_t), ("curves", curves_t)):
        if OTHER_KEYS in t.column_names:
            notes.append(f"the {name} table carries more than {MAX_COLUMNS} distinct keys: the rarest are "
                         f"kept per row as JSON in its {OTHER_KEYS} column")
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
    show = ", ".join(f"{c[6:]} ({int(runs[c].notna().sum())}/{int(has_final.sum())})" for c in partial[:NOTED_COLUMNS])
    return [f"runs report different metric sets; missing values are NaN: {show}"
            + (" ..." if len(partial) > NOTED_COLUMNS else "")]


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
