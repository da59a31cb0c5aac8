"""Population size versus model size: best pop per model and a log-log trend with bootstrap CIs.

The question (Ba et al. 2026, arXiv 2608.27351): do larger models need smaller ES
populations? For each model size m we find the best population N*_m by a final metric, then fit

    log N*_m = a + b * log P_m          (natural logs, ordinary least squares over models)

and describe the trend by b (``reading``: falls, rises or flat within its interval). The fit is
descriptive: the one verdict on "larger models need smaller populations" is claim 7's
(``esopt.study.claims``, a pre-registered test at >= 5 sizes in the family of claims). Intervals come from a
bootstrap that redoes the whole pipeline: resample runs with replacement within each
(model, pop, setting) cell, recompute cell means (widened by sqrt(n/(n-1)),
``esopt.core.metrics.widen``), N*_m and (a, b); 95% = 2.5/97.5 percentiles.

Three estimates of N*_m (``trend.json`` holds all three; ``method`` names the primary one):
    discrete    argmax over tested pops of the cell mean (ties -> the smaller pop)
    continuous  vertex of a quadratic fit of the cell mean against log2 N (clipped to the
                tested range); the discrete argmax when the fit is not concave or < 3 pops
    efficient   smallest pop whose mean is within ``tolerance`` of the best mean (how the
                paper reads its table: N=16 is "within 0.01" of N=64)

Everything here is pure numpy on arrays; vectorised over bootstrap resamples (rows).
"""

from __future__ import annotations

import math

import numpy as np

from esopt.core.metrics import percentile_interval, resample_indices, widen

BAND_POINTS = 25             # x positions of the trend's drawn band (log-spaced over the sizes)
TIE_SLACK = 1e-12            # a mean this close below best - tolerance counts as within it
RESAMPLE_BLOCK = 2_000_000   # resampled run values held at once (rows of a bootstrap block x runs)
# what trend.json describes (it states no claim: whether larger models need smaller populations is claim 7's)
DESCRIBES = "how the best population changes with model size: the slope of log pop* on log params"
METHODS = ("continuous", "discrete", "efficient")


def discrete_peak(y: np.ndarray) -> np.ndarray:
    """Index of the best pop per row of ``y`` (B, P) (first = smallest pop on ties)."""
    return np.argmax(y, axis=-1)


def quadratic_peak(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Continuous arg-max per row of ``y`` (B, P) over sorted ``x`` = log2 pop (P,).

    Least squares y ~ c0 + c1 t + c2 t^2 with t = x - mean(x); if c2 < 0 the vertex
    t* = -c1 / (2 c2), clipped to [min x, max x]; otherwise (or with fewer than three pops)
    x[argmax y]. Returns x* per row.
    """
    y = np.atleast_2d(y)
    fallback = x[discrete_peak(y)]
    if len(x) < 3:
        return fallback
    t = x - x.mean()
    design = np.stack([np.ones_like(t), t, t * t], axis=1)           # (P, 3)
    coef = y @ np.linalg.pinv(design).T                               # (B, 3)
    c1, c2 = coef[:, 1], coef[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.clip(-c1 / (2 * c2) + x.mean(), x.min(), x.max())
    return np.where(c2 < 0, vertex, fallback)


def efficient_peak(y: np.ndarray, tolerance: float) -> np.ndarray:
    """N*: index of the smallest pop whose mean is within ``tolerance`` of the best,
    ``min {i : y_i >= max_j y_j - tolerance}``, per row of ``y`` (B, P) (pops sorted ascending).

    The one home of "the smallest population within tolerance of the best" (the trend fit's
    ``efficient`` variant and claim 7 both call it); a mean at the boundary counts as within
    (``TIE_SLACK`` absorbs float rounding of ``best - tolerance``).
    """
    best = y.max(axis=-1, keepdims=True)
    return np.argmax(y >= best - tolerance - TIE_SLACK, axis=-1)


def loglog_fit(params: np.ndarray, pop_star: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OLS of log pop* on log params, per row of ``pop_star`` (B, M):

        b = sum_m (x_m - x̄)(y_m - ȳ) / sum_m (x_m - x̄)^2,   a = ȳ - b x̄,
        x = ln params, y = ln pop*.   Returns (intercept a, slope b), each (B,).
    """
    x = np.log(np.asarray(params, dtype=np.float64))
    y = np.log(np.atleast_2d(pop_star))
    xc = x - x.mean()
    slope = (y - y.mean(axis=1, keepdims=True)) @ xc / np.sum(xc * xc)
    return y.mean(axis=1) - slope * x.mean(), slope


DESCRIPTIVE = "descriptive; the verdict is claim 7's (claims.json)"


def reading(slope: float | None, ci: tuple[float, float] | None, n_models: int) -> tuple[str, str]:
    """How the fitted trend reads (a description, not a verdict: claim 7 decides the claim).

    "too few sizes" with fewer than three model sizes; "falls" if slope < 0 and the interval
    excludes 0; "rises" if slope > 0 and the interval excludes 0; else "flat" (within its interval).
    """
    if n_models < 3:
        return "too few sizes", f"{n_models} model size(s); a trend needs at least 3; {DESCRIPTIVE}"
    if slope is None or ci is None or not all(map(math.isfinite, ci)):
        return "flat", f"no bootstrap interval; {DESCRIPTIVE}"
    lo, hi = ci
    if slope < 0 and hi < 0:
        return "falls", f"slope {slope:.3g} < 0, its 95% interval [{lo:.3g}, {hi:.3g}] excludes 0; {DESCRIPTIVE}"
    if slope > 0 and lo > 0:
        return "rises", f"slope {slope:.3g} > 0, its 95% interval [{lo:.3g}, {hi:.3g}] excludes 0; {DESCRIPTIVE}"
    return "flat", f"the 95% interval [{lo:.3g}, {hi:.3g}] of slope {slope:.3g} includes 0; {DESCRIPTIVE}"


def _cell_means(values: np.ndarray, sub: np.ndarray, n_sub: int, n_boot: int, rng) -> np.ndarray:
    """Row 0: observed sub-cell means; rows 1..n_boot: means of within-sub-cell resamples.

    ``sub`` (R,) is each run's sub-cell index, runs sorted by it. Resampling draws, for every run position, a
    uniformly random run of the same sub-cell (with replacement,
    :func:`esopt.core.metrics.resample_indices`); each resampled mean is widened by
    :func:`esopt.core.metrics.widen` with n = the sub-cell's runs (n = 1 cells have no spread).
    """
    counts = np.bincount(sub, minlength=n_sub)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = np.empty((n_boot + 1, n_sub))
    out[0] = np.bincount(sub, weights=values, minlength=n_sub) / counts
    chunk = max(1, RESAMPLE_BLOCK // max(len(values), 1))             # bound memory
    for b0 in range(0, n_boot, chunk):
        nb = min(chunk, n_boot - b0)
        idx = resample_indices(rng, nb, len(values), groups=sub)
        sums = np.add.reduceat(values[idx], starts, axis=1)
        out[1 + b0:1 + b0 + nb] = sums / counts
    out[1:] = widen(out[1:], out[0], counts)
    return out


def fit_trend(model, params, pop, value, setting=None, seed_ids=None, *, tolerance: float = 0.01,
              n_boot: int = 1000, seed: int = 0, ci: float = 0.95) -> dict:
    """The whole pipeline on per-run arrays (one entry per run, finite ``value`` only).

    model: names; params: parameter counts; pop: population sizes; value: the metric;
    setting: optional label of the other hyperparameters (sigma, lr, ...). A (model, pop) cell
    scores the best of its settings' means (over seeds): with one setting per cell this is
    the plain mean over seeds. Returns the JSON-able trend dict (see module docstring).
    """
    model = np.asarray(model, dtype=object)
    params = np.asarray(params, dtype=np.float64)
    pop = np.asarray(pop, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    setting = np.zeros(len(value), dtype=object) if setting is None else np.asarray(setting, dtype=object)
    keep = np.isfinite(value) & np.isfinite(params) & np.isfinite(pop) & (pop > 0) & (params > 0)
    model, params, pop, value, setting = model[keep], params[keep], pop[keep], value[keep], setting[keep]
    n_seeds = len(set(np.asarray(seed_ids, dtype=object)[keep].tolist())) if seed_ids is not None else None
    out = {"describes": DESCRIBES, "method": "continuous: vertex of a quadratic fit of the metric against "
           "log2(pop) per model (discrete argmax if not concave); log pop* = intercept + slope * "
           "log params, natural logs, least squares; intervals: percentile bootstrap resampling runs "
           "within each (model, pop, setting) cell",
           "tolerance": tolerance, "bootstrap": int(n_boot), "seed": seed, "ci_level": ci,
           "n_runs": int(len(value)), "n_seeds": n_seeds, "slope": None, "intercept": None,
           "slope_ci": None, "intercept_ci": None, "models": [], "variants": {}, "band": None}

    # models ordered by size; cells (model, pop) and sub-cells (model, pop, setting)
    names = sorted(set(model.tolist()), key=lambda m: (np.median(params[model == m]), m))
    out["n_model_sizes"] = len(names)
    if len(value) == 0:
        out["reading"], out["reading_reason"] = "too few sizes", f"no finished runs with this metric; {DESCRIPTIVE}"
        return out
    m_idx = np.array([names.index(m) for m in model])
    settings = sorted(set(map(str, setting.tolist())))
    s_idx = np.array([settings.index(str(s)) for s in setting])
    keys = np.stack([m_idx, pop, s_idx], axis=1)
    uniq, sub = np.unique(keys, axis=0, return_inverse=True)
    sub = sub.ravel()
    order = np.argsort(sub, kind="stable")
    rng = np.random.default_rng(seed)
    means = _cell_means(value[order], sub[order], len(uniq), n_boot, rng)    # (B+1, S)
    cells, cell_of_sub = np.unique(uniq[:, :2], axis=0, return_inverse=True)
    cell_of_sub = cell_of_sub.ravel()
    cell_vals = np.full((means.shape[0], len(cells)), -np.inf)
    for s in range(len(uniq)):                                                # best setting
        cell_vals[:, cell_of_sub[s]] = np.maximum(cell_vals[:, cell_of_sub[s]], means[:, s])

    stars = {m: [] for m in METHODS}                                          # (B+1,) per model
    for mi, name in enumerate(names):
        cols = np.where(cells[:, 0] == mi)[0]
        pops = cells[cols, 1]                                                 # sorted
        x = np.log2(pops)
        y = cell_vals[:, cols]
        star = {"discrete": pops[discrete_peak(y)], "continuous": 2.0 ** quadratic_peak(x, y),
                "efficient": pops[efficient_peak(y, tolerance)]}
        for m in METHODS:
            stars[m].append(star[m])
        in_model = m_idx == mi
        n_cell = [int(np.sum(in_model & (pop == p))) for p in pops]
        out["models"].append({
            "model": name, "params": float(np.median(params[in_model])),
            "pops": pops.tolist(), "means": y[0].tolist(), "n_runs": n_cell,
            "best_mean": float(y[0].max()),
            "pop_star": {m: float(star[m][0]) for m in METHODS},
            "pop_star_ci": {m: percentile_interval(star[m][1:], ci) for m in METHODS}})
    out["runs_per_cell"] = [min(min(m["n_runs"]) for m in out["models"]),
                            max(max(m["n_runs"]) for m in out["models"])]
    out["n_settings_max"] = int(max(np.bincount(cell_of_sub))) if len(cell_of_sub) else 0

    P = np.array([m["params"] for m in out["models"]])
    out["n_model_sizes"] = len(set(P.tolist()))
    out["variants"], out["band"] = fit_variants(P, stars, ci, n_boot)
    primary = out["variants"]["continuous"]
    for key in ("slope", "intercept", "slope_ci", "intercept_ci", "reading", "reading_reason"):
        out[key] = primary[key]
    return out


def fit_variants(P: np.ndarray, stars: dict, ci: float, n_boot: int) -> tuple[dict, dict | None]:
    """Per N* estimate (``METHODS``): the log-log fit, its intervals and reading; and the band of
    the continuous fit drawn on the page. ``stars[method]``: per model, (B+1,) N* replicates."""
    n_sizes = len(set(P.tolist()))
    variants, band = {}, None
    for m in METHODS:
        var = {"slope": None, "intercept": None, "slope_ci": None, "intercept_ci": None}
        if n_sizes >= 2:
            a, b = loglog_fit(P, np.stack(stars[m], axis=1))                  # (B+1,)
            var.update(slope=float(b[0]), intercept=float(a[0]),
                       slope_ci=percentile_interval(b[1:], ci), intercept_ci=percentile_interval(a[1:], ci))
            if m == "continuous":
                grid = np.linspace(np.log(P.min()), np.log(P.max()), BAND_POINTS)
                pred = a[:, None] + b[:, None] * grid[None, :]
                lo, hi = percentile_interval(pred[1:], ci, axis=0) if n_boot else (None, None)
                band = {"params": np.exp(grid).tolist(), "pop_fit": np.exp(pred[0]).tolist(),
                        "pop_lo": np.exp(lo).tolist() if n_boot else None,
                        "pop_hi": np.exp(hi).tolist() if n_boot else None}
        var["reading"], var["reading_reason"] = reading(var["slope"], var["slope_ci"], n_sizes)
        variants[m] = var
    return variants, band


def fit_runs(runs, metric: str, *, algo: str = "es", tolerance: float = 0.01, n_boot: int = 1000,
             seed: int = 0) -> dict:
    """fit_trend on a runs table: completed runs of ``algo`` with a finite ``metric``.

    The other hyperparameters (sigma, lr, iterations, task) form each run's "setting".
    """
    sel = runs[(runs["status"] == "completed") & (runs["algo"] == algo)] if len(runs) else runs
    sel = sel[sel[metric].notna() & sel["params"].notna() & sel["pop"].notna()] if metric in sel else sel.iloc[:0]
    setting_cols = [c for c in ("sigma", "lr", "iterations", "task") if c in sel.columns]
    setting = None
    for c in setting_cols:                       # vectorised "sigma|lr|iterations|task" labels
        part = sel[c].astype(str)
        setting = part if setting is None else setting + "|" + part
    out = fit_trend(sel["model"].to_numpy() if len(sel) else [], sel["params"].to_numpy(dtype=float) if len(sel) else [],
                    sel["pop"].to_numpy(dtype=float) if len(sel) else [],
                    sel[metric].to_numpy(dtype=float) if len(sel) else [],
                    setting=None if setting is None or not len(sel) else setting.to_numpy(),
                    seed_ids=sel["seed"].to_numpy() if "seed" in sel and len(sel) else [],
                    tolerance=tolerance, n_boot=n_boot, seed=seed)
    out = {"metric": metric, "algo": algo, **out}
    if not len(sel):
        out["reading_reason"] = f"no completed {algo} runs with {metric}; {DESCRIPTIVE}"
    return out
