"""One self-contained interactive page for a sweep (plotly.js embedded once; works offline).

Each figure is a ``<div id="fig-...">`` plus its Plotly JSON in
``<script type="application/json" class="figure-data" data-figure="fig-...">``; one script
at the end draws them all. :func:`figure_data` reads a figure's data back from a page (tests
and users; numpy arrays that Plotly stored as base64 ``bdata`` are decoded).

Top-down: the summary, then the sweep's own results (Pass@K, learning curves, entropy), then
the claims (:func:`claims_html`: one row each, the test's wording folded), then the rest. A plot
that cannot say anything at this grid (a one-cell heatmap, a one-size trend) is one sentence.
Figures (stable ids):
    fig-parcoords    parallel coordinates: log10 params, pop, sigma, lr, seed, the metric (brushable)
    fig-curves       learning curves per run: reward / held-out pass@1 / entropy / JS_succ,
                     against iteration or generated tokens (dropdown; legend toggles runs)
    fig-passk        Pass@K, k = 1..samples (log x), per model: base and each algorithm's best
                     configuration, mean over seeds with a 95% bootstrap band
    fig-entropy      held-out token entropy over training, per algorithm (ES against GRPO)
    fig-heatmap      the metric over (model, pop) for the fitted algorithm
    fig-trend        pop* against params on log-log axes, the fit and its 95% band
    fig-status       run counts by status and algorithm
    fig-pruning      why each pruned run was cut: its pruner's statistic at that step against
                     the threshold, the reference in the hover text (only when a run has it)
    fig-sparsity     share of the Pass@1 gain kept vs keep fraction, per algorithm and mode
                     (only when runs have sparsity.json, esopt.study.analyses)
    fig-drift / fig-drift-top   relative drift and top-1% update share by module type, per
                     algorithm (only when runs have drift.json)
    fig-optuna-<i>-intermediate / fig-optuna-<i>-importance   Optuna's own plots per study
Tables: table-samples (base against final completions of each best configuration's run,
esopt.study.report.samples), table-problems (pruned / failed / running runs), table-skipped (unreadable runs).
"""

from __future__ import annotations

import base64
import html as _html
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from esopt.algorithms import ALGORITHMS, trains
from esopt.core.store import jsonable
from esopt.study import fit
from esopt.study import tables
from esopt.study.report.analysis_figures import fig_drift, fig_sparsity
from esopt.study.claims import design_power, hypotheses, look_line
from esopt.study.claims.rules import SEED_PAPER
from esopt.study.report.figures import (best_groups, fig_curves, fig_entropy, fig_heatmap, fig_parcoords, fig_passk,
                                 fig_pruning, fig_status, fig_trend, optuna_figures)
from esopt.study.report.plotting import algo_key, fmt_params
from esopt.study.report.samples import samples_html

__all__ = ["best_groups", "build", "claims_html", "fig_curves", "fig_drift", "fig_entropy", "fig_heatmap",
           "fig_parcoords", "fig_passk", "fig_pruning", "fig_sparsity", "fig_status", "fig_trend", "figure_data",
           "figure_ids", "optuna_figures"]
TABLE_ROWS = 500         # rows a page table shows (the rest: runs.csv / aggregate.json)


def _esc(v) -> str:
    """Any value as HTML text: every string that reaches the page (model, task, sweep and
    algorithm names, statuses, errors, notes) comes from configs, data or errors and may hold
    markup; it goes through here (tables: :func:`_table`; figures: :func:`_figure_block`)."""
    return _html.escape(str(v), quote=True)


def _summary_lines(agg, trend: dict, notes: list[str]) -> list[str]:
    """The summary list's lines as HTML (every value escaped)."""
    runs = agg.runs
    counts = runs["status"].value_counts()
    lines = [f"{len(runs)} runs in {_esc(agg.sweep_dir)}: "
             + ", ".join(f"{int(v)} {_esc(k)}" for k, v in counts.items())
             + (f"; {len(agg.skipped)} unreadable run directories skipped" if agg.skipped else "") + "."]
    algos = runs["algo"].value_counts()
    models = runs.groupby("model")["params"].median().sort_values()
    pops = sorted(pd.to_numeric(runs.loc[runs["algo"].map(trains), "pop"], errors="coerce").dropna().unique())
    lines.append("Algorithms: " + ", ".join(f"{_esc(k)} ({v})" for k, v in algos.items())
                 + "; models: " + ", ".join(f"{_esc(m)} ({fmt_params(p)})" if pd.notna(p) else _esc(m)
                                           for m, p in models.items())
                 + "; populations: " + (", ".join(str(int(p)) for p in pops) or "-")
                 + f"; seeds: {runs['seed'].nunique()}; tasks: "
                 + f"{', '.join(_esc(t) for t in runs['task'].dropna().unique())}.")
    if trend.get("slope") is not None:
        ci = trend.get("slope_ci")
        lines.append(f"Trend ({_esc(trend['metric'])}, {_esc(trend['algo'])} runs, {trend['n_model_sizes']} model "
                     f"sizes, {trend['n_seeds']} seeds): log pop* = {trend['intercept']:.3g} + {trend['slope']:.3g} "
                     f"log params" + (f", slope 95% CI [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")
                     + f". The trend <b>{_esc(trend['reading'])}</b> ({_esc(trend['reading_reason'])}).")
    else:
        lines.append(f"Trend: <b>{_esc(trend['reading'])}</b> ({_esc(trend['reading_reason'])}).")
    missing = [a for a in sorted(ALGORITHMS, key=algo_key) if ALGORITHMS[a].kind and a not in algos]  # the study's
    if missing:
        notes = [f"no {', '.join(missing)} runs"] + notes
    if 0 < trend.get("n_model_sizes", 0) < 3:
        notes = [f"only {trend['n_model_sizes']} model size(s): trend not meaningful"] + notes
    if notes:
        lines.append("Missing or odd: " + "; ".join(_esc(n) for n in notes) + ".")
    return lines


def _table(rows: list[dict], cols: list[str], table_id: str, limit: int = TABLE_ROWS) -> str:
    head = "".join(f"<th>{_html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_html.escape(_cell(r.get(c)))}</td>" for c in cols) + "</tr>"
                   for r in rows[:limit])
    more = f"<p>... {len(rows) - limit} more (see runs.csv / aggregate.json)</p>" if len(rows) > limit else ""
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}'


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


PLOTLY_TAGS = ("<br>",)   # the markup esopt's own figure text uses (hover lines); kept as is
_PLOTLY_TAG = re.compile("(" + "|".join(map(re.escape, PLOTLY_TAGS)) + ")")


def plotly_text(obj):
    """Every string in a figure as Plotly text, never markup: Plotly renders ``<a href=...>``,
    ``<b>`` and friends in names, labels, titles and hover text (a live link from a model name),
    so ``&``, ``<`` and ``>`` become entities (which Plotly shows as the characters), except the
    :data:`PLOTLY_TAGS` esopt writes itself. Applied to every figure in one place,
    :func:`_figure_block`."""
    if isinstance(obj, str):
        return "".join(part if part in PLOTLY_TAGS else _html.escape(part, quote=False)
                       for part in _PLOTLY_TAG.split(obj))
    if isinstance(obj, dict):
        return {k: plotly_text(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plotly_text(v) for v in obj]
    return obj


def _figure_block(fig_id: str, title: str, fig) -> str:
    fig = json.loads(fig.to_json()) if isinstance(fig, go.Figure) else jsonable(fig)
    data = json.dumps(plotly_text(fig), separators=(",", ":"))
    # names and titles come from configs and data: as JSON escapes, no "<", ">" or "&" is left in
    # the page's text, so no string can end the script block or open a tag (JSON.parse restores them)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return (f'<section><h2>{_html.escape(title)}</h2><div id="{fig_id}" class="figure"></div>\n'
            f'<script type="application/json" class="figure-data" data-figure="{fig_id}">{data}</script></section>\n')


def low_rank_labels(runs) -> list[str]:
    """The distinct low-rank ES labels (``EGGROLL r=...``) among the runs table's ``es_noise``."""
    if runs is None or "es_noise" not in getattr(runs, "columns", ()):
        return []
    return sorted({str(v) for v in runs["es_noise"].dropna() if str(v).startswith("EGGROLL")})


def decide_text(c: dict) -> str:
    """What would decide a claim, in a few words: for "unclear: data" what the rule lacks, for
    "unclear: power" how much more it needs, else "decided" (the whole reason is in the test's
    fold)."""
    reason = str(c.get("reason") or "")
    if c.get("reproduced") != "unclear":
        return "decided"
    if c.get("unclear") == "power":
        m = re.search(r"\d+% needs [^(;]+", reason)
        return (m.group(0).strip() if m else reason.split(";")[0]).rstrip(", ")
    text = reason.split("unclear: data: ", 1)[-1]
    m = re.search(r"\((set [^)]*|config [^)]*)\)", text)
    return (m.group(1) if m else text.split(";")[0]).strip()


def claims_html(result: dict | None, low_rank: list[str] | None = None) -> str:
    """The claims section (claims.json, esopt.study.claims), after the sweep's own results: one
    line per claim (its number and words, verdict, effect [95% CI], what would decide it, the
    registered plan's power where the registration holds one, its source), the test's wording,
    power, n and reason folded in a ``<details>``; then claim 7's per-size table; empty without
    claims. Every string is HTML-escaped."""
    if not result:
        return ""

    def cell(v) -> str:
        return _html.escape("" if v is None else str(v))

    def fmt(v, ci=None) -> str:
        return ("n/a" if v is None else f"{v:+.3g}") + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "")

    colors = {"yes": "#1a7f37", "no": "#b42318", "unclear": "#8a6d00"}
    reg = result.get("registration") or {}
    planned = design_power((reg.get("amendments") or [reg])[-1])   # of the design registered last
    rows = []
    for c in result["claims"]:
        n = ", ".join(f"{k} {v}" for k, v in (c.get("n") or {}).items())
        pw = "n/a" if c.get("power") is None else f"{c['power']:.0%}"
        verdict = c["reproduced"] + (f": {c['unclear']}" if c.get("unclear") else "")
        if low_rank:  # computed on low-rank ES runs: EGGROLL's verdict, not the study's ES's
            verdict += f" (low-rank ES runs: {'; '.join(low_rank)})"
        bound = f"boundary {c['boundary']:+g}, smallest effect of interest {c['sesoi']:g}"
        design_p = planned.get(str(c["id"]), planned.get(c["id"]))
        rows.append(
            f'<tr id="claim-{c["id"]}"><td>{c["id"]}</td><td>{cell(c["claim"])}'
            f'<details><summary>test</summary><small>{cell(c["estimand"])}; {cell(c["statistic"])}; '
            f'{cell(c["variance"])}; {cell(c["decision"])}; {cell(bound)}; power at that effect {cell(pw)}; '
            f'n: {cell(n or "-")}. {cell(c["reason"])}</small></details></td>'
            f'<td style="color:{colors.get(c["reproduced"], "#222")}"><b>{cell(verdict)}</b></td>'
            f'<td>{cell(fmt(c["effect"], c["ci"]))}</td><td>{cell(decide_text(c))}</td>'
            f'<td>{cell("-" if design_p is None else format(float(design_p), ".0%"))}</td>'
            f'<td class="claim-source">{cell(c.get("source") or SEED_PAPER)}</td></tr>')
    sizes = ""
    per_size = next((c["details"].get("per_size") for c in result["claims"] if c["id"] == 7), None)
    if per_size:
        body = ""
        for t in per_size:
            pops = ", ".join(f"N={p}: {v:.3f} ({k} seeds)" for p, v, k in zip(t["pops"], t["pass@1"], t["seeds"]))
            body += (f"<tr><td>{cell(t['model'])}</td><td>{cell(format(t['params'], ',.0f'))}</td>"
                     f"<td>{cell(format(t['slope'], '+.4f'))}</td><td>{cell(pops)}</td></tr>")
        sizes = ('<h3>Claim 7 per model size</h3><table id="table-claim7"><thead><tr><th>model</th><th>params</th>'
                 '<th>Pass@1 per doubling of N</th><th>final Pass@1 per population</th></tr></thead>'
                 f'<tbody>{body}</tbody></table>')
    info = result.get("cell") or {}
    ratio = ", ".join(f"{a} {v:.2f}" for a, v in (info.get("tokens_vs_es") or {}).items() if v is not None)
    s = result.get("settings") or {}
    counts = {}
    for c in result["claims"]:
        counts[c["reproduced"]] = counts.get(c["reproduced"], 0) + 1
    return (
        '<section id="claims"><h2>Claims of the study and its rivals, tested on this sweep</h2>'
        f'<p id="claims-count">{len(result["claims"])} claims: '
        + ", ".join(f"{v} {cell(k)}" for k, v in counts.items())
        + f'; comparison cell: model <b>{cell(info.get("model"))}</b>.</p>'
        + (f'<p id="claims-low-rank"><b>The ES runs here include low-rank (EGGROLL) runs ({cell("; ".join(low_rank))}): '
           'verdicts involving ES are computed from them, not from the study\'s full-rank ES.</b></p>'
           if low_rank else '') +
        f'<p id="claims-look"><b>{cell(look_line(result))}</b></p>'
        '<table id="table-claims"><thead><tr><th>#</th><th>claim</th><th>verdict</th><th>effect [95% CI]</th>'
        '<th>what would decide it</th><th>planned power</th><th>source</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table>{sizes}'
        '<details id="claims-method"><summary>How the claims are tested</summary><p>'
        f'Generated training tokens relative to ES: {cell(ratio or "-")}. Each claim is a pre-registered '
        'one-sided test (t over seeds and problems, problems paired); yes and no are decided by the registered graph '
        f'(Bretz et al. 2009) over the yes and no hypotheses of every registered claim ({cell(hypotheses(result) or "all")} of '
        f'them, family-wise error {cell(s.get("alpha"))}); power is the test\'s power at the smallest effect of '
        'interest; "unclear: power" or "unclear: data" says which is missing; planned power is the registered '
        'design\'s (python -m esopt.design), where the registration holds one. Calibration: '
        'docs/results/claims_calibration.md. Definitions: claims.json, esopt/study/claims/rules.py. Claims 1-7 '
        f'are the seed paper\'s ({SEED_PAPER}); the later ones are its 2026 rivals\', each with its source, '
        'decided on the same runs in the same family.</p></details></section>\n')


def build(agg, sweep_dir: Path | None = None) -> str:
    """The whole page for an :class:`esopt.study.tables.Aggregate` (with its trend) as HTML text."""
    from plotly.offline import get_plotlyjs

    runs, curves, metric, trend = agg.runs, agg.curves, agg.metric, agg.trend
    if metric is None or trend is None:                    # a bare esopt.study.tables.load() result
        metric = metric or tables.metric_column("pass@1", runs.columns)
        trend = trend or fit.fit_runs(runs, metric)
    sweep_dir = Path(sweep_dir or agg.sweep_dir)
    try:
        runs_dir = tables.find_runs_dir(sweep_dir)
    except ValueError:
        runs_dir = None
    notes = list(agg.notes)
    groups = best_groups(runs, metric)
    blocks = []
    for fig_id, title, make in (
        ("fig-passk", "Pass@K curves", lambda: fig_passk(runs, metric, runs_dir, groups=groups)),
        ("fig-curves", "Learning curves", lambda: fig_curves(runs, curves, metric)),
        ("fig-entropy", "Held-out entropy over training: ES against GRPO", lambda: fig_entropy(runs, curves, metric, groups)),
        ("claims", None, None),
        ("fig-parcoords", "Hyperparameters (parallel coordinates)", lambda: fig_parcoords(runs, metric)),
        ("fig-heatmap", "Population vs model size: heatmap", lambda: fig_heatmap(trend)),
        ("fig-trend", "Population vs model size: trend fit", lambda: fig_trend(trend)),
        ("fig-status", "Run status", lambda: fig_status(runs)),
        ("fig-pruning", "Why runs were pruned", lambda: fig_pruning(runs)),
        ("fig-sparsity", "Functional sparsity of the updates", lambda: fig_sparsity(runs, runs_dir)),
        ("fig-drift", "Parameter drift by module type", lambda: fig_drift(runs, "relative")),
        ("fig-drift-top", "Largest 1% of updates by module type", lambda: fig_drift(runs, "top_share")),
    ):
        if make is None:                                   # the sweep's results first, then the claims
            blocks.append(claims_html(getattr(agg, "claims", None), low_rank_labels(runs)))
            continue
        fig, note = make()
        if fig is None and note is None:                   # optional figure without data: no section
            continue
        if fig is None:
            notes.append(note)
            blocks.append(f'<section><h2>{_html.escape(title)}</h2><p class="missing" id="{fig_id}-missing">'
                          f'{_html.escape(note)}</p></section>')
        else:
            blocks.append(_figure_block(fig_id, title, fig))
    unread: list = []
    completions = samples_html(runs, groups, runs_dir, unread)  # base against final, escaped
    notes += unread
    agg.notes.extend(n for n in unread if n not in agg.notes)  # aggregate.json and the command's lines too
    if completions:
        blocks.append(completions)
    problems = runs[runs["status"] != "completed"]
    last_it = curves.groupby("run_id")["iteration"].max() if "iteration" in curves else pd.Series(dtype=float)
    prow = [{**r, "last iteration": last_it.get(r["run_id"])} for r in
            problems[[c for c in ("run_id", "status", "algo", "model", "pop", "seed", "error") if c in problems]]
            .to_dict("records")]
    counts = problems["status"].value_counts().to_dict()
    blocks.append(f'<section><h2>Pruned, failed and running runs ({len(problems)}: '
                  + (", ".join(f"{v} {_esc(k)}" for k, v in counts.items()) or "none") + ")</h2>"
                  + _table(prow, ["run_id", "status", "algo", "model", "pop", "seed", "last iteration", "error"],
                           "table-problems") + "</section>")
    blocks.append(f"<section><h2>Unreadable run directories skipped ({len(agg.skipped)})</h2>"
                  + _table(agg.skipped, ["run_id", "reason"], "table-skipped") + "</section>")
    ofigs, onotes = optuna_figures(sweep_dir)
    notes += onotes
    for fig_id, title, fig in ofigs:
        blocks.append(_figure_block(fig_id, title, fig))
    summary = "".join(f"<li>{line}</li>" for line in _summary_lines(agg, trend, notes))
    title = f"esopt sweep report: {_html.escape(sweep_dir.name)}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }}
section {{ margin: 2em 0; }} .figure {{ width: 100%; height: 520px; }}
table {{ border-collapse: collapse; font-size: 0.85em; }} td, th {{ border: 1px solid #ccc; padding: 2px 6px; }}
details summary {{ cursor: pointer; color: #555; font-size: 0.9em; }}
.missing {{ color: #a33; }}
</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>{title}</h1>
<section id="summary"><h2>Summary</h2><ul>{summary}</ul>
<p>Files beside this page: runs.csv / runs.parquet (one row per run), curves.parquet (every metrics line),
trend.json (the fit), aggregate.json (skipped runs, notes).</p></section>
{''.join(blocks)}
<script type="text/javascript">
document.querySelectorAll('script.figure-data').forEach(function (el) {{
  var fig = JSON.parse(el.textContent);
  Plotly.newPlot(el.dataset.figure, fig.data, fig.layout || {{}}, {{responsive: true}});
}});
</script>
</body></html>
"""


# ---------------------------------------------------------------------------------------
# reading a page back
_DTYPES = {"f8": np.float64, "f4": np.float32, "i1": np.int8, "i2": np.int16, "i4": np.int32,
           "u1": np.uint8, "u2": np.uint16, "u4": np.uint32, "i8": np.int64, "u8": np.uint64}


def _decode(obj):
    if isinstance(obj, dict):
        if set(obj) >= {"dtype", "bdata"}:
            arr = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=_DTYPES[obj["dtype"]])
            return arr.reshape(obj["shape"]) if "shape" in obj and isinstance(obj["shape"], list) else (
                arr.reshape([int(s) for s in str(obj["shape"]).split(",")]) if "shape" in obj else arr)
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def figure_ids(page: str) -> list[str]:
    return re.findall(r'<script type="application/json" class="figure-data" data-figure="([^"]+)">', page)


def figure_data(page: str, fig_id: str) -> dict:
    """The Plotly figure (data + layout) embedded for ``fig_id`` in a page, arrays decoded."""
    m = re.search(rf'<script type="application/json" class="figure-data" data-figure="{re.escape(fig_id)}">'
                  r"(.*?)</script>", page, re.S)
    if not m:
        raise KeyError(f"no figure {fig_id!r} in the page (have: {', '.join(figure_ids(page))})")
    return _decode(json.loads(m.group(1)))
