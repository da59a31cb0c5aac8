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
  problems, u_r ~ N(0, sigma_seed^2) the seed's deviation (GRPO's: ``sigma_seed_grpo`` where a
  pilot measured it apart; so the mean Pass@1 gain over all problems is g_A + u_r); base evaluations: one draw per model, shared by its runs;
- problem x algorithm: algorithm A's runs see clip(p_p + d_Ap - c_A, 0.01, 0.99), d_Ap ~
  N(0, sigma_A^2) drawn once per sweep (ES and GRPO change different problems; sigma_A each arm's
  own, ``sigma_problem_es`` / ``sigma_problem_grpo``, else ``sigma_problem_algo``), not re-centred:
  the draw's mean over problems moves the arm's Pass@1 as it does in real runs; c_A is the
  constant that keeps the expected mean over problems at p's despite the clipping (``shift.centre``);
- per-sample noise: correct counts ~ Binomial(n, p_rp);
- GRPO's Pass@1 curve (claim 6's saturation check): an evaluation at half its budget with
  p = p_p + (g_GRPO + u_r - climb + v_r) / (1 - unsolvable), v_r ~ N(0, sigma_step^2), so the
  second half adds ``climb`` on average (0, the default: GRPO has saturated);
- out-of-domain entropy (claim 2): rel_r = h0 + gamma (g_A + u_r) + theta_2 [A = ES] +
  N(0, sigma_entropy^2), gamma = ``grpo_per_gain`` for both algorithms, h0 = ``entropy_intercept``;
- sparsity (claim 5): the pruned model at the trained shift + theta_5 (pruned - trained), the
  equal-norm control at the pruned shift - the gap (effects["5c"], default the measured
  ``control_gap``, else theta_5 + (1 - s_equal_norm) g_E), the random mask at s_random g_E;
- the rivals (claims 8-11): ``_rivals``'s docstring (held-out probes with ES's forgetting at the
  same gain and its recovery, the update's top-22% share and l2 norm, the ES/GRPO barrier and
  cosine, and an anchored ES arm); ``estimate_components`` estimates their components where the
  runs carry the probes (eval.probes) and drift.json's update statistics (analysis=[drift]); the
  barrier's noise stays assumed;
- ES family (claims 4 and 7): ``_family``'s docstring; per size j the population slope
  s0 + beta (ln params_j - mean) + w_j on log2 N, w_j ~ N(0, sigma_size^2).

Misspecifications the rules do not model (``GENERATORS``, each a Components override; what each
perturbs: ``PERTURBS``): a seed x problem term (``sigma_seed_problem``), a shared evaluation seed
(every evaluation of a model draws the same uniforms: ``_Evaluator``), overdispersed evaluations
(``overdispersion``: beta-binomial counts), heavy-tailed and two-batch run-level deviations
(``run_tails``, ``batch_shift``: ``shaped``), count noise in claim 4's js_succ / p_pop
(``sigma_count_js``, with its variance estimated from ``TRAIN_LINES`` lines). Each draws its own
randomness apart from the main stream, so at one seed a generator changes only what it perturbs
(each claim's ``Claim.generators``: at least four).

Default magnitudes are assumed (base Pass@1 ~0.20 and Pass@16 ~0.72 from unsolvable 0.2 and
Beta(2, 6); sigma_seed 0.005; sigma_entropy 0.005; s0 0.006; sigma_size 0.001; sigma_step
0.005); ``MEASURED`` holds those estimated from the paper_cpu runs (``estimate_components``),
``MODEL_COMPONENTS`` a real model's, from its pilot (the planner uses them for grids of that model).

``effects`` maps a claim id to its effect theta on the claim's own scale (claim_rules' estimand):
its boundary (null), boundary + delta (true at the smallest effect of interest), or beyond
(its ``strong`` effect, the default: every precondition met). ``nothing_trains=True`` is the global null:
no algorithm gains, weights still move (seed deviations), entropy, diversity and sparsity
unrelated, no population effect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from esopt.algorithms import kind, trains
from esopt.core.errors import ConfigError
from esopt.study.claims.rules import ES_ANCHOR, KEEP, REGISTRY, pass_k_for
from esopt.study.claims.shift import CLIP, centre, problem_spread

PROBE_T = (0.25, 0.5, 0.75)   # claim 11: the interpolation points of the barrier
GRPO_PER_GAIN = -2.3          # GRPO's relative entropy change per unit Pass@1 gain (paper_cpu: -16.8% / 0.074)
ITERATIONS = 40               # every simulated run's budget; GRPO is also evaluated at half of it
TRAIN_LINES = 40              # claim 4: train lines a run's js_succ / p_pop are the mean of (count noise)


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
    """Variance components and fixed magnitudes (see the module docstring); the last four are
    the misspecifications the rules do not model (``GENERATORS``), 0 in the default."""
    unsolvable: float = 0.2
    beta: tuple = (2.0, 6.0)
    sigma_seed: float = 0.005
    sigma_seed_grpo: float | None = None   # GRPO's own seed spread, where it differs (None: sigma_seed)
    sigma_entropy: float = 0.005
    sigma_size: float = 0.001
    s0: float = 0.006
    s_random: float = 0.3
    sigma_step: float = 0.005
    sigma_problem_algo: float = 0.0        # per-problem, per-algorithm offset of p (shared by its seeds)
    sigma_problem_es: float | None = None  # ES's own per-problem spread (None: sigma_problem_algo)
    sigma_problem_grpo: float | None = None   # GRPO's own (None: sigma_problem_algo)
    grpo_climb: float = 0.0                # GRPO's mean Pass@1 gain over the second half of its budget
    params: tuple = (3e4, 1.7e6)           # the family's smallest and largest size (geometric between)
    es_gain: float | None = None           # ES's Pass@1 gain where claim 1 is not under test (None: claim 1's strong effect)
    grpo_gain: float | None = None         # GRPO's, where claim 3 is not under test (None: from claim 3's effect)
    grpo_per_gain: float = GRPO_PER_GAIN   # GRPO's relative OOD entropy change per unit of Pass@1 gain
    s_equal_norm: float = 0.3              # share of the gain the equal-norm control keeps
    control_gap: float | None = None       # claim 5: pruned - equal-norm control Pass@1, measured (None: from s_equal_norm)
    entropy_intercept: float = 0.0         # a relative OOD entropy change every run makes, whatever its gain
    sigma_seed_problem: float = 0.0        # seed x problem: each run's own per-problem offset of p
    shared_eval_seed: bool = False         # every evaluation of a model family draws the same uniforms
    sigma_count_js: float = 0.0            # claim 4: count noise of a run's js_succ / p_pop (sd of its mean)
    overdispersion: float = 0.0            # an evaluation's samples of one problem correlated (beta-binomial rho)
    run_tails: float = 0.0                 # run-level deviations Student t with these df at the same sd (0: normal)
    batch_shift: float = 0.0               # seeds in two balanced batches: each run-level deviation +-this many sds
    # the rivals' measures (claims 8-11; assumed, no real runs yet)
    probe_base: float = 0.4                # held-out probes' base Pass@1
    probe_per_gain: float = -0.3           # the probes' change per unit of target gain (both algorithms)
    sigma_probe: float = 0.004             # a run's probe change: seed spread
    sigma_probe_eval: float = 0.003        # one evaluation of the probes: measurement noise
    top_share: float = 0.6                 # GRPO's share of its squared norm in its top 22% of entries
    share_per_gain: float = 0.5            # that share's change per unit of gain (both algorithms)
    sigma_share: float = 0.01
    log_l2: float = -3.0                   # GRPO's ln l2 norm of its update
    sigma_log_l2: float = 0.1
    sigma_barrier: float = 0.004           # claim 11: one interpolated evaluation's noise
    sigma_cosine: float = 0.02


# the components estimated from the tuning runs of paper_cpu (8 seeds) and paper_cpu_family (its
# first 116 runs) by estimate_components (docs/results/claims_calibration.md, "components from
# real runs"; those sweeps are gone, so the values are kept here); grpo_gain is ES's 0.0185 plus
# "GRPO - ES at Pass@1 +0.063" of that tuning run (docs/results/claims_paper_cpu.md). Each arm's
# own per-problem spread was not kept; it is backed out of what the runs recorded: ES's,
# sigma_problem_es = 0.04, is the spread at which claim 1's simulated se at paper_cpu's design (16
# seeds x 500 problems x 32 samples) is the 16-seed run's recorded one (CLAIM1_SE: +0.018, 95% CI
# [+0.011, +0.025], claims_paper_cpu.md "paper_cpu: claims"; the old single spread applied to ES
# gave 0.0047); GRPO's from the recorded ES - GRPO spread, sigma_problem_algo^2 x 2 =
# sigma_es^2 + sigma_grpo^2 (the arms' offsets independent): sqrt(2 x 0.0998^2 - 0.04^2) = 0.135.
CLAIM1_SE = 0.0033     # claim 1's se in that run: the CI's half-width 0.007 / t(0.975, ~16 df)
# claim 5's pruned - equal-norm control, as the 16-seed runs recorded it (claims_paper_cpu.md: paper_cpu
# +0.0066, se 0.0019; confirm2 +0.0044, se 0.0014): their mean. The tuning runs had no equal-norm curve,
# and (1 - s_equal_norm) x ES's gain, the default, put it at 0.013.
CONTROL_GAP = (0.00661 + 0.00439) / 2
MEASURED = Components(unsolvable=0.146, beta=(0.649, 2.05), sigma_seed=0.00413, sigma_problem_algo=0.0998,
                      sigma_problem_es=0.04, sigma_problem_grpo=0.135, control_gap=CONTROL_GAP,
                      es_gain=0.0185, grpo_gain=0.0815, sigma_entropy=0.0217, grpo_per_gain=-0.0834, grpo_climb=0.034,
                      sigma_step=0.00262, s_random=0.185, s0=0.0085, sigma_size=0.000684, params=(3.01e4, 8.01e5))

# per model, its components from a pilot sweep of that model (esopt.design uses them for a grid whose
# comparison cell runs it; other models get MEASURED). Regenerate a model's with
#   python -m esopt.design --pilot results/<pilot> --print-components
# SmolLM2-135M-Instruct on arith, from its pilot (2 seeds x es,grpo, 16 iterations, 100 held-out
# problems x 4 samples, eval.probes=[copy,first_letter,passages], analysis=[drift]; run 2026-12-04 at
# ae3bb9a; docs/results/claims_smollm2.md, "Pilot"), printed by
# `python -m esopt.design --pilot results/pilot_smollm2 --print-components`. Two seeds per algorithm:
# the slopes on the gain (probe_per_gain, share_per_gain), beta, GRPO's climb and the entropy terms
# stay at the simulator's assumed defaults. ES's two seeds (+0.015, +0.010) agree within their
# binomial noise (sigma_seed 0: floored); GRPO's went +0.025 and -0.052 (sigma_seed_grpo; grpo_gain,
# their mean: at the pilot GRPO's gain is not above 0).
SMOLLM2 = Components(
    unsolvable=0.74,
    sigma_seed=0.0,
    sigma_seed_grpo=0.0539,
    sigma_problem_algo=0.127,
    es_gain=0.0125,
    grpo_gain=-0.0137,
    probe_base=0.676,
    sigma_probe=0.00751,
    sigma_probe_eval=0.011,
    top_share=0.65,
    sigma_share=0.00823,
    log_l2=-0.531,
    sigma_log_l2=0.0394,
)
MODEL_COMPONENTS = {"smollm2-135m": SMOLLM2}

# the misspecified generators of the calibration (issues 39, 53): name -> Components overrides. Each
# draws its own randomness apart from the simulator's main stream (``_Evaluator``, ``shaped``), so
# under a fixed seed it changes only what it perturbs (tests/study/test_claims_calibration.py checks
# each claim's reading against ``Claim.generators``). entropy_intercept (every run's entropy +1.5%)
# left the list with issue 53: claim 2's rule has an intercept, so it no longer misspecifies it.
GENERATORS = {
    "current": {},
    "seed_x_problem": {"sigma_seed_problem": 0.05},
    "shared_eval_seed": {"shared_eval_seed": True},
    "overdispersed_eval": {"overdispersion": 0.03},
    "heavy_tails": {"run_tails": 3.0},
    "two_batches": {"batch_shift": 0.8},
    "count_noise": {"sigma_count_js": 0.008},
}
# claim 2's slope world (not a generator: the assumed components are one already): both algorithms'
# out-of-domain entropy -2.3 per unit of gain, at the measured components' non-overlapping gains
SLOPE_WORLD = {"grpo_per_gain": GRPO_PER_GAIN}
# what each generator perturbs (the calibration table's column)
PERTURBS = {
    "current": "nothing: the simulator's own model",
    "seed_x_problem": "each run's per-problem success: its own N(0, 0.05) offset per problem (Pass@1, Pass@K, "
                      "sparsity, the barrier's interpolations, the gains claims 2, 8, 9 match on)",
    "shared_eval_seed": "every evaluation of a model draws the same sampling uniforms (eval.seed fixed): every "
                        "count, the barrier's end points and interpolations alike",
    "overdispersed_eval": "an evaluation's samples of one problem correlated (beta-binomial, rho 0.03: 1.9x the "
                          "binomial variance at 32 samples): every count, the gains' noise the rules correct for",
    "heavy_tails": "every run-level deviation (seed gain, entropy, probes, update share and norm, barrier, cosine, "
                   "js_succ / p_pop) Student t(3) at the same sd",
    "two_batches": "seeds in two balanced batches (even, odd: two machines): every run-level deviation of a seed "
                   "+-0.8 sd by batch, the same sign across its measures",
    "count_noise": "js_succ and p_pop: count noise of sd 0.008, variance estimated from 40 train lines",
}
ARMS = ("es", "grpo", "es_grpo", "grpo_es", ES_ANCHOR)   # the simulated arms (the knobs' gains "g")
assert set(PERTURBS) == set(GENERATORS)
_unknown = {f"claim {c.id}: {g}" for c in REGISTRY.values() for g in c.generators if g not in GENERATORS}
if _unknown:
    raise ImportError(f"unknown generators {sorted(_unknown)} (simulate.GENERATORS)")


def difficulty(P: int, c: Components, rng) -> np.ndarray:
    p = np.clip(rng.beta(*c.beta, P), 0.05, 0.85)
    p[rng.random(P) < c.unsolvable] = 0.0
    return p


_unplanted = sorted(c.id for c in REGISTRY.values() if c.plant is None)
if _unplanted:
    raise ImportError(f"claims {_unplanted} have no simulation hook (Claim.plant): calibration would skip them")


def knobs(p: np.ndarray, effects: dict, c: Components, K: int, nothing_trains: bool = False) -> dict:
    """Generator settings that put each claim's effect at ``effects[id]`` (else its ``strong``) on
    this problem set: every claim's ``plant`` hook in claim order (a later one may read an earlier
    one's settings: claim 3 sets GRPO's gain from ES's Pass@K, claim 6 the sequences' from both),
    into one dict whatever they set; "g" holds each arm's Pass@1 gain. Where nothing trains, every
    arm's gain is 0 and each claim's ``rest``."""
    if nothing_trains:   # nothing trains: no gain, no forgetting, no recovery, the same update shapes
        out: dict = {"g": {a: 0.0 for a in ARMS}}
        for cl in REGISTRY.values():
            out |= cl.rest
        return out
    th: dict = {}
    for cl in REGISTRY.values():
        th |= {cl.id: cl.strong, **cl.second}
    th |= effects
    k: dict = {"g": {}}
    for cid, cl in sorted(REGISTRY.items()):
        cl.plant(th[cid], k, p, c, K, th, cid in effects)
    return k


def shaped(c: Components, z, seed=None):
    """Standard normal deviates ``z`` (drawn from the main stream) in the shape a generator gives
    every run-level deviation, at unit variance: Student t with ``run_tails`` df (its quantile at
    z's, scaled by sqrt((nu - 2) / nu)); with ``batch_shift`` b, the seed's batch (even seeds +,
    odd -) at +-b and the rest sqrt(1 - b^2) z. The main stream's draws are the same whatever the
    generator. Identity under the simulator's own model."""
    if not c.run_tails and not (c.batch_shift and seed is not None):
        return z
    from scipy.special import ndtr, stdtrit

    x = np.asarray(z, dtype=np.float64)
    if c.run_tails:
        nu = float(c.run_tails)
        x = stdtrit(nu, ndtr(x)) * math.sqrt((nu - 2) / nu)
    if c.batch_shift and seed is not None:
        b = float(c.batch_shift)
        x = x * math.sqrt(1 - b * b) + (b if int(seed) % 2 == 0 else -b)
    return float(x) if np.ndim(x) == 0 else x


def _dev(rng, c: Components, sd: float, seed=None, size=None):
    """A run-level deviation N(0, sd^2) in the generator's shape (``shaped``)."""
    return sd * shaped(c, rng.normal(size=size), seed)


class _Evaluator:
    """Correct counts of an evaluation: Binomial(n, q) per problem, or, with a shared evaluation
    seed, the count of a model family's fixed uniforms U[p, s] below q_p (every evaluation of
    that family draws the same sampling noise, as eval.seed = 0 does in real sweeps); with
    ``overdispersion`` rho, each problem's q first drawn from Beta(q (1/rho - 1), (1 - q)(1/rho - 1))
    for that evaluation (beta-binomial). Each evaluation takes one integer from the main stream
    (its own child stream's seed) and the generators' randomness from it or from ``aux``, so the
    main stream's draws are the same under every generator."""

    def __init__(self, n: int, c: Components, rng, aux=None):
        self.n, self.c, self.rng, self.U = n, c, rng, {}
        self.aux = aux if aux is not None else rng.spawn(1)[0]

    def q(self, p, shift, offset=None):
        """Each problem's success probability at a Pass@1 shift (and a run's own offsets, less
        the constant that keeps their clipped mean at 0: ``shift.centre``, as the arms' offsets,
        so the run's expected Pass@1 gain is the planted one; without it a solve rate near 0
        clipped up would add about +0.001 to every run's gain under ``seed_x_problem``)."""
        q = p.copy()
        solv = p > 0
        x = p[solv] + shift / (1 - self.c.unsolvable)
        if offset is not None:
            x = x + offset[solv] - centre(x, self.c.sigma_seed_problem, 0.0, 1.0)
        q[solv] = np.clip(x, 0.0, 1.0)
        return q

    def __call__(self, p, shift, family="cell", offset=None):
        return self.draw(self.q(p, shift, offset), family)

    def draw(self, q, family="cell"):
        sub = np.random.default_rng(int(self.rng.integers(2 ** 63)))
        if self.c.overdispersion > 0:
            k = 1.0 / self.c.overdispersion - 1.0
            q = q.copy()
            inner = (q > 0) & (q < 1)
            q[inner] = sub.beta(q[inner] * k, (1 - q[inner]) * k)
        if not self.c.shared_eval_seed:
            return sub.binomial(self.n, q)
        if family not in self.U:
            self.U[family] = np.sort(self.aux.random((q.size, self.n)), axis=1)
        return (self.U[family] < q[:, None]).sum(1)


def simulate(design: Design = Design(), effects: dict | None = None, components: Components = Components(),
             rng: np.random.Generator | None = None, nothing_trains: bool = False,
             parts: tuple = ("cell", "family")) -> list[dict]:
    """One synthetic sweep as run records (see the module docstring); ``parts``: the comparison
    cell, the ES family or both."""
    rng = rng or np.random.default_rng(0)
    c, d = components, design
    n, P, R = d.samples, d.problems, d.seeds
    p = difficulty(P, c, rng)
    kn = knobs(p, effects or {}, c, d.k, nothing_trains)
    if "cell" not in parts:
        return _drawn(_family(d, c, kn, rng, nothing_trains), kn, c, rng, nothing_trains, parts)
    ev = _Evaluator(n, c, rng)
    base = ev(p, 0.0)
    recs = []

    def rec(algo, seed, final, model="cell", pop=16, params=1e5, **extra):
        return {"run_id": f"{algo}-{model}-{pop}-{seed}", "status": "completed", "algo": algo, "model": model,
                "params": params, "pop": pop, "seed": seed, "iterations": ITERATIONS, "sigma": 0.01, "lr": 0.005,
                "samples": n, "base_counts": base if model == "cell" else extra.pop("base"), "final_counts": final,
                "tokens_generated": 1000, **extra}

    def seed_problem(size):       # the run's own per-problem offset (seed x problem), mean 0
        return _seed_problem(c, ev.aux, size, nothing_trains)

    solv = p > 0  # problem x algorithm: each algorithm moves each solvable problem by its own offset
    p_algo = {}
    for algo in ("es", "grpo", "es_grpo", "grpo_es"):
        pa = p.copy()
        sd = problem_spread(c, algo)
        if sd > 0 and not nothing_trains:
            pa[solv] = np.clip(p[solv] + rng.normal(0, sd, int(solv.sum())) - centre(p[solv], sd), *CLIP)
        p_algo[algo] = pa
    for seed in range(R):
        recs.append(rec("none", seed, base, pop=None))
        for algo in ("es", "grpo", "es_grpo", "grpo_es"):
            u = _dev(rng, c, c.sigma_seed_grpo if algo == "grpo" and c.sigma_seed_grpo is not None else c.sigma_seed,
                     seed)
            g = kn["g"][algo] + u
            pa, off = p_algo[algo], seed_problem(P)
            final = ev(pa, g, offset=off)
            extra = {"base_pass@1": float(base.mean() / n), "final_pass@1": float(final.mean() / n)}
            if algo == "grpo":
                climb = 0.0 if nothing_trains else c.grpo_climb
                mid = ev(pa, g - climb + _dev(rng, c, c.sigma_step, seed), offset=off)
                extra["pass1_curve"] = [[0, extra["base_pass@1"]], [ITERATIONS // 2, float(mid.mean() / n)],
                                        [ITERATIONS, extra["final_pass@1"]]]
            if algo in ("es", "grpo"):
                h0 = 1.0
                rel = (0.0 if nothing_trains else c.entropy_intercept) + kn["per_gain"] * g \
                    + (kn["h_es"] if algo == "es" else 0.0) + _dev(rng, c, c.sigma_entropy, seed)
                extra |= {"base_ood_entropy": h0, "final_ood_entropy": h0 * (1 + rel)}
            if algo == "es":
                extra["sparsity"] = {"samples": n, "base_counts": base, "trained_counts": final, "curves": [
                    {"mode": "global", "keep": KEEP, "correct_counts": ev(pa, g + kn["pruned"], offset=off)},
                    {"mode": "equal_norm", "keep": KEEP, "correct_counts": ev(pa, g + kn["control"], offset=off)},
                    {"mode": "random", "keep": KEEP, "correct_counts": ev(pa, kn["s_random"] * g, offset=off)}]}
            if algo in ("es", "grpo"):
                extra["_g"], extra["_q"] = g, ev.q(pa, g, off)   # the rivals' barrier interpolates the two
            recs.append(rec(algo, seed, final, pop=None if algo == "grpo" else 16, **extra))
    _rivals(recs, kn, c, p_algo["es"], rng.spawn(1)[0], ev, nothing_trains)
    recs += _family(d, c, kn, rng, nothing_trains) if "family" in parts else []
    return _drawn(recs, kn, c, rng, nothing_trains, parts)


def _seed_problem(c: Components, aux, size: int, nothing_trains: bool):
    """A run's own per-problem offset (seed x problem), mean 0, from the generators' stream; None
    without one."""
    if c.sigma_seed_problem <= 0 or nothing_trains:
        return None
    v = aux.normal(0, c.sigma_seed_problem, size)
    return v - v.mean()


def _drawn(recs: list[dict], kn: dict, c: Components, rng, nothing_trains: bool, parts: tuple) -> list[dict]:
    """The records with the run fields of every claim that draws its own (``Claim.draw``, reading
    a part simulated here), each from its own spawned stream (without such a claim nothing is
    spawned: the other claims' draws are what they were)."""
    for cl in sorted(REGISTRY.values(), key=lambda cl: cl.id):
        if cl.draw is not None and cl.part in parts:
            cl.draw(recs, kn, c, rng.spawn(1)[0], nothing_trains)
    return recs


def _rivals(recs: list[dict], kn: dict, c: Components, p_es, rng, ev: "_Evaluator", nothing_trains: bool) -> None:
    """The rivals' measures (claims 8-11), in place, from their own random stream (``rng``: a
    spawned child, so the seven claims' draws are what they were without them). Per ES / GRPO run
    at its true Pass@1 shift g (the seed's included):
    - held-out probes: base = probe_base (one evaluation per model, shared), final = base +
      probe_per_gain g - forget [ES] + u (u ~ N(0, sigma_probe), the seed's) + e (sigma_probe_eval
      per evaluation); ES's trough, one evaluation, at final - recovery, min = the smallest of
      base, trough and final as evaluated (real runs evaluate often near the trough: their min is
      biased lower than this one's);
    - the update: top-22% share = top_share + share_per_gain g - dense [ES] + N(0, sigma_share),
      ln l2 = log_l2 + large [ES] + N(0, sigma_log_l2);
    - connectivity (on the ES run, paired with the GRPO run of its seed): barrier = max over t in
      PROBE_T of the straight line between the two runs' final Pass@1 as evaluated, (1 - t) ES + t
      GRPO, minus one evaluation of the interpolated model (each problem's q (1 - t) q_ES + t q_GRPO,
      less barrier x (1 - |2t - 1|/2) spread over the solvable problems), + N(0, sigma_barrier)
      (the interpolated model's own deviation): its noise is the evaluations' and that;
      cosine = cosine + N(0, sigma_cosine);
    - an anchored ES run per seed (``es_anchor``: algo es, anchor_decay 0.01): Pass@1 shift ES's
      + anchor_pass1 (with its own seed x problem offset where the generator has one), probe
      change anchor_probe + u + e."""
    ev2 = _Evaluator(ev.n, c, rng, aux=ev.aux)
    ev2.U = ev.U                                     # a shared evaluation seed stays shared
    base_probe = c.probe_base + rng.normal(0, c.sigma_probe_eval)
    e = lambda: rng.normal(0, c.sigma_probe_eval)
    grpo_of = {r["seed"]: r for r in recs if r["algo"] == "grpo"}
    q_of = {(r["algo"], r["seed"]): r.pop("_q") for r in recs if "_q" in r}
    solv = p_es > 0
    anchored = []
    for r in recs:
        g = r.pop("_g", None)
        if g is None:
            continue
        es, seed = r["algo"] == "es", r["seed"]
        u = _dev(rng, c, c.sigma_probe, seed)
        final_true = base_probe + kn["probe_per_gain"] * g - (kn["forget"] if es else 0.0) + u
        final = final_true + e()
        low = min(base_probe, final)
        if es:
            low = min(low, final_true - kn["recovery"] + e())
        share = c.top_share + c.share_per_gain * g - (kn["dense"] if es else 0.0) + _dev(rng, c, c.sigma_share, seed)
        r |= {"base_probe_pass1": base_probe, "final_probe_pass1": final, "min_probe_pass1": low,
              "update_top_share": share,
              "update_l2": math.exp(c.log_l2 + (kn["large"] if es else 0.0) + _dev(rng, c, c.sigma_log_l2, seed))}
        if es:
            gr = grpo_of.get(seed)
            prof = []
            for t in PROBE_T:
                drop = kn["barrier"] * (1 - abs(2 * t - 1) / 2)
                if gr is None:           # no GRPO run of this seed: the profile alone
                    prof.append(drop + _dev(rng, c, c.sigma_barrier, seed))
                    continue
                q = (1 - t) * q_of[("es", seed)] + t * q_of[("grpo", seed)]
                q[solv] = np.clip(q[solv] - drop / (1 - c.unsolvable), 0.0, 1.0)
                line = (1 - t) * r["final_pass@1"] + t * gr["final_pass@1"]
                prof.append(line - float(ev2.draw(q).mean()) / ev.n + _dev(rng, c, c.sigma_barrier, seed))
            r |= {"connectivity_barrier": max(prof),
                  "connectivity_cosine": kn["cosine"] + _dev(rng, c, c.sigma_cosine, seed),
                  "connectivity_grpo_run": gr["run_id"] if gr is not None else None}
            ga = kn["g"][ES_ANCHOR] + _dev(rng, c, c.sigma_seed, seed)
            fa = ev2(p_es, ga, offset=_seed_problem(c, ev.aux, p_es.size, nothing_trains))
            pa = base_probe + kn["anchor_probe"] + _dev(rng, c, c.sigma_probe, seed) + e()
            anchored.append({**{k: v for k, v in r.items() if not k.startswith(("connectivity", "sparsity"))},
                             "run_id": f"{ES_ANCHOR}-{r['model']}-{r['pop']}-{r['seed']}", "anchor_decay": 0.01,
                             "final_counts": fa, "final_pass@1": float(fa.mean() / ev.n), "final_probe_pass1": pa,
                             "min_probe_pass1": min(base_probe, pa)})
    recs.extend(anchored)


def _family(d: Design, c: Components, kn: dict, rng, nothing_trains: bool) -> list[dict]:
    """The ES family: sizes x pops x seeds (claims 4 and 7). A run's Pass@1 shift is ES's gain +
    the size's population slope (claim 7) + its seed's u = sigma_seed (0.5 z + rho e1 + rho e2 +
    sqrt(1 - 2 rho^2) e3) / sqrt(1.25); js_succ = 0.1 + 0.01 (0.6 z + 0.8 e1) + a_cell, p_pop
    likewise with e2, reward 0.3 + 0.01 z: within cells, at equal reward, partial r = rho. Across
    cells a_cell = 0.01 (rho G~_cell + sqrt(1 - rho^2) f_cell), G~ the cell's standardized
    noise-free Pass@K gain: across cells, r = rho too."""
    n, P, R = d.samples, d.problems, d.family_seeds or d.seeds
    ev = _Evaluator(n, c, rng)
    K = pass_k_for(n, 4) or 1
    sizes = np.geomspace(c.params[0], c.params[1], d.sizes)
    lp = np.log(sizes)
    x = np.log2(np.asarray(d.pops, dtype=float))
    g_es, rho = kn["g"]["es"], kn["rho"]
    cells = []
    for j in range(d.sizes):
        pj = difficulty(P, c, rng)
        bj = ev(pj, 0.0, family=j)
        slope = kn["s0"] + kn["beta"] * (lp[j] - lp.mean()) + _dev(rng, c, c.sigma_size)
        solv = pj > 0
        for xi in x:
            shift = g_es + slope * (xi - x.mean())
            q = np.clip(pj[solv] + shift / (1 - c.unsolvable), 0, 1)
            gain = float(np.sum((1 - pj[solv]) ** K - (1 - q) ** K)) / P
            cells.append((j, pj, bj, xi, shift, gain))
    G = np.array([cl[5] for cl in cells])
    G = (G - G.mean()) / G.std() if G.std() > 1e-12 else np.zeros_like(G)
    recs = []
    for (j, pj, bj, xi, shift, _), g_std in zip(cells, G):
        pop = int(round(2 ** xi))
        a_js, a_pp = (0.01 * (rho * g_std + math.sqrt(1 - rho * rho) * _dev(rng, c, 1.0)) for _ in range(2))
        for seed in range(R):
            z, e1, e2, e3 = _dev(rng, c, 1.0, seed, size=4)
            u = c.sigma_seed * (0.5 * z + rho * e1 + rho * e2 + math.sqrt(max(0.0, 1 - 2 * rho * rho)) * e3) / \
                math.sqrt(1.25)
            final = ev(pj, shift + u, family=j, offset=_seed_problem(c, ev.aux, P, nothing_trains))
            js = 0.1 + 0.01 * (0.6 * z + 0.8 * e1) + a_js
            pp = 0.5 + 0.01 * (0.6 * z + 0.8 * e2) + a_pp
            noise = {}
            if c.sigma_count_js > 0:   # the means of TRAIN_LINES noisy lines, and their estimated variance
                js += ev.aux.normal(0, c.sigma_count_js)
                pp += ev.aux.normal(0, c.sigma_count_js)
                noise = {f"{k}_var": c.sigma_count_js ** 2 * ev.aux.chisquare(TRAIN_LINES - 1) / (TRAIN_LINES - 1)
                         for k in ("js_succ", "p_pop")}
            recs.append({"run_id": f"es-size{j}-{pop}-{seed}", "status": "completed", "algo": "es",
                         "model": f"size{j}", "params": float(sizes[j]), "pop": pop, "seed": seed,
                         "iterations": ITERATIONS, "sigma": 0.01, "lr": 0.005, "samples": n, "base_counts": bj,
                         "final_counts": final, "tokens_generated": 1000, "js_succ": js, "p_pop": pp,
                         "reward_mean": 0.3 + 0.01 * z, "es_temperature": 1.0, "es_samples": 4,
                         "host": f"machine{seed % 2}", **noise})   # two machines, by seed (two_batches)
    return recs


def scenarios() -> list[tuple[str, int | None, dict, bool]]:
    """(name, claim, effects, nothing_trains): per claim its null (theta = b) and its smallest
    effect of interest (theta = b + delta), the others strong; the second nulls of the
    intersection-union claims (their ``second_nulls``: ``null5c``, the equal-norm control as good as the
    pruned model; ``null9c``, ES's update no larger; ``null10c``, the anchored run at its margins;
    ``null11c``, |cosine| at 0.1), each with the claim's own effect strong; then the global null."""
    out = []
    for cid, cl in sorted(REGISTRY.items()):
        out.append((f"null{cid}", cid, {cid: cl.boundary}, False))
        if cl.second_nulls:
            out.append((f"null{cid}c", cid, dict(cl.second_nulls), False))
        out.append((f"sesoi{cid}", cid, {cid: cl.boundary + cl.sesoi}, False))
    out.append(("nothing_trains", None, {}, True))
    return out


def _planted(cid: int) -> dict:
    """A claim's answer far beyond its smallest effect (p_yes 0, p_no 1): the other claims in a
    per-claim calibration."""
    from esopt.study.claims.rules import measured

    c = REGISTRY[cid]
    return measured({"effect": c.boundary + c.sesoi + 1e3, "se": 1.0, "df": math.inf}, "planted")


def verdict_of(cid: int, records: list[dict], s: dict) -> str:
    """Claim ``cid``'s verdict on ``records`` with every other claim planted as a clear yes (its
    needs met, its no not rejected): the world where the other claims hold strongly, in which the
    registered graph passes ``cid`` the weight of every other yes; its rates at a fraction of
    the full family's cost (one rule, one part of the sweep). Its yes is tested at alpha times
    a weight between its start (``claims.decide_all``'s level) and 1."""
    from esopt.study.claims import decide_all, select_cell

    sweep = {"cell": select_cell(records)["algos"], "es": [r for r in records if r.get("algo") == "es"]}
    c = REGISTRY[cid]
    measures = {i: (c.rule(c.select(sweep), s) if i == cid else _planted(i)) for i in REGISTRY}
    return decide_all(measures, s)[cid]["verdict"]


def calibrate(design: Design = Design(), sims: int = 200, seed: int = 0, components: Components = Components(),
              only: list[str] | None = None, full: bool = False) -> dict:
    """Counts of each verdict per scenario through the real claim code: {name: {"claim", "sims",
    "yes", "no", "unclear", "any_yes"}} (rates; any_yes: some claim said yes). A claim's scenario
    simulates only the part of the sweep it reads and decides it with the others planted
    (``verdict_of``); ``full`` runs every claim on the whole sweep (``claims.compute``) instead.
    The global null (nothing trains: any_yes, the family-wise false yes) is always the whole."""
    from esopt.study.claims import DEFAULTS, compute

    s = {**DEFAULTS, "k": design.k}
    out = {}
    for i, (name, cid, eff, null) in enumerate(scenarios()):
        if only is not None and name not in only:
            continue
        rng = np.random.default_rng([seed, i])
        tally = {"yes": 0, "no": 0, "unclear": 0, "any_yes": 0}
        whole = full or cid is None
        parts = ("cell", "family") if whole else (REGISTRY[cid].part,)
        for _ in range(sims):
            recs = simulate(design, eff, components, rng, nothing_trains=null, parts=parts)
            if whole:
                v = {c["id"]: c["reproduced"] for c in compute(recs, k=design.k)["claims"]}
            else:
                v = {cid: verdict_of(cid, recs, s)}
            if cid is not None:
                tally[v[cid]] += 1
            tally["any_yes"] += any(x == "yes" for x in v.values())
        out[name] = {"claim": cid, "sims": sims, **{k: t / sims for k, t in tally.items()}}
    return out


def table(rates: dict, gen: str | None = None) -> list[str]:
    """The calibration lines: ``claim <n> [gen=<name>] false_yes=<r> fy_upper=<u> false_no=<r>
    fn_upper=<u> power=<p> sims=<n>`` per claim (false yes at its null, the worse of its nulls
    for claim 5; false no and power at its smallest effect of interest; upper: the Wilson 95%
    upper bound; a claim's second null, ``null<n>c``, counts among its nulls), then ``familywise [gen=<name>] false_yes=<r> fy_upper=<u> sims=<n>`` (some
    claim says yes where nothing trains)."""
    from esopt.core.metrics import wilson_upper

    tag = f" gen={gen}" if gen else ""
    lines = []
    for cid in sorted(REGISTRY):
        nulls = [rates[k] for k in (f"null{cid}", f"null{cid}c") if k in rates]
        b = rates.get(f"sesoi{cid}")
        if not nulls or b is None:
            continue
        a = max(nulls, key=lambda r: r["yes"])
        n_yes = round(a["yes"] * a["sims"])
        n_no = round(b["no"] * b["sims"])
        lines.append(f"claim {cid}{tag} false_yes={a['yes']:.3f} fy_upper={wilson_upper(n_yes, a['sims']):.3f} "
                     f"false_no={b['no']:.3f} fn_upper={wilson_upper(n_no, b['sims']):.3f} power={b['yes']:.3f} "
                     f"sims={min(a['sims'], b['sims'])}")
    if "nothing_trains" in rates:
        r = rates["nothing_trains"]
        lines.append(f"familywise{tag} false_yes={r['any_yes']:.3f} "
                     f"fy_upper={wilson_upper(round(r['any_yes'] * r['sims']), r['sims']):.3f} sims={r['sims']}")
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
      binomial variance of a final Pass@1 (every run scores the same problems); with >= 2 GRPO
      runs and >= 2 of another algorithm, GRPO's apart (``sigma_seed_grpo``), the others pooled;
    - ``sigma_problem_es``^2 (``sigma_problem_grpo``^2) = Var over the problems the base solves of
      that arm's per-problem change, mean over its runs of q_p - the base's q_p, minus its binomial
      part (the arm's final over its runs and the base's);
    - ``sigma_problem_algo``^2 = (Var over the problems the base solves of mean_ES q_p - mean_GRPO q_p
      - its binomial part) / 2;
    - ``sigma_entropy``^2 = pooled residual variance of rel = h_final / h_base - 1 on the gain,
      within ES and within GRPO (the simulator's rel = Q g + N(0, sigma_entropy^2)); ``grpo_per_gain``
      = GRPO's mean rel / its mean gain; ``es_gain`` = ES's mean gain (the operating point of the
      scenarios that do not test claim 1: claim 2's ratio, for one, is as noisy as ES's gain is small),
      ``grpo_gain`` = GRPO's (the scenarios that do not test claim 3: claims 2, 8 and 9 read it);
    - GRPO's curve: d = Pass@1(final) - Pass@1(nearest to half the budget); ``grpo_climb`` = mean d,
      ``sigma_step``^2 = Var d - 2 x binomial variance;
    - ``s_random`` = sum over ES runs of (random-mask - base) / sum of (trained - base) Pass@1;
      ``control_gap`` = mean over ES runs of pruned - equal-norm control Pass@1 (claim 5's keep);
    - the family (``family_records``, ES runs, >= 2 populations per model): per size the OLS slope
      of Pass@1 on log2 N with its se; ``s0`` = mean slope, ``sigma_size``^2 = the slopes' residual
      variance around their line on ln params (sizes - 2 df) - mean se^2;
      ``params`` = the smallest and largest size;
    - the rivals (the cell's ES and GRPO runs, where they carry the probes and drift.json's
      statistics; ``_rival_components``): each run-level measure y on the simulator's line
      y_r = a_A + gamma gain_r + N(0, sd^2) (an intercept per algorithm, ES's offset the claim's
      effect; one common slope, the rules' matched-gain model), gamma fitted as the rules fit it
      (corrected for the gain's evaluation noise) where the runs identify it
      (``MIN_SLOPE_DF``, ``MIN_RELIABILITY``), else ``start``'s:
      ``probe_base`` = mean base_probe_pass1; ``probe_per_gain`` = gamma of the probe change
      final - base; ``sigma_probe_eval`` = one evaluation's sampling sd of the probes' mean Pass@1
      (``probe_eval_var``); ``sigma_probe``^2 = the change's residual variance - gamma^2 x the gain's
      evaluation variance - sigma_probe_eval^2; ``share_per_gain`` = gamma of update_top_share,
      ``top_share`` = GRPO's mean share - gamma x its mean gain (its share at gain 0),
      ``sigma_share``^2 = the residual variance - gamma^2 x the gain's evaluation variance;
      ``log_l2`` = GRPO's mean ln update_l2, ``sigma_log_l2`` = its pooled within-algorithm sd;
      ``sigma_cosine`` = the sd of the ES runs' connectivity_cosine (``sigma_barrier`` stays assumed:
      a run records only the largest of its noisy interpolation points).
    Every variance is floored at 0 (a negative estimate: the noise explains the spread).
    """
    from dataclasses import replace

    from esopt.study.claims.rules import _num, _size_cells, ols_slope
    from esopt.study.claims import select_cell

    est: dict = {}
    how = {f: "assumed" for f in ("unsolvable", "beta", "sigma_seed", "sigma_seed_grpo", "sigma_problem_algo",
                                  "sigma_problem_es", "sigma_problem_grpo",
                                  "es_gain", "grpo_gain",
                                  "sigma_entropy", "grpo_per_gain",
                                  "grpo_climb", "sigma_step", "s_random", "control_gap", "s0", "sigma_size",
                                  "params", *RIVAL_COMPONENTS)}
    cell = select_cell(cell_records)["algos"]
    runs = [r for rs in cell.values() for r in rs if r.get("final_counts") is not None and r.get("samples")]
    base = next((r for r in runs if r.get("base_counts") is not None), None)
    if base is not None:
        n = int(base["samples"])
        q = np.asarray(base["base_counts"], dtype=np.float64) / n
        solv = q[q > 0]
        if not solv.size:  # unsolvable = 1: no run could gain, and the model divides by 1 - unsolvable
            raise ConfigError(f"its base model (evaluated in run {base.get('run_id')}) solved none of its {q.size} problems in "
                              f"{n} samples: "
                              "nothing to estimate the difficulty from (a pilot needs a base that solves some: a "
                              "larger model, an easier task or more samples)")
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
    # GRPO's seed spread apart from the others' where each has >= 2 runs (on SmolLM2 one GRPO seed
    # collapsed and one gained +0.39 while ES's seeds agreed within their binomial noise)
    apart = len(with_base.get("grpo", [])) >= 2 and any(len(rs) >= 2 for a, rs in with_base.items() if a != "grpo")
    for field, algos in ((("sigma_seed", [a for a in with_base if a != "grpo"]), ("sigma_seed_grpo", ["grpo"]))
                         if apart else (("sigma_seed", list(with_base)),)):
        var, df = _pool([np.array([gain(r) for r in with_base[a]]) for a in algos])
        if var is None:
            continue
        noise = float(np.mean([_noise_var(r["final_counts"], int(r["samples"])) for a in algos
                               for r in with_base[a]]))
        est[field] = math.sqrt(max(0.0, var - noise))
        how[field] = (f"within-algorithm spread of {sum(len(with_base[a]) for a in algos)} {'/'.join(algos)} runs' "
                      f"Pass@1 gains ({df} df; sd {math.sqrt(var):.4f}, binomial part {math.sqrt(noise):.4f})")
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
        b0 = np.asarray(base["base_counts"][:P], dtype=np.float64)[keep] / int(base["samples"])
        base_noise = float(np.mean(b0 * (1 - b0))) / int(base["samples"])
        for a, field in (("es", "sigma_problem_es"), ("grpo", "sigma_problem_grpo")):
            q = mean_q[a].mean(0)[keep]     # each arm's own: its per-problem change from the shared base
            own = float(np.mean(q * (1 - q))) / (int(base["samples"]) * mean_q[a].shape[0]) + base_noise
            est[field] = math.sqrt(max(0.0, float((q - b0).var(ddof=1)) - own))
            how[field] = (f"per-problem {a.upper()} Pass@1 change (mean of {mean_q[a].shape[0]} runs - the base) over "
                          f"{int(keep.sum())} problems the base solves (sd {float((q - b0).std(ddof=1)):.3f}, "
                          f"binomial part {math.sqrt(own):.3f})")
    for a, field in (("es", "es_gain"), ("grpo", "grpo_gain")):
        gains = [gain(r) for r in with_base.get(a, [])]
        if len(gains) >= 2:
            est[field] = float(np.mean(gains))
            how[field] = f"mean Pass@1 gain of {len(gains)} {a.upper()} runs (the other claims' scenarios use it)"
    resid, per_gain = [], {}
    for a in ("es", "grpo"):
        pts = [(gain(r), _num(r.get("final_ood_entropy")) / _num(r.get("base_ood_entropy")) - 1)
               for r in with_base.get(a, []) if _num(r.get("base_ood_entropy")) and
               _num(r.get("final_ood_entropy")) is not None]
        if len(pts) >= 3:
            x, y = np.array(pts).T
            per_gain[a] = float(y.mean() / x.mean()) if x.mean() > 0 else None
            b = ols_slope(x, y)[0] if np.ptp(x) > 0 else 0.0   # gains all equal: no slope to remove
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
    from esopt.study.claims.rules import KEEP, TEST_CONTROL, _curve
    gaps = [(float(np.mean(top["correct_counts"])) - float(np.mean(ctrl["correct_counts"]))) / float(sp["samples"])
            for r in with_base.get("es", []) for sp in [r.get("sparsity") or {}] if sp.get("samples")
            for top, ctrl in [(_curve(sp, "global", KEEP), _curve(sp, TEST_CONTROL, KEEP))] if top and ctrl]
    if gaps:
        est["control_gap"] = float(np.mean(gaps))
        how["control_gap"] = f"mean pruned - equal-norm control Pass@1 at keep {KEEP:g}, {len(gaps)} ES runs"
    cells = _size_cells([r for r in (family_records or []) if kind(r.get("algo")) == "es"])
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
    _rival_components(cell, start, est, how)
    return replace(start, **est), how


RIVAL_COMPONENTS = ("probe_base", "probe_per_gain", "sigma_probe", "sigma_probe_eval", "top_share", "share_per_gain",
                    "sigma_share", "log_l2", "sigma_log_l2", "sigma_barrier", "sigma_cosine")
MIN_SLOPE_DF = 2         # a common slope on the gain needs >= 2 residual df (5 ES + GRPO runs): on 1 it is wild
MIN_RELIABILITY = 0.5    # ... and within-algorithm gains at least half signal (a slope corrected beyond x2: noise)
Z95 = 1.959963984540054  # a 95% interval's half-width in sds


def _common_line(y: dict, g: dict, noise: dict | None, slope: float) -> dict | None:
    """y_r = a_A + gamma gain_r + e_r over the algorithms of ``y`` ({algo: array}; ``g`` their
    Pass@1 gains, ``noise`` each gain's evaluation variance or None): gamma = S_gy / (S_gg - D) on
    the within-algorithm deviations, D their noise (errors in variables, as ``at_matched_gain``),
    where >= ``MIN_SLOPE_DF`` residual df remain and the gains' within spread is >= ``MIN_RELIABILITY``
    signal; else ``slope``. {"slope", "fitted", "why" (not fitted), "se", "level": {algo: mean y -
    gamma mean gain}, "raw": residual variance, "var": raw - gamma^2 x mean noise, "df", "n"};
    None without a residual df."""
    algos = [a for a in y if len(y[a])]
    n, k = sum(len(y[a]) for a in algos), len(algos)
    yc = np.concatenate([y[a] - y[a].mean() for a in algos]) if algos else np.zeros(0)
    gc = np.concatenate([g[a] - g[a].mean() for a in algos]) if algos else np.zeros(0)
    sxx, sxy = float(gc @ gc), float(gc @ yc)
    d = 0.0 if noise is None else sum(float(noise[a].sum()) * (len(y[a]) - 1) / len(y[a]) for a in algos)
    why = None
    if n - k - 1 < MIN_SLOPE_DF:
        why = f"{n} runs over {k} algorithm(s): {max(n - k - 1, 0)} df for a slope (needs {MIN_SLOPE_DF})"
    elif sxx <= 0 or sxx - d < MIN_RELIABILITY * sxx:
        why = "the gains vary within each algorithm by little more than their evaluation noise"
    fitted = why is None
    b = sxy / (sxx - d) if fitted else float(slope)
    df = n - k - fitted
    if df < 1:
        return None
    e = yc - b * gc
    raw = float(e @ e) / df
    mean_noise = float(np.mean(np.concatenate([noise[a] for a in algos]))) if noise is not None else 0.0
    return {"slope": b, "fitted": fitted, "why": why, "se": math.sqrt(raw * sxx) / (sxx - d) if fitted else None,
            "level": {a: float(y[a].mean() - b * g[a].mean()) for a in algos}, "raw": raw,
            "var": raw - b * b * mean_noise, "df": df, "n": n}


def probe_eval_var(r: dict, when: str = "base") -> tuple[float, str] | None:
    """(variance, how) of one evaluation's sampling noise in a run's probes' mean Pass@1
    (``<when>_probe_pass1``, the mean of its K probes), or None without the per-probe columns
    (``<when>_probe_<name>``) and ``probe_samples`` / ``probe_problems``. The probes' problems are
    fixed, so what another evaluation redraws is the samples: per probe mean_p q_p(1 - q_p) / (n P).
    From the probe's percentile-bootstrap interval over problems (se^2 ~ Var_p(x_p) / P) and its
    Pass@1 x: mean_p x_p(1 - x_p) = x(1 - x) - Var_p(x_p), unbiased for mean q(1-q) x (n - 1) / n
    ("intervals"); without an interval the binomial bound x(1 - x) / (n P) ("binomial bound"). A
    probe scored by likelihood (``_loglik``: teacher-forced, nothing sampled) adds none. The mean's
    variance: their sum / K^2."""
    from esopt.study.claims.rules import _num

    pre = f"{when}_probe_"
    names = sorted({k[len(pre):] for k in r if k.startswith(pre) and k != pre + "pass1"
                    and not k.endswith(("_lo", "_hi", "_loglik"))})
    n, P = _num(r.get("probe_samples")), _num(r.get("probe_problems"))
    if not names:
        return None
    total, kinds = 0.0, set()
    for name in names:
        x = _num(r.get(pre + name))
        if x is None:
            return None
        if _num(r.get(f"{pre}{name}_loglik")) is not None:
            kinds.add("likelihood")
            continue
        if not n or not P:
            return None
        q = x * (1 - x)
        lo, hi = _num(r.get(f"{pre}{name}_lo")), _num(r.get(f"{pre}{name}_hi"))
        if lo is not None and hi is not None and n >= 2:
            se = (hi - lo) / (2 * Z95)
            m = min(q, max(0.0, (q - P * se * se) * n / (n - 1)))
            kinds.add("intervals")
        else:
            m = q
            kinds.add("binomial bound")
        total += m / (n * P)
    return total / len(names) ** 2, ", ".join(sorted(kinds))


def _rival_components(cell: dict, start: Components, est: dict, how: dict) -> None:
    """The rivals' components (``estimate_components``'s last item) from the comparison cell's ES
    and GRPO runs, into ``est`` and ``how``."""
    from esopt.study.claims.rules import _num, gain_noise

    def runs_with(*keys, positive=()):
        out = {}
        for a in ("es", "grpo"):
            rs = [r for r in cell.get(a, []) if all(_num(r.get(k)) is not None for k in keys)
                  and all(_num(r.get(k)) > 0 for k in positive)]
            if rs:
                out[a] = rs
        return out

    def col(groups, key):
        return {a: np.array([float(_num(r.get(key))) for r in rs]) for a, rs in groups.items()}

    def line(groups, y, slope):
        f, b = col(groups, "final_pass@1"), col(groups, "base_pass@1")
        g = {a: f[a] - b[a] for a in groups}
        nz = {a: gain_noise(rs) for a, rs in groups.items()}
        return _common_line(y, g, nz if all(v is not None for v in nz.values()) else None, slope)

    def slope_how(fit, what):
        if fit["fitted"]:
            return (f"common slope of {what} on the Pass@1 gain, an intercept per algorithm, {fit['n']} runs "
                    f"({fit['df']} df; se {fit['se']:.3g}; corrected for the gain's evaluation noise)")
        return "assumed (" + fit["why"] + ")"

    def tagged(field, value):
        return f"{value:.4g}" + ("" if field in est else " assumed")

    gain = ("base_pass@1", "final_pass@1")
    base = [float(_num(r["base_probe_pass1"])) for rs in runs_with("base_probe_pass1").values() for r in rs]
    if base:
        est["probe_base"] = float(np.mean(base))
        how["probe_base"] = f"mean base_probe_pass1 of {len(base)} runs"
    evals = [v for r in cell.get("es", []) + cell.get("grpo", [])
             for v in (probe_eval_var(r, "base"), probe_eval_var(r, "final")) if v is not None]
    if evals:
        est["sigma_probe_eval"] = math.sqrt(float(np.mean([v for v, _ in evals])))
        how["sigma_probe_eval"] = (f"sampling sd of one evaluation of the probes' mean Pass@1 at probe_samples x "
                                   f"probe_problems, {len(evals)} evaluations (per probe from: "
                                   f"{'; '.join(sorted({k for _, k in evals}))})")
    pr = runs_with("base_probe_pass1", "final_probe_pass1", *gain)
    if sum(map(len, pr.values())) >= 3:
        fit = line(pr, {a: v - col(pr, "base_probe_pass1")[a] for a, v in col(pr, "final_probe_pass1").items()},
                   start.probe_per_gain)
        if fit is not None:
            if fit["fitted"]:
                est["probe_per_gain"] = fit["slope"]
            how["probe_per_gain"] = slope_how(fit, "the probe change (final - base probe Pass@1)")
            ev = est.get("sigma_probe_eval", start.sigma_probe_eval)
            est["sigma_probe"] = math.sqrt(max(0.0, fit["var"] - ev * ev))
            how["sigma_probe"] = (f"residual sd of {fit['n']} runs' probe change on the gain ({fit['df']} df; "
                                  f"{math.sqrt(fit['raw']):.4f}, less the gain's noise x slope "
                                  f"{tagged('probe_per_gain', fit['slope'])} and one probe evaluation's "
                                  f"{tagged('sigma_probe_eval', ev)})")
    sh = runs_with("update_top_share", *gain)
    if sum(map(len, sh.values())) >= 3:
        fit = line(sh, col(sh, "update_top_share"), start.share_per_gain)
        if fit is not None:
            if fit["fitted"]:
                est["share_per_gain"] = fit["slope"]
            how["share_per_gain"] = slope_how(fit, "update_top_share")
            est["sigma_share"] = math.sqrt(max(0.0, fit["var"]))
            how["sigma_share"] = (f"within-algorithm residual sd of {fit['n']} runs' update_top_share on the gain "
                                  f"({fit['df']} df; slope {tagged('share_per_gain', fit['slope'])})")
            if "grpo" in fit["level"]:
                est["top_share"] = fit["level"]["grpo"]
                how["top_share"] = (f"GRPO's mean update_top_share ({len(sh['grpo'])} runs) - slope "
                                    f"{tagged('share_per_gain', fit['slope'])} x its mean gain: its share at gain 0")
    l2 = {a: np.log(v) for a, v in col(runs_with("update_l2", positive=("update_l2",)), "update_l2").items()}
    if "grpo" in l2:
        est["log_l2"] = float(l2["grpo"].mean())
        how["log_l2"] = f"GRPO's mean ln update_l2, {len(l2['grpo'])} runs"
    var, df = _pool(list(l2.values()))
    if var is not None:
        est["sigma_log_l2"] = math.sqrt(var)
        how["sigma_log_l2"] = f"pooled within-algorithm sd of ln update_l2 ({df} df)"
    cos = [float(_num(r["connectivity_cosine"])) for r in runs_with("connectivity_cosine").get("es", [])]
    if len(cos) >= 2:
        est["sigma_cosine"] = float(np.std(cos, ddof=1))
        how["sigma_cosine"] = f"sd of {len(cos)} ES runs' connectivity_cosine"


def literal(c: Components, fields) -> str:
    """``Components(field=value, ...)`` of ``fields`` (3 significant digits), one per line: what a
    pilot's estimate pastes into ``MODEL_COMPONENTS``."""
    def fmt(v):
        if isinstance(v, tuple):
            return "(" + ", ".join(fmt(x) for x in v) + ")"
        if not isinstance(v, float):
            return repr(v)
        s = f"{v:.3g}"
        return s if any(ch in s for ch in ".en") else s + ".0"   # a float stays a float
    return "Components(\n" + "".join(f"    {k}={fmt(getattr(c, k))},\n" for k in fields) + ")"


def components_from_sweeps(cell_dir, family_dir=None) -> tuple[Components, dict]:
    """``estimate_components`` from aggregated sweep folders (runs.parquet and the run folders):
    the comparison cell's sweep and, optionally, the ES family's."""
    return estimate_components(sweep_records(cell_dir), sweep_records(family_dir) if family_dir else None)


def sweep_records(sweep_dir) -> list[dict]:
    """A sweep folder's runs as the claims read them, with per-problem counts (``attach_details``)."""
    from esopt.study import claims
    from esopt.study import tables

    agg = tables.load(sweep_dir)
    recs = claims.records_from_tables(agg.runs, agg.curves)
    claims.attach_details(recs, tables.find_runs_dir(agg.sweep_dir))
    return recs
