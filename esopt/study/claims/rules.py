"""The study's claims, each a pre-registered test: one registry entry per claim. Claims 1-7
are the seed paper's (arXiv 2608.27351); claims 8-11 are its 2026 rivals' (Abdi et al., arXiv
2601.20861; Schweighofer et al., arXiv 2605.30148; Hoy et al., arXiv 2604.01499), each naming
its ``source``, decided on the same runs in the same registered family.

A claim is a ``Claim``, everything about it declared on its one ``@claim(...)`` entry below:
its estimand theta, the boundary b and the smallest effect of interest delta (fixed here,
before any data), the test statistic, the variance model, the data it selects from a sweep
(``select``) and its rule (``rule``: the data -> theta, its standard error and degrees of
freedom, or why it cannot be measured); for the simulator (``simulate``) the part of a sweep it
reads, its strong effect, the hook that plants its effect (``plant``) and the knobs it sets
where nothing trains (``rest``), the second parts of an intersection-union claim and their
nulls, a ``draw`` for run fields the simulator's core does not make, the misspecified
generators that change what it reads; for the planner (``plan``) the opt-in measurement and
run fields it needs and its hints. ``esopt.study.claims``, ``simulate`` and ``plan`` loop over
the registry and never name a claim; the family's size m is 2 per registered claim.

The decision, the same for every claim (``esopt.study.claims.decide_all``):
    p_yes = P-value of H0: theta <= b          (one-sided t, ``metrics.p_above``)
    p_no  = P-value of H0: theta >= b + delta  (the effect is at least the smallest of interest);
            for claims 3, 5, 6 and 11 (``complement``) H0: theta >= b, the complement of the registered
            criterion: "no" says the paper's criterion fails, not that the effect is below b + delta
    one graphical procedure (Bretz et al. 2009) over a family fixed at registration: every
    registered claim's yes and no hypotheses (2 per claim; untested ones with p = 1), with the
    weights each claim declares (``weights``: claim 1's yes 0.6), family-wise alpha 0.05;
    yes: its p_yes rejected; no: its p_no rejected, and not yes;
    unclear: neither; it says "power" (the test's power at theta = b + delta, and about how
    many times the runs a power of 80% needs, on the same t) or "data" (what the sweep lacks).
So at theta = b + delta "no" happens at most alpha of the time (the false-no rate) and "yes" at
the design's power; at theta = b "yes" at most alpha (and, for a ``complement`` claim, "no" too). Claims 3, 4, 6 and 11 (about what ES's
training gives) also need claim 1's yes (``needs``): nothing trained never says yes. Claim 6 is
tested only against a GRPO that has saturated (``grpo_saturation``: its second-half Pass@1 gain
clearly below 0.01), else "unclear: data".

Variance models (``esopt.core.metrics.contrast``): per-problem scores of the runs of each arm
on the same problems (paired across arms), seeds and problems as variance components of a
two-way random-effects model, t with Welch-Satterthwaite degrees of freedom (about R - 1 when
seeds dominate); run-level statistics (entropy, diversity, a slope per model size) use the runs
or the sizes as the units (t at n - 1 - covariates degrees of freedom).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from esopt.core import graphical
from esopt.core.config import HEADLINE_KEEP
from esopt.core.metrics import contrast, ols, p_above, pass_at_k, pass_at_k_noise_var, t_interval
from esopt.study.claims.shift import pass_k_expected, problem_spread, solve_shift

VERDICTS = ("yes", "no", "unclear")
SEQUENCES = ("es_grpo", "grpo_es")  # the study's headline order first
SEED_PAPER = "arXiv 2608.27351"     # the seven claims' source
ES_ANCHOR = "es_anchor"             # the comparison cell's arm of ES runs with es.anchor_decay > 0 (claim 10)
KEEP = HEADLINE_KEEP                # claim 5's keep fraction and claim 9's top share (esopt.core.config)
# the misspecified generators (simulate.GENERATORS) that change what every claim reads: its
# per-problem or evaluation draws (claim 11: the barrier's interpolations) and its run-level
# deviations (claim 11: the barrier and the cosine); a claim adds those that change only what it reads
PER_PROBLEM = ("seed_x_problem", "shared_eval_seed", "overdispersed_eval", "heavy_tails", "two_batches")


@dataclass(frozen=True)
class Claim:
    """One claim, everything about it (see the module docstring)."""
    id: int
    key: str
    text: str
    estimand: str
    boundary: float          # b: yes when theta > b
    sesoi: float             # delta: the smallest effect of interest; no when theta < b + delta
    statistic: str
    variance: str
    select: Callable         # (sweep: {"cell": {algo: [records]}, "es": [all ES records]}) -> data
    rule: Callable           # (data, settings) -> measured dict or unclear(...)
    needs: tuple = ()        # claims that must say yes first
    units: str = "seeds"     # what "80% power needs about x times the ..." counts (the test's units)
    source: str = SEED_PAPER     # the paper whose claim this is (the seed paper; a rival's citation)
    # --- the simulator (esopt.study.claims.simulate)
    part: str = "cell"       # what it reads: "cell" (the comparison cell) or "family" (the ES family)
    strong: float = 0.0      # its effect where it is not under test: beyond b + delta, its preconditions met
    plant: Callable | None = None   # hook(theta, k, p, c, K, th, tested): sets the knobs ``k`` its effect lives in
    rest: dict = field(default_factory=dict)     # its knobs where nothing trains
    second: dict = field(default_factory=dict)   # an intersection-union claim's other parts: key -> strong effect
    second_nulls: dict = field(default_factory=dict)   # those parts at their nulls (one scenario)
    draw: Callable | None = None    # (records, knobs, components, rng, nothing_trains): adds the run fields it
    #                                 reads that the simulator's core does not make, in place
    generators: tuple = PER_PROBLEM  # the misspecified generators that change what it reads ("current" aside)
    # --- the study design (esopt.study.claims.design)
    measure: str | None = None   # the opt-in measurement it reads (a Grid flag: probes, update_stats, connectivity)
    fields: tuple = ()           # the run fields that measurement makes (dropped from a grid without it)
    opt_in: bool = False         # listed only for a grid that makes ``measure``
    shown: tuple = ()            # the components the planner prints beside it
    design_gap: Callable | None = None    # (why, components) -> the planner's reading of a data gap, or None
    design_note: Callable | None = None   # (Design) -> a line the planner prints beside its power, or None
    more: tuple | None = None    # (Design field, values, floors): where its data fall short, its power at each value
    weights: dict = field(default_factory=dict)  # its hypotheses' initial weights in the registered graph
    #                                              ({"yes": w}); unset: an equal share of the rest (gated: 0)
    shows_trend: bool = False    # trend.json's fit (the aggregator's, descriptive) is shown beside it
    complement: bool = False     # its no is the complement of its registered criterion: H0 of no theta >= b
    #                              (else theta >= b + delta: the effect at least the smallest of interest)

    @property
    def no_bound(self) -> float:
        """The no hypothesis's boundary: no when theta < this (b for a ``complement`` claim, else b + delta)."""
        return self.boundary if self.complement else self.boundary + self.sesoi


REGISTRY: dict[int, Claim] = {}


def claim(cid: int, key: str, text: str, **declared):
    """Register the decorated rule as claim ``cid`` (``declared``: the ``Claim`` fields)."""
    def register(rule):
        REGISTRY[cid] = Claim(cid, key, text, rule=rule, **{**declared, "boundary": float(declared["boundary"]),
                                                               "sesoi": float(declared["sesoi"])})
        return rule
    return register


def unregister(cid: int) -> None:
    """Remove claim ``cid`` from the registry (a toy claim's test puts the registry back)."""
    REGISTRY.pop(cid, None)


def unclear(kind: str, why: str, **details) -> dict:
    """A rule's answer when it cannot measure: kind "data" (the sweep lacks it) or "power"."""
    return {"unclear": kind, "why": why, "details": details}


def measured(test: dict, why: str = "", n: dict | None = None, **details) -> dict:
    """A rule's answer: ``test`` = {"effect", "se", "df"} (plus optional "p_yes", "p_no",
    "ci" when the rule combines tests itself)."""
    return {**test, "why": why, "n": n or {}, "details": details}


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def one_per_seed(runs: list[dict]) -> list[dict]:
    """One run per seed (prefer the one with sparsity data), ordered by seed."""
    by_seed: dict = {}
    for r in sorted(runs, key=lambda r: (r.get("sparsity") is None, str(r["run_id"]))):
        by_seed.setdefault(r.get("seed"), r)
    return [by_seed[s] for s in sorted(by_seed, key=lambda s: (s is None, s))]


def scores(runs: list[dict], key: str, k: int) -> tuple[np.ndarray, int] | None:
    """(R, P) per-problem pass@k of ``key`` ("base_counts" / "final_counts") and the samples n
    (every run the same n; problems cut to the shortest list); None when a run lacks them."""
    if not runs or any(r.get(key) is None or not r.get("samples") for r in runs):
        return None
    n = {int(r["samples"]) for r in runs}
    if len(n) != 1:
        return None
    n = n.pop()
    P = min(len(r[key]) for r in runs)
    c = np.array([np.asarray(r[key][:P], dtype=np.int64) for r in runs])
    return pass_at_k(n, c, min(k, n)), n


def _enough(arms: dict, s: dict) -> dict | None:
    """unclear("data") when an arm has no runs in the comparison cell or fewer than min_runs."""
    none = [a for a, x in arms.items() if not x]
    if none:
        return unclear("data", f"no {' or '.join(none)} runs in the comparison cell")
    few = [f"{a} ({len(x)})" for a, x in arms.items() if len(x) < s["min_runs"]]
    if few:
        return unclear("data", f"fewer than {s['min_runs']} seeds: {', '.join(few)}")
    return None


def _cut(*arrays):
    P = min(a.shape[1] for a in arrays)
    return [a[:, :P] for a in arrays]


def _k_or_unclear(n: int, s: dict):
    """Pass@K needs n >= 4K samples per problem (its variance at n = K is 6x that at n = 4K)."""
    K = int(s["k"])
    if n < s["samples_per_k"] * K:
        return unclear("data", f"Pass@{K} needs >= {s['samples_per_k'] * K} samples per problem "
                       f"({s['samples_per_k']}K), the runs have {n} (set eval.samples)")
    return K


def _cell(*algos):
    return lambda sweep: {a: sweep["cell"].get(a, []) for a in algos}


# ---------------------------------------------------------------------------------------
# 1. ES raises Pass@1
# Its yes holds 0.6 of alpha in the registered graph (claims.registered_graph): it is the study's
# first question and the gate of claims 3, 4, 6 and 11, whose 8 hypotheses get that weight once it is
# rejected; the other 13 hypotheses share 0.4. At paper_cpu's design and measured components its
# power at +0.01 is about 0.8 at 0.6 alpha (0.87 at 0.8 alpha, 0.13 under Holm over the 22 hypotheses
# it replaces; docs/results/claims_calibration.md). 0.6, not 0.8: claim 1's t test is slightly
# liberal at 16 seeds (its false yes about 1.2x its level), and at 0.8 the family-wise rate where
# nothing trains came out 0.054 over 500 sims; at 0.6 the other 13 hypotheses start at twice the
# weight (0.031 each) for a few points of claim 1's power.
CLAIM1_WEIGHT = 0.6
def _plant_es_gain(theta, k, p, c, K, th, tested):
    """ES's Pass@1 gain (the components' own, ``es_gain``, where claim 1 is not under test), and
    its expected Pass@K (claims 3 and 6 set the other arms from it)."""
    if not tested and c.es_gain is not None:
        theta = c.es_gain
    k["g"]["es"], k["pk_es"] = theta, pass_k_expected(p, theta, c, K, sd=problem_spread(c, "es"))


@claim(1, "es_raises_pass1", "ES raises held-out Pass@1 over the base model.",
       estimand="mean over ES seeds and problems of Pass@1(final) - Pass@1(base), paired",
       boundary=0.0, sesoi=0.01, statistic="t = theta / se",
       variance="seeds x problems (two-way random effects), Welch-Satterthwaite df", select=_cell("es"),
       strong=0.05, plant=_plant_es_gain, weights={"yes": CLAIM1_WEIGHT})
def es_raises_pass1(data, s):
    es = data["es"]
    if (few := _enough({"ES": es}, s)):
        return few
    base, final = scores(es, "base_counts", 1), scores(es, "final_counts", 1)
    if base is None or final is None:
        return unclear("data", "ES runs lack per-problem base/final counts")
    b, f = _cut(base[0], final[0])
    t = contrast([(f - b, 1.0)])
    return measured(t, f"Pass@1 {b.mean():.3f} -> {f.mean():.3f}", {"runs": len(es), "problems": b.shape[1]},
                    base=float(b.mean()), final=float(f.mean()))


# ---------------------------------------------------------------------------------------
# 2. out-of-domain entropy at the same gain
def _ood_entropy_change(runs):
    h0 = [_num(r.get("base_ood_entropy")) for r in runs]
    h1 = [_num(r.get("final_ood_entropy")) for r in runs]
    if any(a is None or b is None or a <= 0 for a, b in zip(h0, h1)):
        return None
    return np.array([(b - a) / a for a, b in zip(h0, h1)])


def _pass1_gain(runs):
    g = [(_num(r.get("final_pass@1")), _num(r.get("base_pass@1"))) for r in runs]
    return None if any(None in x for x in g) else np.array([a - b for a, b in g])


ENTROPY_SESOI = 0.02      # claim 2: 2% of the base model's out-of-domain entropy, at the same gain


def _plant_entropy(theta, k, p, c, K, th, tested):
    """ES's relative OOD entropy change beyond GRPO's at its gain; both on GRPO's line per gain."""
    k["h_es"], k["per_gain"] = theta, c.grpo_per_gain


@claim(2, "entropy", "At the same held-out Pass@1 gain, ES's out-of-domain token entropy falls less than "
                     "GRPO's (GRPO's falls, ES's does not).",
       estimand="beta_ES in rel_r = a + beta_ES [r is ES] + gamma gain_r (one common slope on the run's Pass@1 "
                "gain, with an intercept): ES's minus GRPO's relative change of out-of-domain token entropy at any "
                "common gain g* (reported at g* = the runs' mean gain)",
       boundary=0.0, sesoi=ENTROPY_SESOI,
       statistic="t = beta_ES / se, least squares over the ES and GRPO runs (n - 3 df), corrected for the gain's "
                 "evaluation noise (errors in variables: at_matched_gain, as claims 8 and 9)",
       variance="seeds (runs): the residual spread around the common line; each algorithm's gain must be clearly "
                "> 0, and the two algorithms' ranges of gains must overlap (else unclear: data, the ranges named: "
                "no reading at gains an algorithm never reached, no extrapolation along the slope)",
       select=_cell("es", "grpo"), strong=0.05, plant=_plant_entropy, rest={"h_es": 0.0, "per_gain": 0.0},
       generators=PER_PROBLEM)
def entropy(data, s):
    """Matched gain: an entropy change that every update makes (an intercept) or that follows the
    gain alike in both algorithms (a common slope) is no difference at the same gain; a ratio
    change / gain would turn the same change h at gains g1 != g2 into h (1/g1 - 1/g2). Read through
    ``at_matched_gain`` as claims 8 and 9 are (the gain's evaluation noise corrected: plain least
    squares flattens the slope, and where the gains differ the slope times their gap leaks into
    beta), and only where the two algorithms' gains overlap (``overlap``): elsewhere the reading
    extrapolates along the slope, and more seeds only narrow the extrapolation's interval."""
    es, grpo = data["es"], data["grpo"]
    if (few := _enough({"ES": es, "GRPO": grpo}, s)):
        return few
    h = {"ES": _ood_entropy_change(es), "GRPO": _ood_entropy_change(grpo)}
    if h["ES"] is None or h["GRPO"] is None:
        return unclear("data", "out-of-domain entropy (base and final ood_entropy: set eval.ood_task) in every "
                       "ES and GRPO run")
    if (g := _gains(es, grpo)) is None:
        return unclear("data", "base and final Pass@1 of every ES and GRPO run")
    m = at_matched_gain(h, g, s, "out-of-domain entropy", _noise(es, grpo), overlap=True)
    if "unclear" in m:
        return m
    t = {"effect": m["beta"], "se": m["se"], "df": m["df"]}
    return measured(t, f"at the same Pass@1 gain {m['g_star']:+.3f}: relative OOD entropy change ES {m['es_at']:+.3f}, "
                    f"GRPO {m['grpo_at']:+.3f} (raw: ES {h['ES'].mean():+.3f} at gain {g['ES'].mean():+.3f}, GRPO "
                    f"{h['GRPO'].mean():+.3f} at {g['GRPO'].mean():+.3f})",
                    {"es_runs": len(es), "grpo_runs": len(grpo)}, g_star=m["g_star"], es_at_g_star=m["es_at"],
                    grpo_at_g_star=m["grpo_at"], slope_per_gain=m["slope_per_gain"],
                    es_rel_change=float(h["ES"].mean()), grpo_rel_change=float(h["GRPO"].mean()),
                    es_gain=float(g["ES"].mean()), grpo_gain=float(g["GRPO"].mean()), gain_ranges=m["ranges"])


# ---------------------------------------------------------------------------------------
# 3. coverage
def _plant_coverage(theta, k, p, c, K, th, tested):
    """PassK(ES) - PassK(GRPO) = theta sets GRPO's gain; where claim 3 is not under test and the
    components carry GRPO's own gain (``grpo_gain``), that gain, whatever coverage it gives (a
    uniform shift cannot give GRPO the larger Pass@1 gain and the smaller Pass@K at once: taken from
    claim 3, GRPO's gain would sit below ES's, and the matched-gain claims read it)."""
    own = None if tested else c.grpo_gain
    k["g"]["grpo"] = own if own is not None else solve_shift(p, k["pk_es"] - theta, c, K,
                                                            sd=problem_spread(c, "grpo"))


@claim(3, "coverage", "ES's Pass@K is at least GRPO's (within 0.01), while GRPO may lead at Pass@1.",
       estimand="Pass@K(ES) - Pass@K(GRPO), final evaluations, K = settings k (n >= 4K samples)",
       boundary=-0.01, sesoi=0.01, statistic="t = (theta + 0.01) / se (non-inferiority at 0.01); no: theta < -0.01 "
                                             "(the criterion's complement)",
       variance="seeds x problems, problems paired across the two algorithms, Welch-Satterthwaite df",
       select=_cell("es", "grpo"), needs=(1,), strong=0.02, plant=_plant_coverage, complement=True)
def coverage(data, s):
    es, grpo = data["es"], data["grpo"]
    if (few := _enough({"ES": es, "GRPO": grpo}, s)):
        return few
    e1, g1 = scores(es, "final_counts", 1), scores(grpo, "final_counts", 1)
    if e1 is None or g1 is None or e1[1] != g1[1]:
        return unclear("data", "per-problem final counts with the same samples for ES and GRPO")
    K = _k_or_unclear(e1[1], s)
    if isinstance(K, dict):
        return K
    eK, gK = _cut(scores(es, "final_counts", K)[0], scores(grpo, "final_counts", K)[0])
    t = contrast([(eK, 1.0), (gK, -1.0)])
    lead = contrast(list(zip(_cut(g1[0], e1[0]), (1.0, -1.0))))
    return measured(t, f"Pass@{K} ES {eK.mean():.3f} vs GRPO {gK.mean():.3f}; GRPO - ES at Pass@1 "
                    f"{lead['effect']:+.3f} (se {lead['se']:.2g})",
                    {"es_runs": len(es), "grpo_runs": len(grpo), "problems": eK.shape[1], "k": K}, k=K,
                    es_pass_k=float(eK.mean()), grpo_pass_k=float(gK.mean()),
                    grpo_minus_es_pass1=lead["effect"], grpo_minus_es_pass1_se=lead["se"])


# ---------------------------------------------------------------------------------------
# 4. diversity
def partial_correlation(y, x, covariates) -> float:
    """Pearson's r of the residuals of y and x after least squares on ``covariates`` (n, q)
    (with the cell dummies among them: within-cell); nan when either residual is constant."""
    Z = np.asarray(covariates, dtype=np.float64)
    ry = y - Z @ np.linalg.lstsq(Z, y, rcond=None)[0]
    rx = x - Z @ np.linalg.lstsq(Z, x, rcond=None)[0]
    den = math.sqrt(float((ry @ ry) * (rx @ rx)))
    return float(ry @ rx) / den if den > 1e-15 else float("nan")


DIVERSITY_SESOI = 0.3
RELIABILITY_FLOOR = 0.2   # claim 4: below this the evaluation noise swamps the gain: no "no" at that level
MIN_CELLS = 6             # the across-cell level: partial r over cell means, controlling reward, needs >= 6
DIVERSITY_POWER = 0.80    # claim 4's across-cell level decides only where a design has the cells for this power


def cells_needed(rho: float, level: float, power: float = DIVERSITY_POWER, reliability: float = 1.0) -> int:
    """(model, pop) cells the across-cell level of claim 4 needs for ``power`` at a partial r of
    ``rho`` (attenuated by the evaluation noise's ``reliability``) at one-sided ``level``: Fisher z
    with se 1 / sqrt(cells - 4), so
        cells = ceil(((z_{1-level} + z_power) / atanh(rho sqrt(reliability)))^2) + 4."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - level) + NormalDist().inv_cdf(power)
    return math.ceil((z / math.atanh(rho * math.sqrt(reliability))) ** 2) + 4


def diversity_level(alpha: float) -> float:
    """The level claim 4's yes holds in the registered graph once claim 1's gate opens (alpha x its weight)."""

    cid = next(c.id for c in REGISTRY.values() if c.key == "diversity")
    return _start_level(registered_graph(), cid, alpha)


def diversity_cells(alpha: float) -> int:
    """The cells at which claim 4's across-cell level decides: ``cells_needed`` at its smallest
    effect (rho 0.3, reliability 1) and its level in the registered graph; with fewer it is shown,
    descriptive, never part of the verdict (about 130 at alpha 0.05: 5 sizes x 3 populations give 15)."""
    return cells_needed(DIVERSITY_SESOI, diversity_level(alpha))


def _diversity_note(design) -> str:
    """The planner's line beside claim 4: how many cells its across-cell level needs, and the design's."""

    need, have = diversity_cells(DEFAULTS["alpha"]), design.sizes * len(design.pops)
    return (f"across (model, pop) cells descriptive: a verdict there needs >= {need} cells (power "
            f"{DIVERSITY_POWER:g} at r {DIVERSITY_SESOI:g}, level {diversity_level(DEFAULTS['alpha']):.2g}); "
            f"this design has {have}" + ("" if have < need else ", enough: it decides there too"))


def machine_dummies(hosts: list) -> np.ndarray:
    """(n, h - 1) indicators of the machines that ran two or more of the runs (``worker.host``),
    the first such machine, the unrecorded and the single-run ones pooled as the reference: a
    shock shared by the runs of one machine (its hardware, its library build, its batch) moves a
    run's diversity and its gain together at equal reward, which the within-cell correlation
    would read as the claim; as a covariate it is removed. (n, 0) when fewer than two machines
    ran two or more runs."""
    names = [str(h) if h not in (None, "") else None for h in hosts]
    levels = sorted(h for h in set(names) - {None} if names.count(h) >= 2)
    return np.array([[float(h == lv) for lv in levels[1:]] for h in names], dtype=np.float64).reshape(len(names), -1)


def pass_k_for(n: int, per_k: int) -> int | None:
    """The largest K = 2^j >= 2 with n >= per_k K (Pass@K from n >= 4K samples); None if none."""
    K = 2
    if n < per_k * K:
        return None
    while n >= per_k * 2 * K:
        K *= 2
    return K


def _reliability(observed_var: float, noise_var: float) -> float:
    """Share of a statistic's (residual) variance that is not measurement noise: 1 - noise / observed."""
    return 1.0 - noise_var / observed_var if observed_var > 0 else 0.0


def _level(name: str, y, xs: dict, Z, noise_y: float, noise_x: dict, dof: int, s: dict) -> dict:
    """One level of claim 4: per diversity statistic x the partial r of (y, x) given Z, Fisher z
    with se 1 / sqrt(dof), and the reliabilities lam_y, lam_x = 1 - noise / residual variance.
    Noise attenuates r by sqrt(lam_y lam_x) (Spearman), so "no" is tested against the attenuated
    smallest effect atanh(0.3 sqrt(lam_y lam_x)); "yes" (rho > 0) needs no correction."""
    Z = np.asarray(Z, dtype=np.float64)
    ry = y - Z @ np.linalg.lstsq(Z, y, rcond=None)[0]
    resid_dof = max(len(y) - np.linalg.matrix_rank(Z), 1)
    lam_y = _reliability(float(ry @ ry) / resid_dof, noise_y)
    se = 1.0 / math.sqrt(dof)
    out = {}
    for key, x in xs.items():
        rx = x - Z @ np.linalg.lstsq(Z, x, rcond=None)[0]
        r = partial_correlation(y, x, Z)
        lam = lam_y * _reliability(float(rx @ rx) / resid_dof, noise_x.get(key, 0.0))
        z = math.atanh(max(min(r, 0.999999), -0.999999)) if np.isfinite(r) else float("nan")
        zd = math.atanh(DIVERSITY_SESOI * math.sqrt(lam)) if lam >= RELIABILITY_FLOOR else None
        out[key] = {"level": name, "r": r, "z": z, "se": se, "reliability": lam, "zd": zd,
                    "r_corrected": (max(-1.0, min(1.0, r / math.sqrt(lam))) if lam > 0 else None),
                    "p_yes": p_above(z, se, math.inf, 0.0),
                    "p_no": 1.0 if zd is None else p_above(-z, se, math.inf, -zd)}
    return out


@claim(4, "diversity", "At equal training reward, the ES population's JS diversity (js_succ) and P_pop relate to "
                       "the Pass@K gain, across (model, pop) cells as well as within them.",
       estimand="min over js_succ and p_pop of the partial correlation with the run's Pass@K gain (K = the largest "
                "power of 2 with n >= 4K), controlling the mean training reward and the machine that ran it (worker.host, "
                "machines with two or more runs), within (model, pop) cells (runs, cell "
                "dummies), and across cells (cell means) where the design has the cells to decide there "
                "(diversity_cells: about 130), else shown beside it, descriptive; sampled members only; corrected for "
                "the evaluation noise's reliability",
       boundary=0.0, sesoi=DIVERSITY_SESOI,
       statistic="Fisher z = atanh(r), se = 1 / sqrt(runs - rank(cells, reward, machines) - 3) within and 1 / sqrt(cells - 4) across; yes: "
                 "every decided r > 0 (p = the largest); no: some r below 0.3 sqrt(reliability) (p = the number decided x the "
                 "smallest); the across-cell r decided only at >= diversity_cells cells",
       variance="runs within cells, cells across (normal on the z scale); reliability = 1 - noise / residual variance "
                "(the gain's binomial Pass@K noise; js_succ's and p_pop's spread over the run's train lines; across "
                "cells the within-cell spread / seeds)",
       select=lambda sweep: {"es": sweep["es"]}, needs=(1,), units="ES runs", part="family", strong=0.6,
       plant=lambda theta, k, *_: k.update(rho=theta), rest={"rho": 0.0}, generators=(*PER_PROBLEM, "count_noise"),
       design_note=_diversity_note)
def diversity(data, s):
    rows, seen, greedy, no_counts = [], set(), 0, 0
    per_k = int(s["samples_per_k"])
    for r in data["es"]:
        key = tuple(str(r.get(c)) for c in ("model", "pop", "seed", "iterations", "sigma", "lr", "task"))
        vals = [_num(r.get(c)) for c in ("js_succ", "p_pop", "reward_mean")]
        if key in seen or None in vals:
            continue
        seen.add(key)
        if (_num(r.get("es_temperature")) or 0.0) <= 0 or (_num(r.get("es_samples")) or 1) < 2:
            greedy += 1
            continue
        n = int(_num(r.get("samples")) or 0)
        K = pass_k_for(n, per_k)
        if r.get("base_counts") is None or r.get("final_counts") is None or K is None:
            no_counts += 1
            continue
        fin = np.asarray(r["final_counts"], dtype=np.int64)
        gain = float(pass_at_k(n, fin, K).mean() - pass_at_k(n, np.asarray(r["base_counts"]), K).mean())
        rows.append((*vals, gain, pass_at_k_noise_var(n, fin, K), _num(r.get("js_succ_var")) or 0.0,
                     _num(r.get("p_pop_var")) or 0.0, f"{r.get('model')}|{r.get('pop')}", K, r.get("host")))
    if greedy and not rows:
        return unclear("data", f"{greedy} ES runs scored their members greedily (p_i in {{0, 1}}: JS_succ and P_pop "
                       "then track accuracy): sampled members are needed (es.temperature > 0, es.samples >= 2)")
    if no_counts and not rows:
        return unclear("data", f"{no_counts} ES runs lack per-problem base and final counts with n >= {2 * per_k} "
                       f"samples (Pass@K from n >= {per_k}K)")
    if len({r[8] for r in rows}) > 1:
        return unclear("data", "the ES runs were evaluated with different samples per problem (Pass@K differs)")
    cells = sorted({r[7] for r in rows})
    dof = 0
    if len(cells) >= MIN_CELLS:   # within: partialled on the cells, the reward and the machines
        a = np.array([r[:7] for r in rows], dtype=np.float64)
        cell_of = np.array([cells.index(r[7]) for r in rows])
        D = np.column_stack([cell_of == i for i in range(len(cells))]).astype(np.float64)
        Z = np.column_stack([D, a[:, 2], machine_dummies([r[9] for r in rows])])
        dof = len(rows) - int(np.linalg.matrix_rank(Z)) - 3
    if dof < 2:
        return unclear("data", f"{len(rows)} ES runs with sampled-member js_succ, p_pop, training reward and a "
                       f"Pass@K gain in {len(cells)} (model, pop) cells (need runs - cells >= 6, one more per "
                       f"machine past the first, and >= {MIN_CELLS} cells)")
    within = _level("within", a[:, 3], {"js_succ": a[:, 0], "p_pop": a[:, 1]}, Z,
                    float(a[:, 4].mean()), {"js_succ": float(a[:, 5].mean()), "p_pop": float(a[:, 6].mean())}, dof, s)
    size = D.sum(0)
    m = (D.T @ a[:, :4]) / size[:, None]                 # cell means of js, p_pop, reward, gain
    resid = a[:, :4] - m[cell_of]
    w_var = (resid ** 2).sum(0) / max(len(rows) - len(cells), 1)    # within-cell spread (its sampling error)
    mean_inv = float(np.mean(1.0 / size))
    across = _level("across", m[:, 3], {"js_succ": m[:, 0], "p_pop": m[:, 1]},
                    np.column_stack([np.ones(len(cells)), m[:, 2]]), float(w_var[3]) * mean_inv,
                    {"js_succ": float(w_var[0]) * mean_inv, "p_pop": float(w_var[1]) * mean_inv}, len(cells) - 4, s)
    need = diversity_cells(float(s["alpha"]))
    decides_across = len(cells) >= need
    if not all(np.isfinite(t["z"]) for t in [*within.values(), *across.values()]):
        return unclear("data", "js_succ, p_pop or the gain is constant within or across cells")
    tests = [*within.values(), *(across.values() if decides_across else ())]
    worst = min(tests, key=lambda t: t["z"])
    weakest = max(tests, key=lambda t: (t["se"], -(t["zd"] or 0.0)))
    lam = worst["reliability"]
    t = {"effect": worst["r_corrected"] if worst["r_corrected"] is not None else worst["r"], "se": worst["se"],
         "df": float("inf"), "p_yes": max(x["p_yes"] for x in tests),
         "p_no": min(1.0, len(tests) * min(x["p_no"] for x in tests)),
         "power_at": (weakest["zd"] or 0.0, weakest["se"], math.inf)}
    t["ci"] = [max(-1.0, min(1.0, math.tanh(x) / math.sqrt(lam))) if lam > 0 else math.tanh(x)
               for x in t_interval(worst["z"], worst["se"], math.inf, s["level"])]
    K = rows[0][8]
    why = "; ".join(f"{lv} r(js_succ) {d['js_succ']['r']:+.2f}, r(p_pop) {d['p_pop']['r']:+.2f} (reliability "
                    f"{d['js_succ']['reliability']:.2f}/{d['p_pop']['reliability']:.2f})"
                    for lv, d in (("within cells", within), ("across cells" + ("" if decides_across else
                                  f" (descriptive: a verdict there needs >= {need} cells)"), across)))
    return measured(t, f"Pass@{K} gain over {len(rows)} runs in {len(cells)} cells: {why}",
                    {"runs": len(rows), "cells": len(cells)}, k=K, within=within, across=across,
                    across_decides=decides_across, cells_needed=need,
                    rho_js_succ=within["js_succ"]["r"], rho_p_pop=within["p_pop"]["r"], greedy_runs_left_out=greedy)


# ---------------------------------------------------------------------------------------
# 5. functional sparsity
TEST_CONTROL = "equal_norm"   # the test's control: a random mask scaled to the kept part's l2 norm
SECOND_CONTROL = "random"     # reported beside it (a random mask of the same size, unscaled)
KEEP_MATCH = 5e-3
PRUNE_MARGIN = 0.005          # the paper: pruning changes Pass@1 by less than half a point
CONTROL = "5c"                # the simulator's effects key: pruned - equal-norm control (default: its own strong value)


def _plant_sparsity(theta, k, p, c, K, th, tested):
    """pruned - trained = theta; the equal-norm control at the pruned shift - the gap pruned -
    control (effects "5c"; default the components' measured ``control_gap``, else (1 -
    s_equal_norm) g_ES beyond theta); the random mask at s_random g_ES."""
    gap = c.control_gap if c.control_gap is not None else \
        theta + (1 - c.s_equal_norm) * max(k["g"]["es"], PRUNE_MARGIN / 0.7)
    control = th.get(CONTROL, gap)
    k["pruned"], k["control"], k["s_random"] = theta, theta - control, c.s_random


def _curve(s: dict, mode: str, keep: float):
    return next((c for c in s.get("curves") or [] if c.get("mode") == mode and c.get("correct_counts") is not None
                 and abs(float(c.get("keep", -1)) - keep) < KEEP_MATCH), None)


@claim(5, "sparsity", f"Keeping only the largest {KEEP:.0%} of ES's update leaves Pass@1 within 0.005 of the trained "
                      "model's, and an update of the same l2 norm on random entries loses clearly more.",
       estimand="Pass@1(pruned) - Pass@1(trained) (non-inferiority at -0.005), and Pass@1(pruned) - Pass@1(equal-norm "
                "control), mean over ES seeds and problems; the random-mask control reported beside",
       boundary=-PRUNE_MARGIN, sesoi=PRUNE_MARGIN,
       statistic="t of pruned - trained against -0.005 and t of pruned - equal-norm control against 0; yes: both "
                 "(p = the larger); no, the criterion's complement: pruned worse than trained by more than 0.005 or "
                 "no better than the equal-norm control (p = 2 x the smaller)",
       variance="seeds x problems (two-way random effects), Welch-Satterthwaite df",
       select=lambda sweep: {"es": [r for r in sweep["cell"].get("es", []) if r.get("sparsity")]},
       strong=0.0, plant=_plant_sparsity, second_nulls={CONTROL: 0.0},
       rest={"pruned": 0.0, "control": 0.0, "s_random": 1.0}, complement=True)
def sparsity(data, s):
    """The paper's absolute criterion (within half a point of the trained model), not a share of
    the gain: a share's boundary tested with an absolute margin says "no" at 100% retention
    whenever the gain is small. The control at equal norm: the top 22% of a structureless
    Gaussian update already carries ~68% of its squared norm, so a same-size random mask is a
    weak control; one rescaled to the kept part's norm isolates where the update sits."""
    keep = float(s["keep"])
    parts, lacking = [], 0
    for r in data["es"]:
        sp = r["sparsity"]
        top, ctrl = _curve(sp, "global", keep), _curve(sp, TEST_CONTROL, keep)
        if not sp.get("samples") or top is None or sp.get("base_counts") is None or sp.get("trained_counts") is None:
            continue
        if ctrl is None:
            lacking += 1
            continue
        rnd = _curve(sp, SECOND_CONTROL, keep)
        n = float(sp["samples"])
        parts.append([np.asarray(x, dtype=np.float64) / n for x in
                      (sp["base_counts"], sp["trained_counts"], top["correct_counts"], ctrl["correct_counts"],
                       (rnd or ctrl)["correct_counts"])] + [rnd is not None])
    if not parts:
        what = (f"an equal-norm control at keep {keep:g} in sparsity.json ({lacking} ES runs lack it: "
                "sparsity.modes needs equal_norm)" if lacking else
                f"sparsity.json with a global keep-{keep:g} point (config analysis=[sparsity]) for the cell's ES runs")
        return unclear("data", what)
    if (few := _enough({"ES with sparsity.json": parts}, s)):
        return few
    P = min(len(x) for p in parts for x in p[:5])
    base, trained, pruned, ctrl, rnd = (np.array([p[i][:P] for p in parts]) for i in range(5))
    ni = contrast([(pruned - trained, 1.0)])
    k = contrast([(pruned - ctrl, 1.0)])
    p_ni_no = p_above(-ni["effect"], ni["se"], ni["df"], PRUNE_MARGIN)   # H0: pruned >= trained - 0.005
    p_k_no = p_above(-k["effect"], k["se"], k["df"], 0.0)                 # H0: pruned >= the equal-norm control
    t = {**ni, "p_yes": max(p_above(ni["effect"], ni["se"], ni["df"], -PRUNE_MARGIN),
                            p_above(k["effect"], k["se"], k["df"], 0.0)),
         "p_no": min(1.0, 2 * min(p_ni_no, p_k_no))}
    gain = float((trained - base).mean())
    random_col = contrast([(pruned - rnd, 1.0)]) if all(p[5] for p in parts) else None
    extra = (f"; random mask: pruned - control {random_col['effect']:+.3g} (se {random_col['se']:.2g})"
             if random_col else "")
    return measured(t, f"gain {gain:+.3f}; pruned - trained {ni['effect']:+.4f} (se {ni['se']:.2g}); equal-norm "
                    f"control: pruned - control {k['effect']:+.3g} (se {k['se']:.2g}){extra}",
                    {"runs": len(parts), "problems": P}, gain=gain,
                    share_kept=float((pruned - base).mean() / gain) if gain else None, control=k,
                    random_control=random_col)


# ---------------------------------------------------------------------------------------
# 6. sequences
def _plant_sequence(theta, k, p, c, K, th, tested):
    """Both orders' gain: min(d1, dK) = theta (d1 against GRPO's Pass@1, dK against ES's Pass@K)."""
    k["g"]["es_grpo"] = k["g"]["grpo_es"] = max(k["g"]["grpo"] + theta, solve_shift(p, k["pk_es"] + theta, c, K,
                                                                                   sd=problem_spread(c, "es_grpo")))


def _saturation_gap(why: str, comps) -> str | None:
    """The planner's reading of "GRPO had not saturated" under components whose GRPO still climbs."""
    if "saturated" in why and comps.grpo_climb > 0:
        return (f"GRPO is still climbing at the end of its budget under these components (grpo_climb "
                f"{comps.grpo_climb:.3g}: the Pass@1 its second half adds), and the rule tests claim 6 only "
                "against a GRPO that has saturated (a longer GRPO budget, or a pilot that measures the climb)")
    return None

SATURATION_MARGIN = 0.01     # GRPO has saturated when its second half adds less Pass@1 than this
SATURATION_FROM = 0.5        # the second half: from the last evaluation at or before this share of its budget


def grpo_saturation(runs: list[dict], alpha: float) -> dict:
    """Whether GRPO's Pass@1 has stopped rising over the second half of its budget (claim 6's
    pre-registered precondition). Per GRPO run r (one per seed):
        d_r = Pass@1(final) - Pass@1(t_r),  t_r = its last evaluation at an iteration in
              (0, SATURATION_FROM x iterations]  (``pass1_curve``: the run's eval lines)
    mean d over the runs, se = sd / sqrt(R), t at R - 1 df (``metrics.contrast`` on run-level
    values). Saturated when H0: mean d >= SATURATION_MARGIN is rejected at ``alpha`` (one-sided:
    the upper (1 - alpha) bound of the mean change is below the margin). Returns the test
    ({"effect", "se", "df", "p", "from", "saturated"}) or unclear("data") when a run has no
    evaluation in that range (set eval.every <= iterations / 2 for GRPO)."""
    d, start = [], []
    for r in runs:
        it, final = _num(r.get("iterations")), _num(r.get("final_pass@1"))
        mid = [(_num(i), _num(v)) for i, v in (r.get("pass1_curve") or [])]
        mid = [(i, v) for i, v in mid if i is not None and v is not None and it and 0 < i <= SATURATION_FROM * it]
        if final is None or not mid:
            return unclear("data", "GRPO's Pass@1 curve with an evaluation in the first half of its budget and at "
                           f"its end in every GRPO run (set eval.every <= iterations / 2 for GRPO): claim 6 needs "
                           "GRPO saturated")
        i, v = max(mid)
        d.append(final - v)
        start.append(int(i) if float(i).is_integer() else i)
    t = contrast([(np.array(d)[:, None], 1.0)])
    p = p_above(-t["effect"], t["se"], t["df"], -SATURATION_MARGIN)
    return {**{k: t[k] for k in ("effect", "se", "df")}, "p": p, "from": sorted(set(start)), "saturated": p <= alpha}


@claim(6, "sequence_combines", "GRPO and ES in sequence combine GRPO's Pass@1 with ES's Pass@K (either order), "
                               "against a GRPO that has saturated.",
       estimand="per order: min(d1, dK), d1 = Pass@1(sequence) - Pass@1(GRPO), dK = Pass@K(sequence) - "
                "Pass@K(ES); the better order",
       boundary=-0.01, sesoi=0.01, statistic="per order both margins above -0.01 (p = the larger); the orders "
                                             "by Bonferroni (p = 2 x the smaller); no, the criterion's complement: "
                                             "every order has a margin below -0.01. Tested only when GRPO has saturated: its Pass@1 gain over "
                                             "the second half of its budget (final - the last evaluation at or "
                                             "before half) has a one-sided 95% upper bound below 0.01 "
                                             "(grpo_saturation), else unclear: data",
       variance="seeds x problems, problems paired across algorithms, Welch-Satterthwaite df; the saturation "
                "check over GRPO's runs (t at R - 1 df)",
       select=_cell("es", "grpo", *SEQUENCES), needs=(1,), strong=0.02, plant=_plant_sequence,
       design_gap=_saturation_gap, complement=True)
def sequence(data, s):
    orders = [o for o in SEQUENCES if data[o]]
    missing = [a for a in ("es", "grpo") if not data[a]] + ([] if orders else ["es_grpo or grpo_es"])
    if missing:
        return unclear("data", f"no {', '.join(missing)} runs in the comparison cell")
    if (few := _enough({a: data[a] for a in ("es", "grpo", *orders)}, s)):
        return few
    got = {a: scores(data[a], "final_counts", 1) for a in ("es", "grpo", *orders)}
    if any(v is None for v in got.values()) or len({v[1] for v in got.values()}) != 1:
        return unclear("data", "per-problem final counts with the same samples in every algorithm")
    K = _k_or_unclear(got["es"][1], s)
    if isinstance(K, dict):
        return K
    sat = grpo_saturation(data["grpo"], s["alpha"])
    if "unclear" in sat:
        return sat
    if not sat["saturated"]:
        return unclear("data", f"GRPO had not saturated: its Pass@1 rose {sat['effect']:+.3f} (se {sat['se']:.2g}) "
                       f"from iteration {'/'.join(map(str, sat['from']))} to its end, not clearly below "
                       f"{SATURATION_MARGIN:g} (p {sat['p']:.2g}); give GRPO a longer budget", saturation=sat)
    one = dict(zip(got, _cut(*(v[0] for v in got.values()))))
    atK = dict(zip(got, _cut(*(scores(data[a], "final_counts", K)[0] for a in got))))
    b = top = -0.01      # the margin: yes above it in every part; no below it (the criterion's complement)
    per = {}
    for o in orders:
        d1 = contrast([(one[o], 1.0), (one["grpo"], -1.0)])
        dk = contrast([(atK[o], 1.0), (atK["es"], -1.0)])
        worse = d1 if d1["effect"] <= dk["effect"] else dk
        per[o] = {**worse, "d1": d1["effect"], "d1_se": d1["se"], "dK": dk["effect"], "dK_se": dk["se"],
                  "p_yes": max(p_above(x["effect"], x["se"], x["df"], b) for x in (d1, dk)),
                  "p_no": min(1.0, 2 * min(p_above(-x["effect"], x["se"], x["df"], -top) for x in (d1, dk))),
                  "pass@1": float(one[o].mean()), f"pass@{K}": float(atK[o].mean())}
    best = min(orders, key=lambda o: per[o]["p_yes"])
    t = {k: per[best][k] for k in ("effect", "se", "df", "var_problems")}
    t["p_yes"] = min(1.0, len(orders) * per[best]["p_yes"])
    t["p_no"] = max(per[o]["p_no"] for o in orders)
    means = {a: {"pass@1": float(one[a].mean()), f"pass@{K}": float(atK[a].mean())} for a in got}
    why = "; ".join(f"{'ES->GRPO' if o == 'es_grpo' else 'GRPO->ES'} d1 {per[o]['d1']:+.3f}, dK {per[o]['dK']:+.3f}"
                    for o in orders)
    why += f" (GRPO Pass@1 {means['grpo']['pass@1']:.3f}, ES Pass@{K} {means['es'][f'pass@{K}']:.3f})"
    why += f"; GRPO saturated (second-half gain {sat['effect']:+.3f}, se {sat['se']:.2g})"
    return measured(t, why,
                    {a: len(data[a]) for a in got} | {"problems": one["es"].shape[1]}, k=K, orders=per,
                    means=means, best_order=best, saturation=sat)


# ---------------------------------------------------------------------------------------
# 7. population vs model size
def ols_slope(x, y) -> tuple[float, float, int]:
    """Least-squares slope of y on x with its standard error: b = Sxy / Sxx,
    se = sqrt(SSR / (n - 2) / Sxx), df = n - 2."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xc = x - x.mean()
    sxx = float(xc @ xc)
    b = float(xc @ (y - y.mean())) / sxx
    resid = y - y.mean() - b * xc
    df = len(x) - 2
    return b, (math.sqrt(float(resid @ resid) / df / sxx) if df > 0 else float("nan")), df


def _size_cells(es: list[dict]) -> dict:
    """model -> {pop: [runs]}: per model its most common (iterations, sigma, lr), >= 2 populations."""
    by_model: dict = {}
    for r in es:
        if r.get("final_counts") is not None and r.get("samples") and _num(r.get("pop")) is not None:
            by_model.setdefault(r.get("model"), []).append(r)
    cells = {}
    for model, rs in by_model.items():
        budgets: dict = {}
        for r in rs:
            budgets.setdefault(tuple(str(_num(r.get(k))) for k in ("iterations", "sigma", "lr")), []).append(r)
        pops: dict = {}
        for r in max(budgets.values(), key=len):
            pops.setdefault(int(_num(r["pop"])), []).append(r)
        if len(pops) >= 2:
            cells[model] = {p: one_per_seed(x) for p, x in sorted(pops.items())}
    return cells


@claim(7, "pop_vs_size", "Larger models need smaller ES populations (the population's benefit shrinks with "
                         "model size).",
       estimand="-beta, beta = slope over model sizes of (per-size slope of final Pass@1 on log2 N) on ln params",
       boundary=0.0, sesoi=0.001, statistic="t = -beta / se, the second-stage least squares over sizes",
       variance="between sizes: the residual spread of the per-size slopes (t at sizes - 2 df), which holds "
                "the seeds' and problems' part too; more seeds do not shrink the between-size part (the "
                "simulator: about 0.35-0.65 power at 5 sizes with any seeds, 0.91 at 12 sizes x 8 seeds)",
       select=lambda sweep: {"es": sweep["es"]}, units="model sizes", part="family", strong=0.003,
       plant=lambda theta, k, p, c, *_: k.update(beta=-theta, s0=c.s0), rest={"beta": 0.0, "s0": 0.0},
       more=("sizes", (5, 12), {"family_seeds": 3}), shows_trend=True)
def pop_vs_size(data, s):
    cells = _size_cells(data["es"])
    if len(cells) < s["min_sizes"]:
        return unclear("data", f"{len(cells)} model size(s) with >= 2 populations of ES runs "
                       f"(need >= {s['min_sizes']})", model_sizes=len(cells))
    table = []
    for model, pops in cells.items():
        params = _num(next(iter(pops.values()))[0].get("params"))
        if params is None or params <= 0:
            return unclear("data", f"model size (params) of {model}")
        x, y = [], []
        for p, runs in pops.items():
            for r in runs:
                x.append(math.log2(p))
                y.append(float(np.mean(r["final_counts"])) / float(r["samples"]))
        table.append({"model": model, "params": params, "slope": ols_slope(x, y)[0], "pops": list(pops),
                      "pass@1": [float(np.mean([np.mean(r["final_counts"]) / r["samples"] for r in rs]))
                                 for rs in pops.values()], "seeds": [len(rs) for rs in pops.values()]})
    table.sort(key=lambda t: t["params"])
    beta, se, df = ols_slope(np.log([t["params"] for t in table]), [t["slope"] for t in table])
    return measured({"effect": -beta, "se": se, "df": float(df)},
                    "per-size Pass@1 per doubling of N: " + ", ".join(f"{t['model']} {t['slope']:+.4f}" for t in table),
                    {"model_sizes": len(table), "runs": sum(sum(t["seeds"]) for t in table)}, per_size=table,
                    beta=beta)

# =======================================================================================
# The rivals (2026): the same runs, their readings. Each claim names its source.
ABDI = "Abdi et al. 2026, arXiv 2601.20861"
SCHWEIGHOFER = "Schweighofer et al. 2026, arXiv 2605.30148"
HOY = "Hoy et al. 2026, arXiv 2604.01499"
PROBE_FIELDS = ("base_probe_pass1", "final_probe_pass1", "min_probe_pass1")   # eval.probes (claims 8, 10)
PROBE_SHOWN = ("probe_per_gain", "sigma_probe", "sigma_probe_eval")
PROBES_MISSING = ("held-out probe Pass@1 (base_probe_pass1, final_probe_pass1, min_probe_pass1) in every {who} run "
                  "(set eval.probes: held-out tasks evaluated every eval.every)")


def _probe(runs, key) -> np.ndarray | None:
    v = [_num(r.get(key)) for r in runs]
    return None if any(x is None for x in v) else np.array(v)


def _probe_change(runs) -> np.ndarray | None:
    """final_probe_pass1 - base_probe_pass1 per run (the held-out probes' mean Pass@1 change)."""
    b, f = _probe(runs, "base_probe_pass1"), _probe(runs, "final_probe_pass1")
    return None if b is None or f is None else f - b


def gain_noise(runs) -> np.ndarray | None:
    """Per run, the evaluation (binomial) variance of its measured Pass@1 gain: the final
    evaluation's (``metrics.pass_at_k_noise_var``), plus the base's where the runs' base counts
    differ (a base shared by every run shifts all gains alike: the intercept takes it). None
    without per-problem counts."""
    if not runs or any(r.get("final_counts") is None or not r.get("samples") for r in runs):
        return None
    base0 = runs[0].get("base_counts")
    shared = all(r.get("base_counts") is not None and list(r["base_counts"]) == list(base0) for r in runs)
    out = []
    for r in runs:
        n = int(r["samples"])
        if n < 2:
            return None
        v = pass_at_k_noise_var(n, np.asarray(r["final_counts"], dtype=np.int64), 1)
        if not shared and r.get("base_counts") is not None:
            v += pass_at_k_noise_var(n, np.asarray(r["base_counts"], dtype=np.int64), 1)
        out.append(max(float(v), 0.0))
    return np.array(out)


def gain_ranges(g: dict) -> dict:
    """{"ES": [min, max], "GRPO": [min, max]} of the runs' measured Pass@1 gains."""
    return {a: [float(np.min(v)), float(np.max(v))] for a, v in g.items()}


def _ranges_text(r: dict) -> str:
    return ", ".join(f"{a}'s {lo:+.3f} to {hi:+.3f}" for a, (lo, hi) in r.items())


def at_matched_gain(y: dict, g: dict, s: dict, what: str, noise: dict | None = None,
                    overlap: bool = False) -> dict:
    """Claim 2's matched-gain design for any run-level y: least squares of
    y_r = a + beta [r is ES] + gamma gain_r over the ES and GRPO runs (one common slope on the
    run's Pass@1 gain, with an intercept), so beta is ES's minus GRPO's y at any common gain g*
    (reported at g* = the runs' mean gain), t at n - 3 df. ``y``, ``g``: {"ES": array, "GRPO":
    array}. unclear("power") when an algorithm's gain is not clearly > 0 (no reading at gains an
    algorithm never reached); unclear("data") when the gain does not vary within an algorithm.

    ``noise`` ({"ES", "GRPO"}: each run's gain evaluation variance, ``gain_noise``): the measured
    gain is the true one plus evaluation noise, which flattens the common slope (errors in
    variables) and, where the algorithms' gains differ, leaves part of y's dependence on the gain
    in beta: a false difference at matched gain. Corrected least squares removes it: b =
    (X'X - D)^-1 X'y, D the summed noise variance in the gain's diagonal entry, cov = s^2 A^-1
    X'X A^-1 (A = X'X - D, s^2 the residual variance at n - 3 df); unclear("power") when the
    within-algorithm spread of the gains is not clearly more than noise (A not positive definite).

    ``overlap``: read only where the two algorithms' ranges of measured gains overlap,
    max(min_ES, min_GRPO) <= min(max_ES, max_GRPO); else unclear("data") naming the ranges. Apart,
    beta is the one algorithm's line carried along the slope to the other's gains: its bias is the
    slope's error times the gap, which more seeds do not remove (no "more seeds" reading then)."""
    for a in ("ES", "GRPO"):
        t = contrast([(g[a][:, None], 1.0)])
        if p_above(t["effect"], t["se"], t["df"], 0.0) > s["alpha"]:
            return unclear("power", f"{a}'s Pass@1 gain {t['effect']:+.3g} (se {t['se']:.2g}) is not clearly "
                           f"above 0: no gain to compare the {what} at")
    ranges = gain_ranges(g)
    if overlap and max(lo for lo, _ in ranges.values()) > min(hi for _, hi in ranges.values()):
        return unclear("data", f"the runs' Pass@1 gains do not overlap ({_ranges_text(ranges)}): at one gain the "
                       f"{what} would be extrapolated along the slope, which more seeds do not fix; runs of both "
                       "algorithms over a common range of gains would (e.g. GRPO stopped earlier, ES run longer)",
                       gain_ranges=ranges)
    yy = np.concatenate([y["ES"], y["GRPO"]])
    gain = np.concatenate([g["ES"], g["GRPO"]])
    is_es = np.r_[np.ones(len(y["ES"])), np.zeros(len(y["GRPO"]))]
    X = np.column_stack([np.ones_like(yy), is_es, gain])
    fit = ols(yy, X)
    if fit is None:
        return unclear("data", f"the Pass@1 gain does not vary within an algorithm: the common slope, and so the "
                       f"{what} at one gain, is not identified")
    if noise is not None:
        xtx = X.T @ X
        A = xtx.copy()
        A[2, 2] -= float(np.sum(noise["ES"]) + np.sum(noise["GRPO"]))
        if np.any(np.linalg.eigvalsh(A) <= 1e-12 * np.trace(xtx)):
            return unclear("power", "the runs' Pass@1 gains vary within each algorithm by little more than their "
                           f"evaluation noise: the common slope, and so the {what} at one gain, is not measured "
                           "(more problems or samples)")
        A_inv = np.linalg.inv(A)
        coef = A_inv @ (X.T @ yy)
        resid = yy - X @ coef
        cov = float(resid @ resid) / fit["df"] * (A_inv @ xtx @ A_inv)
        fit = {**fit, "coef": coef, "cov": cov}
    a0, beta, gamma = (float(v) for v in fit["coef"])
    g_star = float(gain.mean())
    return {"beta": beta, "se": math.sqrt(float(fit["cov"][1, 1])), "df": fit["df"], "g_star": g_star,
            "es_at": a0 + beta + gamma * g_star, "grpo_at": a0 + gamma * g_star, "slope_per_gain": gamma,
            "ranges": ranges}


def _noise(es, grpo) -> dict | None:
    nz = {"ES": gain_noise(es), "GRPO": gain_noise(grpo)}
    return None if nz["ES"] is None or nz["GRPO"] is None else nz


def _gains(es, grpo):
    g = {"ES": _pass1_gain(es), "GRPO": _pass1_gain(grpo)}
    return None if g["ES"] is None or g["GRPO"] is None else g


# ---------------------------------------------------------------------------------------
# 8. Abdi: ES forgets (held-out probes, at matched target gain)
FORGET_SESOI = 0.01       # one point of the probes' Pass@1


@claim(8, "es_forgets", "At the same target Pass@1 gain, ES loses more held-out ability than GRPO (the held-out "
                        "probes' Pass@1 falls more under ES).",
       estimand="-beta_ES in c_r = a + beta_ES [r is ES] + gamma gain_r, c_r = the run's held-out probes' Pass@1 "
                "change (final_probe_pass1 - base_probe_pass1), gain_r its target Pass@1 gain (one common slope, "
                "with an intercept): how much more ES loses than GRPO at any common gain g* (reported at the runs' "
                "mean gain)",
       boundary=0.0, sesoi=FORGET_SESOI,
       statistic="t = -beta_ES / se, least squares over the ES and GRPO runs (n - 3 df), corrected for the "
                 "gain's evaluation noise (errors in variables: at_matched_gain)",
       variance="seeds (runs): the residual spread around the common line; each algorithm's gain must be clearly "
                "> 0, and the two algorithms' ranges of gains must overlap (else unclear: data, as claim 2)",
       select=_cell("es", "grpo"), source=ABDI, strong=0.04,
       plant=lambda theta, k, p, c, *_: k.update(forget=theta, probe_per_gain=c.probe_per_gain),
       rest={"forget": 0.0, "probe_per_gain": 0.0}, measure="probes", fields=PROBE_FIELDS, opt_in=True,
       shown=PROBE_SHOWN)
def es_forgets(data, s):
    """Matched gain, as claim 2: the same loss per unit of gain in both algorithms at different
    gains is no difference (a raw ES - GRPO difference would call it forgetting)."""
    es, grpo = data["es"], data["grpo"]
    if (few := _enough({"ES": es, "GRPO": grpo}, s)):
        return few
    c = {"ES": _probe_change(es), "GRPO": _probe_change(grpo)}
    if c["ES"] is None or c["GRPO"] is None:
        return unclear("data", PROBES_MISSING.format(who="ES and GRPO"))
    if (g := _gains(es, grpo)) is None:
        return unclear("data", "base and final Pass@1 of every ES and GRPO run")
    m = at_matched_gain(c, g, s, "held-out probe change", _noise(es, grpo), overlap=True)
    if "unclear" in m:
        return m
    t = {"effect": -m["beta"], "se": m["se"], "df": m["df"]}
    return measured(t, f"at the same Pass@1 gain {m['g_star']:+.3f}: held-out probe change ES {m['es_at']:+.3f}, "
                    f"GRPO {m['grpo_at']:+.3f} (raw: ES {c['ES'].mean():+.3f} at gain {g['ES'].mean():+.3f}, GRPO "
                    f"{c['GRPO'].mean():+.3f} at {g['GRPO'].mean():+.3f})",
                    {"es_runs": len(es), "grpo_runs": len(grpo)}, g_star=m["g_star"], es_at_g_star=m["es_at"],
                    grpo_at_g_star=m["grpo_at"], slope_per_gain=m["slope_per_gain"],
                    es_probe_change=float(c["ES"].mean()), grpo_probe_change=float(c["GRPO"].mean()),
                    es_gain=float(g["ES"].mean()), grpo_gain=float(g["GRPO"].mean()))


# ---------------------------------------------------------------------------------------
# 9. Abdi: ES's updates are denser and larger
DENSE_KEEP = KEEP          # the top 22% of entries: claim 5's keep fraction
DENSE_SESOI = 0.02         # two points of the squared norm's share in the top 22%
L2_SESOI = math.log(2.0)   # ES's l2 norm at least twice GRPO's (the paper: orders of magnitude)


def _log_l2(runs) -> np.ndarray | None:
    v = [_num(r.get("update_l2")) for r in runs]
    return None if any(x is None or x <= 0 for x in v) else np.log(np.array(v))


@claim(9, "es_dense_large", "At the same target Pass@1 gain, ES's update is denser than GRPO's (a smaller share of "
                            f"its squared norm in its largest {KEEP:.0%} of entries) and larger (its l2 norm higher).",
       estimand="at matched gain (claim 2's intercept model per measure): dense = GRPO's minus ES's share of the "
                f"update's squared norm in its top {KEEP:.0%} of entries (update_top_share; claim 5's keep fraction), "
                "and "
                "large = ln l2(ES) - ln l2(GRPO) (update_l2); the effect shown is dense, large in the details",
       boundary=0.0, sesoi=DENSE_SESOI,
       statistic="intersection-union: yes when dense > 0 and large > 0 (p = the larger of the two one-sided t "
                 "p-values, n - 3 df each); no when dense < 0.02 or large < ln 2 (p = 2 x the smaller)",
       variance="seeds (runs): residual spread around each measure's common line on the gain; each algorithm's "
                "gain must be clearly > 0, and the two algorithms' ranges of gains must overlap (else unclear: "
                "data, as claim 2)",
       select=_cell("es", "grpo"), source=ABDI, strong=0.08, second={"9c": 2.0}, second_nulls={"9c": 0.0},
       plant=lambda theta, k, p, c, K, th, tested: k.update(dense=theta, large=th["9c"]),
       rest={"dense": 0.0, "large": 0.0}, measure="update_stats", fields=("update_top_share", "update_l2"),
       opt_in=True, shown=("top_share", "sigma_share", "sigma_log_l2"))
def es_dense_large(data, s):
    es, grpo = data["es"], data["grpo"]
    if (few := _enough({"ES": es, "GRPO": grpo}, s)):
        return few
    share = {"ES": _probe(es, "update_top_share"), "GRPO": _probe(grpo, "update_top_share")}
    l2 = {"ES": _log_l2(es), "GRPO": _log_l2(grpo)}
    if any(v is None for v in (*share.values(), *l2.values())):
        return unclear("data", "update_top_share and update_l2 of every ES and GRPO run (config analysis=[drift], "
                       "or python -m esopt.analyze drift <run-dir>)")
    if (g := _gains(es, grpo)) is None:
        return unclear("data", "base and final Pass@1 of every ES and GRPO run")
    nz = _noise(es, grpo)
    d, big = (at_matched_gain(share, g, s, "update's density", nz, overlap=True),
              at_matched_gain(l2, g, s, "update's norm", nz, overlap=True))
    for m in (d, big):
        if "unclear" in m:
            return m
    dense = {"effect": -d["beta"], "se": d["se"], "df": d["df"]}
    large = {"effect": big["beta"], "se": big["se"], "df": big["df"]}
    py = {"dense": p_above(dense["effect"], dense["se"], dense["df"], 0.0),
          "large": p_above(large["effect"], large["se"], large["df"], 0.0)}
    pn = {"dense": p_above(-dense["effect"], dense["se"], dense["df"], -DENSE_SESOI),
          "large": p_above(-large["effect"], large["se"], large["df"], -L2_SESOI)}
    binding = max(py, key=py.get)
    bind = dense if binding == "dense" else large
    t = {**dense, "p_yes": max(py.values()), "p_no": min(1.0, 2 * min(pn.values())),
         "power_at": (DENSE_SESOI if binding == "dense" else L2_SESOI, bind["se"], bind["df"])}
    return measured(t, f"at the same Pass@1 gain {d['g_star']:+.3f}: top-{KEEP:.0%} share of the squared norm ES "
                    f"{d['es_at']:.3f}, GRPO {d['grpo_at']:.3f}; l2 ES/GRPO x{math.exp(large['effect']):.3g} "
                    f"(ln {large['effect']:+.3g}, se {large['se']:.2g})",
                    {"es_runs": len(es), "grpo_runs": len(grpo)}, g_star=d["g_star"], dense=dense, large=large,
                    binding=binding, es_top_share=d["es_at"], grpo_top_share=d["grpo_at"],
                    l2_ratio=math.exp(large["effect"]))


# ---------------------------------------------------------------------------------------
# 10. Schweighofer: the held-out drop is drift (it recovers), and anchored weight decay cures it
RECOVERY = 0.01            # final >= min + 0.01 along the run
ANCHOR_MARGIN = 0.01       # non-inferiority: the anchored run's probe change > -0.01, its Pass@1 > plain ES's - 0.01


def _plant_recovery(theta, k, p, c, K, th, tested):
    """ES's recovery from its probes' trough; the anchored arm's probe change ("10c") and its
    Pass@1 beside plain ES's ("10d", its gain ES's + that)."""
    k["recovery"], k["anchor_probe"], k["anchor_pass1"] = theta, th["10c"], th["10d"]
    k["g"][ES_ANCHOR] = k["g"]["es"] + th["10d"]


@claim(10, "drift_recovers", "Along ES runs the held-out probes' drop recovers (final >= the run's minimum + 0.01), "
                             "and ES with anchored weight decay keeps the probes (change > -0.01) without losing the "
                             "target gain (Pass@1 within 0.01 of plain ES).",
       estimand="recovery = mean over ES seeds of final_probe_pass1 - min_probe_pass1 (the minimum over the run's "
                "evaluations, the base's included); beside it, for the es_anchor arm (ES runs with es.anchor_decay "
                "> 0): its probe change final - base, and Pass@1(es_anchor) - Pass@1(ES) at the end",
       boundary=RECOVERY, sesoi=RECOVERY,
       statistic="intersection-union of three one-sided t tests: recovery > 0.01, anchored probe change > -0.01, "
                 "anchored - plain Pass@1 > -0.01 (p = the largest); no: recovery < 0.02, or anchored probe change "
                 "< 0, or anchored - plain Pass@1 < 0 (p = 3 x the smallest)",
       variance="recovery and the probe change: seeds (runs, t at R - 1 df; the minimum of noisy evaluations is "
                "biased low by about one evaluation sd, so the probes' own noise should be well below 0.01); "
                "Pass@1: seeds x problems, problems paired across the arms, Welch-Satterthwaite df",
       select=_cell("es", ES_ANCHOR), source=SCHWEIGHOFER, strong=0.04, second={"10c": 0.0, "10d": 0.0},
       second_nulls={"10c": -0.01, "10d": -0.01}, plant=_plant_recovery,
       rest={"recovery": 0.0, "anchor_probe": 0.0, "anchor_pass1": 0.0}, measure="probes", fields=PROBE_FIELDS,
       shown=PROBE_SHOWN)
def drift_recovers(data, s):
    es, anc = data["es"], data[ES_ANCHOR]
    if not anc:
        return unclear("data", "no ES runs with anchored weight decay (es.anchor_decay > 0) in the comparison cell")
    if (few := _enough({"ES": es, "anchored ES": anc}, s)):
        return few
    fin, low = _probe(es, "final_probe_pass1"), _probe(es, "min_probe_pass1")
    change = _probe_change(anc)
    if fin is None or low is None or change is None:
        return unclear("data", PROBES_MISSING.format(who="ES and anchored ES"))
    e1, a1 = scores(es, "final_counts", 1), scores(anc, "final_counts", 1)
    if e1 is None or a1 is None:
        return unclear("data", "per-problem final counts of the ES and anchored ES runs")
    rec = contrast([((fin - low)[:, None], 1.0)])
    kept = contrast([(change[:, None], 1.0)])
    a, e = _cut(a1[0], e1[0])
    gain = contrast([(a, 1.0), (e, -1.0)])
    parts = {"recovery": (rec, RECOVERY), "anchored_probe": (kept, -ANCHOR_MARGIN),
             "anchored_pass1": (gain, -ANCHOR_MARGIN)}
    py = {k: p_above(t["effect"], t["se"], t["df"], b) for k, (t, b) in parts.items()}
    pn = {k: p_above(-t["effect"], t["se"], t["df"], -(b + (RECOVERY if k == "recovery" else ANCHOR_MARGIN)))
          for k, (t, b) in parts.items()}
    binding = max(py, key=py.get)
    bt = parts[binding][0]
    t = {**rec, "p_yes": max(py.values()), "p_no": min(1.0, 3 * min(pn.values())),
         "power_at": (RECOVERY if binding == "recovery" else ANCHOR_MARGIN, bt["se"], bt["df"])}
    return measured(t, f"ES recovers {rec['effect']:+.3f} (se {rec['se']:.2g}) from its held-out minimum; anchored ES: "
                    f"probe change {kept['effect']:+.3f} (se {kept['se']:.2g}), Pass@1 vs ES {gain['effect']:+.3f} "
                    f"(se {gain['se']:.2g})", {"es_runs": len(es), "anchored_runs": len(anc), "problems": a.shape[1]},
                    recovery=rec, anchored_probe_change=kept, anchored_minus_es_pass1=gain, binding=binding,
                    es_probe_drop=float((low - _probe(es, "base_probe_pass1")).mean())
                    if _probe(es, "base_probe_pass1") is not None else None)


# ---------------------------------------------------------------------------------------
# 11. Hoy: linearly connected, nearly orthogonal
BARRIER = 0.02             # the interpolation's Pass@1 never more than 0.02 below the straight line
ORTHOGONAL = 0.1           # |cosine| of the two updates below 0.1
ORTHOGONAL_SESOI = 0.05


@claim(11, "connected", "The ES and GRPO solutions of one seed are linearly connected (along the line "
                                   "between them held-out Pass@1 never falls more than 0.02 below the straight line "
                                   "between the end points) while their updates are nearly orthogonal (|cosine| < 0.1).",
       estimand="-barrier, barrier = mean over seeds of max over t in {0.25, 0.5, 0.75} of [(1 - t) Pass@1(ES) + "
                "t Pass@1(GRPO)] - Pass@1((1 - t) theta_ES + t theta_GRPO) (connectivity.json); beside it mean over "
                "seeds of |cos(theta_ES - theta_0, theta_GRPO - theta_0)|",
       boundary=-BARRIER, sesoi=BARRIER,
       statistic="intersection-union: yes when barrier < 0.02 and mean |cosine| < 0.1 (p = the larger of the two "
                 "one-sided t p-values); no, the criterion's complement: barrier > 0.02 or mean |cosine| > 0.1 (p = 2 x "
                 "the smaller)",
       variance="seeds (ES/GRPO pairs, t at R - 1 df); the max over three t is biased up (conservative for yes)",
       select=_cell("es"), needs=(1,), source=HOY, strong=0.0, second={"11c": -0.02}, second_nulls={"11c": -0.1},
       plant=lambda theta, k, p, c, K, th, tested: k.update(barrier=-theta, cosine=-th["11c"]),
       rest={"barrier": 0.0, "cosine": 0.0}, measure="connectivity",
       fields=("connectivity_barrier", "connectivity_cosine", "connectivity_grpo_run"), opt_in=True,
       shown=("sigma_barrier", "sigma_cosine"), complement=True)
def connected_orthogonal(data, s):
    pairs = [r for r in data["es"] if _num(r.get("connectivity_barrier")) is not None
             and _num(r.get("connectivity_cosine")) is not None]
    if not pairs:
        return unclear("data", "connectivity.json for the cell's ES/GRPO seed pairs (config analysis=[connectivity], "
                       "or python -m esopt.analyze connectivity <es-run> <grpo-run>)")
    if (few := _enough({"ES/GRPO pairs with connectivity.json": pairs}, s)):
        return few
    barrier = np.array([float(r["connectivity_barrier"]) for r in pairs])
    cos = np.abs(np.array([float(r["connectivity_cosine"]) for r in pairs]))
    b = contrast([(-barrier[:, None], 1.0)])
    o = contrast([(-cos[:, None], 1.0)])
    py = {"barrier": p_above(b["effect"], b["se"], b["df"], -BARRIER),
          "orthogonal": p_above(o["effect"], o["se"], o["df"], -ORTHOGONAL)}
    pn = {"barrier": p_above(-b["effect"], b["se"], b["df"], BARRIER),         # H0: barrier <= 0.02
          "orthogonal": p_above(-o["effect"], o["se"], o["df"], ORTHOGONAL)}    # H0: mean |cosine| <= 0.1
    binding = max(py, key=py.get)
    bt = b if binding == "barrier" else o
    t = {**b, "p_yes": max(py.values()), "p_no": min(1.0, 2 * min(pn.values())),
         "power_at": (BARRIER if binding == "barrier" else ORTHOGONAL_SESOI, bt["se"], bt["df"])}
    return measured(t, f"barrier {barrier.mean():+.3f} (se {b['se']:.2g}) over {len(pairs)} seed pairs; mean |cosine| "
                    f"{cos.mean():.3f} (se {o['se']:.2g})", {"pairs": len(pairs)}, barrier=float(barrier.mean()),
                    abs_cosine=float(cos.mean()), binding=binding)


CLAIMS = {cid: (c.key, c.text) for cid, c in sorted(REGISTRY.items())}


# The registry's graph over its hypotheses (Bretz et al. 2009), and the settings a look reads
DEFAULTS = {"alpha": 0.05, "level": 0.95, "power": 0.80, "k": 8, "samples_per_k": 4, "min_runs": 3,
            "keep": KEEP, "keep_share": 0.90, "min_sizes": 5}

SIDES = ("yes", "no")



def hypothesis(cid: int, side: str) -> str:
    """A hypothesis's name in the graph: "<claim>.<yes|no>" (H0 of yes: theta <= b; of no: theta >= b + delta)."""
    return f"{cid}.{side}"


def registered_graph() -> dict:
    """The graph over the 2 x claims hypotheses (``esopt.core.graphical``, Bretz et al. 2009) that
    ``register`` writes before the runs, from the registry:
    - initial weights: what a claim declares (``Claim.weights``: claim 1's yes 0.6); the other
      hypotheses of the claims without ``needs`` share the rest equally; a gated claim's (one with
      ``needs``) start at 0;
    - edges: a hypothesis that gates others (claim 1's yes) passes its weight to the gated claims'
      hypotheses, equally; an ungated one to every other ungated hypothesis (the gate's yes among
      them, so once it is rejected that share reroutes to the gated ones), equally; a gated one to
      every other hypothesis but the gates', equally.
    So a gated claim can be decided only once the claim it needs says yes, and every weight sums
    to at most 1: family-wise error <= alpha over the whole family, whichever hypotheses are true
    (the yes and no nulls of one claim are disjoint, or, for a claim whose no is the complement of
    its criterion, meet only at theta = b: the graph's guarantee holds for any set of true nulls)."""
    gated = {cid for cid, c in REGISTRY.items() if c.needs}
    gates = {hypothesis(n, "yes") for c in REGISTRY.values() for n in c.needs}
    names = [hypothesis(cid, s) for cid in sorted(REGISTRY) for s in SIDES]
    fixed = {hypothesis(cid, s): float(w) for cid, c in REGISTRY.items() for s, w in c.weights.items()}
    claim_of = {h: int(h.split(".")[0]) for h in names}
    free = [h for h in names if h not in fixed and claim_of[h] not in gated]
    rest = max(0.0, 1.0 - sum(fixed.values()))
    weights = {h: fixed.get(h, rest / len(free) if h in free else 0.0) for h in names}
    edges = {}
    for h in names:
        if h in gates:
            to = [k for k in names if claim_of[h] in REGISTRY[claim_of[k]].needs]
        elif claim_of[h] in gated:
            to = [k for k in names if k != h and k not in gates]
        else:
            to = [k for k in names if k != h and claim_of[k] not in gated]
        edges[h] = {k: 1.0 / len(to) for k in to}
    return {"weights": weights, "edges": edges}


def _start_level(graph: Mapping, cid: int, alpha: float) -> float:
    """alpha x the weight claim ``cid``'s yes hypothesis holds at the start, or, for a gated claim,
    once the yes of each claim it needs is rejected: the level its power is read at."""
    gates = [hypothesis(n, "yes") for n in REGISTRY[cid].needs]
    return alpha * graphical.weights_after(graph, gates).get(hypothesis(cid, "yes"), 0.0)
