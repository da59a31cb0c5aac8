"""Synthetic sweeps for calibrating the claims: runs x problems x samples drawn from variance
components, with each claim's effect set to a chosen value, as records the real claim code reads
(``esopt.study.claims.compute``).

    records = simulate(Design(seeds=8), effects={1: 0.0}, rng=np.random.default_rng(0))
    rates = calibrate(Design(), sims=200, seed=0)         # per claim: false yes, false no, power

The generative model (one comparison cell and a family of model sizes, every run of a model on
the same P problems):
- problem difficulty: a share ``unsolvable`` of the problems is never solved (p = 0, untouched
  by training), the others p ~ Beta(a, b) clipped to [0.05, 0.85];
- a run r of algorithm A: p_rp = p_p + (g_A + u_r) / (1 - unsolvable) on the solvable
  problems, u_r ~ N(0, sigma_seed^2) the seed's deviation (so the mean Pass@1 gain over all
  problems is g_A + u_r); base evaluations: one draw per model, shared by its runs;
- problem x algorithm (``sigma_problem_algo``, default 0): algorithm A's runs see p_p + d_Ap,
  d_Ap ~ N(0, sigma^2) drawn once per sweep (ES and GRPO change different problems), clipped to
  [0.01, 0.99] and re-centred so that the mean over problems stays that of p;
- per-sample noise: correct counts ~ Binomial(n, p_rp);
- GRPO's Pass@1 curve (claim 6's saturation check): an evaluation at half its budget with
  p = p_p + (g_GRPO + u_r - climb + v_r) / (1 - unsolvable), v_r ~ N(0, sigma_step^2) (the
  run's own drift between the two evaluations), so the second half adds ``climb`` on average
  (0, the default: GRPO has saturated);
- out-of-domain entropy: rel_r = Q_A (g_A + u_r) + N(0, sigma_entropy^2) (Q_A: change per unit gain);
- ES members (claim 4): per run standardized reward z, js = 0.6 z + 0.8 e1, p_pop = 0.6 z + 0.8 e2,
  Pass@K gain = 0.01 (0.5 z + rho e1 + rho e2 + sqrt(1 - 2 rho^2) e3): partial correlation rho;
- sparsity (claim 5): pruned p = p_p + s_keep (g_E + u_r) / (1 - unsolvable), the random-mask
  control the same with s_random;
- population vs size (claim 7): per size j, final p += (s0 + beta (ln params_j - mean) + w_j)
  (log2 N - mean log2 N) / (1 - unsolvable), w_j ~ N(0, sigma_size^2) (between-size variance).

Default magnitudes (assumed: no real runs were on the calibration machine; taken from the
measured paper_cpu run, docs/results/claims_paper_cpu.md): base Pass@1 ~0.20 and Pass@16 ~0.72
(0.204 and 0.747 measured) from unsolvable 0.2 and Beta(2, 6); sigma_seed 0.005 (claim 1's
interval over 3 seeds x 500 problems); sigma_entropy 0.005 (claim 2's intervals); s0 0.006 Pass@1
per doubling of N (tiny-xs 0.155 -> 0.171 over N 4 -> 32); sigma_size 0.001 (assumed);
sigma_step 0.005 (assumed: a run's drift between evaluations as large as the seeds' spread).

``effects`` maps a claim id to its effect theta on the claim's own scale (claim_rules' estimand):
its boundary (null), boundary + delta (true at the smallest effect of interest), or beyond
(``STRONG``, the default: every precondition met). ``nothing_trains=True`` is the global null:
no algorithm gains, weights still move (seed deviations), entropy, diversity and sparsity
unrelated, no population effect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from esopt.algorithms import family, trains
from esopt.study.claim_rules import REGISTRY

STRONG = {1: 0.05, 2: 2.0, 3: 0.02, 4: 0.6, 5: 0.01, 6: 0.02, 7: 0.003}
GRPO_PER_GAIN = -2.3          # GRPO's relative entropy change per unit Pass@1 gain (paper_cpu: -16.8% / 0.074)
HERMITE = np.polynomial.hermite_e.hermegauss(6)
ITERATIONS = 40               # every simulated run's budget; GRPO is also evaluated at half of it


@dataclass(frozen=True)
class Design:
    """What a preset runs: seeds per cell, problems, samples per problem, the family's sizes and
    populations (claims 4 and 7), the pass@K of claims 3 and 6 (n >= 4K)."""
    seeds: int = 3
    problems: int = 500
    samples: int = 32
    sizes: int = 5
    pops: tuple = (4, 8, 16, 32)
    family_seeds: int | None = None          # None: ``seeds``
    k: int = 8


@dataclass(frozen=True)
class Components:
    """Variance components and fixed magnitudes (see the module docstring)."""
    unsolvable: float = 0.2
    beta: tuple = (2.0, 6.0)
    sigma_seed: float = 0.005
    sigma_entropy: float = 0.005
    sigma_size: float = 0.001
    s0: float = 0.006
    s_random: float = 0.3
    sigma_step: float = 0.005
    sigma_problem_algo: float = 0.0        # per-problem, per-algorithm offset of p (shared by its seeds)
    grpo_climb: float = 0.0                # GRPO's mean Pass@1 gain over the second half of its budget
    params: tuple = (3e4, 1.7e6)           # the family's smallest and largest size (geometric between)
    es_gain: float | None = None           # ES's Pass@1 gain where claim 1 is not under test (None: STRONG[1])
    grpo_per_gain: float = GRPO_PER_GAIN   # GRPO's relative OOD entropy change per unit of Pass@1 gain


def _pass_k_expected(p: np.ndarray, shift: float, c: Components, K: int) -> float:
    """E over u ~ N(0, sigma_seed^2) of mean_p [1 - (1 - p'_p)^K], p' the shifted solvable p."""
    x, w = HERMITE
    solv = p > 0
    out = 0.0
    for xi, wi in zip(x, w / w.sum()):
        q = np.clip(p[solv] + (shift + c.sigma_seed * xi) / (1 - c.unsolvable), 0.0, 1.0)
        out += wi * float(np.sum(1 - (1 - q) ** K)) / p.size
    return out


def _solve_shift(p, target: float, c: Components, K: int, lo=-0.2, hi=0.3) -> float:
    """The shift g with E Pass@K(g) = target (bisection: Pass@K rises with g)."""
    for _ in range(32):
        mid = (lo + hi) / 2
        if _pass_k_expected(p, mid, c, K) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def difficulty(P: int, c: Components, rng) -> np.ndarray:
    p = np.clip(rng.beta(*c.beta, P), 0.05, 0.85)
    p[rng.random(P) < c.unsolvable] = 0.0
    return p


def knobs(p: np.ndarray, effects: dict, c: Components, K: int, nothing_trains: bool = False) -> dict:
    """Generator settings (gains per algorithm, Q per algorithm, rho, s_keep, beta) that put
    each claim's effect at ``effects[id]`` on this problem set."""
    th = {**STRONG, **({1: c.es_gain} if c.es_gain is not None else {}), **effects}
    if nothing_trains:
        return {"g": {a: 0.0 for a in ("es", "grpo", "es_grpo", "grpo_es")}, "q": {"es": 0.0, "grpo": 0.0},
                "rho": 0.0, "s_keep": 0.9, "s_random": 0.9, "beta": 0.0, "s0": 0.0}
    g_es = th[1]
    pk_es = _pass_k_expected(p, g_es, c, K)
    g_grpo = _solve_shift(p, pk_es - th[3], c, K)                      # claim 3: PassK(ES) - PassK(GRPO)
    d6 = th[6]                                                         # claim 6: min(d1, dK) = theta6
    g_seq = max(g_grpo + d6, _solve_shift(p, pk_es + d6, c, K))
    return {"g": {"es": g_es, "grpo": g_grpo, "es_grpo": g_seq, "grpo_es": g_seq},
            "q": {"es": c.grpo_per_gain + th[2], "grpo": c.grpo_per_gain}, "rho": th[4],
            "s_keep": 0.9 + (th[5] / g_es if g_es > 0 else 0.0), "s_random": c.s_random, "beta": -th[7],
            "s0": c.s0}


def _counts(p, shift, n, c, rng):
    q = p.copy()
    solv = p > 0
    q[solv] = np.clip(p[solv] + shift / (1 - c.unsolvable), 0.0, 1.0)
    return rng.binomial(n, q)


def simulate(design: Design = Design(), effects: dict | None = None, components: Components = Components(),
             rng: np.random.Generator | None = None, nothing_trains: bool = False) -> list[dict]:
    """One synthetic sweep as run records (see the module docstring)."""
    rng = rng or np.random.default_rng(0)
    c, d = components, design
    n, P, R = d.samples, d.problems, d.seeds
    p = difficulty(P, c, rng)
    kn = knobs(p, effects or {}, c, d.k, nothing_trains)
    base = rng.binomial(n, p)
    recs = []

    def rec(algo, seed, final, model="cell", pop=16, params=1e5, **extra):
        return {"run_id": f"{algo}-{model}-{pop}-{seed}", "status": "completed", "algo": algo, "model": model,
                "params": params, "pop": pop, "seed": seed, "iterations": ITERATIONS, "sigma": 0.01, "lr": 0.005,
                "samples": n, "base_counts": base if model == "cell" else extra.pop("base"), "final_counts": final,
                "tokens_generated": 1000, **extra}

    solv = p > 0  # problem x algorithm: each algorithm moves each solvable problem by its own offset
    p_algo = {}
    for algo in ("es", "grpo", "es_grpo", "grpo_es"):
        pa = p.copy()
        if c.sigma_problem_algo > 0 and not nothing_trains:
            q = np.clip(p[solv] + rng.normal(0, c.sigma_problem_algo, int(solv.sum())), 0.01, 0.99)
            for _ in range(3):  # re-centred: the clipping must not move the mean (no gain of its own)
                q = np.clip(q - (q.mean() - p[solv].mean()), 0.01, 0.99)
            pa[solv] = q
        p_algo[algo] = pa
    for seed in range(R):
        recs.append(rec("none", seed, base, pop=None))
        for algo in ("es", "grpo", "es_grpo", "grpo_es"):
            u = rng.normal(0, c.sigma_seed)
            g = kn["g"][algo] + u
            pa = p_algo[algo]
            final = _counts(pa, g, n, c, rng)
            extra = {"base_pass@1": float(base.mean() / n), "final_pass@1": float(final.mean() / n)}
            if algo == "grpo":
                climb = 0.0 if nothing_trains else c.grpo_climb
                mid = _counts(pa, g - climb + rng.normal(0, c.sigma_step), n, c, rng)
                extra["pass1_curve"] = [[0, extra["base_pass@1"]], [ITERATIONS // 2, float(mid.mean() / n)],
                                        [ITERATIONS, extra["final_pass@1"]]]
            if algo in ("es", "grpo"):
                h0 = 1.0
                extra |= {"base_ood_entropy": h0,
                          "final_ood_entropy": h0 * (1 + kn["q"][algo] * g + rng.normal(0, c.sigma_entropy))}
            if algo == "es":
                extra["sparsity"] = {"samples": n, "base_counts": base, "trained_counts": final, "curves": [
                    {"mode": "global", "keep": 0.22, "correct_counts": _counts(pa, kn["s_keep"] * g, n, c, rng)},
                    {"mode": "random", "keep": 0.22, "correct_counts": _counts(pa, kn["s_random"] * g, n, c, rng)}]}
            recs.append(rec(algo, seed, final, pop=None if algo == "grpo" else 16, **extra))
    # the family: sizes x pops x seeds of ES
    sizes = np.geomspace(c.params[0], c.params[1], d.sizes)
    lp = np.log(sizes)
    x = np.log2(np.asarray(d.pops, dtype=float))
    g_es = kn["g"]["es"]
    rho = kn["rho"]
    for j in range(d.sizes):
        pj = difficulty(P, c, rng)
        bj = rng.binomial(n, pj)
        slope = kn["s0"] + kn["beta"] * (lp[j] - lp.mean()) + rng.normal(0, c.sigma_size)
        for pop, xi in zip(d.pops, x):
            for seed in range(d.family_seeds or R):
                u = rng.normal(0, c.sigma_seed)
                final = _counts(pj, g_es + u + slope * (xi - x.mean()), n, c, rng)
                z, e1, e2, e3 = rng.normal(size=4)
                gain_k = 0.01 * (0.5 * z + rho * e1 + rho * e2 + math.sqrt(max(0.0, 1 - 2 * rho * rho)) * e3)
                recs.append(rec("es", seed, final, model=f"size{j}", pop=pop, params=float(sizes[j]), base=bj,
                                js_succ=0.1 + 0.01 * (0.6 * z + 0.8 * e1), p_pop=0.5 + 0.01 * (0.6 * z + 0.8 * e2),
                                reward_mean=0.3 + 0.01 * z, k_max=d.k, **{f"base_pass@{d.k}": 0.7,
                                                                         f"final_pass@{d.k}": 0.7 + gain_k},
                                es_temperature=1.0, es_samples=4))
    return recs


def scenarios() -> list[tuple[str, int | None, dict, bool]]:
    """(name, claim, effects, nothing_trains): per claim its null (theta = b) and its smallest
    effect of interest (theta = b + delta), the others strong; then the global null."""
    out = []
    for cid, cl in sorted(REGISTRY.items()):
        out.append((f"null{cid}", cid, {cid: cl.boundary}, False))
        out.append((f"sesoi{cid}", cid, {cid: cl.boundary + cl.sesoi}, False))
    out.append(("nothing_trains", None, {}, True))
    return out


def calibrate(design: Design = Design(), sims: int = 200, seed: int = 0, components: Components = Components(),
              only: list[str] | None = None) -> dict:
    """Rates of each verdict per scenario through the real claim code: {name: {"claim", "sims",
    "yes", "no", "unclear", "any_yes"}} (rates; any_yes: some claim said yes)."""
    from esopt.study.claims import compute

    out = {}
    for i, (name, cid, eff, null) in enumerate(scenarios()):
        if only is not None and name not in only:
            continue
        rng = np.random.default_rng([seed, i])
        tally = {"yes": 0, "no": 0, "unclear": 0, "any_yes": 0}
        for _ in range(sims):
            res = compute(simulate(design, eff, components, rng, nothing_trains=null), k=design.k)
            v = {c["id"]: c["reproduced"] for c in res["claims"]}
            if cid is not None:
                tally[v[cid]] += 1
            tally["any_yes"] += any(x == "yes" for x in v.values())
        out[name] = {"claim": cid, "sims": sims, **{k: t / sims for k, t in tally.items()}}
    return out


def table(rates: dict) -> list[str]:
    """The calibration lines: ``claim <n> false_yes=... false_no=... power=... sims=...`` per
    claim (false yes at its null; false no and power at its smallest effect of interest), then
    ``familywise false_yes=...`` (some claim says yes where nothing trains)."""
    lines = []
    for cid in sorted(REGISTRY):
        a, b = rates.get(f"null{cid}"), rates.get(f"sesoi{cid}")
        if a is None or b is None:
            continue
        lines.append(f"claim {cid} false_yes={a['yes']:.3f} false_no={b['no']:.3f} power={b['yes']:.3f} "
                     f"sims={a['sims']}")
    if "nothing_trains" in rates:
        lines.append(f"familywise false_yes={rates['nothing_trains']['any_yes']:.3f}")
    return lines


# ---------------------------------------------------------------------------------------
# variance components estimated from real runs
def _pool(groups: list[np.ndarray]) -> tuple[float | None, int]:
    """Pooled within-group variance sum((x - mean_g)^2) / sum(n_g - 1) over groups of two or more;
    (None, 0) when there is none."""
    ss, df = 0.0, 0
    for g in groups:
        g = np.asarray(g, dtype=np.float64)
        if g.size > 1:
            ss += float(((g - g.mean()) ** 2).sum())
            df += g.size - 1
    return (ss / df, df) if df else (None, 0)


def _noise_var(counts: np.ndarray, n: int) -> float:
    """Binomial noise variance of a run's mean Pass@1 over P problems: mean_p q(1-q) / (n P)."""
    q = np.asarray(counts, dtype=np.float64) / n
    return float(np.mean(q * (1 - q))) / (n * q.size)


def estimate_components(cell_records: list[dict], family_records: list[dict] | None = None,
                        start: Components = Components()) -> tuple[Components, dict]:
    """``Components`` estimated from real runs (records as ``esopt.study.claims`` reads them, with
    ``attach_details``'s per-problem counts); what cannot be estimated keeps ``start``'s value.
    Returns the components and {field: how it was estimated (or "assumed")}.

    - difficulty (one base evaluation of the cell, q_p = c_p / n): ``unsolvable`` = share with
      c_p = 0; ``beta`` by moments on the others, E q = a / (a + b), Var q - mean q(1-q)/n =
      ab / ((a+b)^2 (a+b+1)) (binomial noise removed);
    - ``sigma_seed``^2 = pooled within-algorithm variance of the runs' Pass@1 gains - the mean
      binomial variance of a final Pass@1 (every run scores the same problems);
    - ``sigma_problem_algo``^2 = (Var over the problems the base solves of mean_ES q_p - mean_GRPO q_p
      - its binomial part) / 2;
    - ``sigma_entropy``^2 = pooled residual variance of rel = h_final / h_base - 1 on the gain,
      within ES and within GRPO (the simulator's rel = Q g + N(0, sigma_entropy^2)); ``grpo_per_gain``
      = GRPO's mean rel / its mean gain; ``es_gain`` = ES's mean gain (the operating point of the
      scenarios that do not test claim 1: claim 2's ratio, for one, is as noisy as ES's gain is small);
    - GRPO's curve: d = Pass@1(final) - Pass@1(nearest to half the budget); ``grpo_climb`` = mean d,
      ``sigma_step``^2 = Var d - 2 x binomial variance;
    - ``s_random`` = sum over ES runs of (random-mask - base) / sum of (trained - base) Pass@1;
    - the family (``family_records``, ES runs, >= 2 populations per model): per size the OLS slope
      of Pass@1 on log2 N with its se; ``s0`` = mean slope, ``sigma_size``^2 = the slopes' residual
      variance around their line on ln params (sizes - 2 df) - mean se^2;
      ``params`` = the smallest and largest size.
    Every variance is floored at 0 (a negative estimate: the noise explains the spread).
    """
    from dataclasses import replace

    from esopt.study.claim_rules import _num, _size_cells, ols_slope
    from esopt.study.claims import select_cell

    est: dict = {}
    how = {f: "assumed" for f in ("unsolvable", "beta", "sigma_seed", "sigma_problem_algo", "es_gain",
                                  "sigma_entropy", "grpo_per_gain",
                                  "grpo_climb", "sigma_step", "s_random", "s0", "sigma_size", "params")}
    cell = select_cell(cell_records)["algos"]
    runs = [r for rs in cell.values() for r in rs if r.get("final_counts") is not None and r.get("samples")]
    base = next((r for r in runs if r.get("base_counts") is not None), None)
    if base is not None:
        n = int(base["samples"])
        q = np.asarray(base["base_counts"], dtype=np.float64) / n
        solv = q[q > 0]
        est["unsolvable"] = float(np.mean(q == 0))
        m = float(solv.mean())
        v = float(solv.var(ddof=1)) - float(np.mean(solv * (1 - solv))) / n
        if solv.size > 2 and 0 < v < m * (1 - m):
            k = m * (1 - m) / v - 1
            est["beta"] = (m * k, (1 - m) * k)
            how["beta"] = f"moments of {solv.size} solved problems' base Pass@1 (mean {m:.3f}, var {v:.4f})"
        how["unsolvable"] = f"{int(np.sum(q == 0))} of {q.size} problems unsolved in the base's {n} samples"

    def gain(r):
        return float(np.mean(r["final_counts"]) - np.mean(r["base_counts"])) / float(r["samples"])

    with_base = {a: [r for r in rs if r.get("final_counts") is not None and r.get("base_counts") is not None
                     and r.get("samples")] for a, rs in cell.items() if trains(a)}
    var, df = _pool([np.array([gain(r) for r in rs]) for rs in with_base.values()])
    if var is not None:
        noise = float(np.mean([_noise_var(r["final_counts"], int(r["samples"])) for rs in with_base.values()
                               for r in rs]))
        est["sigma_seed"] = math.sqrt(max(0.0, var - noise))
        how["sigma_seed"] = (f"within-algorithm spread of {sum(map(len, with_base.values()))} runs' Pass@1 gains "
                             f"({df} df; sd {math.sqrt(var):.4f}, binomial part {math.sqrt(noise):.4f})")
    es_r, grpo_r = with_base.get("es", []), with_base.get("grpo", [])
    if len(es_r) >= 2 and len(grpo_r) >= 2 and base is not None:  # spread of the per-problem ES - GRPO gap
        P = min(len(r["final_counts"]) for r in es_r + grpo_r)
        mean_q = {a: np.array([np.asarray(r["final_counts"][:P], dtype=np.float64) / r["samples"] for r in rs])
                  for a, rs in (("es", es_r), ("grpo", grpo_r))}
        keep = np.asarray(base["base_counts"][:P]) > 0
        d = mean_q["es"].mean(0)[keep] - mean_q["grpo"].mean(0)[keep]
        noise = sum(float(np.mean(q.mean(0)[keep] * (1 - q.mean(0)[keep]))) / (int(base["samples"]) * q.shape[0])
                    for q in mean_q.values())
        est["sigma_problem_algo"] = math.sqrt(max(0.0, (float(d.var(ddof=1)) - noise) / 2))
        how["sigma_problem_algo"] = (f"per-problem ES - GRPO Pass@1 difference over {int(keep.sum())} problems the base "
                                     f"solves (sd {float(d.std(ddof=1)):.3f}, binomial part {math.sqrt(noise):.3f}) / sqrt(2)")
    es_gains = [gain(r) for r in with_base.get("es", [])]
    if len(es_gains) >= 2:
        est["es_gain"] = float(np.mean(es_gains))
        how["es_gain"] = f"mean Pass@1 gain of {len(es_gains)} ES runs (the other claims' scenarios use it)"
    resid, per_gain = [], {}
    for a in ("es", "grpo"):
        pts = [(gain(r), _num(r.get("final_ood_entropy")) / _num(r.get("base_ood_entropy")) - 1)
               for r in with_base.get(a, []) if _num(r.get("base_ood_entropy")) and
               _num(r.get("final_ood_entropy")) is not None]
        if len(pts) >= 3:
            x, y = np.array(pts).T
            per_gain[a] = float(y.mean() / x.mean()) if x.mean() > 0 else None
            b = ols_slope(x, y)[0]
            resid.append(y - y.mean() - b * (x - x.mean()))
    if resid:
        ss, dfe = sum(float(e @ e) for e in resid), sum(e.size - 2 for e in resid)
        if dfe > 0:
            est["sigma_entropy"] = math.sqrt(ss / dfe)
            how["sigma_entropy"] = f"residual sd of the relative OOD entropy change on the gain, ES and GRPO ({dfe} df)"
    if per_gain.get("grpo") is not None:
        est["grpo_per_gain"] = per_gain["grpo"]
        how["grpo_per_gain"] = "GRPO's mean relative OOD entropy change / its mean Pass@1 gain"
    steps, noises = [], []
    for r in with_base.get("grpo", []):
        curve = [(float(i), float(v)) for i, v in (r.get("pass1_curve") or [])]
        it = _num(r.get("iterations"))
        if len(curve) >= 3 and it:
            mid = min(curve[1:-1], key=lambda c: abs(c[0] - it / 2))
            steps.append(curve[-1][1] - mid[1])
            noises.append(_noise_var(r["final_counts"], int(r["samples"])))
    if len(steps) >= 3:
        est["grpo_climb"] = float(np.mean(steps))
        est["sigma_step"] = math.sqrt(max(0.0, float(np.var(steps, ddof=1)) - 2 * float(np.mean(noises))))
        how["grpo_climb"] = how["sigma_step"] = f"GRPO's Pass@1 from mid-budget to final, {len(steps)} runs"
    num = den = 0.0
    for r in with_base.get("es", []):
        sp = r.get("sparsity") or {}
        ctrl = next((c for c in sp.get("curves", []) if c.get("mode") == "random"), None)
        if ctrl and sp.get("base_counts") is not None and sp.get("trained_counts") is not None:
            b0 = float(np.mean(sp["base_counts"]))
            num += float(np.mean(ctrl["correct_counts"])) - b0
            den += float(np.mean(sp["trained_counts"])) - b0
    if den > 0:
        est["s_random"] = num / den
        how["s_random"] = "random-mask gain / trained gain, summed over the cell's ES runs"
    cells = _size_cells([r for r in (family_records or []) if family(r.get("algo")) == "es"])
    if len(cells) >= 2:
        slopes, ses, params = [], [], []
        for pops in cells.values():
            x = [math.log2(p) for p, rs in pops.items() for _ in rs]
            y = [float(np.mean(r["final_counts"])) / float(r["samples"]) for rs in pops.values() for r in rs]
            b, se, _ = ols_slope(x, y)
            slopes.append(b)
            ses.append(se)
            params.append(_num(next(iter(pops.values()))[0].get("params")))
        est["s0"] = float(np.mean(slopes))
        how["s0"] = f"mean per-size Pass@1 slope on log2 N over {len(cells)} sizes"
        if len(cells) >= 3 and all(p for p in params):  # the spread around the trend on ln params
            lp = np.log(params) - np.mean(np.log(params))
            y = np.asarray(slopes) - np.mean(slopes)
            e = y - float(lp @ y) / float(lp @ lp) * lp
            est["sigma_size"] = math.sqrt(max(0.0, float(e @ e) / (len(e) - 2) - float(np.nanmean(np.square(ses)))))
            how["sigma_size"] = (f"residual spread of {len(cells)} per-size slopes around their trend on ln params, "
                                 "minus their mean squared se")
        if all(p for p in params):
            est["params"] = (float(min(params)), float(max(params)))
            how["params"] = f"{len(cells)} sizes"
    return replace(start, **est), how


def components_from_sweeps(cell_dir, family_dir=None) -> tuple[Components, dict]:
    """``estimate_components`` from aggregated sweep folders (runs.parquet and the run folders):
    the comparison cell's sweep and, optionally, the ES family's."""
    from esopt.study import claims, tables

    def records(d):
        agg = tables.load(d)
        recs = claims.records_from_tables(agg.runs, agg.curves)
        claims.attach_details(recs, tables.find_runs_dir(agg.sweep_dir))
        return recs

    return estimate_components(records(cell_dir), records(family_dir) if family_dir else None)
