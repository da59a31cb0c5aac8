"""The study's seven claims, each a pre-registered test decided on a sweep, with the family-wise
error across them controlled.

    python -m esopt.aggregate <sweep-dir> --claims     (prints the table, writes claims.json)
    claims(sweep_dir | Aggregate | records, trend=None) -> dict         (the aggregator calls this)

The claims, their estimands, boundaries, smallest effects of interest, statistics and variance
models are the registry in ``esopt.study.claim_rules`` (one entry per claim); the statistics
are ``esopt.core.metrics`` (contrast, p_above, power_at, holm, t_interval); the page's section
is ``esopt.study.report.claims_html``. This module reads the sweep, chooses the comparison
cell, runs every claim and decides:

    p_yes = P(H0: theta <= b), p_no = P(H0: theta >= b + delta)   (one-sided, per claim)
    yes   = Holm's step-down rejects p_yes among the claims tested, at family-wise alpha
    no    = Holm rejects p_no among the claims tested (and not yes)
    a claim with ``needs`` (3, 6: about what ES's training gives) is unclear unless claim 1 is yes
    unclear: "power": power_at(delta, se, df, alpha / m) is the test's power at the smallest
             effect of interest (m = claims tested; Holm's first step), and
             data_needed = ((z_{1-alpha/m} + z_0.8) se / delta)^2 is about how many times the
             test's units (the claim's ``units``: seeds; claim 4 ES runs; claim 7 model sizes)
             80% power needs; where problems share the variance (claims 1, 3, 6), also what
             the units alone and the problems alone would need (``data_needed``); "data":
             what the sweep lacks, named.
The calibration of these rules (false yes, false no, power, by simulation through this code):
``python benchmarks/bench_claims_calibration.py`` (docs/results/claims_calibration.md).

claims.json records the draw the verdicts come from: the cell's seeds and its runs' test split
(``cell.test_draw``: countdown's ``task.test_draw``, 0 the standard split, d >= 1 a fresh
confirmatory draw; null for a task without the knob).

Input: one record per completed run (the aggregator's runs-table row: run_id, algo, model,
params, pop, seed, iterations, sigma, lr, base_/final_ metrics; plus ``js_succ`` / ``p_pop`` /
``reward_mean`` = the means of the run's ES train lines), and the per-problem lists read from
the run directory: ``samples``, ``base_counts``, ``final_counts`` (correct samples per problem,
summary.json), ``sparsity`` (sparsity.json) and the ES member scoring (``es_temperature``,
``es_samples``).

The comparison cell: the model with the most algorithms among none/es/grpo/grpo_es/es_grpo
(ties: most runs, then name). Per algorithm one setting is used: ES the (pop, iterations) of
the sequences' runs when there are any, else its setting with the most seeds (ties: larger pop,
then more iterations); GRPO the setting with ES's iterations when there is one, else the most
seeds; one run per seed (a duplicate differing only in its analyses: the one with sparsity.json).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any, Mapping

import numpy as np

from esopt.algorithms import ALGORITHMS, family, trains
from esopt.core.metrics import holm, p_above, power_at, t_interval
from esopt.study import fit, tables
from esopt.study.claim_rules import CLAIMS, REGISTRY, SEQUENCES, VERDICTS, _num, one_per_seed

__all__ = ["ALGOS", "CLAIMS", "DEFAULTS", "REGISTRY", "SEQUENCES", "VERDICTS", "attach_details", "claims",
           "compute", "decide_all", "records_from_tables", "select_cell", "table_lines", "wanted"]
ALGOS = tuple(ALGORITHMS)
DEFAULTS = {"alpha": 0.05, "level": 0.95, "power": 0.80, "k": 8, "samples_per_k": 4, "min_runs": 3,
            "keep": 0.22, "keep_share": 0.90, "min_sizes": 5}
MAX_DATA_NEEDED = 100


# ---------------------------------------------------------------------------------------
# the comparison cell
def _setting(r: Mapping) -> tuple:
    return tuple(str(_num(r.get(k))) for k in ("pop", "iterations", "sigma", "lr"))


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
    return {"model": model, "algos": {a: one_per_seed(by_algo[a][s]) for a, s in chosen.items()},
            "settings": {a: dict(zip(("pop", "iterations", "sigma", "lr"), s)) for a, s in chosen.items()}}


# ---------------------------------------------------------------------------------------
# the decision
def data_needed(se: float, delta: float, alpha: float, power: float = 0.80,
                var_problems: float = 0.0) -> dict | None:
    """About how many times the data a test needs for ``power`` at the smallest effect of
    interest. The variance that power needs is V* = (delta / (z_{1-alpha} + z_power))^2; the
    test's se^2 = V_R + V_P splits into runs (seeds) and problems (``metrics.contrast``), and
    scaling the runs by x leaves V_R / x + V_P. So
        both (runs and problems x times):  se^2 / V*
        runs alone:                        V_R / (V* - V_P)    (None, never, when V_P >= V*)
        problems alone:                    V_P / (V* - V_R)    (None, never, when V_R >= V*)
    Returns {"both", "runs", "problems"} ("problems" only where V_P > 0: not for a run-level
    test), or None without a usable se. (None, not inf: claims.json has no infinity.)"""
    if not se or not math.isfinite(se) or delta <= 0:
        return None
    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(power)
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


def decide_all(measures: dict[int, dict], s: Mapping) -> dict[int, dict]:
    """Verdicts of the registry's claims from their rules' answers (see module docstring); fills
    each measured answer's p_yes, p_no and ci where its rule did not set them."""
    alpha = float(s["alpha"])
    tested = {cid: m for cid, m in measures.items() if "unclear" not in m}
    for cid, m in tested.items():
        c = REGISTRY[cid]
        m.setdefault("p_yes", p_above(m["effect"], m["se"], m["df"], c.boundary))
        m.setdefault("p_no", p_above(-m["effect"], m["se"], m["df"], -(c.boundary + c.sesoi)))
        m.setdefault("ci", t_interval(m["effect"], m["se"], m["df"], float(s["level"])))
    yes = holm({cid: m["p_yes"] for cid, m in tested.items()}, alpha)
    no = holm({cid: m["p_no"] for cid, m in tested.items()}, alpha)
    m_tests = max(len(tested), 1)
    out = {}
    for cid, c in sorted(REGISTRY.items()):
        m = measures[cid]
        row = {"verdict": "unclear", "unclear": m.get("unclear"), "why": m["why"]}
        if cid in tested:
            delta, se, df = m.get("power_at", (c.sesoi, m["se"], m["df"]))
            row.update(p_yes_holm=yes[cid][1], p_no_holm=no[cid][1],
                       power=power_at(delta, se, df, alpha / m_tests),
                       data_needed=data_needed(se, delta, alpha / m_tests, float(s["power"]),
                                               m.get("var_problems", 0.0) if "power_at" not in m else 0.0))
            if yes[cid][0]:
                row["verdict"] = "yes"
                row["why"] += f"; yes (Holm p {yes[cid][1]:.2g})"
                if no[cid][0]:
                    row["why"] += f", but below the smallest effect of interest {c.boundary + c.sesoi:+g}"
            elif no[cid][0]:
                row["verdict"] = "no"
                row["why"] += f"; no: below {c.boundary + c.sesoi:+g} (Holm p {no[cid][1]:.2g})"
            else:
                row["unclear"] = "power"
                row["why"] = (f"unclear: power {row['power']:.0%} at {c.boundary + c.sesoi:+g}"
                              + _need_text(row["data_needed"], c.units)
                              + f" (Holm p yes {yes[cid][1]:.2g}, no {no[cid][1]:.2g}); {m['why']}")
        out[cid] = row
    for cid, c in REGISTRY.items():                    # preconditions: claim 1 first
        failed = [n for n in c.needs if out[n]["verdict"] != "yes"]
        if failed:
            kinds = {out[n]["unclear"] or "data" for n in failed}
            kind = "power" if kinds == {"power"} else "data"
            was = "" if out[cid]["verdict"] == "unclear" else f" (would be {out[cid]['verdict']})"
            out[cid].update(verdict="unclear", unclear=kind, why=(
                f"unclear: {kind}: ES did not learn (claim " + ", ".join(f"{n} is {out[n]['verdict']}" for n in failed)
                + f"){was}; {measures[cid]['why']}"))
    for row in out.values():
        if row["verdict"] == "unclear" and not row["why"].startswith("unclear"):
            row["why"] = f"unclear: {row['unclear']}: {row['why']}"
    return out


def compute(records: list[dict], trend: Mapping | None = None, **settings: Any) -> dict:
    """claims.json's content from run records (see module docstring). ``trend`` (trend.json, the
    aggregator's fit) is reported beside claim 7. Unknown settings (e.g. the aggregator's
    n_boot, seed) are recorded and ignored."""
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if v is not None}}
    cell = select_cell(records)
    A = cell["algos"]
    done = [r for r in records if r.get("status", "completed") == "completed"]
    sweep = {"cell": A, "es": [r for r in done if family(r.get("algo")) == "es"]}
    measures = {cid: c.rule(c.select(sweep), s) for cid, c in sorted(REGISTRY.items())}
    decided = decide_all(measures, s)
    out = []
    for cid, c in sorted(REGISTRY.items()):
        m, d = measures[cid], decided[cid]
        tested = "unclear" not in m
        details = dict(m.get("details") or {})
        if cid == 7 and trend:
            details["trend_json"] = {k: trend.get(k) for k in ("slope", "slope_ci", "verdict", "method")}
        out.append({
            "id": cid, "key": c.key, "claim": c.text, "estimand": c.estimand, "boundary": c.boundary,
            "sesoi": c.sesoi, "statistic": c.statistic, "variance": c.variance,
            "decision": (f"yes if Holm rejects theta <= {c.boundary:+g}; no if Holm rejects theta >= "
                         f"{c.boundary + c.sesoi:+g}; family-wise alpha {s['alpha']:g} over the claims tested"
                         + ("; needs claim " + ", ".join(map(str, c.needs)) + " yes" if c.needs else "")),
            "effect": float(m["effect"]) if tested else None, "ci": m.get("ci") if tested else None,
            "se": float(m["se"]) if tested else None,
            "df": float(m["df"]) if tested and math.isfinite(m["df"]) else None,
            "p_yes": m.get("p_yes"), "p_no": m.get("p_no"), "p_yes_holm": d.get("p_yes_holm"),
            "p_no_holm": d.get("p_no_holm"), "power": d.get("power"), "data_needed": d.get("data_needed"),
            "reproduced": d["verdict"], "unclear": d["unclear"] if d["verdict"] == "unclear" else None,
            "reason": d["why"], "n": m.get("n") or {}, "details": details})
    tokens = {a: float(np.mean([_num(r.get("tokens_generated")) or 0 for r in rs])) for a, rs in A.items()
              if trains(a)}
    ref = tokens.get("es") or None
    return {
        "version": 4,  # 4: data_needed is {"both", "runs"[, "problems"]}, was a number
        "settings": s,
        "cell": {"model": cell["model"], "settings": cell["settings"],
                 "runs": {a: [r["run_id"] for r in rs] for a, rs in A.items()},
                 "seeds": {a: [r.get("seed") for r in rs] for a, rs in A.items()},
                 "test_draw": sorted({r.get("test_draw") for rs in A.values() for r in rs}, key=str),
                 "tokens_generated_mean": tokens,
                 "tokens_vs_es": {a: (t / ref if ref else None) for a, t in tokens.items()}},
        "summary": {v: [c["id"] for c in out if c["reproduced"] == v] for v in VERDICTS},
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
            tl = tl[tl["phase"].map(family) == "es"]
        js = tl.groupby("run_id")[[c for c in ("js_succ", "p_pop", "reward_mean") if c in tl]].mean()
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


def attach_details(records: list[dict], runs_dir: Path) -> None:
    """sparsity.json for the ES runs that have it, then the per-problem lists (summary.json) and
    the ES member scoring of every ES run and of the comparison cell's runs (the cell is chosen
    after sparsity is known: it breaks ties between runs)."""
    for r in records:
        sp = Path(runs_dir) / str(r["run_id"]) / "sparsity.json"
        if family(r.get("algo")) == "es" and sp.exists():
            try:
                r["sparsity"] = json.loads(sp.read_text())
            except (OSError, ValueError):
                pass
    cell = select_cell(records)
    wanted_ids = {id(r) for rs in cell["algos"].values() for r in rs}
    for r in records:
        if id(r) not in wanted_ids and family(r.get("algo")) != "es":
            continue
        try:
            s = json.loads((Path(runs_dir) / str(r["run_id"]) / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        base, final = s.get("base") or {}, s.get("final") or {}
        r["samples"] = final.get("samples") or base.get("samples")
        r["base_counts"], r["final_counts"] = base.get("correct_counts"), final.get("correct_counts")
        es_cfg = ((s.get("config") or {}).get("es") or {})
        r["es_temperature"], r["es_samples"] = es_cfg.get("temperature"), es_cfg.get("samples")
        r["test_draw"] = (((s.get("config") or {}).get("task") or {}).get("test_draw"))


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
    es = {a for a in algos if family(a) == "es"}
    return name.startswith("paper") or (bool(es) and bool((algos & set(ALGORITHMS)) - es))


def _fmt(v, ci=None) -> str:
    s = "n/a" if v is None else f"{v:+.3g}"
    return s + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "")


def table_lines(result: dict) -> list[str]:
    """Plain-text table: id, claim key, effect [95% CI], power at the smallest effect, verdict, reason."""
    lines = [f"{'#':<2} {'claim':<18} {'effect [95% CI]':<28} {'power':<6} {'verdict':<8} reason"]
    for c in result["claims"]:
        pw = "n/a" if c.get("power") is None else f"{c['power']:.0%}"
        lines.append(f"{c['id']:<2} {c['key']:<18} {_fmt(c['effect'], c['ci']):<28} {pw:<6} "
                     f"{c['reproduced']:<8} {c['reason']}")
    return lines
