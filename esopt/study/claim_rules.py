"""The seven claims' rules, each a pure function of run records: effect, 95% interval, power
(minimum detectable effect), verdict. The rules, their statistics and their guards are stated
in ``esopt.study.claims`` (which chooses the comparison cell and runs them all)."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Iterable

import numpy as np

from esopt.core.metrics import bootstrap_means, bootstrap_runs, pass_at_k, resample_indices
from esopt.core.metrics import percentile_interval as interval
from esopt.study import fit

LEVEL_Q, POWER_Q = 0.975, 0.80   # the two-sided 5% test and 80% power of every claim
Z_POWER = NormalDist().inv_cdf(LEVEL_Q) + NormalDist().inv_cdf(POWER_Q)  # mde = 2.80 standard errors
MAX_DATA_NEEDED = 100            # beyond this many times the cell's data, say "more than"
GUARD_BOOT = 400                 # replicates of claim 7's guard (ES's gain at each best population)
KEEP_MATCH = 5e-3                # a sparsity curve point counts as the claim's keep fraction within this
CLAIMS = {
    1: ("es_raises_pass1", "ES raises held-out Pass@1 over the base model."),
    2: ("entropy", "GRPO's held-out token entropy falls over training while ES's stays within a band "
                   "of the base."),
    3: ("coverage", "ES's Pass@K at the largest K is at least GRPO's, while GRPO may lead at Pass@1."),
    4: ("diversity", "Within a model and population, the ES population's JS diversity (js_succ) and "
                     "P_pop relate to the Pass@K gain."),
    5: ("sparsity", "Keeping the largest 22% of ES's update keeps at least 90% of its gain."),
    6: ("sequence_combines", "GRPO and ES in sequence combine GRPO's Pass@1 with ES's Pass@K (both "
                             "orders tested)."),
    7: ("pop_vs_size", "Larger models need smaller ES populations (the smallest population within a "
                       "tolerance of the best shrinks with model size)."),
}
VERDICTS = ("yes", "no", "unclear")


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _one_per_seed(runs: list[dict]) -> list[dict]:
    """One run per seed (prefer the one with sparsity data), ordered by seed."""
    by_seed: dict = {}
    for r in sorted(runs, key=lambda r: (r.get("sparsity") is None, str(r["run_id"]))):
        by_seed.setdefault(r.get("seed"), r)
    return [by_seed[s] for s in sorted(by_seed, key=lambda s: (s is None, s))]


# ---------------------------------------------------------------------------------------
# the claims (pure functions of records)
def _claim(cid: int, effect=None, ci=None, verdict: str = "unclear", reason: str = "missing data",
           n: dict | None = None, measure: str = "", definition: str = "", mde: float | None = None,
           boundary: float | None = None, **details) -> dict:
    key, text = CLAIMS[cid]
    need = data_needed(effect, mde, boundary) if verdict == "unclear" else None
    if need is not None:
        details["data_needed"] = need
        reason += (f"; at this effect a decisive answer needs about {need:.3g}x this cell's data (seeds x "
                   f"problems)" if need <= MAX_DATA_NEEDED else f"; at this effect more than {MAX_DATA_NEEDED}x this cell's data would be "
                   "needed (the effect is at the boundary)")
    return {"id": cid, "key": key, "claim": text, "measure": measure, "definition": definition,
            "effect": None if effect is None else float(effect), "ci": ci, "boundary": boundary,
            "mde": None if mde is None else float(mde), "reproduced": verdict, "reason": reason,
            "n": n or {}, "details": details}


def data_needed(effect, power, boundary) -> float | None:
    """How many times the cell's data (seeds x problems) an underpowered claim needs for its
    observed effect to be detectable: the minimum detectable effect shrinks as 1/sqrt(data), so
    ``(mde / |effect - boundary|)^2``; None when the claim is not underpowered. (An estimate: the
    effect may change, and with few seeds the t quantiles shrink too.)"""
    if effect is None or power is None or boundary is None or not np.isfinite(effect):
        return None
    dist = abs(float(effect) - float(boundary))
    if dist >= power:
        return None
    return float("inf") if dist == 0 else float((power / dist) ** 2)


def _fmt(v, ci=None) -> str:
    s = "n/a" if v is None else f"{v:+.3g}"
    return s + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "")


def mde(reps, runs: Iterable | None = None) -> float | None:
    """Minimum detectable effect: the larger of (z_0.975 + z_0.80) * se_boot, se_boot = the
    bootstrap replicates' standard deviation (row 0 = observed, rows 1.. = replicates), and the
    seed-level (t_0.975 + t_0.80; R - 1 df) * sqrt(sum_g var_g / R_g) over ``runs`` (one array of
    per-run effects per independent group of runs, e.g. [ES gains] or [ES values, GRPO values]),
    which a bootstrap over a few seeds underestimates (with 3 seeds, t_0.975 = 4.30)."""
    from scipy.stats import t as student_t

    r = np.asarray(reps, dtype=np.float64)[1:]
    r = r[np.isfinite(r)]
    out = None if r.size < 2 else float(Z_POWER * r.std(ddof=1))
    groups = [np.asarray(g, dtype=np.float64) for g in (runs or [])]
    groups = [g[np.isfinite(g)] for g in groups]
    if groups and all(g.size >= 2 for g in groups):
        df = min(g.size for g in groups) - 1
        se = math.sqrt(sum(float(g.var(ddof=1)) / g.size for g in groups))
        seeds = float((student_t.ppf(LEVEL_Q, df) + student_t.ppf(POWER_Q, df)) * se)
        out = seeds if out is None else max(out, seeds)
    return out


def decide(effect: float, ci, power: float | None, boundary: float, above_is_yes: bool = True) -> tuple[str, str]:
    """(verdict, why) of an effect tested against ``boundary``: "yes" when the interval lies on the
    claim's side of the boundary, "no" on the other side, "unclear" when it straddles it or when
    the effect is closer to the boundary than the minimum detectable effect (underpowered)."""
    if ci is None or effect is None or not np.isfinite(effect):
        return "unclear", "no interval"
    if power is not None and abs(effect - boundary) < power:
        return "unclear", (f"underpowered: the effect is {abs(effect - boundary):.3g} from the boundary "
                           f"{boundary:+.3g}, less than the minimum detectable {power:.3g}")
    above, below = ci[0] > boundary, ci[1] < boundary
    if not above and not below:
        return "unclear", f"interval includes the boundary {boundary:+.3g}"
    yes = above if above_is_yes else below
    return ("yes" if yes else "no"), f"interval {'above' if above else 'below'} {boundary:+.3g}"


def _counts(runs: list[dict], key: str) -> tuple[np.ndarray, int] | None:
    """(R, P) correct counts of ``key`` ("base_counts" / "final_counts") and the samples n."""
    rows = [r for r in runs if r.get(key) is not None and r.get("samples")]
    if not rows or len(rows) < len(runs):
        return None
    P = min(len(r[key]) for r in rows)
    n = min(int(r["samples"]) for r in rows)
    if any(int(r["samples"]) != n for r in rows):
        return None
    return np.array([np.asarray(r[key][:P], dtype=np.float64) for r in rows]), n


def _scores(runs, key, k, P=None):
    got = _counts(runs, key)
    if got is None:
        return None, None
    c, n = got
    if P is not None:
        c = c[:, :P]
    return pass_at_k(n, c, min(k, n)), n


def es_gain(es: list[dict], *, n_boot: int, seed: int, level: float = 0.95) -> dict | None:
    """ES's paired Pass@1 gain (final - base) over runs and problems: {"effect", "ci", "reps",
    "base", "final", "runs", "problems"}, or None without per-problem counts."""
    base, _ = _scores(es, "base_counts", 1)
    final, _ = _scores(es, "final_counts", 1)
    if base is None or final is None:
        return None
    P = min(base.shape[1], final.shape[1])
    b = bootstrap_means({"base": base[:, :P], "final": final[:, :P]}, n_boot=n_boot, seed=seed,
                   pair_rows=[("base", "final")])
    diff = b["final"] - b["base"]
    per_run = (final[:, :P] - base[:, :P]).mean(axis=1)
    return {"effect": float(diff[0]), "ci": interval(diff[1:], level), "reps": diff, "per_run": per_run,
            "base": float(b["base"][0]), "final": float(b["final"][0]), "runs": len(es), "problems": P}


def _learned(gain: dict | None) -> bool:
    """ES learned: its paired Pass@1 gain is clearly positive, by claim 1's own rule (interval above
    0, and the gain at least the minimum detectable effect)."""
    return gain is not None and decide(gain["effect"], gain["ci"], mde(gain["reps"], [gain["per_run"]]),
                                       0.0)[0] == "yes"


def _guard(cid: int, gain: dict | None, what: str, m: str, d: str, boundary=None) -> dict | None:
    """The "ES did not learn" verdict for a claim about ES, or None when ES learned."""
    if _learned(gain):
        return None
    shown = "no per-problem counts" if gain is None else f"Pass@1 gain {_fmt(gain['effect'], gain['ci'])}"
    return _claim(cid, reason=f"unclear: ES did not learn ({what}: {shown}, not clearly above 0)",
                  measure=m, definition=d, boundary=boundary,
                  es_gain=None if gain is None else gain["effect"],
                  es_gain_ci=None if gain is None else gain["ci"])


def claim_es_pass1(es: list[dict], *, n_boot: int, seed: int, level: float = 0.95, **_) -> dict:
    m = "mean over ES runs and problems of Pass@1(final) - Pass@1(base), paired"
    d = "yes if the 95% interval is above 0, no if below 0, at least the minimum detectable effect from 0"
    if not es:
        return _claim(1, reason="missing data: no completed ES runs in the comparison cell", measure=m,
                      definition=d, boundary=0.0)
    g = es_gain(es, n_boot=n_boot, seed=seed, level=level)
    if g is None:
        return _claim(1, reason="missing data: ES runs lack per-problem base/final counts", measure=m,
                      definition=d, boundary=0.0)
    power = mde(g["reps"], [g["per_run"]])
    v, why = decide(g["effect"], g["ci"], power, 0.0)
    return _claim(1, g["effect"], g["ci"], v, f"Pass@1 {g['base']:.3f} -> {g['final']:.3f}: {why}",
                  {"runs": g["runs"], "problems": g["problems"]}, m, d, power, 0.0,
                  base=g["base"], final=g["final"])


def entropy_columns(runs: list[dict]) -> tuple[str, str]:
    """The entropy claim 2 reads: the out-of-domain set's (``base_ood_entropy`` /
    ``final_ood_entropy``, eval.ood_task) when every run has both, else the eval split's."""
    ood = bool(runs) and all(_num(r.get("base_ood_entropy")) is not None
                             and _num(r.get("final_ood_entropy")) is not None for r in runs)
    return ("base_ood_entropy", "final_ood_entropy") if ood else ("base_entropy", "final_entropy")


def _rel_entropy(runs: list[dict], columns=("base_entropy", "final_entropy")) -> np.ndarray:
    out = []
    for r in runs:
        h0, h1 = _num(r.get(columns[0])), _num(r.get(columns[1]))
        if h0 is not None and h1 is not None and h0 > 0:
            out.append((h1 - h0) / h0)
    return np.array(out)


def claim_entropy(es: list[dict], grpo: list[dict], *, n_boot: int, seed: int, band: float,
                  level: float = 0.95, gain: dict | None = None, **_) -> dict:
    cols = entropy_columns(es + grpo)
    on = "out-of-domain" if cols[0] == "base_ood_entropy" else "held-out"
    m = f"GRPO: mean relative change of {on} token entropy (H_final - H_base) / H_base over runs"
    d = (f"yes if GRPO's interval is below 0 and ES's relative change interval lies inside "
         f"(-{band:g}, +{band:g}); no if GRPO's interval is above 0 or ES's lies outside the band; "
         "each at least its minimum detectable effect from its boundary; unclear if ES did not learn")
    g, e = _rel_entropy(grpo, cols), _rel_entropy(es, cols)
    if not len(g) or not len(e):
        miss = ", ".join(a for a, x in (("GRPO", g), ("ES", e)) if not len(x))
        return _claim(2, reason=f"missing data: no {miss} runs with base and final entropy", measure=m,
                      definition=d, band=band, boundary=0.0)
    guard = _guard(2, gain, "the cell's ES runs", m, d, 0.0)
    if guard is not None:
        return guard
    gb, eb = bootstrap_runs(g, n_boot=n_boot, seed=seed), bootstrap_runs(e, n_boot=n_boot, seed=seed + 1)
    gci, eci = interval(gb[1:], level), interval(eb[1:], level)
    g_mde, e_mde = mde(gb, [g]), mde(eb, [e])
    gv, gwhy = decide(gb[0], gci, g_mde, 0.0, above_is_yes=False)        # "yes" = falls
    inside = eci is not None and -band < eci[0] and eci[1] < band
    outside = eci is not None and (eci[0] > band or eci[1] < -band)
    e_power_ok = e_mde is not None and e_mde < band                     # can it tell inside from out?
    ev = "yes" if inside and e_power_ok else "no" if outside else "unclear"
    v = "yes" if gv == "yes" and ev == "yes" else "no" if gv == "no" or ev == "no" else "unclear"
    few = min(len(g), len(e)) < 3
    if few:                           # a bootstrap over 1-2 runs has no spread worth the name
        v = "unclear"
    why = (("fewer than 3 runs per algorithm; " if few else "")
           + f"GRPO {_fmt(gb[0], gci)} ({gwhy}); ES {_fmt(eb[0], eci)} "
           + ("inside" if inside else "outside" if outside else "not clearly inside")
           + f" the +-{band:.0%} band" + ("" if e_power_ok or outside else
                                         f" (underpowered: its minimum detectable change {e_mde:.3g})"))
    return _claim(2, gb[0], gci, v, why, {"grpo_runs": len(g), "es_runs": len(e)}, m, d, g_mde, 0.0,
                  es_rel_change=float(eb[0]), es_ci=eci, es_mde=e_mde, band=band,
                  entropy=cols[1][len("final_"):])


def _pair_P(*arrs):
    P = min(a.shape[1] for a in arrs)
    return [a[:, :P] for a in arrs], P


def claim_coverage(es: list[dict], grpo: list[dict], *, n_boot: int, seed: int, tolerance: float,
                   level: float = 0.95, gain: dict | None = None, **_) -> dict:
    m = "Pass@K(ES) - Pass@K(GRPO) at the largest K (final evaluations, mean over runs and problems)"
    d = (f"yes if the 95% interval is above -{tolerance:g} (ES at least GRPO's within the tolerance); "
         f"no if below -{tolerance:g}; at least the minimum detectable effect from -{tolerance:g}; "
         "unclear if ES did not learn")
    b0 = -float(tolerance)
    if not es or not grpo:
        return _claim(3, reason="missing data: " + ("no ES runs" if not es else "no GRPO runs") +
                      " in the comparison cell", measure=m, definition=d, boundary=b0)
    ge, gg = _counts(es, "final_counts"), _counts(grpo, "final_counts")
    if ge is None or gg is None:
        return _claim(3, reason="missing data: per-problem final counts", measure=m, definition=d, boundary=b0)
    guard = _guard(3, gain, "the cell's ES runs", m, d, b0)
    if guard is not None:
        return guard
    K = min(ge[1], gg[1])
    (ce, cg), P = _pair_P(ge[0], gg[0])
    arrays = {"es_K": pass_at_k(ge[1], ce, K), "grpo_K": pass_at_k(gg[1], cg, K),
              "es_1": pass_at_k(ge[1], ce, 1), "grpo_1": pass_at_k(gg[1], cg, 1)}
    b = bootstrap_means(arrays, n_boot=n_boot, seed=seed, pair_rows=[("es_K", "es_1"), ("grpo_K", "grpo_1")])
    dk, d1 = b["es_K"] - b["grpo_K"], b["grpo_1"] - b["es_1"]
    ci, ci1 = interval(dk[1:], level), interval(d1[1:], level)
    power = mde(dk, [arrays["es_K"].mean(axis=1), arrays["grpo_K"].mean(axis=1)])
    v, vwhy = decide(dk[0], ci, power, b0)
    lead = "GRPO leads at Pass@1" if ci1[0] > 0 else "GRPO does not lead at Pass@1" if ci1[1] <= 0 else \
        "Pass@1 lead unclear"
    why = (f"Pass@{K} ES {b['es_K'][0]:.3f} vs GRPO {b['grpo_K'][0]:.3f} ({vwhy}); {lead} "
           f"({_fmt(d1[0], ci1)})")
    return _claim(3, dk[0], ci, v, why, {"es_runs": len(es), "grpo_runs": len(grpo), "problems": P, "k": K},
                  m, d, power, b0, k=K, es_pass_k=float(b["es_K"][0]), grpo_pass_k=float(b["grpo_K"][0]),
                  grpo_minus_es_pass1=float(d1[0]), grpo_minus_es_pass1_ci=ci1)


def _at_best_pop(rows: list[tuple]) -> list[float]:
    """The Pass@1 gains of the runs at each model's best population (highest mean gain):
    ``rows`` = (model, pop, gain) per run; [] if any gain is unknown."""
    if not rows or any(g is None for _, _, g in rows):
        return []
    cells: dict = {}
    for model, pop, g in rows:
        cells.setdefault(model, {}).setdefault(pop, []).append(g)
    return [g for pops in cells.values() for g in max(pops.values(), key=lambda v: float(np.mean(v)))]


def partial_spearman(x, y, groups, idx) -> np.ndarray:
    """Spearman rho of x and y with the groups removed, per bootstrap row of run indices ``idx``
    (B, n): ranks of x and y over the resampled runs, centred within each group, then Pearson's r
    of the centred ranks (nan where either is constant)."""
    from scipy.stats import rankdata

    x, y, g = np.asarray(x, float)[idx], np.asarray(y, float)[idx], np.asarray(groups)[idx]
    rx, ry = rankdata(x, axis=1), rankdata(y, axis=1)
    out = np.empty(idx.shape[0])
    for b in range(idx.shape[0]):
        cx, cy = rx[b].copy(), ry[b].copy()
        for key in np.unique(g[b]):
            sel = g[b] == key
            cx[sel] -= cx[sel].mean()
            cy[sel] -= cy[sel].mean()
        den = math.sqrt(float((cx * cx).sum() * (cy * cy).sum()))
        out[b] = float((cx * cy).sum()) / den if den > 0 else np.nan
    return out


def claim_diversity(es_all: list[dict], *, n_boot: int, seed: int, level: float = 0.95, **_) -> dict:
    m = ("partial Spearman rho across ES runs, within (model, pop) cells, between mean js_succ "
         "(train lines) and the Pass@K gain (final - base)")
    d = ("yes if the intervals of rho(js_succ) and rho(p_pop) are both above 0, no if both below 0, "
         "at least the minimum detectable rho from 0; unclear if ES did not learn in these runs")
    rows, seen = [], set()
    for r in es_all:
        key = tuple(str(r.get(c)) for c in ("model", "pop", "seed", "iterations", "sigma", "lr", "task"))
        if key in seen:               # the same training twice (e.g. differing only in its analyses)
            continue
        seen.add(key)
        k = r.get("k_max")
        gain = None
        if k:
            f, b0 = _num(r.get(f"final_pass@{k}")), _num(r.get(f"base_pass@{k}"))
            gain = None if f is None or b0 is None else f - b0
        g1 = (_num(r.get("final_pass@1")), _num(r.get("base_pass@1")))
        js, pp = _num(r.get("js_succ")), _num(r.get("p_pop"))
        if gain is not None and js is not None and pp is not None:
            rows.append((js, pp, gain, None if None in g1 else g1[0] - g1[1], f"{r.get('model')}|{r.get('pop')}", r))
    groups = [row[4] for row in rows]
    paired = [row for row in rows if groups.count(row[4]) >= 2]       # runs with a same-cell partner
    scoring = sorted({("greedy (p_i in {0, 1})" if (_num(row[5].get("es_temperature")) or 0) <= 0 else
                       f"sampled: {int(_num(row[5].get('es_samples')) or 1)} completions per prompt at "
                       f"T={_num(row[5].get('es_temperature')):g}") for row in rows})
    common = dict(member_scoring=scoring or ["unknown"], confound="(model, pop) removed: ranks centred within cells")
    if len(paired) < 4:
        return _claim(4, reason=f"missing data: {len(paired)} ES runs with js_succ, p_pop, a Pass@K gain and "
                      "another run in the same (model, pop) cell (need >= 4)", n={"runs": len(paired)},
                      measure=m, definition=d, boundary=0.0, **common)
    a = np.array([row[:3] for row in paired], dtype=float)
    best = _at_best_pop([(row[5].get("model"), row[5].get("pop"), row[3]) for row in paired])
    if not best:
        return _claim(4, reason="missing data: ES runs without base and final Pass@1 (ES learning unknown)",
                      n={"runs": len(paired)}, measure=m, definition=d, boundary=0.0, **common)
    gb = bootstrap_runs(best, n_boot=n_boot, seed=seed + 7)
    pooled = {"effect": float(gb[0]), "ci": interval(gb[1:], level), "reps": gb, "per_run": np.array(best)}
    guard = _guard(4, pooled, "runs at each model's best population", m, d, 0.0)
    if guard is not None:
        guard["details"].update(common)
        return guard
    cells = np.array([row[4] for row in paired])
    idx = np.concatenate([np.arange(len(a))[None],                 # resample runs within each cell
                          resample_indices(np.random.default_rng(seed), n_boot, len(a), groups=cells)])
    rj = partial_spearman(a[:, 0], a[:, 2], cells, idx)
    rp = partial_spearman(a[:, 1], a[:, 2], cells, idx)
    cj, cp = interval(rj[1:], level), interval(rp[1:], level)
    if cj is None or cp is None or not np.isfinite(rj[0]) or not np.isfinite(rp[0]):
        return _claim(4, reason="unclear: js_succ, p_pop or the gain is constant within cells",
                      n={"runs": len(paired)}, measure=m, definition=d, boundary=0.0, **common)
    mj, mp = mde(rj), mde(rp)
    vj, wj = decide(rj[0], cj, mj, 0.0)
    vp, wp = decide(rp[0], cp, mp, 0.0)
    v = "yes" if vj == vp == "yes" else "no" if vj == vp == "no" else "unclear"
    why = f"rho(js_succ, gain) {_fmt(rj[0], cj)} ({wj}); rho(p_pop, gain) {_fmt(rp[0], cp)} ({wp})"
    return _claim(4, rj[0], cj, v, why, {"runs": len(paired), "cells": int(len(np.unique(cells)))}, m, d,
                  mj, 0.0, rho_p_pop=float(rp[0]), rho_p_pop_ci=cp, rho_p_pop_mde=mp,
                  k=int(paired[0][5].get("k_max") or 0), **common)


def claim_sparsity(es_sp: list[dict], *, n_boot: int, seed: int, keep: float, keep_share: float,
                   level: float = 0.95, **_) -> dict:
    m = (f"share of ES's Pass@1 gain kept with only the largest {keep:.0%} of update entries (global), "
         "pooled over runs: sum(pruned - base) / sum(trained - base)")
    d = (f"yes if the interval is above {keep_share:g}, no if below {keep_share:g}, at least the minimum "
         "detectable effect away; unclear if the gain's own interval includes 0")
    parts = []
    for r in es_sp:
        s = r.get("sparsity") or {}
        n = s.get("samples")
        curve = [c for c in s.get("curves") or [] if c.get("mode") == "global"
                 and abs(float(c.get("keep", -1)) - keep) < KEEP_MATCH and c.get("correct_counts") is not None]
        if n and curve and s.get("base_counts") is not None and s.get("trained_counts") is not None:
            parts.append((int(n), s["base_counts"], s["trained_counts"], curve[0]["correct_counts"]))
    if not parts:
        return _claim(5, reason=f"missing data: no ES run has sparsity.json with a global keep-{keep:g} point "
                      "(run config analysis=[sparsity])", measure=m, definition=d, boundary=keep_share)
    P = min(len(p[1]) for p in parts)
    arr = {name: np.array([np.asarray(p[i][:P], dtype=np.float64) / p[0] for p in parts])
           for i, name in ((1, "base"), (2, "trained"), (3, "pruned"))}
    b = bootstrap_means(arr, n_boot=n_boot, seed=seed, pair_rows=[("base", "trained", "pruned")])
    gain = b["trained"] - b["base"]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(gain != 0, (b["pruned"] - b["base"]) / gain, np.nan)
    gci = interval(gain[1:], level)
    n = {"runs": len(parts), "problems": P}
    per_run = (arr["trained"] - arr["base"]).mean(axis=1)
    gain_v, _ = decide(gain[0], gci, mde(gain, [per_run]), 0.0)
    if gain_v != "yes" or not np.isfinite(share[0]):
        finite = bool(np.isfinite(share[0]))
        return _claim(5, share[0] if finite else None, interval(share[1:], level) if finite else None, "unclear",
                      f"ES's own Pass@1 gain on this split {_fmt(gain[0], gci)} is not clearly positive: "
                      "no gain to keep", n, m, d, None, keep_share, gain=float(gain[0]), gain_ci=gci)
    ci = interval(share[1:], level)
    power = mde(share)
    v, why = decide(share[0], ci, power, keep_share)
    return _claim(5, share[0], ci, v, f"share kept {_fmt(share[0], ci)} ({why}); gain {_fmt(gain[0], gci)}",
                  n, m, d, power, keep_share, gain=float(gain[0]), gain_ci=gci)


def _margins(b: dict, seq: str) -> tuple[np.ndarray, np.ndarray]:
    d1 = b[f"{seq}_1"] - np.maximum(b["grpo_1"], b["es_1"])
    dk = b[f"{seq}_K"] - np.maximum(b["grpo_K"], b["es_K"])
    return d1, dk


SEQUENCES = ("es_grpo", "grpo_es")  # the study's headline order first


def claim_sequence(es: list[dict], grpo: list[dict], grpo_es: list[dict], es_grpo: list[dict], *,
                   n_boot: int, seed: int, tolerance: float, level: float = 0.95, gain: dict | None = None,
                   **_) -> dict:
    d_ = float(tolerance)
    m = ("per order: min(d1, dK), d1 = Pass@1(sequence) - max(Pass@1(grpo), Pass@1(es)), dK = the same at "
         "the largest K")
    d = (f"d = {d_:g}: yes if, for some order, the interval is above -d (the sequence's Pass@1 within d of the "
         "better single algorithm's and its Pass@K at least the better single's minus d), at least the "
         "minimum detectable effect away; no if every tested order's interval is below -d; intervals at "
         f"{1 - (1 - level) / 2:.3f} per order (Bonferroni over the two orders); unclear if ES did not learn")
    orders = {"es_grpo": es_grpo, "grpo_es": grpo_es}
    present = [o for o in SEQUENCES if orders[o]]
    missing = [a for a, x in (("ES", es), ("GRPO", grpo)) if not x] + ([] if present else ["es_grpo or grpo_es"])
    if missing:
        return _claim(6, reason=f"missing data: no {', '.join(missing)} runs in the comparison cell",
                      measure=m, definition=d, boundary=-d_, tolerance=d_)
    sets = {"es": es, "grpo": grpo, **{o: orders[o] for o in present}}
    got = {a: _counts(x, "final_counts") for a, x in sets.items()}
    if any(v is None for v in got.values()):
        return _claim(6, reason="missing data: per-problem final counts", measure=m, definition=d, boundary=-d_)
    guard = _guard(6, gain, "the cell's ES runs", m, d, -d_)
    if guard is not None:
        return guard
    K = min(v[1] for v in got.values())
    arrs, P = _pair_P(*[v[0] for v in got.values()])
    arrays = {}
    for (a, (c, n)), ca in zip(got.items(), arrs):
        arrays[f"{a}_1"], arrays[f"{a}_K"] = pass_at_k(n, ca, 1), pass_at_k(n, ca, K)
    b = bootstrap_means(arrays, n_boot=n_boot, seed=seed, pair_rows=[(f"{a}_1", f"{a}_K") for a in got])
    level_each = 1 - (1 - level) / 2
    per = {}
    for o in present:
        d1, dk = _margins(b, o)
        eff = np.minimum(d1, dk)
        ci = interval(eff[1:], level_each)
        worse_k = bool(dk[0] <= d1[0])                     # the margin that sets the effect
        suffix = "_K" if worse_k else "_1"
        power = mde(eff, [arrays[f"{o}{suffix}"].mean(axis=1), arrays[f"grpo{suffix}"].mean(axis=1),
                          arrays[f"es{suffix}"].mean(axis=1)])
        v, why = decide(eff[0], ci, power, -d_)
        per[o] = {"effect": float(eff[0]), "ci": ci, "mde": power, "verdict": v, "why": why,
                  "d1": float(d1[0]), "d1_ci": interval(d1[1:], level_each),
                  "dK": float(dk[0]), "dK_ci": interval(dk[1:], level_each),
                  "pass@1": float(b[f"{o}_1"][0]), f"pass@{K}": float(b[f"{o}_K"][0])}
    verdicts = [per[o]["verdict"] for o in present]
    v = "yes" if "yes" in verdicts else "no" if all(x == "no" for x in verdicts) else "unclear"
    best = max(present, key=lambda o: per[o]["effect"])
    means = {a: {"pass@1": float(b[f"{a}_1"][0]), f"pass@{K}": float(b[f"{a}_K"][0])} for a in got}
    single1 = max(means["grpo"]["pass@1"], means["es"]["pass@1"])
    singleK = max(means["grpo"][f"pass@{K}"], means["es"][f"pass@{K}"])
    why = "; ".join(f"{'ES->GRPO' if o == 'es_grpo' else 'GRPO->ES'} Pass@1 {per[o]['pass@1']:.3f} / "
                    f"Pass@{K} {per[o][f'pass@{K}']:.3f}: {per[o]['verdict']} ({per[o]['why']})" for o in present)
    why += f" (best single: Pass@1 {single1:.3f}, Pass@{K} {singleK:.3f})"
    return _claim(6, per[best]["effect"], per[best]["ci"], v, why,
                  {a: len(x) for a, x in sets.items()} | {"problems": P}, m, d, per[best]["mde"], -d_,
                  k=K, tolerance=d_, orders=per, means=means, best_order=best)


def claim_pop_vs_size(es_all: list[dict], *, n_boot: int, seed: int, tolerance: float, min_sizes: int = 5,
                      level: float = 0.95, **_) -> dict:
    m = ("slope of ln N* on ln params; N* = the smallest population whose final Pass@1 is within tol of the "
         "best population's, per model size, at a fixed iteration budget")
    d = (f"yes if the slope's interval is below 0, no if above 0, at least the minimum detectable slope from 0; "
         f"needs >= {min_sizes} model sizes; bootstrap over seeds and problems; unclear if ES did not learn")
    # one setting per model: its most common iteration budget (and sigma / lr), every pop of it
    by_model: dict = {}
    for r in es_all:
        if r.get("final_counts") is None or r.get("samples") is None or _num(r.get("pop")) is None:
            continue
        by_model.setdefault(r.get("model"), []).append(r)
    cells: dict = {}
    for model, rs in by_model.items():
        budgets: dict = {}
        for r in rs:
            budgets.setdefault(tuple(str(_num(r.get(k))) for k in ("iterations", "sigma", "lr")), []).append(r)
        chosen = max(budgets.values(), key=len)
        pops: dict = {}
        for r in chosen:
            pops.setdefault(int(_num(r["pop"])), []).append(r)
        if len(pops) >= 2:
            cells[model] = {p: _one_per_seed(x) for p, x in sorted(pops.items())}
    sizes = len(cells)
    n = {"model_sizes": sizes, "runs": sum(len(x) for c in cells.values() for x in c.values())}
    if sizes < min_sizes:
        return _claim(7, reason=f"missing data: {sizes} model size(s) with >= 2 populations of ES runs "
                      f"(need >= {min_sizes})", n=n, measure=m, definition=d, boundary=0.0)
    gained = [r for c in cells.values() for x in c.values() for r in x]
    at_best = []
    for pops in cells.values():           # each size's best population (highest mean final Pass@1)
        at_best += max(pops.values(), key=lambda rs: float(np.mean(
            [np.mean(r["final_counts"]) / float(r["samples"]) for r in rs])))
    gain = es_gain(at_best, n_boot=min(n_boot, GUARD_BOOT), seed=seed + 3, level=level)
    guard = _guard(7, gain, "runs at each model size's best population", m, d, 0.0)
    if guard is not None:
        guard["n"] = n
        return guard
    P = min(len(r["final_counts"]) for r in gained)
    models = sorted(cells, key=lambda mm: _num(cells[mm][next(iter(cells[mm]))][0].get("params")) or 0)
    params = np.array([_num(cells[mm][next(iter(cells[mm]))][0].get("params")) for mm in models], dtype=float)
    if not np.all(np.isfinite(params)) or np.any(params <= 0):
        return _claim(7, reason="missing data: model sizes (params) unknown", n=n, measure=m, definition=d,
                      boundary=0.0)
    scores = {}                                   # (model, pop) -> per-run, per-problem final Pass@1
    for mm in models:
        for pp, runs in cells[mm].items():
            c, nn = _counts(runs, "final_counts")
            scores[(mm, pp)] = pass_at_k(nn, c[:, :P], 1)                   # (R, P)
    b = bootstrap_means(scores, n_boot=n_boot, seed=seed)        # problems shared, seeds within each cell
    stars = np.zeros((n_boot + 1, len(models)))
    table = []
    for j, mm in enumerate(models):
        pops = list(cells[mm])
        means = np.stack([b[(mm, pp)] for pp in pops], axis=1)                # (B+1, pops)
        stars[:, j] = np.asarray(pops, dtype=float)[fit.efficient_peak(means, tolerance)]
        table.append({"model": mm, "params": float(params[j]), "n_star": float(stars[0, j]),
                      "n_star_ci": interval(stars[1:, j], level), "pops": pops,
                      "pass@1": [float(x) for x in means[0]], "seeds": [len(cells[mm][pp]) for pp in pops]})
    _, slopes = fit.loglog_fit(params, stars)
    ci = interval(slopes[1:], level)
    power = mde(slopes)
    v, why = decide(float(slopes[0]), ci, power, 0.0, above_is_yes=False)
    stars_txt = ", ".join(f"{t['model']} {t['n_star']:g}" for t in table)
    return _claim(7, float(slopes[0]), ci, v, f"slope {_fmt(float(slopes[0]), ci)} ({why}); N*: {stars_txt}",
                  n, m, d, power, 0.0, per_size=table, tolerance=float(tolerance))
