"""The study's claims (the seed paper's seven and its four 2026 rivals', each naming its source),
each a pre-registered test decided on a sweep, with the family-wise error across them controlled.

    python -m esopt.aggregate <sweep-dir> --claims     (prints the table, writes claims.json)
    claims(sweep_dir | Aggregate | records, trend=None) -> dict         (the aggregator calls this)

The claims, their estimands, boundaries, smallest effects of interest, statistics and variance
models are the registry in ``esopt.study.claims.rules`` (one entry per claim); the statistics
are ``esopt.core.metrics`` (contrast, p_above, power_at, t_interval) and ``esopt.core.graphical``
(Bretz et al. 2009); the page's section is ``esopt.study.report.page.claims_html``. This module
reads the sweep, chooses the comparison cell, runs every claim and decides:

    p_yes = P(H0: theta <= b), p_no = P(H0: theta >= b + delta)   (one-sided, per claim; claims 3, 5,
            6 and 11: H0 of no theta >= b, the complement of their registered criterion)
    one registered graph over the m = 2 x claims hypotheses (``registered_graph``, written into the
    registration before the runs): claim 1's yes starts at weight 0.6 (the study's first question,
    and the gate of four claims), the other hypotheses of the ungated claims share 0.4, the gated
    claims' start at 0 and get claim 1's weight once its yes is rejected; untested: p = 1
    yes   = the graph rejects p_yes at alpha; no = it rejects p_no (and not yes)
    a claim with ``needs`` (3, 4, 6, 11: about what ES's training gives) is unclear unless claim 1 is yes
    unclear: "power": power_at(delta, se, df, level) is the test's power at the smallest effect
             of interest at the level its yes holds at the start (alpha x its weight; a gated
             claim's once its gate opened), and data_needed (on the same t) is about
             how many times the test's units (the claim's ``units``: seeds; claim 4 ES runs;
             claim 7 model sizes) 80% power needs; where problems share the variance (claims 1,
             3, 5, 6), also what the units alone and the problems alone would need; "data":
             what the sweep lacks, named.
One registered look: a claims sweep writes its design (run ids, seeds, problems, samples, test
draw, iterations) into claims.json before any run (``register``, called by the sweeper); the
verdicts are confirmatory only on exactly the registered runs and when the design was not
changed after verdicts had been computed (``judge_look``); else every verdict is labelled
exploratory and the headline (claims.json "headline", the benchmark's table) leaves them out.
The calibration of these rules (false yes, false no, power, by simulation through this code):
``python benchmarks/bench_claims_calibration.py`` (docs/results/claims_calibration.md).

claims.json records the draw the verdicts come from: the cell's seeds and its runs' test split
(``cell.test_draw``: countdown's ``task.test_draw``, 0 the standard split, d >= 1 a fresh
confirmatory draw; null for a task without the knob).

Input: one record per completed run (the aggregator's runs-table row: run_id, algo, model,
params, pop, seed, iterations, sigma, lr, base_/final_ metrics; plus ``js_succ`` / ``p_pop`` /
``reward_mean`` = the means of the run's ES train lines), and the per-problem lists read from
the run directory: ``samples``, ``base_counts``, ``final_counts`` (correct samples per problem,
summary.json), ``sparsity`` (sparsity.json), the ES member scoring (``es_temperature``,
``es_samples``) and, with eval.probes, ``probe_samples`` / ``probe_problems`` (the planner's
estimate of a probe evaluation's noise). The rivals read runs-table columns:
``base_probe_pass1`` / ``final_probe_pass1`` / ``min_probe_pass1`` (the held-out probes,
eval.probes; claims 8 and 10), ``update_top_share`` / ``update_l2`` (drift.json; claim 9),
``connectivity_barrier`` / ``connectivity_cosine`` (connectivity.json on the ES run; claim 11),
and ``anchor_decay`` (summary.json's config; the ``es_anchor`` arm).

The comparison cell: the model with the most algorithms among none/es/grpo/grpo_es/es_grpo
(ties: most runs, then name). ES runs with anchored weight decay (``es.anchor_decay`` > 0 in their
summary.json's config: ``anchor_decay``) are their own arm, ``es_anchor`` (claim 10), never plain ES
(``arm``), and stay out of the ES family (claims 4 and 7). Per algorithm one setting is used: ES the (pop, iterations) of
the sequences' runs when there are any, else its setting with the most seeds (ties: larger pop,
then more iterations); GRPO the setting with ES's iterations when there is one, else the most
seeds; one run per seed (a duplicate differing only in its analyses: the one with sparsity.json).
"""

from __future__ import annotations

import json
import math
import sys
import zlib
from pathlib import Path
from statistics import NormalDist
from typing import Any, Iterable, Mapping

import numpy as np

from esopt.algorithms import ALGORITHMS, kind, trains
from esopt.core import graphical
from esopt.core.errors import ConfigError
from esopt.core.files import atomic_path
from esopt.core.metrics import p_above, power_at, t_interval
from esopt.study import fit
from esopt.study import tables
from esopt.study.claims import ledger, stored
from esopt.study.claims.stored import current_design
from esopt.study.claims.rules import DEFAULTS, SIDES, _start_level, hypothesis, registered_graph  # noqa: F401
from esopt.study.claims.rules import CLAIMS, ES_ANCHOR, REGISTRY, SEQUENCES, VERDICTS, _num, one_per_seed

__all__ = ["ALGOS", "ARMS", "CELL_ALGOS", "CLAIMS", "DEFAULTS", "REGISTRY", "SEQUENCES", "VERDICTS", "arm", "attach_details",
           "cell_model", "claims", "design_power", "hypotheses",
           "claims_sweep", "compute", "decide_all", "hypothesis_count", "judge_look", "records_from_tables", "register",
           "select_cell", "table_lines", "wanted"]
ALGOS = tuple(ALGORITHMS)
ARMS = (*ALGOS, ES_ANCHOR)      # the cell's arms: the algorithms, and ES with anchored weight decay
CELL_ALGOS = ("none", "es", "grpo", *SEQUENCES)  # the algorithms the claims read from the cell (anchored ES is es)


def arm(r: Mapping) -> str | None:
    """A record's arm in the comparison cell: its algorithm, or ``es_anchor`` for an ES run with
    ``anchor_decay`` > 0 (read from summary.json's config by ``attach_details``)."""
    a = r.get("algo")
    return ES_ANCHOR if a == "es" and (_num(r.get("anchor_decay")) or 0.0) > 0 else a
MAX_DATA_NEEDED = 100
# 7: "hypotheses" (m) and the registration's "design_power" (were "family_size" and "plan")
# 6: the registered graph over the hypotheses (registration "graph", claims' p_yes_adj / p_no_adj / level)
# 5: one Holm family of fixed size (family_size), the registration written before the runs
#    (registration, looks, look, headline; claims' "exploratory"); 4: data_needed a mapping
VERSION = 7


# ---------------------------------------------------------------------------------------
# the comparison cell
def _setting(r: Mapping) -> tuple:
    return tuple(str(_num(r.get(k))) for k in ("pop", "iterations", "sigma", "lr"))


def cell_model(runs: Iterable[tuple[Any, str]]) -> Any:
    """The comparison cell's model, from ``(model, algo)`` of a sweep's runs: the model with the
    most distinct :data:`CELL_ALGOS` (anchored ES counts as ES; other algorithms, such as
    random_search, do not count), then the most runs of them, then the first name; None without
    such runs. The one pick for a sweep's records (:func:`select_cell`) and for the runs a grid
    will make (``esopt.study.claims.design.grid_of``)."""
    per: dict = {}
    for model, algo in runs:
        if algo in CELL_ALGOS:
            per.setdefault(model, []).append(algo)
    if not per:
        return None
    return min(per, key=lambda m: (-len(set(per[m])), -len(per[m]), str(m)))


def select_cell(records: list[dict]) -> dict:
    """{"model", "algos": {algo: [records]}, "settings": {algo: setting}} (see module docstring)."""
    done = [r for r in records if r.get("status", "completed") == "completed" and arm(r) in ARMS]
    model = cell_model((r["model"], r["algo"]) for r in done)
    if model is None:
        return {"model": None, "algos": {}, "settings": {}}
    runs = [r for r in done if r["model"] == model]
    by_algo: dict = {}
    for r in runs:
        by_algo.setdefault(arm(r), {}).setdefault(_setting(r), []).append(r)

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
    if ES_ANCHOR in by_algo:      # anchored ES at plain ES's setting where it has one
        es_s = chosen.get("es")
        chosen[ES_ANCHOR] = most_seeds(by_algo[ES_ANCHOR], (lambda s: s == es_s) if es_s else None)
    return {"model": model, "algos": {a: one_per_seed(by_algo[a][s]) for a, s in chosen.items()},
            "settings": {a: dict(zip(("pop", "iterations", "sigma", "lr"), s)) for a, s in chosen.items()}}


# ---------------------------------------------------------------------------------------
# the decision
def hypothesis_count() -> int:
    """m, the hypotheses whose family-wise error the graph controls: every registered claim's yes
    and no (2 per claim)."""
    return 2 * len(REGISTRY)


def hypotheses(registration: Mapping | None) -> int | None:
    """m as a registration (or a claims.json result) recorded it: ``hypotheses``, or
    ``family_size`` as claims.json spelt it before version 7; None when it records none."""
    m = (registration or {}).get("hypotheses") or (registration or {}).get("family_size")
    return int(m) if m else None


def design_power(registration: Mapping) -> dict:
    """The design's power per claim a registration (or one amendment) recorded: ``design_power``,
    or ``plan`` as claims.json spelt it before version 7; {} when it records none."""
    return dict(registration.get("design_power") or registration.get("plan") or {})


def check_graph(graph: Mapping) -> Mapping:
    """``graph`` if it is a valid graph over this registry's hypotheses; ConfigError naming what
    is wrong otherwise (weights summing above 1, an edge to an unknown hypothesis, ...)."""
    bad = graphical.check(graph, {hypothesis(cid, s) for cid in REGISTRY for s in SIDES}) \
        if isinstance(graph, Mapping) else ["not a mapping"]
    if bad:
        raise ConfigError("claims.json registration: its graph " + "; ".join(bad))
    return graph


def data_needed(se: float, delta: float, alpha: float, power: float = 0.80,
                var_problems: float = 0.0, df: float = math.inf) -> dict | None:
    """About how many times the data a test needs for ``power`` at the smallest effect of
    interest, on the same t distribution as ``metrics.power_at`` (df = the test's own; the
    df more data would bring are not counted: slightly conservative). The variance that power
    needs is V* = (delta / (t_{1-alpha, df} + t_{power, df}))^2; the test's se^2 = V_R + V_P
    splits into runs (seeds) and problems (``metrics.contrast``), and scaling the runs by x
    leaves V_R / x + V_P. So
        both (runs and problems x times):  se^2 / V*
        runs alone:                        V_R / (V* - V_P)    (None, never, when V_P >= V*)
        problems alone:                    V_P / (V* - V_R)    (None, never, when V_R >= V*)
    Returns {"both", "runs", "problems"} ("problems" only where V_P > 0: not for a run-level
    test), or None without a usable se. (None, not inf: claims.json has no infinity.)"""
    from scipy.stats import t as student_t

    if not se or not math.isfinite(se) or delta <= 0:
        return None
    dof = df if df and math.isfinite(df) else math.inf
    z = float(student_t.isf(alpha, dof) + student_t.ppf(power, dof)) if math.isfinite(dof) else \
        NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(power)
    target, total = (delta / z) ** 2, se * se
    v_p = min(max(float(var_problems or 0.0), 0.0), total)
    v_r = total - v_p

    def alone(v_this: float, v_other: float) -> float | None:
        return v_this / (target - v_other) if target > v_other else None

    return {"both": total / target, "runs": alone(v_r, v_p)} | ({"problems": alone(v_p, v_r)} if v_p > 0 else {})


def _need_text(need: dict | None, units: str) -> str:
    """", 80% needs about 3.8x the seeds" (a run-level test); with problems in the variance,
    what each of runs and problems alone would need, e.g. ", 80% needs about 7.8x the seeds
    and problems together (the seeds alone: never; the problems alone: 12x)"."""
    if need is None:
        return ""
    times = lambda x: "never" if x is None else f"{x:.2g}x" if x <= MAX_DATA_NEEDED else \
        f"more than {MAX_DATA_NEEDED}x"
    if "problems" not in need:
        return f", 80% needs about {times(need['both'])} the {units}"
    return (f", 80% needs about {times(need['both'])} the {units} and problems together (the {units} alone: "
            f"{times(need['runs'])}; the problems alone: {times(need['problems'])})")


def decide_all(measures: dict[int, dict], s: Mapping, graph: Mapping | None = None) -> dict[int, dict]:
    """Verdicts of the registry's claims from their rules' answers (see module docstring); fills
    each measured answer's p_yes, p_no and ci where its rule did not set them. ``graph``: the
    graph registered with the sweep (default ``registered_graph()``); every yes and no p-value
    (untested: 1) goes through it once (``graphical.adjusted``): yes when the yes hypothesis is
    rejected at alpha, no when the no hypothesis is and the yes is not. A claim with ``needs``
    whose needs are not all yes is unclear (the graph gives it no weight before then)."""
    alpha = float(s["alpha"])
    graph = graph or registered_graph()
    tested = {cid: m_ for cid, m_ in measures.items() if "unclear" not in m_}
    for cid, m_ in tested.items():
        c = REGISTRY[cid]
        m_.setdefault("p_yes", p_above(m_["effect"], m_["se"], m_["df"], c.boundary))
        m_.setdefault("p_no", p_above(-m_["effect"], m_["se"], m_["df"], -c.no_bound))
        m_.setdefault("ci", t_interval(m_["effect"], m_["se"], m_["df"], float(s["level"])))
    p = {hypothesis(cid, side): (tested[cid][f"p_{side}"] if cid in tested else 1.0)
         for cid in REGISTRY for side in SIDES}
    adj = graphical.adjusted(p, graph)
    said_yes = {cid for cid in REGISTRY if adj[hypothesis(cid, "yes")] <= alpha}
    out = {}
    for cid, c in sorted(REGISTRY.items()):
        m_ = measures[cid]
        row = {"verdict": "unclear", "unclear": m_.get("unclear"), "why": m_["why"]}
        failed = [n for n in c.needs if n not in said_yes]
        if cid in tested:
            delta, se, df = m_.get("power_at", (c.sesoi, m_["se"], m_["df"]))
            yes, no = adj[hypothesis(cid, "yes")], adj[hypothesis(cid, "no")]
            level = _start_level(graph, cid, alpha)
            row.update(p_yes_adj=yes, p_no_adj=no, level=level,
                       power=power_at(delta, se, df, level) if level > 0 else 0.0,
                       data_needed=data_needed(se, delta, level, float(s["power"]),
                                               m_.get("var_problems", 0.0) if "power_at" not in m_ else 0.0, df)
                       if level > 0 else None)
            if failed:
                pass                                    # gated: decided below
            elif yes <= alpha:
                row["verdict"] = "yes"
                row["why"] += f"; yes (graph p {yes:.2g})"
                if no <= alpha:
                    row["why"] += f", but below {'its criterion' if c.complement else 'the smallest effect of interest'} {c.no_bound:+g}"
            elif no <= alpha:
                row["verdict"] = "no"
                row["why"] += f"; no: below {c.no_bound:+g} (graph p {no:.2g})"
            else:
                row["unclear"] = "power"
                row["why"] = (f"unclear: power {row['power']:.0%} at {c.boundary + c.sesoi:+g} (level {level:.2g})"
                              + _need_text(row["data_needed"], c.units)
                              + f" (graph p yes {yes:.2g}, no {no:.2g}); {m_['why']}")
        if failed:                                      # preconditions: claim 1 first
            kinds = {out[n]["unclear"] or "data" for n in failed}
            kind = "power" if kinds == {"power"} else "data"
            row.update(verdict="unclear", unclear=kind, why=(
                f"unclear: {kind}: ES did not learn (claim " + ", ".join(f"{n} is {out[n]['verdict']}" for n in failed)
                + f"); {m_['why']}"))
        out[cid] = row
    for row in out.values():
        if row["verdict"] == "unclear" and not row["why"].startswith("unclear"):
            row["why"] = f"unclear: {row['unclear']}: {row['why']}"
    return out


# ---------------------------------------------------------------------------------------
# one registered look
def design_of(runs: list[tuple[str, Any]]) -> dict:
    """A sweep's design from its runs' (run id, RunPlan): the run ids (they hash the whole
    result-defining config) and, readable, per algorithm its models, seeds, populations and
    iterations, and the evaluation's problems, samples and test draw."""
    per: dict = {}
    for _, rc in runs:
        a = per.setdefault(rc.algo, {"models": set(), "seeds": set(), "pops": set(), "iterations": set()})
        a["models"].add(str(rc.model.get("name")))
        a["seeds"].add(int(rc.seed))
        a["pops"].add(int(rc.pop) if rc.pop is not None else None)
        a["iterations"].add(int(rc.iterations))
    one = lambda xs: sorted(xs, key=lambda x: (x is None, str(x) if not isinstance(x, int) else x))
    return {"run_ids": sorted({rid for rid, _ in runs}),
            "algos": {a: {k: one(v) for k, v in d.items()} for a, d in sorted(per.items())},
            "problems": one({rc.eval.problems for _, rc in runs}), "samples": one({rc.eval.samples for _, rc in runs}),
            "test_draw": one({(rc.task or {}).get("test_draw") for _, rc in runs})}


def register(sweep_dir, runs: list[tuple[str, Any]], now: str | None = None) -> dict:
    """Write the sweep's design into ``<sweep_dir>/claims.json`` as its registration, before any
    run starts (the sweeper calls this). The first registration stays; a later sweep of the
    same name with another design is recorded as an amendment (``after_look``: verdicts had been
    computed before it, so a verdict on the amended design is a second look at the same draw).
    Each records its design's hash (``stored.design_hash``). A corrupt claims.json
    (``stored.read``) is kept aside under a new name, said in one warning, and the design
    registered afresh, labelled so (``replaces_corrupt``: its verdicts read as exploratory).
    A design whose data another look already read (the looks ledger, ``ledger.earlier``) is
    registered too, with one warning: its verdicts will be exploratory.
    The design's power per claim (``sweep.design_power``: what ``python -m esopt.design`` gave
    the preset) is recorded beside the design (``design_power``: {claim id: power}, ``plan`` in
    registrations before version 7: :func:`design_power`; the report's "planned power"). Returns
    the registration."""
    import time

    path = Path(sweep_dir) / "claims.json"
    replaced = None
    try:
        old = stored.read(path)
    except ConfigError as e:
        kept = stored.set_aside(path)
        replaced = {"file": kept.name, "why": str(e)}
        print(f"esopt: warning: {e}; kept as {kept}; the design is registered afresh (its verdicts exploratory: "
              "the earlier looks are unknown)", file=sys.stderr)
        old = {}
    reg = old.get("registration")
    design = design_of(runs)
    planned = next((dict(rc.sweep.design_power) for _, rc in runs if getattr(rc.sweep, "design_power", None)), None)
    powers = {str(cid): float(pw) for cid, pw in (planned or {}).items()}
    stamp = now or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if reg is None:       # verdicts computed before any registration (claims.json before version 5): too late
        graph = check_graph(registered_graph())
        reg = {"design": design, "design_sha256": stored.design_hash(design), "hypotheses": hypothesis_count(),
               "graph": graph, "graph_sha256": stored.design_hash(graph),
               "claims": sorted(REGISTRY), "at": stamp, "amendments": [],
               "after_look": bool(old.get("claims") or old.get("looks"))}
        if replaced:
            reg["replaces_corrupt"] = replaced
        if powers:
            reg["design_power"] = powers
    elif current_design(reg) == design:
        return reg
    else:
        reg.setdefault("amendments", []).append({"design": design, "design_sha256": stored.design_hash(design),
                                                 "at": stamp, "after_look": bool(old.get("looks")),
                                                 **({"design_power": powers} if powers else {})})
    with atomic_path(path) as tmp:      # fsynced, then renamed: a crash leaves the old file or the new
        tmp.write_text(json.dumps({**old, "version": VERSION, "registration": reg, "looks": old.get("looks") or []},
                                  indent=1))
    seen = ledger.earlier(ledger.data_of_configs(runs), ledger.look_id(reg, []))
    if seen:                # said before any run: the verdicts of this design will be exploratory
        print(f"esopt: warning: {_seen_why(seen)[0]}; use seeds or a test draw no look has read "
              "(sweeps/README.md, \"Confirmatory runs\")", file=sys.stderr)
    return reg


def _seen_why(seen: list | None) -> list[str]:
    """The looks ledger's earlier looks at these data (``ledger.earlier``), in words."""
    return [f"these data were looked at before ({e.get('data')}: {e.get('shared')} of them, sweep {e.get('sweep')} "
            f"at {e.get('at')}): a later verdict on them is exploratory, wherever the sweep lives"
            for e in (seen or [])[:1]]


def judge_look(reg: Mapping | None, records: list[dict], looks: list | None = None, seen: list | None = None) -> dict:
    """Whether verdicts on ``records`` are confirmatory: {"confirmatory", "why"}. Exploratory when
    the sweep has no registration, when its completed runs differ from the registered ones (a
    run missing, failed or added), when the registered claims differ from the registry's (a claim
    added or removed changes the family the verdicts are decided in), or when the registration
    was changed after verdicts had been computed (a second look at the same draw): an amendment
    after a look, a design or graph that no longer matches the hash recorded when it was written
    (``design_sha256``, ``graph_sha256``) or by an earlier look (``looks``: edited by hand), or an
    earlier look at the same runs that was not confirmatory. A graph registered before it was
    hashed passes only where it is this code's own (``registered_graph``). And whatever the
    folder: when another look already read these data (``seen``: the looks ledger's entries,
    ``ledger.earlier``: the same task, split, test draw and seeds). Also a registration written afresh over a corrupt claims.json (its earlier
    looks are unknown)."""
    if not reg:
        return {"confirmatory": False, "why": "; ".join([
            "no registration: the design was not written into claims.json before the runs (python -m esopt.sweep "
            "writes it for a claims sweep)", *_seen_why(seen)])}
    why = []
    want = set(current_design(reg)["run_ids"])
    have = {str(r["run_id"]) for r in records if r.get("status", "completed") == "completed"}
    if want != have:
        why.append(f"the data differ from the registration ({len(want - have)} registered runs missing or not "
                   f"completed, {len(have - want)} runs not registered)")
    if reg.get("claims") is not None and sorted(reg["claims"]) != sorted(REGISTRY):
        now, then = set(REGISTRY), set(reg["claims"])
        why.append("the registered claims differ from this code's (" + "; ".join(
            f"{what}: {', '.join(map(str, sorted(ids)))}" for what, ids in (("added since", now - then),
                                                                          ("removed since", then - now)) if ids) + ")")
    if not reg.get("graph"):
        why.append("registered before the graph over the hypotheses (Holm over all of them): the verdicts, decided by the "
                   "graph, are not the registered procedure's")
    if any(a.get("after_look") for a in reg.get("amendments") or []):
        why.append("the design was changed after verdicts had been computed: a second look at the same draw")
    if reg.get("after_look"):
        why.append("registered after verdicts had been computed on this sweep: not a first look")
    if reg.get("replaces_corrupt"):
        why.append(f"registered afresh over a corrupt claims.json (kept as {reg['replaces_corrupt'].get('file')}): "
                   "the earlier looks are unknown")
    written = [reg, *(reg.get("amendments") or [])]
    if any(d.get("design_sha256") not in (None, stored.design_hash(d["design"])) for d in written):
        why.append("the registration was edited by hand: its design no longer matches the hash recorded when it was "
                   "written")
    graph = reg.get("graph")
    if graph and reg.get("graph_sha256") != stored.design_hash(graph) and \
            (reg.get("graph_sha256") is not None or graph != registered_graph()):
        why.append("the registration's graph was edited by hand: it no longer matches the hash recorded when it was "
                   "written")
    in_force = stored.design_hash(current_design(reg))
    runs = zlib.crc32(" ".join(sorted(have)).encode())
    if any(x.get("design_sha256") not in (None, in_force) for x in looks or []):
        why.append("the registered design differs from the one an earlier look judged: changed after a look")
    elif graph and any(x.get("graph_sha256") not in (None, stored.design_hash(graph)) for x in looks or []):
        why.append("the registered graph differs from the one an earlier look judged: changed after a look")
    elif any(x.get("runs_hash") == runs and x.get("confirmatory") is False for x in looks or []):
        why.append("an earlier look at these runs was exploratory: the registration was changed after it")
    why += _seen_why(seen)
    return {"confirmatory": not why, "why": "; ".join(why) or "the registered design, first look"}


def compute(records: list[dict], trend: Mapping | None = None, registration: Mapping | None = None,
            looks: list | None = None, seen: list | None = None, **settings: Any) -> dict:
    """claims.json's content from run records (see module docstring). ``trend`` (trend.json, the
    aggregator's fit) is reported beside claim 7. ``registration`` (claims.json's, written by
    ``register`` before the runs) fixes the family's graph and decides whether the verdicts
    are confirmatory (``judge_look``); ``looks``: the earlier computations, to which this one is
    appended; ``seen``: the looks ledger's other looks at these data (``ledger.earlier``). Unknown settings (e.g. the aggregator's n_boot, seed) are recorded and ignored."""
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if v is not None}}
    cell = select_cell(records)
    A = cell["algos"]
    done = [r for r in records if r.get("status", "completed") == "completed"]
    sweep = {"cell": A, "es": [r for r in done if kind(r.get("algo")) == "es" and arm(r) != ES_ANCHOR]}
    measures = {cid: c.rule(c.select(sweep), s) for cid, c in sorted(REGISTRY.items())}
    n_hyp = hypotheses(registration) or hypothesis_count()
    graph = check_graph(registration["graph"]) if (registration or {}).get("graph") else registered_graph()
    decided = decide_all(measures, s, graph)
    look = judge_look(registration, records, looks, seen)
    out = []
    for cid, c in sorted(REGISTRY.items()):
        m, d = measures[cid], decided[cid]
        tested = "unclear" not in m
        details = dict(m.get("details") or {})
        if c.shows_trend and trend:
            details["trend_json"] = {k: trend.get(k) for k in ("slope", "slope_ci", "reading", "method")}
        out.append({
            "id": cid, "key": c.key, "claim": c.text, "source": c.source, "estimand": c.estimand, "boundary": c.boundary,
            "sesoi": c.sesoi, "statistic": c.statistic, "variance": c.variance,
            "decision": (f"yes if the registered graph rejects theta <= {c.boundary:+g}; no if it rejects theta >= "
                         f"{c.no_bound:+g}; family-wise alpha {s['alpha']:g} over the {n_hyp} yes and "
                         "no hypotheses of the registered claims (untested: p = 1; weights at the start: yes "
                         f"{graph['weights'].get(hypothesis(cid, 'yes'), 0.0):.3g}, no "
                         f"{graph['weights'].get(hypothesis(cid, 'no'), 0.0):.3g})"
                         + ("; needs claim " + ", ".join(map(str, c.needs)) + " yes" if c.needs else "")),
            "effect": float(m["effect"]) if tested else None, "ci": m.get("ci") if tested else None,
            "se": float(m["se"]) if tested else None,
            "df": float(m["df"]) if tested and math.isfinite(m["df"]) else None,
            "p_yes": m.get("p_yes"), "p_no": m.get("p_no"), "p_yes_adj": d.get("p_yes_adj"),
            "p_no_adj": d.get("p_no_adj"), "level": d.get("level"), "power": d.get("power"), "data_needed": d.get("data_needed"),
            "reproduced": d["verdict"], "unclear": d["unclear"] if d["verdict"] == "unclear" else None,
            "exploratory": not look["confirmatory"],
            "reason": d["why"], "n": m.get("n") or {}, "details": details})
    tokens = {a: float(np.mean([_num(r.get("tokens_generated")) or 0 for r in rs])) for a, rs in A.items()
              if trains(a)}
    ref = tokens.get("es") or None
    runs_key = sorted(str(r["run_id"]) for r in done)
    this_look = {"runs": len(runs_key), "runs_hash": zlib.crc32(" ".join(runs_key).encode()),
                 "confirmatory": look["confirmatory"],  # and the design it judged (tamper-evident: judge_look)
                 "design_sha256": stored.design_hash(current_design(registration)) if registration else None,
                 "graph_sha256": stored.design_hash(graph) if (registration or {}).get("graph") else None}
    summary = {v: [c["id"] for c in out if c["reproduced"] == v] for v in VERDICTS}
    return {
        "version": VERSION,
        "settings": s,
        "hypotheses": n_hyp,
        "graph": graph,
        "registration": dict(registration) if registration else None,
        "look": look,
        "looks": [*(looks or []), this_look],
        "cell": {"model": cell["model"], "settings": cell["settings"],
                 "runs": {a: [r["run_id"] for r in rs] for a, rs in A.items()},
                 "seeds": {a: [r.get("seed") for r in rs] for a, rs in A.items()},
                 "test_draw": sorted({r.get("test_draw") for rs in A.values() for r in rs}, key=str),
                 "tokens_generated_mean": tokens,
                 "tokens_vs_es": {a: (t / ref if ref else None) for a, t in tokens.items()},
                 # how the ES runs perturbed: low-rank ones are EGGROLL, not the study's full-rank ES
                 "es_noise": sorted({str(r["es_noise"]) for r in sweep["es"] if r.get("es_noise")})},
        "summary": summary,
        "headline": summary if look["confirmatory"] else {v: [] for v in VERDICTS},
        "claims": out,
    }


# ---------------------------------------------------------------------------------------
# reading a sweep
def records_from_tables(runs, curves) -> list[dict]:
    """Runs-table rows (completed) as records, with js_succ, p_pop, reward_mean = means of ES train
    lines, and ``pass1_curve`` = [[iteration, Pass@1]] of the run's eval lines (claim 6's check
    that GRPO has saturated)."""
    import pandas as pd

    if runs is None or not len(runs):
        return []
    done = runs[runs["status"] == "completed"]
    js = pd.DataFrame()
    if curves is not None and len(curves) and "js_succ" in curves:
        tl = curves[(curves.get("kind") == "train") & curves["js_succ"].notna()]
        if "phase" in tl:
            tl = tl[tl["phase"].map(kind) == "es"]
        cols = [c for c in ("js_succ", "p_pop", "reward_mean") if c in tl]
        grouped = tl.groupby("run_id")[cols]
        js = grouped.mean()
        # the variance of each run-level mean over its train lines (claim 4's reliability)
        spread = grouped.var(ddof=1) / grouped.count()
        for c in ("js_succ", "p_pop"):
            if c in spread:
                js[f"{c}_var"] = spread[c]
    curve = {}
    if curves is not None and len(curves) and {"kind", "iteration", "pass@1"} <= set(curves.columns):
        ev = curves[(curves["kind"] == "eval") & curves["pass@1"].notna()]
        for rid, g in ev.groupby("run_id"):
            curve[rid] = [[float(i), float(v)] for i, v in zip(g["iteration"], g["pass@1"])]
    recs = []
    for row in done.to_dict("records"):
        rec = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        ks = [int(c[len("final_pass@"):]) for c in row if c.startswith("final_pass@") and c[11:].isdigit()
              and _num(row[c]) is not None]
        rec["k_max"] = max(ks) if ks else None
        rec["pass1_curve"] = curve.get(rec["run_id"])
        if rec["run_id"] in js.index:
            for c in js.columns:
                rec[c] = _num(js.loc[rec["run_id"], c])
        recs.append(rec)
    return recs


def _obj(v) -> dict:
    return v if isinstance(v, dict) else {}


def _count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _counts(v) -> list | None:
    """A summary's per-problem correct counts, or None when they are not a list of counts."""
    return v if isinstance(v, list) and all(_count(x) is not None for x in v) else None


def attach_details(records: list[dict], runs_dir: Path) -> None:
    """sparsity.json for the ES runs that have it, then the per-problem lists (summary.json) and
    the ES member scoring of every ES run and of the comparison cell's runs (the cell is chosen
    after sparsity is known: it breaks ties between runs)."""
    for r in records:
        if r.get("algo") == "es" and r.get("anchor_decay") is None:   # the arm (es or es_anchor) first
            try:
                s = json.loads((Path(runs_dir) / str(r["run_id"]) / "summary.json").read_text())
                r["anchor_decay"] = (((s.get("config") or {}).get("es") or {}).get("anchor_decay"))
            except (OSError, ValueError, AttributeError):
                pass
        sp = Path(runs_dir) / str(r["run_id"]) / "sparsity.json"
        if kind(r.get("algo")) == "es" and sp.exists():
            try:
                r["sparsity"] = json.loads(sp.read_text())
            except (OSError, ValueError):
                pass
    cell = select_cell(records)
    wanted_ids = {id(r) for rs in cell["algos"].values() for r in rs}
    for r in records:
        if id(r) not in wanted_ids and kind(r.get("algo")) != "es":
            continue
        try:
            s = json.loads((Path(runs_dir) / str(r["run_id"]) / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        s = _obj(s)  # a summary edited into another shape: what is not as written is left unread
        base, final, config = _obj(s.get("base")), _obj(s.get("final")), _obj(s.get("config"))
        r["samples"] = _count(final.get("samples")) or _count(base.get("samples"))
        r["base_counts"], r["final_counts"] = _counts(base.get("correct_counts")), _counts(final.get("correct_counts"))
        es_cfg = _obj(config.get("es"))
        r["es_temperature"], r["es_samples"] = es_cfg.get("temperature"), es_cfg.get("samples")
        r["test_draw"] = _obj(config.get("task")).get("test_draw")
        r["host"] = _obj(s.get("worker")).get("host")                 # the machine (claim 4's covariate)
        r["task_source"] = _obj(config.get("task")).get("source")     # the data a look reads (ledger.datum)
        r["eval_split"] = final.get("split") or _obj(config.get("eval")).get("split") or "test"
        ev = _obj(config.get("eval"))
        if ev.get("probes"):   # one probe evaluation's sampling noise (simulate.probe_eval_var)
            r["probe_samples"], r["probe_problems"] = ev.get("probe_samples"), ev.get("probe_problems")


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
    before = stored.read(sweep_dir / "claims.json")  # a corrupt one: one ConfigError line, never overwritten
    data = ledger.data_of(records)                   # the looks ledger: these data read before, anywhere?
    look = ledger.look_id(before.get("registration"), records)
    out = compute(records, trend, before.get("registration"), before.get("looks"), ledger.earlier(data, look),
                  **settings)
    ledger.remember(data, look, str(sweep_dir), data)
    out["sweep_dir"] = str(sweep_dir)
    return out


def wanted(agg) -> bool:
    """Whether the aggregator computes claims: a paper preset sweep, or ES runs beside others."""
    runs = agg.runs
    return claims_sweep(Path(agg.sweep_dir).name, set(runs["algo"].dropna()) if len(runs) else set())


def claims_sweep(name: str, algos: set) -> bool:
    """A sweep whose claims are decided (and registered before it runs): a paper preset, or an ES
    kind algorithm beside another registered algorithm."""
    es = {a for a in algos if kind(a) == "es"}
    return name.startswith("paper") or (bool(es) and bool((set(algos) & set(ALGORITHMS)) - es))


def _fmt(v, ci=None) -> str:
    s = "n/a" if v is None else f"{v:+.3g}"
    return s + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "")


def look_line(result: dict) -> str:
    """"confirmatory: ..." or "exploratory: ..." (claims.json's look; none before version 5)."""
    look = result.get("look") or {"confirmatory": False, "why": "no registration (claims.json before version 5)"}
    return f"{'confirmatory' if look['confirmatory'] else 'exploratory'}: {look['why']}"


def table_lines(result: dict) -> list[str]:
    """Plain-text table: id, claim key, effect [95% CI], power at the smallest effect, verdict,
    reason; the first line says whether the verdicts are confirmatory or exploratory."""
    low = [x for x in (result.get("cell") or {}).get("es_noise") or [] if x.startswith("EGGROLL")]
    lines = [f"# {look_line(result)}",
             *([f"# low-rank ES runs ({'; '.join(low)}): verdicts about ES are EGGROLL's, not full-rank ES's"]
               if low else []),
             f"{'#':<2} {'claim':<18} {'effect [95% CI]':<28} {'power':<6} {'verdict':<8} reason"]
    for c in result["claims"]:
        pw = "n/a" if c.get("power") is None else f"{c['power']:.0%}"
        lines.append(f"{c['id']:<2} {c['key']:<18} {_fmt(c['effect'], c['ci']):<28} {pw:<6} "
                     f"{c['reproduced']:<8} {c['reason']}")
    return lines
