"""The page's figures of a sweep's runs; each returns (figure or None, a note on what is
missing). Ids and contents are listed in ``esopt.study.report.page``."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from esopt.algorithms import trains
from esopt.core.metrics import pass_at_k, percentile_interval, resample_indices
from esopt.core.store import RunDir
from esopt.study.report.plotting import (BASE, algo_color, band_trace, close_group, facet_groups, facet_order, figure_dict,
                                  fmt_params, layout_dict, menu_figure, reads, run_label, trace_dict)

BAND_LEVEL = 0.95        # the Pass@K bands' percentile interval
PASSK_RUNS = 30          # Pass@K curves read per-problem counts of at most this many seeds
CURVE_RUNS = 40          # learning curves drawn for at most this many runs (best by the metric)
FIT_COLOR = "#1f77b4"    # the trend fit's line and band
CURVES = (("reward_mean", "train", "reward"), ("pass@1", "eval", "held-out pass@1"),
          ("entropy", "eval", "held-out entropy"), ("js_succ", "train", "JS_succ diversity"))


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
    fig = figure_dict(trace_dict("parcoords", 
        line=dict(color=vals, colorscale="Viridis", showscale=True, colorbar=dict(title=dict(text=metric))),
        dimensions=dims, meta={"run_ids": ok["run_id"].tolist()}))
    fig["layout"] = layout_dict(title=f"Hyperparameters of {len(ok)} runs, coloured by {metric} "
                            "(drag on an axis to brush)")
    return fig, None


def fig_curves(runs: pd.DataFrame, curves: pd.DataFrame, metric: str):
    if curves.empty or "kind" not in curves:
        return None, "no metrics lines: no learning curves"
    order = runs.sort_values(metric, ascending=False, na_position="last") if metric in runs else runs
    have = set(curves["run_id"].unique())
    chosen = [r for r in order["run_id"] if r in have][:CURVE_RUNS]
    info = runs.set_index("run_id")
    names = {rid: run_label(info.loc[rid]) for rid in chosen}
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
                traces.append(trace_dict(
                    "scatter", x=g[xcol].to_numpy(dtype=float), y=g[col].to_numpy(dtype=float),
                    mode="lines+markers", name=names[rid], legendgroup=rid,
                    line=dict(color=algo_color(algos[rid])), marker=dict(size=4),
                    meta={"run_id": rid, "metric": col, "x": xcol}))
                n += 1
            if n:
                labels.append(f"{title} vs {xname}")
                counts.append(n)
    if not traces:
        return None, "no reward / pass@1 / entropy / JS lines in metrics.jsonl"
    note = f" (best {len(chosen)} of {len(runs)} runs by {metric})" if len(runs) > len(chosen) else ""
    fig = menu_figure(traces, labels, counts, always_menu=True,
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
        ev = (RunDir(runs_dir / rid).read_summary() or {}).get(which) or {}
        cc = ev.get("correct_counts")
        if cc and ev.get("samples"):
            return int(ev["samples"]), np.asarray(cc, dtype=float)
    except (ValueError, AttributeError, TypeError):
        pass
    return None


def fig_passk(runs: pd.DataFrame, metric: str, runs_dir: Path | None, seed: int = 0, groups=None):
    groups = best_groups(runs, metric) if groups is None else groups
    if not groups:
        return None, f"no completed runs with {metric}: no Pass@K curves"
    rng = np.random.default_rng(seed)
    facets = facet_groups(groups, runs)
    traces, counts, labels = [], [], []
    for facet in facet_order(facets, runs):
        n0 = len(traces)
        entries = facets[facet]
        base_ids = [r for algo, g in entries for r in g["run_ids"]]
        series = [(BASE, base_ids, "base", "base model")]
        series += [(algo, g["run_ids"], "final", _cfg_text(algo, g)) for algo, g in entries if trains(algo)]
        for algo, ids, which, desc in series:
            got = [_read_counts(runs_dir, r, which) for r in ids[:PASSK_RUNS]]
            got = [g for g in got if g is not None]
            if which == "base":                                    # identical base evals: once
                uniq = {(g[0], g[1].tobytes()): g for g in got}
                got = list(uniq.values())
            color = algo_color(algo)
            meta = {"facet": facet, "algo": algo, "run_ids": ids}
            if got and len({(g[0], len(g[1])) for g in got}) == 1:
                ks, mean, lo, hi = _passk_from_counts([g[1] for g in got], got[0][0], rng)
                source = "correct_counts"
            else:                                                  # fall back to pass@k columns
                ks, mean, lo, hi = _passk_from_table(runs[runs["run_id"].isin(ids)], which)
                source = "pass@k columns"
            if ks is None:
                continue
            traces.append(band_trace(ks, lo, hi, color, f"{facet} {algo}", {**meta, "kind": "band"}))
            traces.append(trace_dict("scatter", x=ks, y=mean, mode="lines+markers", name=f"{algo}: {desc}",
                                     line=dict(color=color), marker=dict(size=4), legendgroup=f"{facet} {algo}",
                                     meta={**meta, "kind": "mean", "source": source,
                                           "n_runs": len(got) if source == "correct_counts" else len(ids)}))
        close_group(traces, n0, facet, labels, counts)
    if not traces:
        return None, "no Pass@K data (no pass@k in summaries)"
    fig = menu_figure(traces, labels, counts,
                       title="Pass@K (mean over seeds, 95% bootstrap band over problems); menu: model",
                       xaxis=dict(type="log", title="k"), yaxis_title="pass@k")
    return fig, None


def _cfg_text(algo: str, g: dict) -> str:
    c = {k: (None if pd.isna(v) else v) for k, v in g["config"].items()}
    bits = [f"N={c['pop']:g}" if reads(algo, "pop") and c.get("pop") is not None else None,
            f"σ={c['sigma']:g}" if reads(algo, "sigma") and c.get("sigma") is not None else None,
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
              if trains(k[2])}
    ev = curves[(curves["kind"] == "eval") & curves[col].notna()]
    facets = facet_groups(groups, runs)
    traces, counts, labels = [], [], []
    for facet in facet_order(facets, runs):
        n0 = len(traces)
        for algo, g in facets[facet]:
            e = ev[ev["run_id"].isin(g["run_ids"])]
            if e.empty:
                continue
            agg = e.groupby("iteration").agg(mean=(col, "mean"), n=(col, "size"),
                                             lo=(f"{col}_lo", "mean") if f"{col}_lo" in e else (col, "min"),
                                             hi=(f"{col}_hi", "mean") if f"{col}_hi" in e else (col, "max"))
            x = agg.index.to_numpy(dtype=float)
            color = algo_color(algo)
            meta = {"facet": facet, "algo": algo, "run_ids": g["run_ids"]}
            traces.append(band_trace(x, agg["lo"].to_numpy(), agg["hi"].to_numpy(), color, f"{facet} {algo}",
                                {**meta, "kind": "band"}))
            traces.append(trace_dict("scatter", x=x, y=agg["mean"].to_numpy(), mode="lines+markers", name=algo,
                                     line=dict(color=color), legendgroup=f"{facet} {algo}",
                                     meta={**meta, "kind": "mean"}))
        close_group(traces, n0, facet, labels, counts)
    if not traces:
        return None, "no held-out entropy for trained runs"
    fig = menu_figure(traces, labels, counts,
                       title=f"{'Out-of-domain' if col == 'ood_entropy' else 'Held-out'} token entropy over "
                       "training (mean over seeds; band: evaluator 95% CI); menu: model", xaxis_title="iteration", yaxis_title="entropy (nats)")
    return fig, None


def fig_heatmap(trend: dict):
    models = trend.get("models") or []
    if not models:
        return None, f"no completed {trend.get('algo')} runs: no (model, pop) heatmap"
    pops = sorted({p for m in models for p in m["pops"]})
    if len(models) * len(pops) < 2:   # one cell: nothing to compare
        return None, (f"one model ({models[0]['model']}) and one population (N={pops[0]:g}): a heatmap of one "
                      "cell shows no pattern; sweep model=a,b,... or pop=N,M,... to see how the metric moves")
    z = np.full((len(models), len(pops)), np.nan)
    for i, m in enumerate(models):
        for p, v in zip(m["pops"], m["means"]):
            z[i, pops.index(p)] = v
    ylabels = [f"{m['model']} ({fmt_params(m['params'])})" for m in models]
    fig = figure_dict(trace_dict("heatmap", z=z, x=[str(int(p)) if float(p).is_integer() else str(p) for p in pops],
                               y=ylabels, colorscale="Viridis", colorbar=dict(title=dict(text=trend["metric"])),
                               text=np.where(np.isfinite(z), np.round(z, 3).astype(str), ""),
                               texttemplate="%{text}", meta={"pops": pops, "models": [m["model"] for m in models]}))
    fig["layout"] = layout_dict(title=f"{trend['metric']} by model and population ({trend['algo']}; mean over seeds, "
                            "best sigma/lr setting per cell)", xaxis_title="population N",
                      xaxis_type="category")
    return fig, None



def fig_trend(trend: dict):
    models = trend.get("models") or []
    if not models:
        return None, "no data for the trend fit"
    if len(models) < 2:
        return None, (f"one model size ({models[0]['model']}): a trend of the best population over model size "
                      "needs at least two sizes (claim 7 needs five); sweep model=a,b,c,... to fit it")
    P = [m["params"] for m in models]
    traces = []
    symbols = {"continuous": "circle", "discrete": "square", "efficient": "diamond"}
    for method in ("continuous", "discrete", "efficient"):
        y = [m["pop_star"][method] for m in models]
        ci = [m["pop_star_ci"][method] or [v, v] for m, v in zip(models, y)]
        traces.append(trace_dict("scatter", 
            x=P, y=y, mode="markers", name=f"pop* ({method})", marker=dict(symbol=symbols[method], size=10),
            error_y=dict(type="data", symmetric=False, array=[c[1] - v for c, v in zip(ci, y)],
                         arrayminus=[v - c[0] for c, v in zip(ci, y)]),
            text=[m["model"] for m in models], meta={"method": method, "kind": "points"},
            visible=True if method == "continuous" else "legendonly"))
    band = trend.get("band")
    if band and trend.get("slope") is not None:
        if band.get("pop_lo"):
            traces.append(band_trace(band["params"], band["pop_lo"], band["pop_hi"], FIT_COLOR, "fit band",
                                {"kind": "band"}))
        traces.append(trace_dict("scatter", x=band["params"], y=band["pop_fit"], mode="lines", line=dict(color=FIT_COLOR),
                                 name=f"fit: slope {trend['slope']:.3g}", meta={"kind": "fit",
                                 "slope": trend["slope"], "intercept": trend["intercept"]}))
    fig = figure_dict(traces)
    ci = trend.get("slope_ci")
    sub = (f"slope {trend['slope']:.3g}" + (f" [95% CI {ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")
           if trend.get("slope") is not None else "no fit")
    fig["layout"] = layout_dict(title=f"Best population vs model size: log pop* = a + b log params; {sub}; "
                            f"reads: {trend['reading']} (descriptive)",
                      xaxis=dict(type="log", title="model parameters"),
                      yaxis=dict(type="log", title="pop* (best population)"))
    return fig, None


def fig_status(runs: pd.DataFrame):
    tab = runs.groupby(["algo", "status"]).size().unstack(fill_value=0)
    traces = [trace_dict("bar", x=tab.index.tolist(), y=tab[s].tolist(), name=s, meta={"status": s})
              for s in tab.columns]
    fig = figure_dict(traces)
    fig["layout"] = layout_dict(title="Runs by status and algorithm", barmode="stack", xaxis_title="algo")
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
        return f"{row['run_id']} ({run_label(row)}{extra})"

    labels = [label(row) for _, row in cut.iterrows()]
    step = lambda s: "?" if s is None or (isinstance(s, float) and math.isnan(s)) else int(s)  # noqa: E731
    hover = [f"{p}, iteration {step(s)}: {st}<br>reference: {ref}"  # escaped by report.plotly_text
             for p, s, st, ref in zip(col("pruning.pruner"), col("pruning.step"), col("pruning.statistic"),
                                      col("pruning.reference"))]
    value = [float(v) for v in cut["pruning.value"]]
    thr = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
           for v in col("pruning.threshold")]
    traces = [trace_dict("scatter", x=labels, y=value, mode="markers", name="statistic", text=hover,
                     hoverinfo="text+y", marker=dict(size=10, color="#d62728"), meta={"kind": "value"}),
              trace_dict("scatter", x=labels, y=thr, mode="markers", name="threshold", text=hover,
                     hoverinfo="text+y", marker=dict(size=14, symbol="line-ew-open", color="#222"),
                     meta={"kind": "threshold"})]
    fig = figure_dict(traces)
    fig["layout"] = layout_dict(title="Why runs were pruned: the pruner's statistic at the step it was cut, "
                                  "against its threshold (hover: step, statistic, reference)",
                            xaxis_title="pruned run", yaxis_title="statistic / threshold")
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
