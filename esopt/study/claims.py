"""The study's seven claims, each tested on a sweep: rule, effect, 95% interval, power, verdict.

    python -m esopt.aggregate <sweep-dir> --claims     (prints the table, writes claims.json)
    claims(sweep_dir | Aggregate | records, trend=None) -> dict         (the aggregator calls this)

Input: one record per completed run (the aggregator's runs-table row: run_id, algo, model,
params, pop, seed, iterations, sigma, lr, base_/final_ metrics; plus ``js_succ`` / ``p_pop`` =
the mean of the run's ES train lines), and the per-problem lists read from the run directory:
``samples``, ``base_counts``, ``final_counts`` (correct samples per problem, summary.json),
``sparsity`` (sparsity.json) and the ES member scoring (``es_temperature``, ``es_samples``).

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
paired); the part the run resampling adds is widened by sqrt(R / (R - 1)) (the one rule,
``esopt.core.metrics.widen``); the statistic is recomputed from the resampled cell means.

Power. Every claim tests its effect against a boundary b (0, or a tolerance) and states its
minimum detectable effect mde = (z_0.975 + z_0.80) * se = 2.80 * se, se = the bootstrap standard
error of the effect: the distance from b that the cell would detect with 80% power at the 5%
level. A verdict needs |effect - b| >= mde; closer than that it is "unclear: underpowered", and
the claim states ``data_needed`` = (mde / |effect - b|)^2: about how many times its cell's data
(seeds x problems) the observed effect would need to be decided.

Guards. A claim about ES's coverage, entropy, diversity or combination, or about the population
ES needs, is "unclear: ES did not learn" unless ES's own Pass@1 gain (final - base, paired) has
an interval above 0 in the runs it is about: nothing trained can never say "yes".

Claims and their rules (tol = 0.01 absolute, band = 10% relative, see DEFAULTS):
 1. ES raises Pass@1: effect = mean_{r,p} (final - base) over the cell's ES runs; b = 0.
    yes: interval above 0; no: interval below 0.
 2. Entropy: rel_r = (H_final - H_base) / H_base per run (token-mean entropy of the sampled
    completions: on the out-of-domain set, ``ood_entropy``, when every ES and GRPO run of the
    cell has it (eval.ood_task, the study's GPQA role), else on the eval split). GRPO part: mean rel over GRPO runs, b = 0, falls if the interval is
    below 0. ES part: mean rel over ES runs, inside the band if its interval lies in (-band,
    band), outside if it lies entirely beyond it. Bootstrap over runs (>= 3 each).
    yes: GRPO falls and ES inside; no: GRPO's interval above 0 or ES outside; guard: ES learned.
 3. Coverage: effect = Pass@K(ES) - Pass@K(GRPO) (cell means), b = -tol. yes: interval above
    -tol (ES at least GRPO's within tol); no: below -tol; details: Pass@1(GRPO) - Pass@1(ES).
    Guard: ES learned.
 4. Diversity and coverage, without the population-size confound: partial Spearman rho, over
    ES runs, between the run's mean js_succ (nats) and its Pass@K gain (final - base), with
    the (model, pop) cell removed (ranks centred within each cell, so only runs of the same
    model and population are compared); the same for p_pop. Bootstrap over runs within cells.
    b = 0. yes: both intervals above 0; no: both below 0. claims.json says how members were
    scored (greedy: p_i in {0, 1}; sampled: es.samples completions at es.temperature, p_i a
    probability as in the study's definition). Guard: ES learned (pooled over those runs).
 5. Functional sparsity (sparsity.json, global mode at keep 0.22, ES runs): share = sum_r (mean_p
    pruned - mean_p base) / sum_r (mean_p trained - mean_p base) (Pass@1, pooled over runs);
    bootstrap over runs and problems; b = 0.9. yes: interval above 0.9; no: below 0.9; unclear
    when the gain's interval includes 0 (no gain to keep).
 6. A sequence combines both strengths, tested in both orders (grpo_es, es_grpo): for each,
    d1 = Pass@1(seq) - max(Pass@1(grpo), Pass@1(es)), dK = the same at the largest K, effect =
    min(d1, dK) (its worse margin), b = -d with d = tol: the sequence's Pass@1 within d of the
    better single algorithm's and its Pass@K at least the better single's minus d. Paired
    intervals at 1 - 0.05/2 per order (Bonferroni over the two orders). yes: some order's
    interval above -d; no: every tested order's interval below -d. Guard: ES learned.
 7. Larger models need smaller populations, as the study reads it: per model size, N* = the
    smallest population whose final Pass@1 (cell mean at the fixed iteration budget) is within
    tol of the best population's; slope of ln N* on ln params (least squares) over >= 5 sizes;
    bootstrap over seeds and problems (both resampled, N* and the slope refitted per
    replicate). b = 0. yes: interval below 0; no: above 0. The per-size table (N*, its
    interval, the cell means) is in the details and on the page. Guard: ES learned in these runs.

Missing data (e.g. no GRPO runs) gives "unclear" with a reason starting "missing data".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from esopt.algorithms import ALGORITHMS
from esopt.study import fit, tables
from esopt.study.claim_rules import (CLAIMS, SEQUENCES, VERDICTS, Z_POWER, _claim, _fmt, _num, _one_per_seed,
                                     claim_coverage, claim_diversity, claim_entropy, claim_es_pass1,
                                     claim_pop_vs_size, claim_sequence, claim_sparsity, data_needed, decide,
                                     entropy_columns, es_gain, mde, partial_spearman)

__all__ = ["ALGOS", "CLAIMS", "DEFAULTS", "SEQUENCES", "VERDICTS", "Z_POWER", "attach_details", "claim_coverage",
           "claim_diversity", "claim_entropy", "claim_es_pass1", "claim_pop_vs_size", "claim_sequence",
           "claim_sparsity", "claims", "compute", "data_needed", "decide", "entropy_columns", "es_gain",
           "html_section", "mde", "partial_spearman", "records_from_tables", "select_cell", "table_lines",
           "wanted", "_claim"]
ALGOS = tuple(ALGORITHMS)
DEFAULTS = {"n_boot": 1000, "seed": 0, "ci_level": 0.95, "tolerance": 0.01, "band": 0.10,
            "keep": 0.22, "keep_share": 0.90, "min_sizes": 5}


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
    return {"model": model, "algos": {a: _one_per_seed(by_algo[a][s]) for a, s in chosen.items()},
            "settings": {a: dict(zip(("pop", "iterations", "sigma", "lr"), s)) for a, s in chosen.items()}}


# ---------------------------------------------------------------------------------------
# all seven
def compute(records: list[dict], trend: Mapping | None = None, **settings: Any) -> dict:
    """claims.json's content from run records (see module docstring). ``trend`` (trend.json, the
    aggregator's fit) is reported beside claim 7, which computes its own N* from the runs."""
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if v is not None}}
    kw = dict(n_boot=int(s["n_boot"]), seed=int(s["seed"]), level=float(s["ci_level"]),
              tolerance=float(s["tolerance"]), band=float(s["band"]), keep=float(s["keep"]),
              keep_share=float(s["keep_share"]))
    cell = select_cell(records)
    A = cell["algos"]
    done = [r for r in records if r.get("status", "completed") == "completed"]
    es_all = [r for r in done if r.get("algo") == "es"]
    es_sp = [r for r in es_all if r.get("sparsity")]
    gain = es_gain(A.get("es", []), n_boot=kw["n_boot"], seed=kw["seed"], level=kw["level"]) if A.get("es") else None
    out = [
        claim_es_pass1(A.get("es", []), **kw),
        claim_entropy(A.get("es", []), A.get("grpo", []), gain=gain, **kw),
        claim_coverage(A.get("es", []), A.get("grpo", []), gain=gain, **kw),
        claim_diversity(es_all, **kw),
        claim_sparsity(es_sp, **kw),
        claim_sequence(A.get("es", []), A.get("grpo", []), A.get("grpo_es", []), A.get("es_grpo", []),
                       gain=gain, **kw),
        claim_pop_vs_size(es_all, min_sizes=int(s["min_sizes"]), **kw),
    ]
    if trend:
        out[6]["details"]["trend_json"] = {k: trend.get(k) for k in ("slope", "slope_ci", "verdict", "method")}
    tokens = {a: float(np.mean([_num(r.get("tokens_generated")) or 0 for r in rs])) for a, rs in A.items()
              if a != "none"}
    ref = tokens.get("es") or None
    return {
        "version": 2,
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
    """sparsity.json for the ES runs that have it, then the per-problem lists (summary.json) and
    the ES member scoring of every ES run and of the comparison cell's runs (the cell is chosen
    after sparsity is known: it breaks ties between runs)."""
    for r in records:
        sp = Path(runs_dir) / str(r["run_id"]) / "sparsity.json"
        if r.get("algo") == "es" and sp.exists():
            try:
                r["sparsity"] = json.loads(sp.read_text())
            except (OSError, ValueError):
                pass
    cell = select_cell(records)
    wanted_ids = {id(r) for rs in cell["algos"].values() for r in rs}
    for r in records:
        if id(r) not in wanted_ids and r.get("algo") != "es":
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
            trend = fit.fit_runs(agg.runs, metric, n_boot=int(settings.get("n_boot") or DEFAULTS["n_boot"]),
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
    return name.startswith("paper") or ("es" in algos and bool((algos & set(ALGORITHMS)) - {"es"}))


def _mde_txt(c) -> str:
    return "n/a" if c.get("mde") is None else f"{c['mde']:.3g}"


def table_lines(result: dict) -> list[str]:
    """Plain-text table: id, claim key, effect [95% CI], minimum detectable effect, verdict, reason."""
    lines = [f"{'#':<2} {'claim':<18} {'effect [95% CI]':<28} {'mde':<7} {'verdict':<8} reason"]
    for c in result["claims"]:
        lines.append(f"{c['id']:<2} {c['key']:<18} {_fmt(c['effect'], c['ci']):<28} {_mde_txt(c):<7} "
                     f"{c['reproduced']:<8} {c['reason']}")
    return lines


def html_section(result: dict) -> str:
    """``<section id="claims">``: one row per claim (claim, rule, effect [95% CI], power, n,
    verdict, reason), then claim 7's per-size table. Every string is HTML-escaped."""
    import html

    def cell(v) -> str:
        return html.escape("" if v is None else str(v))

    colors = {"yes": "#1a7f37", "no": "#b42318", "unclear": "#8a6d00"}
    rows = []
    for c in result["claims"]:
        n = ", ".join(f"{k} {v}" for k, v in (c.get("n") or {}).items())
        b = c.get("boundary")
        rows.append(
            f'<tr id="claim-{c["id"]}"><td>{c["id"]}</td><td>{cell(c["claim"])}</td>'
            f'<td><small>{cell(c["definition"])}</small></td>'
            f'<td>{cell(_fmt(c["effect"], c["ci"]))}<br><small>{cell(c["measure"])}</small></td>'
            f'<td>{cell(_mde_txt(c))}<br><small>boundary {cell("n/a" if b is None else f"{b:+.3g}")}</small></td>'
            f'<td>{cell(n)}</td>'
            f'<td style="color:{colors.get(c["reproduced"], "#222")}"><b>{cell(c["reproduced"])}</b></td>'
            f'<td>{cell(c["reason"])}</td></tr>')
    sizes = ""
    per_size = next((c["details"].get("per_size") for c in result["claims"] if c["id"] == 7), None)
    if per_size:
        body = ""
        for t in per_size:
            ci = t.get("n_star_ci")
            pops = ", ".join(f"N={p}: {v:.3f} ({k} seeds)" for p, v, k in zip(t["pops"], t["pass@1"], t["seeds"]))
            body += (f"<tr><td>{cell(t['model'])}</td><td>{cell(format(t['params'], ',.0f'))}</td>"
                     f"<td>{cell(format(t['n_star'], 'g'))}</td>"
                     f"<td>{cell('n/a' if not ci else f'[{ci[0]:g}, {ci[1]:g}]')}</td><td>{cell(pops)}</td></tr>")
        sizes = ('<h3>Claim 7 per model size</h3><table id="table-claim7"><thead><tr><th>model</th><th>params</th>'
                 '<th>N*</th><th>N* 95% CI</th><th>final Pass@1 per population</th></tr></thead>'
                 f'<tbody>{body}</tbody></table>')
    cellinfo = result.get("cell") or {}
    ratio = ", ".join(f"{a} {v:.2f}" for a, v in (cellinfo.get("tokens_vs_es") or {}).items() if v is not None)
    s = result.get("settings") or {}
    return (
        '<section id="claims"><h2>Claims of the study, tested on this sweep</h2>'
        f'<p>Comparison cell: model <b>{cell(cellinfo.get("model"))}</b>; generated training tokens relative '
        f'to ES: {cell(ratio or "-")}. 95% percentile bootstrap intervals ({cell(s.get("n_boot"))} resamples, '
        f'seed {cell(s.get("seed"))}) over problems (paired) and seeds; tolerance {cell(s.get("tolerance"))}, '
        f'entropy band +-{cell(s.get("band"))} relative. Power: mde is the smallest distance from the rule\'s '
        'boundary this sweep detects with 80% power (2.8 bootstrap standard errors); closer than that the '
        'verdict is "unclear: underpowered". Full definitions: claims.json, esopt/study/claims.py.</p>'
        '<table id="table-claims"><thead><tr><th>#</th><th>claim</th><th>rule</th><th>effect [95% CI]</th>'
        '<th>power (mde)</th><th>n</th><th>verdict</th><th>reason</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table>{sizes}</section>\n')
