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

Reading is :func:`esopt.study.run_read.read_runs` (Arrow over whole chunks of runs, Python's
json only for the files Arrow cannot read exactly): 10,000 runs in a few CPU seconds.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from esopt.core.errors import ConfigError
from esopt.core.store import atomic_path
from esopt.study import run_read
from esopt.study.run_read import (ID_COLUMNS, NUMERIC_ID_COLUMNS, OTHER_KEYS, REQUIRED, concat,  # noqa: F401
                                  flatten, rows_table, sparse_table, summary_row)

__all__ = ["ID_COLUMNS", "NUMERIC_ID_COLUMNS", "OTHER_KEYS", "REQUIRED", "Aggregate", "find_runs_dir",
           "flatten", "load", "metric_column", "rows_table", "sparse_table", "summary_row", "write_tables"]
NOTED_COLUMNS = 6        # metric columns named in the "different metric sets" note


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


def load(sweep_dir: str | os.PathLike, *, threads: int = run_read.READ_THREADS,
         chunk: int = run_read.RUNS_PER_CHUNK, per_file: bool = False) -> Aggregate:
    """Read every run directory of a sweep into tables (no fit, no page).

    ``per_file=True`` reads every file with the per-file reader, which otherwise reads only the
    files Arrow cannot (the tests' check that both give the same rows). Symlinks out of the
    sweep directory (a run directory, a summary.json) are not followed: those runs are skipped
    and listed.
    """
    t0 = time.perf_counter()
    sweep_dir = Path(sweep_dir)
    runs_dir = find_runs_dir(sweep_dir)
    root = os.path.realpath(sweep_dir)
    with os.scandir(runs_dir) as it:
        paths = [runs_dir / n for n in sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))]
    if not paths:
        raise ConfigError(f"no runs in {runs_dir} (it is empty)")
    read = run_read.read_runs(paths, root, threads=threads, chunk=chunk, per_file=per_file)
    run_tabs, curve_tabs, skipped, notes = read.runs, read.curves, read.skipped, read.notes
    t_io, t_read = read.io_s, time.perf_counter()
    if not run_tabs:
        raise ConfigError(f"no readable runs in {runs_dir}: {len(skipped)} skipped "
                          f"(first: {skipped[0]['run_id']}: {skipped[0]['reason']})")
    runs = concat(run_tabs)
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
    curves_t = concat(curve_tabs)
    if curves_t.num_rows:
        curves_t = curves_t.sort_by([("run_id", "ascending"), ("line", "ascending")])
    runs, curves = runs_t.to_pandas(), curves_t.to_pandas()
    notes += _metric_set_notes(runs)
    for name, t in (("runs", runs_t), ("curves", curves_t)):
        if OTHER_KEYS in t.column_names:
            notes.append(f"the {name} table carries more than {run_read.MAX_COLUMNS} distinct keys: the rarest are "
                         f"kept per row as JSON in its {OTHER_KEYS} column")
    agg = Aggregate(sweep_dir, runs, curves, skipped, notes, tables=(runs_t, curves_t))
    agg.timings = {"io_s": t_io, "parse_s": t_read - t0 - t_io, "tables_s": time.perf_counter() - t_read,
                   "runs": len(paths), "read_per_file": read.per_file}
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
