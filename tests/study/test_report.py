"""esopt.study.report: the page holds each figure with the right data (read back from the HTML)."""

import json
import re

import numpy as np
import pytest

from helpers import write_synthetic_sweep

from esopt.core.metrics import pass_at_k
from esopt.study.report import page as report
from esopt.study.report.aggregate import aggregate

MODELS = {"tiny-xs": 1e6, "tiny-s": 4e6, "tiny-m": 1.6e7, "tiny-l": 6.4e7}
STATUSES = {"es-tiny-s-p8-s0": "failed", "es-tiny-s-p16-s1": "pruned", "es-tiny-m-p8-s2": "running"}


def write_optuna_journal(path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    study = optuna.create_study(study_name="pop_vs_size-tiny-s", storage=storage, direction="maximize")
    dist = {"pop": optuna.distributions.IntDistribution(8, 64, log=True),
            "sigma": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    rng = np.random.default_rng(0)
    for i in range(6):
        t = study.ask(dist)
        for step in range(3):
            t.report(0.1 * step + 0.01 * i, step)
        study.tell(t, 0.3 + 0.01 * i + 0.01 * rng.random())


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("rep") / "sweep"
    write_synthetic_sweep(root, models=MODELS, pops=(8, 16, 32, 64), seeds=(0, 1, 2),
                                    algos=("es", "grpo", "none", "es_grpo"), iterations=4, eval_every=2,
                                    problems=20, samples=16, statuses=STATUSES)
    (root / "runs" / "broken").mkdir()
    (root / "runs" / "broken" / "summary.json").write_text('{"status": "comp')
    write_optuna_journal(root / "optuna.journal")
    agg = aggregate(root, bootstrap=200)
    return (root / "report.html").read_text(), agg, root


def test_page_is_self_contained(page):
    html, _, _ = page
    assert "plotly.js v" in html                                   # embedded once, not fetched
    assert html.count("plotly.js v") == 1 or html.count("* plotly.js v") == 1
    outside = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)
    assert "<script src" not in html.split("plotly.js v")[0] and "http" not in outside
    assert len(re.findall(r"<script(?: [^>]*)?>", html)) == 2 + len(report.figure_ids(html))
    assert report.figure_ids(html)[:7] == ["fig-passk", "fig-curves", "fig-entropy", "fig-parcoords",
                                           "fig-heatmap", "fig-trend", "fig-status"]   # the sweep's results first
    for fid in report.figure_ids(html):
        assert f'<div id="{fid}" class="figure">' in html


def test_parcoords_dimensions_hold_the_runs(page):
    html, agg, _ = page
    tr = report.figure_data(html, "fig-parcoords")["data"][0]
    assert tr["type"] == "parcoords"
    dims = {d["label"]: np.asarray(d["values"], float) for d in tr["dimensions"]}
    assert list(dims) == ["log10 params", "pop", "sigma", "lr", "seed", "final_pass@1"]
    runs = agg.runs.set_index("run_id").loc[tr["meta"]["run_ids"]]
    assert len(runs) == agg.runs["final_pass@1"].notna().sum()
    np.testing.assert_allclose(dims["log10 params"], np.log10(runs["params"].to_numpy(float)))
    np.testing.assert_allclose(dims["pop"], runs["pop"].to_numpy(float))
    np.testing.assert_allclose(dims["final_pass@1"], runs["final_pass@1"].to_numpy(float))
    np.testing.assert_allclose(tr["line"]["color"], runs["final_pass@1"].to_numpy(float))


def test_heatmap_is_the_mean_over_seeds_per_model_and_pop(page):
    html, agg, _ = page
    hm = report.figure_data(html, "fig-heatmap")["data"][0]
    runs = agg.runs[(agg.runs["algo"] == "es") & (agg.runs["status"] == "completed")]
    want = runs.groupby(["model", "pop"])["final_pass@1"].mean()
    assert hm["meta"]["models"] == ["tiny-xs", "tiny-s", "tiny-m", "tiny-l"]       # by size
    assert hm["x"] == ["8", "16", "32", "64"]
    z = np.asarray(hm["z"], float)
    for i, m in enumerate(hm["meta"]["models"]):
        for j, p in enumerate(hm["meta"]["pops"]):
            assert z[i, j] == pytest.approx(want[(m, p)])


def test_trend_figure_matches_trend_json(page):
    html, _, root = page
    tr = json.loads((root / "trend.json").read_text())
    fig = report.figure_data(html, "fig-trend")
    byk = {t["meta"].get("method", t["meta"]["kind"]): t for t in fig["data"]}
    assert byk["continuous"]["y"] == pytest.approx([m["pop_star"]["continuous"] for m in tr["models"]])
    assert byk["efficient"]["y"] == pytest.approx([m["pop_star"]["efficient"] for m in tr["models"]])
    assert byk["fit"]["meta"]["slope"] == pytest.approx(tr["slope"])
    # the line is exp(intercept) * params^slope; the band surrounds it
    x, y = np.asarray(byk["fit"]["x"]), np.asarray(byk["fit"]["y"])
    np.testing.assert_allclose(y, np.exp(tr["intercept"]) * x ** tr["slope"], rtol=1e-9)
    assert fig["layout"]["xaxis"]["type"] == "log" and fig["layout"]["yaxis"]["type"] == "log"
    band = np.asarray(byk["band"]["y"], float)
    n = len(x)
    assert np.all(band[n:][::-1] <= y + 1e-9) and np.all(band[:n] >= y - 1e-9)    # hi then lo


def test_passk_curves_per_model_and_algorithm(page):
    html, agg, root = page
    fig = report.figure_data(html, "fig-passk")
    means = [t for t in fig["data"] if t["meta"]["kind"] == "mean"]
    assert {(t["meta"]["facet"], t["meta"]["algo"]) for t in means} == {
        (m, a) for m in MODELS for a in ("base", "es", "grpo", "es_grpo")}
    assert fig["layout"]["xaxis"]["type"] == "log"
    buttons = fig["layout"]["updatemenus"][0]["buttons"]
    assert [b["label"] for b in buttons] == list(MODELS)
    for t in means:
        assert t["x"] == list(range(1, 17))                                          # k = 1..samples
        y = np.asarray(t["y"])
        assert np.all(np.diff(y) >= -1e-12)                                           # coverage grows
    # the es curve of tiny-m: mean over its seeds of per-problem pass@k from correct_counts
    t = next(t for t in means if t["meta"]["facet"] == "tiny-m" and t["meta"]["algo"] == "es")
    counts = [json.loads((root / "runs" / r / "summary.json").read_text())["final"]["correct_counts"]
              for r in t["meta"]["run_ids"]]
    want1 = np.mean([np.mean(np.asarray(c) / 16) for c in counts])
    want4 = np.mean([pass_at_k(16, np.asarray(c), 4).mean() for c in counts])
    assert t["y"][0] == pytest.approx(want1) and t["y"][3] == pytest.approx(want4)
    band = next(b for b in fig["data"] if b["meta"]["kind"] == "band" and b["meta"]["facet"] == "tiny-m"
                and b["meta"]["algo"] == "es")
    hi, lo = np.asarray(band["y"][:16]), np.asarray(band["y"][16:])[::-1]
    assert np.all(lo <= np.asarray(t["y"]) + 1e-12) and np.all(np.asarray(t["y"]) <= hi + 1e-12)
    # the es configuration shown is the best pop by mean final pass@1
    es = agg.runs[(agg.runs["model"] == "tiny-m") & (agg.runs["algo"] == "es") & (agg.runs["status"] == "completed")]
    best_pop = es.groupby("pop")["final_pass@1"].mean().idxmax()
    assert set(es.loc[es["pop"] == best_pop, "run_id"]) == set(t["meta"]["run_ids"])


def test_learning_curves_against_iteration_and_tokens(page):
    html, agg, _ = page
    fig = report.figure_data(html, "fig-curves")
    seen = {(t["meta"]["metric"], t["meta"]["x"]) for t in fig["data"]}
    assert seen == {(m, x) for m in ("reward_mean", "pass@1", "entropy", "js_succ")
                    for x in ("iteration", "tokens_total")}
    labels = [b["label"] for b in fig["layout"]["updatemenus"][0]["buttons"]]
    assert labels[0] == "reward vs iteration" and "held-out pass@1 vs generated tokens" in labels
    t = next(t for t in fig["data"] if t["meta"]["metric"] == "pass@1" and t["meta"]["x"] == "tokens_total")
    c = agg.curves[(agg.curves["run_id"] == t["meta"]["run_id"]) & (agg.curves["kind"] == "eval")]
    np.testing.assert_allclose(t["x"], c["tokens_total"].to_numpy(float))
    np.testing.assert_allclose(t["y"], c["pass@1"].to_numpy(float))
    visible = [t.get("visible", True) for t in fig["data"]]
    first = [t["meta"]["metric"] == "reward_mean" and t["meta"]["x"] == "iteration" for t in fig["data"]]
    assert visible == first                                                  # menu entry 1 shown


def test_entropy_es_against_grpo(page):
    html, agg, _ = page
    fig = report.figure_data(html, "fig-entropy")
    means = {(t["meta"]["facet"], t["meta"]["algo"]): t for t in fig["data"] if t["meta"]["kind"] == "mean"}
    assert {a for _, a in means} == {"es", "grpo", "es_grpo"}
    g, e = means[("tiny-s", "grpo")], means[("tiny-s", "es")]
    assert g["y"][-1] < g["y"][0] - 0.2                  # planted: GRPO entropy falls
    assert abs(e["y"][-1] - e["y"][0]) < 0.1             # ES stays flat
    ev = agg.curves[(agg.curves["kind"] == "eval") & agg.curves["run_id"].isin(g["meta"]["run_ids"])]
    assert g["y"] == pytest.approx(ev.groupby("iteration")["entropy"].mean().tolist())


def test_entropy_figure_prefers_the_out_of_domain_set(page):
    """Eval lines with ood_entropy (eval.ood_task): the figure plots those, flat here while the
    eval split's entropy falls for GRPO; without them (null control) it plots the eval split's."""
    _, agg, _ = page
    curves = agg.curves.copy()
    fig, why = report.fig_entropy(agg.runs, curves, agg.metric)
    assert fig is not None, why
    title = lambda f: str(f["layout"]["title"].get("text", f["layout"]["title"]))  # noqa: E731
    assert title(fig).startswith("Held-out token entropy")
    curves["ood_entropy"] = np.where(curves["kind"] == "eval", 1.5, np.nan)
    fig, _ = report.fig_entropy(agg.runs, curves, agg.metric)
    assert title(fig).startswith("Out-of-domain token entropy")
    means = [t for t in fig["data"] if t["meta"]["kind"] == "mean"]
    assert means and all(np.allclose(t["y"], 1.5) for t in means)


def test_status_counts_problem_runs_and_skipped(page):
    html, agg, _ = page
    fig = report.figure_data(html, "fig-status")
    got = {(x, t["meta"]["status"]): y for t in fig["data"] for x, y in zip(t["x"], t["y"])}
    assert got[("es", "failed")] == 1 and got[("es", "pruned")] == 1 and got[("es", "running")] == 1
    assert got[("grpo", "completed")] == 12
    table = re.search(r'<table id="table-problems">(.*?)</table>', html, re.S).group(1)
    for rid, status in STATUSES.items():
        assert re.search(rf"<td>{rid}</td><td>{status}</td>", table)
    assert "RuntimeError: boom" in table
    assert "(3: " in html and "1 failed" in html
    skipped = re.search(r'<table id="table-skipped">(.*?)</table>', html, re.S).group(1)
    assert "<td>broken</td><td>corrupt summary.json" in skipped


def test_optuna_plots_and_summary(page):
    html, _, _ = page
    ids = report.figure_ids(html)
    assert "fig-optuna-0-intermediate" in ids and "fig-optuna-0-importance" in ids
    inter = report.figure_data(html, "fig-optuna-0-intermediate")
    assert len(inter["data"]) == 6 and list(inter["data"][0]["y"]) == pytest.approx([0.0, 0.1, 0.2])
    imp = report.figure_data(html, "fig-optuna-0-importance")
    assert set(imp["data"][0]["y"]) == {"pop", "sigma"}
    summary = re.search(r'<section id="summary">(.*?)</section>', html, re.S).group(1)
    assert "120 runs" in summary and "1 unreadable run directories skipped" in summary
    assert "no grpo_es runs" in summary and "4 model sizes" in summary
    assert re.search(r"<b>(falls|rises|flat)</b>", summary) and "the verdict is claim 7" in summary


def test_small_sweep_without_optuna_says_what_is_missing(tmp_path):
    root = tmp_path / "s2"
    write_synthetic_sweep(root, models={"a": 1e6, "b": 1e7}, pops=(8, 16), seeds=(0,),
                                    iterations=2, eval_every=2, problems=10, samples=4)
    agg = aggregate(root, bootstrap=100)
    html = (root / "report.html").read_text()
    summary = re.search(r'<section id="summary">(.*?)</section>', html, re.S).group(1)
    assert "only 2 model size(s): trend not meaningful" in summary
    assert "<b>too few sizes</b>" in summary
    assert "no Optuna study (optuna.journal not found)" in summary
    assert "no grpo, grpo_es, es_grpo runs" in summary
    assert agg.trend["reading"] == "too few sizes"
    assert "fig-optuna-0-intermediate" not in report.figure_ids(html)


def test_every_figure_passes_plotly_validation(page):
    """The figures are written as plain dicts (fast); Plotly's own schema must accept them."""
    import plotly.graph_objects as go

    html, _, _ = page
    for fid in report.figure_ids(html):
        fig = json.loads(re.search(rf'data-figure="{fid}">(.*?)</script>', html, re.S).group(1))
        go.Figure(fig)                                        # raises on an invalid attribute


def test_titles_are_objects_for_plotly_js_3(page):
    """plotly.js >= 3 ignores string titles: every title in our figures is {"text": ...}."""
    html, _, _ = page

    def titles(obj, path=""):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k == "title":
                    yield path, v
                yield from titles(v, f"{path}.{k}")
        elif isinstance(obj, list):
            for v in obj:
                yield from titles(v, path)

    for fid in report.figure_ids(html)[:7]:
        fig = json.loads(re.search(rf'data-figure="{fid}">(.*?)</script>', html, re.S).group(1))
        found = list(titles(fig))
        assert found, fid
        for path, t in found:
            assert isinstance(t, dict) and "text" in t, (fid, path, t)
