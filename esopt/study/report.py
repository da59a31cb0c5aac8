"""One self-contained interactive page for a sweep (plotly.js embedded once; works offline).

Each figure is a ``<div id="fig-...">`` plus its Plotly JSON in
``<script type="application/json" class="figure-data" data-figure="fig-...">``; one script
at the end draws them all. :func:`figure_data` reads a figure's data back from a page (tests
and users; numpy arrays that Plotly stored as base64 ``bdata`` are decoded).

Figures (stable ids):
    fig-parcoords    parallel coordinates: log10 params, pop, sigma, lr, seed, the metric (brushable)
    fig-curves       learning curves per run: reward / held-out pass@1 / entropy / JS_succ,
                     against iteration or generated tokens (dropdown; legend toggles runs)
    fig-passk        Pass@K, k = 1..samples (log x), per model: base and each algorithm's best
                     configuration, mean over seeds with a 95% bootstrap band
    fig-entropy      held-out token entropy over training, per algorithm (ES against GRPO)
    fig-heatmap      the metric over (model, pop) for the fitted algorithm
    fig-trend        pop* against params on log-log axes, the fit and its 95% band
    fig-status       run counts by status and algorithm
    fig-pruning      why each pruned run was cut: its pruner's statistic at that step against
                     the threshold, the reference in the hover text (only when a run has it)
    fig-sparsity     share of the Pass@1 gain kept vs keep fraction, per algorithm and mode
                     (only when runs have sparsity.json, esopt.study.analyze)
    fig-drift / fig-drift-top   relative drift and top-1% update share by module type, per
                     algorithm (only when runs have drift.json)
    fig-optuna-<i>-intermediate / fig-optuna-<i>-importance   Optuna's own plots per study
Tables: table-problems (pruned / failed / running runs), table-skipped (unreadable runs).
"""

from __future__ import annotations

import base64
import html as _html
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from esopt.core.metrics import pass_at_k, percentile_interval, resample_indices
from esopt.core.store import jsonable
from esopt.study import claims, fit, tables

ALGO_ORDER = ("base", "none", "es", "grpo", "grpo_es", "es_grpo")
COLORS = {"base": "#7f7f7f", "none": "#7f7f7f", "es": "#1f77b4", "grpo": "#d62728",
          "grpo_es": "#9467bd", "es_grpo": "#2ca02c"}
BAND_LEVEL = 0.95        # the Pass@K bands' percentile interval
PASSK_RUNS = 30          # Pass@K curves read per-problem counts of at most this many seeds
CURVE_RUNS = 40          # learning curves drawn for at most this many runs (best by the metric)
CURVES = (("reward_mean", "train", "reward"), ("pass@1", "eval", "held-out pass@1"),
          ("entropy", "eval", "held-out entropy"), ("js_succ", "train", "JS_succ diversity"))
LAYOUT = dict(margin=dict(l=60, r=30, t=70, b=50), plot_bgcolor="#fafafa",
              xaxis=dict(gridcolor="#e5e5e5"), yaxis=dict(gridcolor="#e5e5e5"))


def _trace(kind: str, **kw) -> dict:
    """A Plotly trace as a plain dict (graph_objects validation costs ~3 ms per trace)."""
    return {"type": kind, **kw}


def _layout(title: str, **kw) -> dict:
    """Layout dict: LAYOUT + kw; ``xaxis_title="t"`` style keys and string titles expanded."""
    out = json.loads(json.dumps(LAYOUT))
    out["title"] = {"text": title}
    for k, v in kw.items():
        axis, _, attr = k.partition("_")
        if axis in ("xaxis", "yaxis") and attr:
            out[axis][attr] = {"text": v} if attr == "title" else v
        elif k in ("xaxis", "yaxis"):
            out[k].update({a: ({"text": x} if a == "title" and isinstance(x, str) else x) for a, x in v.items()})
        else:
            out[k] = v
    return out


def _figure(traces) -> dict:
    return {"data": traces if isinstance(traces, list) else [traces], "layout": {}}


# ---------------------------------------------------------------------------------------
# helpers
def _label(row) -> str:
    parts = [str(row.get("model")), str(row.get("algo"))]
    if row.get("algo") not in ("none", "grpo") and pd.notna(row.get("pop")):
        parts.append(f"N={int(row['pop'])}")
    if pd.notna(row.get("seed")):
        parts.append(f"s{int(row['seed'])}")
    return " ".join(parts)


def best_groups(runs: pd.DataFrame, metric: str) -> dict[tuple, dict]:
    """Per (model, task, algo): the configuration with the best mean metric over its seeds.

    A configuration = (pop, sigma, lr, iterations); completed runs with a finite metric only.
    Returns {(model, task, algo): {"run_ids", "mean", "config"}}.
    """
    if metric not in runs:
        return {}
    ok = runs[(runs["status"] == "completed") & runs[metric].notna()]
    key = ["model", "task", "algo"]
    cols = key + [c for c in ("pop", "sigma", "lr", "iterations") if c in ok.columns]
    if ok.empty:
        return {}
    # the configuration columns as numbers: an all-null column (pop of base runs, lr of
    # sequences) would otherwise be objects and break the merge below
    ok = ok.assign(**{c: pd.to_numeric(ok[c], errors="coerce").astype(float) for c in cols[3:]})
    means = ok.groupby(cols, dropna=False, sort=False)[metric].mean().reset_index()
    best = means.loc[means.groupby(key, dropna=False, sort=False)[metric].idxmax()]
    chosen = ok.merge(best[cols], on=cols, how="inner")
    out = {}
    for _, b in best.iterrows():
        k = tuple(b[c] for c in key)
        m = np.ones(len(chosen), bool)
        for c in key:
            m &= (chosen[c] == b[c]).to_numpy() | (chosen[c].isna() & pd.isna(b[c])).to_numpy()
        out[k] = {"run_ids": chosen.loc[m, "run_id"].tolist(), "mean": float(b[metric]),
                  "config": {c: b[c] for c in cols[3:]}}
    return out


def _facet(model, task, multi_task: bool) -> str:
    return f"{model} · {task}" if multi_task else str(model)


def _facet_order(facets, runs: pd.DataFrame) -> list[str]:
    """Facets ordered by model size, then name."""
    size = runs.groupby("model")["params"].median()
    return sorted(facets, key=lambda f: (np.nan_to_num(size.get(f.split(" · ")[0], np.nan), nan=np.inf), f))


def _dropdown(labels: list[str], n_traces_each: list[int], y: float = 1.18) -> dict:
    """An updatemenu showing only the traces of one label (traces are grouped in order)."""
    buttons, start, total = [], 0, sum(n_traces_each)
    for lab, n in zip(labels, n_traces_each):
        vis = [False] * total
        vis[start:start + n] = [True] * n
        buttons.append(dict(label=lab, method="update", args=[{"visible": vis}]))
        start += n
    return dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=y, yanchor="top")


def _menu_figure(traces: list[dict], labels: list[str], counts: list[int], *, always_menu: bool = False,
                 **layout) -> dict:
    """A figure whose traces come in groups (one per label), the first group shown and a
    dropdown to switch (shown when there is more than one group, or always)."""
    for t in traces[counts[0]:]:
        t["visible"] = False
    fig = _figure(traces)
    menu = [_dropdown(labels, counts)] if always_menu or len(labels) > 1 else []
    fig["layout"] = _layout(updatemenus=menu, **layout)
    return fig


def _band(x, lo, hi, color, name, meta) -> dict:
    x = list(x)
    return _trace("scatter", x=x + x[::-1], y=list(hi) + list(lo)[::-1], fill="toself", mode="lines",
                      line=dict(width=0), fillcolor=_rgba(color, 0.18), hoverinfo="skip",
                      showlegend=False, name=name, meta=meta, legendgroup=name)


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


# ---------------------------------------------------------------------------------------
# figures: each returns (figure or None, note about what is missing)
def fig_parcoords(runs: pd.DataFrame, metric: str):
    ok = runs[runs[metric].notna()] if metric in runs else runs.iloc[:0]
    if ok.empty:
        return None, f"no runs with {metric}: no parallel coordinates"
    dims = []
    for col, label, fn in (("params", "log10 params", np.log10), ("pop", "pop", None),
                           ("sigma", "sigma", None), ("lr", "lr", None), ("seed", "seed", None)):
        if col in ok and ok[col].notna().any():
            v = pd.to_numeric(ok[col], errors="coerce").to_numpy(dtype=float)
            dims.append(dict(label=label, values=fn(v) if fn else v))
    vals = ok[metric].to_numpy(dtype=float)
    dims.append(dict(label=metric, values=vals))
    fig = _figure(_trace("parcoords", 
        line=dict(color=vals, colorscale="Viridis", showscale=True, colorbar=dict(title=dict(text=metric))),
        dimensions=dims, meta={"run_ids": ok["run_id"].tolist()}))
    fig["layout"] = _layout(title=f"Hyperparameters of {len(ok)} runs, coloured by {metric} "
                            "(drag on an axis to brush)")
    return fig, None


def fig_curves(runs: pd.DataFrame, curves: pd.DataFrame, metric: str):
    if curves.empty or "kind" not in curves:
        return None, "no metrics lines: no learning curves"
    order = runs.sort_values(metric, ascending=False, na_position="last") if metric in runs else runs
    have = set(curves["run_id"].unique())
    chosen = [r for r in order["run_id"] if r in have][:CURVE_RUNS]
    info = runs.set_index("run_id")
    names = {rid: _label(info.loc[rid]) for rid in chosen}
    algos = info["algo"].to_dict()
    sub = curves[curves["run_id"].isin(chosen)]
    traces, counts, labels = [], [], []
    for col, kind, title in CURVES:
        if col not in sub:
            continue
        part = sub[(sub["kind"] == kind) & sub[col].notna()]
        per_run = {rid: g for rid, g in part.groupby("run_id", sort=False)}
        for xcol, xname in (("iteration", "iteration"), ("tokens_total", "generated tokens")):
            if xcol not in part:
                continue
            n = 0
            for rid in chosen:
                g = per_run.get(rid)
                if g is None:
                    continue
                traces.append(_trace(
                    "scatter", x=g[xcol].to_numpy(dtype=float), y=g[col].to_numpy(dtype=float),
                    mode="lines+markers", name=names[rid], legendgroup=rid,
                    line=dict(color=COLORS.get(algos[rid])), marker=dict(size=4),
                    meta={"run_id": rid, "metric": col, "x": xcol}))
                n += 1
            if n:
                labels.append(f"{title} vs {xname}")
                counts.append(n)
    if not traces:
        return None, "no reward / pass@1 / entropy / JS lines in metrics.jsonl"
    note = f" (best {len(chosen)} of {len(runs)} runs by {metric})" if len(runs) > len(chosen) else ""
    fig = _menu_figure(traces, labels, counts, always_menu=True,
                       title=f"Learning curves{note}; menu: quantity and x axis",
                       xaxis_title="iteration / generated tokens")
    return fig, None


def _passk_from_counts(counts: list[np.ndarray], n: int, rng, n_boot: int = 1000):
    """Mean Pass@K over seeds and problems for k = 1..n, with a bootstrap band over problems.

    counts: per run, correct counts per problem (same problems). Per problem and run,
    pass@k = 1 - C(n-c,k)/C(n,k) (a table over c = 0..n); averaged over runs, then over
    problems; the band resamples problems (``n_boot`` resamples, percentile ``BAND_LEVEL``).
    """
    ks = np.arange(1, n + 1)
    table = np.stack([pass_at_k(n, np.arange(n + 1), int(k)) for k in ks], axis=1)   # (n+1, K)
    c = np.clip(np.stack(counts).astype(np.int64), 0, n)                             # (S, P)
    per = table[c].mean(axis=0)                                                      # (P, K)
    boots = per[resample_indices(rng, n_boot, per.shape[0])].mean(axis=1)           # (B, K)
    lo, hi = percentile_interval(boots, BAND_LEVEL, axis=0)
    return ks, per.mean(axis=0), lo, hi


def _read_counts(runs_dir: Path | None, rid: str, which: str):
    """(samples, correct_counts) of a run's base/final evaluation, or None."""
    if runs_dir is None:
        return None
    try:
        s = json.loads((runs_dir / rid / "summary.json").read_bytes())
        ev = s.get(which) or {}
        cc = ev.get("correct_counts")
        if cc and ev.get("samples"):
            return int(ev["samples"]), np.asarray(cc, dtype=float)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def fig_passk(runs: pd.DataFrame, metric: str, runs_dir: Path | None, seed: int = 0, groups=None):
    groups = best_groups(runs, metric) if groups is None else groups
    if not groups:
        return None, f"no completed runs with {metric}: no Pass@K curves"
    multi_task = runs["task"].nunique() > 1
    rng = np.random.default_rng(seed)
    facets: dict[str, list] = {}
    for (model, task, algo), g in groups.items():
        facets.setdefault(_facet(model, task, multi_task), []).append((algo, g))
    traces, counts, labels = [], [], []
    for facet in _facet_order(facets, runs):
        n0 = len(traces)
        entries = sorted(facets[facet], key=lambda e: ALGO_ORDER.index(e[0]) if e[0] in ALGO_ORDER else 99)
        base_ids = [r for algo, g in entries for r in g["run_ids"]]
        series = [("base", base_ids, "base", "base model")]
        series += [(algo, g["run_ids"], "final", _cfg_text(algo, g)) for algo, g in entries if algo != "none"]
        for algo, ids, which, desc in series:
            got = [_read_counts(runs_dir, r, which) for r in ids[:PASSK_RUNS]]
            got = [g for g in got if g is not None]
            if which == "base":                                    # identical base evals: once
                uniq = {(g[0], g[1].tobytes()): g for g in got}
                got = list(uniq.values())
            color = COLORS.get(algo, "#333333")
            meta = {"facet": facet, "algo": algo, "run_ids": ids}
            if got and len({(g[0], len(g[1])) for g in got}) == 1:
                ks, mean, lo, hi = _passk_from_counts([g[1] for g in got], got[0][0], rng)
                source = "correct_counts"
            else:                                                  # fall back to pass@k columns
                ks, mean, lo, hi = _passk_from_table(runs[runs["run_id"].isin(ids)], which)
                source = "pass@k columns"
            if ks is None:
                continue
            traces.append(_band(ks, lo, hi, color, f"{facet} {algo}", {**meta, "kind": "band"}))
            traces.append(_trace("scatter", x=ks, y=mean, mode="lines+markers", name=f"{algo}: {desc}",
                                     line=dict(color=color), marker=dict(size=4), legendgroup=f"{facet} {algo}",
                                     meta={**meta, "kind": "mean", "source": source,
                                           "n_runs": len(got) if source == "correct_counts" else len(ids)}))
        if len(traces) > n0:
            labels.append(facet)
            counts.append(len(traces) - n0)
    if not traces:
        return None, "no Pass@K data (no pass@k in summaries)"
    fig = _menu_figure(traces, labels, counts,
                       title="Pass@K (mean over seeds, 95% bootstrap band over problems); menu: model",
                       xaxis=dict(type="log", title="k"), yaxis_title="pass@k")
    return fig, None


def _cfg_text(algo: str, g: dict) -> str:
    c = {k: (None if pd.isna(v) else v) for k, v in g["config"].items()}
    bits = [f"N={c['pop']:g}" if algo in ("es", "grpo_es", "es_grpo") and c.get("pop") is not None else None,
            f"σ={c['sigma']:g}" if algo in ("es", "grpo_es", "es_grpo") and c.get("sigma") is not None else None,
            f"lr={c['lr']:g}" if c.get("lr") is not None else None]
    return f"{', '.join(b for b in bits if b)} ({len(g['run_ids'])} seeds)"


def _passk_from_table(sub: pd.DataFrame, which: str):
    cols = sorted((int(m.group(1)), c) for c in sub.columns
                  if (m := re.fullmatch(rf"{which}_pass@(\d+)", c)) and sub[c].notna().any())
    if not cols:
        return None, None, None, None
    ks = np.array([k for k, _ in cols])
    mean = np.array([sub[c].mean() for _, c in cols])
    lo = np.array([sub[f"{c}_lo"].mean() if f"{c}_lo" in sub else np.nan for _, c in cols])
    hi = np.array([sub[f"{c}_hi"].mean() if f"{c}_hi" in sub else np.nan for _, c in cols])
    return ks, mean, np.where(np.isfinite(lo), lo, mean), np.where(np.isfinite(hi), hi, mean)


def fig_entropy(runs: pd.DataFrame, curves: pd.DataFrame, metric: str, groups=None):
    """Held-out token entropy over training; the out-of-domain set's (``ood_entropy``,
    eval.ood_task) when the sweep measured one."""
    if curves.empty or "entropy" not in curves:
        return None, "no held-out entropy in metrics.jsonl"
    col = "ood_entropy" if "ood_entropy" in curves and curves["ood_entropy"].notna().any() else "entropy"
    groups = {k: g for k, g in (best_groups(runs, metric) if groups is None else groups).items()
              if k[2] != "none"}
    ev = curves[(curves["kind"] == "eval") & curves[col].notna()]
    multi_task = runs["task"].nunique() > 1
    facets: dict[str, list] = {}
    for (model, task, algo), g in groups.items():
        facets.setdefault(_facet(model, task, multi_task), []).append((algo, g))
    traces, counts, labels = [], [], []
    for facet in _facet_order(facets, runs):
        n0 = len(traces)
        for algo, g in sorted(facets[facet], key=lambda e: ALGO_ORDER.index(e[0]) if e[0] in ALGO_ORDER else 99):
            e = ev[ev["run_id"].isin(g["run_ids"])]
            if e.empty:
                continue
            agg = e.groupby("iteration").agg(mean=(col, "mean"), n=(col, "size"),
                                             lo=(f"{col}_lo", "mean") if f"{col}_lo" in e else (col, "min"),
                                             hi=(f"{col}_hi", "mean") if f"{col}_hi" in e else (col, "max"))
            x = agg.index.to_numpy(dtype=float)
            color = COLORS.get(algo, "#333333")
            meta = {"facet": facet, "algo": algo, "run_ids": g["run_ids"]}
            traces.append(_band(x, agg["lo"].to_numpy(), agg["hi"].to_numpy(), color, f"{facet} {algo}",
                                {**meta, "kind": "band"}))
            traces.append(_trace("scatter", x=x, y=agg["mean"].to_numpy(), mode="lines+markers", name=algo,
                                     line=dict(color=color), legendgroup=f"{facet} {algo}",
                                     meta={**meta, "kind": "mean"}))
        if len(traces) > n0:
            labels.append(facet)
            counts.append(len(traces) - n0)
    if not traces:
        return None, "no held-out entropy for trained runs"
    fig = _menu_figure(traces, labels, counts,
                       title=f"{'Out-of-domain' if col == 'ood_entropy' else 'Held-out'} token entropy over "
                       "training (mean over seeds; band: evaluator 95% CI); menu: model", xaxis_title="iteration", yaxis_title="entropy (nats)")
    return fig, None


def fig_heatmap(trend: dict):
    models = trend.get("models") or []
    if not models:
        return None, f"no completed {trend.get('algo')} runs: no (model, pop) heatmap"
    pops = sorted({p for m in models for p in m["pops"]})
    z = np.full((len(models), len(pops)), np.nan)
    for i, m in enumerate(models):
        for p, v in zip(m["pops"], m["means"]):
            z[i, pops.index(p)] = v
    ylabels = [f"{m['model']} ({_fmt_params(m['params'])})" for m in models]
    fig = _figure(_trace("heatmap", z=z, x=[str(int(p)) if float(p).is_integer() else str(p) for p in pops],
                               y=ylabels, colorscale="Viridis", colorbar=dict(title=dict(text=trend["metric"])),
                               text=np.where(np.isfinite(z), np.round(z, 3).astype(str), ""),
                               texttemplate="%{text}", meta={"pops": pops, "models": [m["model"] for m in models]}))
    fig["layout"] = _layout(title=f"{trend['metric']} by model and population ({trend['algo']}; mean over seeds, "
                            "best sigma/lr setting per cell)", xaxis_title="population N",
                      xaxis_type="category")
    return fig, None


def _fmt_params(p: float) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if p >= div:
            return f"{p / div:.3g}{unit}"
    return f"{p:.3g}"


def fig_trend(trend: dict):
    models = trend.get("models") or []
    if not models:
        return None, "no data for the trend fit"
    P = [m["params"] for m in models]
    traces = []
    symbols = {"continuous": "circle", "discrete": "square", "efficient": "diamond"}
    for method in ("continuous", "discrete", "efficient"):
        y = [m["pop_star"][method] for m in models]
        ci = [m["pop_star_ci"][method] or [v, v] for m, v in zip(models, y)]
        traces.append(_trace("scatter", 
            x=P, y=y, mode="markers", name=f"pop* ({method})", marker=dict(symbol=symbols[method], size=10),
            error_y=dict(type="data", symmetric=False, array=[c[1] - v for c, v in zip(ci, y)],
                         arrayminus=[v - c[0] for c, v in zip(ci, y)]),
            text=[m["model"] for m in models], meta={"method": method, "kind": "points"},
            visible=True if method == "continuous" else "legendonly"))
    band = trend.get("band")
    if band and trend.get("slope") is not None:
        if band.get("pop_lo"):
            traces.append(_band(band["params"], band["pop_lo"], band["pop_hi"], "#1f77b4", "fit band",
                                {"kind": "band"}))
        traces.append(_trace("scatter", x=band["params"], y=band["pop_fit"], mode="lines", line=dict(color="#1f77b4"),
                                 name=f"fit: slope {trend['slope']:.3g}", meta={"kind": "fit",
                                 "slope": trend["slope"], "intercept": trend["intercept"]}))
    fig = _figure(traces)
    ci = trend.get("slope_ci")
    sub = (f"slope {trend['slope']:.3g}" + (f" [95% CI {ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")
           if trend.get("slope") is not None else "no fit")
    fig["layout"] = _layout(title=f"Best population vs model size: log pop* = a + b log params; {sub}; "
                            f"verdict: {trend['verdict']}",
                      xaxis=dict(type="log", title="model parameters"),
                      yaxis=dict(type="log", title="pop* (best population)"))
    return fig, None


def fig_status(runs: pd.DataFrame):
    tab = runs.groupby(["algo", "status"]).size().unstack(fill_value=0)
    traces = [_trace("bar", x=tab.index.tolist(), y=tab[s].tolist(), name=s, meta={"status": s})
              for s in tab.columns]
    fig = _figure(traces)
    fig["layout"] = _layout(title="Runs by status and algorithm", barmode="stack", xaxis_title="algo")
    return fig, None


def fig_pruning(runs: pd.DataFrame):
    """Per pruned run, the statistic its pruner compared (``summary.json`` ``pruning.value``)
    and the threshold it fell short of (``pruning.threshold``), at the step it was cut."""
    if "pruning.value" not in runs:
        return None, None
    cut = runs[(runs["status"] == "pruned") & runs["pruning.value"].notna()]
    if cut.empty:
        return None, None
    col = lambda name: cut[name].tolist() if name in cut else [None] * len(cut)  # noqa: E731
    def label(row) -> str:
        extra = "".join(f" {k}={row[k]:g}" for k in ("sigma", "lr") if isinstance(row.get(k), (int, float))
                        and not math.isnan(row[k]))
        return f"{row['run_id']} ({_label(row)}{extra})"

    labels = [label(row) for _, row in cut.iterrows()]
    step = lambda s: "?" if s is None or (isinstance(s, float) and math.isnan(s)) else int(s)  # noqa: E731
    esc = lambda v: _html.escape(str(v))  # noqa: E731
    hover = [f"{esc(p)}, iteration {step(s)}: {esc(st)}<br>reference: {esc(ref)}"
             for p, s, st, ref in zip(col("pruning.pruner"), col("pruning.step"), col("pruning.statistic"),
                                      col("pruning.reference"))]
    value = [float(v) for v in cut["pruning.value"]]
    thr = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
           for v in col("pruning.threshold")]
    traces = [_trace("scatter", x=labels, y=value, mode="markers", name="statistic", text=hover,
                     hoverinfo="text+y", marker=dict(size=10, color="#d62728"), meta={"kind": "value"}),
              _trace("scatter", x=labels, y=thr, mode="markers", name="threshold", text=hover,
                     hoverinfo="text+y", marker=dict(size=14, symbol="line-ew-open", color="#222"),
                     meta={"kind": "threshold"})]
    fig = _figure(traces)
    fig["layout"] = _layout(title="Why runs were pruned: the pruner's statistic at the step it was cut, "
                                  "against its threshold (hover: step, statistic, reference)",
                            xaxis_title="pruned run", yaxis_title="statistic / threshold")
    return fig, None


# ---------------------------------------------------------------------------------------
# mechanism analyses (esopt.study.analyze): drawn only when some run has the file
SPARSITY_DASH = {"global": "solid", "per_tensor": "dash", "smallest": "dot"}
DRIFT_TYPES = ("embeddings", "attn_q", "attn_k", "attn_v", "attn_o", "attn_qkv", "mlp", "norm", "lm_head",
               "other")                              # esopt.study.analyze.MODULE_TYPES (no torch import here)


def _analysis_groups(runs: pd.DataFrame, column: str) -> dict[str, dict[str, list[str]]]:
    """facet -> algo -> run ids of completed runs that have the analysis column."""
    if column not in runs:
        return {}
    ok = runs[(runs["status"] == "completed") & runs[column].notna()]
    multi_task = runs["task"].nunique() > 1
    out: dict[str, dict[str, list[str]]] = {}
    for (model, task, algo), g in ok.groupby(["model", "task", "algo"], dropna=False, sort=False):
        out.setdefault(_facet(model, task, multi_task), {})[algo] = g["run_id"].tolist()
    return out


def _algo_sorted(algos):
    return sorted(algos, key=lambda a: (ALGO_ORDER.index(a) if a in ALGO_ORDER else 99, str(a)))


def fig_sparsity(runs: pd.DataFrame, runs_dir: Path | None):
    """Share of the Pass@1 gain kept against the keep fraction: per algorithm (colour) and
    mode (line style; smallest = the control), mean over runs; band: mean of the runs' 95% CIs."""
    groups = _analysis_groups(runs, "sparsity_nnz")
    if not groups or runs_dir is None:
        return None, None
    traces, counts, labels = [], [], []
    for facet in _facet_order(groups, runs):
        n0 = len(traces)
        for algo in _algo_sorted(groups[facet]):
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
            color = COLORS.get(algo, "#333333")
            for mode in [m for m in SPARSITY_DASH if m in set(df["mode"])]:
                d = df[df["mode"] == mode]
                share = pd.to_numeric(d["share_pass@1"], errors="coerce")
                ci = d["share_pass@1_ci"].apply(lambda v: v if isinstance(v, list) and len(v) == 2 else [np.nan, np.nan])
                d = d.assign(share=share, lo=[c[0] for c in ci], hi=[c[1] for c in ci])
                agg = d.groupby("keep").agg(mean=("share", "mean"), lo=("lo", "mean"), hi=("hi", "mean"), n=("run_id", "nunique"))
                x = agg.index.to_numpy(dtype=float)
                meta = {"facet": facet, "algo": algo, "mode": mode, "run_ids": groups[facet][algo]}
                if mode != "smallest" and np.isfinite(agg["lo"]).all() and np.isfinite(agg["hi"]).all():
                    traces.append(_band(x, agg["lo"].to_numpy(), agg["hi"].to_numpy(), color, f"{facet} {algo} {mode}",
                                        {**meta, "kind": "band"}))
                traces.append(_trace("scatter", x=x, y=agg["mean"].to_numpy(), mode="lines+markers",
                                     name=f"{algo} {mode}", line=dict(color=color, dash=SPARSITY_DASH[mode]),
                                     legendgroup=f"{facet} {algo} {mode}", meta={**meta, "kind": "mean"}))
        if len(traces) > n0:
            labels.append(facet)
            counts.append(len(traces) - n0)
    if not traces:
        return None, "sparsity.json files unreadable"
    fig = _menu_figure(traces, labels, counts,
                       title="Functional sparsity: share of the Pass@1 gain kept when only the largest "
                       "(global, per tensor) or smallest (control) update entries are kept; menu: model",
                       xaxis=dict(type="log", title="fraction of nonzero update entries kept"),
                       yaxis_title="share of gain kept")
    return fig, None


def fig_drift(runs: pd.DataFrame, value: str = "relative"):
    """Drift by module type per algorithm (mean over runs): value = relative (||delta||/||base||
    per module type; overall first) or top_share (share of the largest 1% of update entries)."""
    groups = _analysis_groups(runs, "drift_relative")
    if not groups:
        return None, None
    types = [t for t in DRIFT_TYPES if f"drift_modules.{t}.{value}" in runs]
    x = (["overall"] if value == "relative" else []) + types
    traces, counts, labels = [], [], []
    for facet in _facet_order(groups, runs):
        n0 = len(traces)
        for algo in _algo_sorted(groups[facet]):
            sub = runs[runs["run_id"].isin(groups[facet][algo])]
            cols = (["drift_relative"] if value == "relative" else []) + [f"drift_modules.{t}.{value}" for t in types]
            y = np.array([pd.to_numeric(sub[c], errors="coerce").mean() for c in cols])
            traces.append(_trace("bar", x=x, y=y, name=algo, marker=dict(color=COLORS.get(algo, "#333333")),
                                 meta={"facet": facet, "algo": algo, "run_ids": groups[facet][algo]}))
        if len(traces) > n0:
            labels.append(facet)
            counts.append(len(traces) - n0)
    if value == "relative":
        title, yaxis = ("Relative L2 drift ||Δθ|| / ||θ_base|| by module type (mean over runs); menu: model",
                        dict(type="log", title="relative drift"))
    else:
        title, yaxis = ("Where the largest 1% of update entries sit: share by module type (mean over runs); "
                        "menu: model", dict(title="share of top-1% entries"))
    fig = _menu_figure(traces, labels, counts, title=title, barmode="group", xaxis_title="module type",
                       yaxis=yaxis)
    return fig, None


def optuna_figures(sweep_dir: Path):
    """[(id, title, figure)] from ``<sweep>/optuna.journal``, plus notes."""
    path = sweep_dir / "optuna.journal"
    if not path.exists():
        return [], [f"no Optuna study ({path.name} not found): no Optuna plots"]
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    figs, notes = [], []
    try:
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
        names = optuna.get_all_study_names(storage)
    except Exception as e:  # noqa: BLE001 - a broken journal must not break the page
        return [], [f"Optuna journal unreadable ({type(e).__name__}: {e}); no Optuna plots"]
    for i, name in enumerate(names):
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if any(t.intermediate_values for t in trials):
                f = optuna.visualization.plot_intermediate_values(study)
                f.update_layout(title=f"Optuna study {name}: intermediate values ({len(trials)} trials)")
                figs.append((f"fig-optuna-{i}-intermediate", f"Optuna {name}: intermediate values", f))
            else:
                notes.append(f"Optuna study {name}: no intermediate values reported")
            varying = {k for t in complete for k in t.params
                       if len({repr(u.params.get(k)) for u in complete}) > 1}
            if len(complete) >= 2 and varying:
                try:
                    f = optuna.visualization.plot_param_importances(study)
                    f.update_layout(title=f"Optuna study {name}: parameter importance ({len(complete)} complete)")
                    figs.append((f"fig-optuna-{i}-importance", f"Optuna {name}: parameter importance", f))
                except Exception as e:  # noqa: BLE001
                    notes.append(f"Optuna study {name}: no importance plot ({type(e).__name__}: {e})")
            else:
                notes.append(f"Optuna study {name}: parameter importance needs >= 2 complete trials "
                             f"with varying params ({len(complete)} complete)")
    return figs, notes


# ---------------------------------------------------------------------------------------
# the page
def _esc(v) -> str:
    """Any value as HTML text: every string that reaches the page (model, task, sweep and
    algorithm names, statuses, errors, notes) comes from configs, data or errors and may hold
    markup; it goes through here (tables: :func:`_table`; figures: :func:`_figure_block`)."""
    return _html.escape(str(v), quote=True)


def _summary_lines(agg, trend: dict, notes: list[str]) -> list[str]:
    """The summary list's lines as HTML (every value escaped)."""
    runs = agg.runs
    counts = runs["status"].value_counts()
    lines = [f"{len(runs)} runs in {_esc(agg.sweep_dir)}: "
             + ", ".join(f"{int(v)} {_esc(k)}" for k, v in counts.items())
             + (f"; {len(agg.skipped)} unreadable run directories skipped" if agg.skipped else "") + "."]
    algos = runs["algo"].value_counts()
    models = runs.groupby("model")["params"].median().sort_values()
    pops = sorted(pd.to_numeric(runs.loc[runs["algo"] != "none", "pop"], errors="coerce").dropna().unique())
    lines.append("Algorithms: " + ", ".join(f"{_esc(k)} ({v})" for k, v in algos.items())
                 + "; models: " + ", ".join(f"{_esc(m)} ({_fmt_params(p)})" if pd.notna(p) else _esc(m)
                                           for m, p in models.items())
                 + "; populations: " + (", ".join(str(int(p)) for p in pops) or "-")
                 + f"; seeds: {runs['seed'].nunique()}; tasks: "
                 + f"{', '.join(_esc(t) for t in runs['task'].dropna().unique())}.")
    if trend.get("slope") is not None:
        ci = trend.get("slope_ci")
        lines.append(f"Trend ({_esc(trend['metric'])}, {_esc(trend['algo'])} runs, {trend['n_model_sizes']} model "
                     f"sizes, {trend['n_seeds']} seeds): log pop* = {trend['intercept']:.3g} + {trend['slope']:.3g} "
                     f"log params" + (f", slope 95% CI [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")
                     + f". Claim \"larger models need smaller populations\": <b>{_esc(trend['verdict'])}</b> "
                     f"({_esc(trend['verdict_reason'])}).")
    else:
        lines.append(f"Trend: <b>{_esc(trend['verdict'])}</b> ({_esc(trend['verdict_reason'])}).")
    missing = [a for a in ("es", "grpo", "grpo_es", "es_grpo") if a not in algos]
    if missing:
        notes = [f"no {', '.join(missing)} runs"] + notes
    if 0 < trend.get("n_model_sizes", 0) < 3:
        notes = [f"only {trend['n_model_sizes']} model size(s): trend not meaningful"] + notes
    if notes:
        lines.append("Missing or odd: " + "; ".join(_esc(n) for n in notes) + ".")
    return lines


def _table(rows: list[dict], cols: list[str], table_id: str, limit: int = 500) -> str:
    head = "".join(f"<th>{_html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_html.escape(_cell(r.get(c)))}</td>" for c in cols) + "</tr>"
                   for r in rows[:limit])
    more = f"<p>... {len(rows) - limit} more (see runs.csv / aggregate.json)</p>" if len(rows) > limit else ""
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}'


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _figure_block(fig_id: str, title: str, fig) -> str:
    data = fig.to_json() if isinstance(fig, go.Figure) else json.dumps(jsonable(fig), separators=(",", ":"))
    # names and titles come from configs and data: as JSON escapes, no "<", ">" or "&" is left in
    # the page's text, so no string can end the script block or open a tag (JSON.parse restores them)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return (f'<section><h2>{_html.escape(title)}</h2><div id="{fig_id}" class="figure"></div>\n'
            f'<script type="application/json" class="figure-data" data-figure="{fig_id}">{data}</script></section>\n')


def claims_html(result: dict | None) -> str:
    """The claims section (esopt.study.claims) at the top of the page; empty without claims."""
    if not result:
        return ""
    return claims.html_section(result)


def build(agg, sweep_dir: Path | None = None) -> str:
    """The whole page for an :class:`esopt.study.tables.Aggregate` (with its trend) as HTML text."""
    from plotly.offline import get_plotlyjs

    runs, curves, metric, trend = agg.runs, agg.curves, agg.metric, agg.trend
    if metric is None or trend is None:                    # a bare esopt.study.tables.load() result
        metric = metric or tables.metric_column("pass@1", runs.columns)
        trend = trend or fit.fit_runs(runs, metric)
    sweep_dir = Path(sweep_dir or agg.sweep_dir)
    try:
        runs_dir = tables.find_runs_dir(sweep_dir)
    except ValueError:
        runs_dir = None
    notes = list(agg.notes)
    groups = best_groups(runs, metric)
    blocks = []
    for fig_id, title, make in (
        ("fig-parcoords", "Hyperparameters (parallel coordinates)", lambda: fig_parcoords(runs, metric)),
        ("fig-curves", "Learning curves", lambda: fig_curves(runs, curves, metric)),
        ("fig-passk", "Pass@K curves", lambda: fig_passk(runs, metric, runs_dir, groups=groups)),
        ("fig-entropy", "Held-out entropy over training: ES against GRPO", lambda: fig_entropy(runs, curves, metric, groups)),
        ("fig-heatmap", "Population vs model size: heatmap", lambda: fig_heatmap(trend)),
        ("fig-trend", "Population vs model size: trend fit", lambda: fig_trend(trend)),
        ("fig-status", "Run status", lambda: fig_status(runs)),
        ("fig-pruning", "Why runs were pruned", lambda: fig_pruning(runs)),
        ("fig-sparsity", "Functional sparsity of the updates", lambda: fig_sparsity(runs, runs_dir)),
        ("fig-drift", "Parameter drift by module type", lambda: fig_drift(runs, "relative")),
        ("fig-drift-top", "Largest 1% of updates by module type", lambda: fig_drift(runs, "top_share")),
    ):
        fig, note = make()
        if fig is None and note is None:                   # optional figure without data: no section
            continue
        if fig is None:
            notes.append(note)
            blocks.append(f'<section><h2>{_html.escape(title)}</h2><p class="missing" id="{fig_id}-missing">'
                          f'{_html.escape(note)}</p></section>')
        else:
            blocks.append(_figure_block(fig_id, title, fig))
    problems = runs[runs["status"] != "completed"]
    last_it = curves.groupby("run_id")["iteration"].max() if "iteration" in curves else pd.Series(dtype=float)
    prow = [{**r, "last iteration": last_it.get(r["run_id"])} for r in
            problems[[c for c in ("run_id", "status", "algo", "model", "pop", "seed", "error") if c in problems]]
            .to_dict("records")]
    counts = problems["status"].value_counts().to_dict()
    blocks.append(f'<section><h2>Pruned, failed and running runs ({len(problems)}: '
                  + (", ".join(f"{v} {_esc(k)}" for k, v in counts.items()) or "none") + ")</h2>"
                  + _table(prow, ["run_id", "status", "algo", "model", "pop", "seed", "last iteration", "error"],
                           "table-problems") + "</section>")
    blocks.append(f"<section><h2>Unreadable run directories skipped ({len(agg.skipped)})</h2>"
                  + _table(agg.skipped, ["run_id", "reason"], "table-skipped") + "</section>")
    ofigs, onotes = optuna_figures(sweep_dir)
    notes += onotes
    for fig_id, title, fig in ofigs:
        blocks.append(_figure_block(fig_id, title, fig))
    summary = "".join(f"<li>{line}</li>" for line in _summary_lines(agg, trend, notes))
    title = f"esopt sweep report: {_html.escape(sweep_dir.name)}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }}
section {{ margin: 2em 0; }} .figure {{ width: 100%; height: 520px; }}
table {{ border-collapse: collapse; font-size: 0.85em; }} td, th {{ border: 1px solid #ccc; padding: 2px 6px; }}
.missing {{ color: #a33; }}
</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>{title}</h1>
{claims_html(getattr(agg, "claims", None))}
<section id="summary"><h2>Summary</h2><ul>{summary}</ul>
<p>Files beside this page: runs.csv / runs.parquet (one row per run), curves.parquet (every metrics line),
trend.json (the fit), aggregate.json (skipped runs, notes).</p></section>
{''.join(blocks)}
<script type="text/javascript">
document.querySelectorAll('script.figure-data').forEach(function (el) {{
  var fig = JSON.parse(el.textContent);
  Plotly.newPlot(el.dataset.figure, fig.data, fig.layout || {{}}, {{responsive: true}});
}});
</script>
</body></html>
"""


# ---------------------------------------------------------------------------------------
# reading a page back
_DTYPES = {"f8": np.float64, "f4": np.float32, "i1": np.int8, "i2": np.int16, "i4": np.int32,
           "u1": np.uint8, "u2": np.uint16, "u4": np.uint32, "i8": np.int64, "u8": np.uint64}


def _decode(obj):
    if isinstance(obj, dict):
        if set(obj) >= {"dtype", "bdata"}:
            arr = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=_DTYPES[obj["dtype"]])
            return arr.reshape(obj["shape"]) if "shape" in obj and isinstance(obj["shape"], list) else (
                arr.reshape([int(s) for s in str(obj["shape"]).split(",")]) if "shape" in obj else arr)
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def figure_ids(page: str) -> list[str]:
    return re.findall(r'<script type="application/json" class="figure-data" data-figure="([^"]+)">', page)


def figure_data(page: str, fig_id: str) -> dict:
    """The Plotly figure (data + layout) embedded for ``fig_id`` in a page, arrays decoded."""
    m = re.search(rf'<script type="application/json" class="figure-data" data-figure="{re.escape(fig_id)}">'
                  r"(.*?)</script>", page, re.S)
    if not m:
        raise KeyError(f"no figure {fig_id!r} in the page (have: {', '.join(figure_ids(page))})")
    return _decode(json.loads(m.group(1)))
