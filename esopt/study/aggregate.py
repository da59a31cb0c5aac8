"""Aggregate a sweep: read its runs (``esopt.study.tables``), fit the population-vs-size trend
(``fit``), decide the study's claims (``claims``) and build the page (``report``), then write
every output into the sweep directory.

    agg = aggregate("results/<sweep>")      # python -m esopt.aggregate results/<sweep>

Outputs (each written to a temporary file and renamed, so a reader or a full disk never sees
half of one): runs.parquet, runs.csv, curves.parquet, trend.json, claims.json (claims
sweeps), aggregate.json (what was read: counts, skipped runs, notes, timings), report.html.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from esopt.core.errors import ConfigError
from esopt.core.store import atomic_write_json, atomic_write_text
from esopt.study import claims as claims_mod
from esopt.study import fit, report
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
    out = Path(out) if out is not None else agg.sweep_dir
    t = time.perf_counter()
    paths = write_tables(agg, out)
    agg.timings["write_s"] = time.perf_counter() - t
    t = time.perf_counter()
    agg.trend = fit.fit_runs(agg.runs, agg.metric, algo=algo, tolerance=tolerance,
                             n_boot=bootstrap, seed=seed)
    atomic_write_json(out / "trend.json", agg.trend)
    paths["trend.json"] = out / "trend.json"
    agg.timings["fit_s"] = time.perf_counter() - t
    if claims is None:
        claims = claims_mod.wanted(agg)
    if claims:
        t = time.perf_counter()
        try:
            agg.claims = claims_mod.claims(agg, n_boot=bootstrap or claims_mod.DEFAULTS["n_boot"], seed=seed)
            atomic_write_json(out / "claims.json", agg.claims)
            paths["claims.json"] = out / "claims.json"
        except Exception as e:  # noqa: BLE001 - the tables and page must still be written
            agg.notes.append(f"claims failed ({type(e).__name__}: {e}); rerun: python -m esopt.aggregate "
                             f"{agg.sweep_dir} --claims")
        agg.timings["claims_s"] = time.perf_counter() - t
    if html:
        t = time.perf_counter()
        atomic_write_text(out / "report.html", report.build(agg, sweep_dir=agg.sweep_dir))
        paths["report.html"] = out / "report.html"
        agg.timings["report_s"] = time.perf_counter() - t
    counts = agg.runs["status"].value_counts().to_dict()
    atomic_write_json(out / "aggregate.json", {
        "sweep_dir": str(agg.sweep_dir), "metric": agg.metric, "runs": int(len(agg.runs)),
        "status_counts": counts, "skipped": agg.skipped, "notes": agg.notes,
        "curve_lines": int(len(agg.curves)), "timings_s": agg.timings,
        "outputs": sorted(str(p) for p in paths.values())})
    return agg
