"""Before a study runs: can its grid decide each claim, and what does it cost (issue 40).

    grid = grid_of(runs)                       # runs: [(run_id, RunPlan)] as the sweeper validates them
    report = assess(grid, runs, sims=100)      # per claim: power, false yes, decidable or what is missing; cost
    print("\\n".join(lines(report)))
    found = search(grid, runs, claims=[1, 3], target=0.8, max_hours=100)

One home with the calibration: a grid becomes a ``simulate.Design`` (seeds per comparison arm,
problems, samples, the ES family's sizes, populations and seeds) whose synthetic sweeps go
through the real claim rules (``simulate.verdict_of``), shaped like the grid first
(:func:`shaper`: no out-of-domain entropy without ``eval.ood_task``, no sparsity.json without
``analysis=[sparsity]``, greedy ES members as ``es.temperature`` says, only the arms and seeds the
grid runs), so what a grid lacks is said in the rules' own words. Per claim:
    power      = P(yes) at theta = b + delta (the claim's smallest effect of interest), under the
                 least favourable of the generators that reach the claim (``simulate.GENERATORS``:
                 the simulator's own model and the misspecifications the rules do not model)
    false yes  = P(yes) at theta = b (claim 5: the worse of its two nulls), the worst generator
each with its Wilson 95% Monte Carlo interval; ``decidable`` when power >= ``TARGET``.

Components: the comparison cell's model's own (``simulate.MODEL_COMPONENTS``, from a pilot of that
model) where it has them, else ``simulate.MEASURED`` (the tiny family: paper_cpu and
paper_cpu_family), with the family's parameter range set to the grid's (:func:`model_components`);
or a pilot sweep's (:func:`pilot_components`, with bootstrap bounds: power is also reported at the
pessimistic and optimistic ends; what the pilot does not measure stays the model's).
``pilot_literal`` prints a pilot's as the ``Components(...)`` to paste into MODEL_COMPONENTS.
Cost: runs, the token bound (``esopt.runtime.budget.estimate_tokens``) and the tokens expected,
hours expected and at the bound (``budget.run_cost``: CPU-hours at this machine's measured rate for
runs that ask for no GPU, GPU-hours from the throughput table for those that do; generation,
training passes and analyses priced apart).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from esopt.core.errors import ConfigError
from esopt.core.metrics import wilson_interval
from esopt.study.claims import CELL_ALGOS, cell_model as pick
from esopt.study.claims.rules import ES_ANCHOR, REGISTRY, SEQUENCES
from esopt.study.claims.simulate import (GENERATORS, MEASURED, MODEL_COMPONENTS, Components, Design, scenarios,
                                         simulate, verdict_of)

TARGET = 0.8               # power at which a claim counts as decidable (claims.DEFAULTS["power"])
SIMS = 100                 # synthetic sweeps per scenario and generator (the CLI's --sims)
TREND_SIMS = 30            # the dry run's one line: sims per design
MEASURED_ON = ("tiny family: paper_cpu (tiny-s, 8 seeds) and paper_cpu_family (tiny-xs..xl, 116 runs), "
               "esopt/study/claims/simulate.py MEASURED")
# the search's candidates (iterations stay at the grid's: the simulator sets each effect at its
# smallest effect of interest whatever the budget, so fewer iterations would look free)
SEARCH_SEEDS = (3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SEARCH_PROBLEMS = (200, 500, 1000, 2000)   # capped at the eval split's size
SEARCH_SAMPLES = (32, 64, 128)
SEARCH_POPS = ((8, 16, 32), (4, 8, 16, 32), (4, 8, 16, 32, 64))


# ---------------------------------------------------------------------------------------------
# the grid, as the claims see it
@dataclass
class Grid:
    """What a sweep's runs give the claims (``grid_of``)."""
    cell_model: str | None
    cell_seeds: dict                      # algo -> seeds in the comparison cell
    problems: int
    samples: int
    split_rows: int                       # the eval split's size (the most problems a design can use)
    iterations: int
    ood: bool                             # eval.ood_task set: out-of-domain entropy (claim 2)
    sparsity: tuple                       # (fractions, modes) of analysis=[sparsity], () without it
    es_temperature: float
    es_samples: int
    grpo_mid: bool                        # an evaluation in the first half of GRPO's budget (claim 6)
    probes: bool = False                  # eval.probes set: held-out probe curves (claims 8 and 10)
    update_stats: bool = False            # analysis=[drift]: update_top_share and update_l2 per run (claim 9)
    connectivity: bool = False            # analysis=[connectivity]: ES/GRPO interpolation per seed (claim 11)
    family: dict = field(default_factory=dict)   # model -> {"params", "pops", "seeds"} (ES, >= 2 pops)
    models: dict = field(default_factory=dict)   # every model of the grid -> params

    @property
    def family_pops(self) -> tuple:
        sets = Counter(tuple(sorted(f["pops"])) for f in self.family.values())
        return sets.most_common(1)[0][0] if sets else ()

    @property
    def family_seeds(self) -> int:
        return min((f["seeds"] for f in self.family.values()), default=0)

    @property
    def params_range(self) -> tuple | None:
        ps = [f["params"] for f in self.family.values() if f["params"]]
        return (float(min(ps)), float(max(ps))) if len(ps) >= 2 else None


def grid_of(runs: list) -> Grid:
    """The grid of composed runs ``[(run_id, rc)]`` (one per run id): the comparison cell as
    ``claims.select_cell`` picks it (``claims.cell_model``: the model with the most algorithms), the ES family (models
    with >= 2 populations), and the evaluation settings of the cell's ES runs."""
    from esopt import models
    from esopt.runtime import budget

    rcs = list({rid: rc for rid, rc in runs}.values())
    if not rcs:
        raise ConfigError("the grid has no runs")
    by_model: dict = {}
    for rc in rcs:
        by_model.setdefault(rc.model["name"], []).append(rc)
    cell_model = pick((rc.model["name"], rc.algo) for rc in rcs) or rcs[0].model["name"]  # no cell run: any
    cell = [rc for rc in by_model[cell_model] if rc.algo in CELL_ALGOS]
    seeds: dict = {}
    for rc in cell:
        seeds.setdefault(_arm(rc), set()).add(rc.seed)
    ref = next((rc for rc in cell if _arm(rc) == "es"), cell[0] if cell else rcs[0])
    fam: dict = {}
    for m, rs in by_model.items():
        es = [rc for rc in rs if rc.algo == "es"]   # the family claims read ES runs (not sequences)
        pops = {rc.pop for rc in es}
        if len(pops) >= 2:
            per = {p: {rc.seed for rc in es if rc.pop == p} for p in pops}
            fam[m] = {"params": models.param_count(es[0].model), "pops": pops,
                      "seeds": min(len(v) for v in per.values())}
    sp = ()
    if "sparsity" in ref.analysis:
        sp = (tuple(float(f) for f in ref.sparsity.fractions), tuple(str(m) for m in ref.sparsity.modes))
    grpo = next((rc for rc in cell if rc.algo == "grpo"), None)
    es = next((p.settings for p in ref.phases if p.algo == "es"), None)   # ES's members: sampled or greedy (claim 4)
    return Grid(cell_model=cell_model, cell_seeds={a: len(s) for a, s in seeds.items()},
                problems=budget.eval_rows(ref), samples=int(ref.eval.samples),
                split_rows=budget._rows(ref.task_spec, ref.eval.split, None), iterations=int(ref.iterations),
                ood=bool(ref.eval.ood_task), sparsity=sp,
                es_temperature=float(es.temperature) if es is not None else 0.0,
                es_samples=int(es.samples) if es is not None else 1,
                grpo_mid=grpo is not None and grpo.eval.every <= grpo.iterations / 2,
                probes=bool(getattr(ref.eval, "probes", None)), update_stats="drift" in ref.analysis,
                connectivity="connectivity" in ref.analysis,
                family=fam, models={m: models.param_count(rs[0].model) for m, rs in by_model.items()})


def _arm(rc) -> str:
    """A composed run's arm: its algorithm, or ``es_anchor`` for ES with es.anchor_decay > 0."""
    decay = float((rc.blocks.get("es") or {}).get("anchor_decay") or 0.0) if rc.algo == "es" else 0.0
    return ES_ANCHOR if decay > 0 else rc.algo


def _claims_k() -> int:
    """The K of the claims' Pass@K (``claims.DEFAULTS``)."""
    from esopt.study.claims import DEFAULTS

    return int(DEFAULTS["k"])


def design_of(grid: Grid) -> Design:
    """The simulator's design of a grid: the most seeds of any comparison arm (the shaper trims
    each arm to its own), its problems and samples, the family's sizes, populations and seeds."""
    return Design(seeds=max(grid.cell_seeds.values(), default=1), problems=grid.problems, samples=grid.samples,
                  sizes=max(len(grid.family), 1), pops=grid.family_pops or (8, 16), k=_claims_k(),
                  family_seeds=max(grid.family_seeds, 1))


def model_components(model: str | None) -> tuple[Components, str]:
    """(components, source) assumed for a grid whose comparison cell runs ``model``: its own
    (``simulate.MODEL_COMPONENTS``, measured by a pilot of that model) where it has them, else the
    tiny family's (``MEASURED``)."""
    if model in MODEL_COMPONENTS:
        return MODEL_COMPONENTS[model], f"{model}: esopt/study/claims/simulate.py MODEL_COMPONENTS"
    return MEASURED, MEASURED_ON


def components_for(grid: Grid, base: Components | None = None) -> Components:
    """``base`` (default: the grid's model's, ``model_components``) with the family's parameter
    range set to the grid's (the trend is per ln params)."""
    base = base or model_components(grid.cell_model)[0]
    rng = grid.params_range
    return replace(base, params=rng) if rng else base


def arms(cid: int) -> tuple:
    """The algorithms claim ``cid`` reads from the comparison cell (its registry ``select``
    probed), or ("es",) for the ES-family claims."""
    c = REGISTRY[cid]
    if c.part == "family":
        return ("es",)
    probe = {"cell": {a: [{"sparsity": {}, "run_id": a}] for a in CELL_ALGOS}, "es": []}
    return tuple(c.select(probe))


def bears_on(grid: Grid) -> list[int]:
    """The claims a grid bears on: its comparison cell has every arm the claim reads (the
    sequences aside: claim 6 is listed once ES and GRPO are there, to say what it lacks), or,
    for the family claims, ES at >= 2 populations in some model. A claim whose measurement a
    grid opts into (``Claim.opt_in``: held-out probes, drift.json, connectivity.json) only where it
    asks for it (``Claim.measure``)."""
    out = []
    for cid, c in sorted(REGISTRY.items()):
        if c.opt_in and not getattr(grid, c.measure):
            continue
        if c.part == "family":
            if grid.family:
                out.append(cid)
        elif set(arms(cid)) - set(SEQUENCES) <= set(grid.cell_seeds):
            out.append(cid)
    return out


def shaper(grid: Grid):
    """records -> the records this grid would give: only its arms (anchored ES among them) and
    seeds; no out-of-domain entropy, sparsity point, GRPO mid-budget evaluation, held-out probe,
    update statistic or connectivity it does not ask for; ES members as greedy as its
    ``es.temperature``."""
    fractions, modes = grid.sparsity or ((), ())
    made: dict = {}     # each opt-in measurement's run fields (the claims' ``measure`` and ``fields``)
    for c in REGISTRY.values():
        if c.measure:
            made.setdefault(c.measure, set()).update(c.fields)

    def shape(recs: list[dict]) -> list[dict]:
        out = []
        for r in recs:
            fam = r["model"] != "cell"
            if fam and r["seed"] >= grid.family_seeds:
                continue
            arm = ES_ANCHOR if (r.get("anchor_decay") or 0) > 0 else r["algo"]
            if not fam and r["seed"] >= grid.cell_seeds.get(arm, 0):
                continue
            r = dict(r)
            for knob, keys in made.items():   # the opt-in measures only where the grid makes them
                if not getattr(grid, knob):
                    for k in keys:
                        r.pop(k, None)
            if not grid.ood:
                r.pop("base_ood_entropy", None)
                r.pop("final_ood_entropy", None)
            if "sparsity" in r:
                sp = r["sparsity"]
                curves = [c for c in sp["curves"] if c["mode"] in modes and any(abs(c["keep"] - f) < 1e-9
                                                                               for f in fractions)]
                r["sparsity"] = {**sp, "curves": curves} if curves else None
            if fam:
                r["es_temperature"], r["es_samples"] = grid.es_temperature, grid.es_samples
            if r["algo"] == "grpo" and not grid.grpo_mid and r.get("pass1_curve"):
                r["pass1_curve"] = [r["pass1_curve"][0], r["pass1_curve"][-1]]
            out.append(r)
        return out
    return shape


# ---------------------------------------------------------------------------------------------
# power by simulation
def _settings(design: Design) -> dict:
    from esopt.study.claims import DEFAULTS

    return {**DEFAULTS, "k": design.k}


def data_gap(cid: int, design: Design, comps: Components, shape) -> str | None:
    """What the grid lacks for claim ``cid`` in the rule's own words (its unclear("data") on
    one synthetic sweep at the smallest effect of interest), or None."""
    from esopt.study.claims import select_cell

    c = REGISTRY[cid]
    recs = shape(simulate(design, {cid: c.boundary + c.sesoi}, comps, np.random.default_rng(0), parts=(c.part,)))
    sweep = {"cell": select_cell(recs)["algos"], "es": [r for r in recs if r.get("algo") == "es"]}
    m = c.rule(c.select(sweep), _settings(design))
    if m.get("unclear") != "data":
        return None
    return (c.design_gap and c.design_gap(m["why"], comps)) or m["why"]   # the claim's reading (its components')


def generators_for(cid: int) -> list[str]:
    """The simulator's own model and the misspecified generators that change what claim ``cid``
    reads (``Claim.generators``), in ``simulate.GENERATORS``'s order."""
    return [g for g in GENERATORS if g == "current" or g in REGISTRY[cid].generators]


def yes_count(cid: int, effects: dict, design: Design, comps: Components, shape, sims: int, rng,
              stop_below: float | None = None, batch: int = 10) -> tuple[int, int]:
    """(yeses, sims run) of claim ``cid`` over synthetic sweeps; ``stop_below``: stop once the
    Wilson upper bound of the rate falls below it (a screening that rejects clear failures fast)."""
    s = _settings(design)
    parts = (REGISTRY[cid].part,)
    yes = n = 0
    while n < sims:
        for _ in range(min(batch, sims - n)):
            yes += verdict_of(cid, shape(simulate(design, effects, comps, rng, parts=parts)), s) == "yes"
            n += 1
        if stop_below is not None and wilson_interval(yes, n)[1] < stop_below:
            break
    return yes, n


def claim_power(cid: int, design: Design, comps: Components, shape, sims: int = SIMS, seed: int = 0,
                gens: list[str] | None = None, false_yes: bool = True) -> dict:
    """Power at the smallest effect of interest and false yes at the boundary under each
    generator reaching the claim; the least favourable of each, with Wilson intervals:
    {"power", "power_ci", "power_gen", "false_yes", "fy_ci", "fy_gen", "sims", "by_gen"}."""
    names = {name: eff for name, c, eff, _ in scenarios() if c == cid}
    by_gen = {}
    for gi, g in enumerate(gens or generators_for(cid)):
        cg = replace(comps, **GENERATORS[g])
        k, n = yes_count(cid, names[f"sesoi{cid}"], design, cg, shape, sims, np.random.default_rng([seed, cid, gi, 1]))
        row = {"power": (k, n)}
        if false_yes:
            row["false_yes"] = max((yes_count(cid, names[nm], design, cg, shape, sims,
                                              np.random.default_rng([seed, cid, gi, 2 + j]))
                                    for j, nm in enumerate(x for x in names if x.startswith("null"))),
                                   key=lambda t: t[0] / t[1])
        by_gen[g] = row
    pg = min(by_gen, key=lambda g: by_gen[g]["power"][0] / by_gen[g]["power"][1])
    k, n = by_gen[pg]["power"]
    out = {"power": k / n, "power_ci": wilson_interval(k, n), "power_gen": pg, "sims": n,
           "by_gen": {g: r["power"][0] / r["power"][1] for g, r in by_gen.items()}}
    if false_yes:
        fg = max(by_gen, key=lambda g: by_gen[g]["false_yes"][0] / by_gen[g]["false_yes"][1])
        fk, fn = by_gen[fg]["false_yes"]
        out |= {"false_yes": fk / fn, "fy_ci": wilson_interval(fk, fn), "fy_gen": fg}
    return out


# ---------------------------------------------------------------------------------------------
# cost
def run_hours(rc, tokens_per_s=None, gpu: str | None = None, engine: str | None = None) -> float:
    """Expected hours of one run on its device (``esopt.runtime.budget.run_cost``)."""
    from esopt.runtime import budget

    return budget.run_cost(rc, gpu or budget.DEFAULT_GPU, tokens_per_s, engine=engine)["total"]


def cost(runs: list, tokens_per_s=None, gpu: str | None = None, engine: str | None = None) -> dict:
    """The grid's runs (one per id) priced by ``esopt.runtime.budget.run_cost``: {"runs",
    "tokens" (the bound of generation and evaluation, the dry run's), "analysis_tokens",
    "expected" (generated tokens expected, analyses included), "gpu_hours" / "cpu_hours"
    (expected), "gpu_hours_bound" / "cpu_hours_bound", "parts" {generate, train, analysis}
    (hours), "sources"}."""
    from esopt.runtime import budget

    out = {"runs": 0, "tokens": 0, "analysis_tokens": 0, "expected": 0, "gpu_hours": 0.0, "cpu_hours": 0.0,
           "gpu_hours_bound": 0.0, "cpu_hours_bound": 0.0, "parts": dict.fromkeys(("generate", "train", "analysis"), 0.0),
           "sources": set(), "gpu": gpu or budget.DEFAULT_GPU}
    rates: dict = {}
    for rc in {rid: rc for rid, rc in runs}.values():
        c = budget.run_cost(rc, out["gpu"], tokens_per_s, engine=engine)
        parts = budget.token_parts(rc)
        kind = "cpu" if c["device"] == "cpu" else "gpu"
        out["runs"] += 1
        out["tokens"] += parts["eval"] + parts["train"]
        out["analysis_tokens"] += parts["analysis"]
        out["expected"] += c["expected"]
        out[f"{kind}_hours"] += c["total"]
        out[f"{kind}_hours_bound"] += c["bound_hours"]
        for k, h in c["hours"].items():
            out["parts"][k] += h
        out["sources"].update(c["sources"])
        out["sources"].add(f"generated share {c['share']:.2f}: {c['share_source']}")
        rates.setdefault((c["device"], engine or rc.engine_config.name, c["rate_source"]), {})[rc.model["name"]] = c["rate"]
    out["sources"] = [f"rate on {dev} ({eng}), tokens/s: " + ", ".join(f"{m} {r:,.0f}" for m, r in by.items())
                      + f"; {src}" for (dev, eng, src), by in sorted(rates.items())] + sorted(out["sources"])
    return out


# ---------------------------------------------------------------------------------------------
# a grid assessed: power per claim and cost
def assess(grid: Grid, runs: list, claims: list[int] | None = None, comps: Components | None = None,
           comp_source: str | None = None, bounds: tuple | None = None, sims: int = SIMS, seed: int = 0,
           tokens_per_s=None, target: float = TARGET, gpu: str | None = None, engine: str | None = None,
           spreads: tuple = (), spread_sims: int | None = None) -> dict:
    """Per claim (``claims``, default: those the grid bears on): what it lacks, or its power and
    false yes (``claim_power``) and at the pilot's ``bounds`` (pessimistic, optimistic
    components) its power there; with ``spreads`` (an unknown seed spread: ``component_sets``)
    its power at each ``sigma_seed`` (``spread_sims`` each) and the largest that still decides;
    the cost; the components and their source (``comps`` None:
    the grid's model's, ``model_components``)."""
    if comps is None:
        comps, src = model_components(grid.cell_model)
        comp_source = comp_source or src
    comps = components_for(grid, comps)
    design, shape = design_of(grid), shaper(grid)
    out = {"design": design, "family": bool(grid.family), "components": comps, "source": comp_source,
           "cost": cost(runs, tokens_per_s, gpu, engine),
           "claims": {}, "target": target, "sims": sims}
    for cid in claims or bears_on(grid):
        gap = data_gap(cid, design, comps, shape)
        row = {"key": REGISTRY[cid].key, "units": REGISTRY[cid].units}
        if REGISTRY[cid].design_note:      # the claim's own line beside its power (claim 4: the cells it needs)
            row["note"] = REGISTRY[cid].design_note(design)
        if gap:
            more = REGISTRY[cid].more
            if more and max(more[1]) > getattr(design, more[0]):
                gap += "; " + what_would(cid, grid, design, comps, min(sims, TREND_SIMS))
            row |= {"decidable": False, "why": gap}
        else:
            row |= claim_power(cid, design, comps, shape, sims, seed)
            if bounds:
                row["bounds"] = [claim_power(cid, design, components_for(grid, b), shape, sims, seed,
                                             false_yes=False)["power"] for b in bounds]
            row["decidable"] = row["power"] >= target
            if spreads:   # the seed spread is unknown: power over a range of it
                row["spreads"] = [(sd, claim_power(cid, design, replace(comps, sigma_seed=sd), shape,
                                                   spread_sims or sims, seed, false_yes=False)["power"])
                                  for sd in spreads]
                ok = [sd for sd, pw in row["spreads"] if pw >= target]
                row["decidable_up_to"] = max(ok) if ok else None
            if not row["decidable"]:
                row["why"] = (f"power {row['power']:.2f} < {target:g} at its smallest effect of interest "
                              f"(more {REGISTRY[cid].units}; --target-power {target:g} --claims {cid} searches "
                              "the cheapest design that decides)")
        out["claims"][cid] = row
    return out


def _fmt_ci(ci) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def claim_line(cid: int, row: dict) -> str:
    head = f"claim {cid} ({row['key']}): "
    note = f"; {row['note']}" if row.get("note") else ""
    if "power" not in row:
        return head + f"cannot decide: {row['why']}" + note
    text = (f"power {row['power']:.2f} {_fmt_ci(row['power_ci'])} (least favourable generator: {row['power_gen']}), "
            f"false yes {row['false_yes']:.2f} {_fmt_ci(row['fy_ci'])}")
    if row.get("bounds"):
        text += f", power at the components' bounds {row['bounds'][0]:.2f} to {row['bounds'][1]:.2f}"
    if row.get("spreads"):
        text += "; " + spread_text(row)
    return head + text + "; " + ("decidable" if row["decidable"] else f"cannot decide: {row['why']}") + note


def spread_text(row: dict) -> str:
    """The sensitivity row of one claim: its power at each seed spread, and up to which it decides."""
    up = row.get("decidable_up_to")
    return (("decidable while the seed spread is <= " + f"{up:g}" if up is not None else "decidable at no seed spread")
            + " (power " + ", ".join(f"{pw:.2f}" for _, pw in row["spreads"]) + " at sigma_seed "
            + ", ".join(f"{sd:g}" for sd, _ in row["spreads"]) + ")")


def cost_lines(c: dict) -> list[str]:
    hours = []
    if c["gpu_hours"]:
        hours.append(f"{hours_text(c['gpu_hours'])} GPU-hours ({c['gpu']}; {hours_text(c['gpu_hours_bound'])} at the "
                     "bound)")
    if c["cpu_hours"]:
        hours.append(f"{hours_text(c['cpu_hours'])} CPU-hours ({hours_text(c['cpu_hours_bound'])} at the bound)")
    p = c["parts"]
    return ([f"cost: {c['runs']} runs, <= {c['tokens']:,} generated tokens (+ {c['analysis_tokens']:,} in analyses), "
             f"about {c['expected']:,} expected; " + (" + ".join(hours) or "0 hours") + " expected",
             f"  of which generation {hours_text(p['generate'])}, training passes {hours_text(p['train'])}, "
             f"analyses {hours_text(p['analysis'])} hours"]
            + [f"  {s}" for s in c["sources"]])


def hours_text(h: float) -> str:
    return f"{h:,.0f}" if h >= 100 else f"{h:.3g}"


def component_lines(report: dict) -> list[str]:
    c = report["components"]
    d = report["design"]
    shown = ("sigma_seed", "sigma_seed_grpo", "sigma_problem_es", "sigma_problem_grpo", "sigma_entropy", "s0", "sigma_size", "es_gain",
             "grpo_gain", "params")
    for cid in report["claims"]:   # each claim's own (the rivals')
        shown += tuple(k for k in REGISTRY[cid].shown if k not in shown)
    note = "" if report["source"].startswith("pilot") else " (point values; --pilot estimates a pilot's, with bounds)"
    return ([f"components ({report['source']}){note}: " + ", ".join(f"{k} {_short(getattr(c, k))}" for k in shown)]
            + [f"design (simulated): {d.seeds} seeds per arm (max; each arm its own), {d.problems} problems x "
               f"{d.samples} samples, " + (f"family {d.sizes} sizes x pops {list(d.pops)} x {d.family_seeds} seeds"
                                           if report["family"] else "no ES family (no model with >= 2 populations)")
               + "; "
               f"{report['sims']} sims per scenario and generator; decidable: power >= {report['target']:g}"])


def _short(v) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_short(x) for x in v) + ")"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def lines(report: dict) -> list[str]:
    out = [claim_line(cid, row) for cid, row in report["claims"].items()]
    if not out:
        out = ["no claim: the grid has none of the arms a claim reads (es; es and grpo; ES at >= 2 populations)"]
    return out + cost_lines(report["cost"]) + component_lines(report)


# ---------------------------------------------------------------------------------------------
# the dry run's lines: the family claims with a planner hint (``Claim.more``: claim 7, the trend)
def trend_line(rcs: list, sims: int = TREND_SIMS, target: float = TARGET) -> str | None:
    """One line per family claim with a ``more`` hint for a grid that spans model sizes and
    populations (None otherwise): whether it can decide, and what would (its power at the hint's
    values over the grid's range)."""
    sizes = {rc.model["name"] for rc in rcs if rc.algo == "es"}
    if len(sizes) < 2 or len({rc.pop for rc in rcs if rc.algo == "es"}) < 2:
        return None
    out = []
    for cid, c in sorted(REGISTRY.items()):
        if c.part != "family" or not c.more:
            continue
        try:
            line = _trend_line(cid, rcs, sims, target)
        except Exception as e:  # noqa: BLE001 - a note in a dry run never takes it down
            line = f"design: claim {cid} not estimated ({type(e).__name__}: {e}); python -m esopt.design says more"
        if line:
            out.append(line)
    return "\n".join(out) or None


def _trend_line(cid: int, rcs: list, sims: int, target: float) -> str | None:
    grid = grid_of([(str(i), rc) for i, rc in enumerate(rcs)])
    if len(grid.family) < 2:
        return None
    comps, design, shape = components_for(grid), design_of(grid), shaper(grid)
    what = REGISTRY[cid].text.split(" (")[0].rstrip(".")
    head = f"design: claim {cid} ({what[:1].lower() + what[1:]}): "
    gap = data_gap(cid, design, comps, shape)
    if not gap:
        p = claim_power(cid, design, comps, shape, sims, gens=["current"], false_yes=False)
        if p["power"] >= target:
            return head + (f"decidable (power {p['power']:.2f} {_fmt_ci(p['power_ci'])}, {sims} sims; "
                           "python -m esopt.design)")
        gap = f"power {p['power']:.2f} {_fmt_ci(p['power_ci'])} < {target:g}"
    return (head + f"cannot decide: {gap}; {what_would(cid, grid, design, comps, sims)} "
            f"({sims} sims; python -m esopt.design <same overrides> for every claim)")


def what_would(cid: int, grid: Grid, design: Design, comps: Components, sims: int = TREND_SIMS) -> str:
    """What would decide claim ``cid`` (its ``more`` hint: a Design field, its values, floors of
    other fields; claim 7: 5 and 12 model sizes over the grid's range of parameters, >= 3 seeds,
    the grid's populations): its power at each value above the design's, on the simulator's own
    model."""
    knob, values, floors = REGISTRY[cid].more
    what, top = [], 0.0
    for n in values:
        if n > getattr(design, knob):
            d = replace(design, **{knob: n}, **{k: max(getattr(design, k), v) for k, v in floors.items()})
            p = claim_power(cid, d, comps, lambda r: r, sims, gens=["current"], false_yes=False)
            what.append(f"{n} {knob} x {d.family_seeds} seeds: power {p['power']:.2f} {_fmt_ci(p['power_ci'])}")
            top = max(top, p["power"])
    rng = grid.params_range
    span = f" over {rng[0]:.3g}-{rng[1]:.3g} params" if rng else ""
    if not what:
        return "what would: more model sizes or a wider range of them"
    if top >= TARGET:
        return "what would: " + ", ".join(what) + span
    return (f"no design of up to {max(values)} {knob}{span} reaches {TARGET:g} ({', '.join(what)}): what would "
            "is a wider range of sizes, or a pilot whose components (--pilot) are kinder than the tiny family's")


# ---------------------------------------------------------------------------------------------
# components from a pilot sweep
PILOT_NOISE = ("sigma_seed", "sigma_seed_grpo", "sigma_problem_algo", "sigma_problem_es", "sigma_problem_grpo", "sigma_entropy", "sigma_size", "sigma_step",
               "sigma_probe", "sigma_probe_eval", "sigma_share", "sigma_log_l2", "sigma_cosine")


def _pilot_records(sweep_dir) -> list[dict]:
    from esopt.study.claims.simulate import sweep_records

    recs = [r for r in sweep_records(sweep_dir) if r.get("status", "completed") == "completed"
            and r.get("final_counts") is not None]
    if not recs:
        raise ConfigError(f"--pilot {sweep_dir}: no finished runs with per-problem counts (run the pilot sweep first)")
    return recs


PILOT_MIN_RUNS = 2   # finished runs per algorithm a pilot needs: a seed spread takes two


def pilot_enough(sweep_dir) -> None:
    """ConfigError (one line) when a pilot has fewer than ``PILOT_MIN_RUNS`` finished runs of an
    algorithm it ran: its seed spread cannot be estimated, so a design from it is a guess."""
    counts = Counter(r.get("algo") for r in _pilot_records(sweep_dir))
    few = {a: n for a, n in counts.items() if n < PILOT_MIN_RUNS}
    if few:
        raise ConfigError(f"--pilot {sweep_dir}: " + ", ".join(f"{a} has {n} finished run(s)" for a, n in few.items())
                          + f"; the components need >= {PILOT_MIN_RUNS} per algorithm (a seed spread)")


def pilot_components(sweep_dir, boot: int = 30, level: float = 0.8, seed: int = 0,
                     start: Components = MEASURED, start_source: str = MEASURED_ON) -> tuple:
    """(point, pessimistic, optimistic, how) from a finished pilot sweep: ``estimate_components``
    on its runs (what it cannot estimate keeps ``start``'s: ``how["assumed"]`` names those), and on
    ``boot`` bootstrap resamples of its runs (the ES family's model sizes resampled when there are
    >= 3, then seeds within each (model, algo, pop) group); the estimated noise components'
    ``level`` percentile bounds: pessimistic = every noise sd at its upper bound, optimistic at its
    lower. ConfigError without finished runs."""
    from esopt.study.claims import select_cell
    from esopt.study.claims.simulate import estimate_components

    recs = _pilot_records(sweep_dir)
    point, how = estimate_components(recs, recs, start=start)
    groups: dict = {}
    for r in recs:
        groups.setdefault((r.get("model"), r.get("algo"), r.get("pop")), []).append(r)
    rng = np.random.default_rng(seed)
    noise = [k for k in PILOT_NOISE if how.get(k, "assumed") != "assumed"]
    draws = {k: [] for k in noise}
    models = sorted({m for m, a, _ in groups if a == "es"} - {None}, key=str)
    cell = select_cell(recs)["model"]
    for _ in range(boot):
        sample = []
        # the family's sizes resampled too (the trend's spread is between sizes), when there are >= 3
        picks = list(rng.choice(len(models), len(models))) if len(models) >= 3 else list(range(len(models)))
        for (m, a, pop), rs in groups.items():
            copies = [c for c, j in enumerate(picks) if models[j] == m] if m in models and a == "es" else [0]
            if m == cell and 0 not in copies:   # the comparison cell keeps its ES runs
                copies = [0, *copies]
            for c in copies:
                for i, j in enumerate(rng.integers(0, len(rs), len(rs))):
                    tag = f"{m}~{c}" if c else m
                    sample.append({**rs[j], "model": tag, "seed": i, "run_id": f"{rs[j]['run_id']}~{c}~{i}"})
        try:
            c, _ = estimate_components(sample, sample, start=point)
        except Exception:  # noqa: BLE001 - a degenerate resample
            continue
        for k in noise:
            draws[k].append(getattr(c, k))
    lo_q, hi_q = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    pess = replace(point, **{k: float(np.percentile(v, hi_q)) for k, v in draws.items() if v})
    opt = replace(point, **{k: float(np.percentile(v, lo_q)) for k, v in draws.items() if v})
    assumed = [k for k, v in how.items() if v == "assumed" or v.startswith("assumed (")]
    how = {k: v for k, v in how.items() if v != "assumed"}
    how["bounds"] = (f"{level:.0%} bootstrap bounds over {boot} resamples of the pilot's sizes and seeds: "
                     + ", ".join(f"{k} {getattr(opt, k):.3g}-{getattr(pess, k):.3g}" for k in noise if draws[k]))
    how["assumed"] = (f"{', '.join(assumed)} (not measured by this pilot: {start_source.split(':')[0]}'s values)"
                      if assumed else "none")
    return point, pess, opt, how


def pilot_literal(sweep_dir) -> list[str]:
    """A pilot's components as lines to paste into ``simulate.MODEL_COMPONENTS``: how each was
    estimated (comments), the ones it cannot estimate (left at ``Components()``'s defaults, which
    the estimates that lean on them assumed too), then ``Components(...)`` of the estimated ones."""
    from esopt.study.claims.simulate import estimate_components, literal

    recs = _pilot_records(sweep_dir)
    c, how = estimate_components(recs, recs, start=Components())
    fields = [k for k, v in how.items() if not v.startswith("assumed")]
    assumed = [k for k in how if k not in fields]
    return ([f"# components of {sweep_dir} ({len(recs)} finished runs; estimate_components)"]
            + [f"#   {k}: {how[k]}" for k in fields]
            + [f"# assumed (Components() defaults): {', '.join(assumed) or 'none'}", literal(c, fields)])


# ---------------------------------------------------------------------------------------------
# the cheapest design that decides
def _variant(plan, *, pop=None, problems=None, samples=None, model=None):
    """The plan of a composed run with another population, evaluation size or model (for costs):
    its config changed and planned again, without ids (``esopt.runtime.validate.replan``), so
    the phases' settings and the task spec the estimates read follow the change."""
    from esopt.runtime.validate import replan

    changes: dict = {}
    if pop is not None:
        changes["pop"] = int(pop)
    if model is not None:
        changes["model"] = model
    if problems is not None or samples is not None:
        changes["eval"] = replace(plan.eval, problems=problems if problems is not None else plan.eval.problems,
                                  samples=samples if samples is not None else plan.eval.samples)
    return replan(plan, **changes) if changes else plan


def _spread(items: list, k: int) -> list:
    """k items spread over a sorted list, its ends included."""
    idx = sorted({int(round(i)) for i in np.linspace(0, len(items) - 1, k)})
    return [items[i] for i in idx]


def search(grid: Grid, runs: list, claims: list[int], target: float = TARGET, max_hours: float = math.inf,
           comps: Components | None = None, sims: int = SIMS, seed: int = 0, tokens_per_s: float | None = None,
           seeds=SEARCH_SEEDS, problems=SEARCH_PROBLEMS, samples=SEARCH_SAMPLES, pops=SEARCH_POPS,
           family_models: list | None = None, gpu: str | None = None, engine: str | None = None) -> dict:
    """The cheapest design (hours: GPU + CPU at :func:`run_hours`'s rates) whose power, under the
    least favourable generator, meets ``target`` for every claim in ``claims``: seeds x problems x
    samples for the comparison cell's claims; model sizes (``family_models``: (name, params, model
    config) by size, the shipped models of the grid's family's kind; k of them spread over their
    range) x populations x seeds for the family's. Candidates are tried cheapest first (each
    screened on the simulator's own model, stopped once its Wilson upper bound is below the target),
    the first that passes is confirmed under every generator. Returns {"found", "design", "power",
    "hours", "overrides", "best"} (best: the highest power reached within ``max_hours``)."""
    price = {"gpu": gpu, "engine": engine}   # the variants' hours, priced as the assessment prices them

    comps0 = comps or model_components(grid.cell_model)[0]
    rcs = list({rid: rc for rid, rc in runs}.values())
    cell_claims = [c for c in claims if REGISTRY[c].part != "family"]
    fam_claims = [c for c in claims if REGISTRY[c].part == "family"]
    cell_rep = {}
    for rc in rcs:
        if rc.model["name"] == grid.cell_model and rc.algo in grid.cell_seeds:
            cell_rep.setdefault(rc.algo, rc)
    fam_rep = next((rc for rc in rcs if rc.algo == "es" and rc.model["name"] in grid.family), None) \
        or cell_rep.get("es")
    if fam_claims and fam_rep is None:
        raise ConfigError("the family claims need ES runs in the grid")
    probs = sorted({min(p, grid.split_rows) for p in (*problems, grid.problems)})
    samps = sorted({*samples, grid.samples})
    fam_models = list(family_models or []) if fam_claims else []
    cands = []
    for P, n in itertools.product(probs, samps):
        if cell_claims:
            per_seed = sum(_hours(_variant(rc, problems=P, samples=n), tokens_per_s, price)
                           for rc in cell_rep.values())
            cell = [(per_seed * R, R) for R in seeds]
        else:
            cell = [(0.0, None)]
        if fam_claims:
            fam = []
            for k in range(2, len(fam_models) + 1):
                chosen = _spread(fam_models, k)
                for ps in {*pops, grid.family_pops}:
                    if not ps:
                        continue
                    per_seed = sum(_hours(_variant(fam_rep, pop=p, problems=P, samples=n, model=cfg), tokens_per_s,
                                          price) for _, _, cfg in chosen for p in ps)
                    fam += [(per_seed * F, (tuple(c[0] for c in chosen), (chosen[0][1], chosen[-1][1]), ps, F))
                            for F in seeds]
        else:
            fam = [(0.0, None)]
        for (hc, R), (hf, f) in itertools.product(cell, fam):
            if hc + hf <= max_hours:
                cands.append((hc + hf, P, n, R, f))
    cands.sort(key=lambda c: (c[0], c[1], c[2]))
    best = {"power": -1.0}
    failed: list = []
    gaps: dict = {}
    for h, P, n, R, f in cands:
        if any(_dominated((P, n, R, f), d) for d in failed):
            continue
        design = Design(seeds=R or 1, problems=P, samples=n, k=_claims_k(),
                        sizes=len(f[0]) if f else 1, pops=f[2] if f else (8, 16), family_seeds=f[3] if f else 1)
        comps = replace(comps0, params=f[1]) if f else comps0
        shape = _design_shaper(grid, design)
        desc = _describe(design, f, bool(cell_claims))
        powers, gapped = {}, False
        for cid in claims:   # every claim screened (its power enters the best reachable), failures stop early
            gap = data_gap(cid, design, comps, shape)
            if gap:
                gaps[cid], gapped = gap, True
                break
            k_, n_ = yes_count(cid, _sesoi(cid), design, comps, shape, sims,
                               np.random.default_rng([seed, cid, 0, 1]), stop_below=target)
            powers[cid] = k_ / n_
        ok = not gapped and all(p >= target for p in powers.values())
        low = min(powers.values()) if not gapped else -1.0
        if low > best["power"]:
            best = {"power": low, "design": desc, "hours": h, "_design": (design, f, comps, shape)}
        if ok:  # confirmed under every generator reaching each claim
            conf = {cid: claim_power(cid, design, comps, shape, sims, seed, false_yes=False) for cid in claims}
            if all(r["power"] >= target for r in conf.values()):
                return {"found": True, "design": desc, "power": {c: r["power"] for c, r in conf.items()},
                        "generators": {c: r["power_gen"] for c, r in conf.items()}, "hours": h,
                        "overrides": _overrides(grid, design, f, bool(cell_claims)), "sims": sims, "seed": seed,
                        "components": comps, "_design": design, "_family": f}
            low = min(r["power"] for r in conf.values())
            if low > best["power"]:
                best = {"power": low, "design": desc, "hours": h, "_design": (design, f, comps, shape)}
        else:
            failed.append((P, n, R, f))
    if best.get("_design") is not None:  # the best screened design, confirmed as a found one is
        d, f, comps, shape = best.pop("_design")
        best["power"] = min(claim_power(cid, d, comps, shape, sims, seed, false_yes=False)["power"] for cid in claims)
    if "design" not in best and gaps:  # every candidate lacked data for some claim: say what
        best["why"] = "; ".join(f"claim {c}: {g}" for c, g in sorted(gaps.items()))
        if any(REGISTRY[c].part == "family" for c in gaps):
            best["why"] += f" (the family's shipped sizes: {', '.join(m[0] for m in fam_models) or 'none'})"
    return {"found": False, "best": best, "candidates": len(cands), "max_hours": max_hours}


def _sesoi(cid: int) -> dict:
    c = REGISTRY[cid]
    return {cid: c.boundary + c.sesoi}


def _hours(rc, tokens_per_s, price: dict) -> float:
    return run_hours(rc, tokens_per_s, **price)


def _dominated(cand, worse) -> bool:
    """Whether a failed design ``worse`` has at least ``cand``'s seeds, problems, samples and (for
    the family) the same sizes and pops with at least its seeds: power rises with each, so cand fails too."""
    P, n, R, f = cand
    P2, n2, R2, f2 = worse
    if not (P <= P2 and n <= n2 and (R or 0) <= (R2 or 0)):
        return False
    if f is None or f2 is None:
        return f is None and f2 is None
    return f[0] == f2[0] and f[2] == f2[2] and f[3] <= f2[3]


def _design_shaper(grid: Grid, design: Design):
    """A searched design's shaper: the grid's evaluation knobs, every arm at the design's seeds."""
    g = replace(grid, cell_seeds={a: design.seeds for a in (grid.cell_seeds or {"es": 1})},
                family={f"size{j}": {"params": None, "pops": set(design.pops), "seeds": design.family_seeds}
                        for j in range(design.sizes)})
    return shaper(g)


def _describe(design: Design, f, cell: bool = True) -> str:
    text = (f"{design.seeds} seeds per arm, " if cell else "") + \
        f"{design.problems} problems x {design.samples} samples"
    if f:
        text += f"; family {', '.join(f[0])} x pops {list(f[2])} x {f[3]} seeds"
    return text


def _overrides(grid: Grid, design: Design, f, cell: bool) -> list[str]:
    """Command lines (overrides) that run the design: the comparison cell, then the family."""
    ev = f"eval.problems={design.problems} eval.samples={design.samples} iterations={grid.iterations}"
    out = []
    if cell:
        out.append(f"-m model={grid.cell_model} algo={','.join(sorted(grid.cell_seeds))} "
                   f"seed=range({design.seeds}) {ev}")
    if f:
        out.append(f"-m algo=es model={','.join(f[0])} pop={','.join(map(str, f[2]))} seed=range({f[3]}) {ev}")
    return out


# ---------------------------------------------------------------------------------------------
# a preset's header comment
HEADER = "# design"   # the first line of a preset's design block (sweeps/*_gpu.yaml), written by bench_design.py


def header_lines(report: dict, command: str) -> list[str]:
    """A preset's design as comment lines: the command and settings, the cost, then one line per
    claim (``claim N: power P [lo, hi], decidable | cannot decide`` or ``claim N: cannot decide:
    <what the rule lacks>``); ``tests/study/test_design.py`` checks them against esopt.design."""
    c = report["cost"]
    out = [f"{HEADER} ({command}; {report['sims']} sims, {report['source'].split(':')[0]} components; "
           "docs/results/design.md):",
           "#   " + header_cost(c), "#   " + decides_line(report)]
    for cid, row in report["claims"].items():
        if "power" in row:
            out.append(f"#   claim {cid}: power {row['power']:.2f} {_fmt_ci(row['power_ci'])} ({row['power_gen']}), "
                       + ("decidable" if row["decidable"] else "cannot decide")
                       + (f"; {spread_text(row)}" if row.get("spreads") else ""))
        else:
            out.append(f"#   claim {cid}: cannot decide: {row['why'].split('; ')[0]}")
    return out


def decides_line(report: dict) -> str:
    """What a design decides at power >= its target: the claims, each with the seed spreads where it
    holds when the components leave the spread unknown, or that it decides none (a pilot or a demo)."""
    parts = []
    for cid, row in report["claims"].items():
        if "power" not in row:
            continue
        if row.get("spreads"):
            if row.get("decidable_up_to") is not None:
                parts.append(f"claim {cid} while the seed spread is <= {row['decidable_up_to']:g}")
        elif row["decidable"]:
            parts.append(f"claim {cid}")
    return ("decides: " + "; ".join(parts) if parts else "decides no claim under these components: a pilot or a demo")


def header_cost(c: dict) -> str:
    """A preset header's cost line: runs, token bound and expected tokens, GPU-hours expected and
    at the bound."""
    return (f"{c['runs']} runs, <= {c['tokens'] + c['analysis_tokens']:,} generated tokens (about {c['expected']:,} "
            f"expected), {hours_text(c['gpu_hours'])} GPU-hours on {c['gpu']} ({hours_text(c['gpu_hours_bound'])} "
            "at the bound)")


def design_powers(report: dict) -> dict[int, float]:
    """{claim id: power at its smallest effect of interest, 2 decimals} of the claims a design
    simulated (those it lacks data for have none): a preset's ``sweep.design_power``, which the
    claims registration records (``esopt.study.claims.register``)."""
    return {cid: round(float(row["power"]), 2) for cid, row in report["claims"].items() if "power" in row}


def design_power_text(powers: dict) -> str:
    """``sweep.design_power``'s YAML flow mapping: ``{1: 0.85, 3: 0.9}``."""
    return "{" + ", ".join(f"{cid}: {pw:g}" for cid, pw in sorted(powers.items())) + "}"


def set_design_power(text: str, powers: dict) -> str:
    """A preset's text with ``sweep.design_power`` set to ``powers`` (its line replaced, or added
    after the ``sweep:`` block's ``name:``; a ``sweep:`` block added at the end when it has none;
    a line under its old name, ``plan_power``, is replaced by it);
    no powers (no claim simulated): the line removed."""
    lines = text.splitlines()
    value = f"  design_power: {design_power_text(powers)}   # the design's power per claim, registered with the claims"
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == "sweep:"), None)
    if start is None:
        return "\n".join([*lines, *(["sweep:", value] if powers else [])]) + "\n"
    end = start + 1
    while end < len(lines) and (lines[end].startswith((" ", "#")) or not lines[end].strip()):
        end += 1
    body = range(start + 1, end)
    at = next((i for i in body if lines[i].startswith(("  design_power:", "  plan_power:"))), None)   # or its old name
    if not powers:
        if at is not None:
            del lines[at]
    elif at is not None:
        lines[at] = value
    else:
        name = next((i for i in body if lines[i].startswith("  name:")), start)
        lines.insert(name + 1, value)
    return "\n".join(lines) + "\n"


def replace_header(text: str, block: list[str]) -> str:
    """A preset's text with its design block (``HEADER`` and the indented comment lines after it)
    replaced by ``block``, or inserted before its first non-comment line."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(HEADER + " (")), None)
    if start is not None:
        end = start + 1
        while end < len(lines) and lines[end].startswith("#   "):
            end += 1
        lines[start:end] = block
    else:
        at = next(i for i, ln in enumerate(lines) if not ln.startswith("#"))
        lines[at:at] = block
    return "\n".join(lines) + "\n"
