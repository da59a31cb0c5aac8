"""The study's seven claims, each tested on a sweep: effect, 95% interval, reproduced yes/no/unclear.

    python -m esopt.aggregate <sweep-dir> --claims     (prints the table, writes claims.json)
    claims(sweep_dir | Aggregate | records, trend=None) -> dict         (the aggregator calls this)

Input: one record per completed run (the aggregator's runs-table row: run_id, algo, model,
params, pop, seed, iterations, sigma, lr, base_/final_ metrics; plus ``js_succ`` / ``p_pop`` =
the mean of the run's ES train lines), and, for the runs a claim pairs over problems, the
per-problem lists read from the run directory: ``samples``, ``base_counts``, ``final_counts``
(correct samples per problem, summary.json) and ``sparsity`` (sparsity.json). ``trend`` is the
aggregator's trend.json (esopt.study.fit).

The comparison cell: the model with the most algorithms among none/es/grpo/grpo_es/es_grpo
(ties: most runs, then name). Per algorithm one setting is used: ES the (pop, iterations) of
the sequences' runs when there are any, else its setting with the most seeds (ties: larger pop,
then more iterations); GRPO the setting with ES's iterations when there is one, else the most
seeds; one run per seed (a duplicate differing only in its analyses: the one with sparsity.json).

Statistics (all seeded, ``n_boot`` replicates, 95% percentile intervals). Per-problem scores are
s_{r,p} = pass@k of run r on problem p from its correct counts (unbiased estimator, k = 1 or K =
the largest k = the number of samples). A "cell mean" is mean_{r,p} s_{r,p}. The bootstrap
resamples problems once per replicate (shared by every algorithm and by base/final: paired over
problems) and runs (seeds) with replacement within each algorithm (base/final of one run stay
paired); the statistic is recomputed from the resampled cell means.

Claims and their definitions (tol = 0.01 absolute, band = 10% relative, see DEFAULTS):
 1. ES raises Pass@1: effect = mean_{r,p} (final - base) over ES runs. yes: lo > 0; no: hi <= 0.
 2. Entropy: rel_r = (H_final - H_base) / H_base per run (held-out token-mean entropy of the
    sampled completions, eval split). effect = mean rel over GRPO runs; ES: mean rel over ES runs.
    Intervals: bootstrap over runs. yes: GRPO hi < 0 and ES interval inside [-band, +band];
    no: GRPO lo >= 0 or ES interval entirely outside the band; else (or < 3 runs each) unclear.
 3. Coverage: effect = Pass@K(ES) - Pass@K(GRPO) (cell means). yes: lo >= -tol (ES at least GRPO's
    within tol); no: hi < 0 (and not yes); details: Pass@1(GRPO) - Pass@1(ES) (GRPO "may" lead).
 4. Diversity and coverage: Spearman rho across all completed ES runs (every model and pop)
    between the run's mean js_succ (nats) and its Pass@K gain (final - base); the same for p_pop.
    Interval: bootstrap over runs. yes: both lo > 0; no: both hi <= 0; else unclear.
 5. Functional sparsity (sparsity.json, global mode at keep 0.22, ES runs): share = sum_r (mean_p
    pruned - mean_p base) / sum_r (mean_p trained - mean_p base) (Pass@1, pooled over runs);
    bootstrap over runs and problems. yes: lo >= 0.9; no: hi < 0.9; unclear when the gain's
    interval includes 0 (no gain to keep).
 6. GRPO->ES combines: d1 = Pass@1(grpo_es) - max(Pass@1(grpo), Pass@1(es)), dK = the same at K;
    effect = min(d1, dK) (its worse margin). yes: lo >= -tol (within tol of the better single
    algorithm on both); no: hi < -tol; else unclear. es_grpo's margins are in the details.
 7. Larger models need smaller populations: trend.json's slope of ln pop* on ln params and its
    bootstrap interval. yes: hi < 0; no: lo > 0; unclear otherwise (and < 3 model sizes: missing).

Missing data (e.g. no GRPO runs) gives reproduced "unclear" with a reason starting "missing data".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from esopt.algorithms import ALGORITHMS
from esopt.core.metrics import pass_at_k, percentile_interval as interval, spearman
from esopt.study import fit, tables

ALGOS = tuple(ALGORITHMS)
DEFAULTS = {"n_boot": 1000, "seed": 0, "ci_level": 0.95, "tolerance": 0.01, "band": 0.10,
            "keep": 0.22, "keep_share": 0.90}
CLAIMS = {
    1: ("es_raises_pass1", "ES raises held-out Pass@1 over the base model."),
    2: ("entropy", "GRPO's held-out token entropy falls over training while ES's stays within a band "
                   "of the base."),
    3: ("coverage", "ES's Pass@K at the largest K is at least GRPO's, while GRPO may lead at Pass@1."),
    4: ("diversity", "The ES population's JS diversity (js_succ) and P_pop relate to the Pass@K gain "
                     "across runs."),
    5: ("sparsity", "Keeping the largest 22% of ES's update keeps at least 90% of its gain."),
    6: ("grpo_es_combines", "GRPO->ES combines GRPO's Pass@1 with ES's Pass@K better than either alone."),
    7: ("pop_vs_size", "Larger models need smaller populations (trend slope < 0, interval below 0)."),
}
VERDICTS = ("yes", "no", "unclear")


# ---------------------------------------------------------------------------------------
# statistics (pure)
def boot_means(arrays: Mapping[str, np.ndarray], *, n_boot: int, seed: int,
               pair_rows: Iterable[Iterable[str]] = ()) -> dict[str, np.ndarray]:
    """Cell means of per-run, per-problem arrays: row 0 observed, rows 1..n_boot resampled.

    ``arrays[name]`` is (R_name, P) with the same P (problem p is the same problem in every
    array). Each replicate draws one problem resample (P indices, shared by all arrays: paired
    over problems) and, per array, R_name run indices with replacement; arrays named together
    in ``pair_rows`` (same R) share their run indices (e.g. base and final of the same runs).
    mean_b = mean_{i, j} X[rows_b[i], probs_b[j]].  Returns name -> (n_boot + 1,).
    """
    rng = np.random.default_rng(seed)
    names = list(arrays)
    P = {np.asarray(a).shape[1] for a in arrays.values()}
    if len(P) != 1:
        raise ValueError(f"arrays must share the problem axis, got sizes {sorted(P)}")
    P = P.pop()
    probs = rng.integers(0, P, size=(n_boot, P))
    group_of = {n: n for n in names}
    for grp in pair_rows:
        grp = [g for g in grp if g in arrays]
        for g in grp[1:]:
            group_of[g] = grp[0]
    rows: dict[str, np.ndarray] = {}
    out = {}
    for name in names:
        x = np.asarray(arrays[name], dtype=np.float64)
        g = group_of[name]
        if g not in rows:
            rows[g] = rng.integers(0, x.shape[0], size=(n_boot, x.shape[0]))
        colmeans = x[:, probs].mean(axis=2)                            # (R, B): per run, resampled problems
        picked = np.take_along_axis(colmeans.T, rows[g], axis=1)       # (B, R)
        out[name] = np.concatenate([[x.mean()], picked.mean(axis=1)])
    return out


def boot_runs(values, *, n_boot: int, seed: int) -> np.ndarray:
    """Mean of the values (row 0) and of n_boot resamples of them with replacement (rows 1..)."""
    v = np.asarray(values, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, len(v), size=(n_boot, len(v)))
    return np.concatenate([[v.mean()], v[idx].mean(axis=1)])


# ---------------------------------------------------------------------------------------
# the comparison cell
def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _setting(r: Mapping) -> tuple:
    return tuple(str(_num(r.get(k))) for k in ("pop", "iterations", "sigma", "lr"))


def _one_per_seed(runs: list[dict]) -> list[dict]:
    """One run per seed (prefer the one with sparsity data), ordered by seed."""
    by_seed: dict = {}
    for r in sorted(runs, key=lambda r: (r.get("sparsity") is None, str(r["run_id"]))):
        by_seed.setdefault(r.get("seed"), r)
    return [by_seed[s] for s in sorted(by_seed, key=lambda s: (s is None, s))]


def select_cell(records: list[dict]) -> dict:
    """{"model", "algos": {algo: [records]}, "settings": {algo: setting}} (see module docstring)."""
    done = [r for r in records if r.get("status", "completed") == "completed" and r.get("algo") in ALGOS]
    models: dict = {}
    for r in done:
        models.setdefault(r["model"], []).append(r)
    if not models:
        return {"model": None, "algos": {}, "settings": {}}
    model = min(models, key=lambda m: (-len({r["algo"] for r in models[m]}), -len(models[m]), str(m)))
    runs = models[model]
    by_algo: dict = {}
    for r in runs:
        by_algo.setdefault(r["algo"], {}).setdefault(_setting(r), []).append(r)

    def most_seeds(settings: dict, prefer=None):
        if prefer is not None:
            hits = [s for s in settings if prefer(s)]
            if hits:
                settings = {s: settings[s] for s in hits}
        return max(settings, key=lambda s: (len({r.get("seed") for r in settings[s]}),
                                            _num(s[0]) or 0, _num(s[1]) or 0, s))

    chosen: dict = {}
    for algo in ("grpo_es", "es_grpo", "none"):
        if algo in by_algo:
            chosen[algo] = most_seeds(by_algo[algo])
    seq = chosen.get("grpo_es") or chosen.get("es_grpo")
    if "es" in by_algo:
        chosen["es"] = most_seeds(by_algo["es"], (lambda s: s[:2] == seq[:2]) if seq else None)
    if "grpo" in by_algo:
        es_it = chosen["es"][1] if "es" in chosen else None
        chosen["grpo"] = most_seeds(by_algo["grpo"], (lambda s: s[1] == es_it) if es_it else None)
    return {"model": model, "algos": {a: _one_per_seed(by_algo[a][s]) for a, s in chosen.items()},
            "settings": {a: dict(zip(("pop", "iterations", "sigma", "lr"), s)) for a, s in chosen.items()}}


# ---------------------------------------------------------------------------------------
# the claims (pure functions of records)
def _claim(cid: int, effect=None, ci=None, verdict: str = "unclear", reason: str = "missing data",
           n: dict | None = None, measure: str = "", definition: str = "", **details) -> dict:
    key, text = CLAIMS[cid]
    return {"id": cid, "key": key, "claim": text, "measure": measure, "definition": definition,
            "effect": None if effect is None else float(effect), "ci": ci,
            "reproduced": verdict, "reason": reason, "n": n or {}, "details": details}


def _fmt(v, ci=None) -> str:
    s = "n/a" if v is None else f"{v:+.3g}"
    return s + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "")


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


def claim_es_pass1(es: list[dict], *, n_boot: int, seed: int, level: float = 0.95, **_) -> dict:
    m = "mean over ES runs and problems of Pass@1(final) - Pass@1(base), paired"
    d = "yes if the 95% interval is above 0; no if its upper end is <= 0"
    if not es:
        return _claim(1, reason="missing data: no completed ES runs in the comparison cell", measure=m, definition=d)
    base, n = _scores(es, "base_counts", 1)
    final, _ = _scores(es, "final_counts", 1)
    if base is None or final is None:
        return _claim(1, reason="missing data: ES runs lack per-problem base/final counts", measure=m, definition=d)
    P = min(base.shape[1], final.shape[1])
    b = boot_means({"base": base[:, :P], "final": final[:, :P]}, n_boot=n_boot, seed=seed,
                   pair_rows=[("base", "final")])
    diff = b["final"] - b["base"]
    ci = interval(diff[1:], level)
    v = "yes" if ci[0] > 0 else "no" if ci[1] <= 0 else "unclear"
    why = {"yes": "interval above 0", "no": "interval not above 0 (no gain)", "unclear": "interval includes 0"}[v]
    return _claim(1, diff[0], ci, v, f"Pass@1 {b['base'][0]:.3f} -> {b['final'][0]:.3f}: {why}",
                  {"runs": len(es), "problems": P}, m, d,
                  base=float(b["base"][0]), final=float(b["final"][0]))


def _rel_entropy(runs: list[dict]) -> np.ndarray:
    out = []
    for r in runs:
        h0, h1 = _num(r.get("base_entropy")), _num(r.get("final_entropy"))
        if h0 is not None and h1 is not None and h0 > 0:
            out.append((h1 - h0) / h0)
    return np.array(out)


def claim_entropy(es: list[dict], grpo: list[dict], *, n_boot: int, seed: int, band: float,
                  level: float = 0.95, **_) -> dict:
    m = "GRPO: mean relative change of held-out token entropy (H_final - H_base) / H_base over runs"
    d = (f"yes if GRPO's interval is below 0 and ES's relative change interval lies inside "
         f"[-{band:g}, +{band:g}]; no if GRPO's lower end is >= 0 or ES's interval lies outside the band")
    g, e = _rel_entropy(grpo), _rel_entropy(es)
    if not len(g) or not len(e):
        miss = ", ".join(a for a, x in (("GRPO", g), ("ES", e)) if not len(x))
        return _claim(2, reason=f"missing data: no {miss} runs with base and final entropy", measure=m,
                      definition=d, band=band)
    gb, eb = boot_runs(g, n_boot=n_boot, seed=seed), boot_runs(e, n_boot=n_boot, seed=seed + 1)
    gci, eci = interval(gb[1:], level), interval(eb[1:], level)
    falls, not_falls = gci[1] < 0, gci[0] >= 0
    inside = -band <= eci[0] and eci[1] <= band
    outside = eci[0] > band or eci[1] < -band
    v = "yes" if falls and inside else "no" if not_falls or outside else "unclear"
    if min(len(g), len(e)) < 3:       # a bootstrap over 1-2 runs has no spread worth the name
        v = "unclear"
    why = ("fewer than 3 runs per algorithm; " if min(len(g), len(e)) < 3 else "") + (f"GRPO {_fmt(gb[0], gci)} ({'falls' if falls else 'does not fall' if not_falls else 'unclear'}), "
           f"ES {_fmt(eb[0], eci)} ({'inside' if inside else 'outside' if outside else 'not clearly inside'} "
           f"the +-{band:.0%} band)")
    return _claim(2, gb[0], gci, v, why, {"grpo_runs": len(g), "es_runs": len(e)}, m, d,
                  es_rel_change=float(eb[0]), es_ci=eci, band=band)


def _pair_P(*arrs):
    P = min(a.shape[1] for a in arrs)
    return [a[:, :P] for a in arrs], P


def claim_coverage(es: list[dict], grpo: list[dict], *, n_boot: int, seed: int, tolerance: float,
                   level: float = 0.95, **_) -> dict:
    m = "Pass@K(ES) - Pass@K(GRPO) at the largest K (final evaluations, mean over runs and problems)"
    d = (f"yes if the 95% interval's lower end is >= -{tolerance:g} (ES at least GRPO's within the tolerance); "
         "no if its upper end is < 0")
    if not es or not grpo:
        return _claim(3, reason="missing data: " + ("no ES runs" if not es else "no GRPO runs") +
                      " in the comparison cell", measure=m, definition=d)
    ge, gg = _counts(es, "final_counts"), _counts(grpo, "final_counts")
    if ge is None or gg is None:
        return _claim(3, reason="missing data: per-problem final counts", measure=m, definition=d)
    K = min(ge[1], gg[1])
    (ce, cg), P = _pair_P(ge[0], gg[0])
    arrays = {"es_K": pass_at_k(ge[1], ce, K), "grpo_K": pass_at_k(gg[1], cg, K),
              "es_1": pass_at_k(ge[1], ce, 1), "grpo_1": pass_at_k(gg[1], cg, 1)}
    b = boot_means(arrays, n_boot=n_boot, seed=seed, pair_rows=[("es_K", "es_1"), ("grpo_K", "grpo_1")])
    dk, d1 = b["es_K"] - b["grpo_K"], b["grpo_1"] - b["es_1"]
    ci, ci1 = interval(dk[1:], level), interval(d1[1:], level)
    v = "yes" if ci[0] >= -tolerance else "no" if ci[1] < 0 else "unclear"
    lead = "GRPO leads at Pass@1" if ci1[0] > 0 else "GRPO does not lead at Pass@1" if ci1[1] <= 0 else \
        "Pass@1 lead unclear"
    why = (f"Pass@{K} ES {b['es_K'][0]:.3f} vs GRPO {b['grpo_K'][0]:.3f} "
           f"({'not below' if v == 'yes' else 'below' if v == 'no' else 'unclear'}); {lead} "
           f"({_fmt(d1[0], ci1)})")
    return _claim(3, dk[0], ci, v, why, {"es_runs": len(es), "grpo_runs": len(grpo), "problems": P, "k": K}, m, d,
                  k=K, es_pass_k=float(b["es_K"][0]), grpo_pass_k=float(b["grpo_K"][0]),
                  grpo_minus_es_pass1=float(d1[0]), grpo_minus_es_pass1_ci=ci1)


def claim_diversity(es_all: list[dict], *, n_boot: int, seed: int, level: float = 0.95, **_) -> dict:
    m = "Spearman rho across ES runs between mean js_succ (train lines) and the Pass@K gain (final - base)"
    d = "yes if the intervals of rho(js_succ) and rho(p_pop) are both above 0; no if both upper ends are <= 0"
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
        js, pp = _num(r.get("js_succ")), _num(r.get("p_pop"))
        if gain is not None and js is not None and pp is not None:
            rows.append((js, pp, gain))
    if len(rows) < 4:
        return _claim(4, reason=f"missing data: {len(rows)} ES runs with js_succ, p_pop and a Pass@K gain "
                      "(need >= 4)", n={"runs": len(rows)}, measure=m, definition=d)
    a = np.array(rows)
    rng = np.random.default_rng(seed)
    idx = np.concatenate([np.arange(len(a))[None], rng.integers(0, len(a), size=(n_boot, len(a)))])
    rj = spearman(a[idx, 0], a[idx, 2])
    rp = spearman(a[idx, 1], a[idx, 2])
    cj, cp = interval(rj[1:], level), interval(rp[1:], level)
    if cj is None or cp is None or not np.isfinite(rj[0]) or not np.isfinite(rp[0]):
        return _claim(4, reason="unclear: js_succ, p_pop or the gain is constant across runs",
                      n={"runs": len(rows)}, measure=m, definition=d)
    v = "yes" if cj[0] > 0 and cp[0] > 0 else "no" if cj[1] <= 0 and cp[1] <= 0 else "unclear"
    why = f"rho(js_succ, gain) {_fmt(rj[0], cj)}, rho(p_pop, gain) {_fmt(rp[0], cp)}"
    return _claim(4, rj[0], cj, v, why, {"runs": len(rows)}, m, d, rho_p_pop=float(rp[0]), rho_p_pop_ci=cp,
                  k=int(es_all[0].get("k_max") or 0))


def claim_sparsity(es_sp: list[dict], *, n_boot: int, seed: int, keep: float, keep_share: float,
                   level: float = 0.95, **_) -> dict:
    m = (f"share of ES's Pass@1 gain kept with only the largest {keep:.0%} of update entries (global), "
         "pooled over runs: sum(pruned - base) / sum(trained - base)")
    d = (f"yes if the interval's lower end is >= {keep_share:g}; no if its upper end is < {keep_share:g}; "
         "unclear if the gain's own interval includes 0")
    parts = []
    for r in es_sp:
        s = r.get("sparsity") or {}
        n = s.get("samples")
        curve = [c for c in s.get("curves") or [] if c.get("mode") == "global"
                 and abs(float(c.get("keep", -1)) - keep) < 5e-3 and c.get("correct_counts") is not None]
        if n and curve and s.get("base_counts") is not None and s.get("trained_counts") is not None:
            parts.append((int(n), s["base_counts"], s["trained_counts"], curve[0]["correct_counts"]))
    if not parts:
        return _claim(5, reason=f"missing data: no ES run has sparsity.json with a global keep-{keep:g} point "
                      "(run config analysis=[sparsity])", measure=m, definition=d)
    P = min(len(p[1]) for p in parts)
    arr = {name: np.array([np.asarray(p[i][:P], dtype=np.float64) / p[0] for p in parts])
           for i, name in ((1, "base"), (2, "trained"), (3, "pruned"))}
    b = boot_means(arr, n_boot=n_boot, seed=seed, pair_rows=[("base", "trained", "pruned")])
    gain = b["trained"] - b["base"]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(gain != 0, (b["pruned"] - b["base"]) / gain, np.nan)
    gci = interval(gain[1:], level)
    n = {"runs": len(parts), "problems": P}
    if gci is None or gci[0] <= 0 <= gci[1] or not np.isfinite(share[0]):
        finite = bool(np.isfinite(share[0]))
        return _claim(5, share[0] if finite else None, interval(share[1:], level) if finite else None, "unclear",
                      f"ES's own Pass@1 gain on this split {_fmt(gain[0], gci)} is not clearly positive: "
                      "no gain to keep", n, m, d, gain=float(gain[0]), gain_ci=gci)
    ci = interval(share[1:], level)
    v = "yes" if ci[0] >= keep_share else "no" if ci[1] < keep_share else "unclear"
    return _claim(5, share[0], ci, v, f"share kept {_fmt(share[0], ci)} vs {keep_share:g}; gain {_fmt(gain[0], gci)}",
                  n, m, d, gain=float(gain[0]), gain_ci=gci)


def _margins(b: dict, seq: str) -> tuple[np.ndarray, np.ndarray]:
    d1 = b[f"{seq}_1"] - np.maximum(b["grpo_1"], b["es_1"])
    dk = b[f"{seq}_K"] - np.maximum(b["grpo_K"], b["es_K"])
    return d1, dk


def claim_grpo_es(es: list[dict], grpo: list[dict], grpo_es: list[dict], es_grpo: list[dict], *,
                  n_boot: int, seed: int, tolerance: float, level: float = 0.95, **_) -> dict:
    m = ("min(d1, dK): d1 = Pass@1(grpo_es) - max(Pass@1(grpo), Pass@1(es)), dK = the same at the largest K")
    d = (f"yes if the interval's lower end is >= -{tolerance:g} (GRPO->ES within {tolerance:g} of the better "
         f"single algorithm at both Pass@1 and Pass@K); no if its upper end is < -{tolerance:g}")
    missing = [a for a, x in (("grpo_es", grpo_es), ("ES", es), ("GRPO", grpo)) if not x]
    if missing:
        return _claim(6, reason=f"missing data: no {', '.join(missing)} runs in the comparison cell",
                      measure=m, definition=d)
    sets = {"es": es, "grpo": grpo, "grpo_es": grpo_es, **({"es_grpo": es_grpo} if es_grpo else {})}
    got = {a: _counts(x, "final_counts") for a, x in sets.items()}
    if any(v is None for v in got.values()):
        return _claim(6, reason="missing data: per-problem final counts", measure=m, definition=d)
    K = min(v[1] for v in got.values())
    arrs, P = _pair_P(*[v[0] for v in got.values()])
    arrays = {}
    for (a, (c, n)), ca in zip(got.items(), arrs):
        arrays[f"{a}_1"], arrays[f"{a}_K"] = pass_at_k(n, ca, 1), pass_at_k(n, ca, K)
    b = boot_means(arrays, n_boot=n_boot, seed=seed, pair_rows=[(f"{a}_1", f"{a}_K") for a in got])
    d1, dk = _margins(b, "grpo_es")
    eff = np.minimum(d1, dk)
    ci = interval(eff[1:], level)
    v = "yes" if ci[0] >= -tolerance else "no" if ci[1] < -tolerance else "unclear"
    means = {a: {"pass@1": float(b[f"{a}_1"][0]), f"pass@{K}": float(b[f"{a}_K"][0])} for a in got}
    details = {"k": K, "means": means, "d1": float(d1[0]), "d1_ci": interval(d1[1:], level),
               "dK": float(dk[0]), "dK_ci": interval(dk[1:], level)}
    if "es_grpo" in got:
        e1, ek = _margins(b, "es_grpo")
        details.update(es_grpo_min_margin=float(min(e1[0], ek[0])),
                       es_grpo_min_margin_ci=interval(np.minimum(e1, ek)[1:], level))
    why = (f"GRPO->ES Pass@1 {means['grpo_es']['pass@1']:.3f} (best single {max(means['grpo']['pass@1'], means['es']['pass@1']):.3f}), "
           f"Pass@{K} {means['grpo_es'][f'pass@{K}']:.3f} (best single "
           f"{max(means['grpo'][f'pass@{K}'], means['es'][f'pass@{K}']):.3f})")
    return _claim(6, eff[0], ci, v, why, {a: len(x) for a, x in sets.items()} | {"problems": P}, m, d, **details)


def claim_pop_vs_size(trend: Mapping | None, **_) -> dict:
    m = "slope of ln pop* on ln params (trend.json, ES runs; pop* = the continuous best population)"
    d = "yes if the slope's 95% interval is below 0; no if it is above 0; unclear otherwise"
    if not trend:
        return _claim(7, reason="missing data: no trend.json", measure=m, definition=d)
    sizes = int(trend.get("n_model_sizes") or 0)
    n = {"model_sizes": sizes, "runs": trend.get("n_runs"), "seeds": trend.get("n_seeds")}
    slope, ci = _num(trend.get("slope")), trend.get("slope_ci")
    if sizes < 3 or slope is None:
        return _claim(7, slope, ci, "unclear", f"missing data: {sizes} model size(s) in the ES runs (need >= 3)",
                      n, m, d)
    if not ci or any(_num(x) is None for x in ci):
        return _claim(7, slope, None, "unclear", "no bootstrap interval for the slope", n, m, d)
    v = "yes" if ci[1] < 0 else "no" if ci[0] > 0 else "unclear"
    stars = {mm.get("model"): (mm.get("pop_star") or {}).get("continuous") for mm in trend.get("models") or []}
    return _claim(7, slope, list(ci), v, f"slope {_fmt(slope, ci)} ({trend.get('verdict')})", n, m, d,
                  pop_star=stars, verdict_fit=trend.get("verdict"))


# ---------------------------------------------------------------------------------------
# all seven
def compute(records: list[dict], trend: Mapping | None = None, **settings: Any) -> dict:
    """claims.json's content from run records (see module docstring) and the trend dict."""
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if v is not None}}
    kw = dict(n_boot=int(s["n_boot"]), seed=int(s["seed"]), level=float(s["ci_level"]),
              tolerance=float(s["tolerance"]), band=float(s["band"]), keep=float(s["keep"]),
              keep_share=float(s["keep_share"]))
    cell = select_cell(records)
    A = cell["algos"]
    done = [r for r in records if r.get("status", "completed") == "completed"]
    es_all = [r for r in done if r.get("algo") == "es"]
    es_sp = [r for r in es_all if r.get("sparsity")]
    out = [
        claim_es_pass1(A.get("es", []), **kw),
        claim_entropy(A.get("es", []), A.get("grpo", []), **kw),
        claim_coverage(A.get("es", []), A.get("grpo", []), **kw),
        claim_diversity(es_all, **kw),
        claim_sparsity(es_sp, **kw),
        claim_grpo_es(A.get("es", []), A.get("grpo", []), A.get("grpo_es", []), A.get("es_grpo", []), **kw),
        claim_pop_vs_size(trend, **kw),
    ]
    tokens = {a: float(np.mean([_num(r.get("tokens_generated")) or 0 for r in rs])) for a, rs in A.items()
              if a != "none"}
    ref = tokens.get("es") or None
    return {
        "version": 1,
        "settings": s,
        "cell": {"model": cell["model"], "settings": cell["settings"],
                 "runs": {a: [r["run_id"] for r in rs] for a, rs in A.items()},
                 "seeds": {a: [r.get("seed") for r in rs] for a, rs in A.items()},
                 "tokens_generated_mean": tokens,
                 "tokens_vs_es": {a: (t / ref if ref else None) for a, t in tokens.items()}},
        "summary": {v: [c["id"] for c in out if c["reproduced"] == v] for v in VERDICTS},
        "claims": out,
    }


# ---------------------------------------------------------------------------------------
# reading a sweep
def records_from_tables(runs, curves) -> list[dict]:
    """Runs-table rows (completed) as records, with js_succ / p_pop = mean of ES train lines."""
    import pandas as pd

    if runs is None or not len(runs):
        return []
    done = runs[runs["status"] == "completed"]
    js = pd.DataFrame()
    if curves is not None and len(curves) and "js_succ" in curves:
        tl = curves[(curves.get("kind") == "train") & curves["js_succ"].notna()]
        if "phase" in tl:
            tl = tl[tl["phase"] == "es"]
        js = tl.groupby("run_id")[[c for c in ("js_succ", "p_pop") if c in tl]].mean()
    recs = []
    for row in done.to_dict("records"):
        rec = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        ks = [int(c[len("final_pass@"):]) for c in row if c.startswith("final_pass@") and c[11:].isdigit()
              and _num(row[c]) is not None]
        rec["k_max"] = max(ks) if ks else None
        if rec["run_id"] in js.index:
            for c in js.columns:
                rec[c] = _num(js.loc[rec["run_id"], c])
        recs.append(rec)
    return recs


def attach_details(records: list[dict], runs_dir: Path) -> None:
    """sparsity.json for the ES runs that have it, then the per-problem lists (summary.json) of
    the comparison cell's runs (chosen after sparsity is known: it breaks ties between runs)."""
    for r in records:
        sp = Path(runs_dir) / str(r["run_id"]) / "sparsity.json"
        if r.get("algo") == "es" and sp.exists():
            try:
                r["sparsity"] = json.loads(sp.read_text())
            except (OSError, ValueError):
                pass
    cell = select_cell(records)
    for r in (r for rs in cell["algos"].values() for r in rs):
        try:
            s = json.loads((Path(runs_dir) / str(r["run_id"]) / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        base, final = s.get("base") or {}, s.get("final") or {}
        r["samples"] = final.get("samples") or base.get("samples")
        r["base_counts"], r["final_counts"] = base.get("correct_counts"), final.get("correct_counts")


def claims(source, trend: Mapping | None = None, **settings: Any) -> dict:
    """Claims for a sweep directory, an esopt.study.tables.Aggregate, or a list of records."""
    if isinstance(source, list):
        return compute(source, trend, **settings)
    agg = source if hasattr(source, "runs") else tables.load(source)
    sweep_dir = Path(agg.sweep_dir)
    if trend is None:
        trend = agg.trend
    if trend is None:
        tj = sweep_dir / "trend.json"
        if tj.exists():
            trend = json.loads(tj.read_text())
        else:
            metric = agg.metric or tables.metric_column("pass@1", agg.runs.columns)
            trend = fit.fit_runs(agg.runs, metric, n_boot=int(settings.get("n_boot") or 1000),
                             seed=int(settings.get("seed") or 0))
    records = records_from_tables(agg.runs, agg.curves)
    attach_details(records, tables.find_runs_dir(sweep_dir))
    out = compute(records, trend, **settings)
    out["sweep_dir"] = str(sweep_dir)
    return out


def wanted(agg) -> bool:
    """Whether the aggregator computes claims: a paper preset sweep, or ES runs beside others."""
    runs = agg.runs
    name = Path(agg.sweep_dir).name
    algos = set(runs["algo"].dropna()) if len(runs) else set()
    return name.startswith("paper") or ("es" in algos and len(algos & {"none", "grpo", "grpo_es", "es_grpo"}) > 0)


def table_lines(result: dict) -> list[str]:
    """Plain-text table: id, claim key, effect [95% CI], n, reproduced, reason."""
    lines = [f"{'#':<2} {'claim':<17} {'effect [95% CI]':<28} {'reproduced':<10} reason"]
    for c in result["claims"]:
        lines.append(f"{c['id']:<2} {c['key']:<17} {_fmt(c['effect'], c['ci']):<28} {c['reproduced']:<10} {c['reason']}")
    return lines


def html_section(result: dict) -> str:
    """``<section id="claims">``: one table row per claim (effect, 95% CI, n, verdict, reason)."""
    import html

    def cell(v) -> str:
        return html.escape("" if v is None else str(v))

    colors = {"yes": "#1a7f37", "no": "#b42318", "unclear": "#8a6d00"}
    rows = []
    for c in result["claims"]:
        n = ", ".join(f"{k} {v}" for k, v in (c.get("n") or {}).items())
        rows.append(
            f'<tr id="claim-{c["id"]}"><td>{c["id"]}</td><td>{cell(c["claim"])}</td>'
            f'<td>{cell(_fmt(c["effect"], c["ci"]))}<br><small>{cell(c["measure"])}</small></td><td>{cell(n)}</td>'
            f'<td style="color:{colors.get(c["reproduced"], "#222")}"><b>{cell(c["reproduced"])}</b></td>'
            f'<td>{cell(c["reason"])}<br><small>{cell(c["definition"])}</small></td></tr>')
    cellinfo = result.get("cell") or {}
    ratio = ", ".join(f"{a} {v:.2f}" for a, v in (cellinfo.get("tokens_vs_es") or {}).items() if v is not None)
    s = result.get("settings") or {}
    return (
        '<section id="claims"><h2>Claims of the study, tested on this sweep</h2>'
        f'<p>Comparison cell: model <b>{cell(cellinfo.get("model"))}</b>; generated training tokens relative '
        f'to ES: {cell(ratio or "-")}. 95% percentile bootstrap intervals ({cell(s.get("n_boot"))} resamples, '
        f'seed {cell(s.get("seed"))}) over problems (paired) and seeds; tolerance {cell(s.get("tolerance"))}, '
        f'entropy band +-{cell(s.get("band"))} relative. Full definitions: claims.json, esopt/claims.py.</p>'
        '<table id="table-claims"><thead><tr><th>#</th><th>claim</th><th>effect [95% CI]</th><th>n</th>'
        f'<th>reproduced</th><th>reason / definition</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
        '</section>\n')
