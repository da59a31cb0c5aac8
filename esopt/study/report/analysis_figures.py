"""The page's figures of the mechanism analyses (``esopt.study.analyses``): drawn only when some
run has the analysis file (``sparsity.json``, ``drift.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from esopt.study.analyses.module_types import MODULE_TYPES
from esopt.study.report.plotting import (algo_color, algo_key, band_trace, close_group, facet_name, facet_order,
                                  menu_figure, trace_dict)

SPARSITY_DASH = {"global": "solid", "per_tensor": "dash", "smallest": "dot", "random": "dashdot",
                 "equal_norm": "longdashdot"}
SPARSITY_BANDS = ("global", "per_tensor")   # the controls are drawn without a band


def _analysis_groups(runs: pd.DataFrame, column: str) -> dict[str, dict[str, list[str]]]:
    """facet -> algo -> run ids of completed runs that have the analysis column."""
    if column not in runs:
        return {}
    ok = runs[(runs["status"] == "completed") & runs[column].notna()]
    multi_task = runs["task"].nunique() > 1
    out: dict[str, dict[str, list[str]]] = {}
    for (model, task, algo), g in ok.groupby(["model", "task", "algo"], dropna=False, sort=False):
        out.setdefault(facet_name(model, task, multi_task), {})[algo] = g["run_id"].tolist()
    return out


def fig_sparsity(runs: pd.DataFrame, runs_dir: Path | None):
    """Share of the Pass@1 gain kept against the keep fraction: per algorithm (colour) and
    mode (line style; smallest, random, equal_norm = the controls), mean over runs; band: mean of
    the runs' 95% CIs."""
    groups = _analysis_groups(runs, "sparsity_nnz")
    if not groups or runs_dir is None:
        return None, None
    traces, counts, labels = [], [], []
    for facet in facet_order(groups, runs):
        n0 = len(traces)
        for algo in sorted(groups[facet], key=algo_key):
            rows = []
            for rid in groups[facet][algo]:
                try:
                    rows += [dict(c, run_id=rid) for c in json.loads((runs_dir / rid / "sparsity.json").read_bytes())["curves"]]
                except (OSError, ValueError, KeyError, TypeError):
                    continue
            df = pd.DataFrame(rows)
            if df.empty or "share_pass@1" not in df:
                continue
            df = df[df["keep"] > 0]
            color = algo_color(algo)
            for mode in [m for m in SPARSITY_DASH if m in set(df["mode"])]:
                d = df[df["mode"] == mode]
                share = pd.to_numeric(d["share_pass@1"], errors="coerce")
                ci = d["share_pass@1_ci"].apply(lambda v: v if isinstance(v, list) and len(v) == 2 else [np.nan, np.nan])
                d = d.assign(share=share, lo=[c[0] for c in ci], hi=[c[1] for c in ci])
                agg = d.groupby("keep").agg(mean=("share", "mean"), lo=("lo", "mean"), hi=("hi", "mean"), n=("run_id", "nunique"))
                x = agg.index.to_numpy(dtype=float)
                meta = {"facet": facet, "algo": algo, "mode": mode, "run_ids": groups[facet][algo]}
                if mode in SPARSITY_BANDS and np.isfinite(agg["lo"]).all() and np.isfinite(agg["hi"]).all():
                    traces.append(band_trace(x, agg["lo"].to_numpy(), agg["hi"].to_numpy(), color, f"{facet} {algo} {mode}",
                                        {**meta, "kind": "band"}))
                traces.append(trace_dict("scatter", x=x, y=agg["mean"].to_numpy(), mode="lines+markers",
                                     name=f"{algo} {mode}", line=dict(color=color, dash=SPARSITY_DASH[mode]),
                                     legendgroup=f"{facet} {algo} {mode}", meta={**meta, "kind": "mean"}))
        close_group(traces, n0, facet, labels, counts)
    if not traces:
        return None, "sparsity.json files unreadable"
    fig = menu_figure(traces, labels, counts,
                       title="Functional sparsity: share of the Pass@1 gain kept when only the largest "
                       "(global, per tensor) or, as controls, the smallest or a random set of the same size "
                       "(equal_norm: rescaled to the top-k norm) are kept; menu: model",
                       xaxis=dict(type="log", title="fraction of nonzero update entries kept"),
                       yaxis_title="share of gain kept")
    return fig, None


def fig_drift(runs: pd.DataFrame, value: str = "relative"):
    """Drift by module type per algorithm (mean over runs): value = relative (||delta||/||base||
    per module type; overall first) or top_share (share of the largest 1% of update entries)."""
    groups = _analysis_groups(runs, "drift_relative")
    if not groups:
        return None, None
    types = [t for t in MODULE_TYPES if f"drift_modules.{t}.{value}" in runs]
    x = (["overall"] if value == "relative" else []) + types
    traces, counts, labels = [], [], []
    for facet in facet_order(groups, runs):
        n0 = len(traces)
        for algo in sorted(groups[facet], key=algo_key):
            sub = runs[runs["run_id"].isin(groups[facet][algo])]
            cols = (["drift_relative"] if value == "relative" else []) + [f"drift_modules.{t}.{value}" for t in types]
            y = np.array([pd.to_numeric(sub[c], errors="coerce").mean() for c in cols])
            traces.append(trace_dict("bar", x=x, y=y, name=algo, marker=dict(color=algo_color(algo)),
                                 meta={"facet": facet, "algo": algo, "run_ids": groups[facet][algo]}))
        close_group(traces, n0, facet, labels, counts)
    if value == "relative":
        title, yaxis = ("Relative L2 drift ||Δθ|| / ||θ_base|| by module type (mean over runs); menu: model",
                        dict(type="log", title="relative drift"))
    else:
        title, yaxis = ("Where the largest 1% of update entries sit: share by module type (mean over runs); "
                        "menu: model", dict(title="share of top-1% entries"))
    fig = menu_figure(traces, labels, counts, title=title, barmode="group", xaxis_title="module type",
                       yaxis=yaxis)
    return fig, None
