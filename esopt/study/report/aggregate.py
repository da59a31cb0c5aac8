"""Aggregate a sweep: read its runs (``esopt.study.tables``), fit the population-vs-size trend
(``fit``), decide the study's claims (``claims``) and build the page (``report``), then write
every output into the sweep directory.

    agg = aggregate("results/<sweep>")      # python -m esopt.aggregate results/<sweep>

Outputs: runs.parquet, runs.csv, curves.parquet, trend.json, claims.json (claims sweeps),
aggregate.json (what was read: counts, skipped runs, notes, timings), report.html. They are
one set: all are written into a temporary directory beside them first and renamed into place
only once every one is complete, so a full disk (or any error) midway leaves the previous set
as it was, never new tables beside an old page.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import numpy as np

from esopt.core.errors import ConfigError
from esopt.core.store import atomic_write_json, atomic_write_text
from esopt.study import claims as claims_mod
from esopt.study import fit
from esopt.study.report import page as report
from esopt.study.tables import Aggregate, load, metric_column, write_tables


def aggregate(sweep_dir: str | os.PathLike, *, metric: str = "pass@1", tolerance: float = 0.01,
              bootstrap: int = 1000, seed: int = 0, algo: str = "es", out: str | os.PathLike | None = None,
              html: bool = True, claims: bool | None = None) -> Aggregate:
    """Read, fit, write every output. The Python entry (the sweep calls this at its end)."""
    if tolerance < 0:
        raise ConfigError(f"--tolerance must be >= 0, got {tolerance}")
    if bootstrap < 0:
        raise ConfigError(f"--bootstrap must be >= 0, got {bootstrap}")
    agg = load(sweep_dir)
    try:
        agg.metric = metric_column(metric, agg.runs.columns)
    except ConfigError:
        if any(c.startswith("final_") for c in agg.runs.columns):
            raise                                          # a typo: other metrics exist
        agg.metric = f"final_{metric}"                     # nothing finished yet: report progress
        agg.runs[agg.metric] = np.nan
        agg.notes.append(f"no run has a final evaluation yet: {agg.metric} is empty")
    if claims is None:
        claims = claims_mod.wanted(agg)
    if claims:  # read back before any output is written: a corrupt one is one ConfigError line
        claims_mod.stored.read(Path(agg.sweep_dir) / "claims.json")
    out = Path(out) if out is not None else agg.sweep_dir
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_stages(out)
    stage = Path(tempfile.mkdtemp(prefix=f"{STAGE}{socket.gethostname()}-{os.getpid()}-", dir=out))
    try:
        names = _write_outputs(agg, stage, algo=algo, tolerance=tolerance, bootstrap=bootstrap, seed=seed,
                               html=html, claims=claims, final=out)
        commit(stage, out, names)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return agg


STAGE = ".aggregate-"        # <out>/.aggregate-<host>-<pid>-<random>/: one aggregation's outputs, staged
STALE_STAGE_S = 24 * 3600    # another host's stage older than this is left over (its pid cannot be asked)


def remove_stale_stages(out: Path) -> list[str]:
    """Remove the staging folders an aggregation killed mid-way (``kill -9``, a node lost) left
    in ``out``: this host's whose process is gone, another host's after a day, older unnamed
    ones (``.aggregate-<random>``) after a day. Returns their names."""
    host, now, gone = socket.gethostname(), time.time(), []
    for d in out.glob(f"{STAGE}*"):
        parts = d.name[len(STAGE):].rsplit("-", 2)
        try:
            age = now - d.stat().st_mtime
        except OSError:
            continue
        if len(parts) == 3 and parts[0] == host and parts[1].isdigit():
            stale = not _alive(int(parts[1]))
        else:
            stale = age > STALE_STAGE_S
        if stale and d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d.name)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_outputs(agg: Aggregate, stage: Path, *, algo, tolerance, bootstrap, seed, html, claims,
                   final: Path) -> list[str]:
    """Fit, decide and write every output into ``stage``; return their names (aggregate.json last)."""
    t = time.perf_counter()
    names = list(write_tables(agg, stage))
    agg.timings["write_s"] = time.perf_counter() - t
    t = time.perf_counter()
    agg.trend = fit.fit_runs(agg.runs, agg.metric, algo=algo, tolerance=tolerance,
                             n_boot=bootstrap, seed=seed)
    atomic_write_json(stage / "trend.json", agg.trend)
    names.append("trend.json")
    agg.timings["fit_s"] = time.perf_counter() - t
    if claims is None:
        claims = claims_mod.wanted(agg)
    if claims:
        t = time.perf_counter()
        try:
            agg.claims = claims_mod.claims(agg, n_boot=bootstrap or claims_mod.DEFAULTS["n_boot"], seed=seed)
            atomic_write_json(stage / "claims.json", agg.claims)
            names.append("claims.json")
        except ConfigError:     # bad input (a registration whose graph is not valid): one line, exit 2
            raise
        except Exception as e:  # noqa: BLE001 - the tables and page must still be written
            agg.notes.append(f"claims failed ({type(e).__name__}: {e}); rerun: python -m esopt.aggregate "
                             f"{agg.sweep_dir} --claims")
        agg.timings["claims_s"] = time.perf_counter() - t
    if html:
        t = time.perf_counter()
        atomic_write_text(stage / "report.html", report.build(agg, sweep_dir=agg.sweep_dir))
        names.append("report.html")
        agg.timings["report_s"] = time.perf_counter() - t
    counts = agg.runs["status"].value_counts().to_dict()
    names.append("aggregate.json")
    atomic_write_json(stage / "aggregate.json", {
        "sweep_dir": str(agg.sweep_dir), "metric": agg.metric, "runs": int(len(agg.runs)),
        "status_counts": counts, "skipped": agg.skipped, "notes": agg.notes,
        "curve_lines": int(len(agg.curves)), "timings_s": agg.timings,
        "outputs": sorted(str(final / n) for n in names)})
    return names


def commit(stage: Path, out: Path, names: list[str]) -> None:
    """Rename every complete output in ``stage`` over its name in ``out`` (renames within one
    directory tree need no space, so a full disk cannot stop the set halfway)."""
    for name in names:
        os.replace(stage / name, out / name)
