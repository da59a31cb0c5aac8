"""The page builds for every kind of sweep, and nothing from configs, data or errors reaches it
as live markup (an HTML parser reads the page back)."""

import html as html_module
import json
import re
from html.parser import HTMLParser

import pytest

from helpers import cli, REPO, write_synthetic_sweep

from esopt.study.report import page as report
from esopt.study.report.aggregate import aggregate

MARKUP = "<img src=x onerror=alert(1)>"
SCRIPT_END = "</script><script>alert(2)</script>"


class Tags(HTMLParser):
    """Every start tag and attribute of a page; script and style bodies are raw text to an
    HTML parser, exactly as to a browser, so data that ended its script block shows up here."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.texts = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [a for a, _ in attrs]

    def handle_data(self, data):
        self.texts.append(data)


def test_markup_from_names_and_errors_is_escaped_everywhere(tmp_path):
    root = tmp_path / "<svg onload=alert(3)>"  # the sweep name (a directory name: no '/')
    model = f"{MARKUP}{SCRIPT_END}"            # a hub name or checkpoint folder name
    task = f'count"down{MARKUP}'
    write_synthetic_sweep(root, models={model: 1e6, "tiny-s": 4e6, "tiny-m": 1.6e7}, pops=(8, 16),
                          seeds=(0, 1), algos=("es", "grpo", "none"), iterations=2, eval_every=2,
                          problems=10, samples=4, task=task, error=f"ValueError: {SCRIPT_END}{MARKUP}",
                          statuses={f"es-{re.sub(r'[^A-Za-z0-9._-]', '_', model)}-p8-s0": "failed"})
    source = f"/data/{SCRIPT_END}{MARKUP}.jsonl"  # the task's data file, as run() records it
    for path in (root / "runs").glob("*/summary.json"):
        summary = json.loads(path.read_text())
        summary["config"]["task"] = {"name": task, "source": source}
        summary["inputs"] = {"task.source": {"path": source, "kind": "file", "size": 1, "sha256": "0" * 64}}
        path.write_text(json.dumps(summary))
    from test_report import write_optuna_journal

    write_optuna_journal(root / "optuna.journal")
    agg = aggregate(root, bootstrap=50)
    assert agg.runs["status"].eq("failed").sum() == 1
    html = (root / "report.html").read_text()

    for planted in (MARKUP, SCRIPT_END, "<svg onload", 'count"down', "</script><script>alert", source):
        assert planted not in html, planted
    parser = Tags()
    parser.feed(html)
    assert not {"img", "svg"} & set(parser.tags) and not [a for a in parser.attrs if a.startswith("on")]
    assert parser.tags.count("script") == 2 + len(report.figure_ids(html))  # no block ended early
    text = "".join(parser.texts)
    assert f"{MARKUP}{SCRIPT_END}" in text      # shown as text (summary, tables) ...
    assert f"ValueError: {SCRIPT_END}{MARKUP}" in text and "<svg onload=alert(3)>" in text
    # ... and as Plotly text in the figures: entities Plotly shows as the characters, no tag
    shown = html_module.escape(model, quote=False)
    fig = report.figure_data(html, "fig-heatmap")
    assert shown in fig["data"][0]["meta"]["models"]
    curves = report.figure_data(html, "fig-curves")
    assert any(t["name"].startswith(shown) for t in curves["data"])
    for fig_id in report.figure_ids(html):
        for text in strings(report.figure_data(html, fig_id)):
            assert "<" not in text.replace("<br>", "") and ">" not in text.replace("<br>", ""), (fig_id, text)


def strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)


def test_a_link_in_a_name_is_plotly_text_not_a_link(tmp_path):
    """Plotly renders ``<a href>`` in a trace name, label or hover text as a live link: a model
    or sweep name carrying one reaches every figure with its brackets as entities."""
    link = '<a href="http://example.invalid/">click</a>'
    root = tmp_path / "sweep"
    write_synthetic_sweep(root, models={f"m{link}": 1e6, "tiny-s": 4e6}, pops=(8, 16), seeds=(0,),
                          algos=("es", "grpo"), iterations=2, eval_every=2, problems=10, samples=4,
                          task=f"countdown{link}")
    aggregate(root, bootstrap=20)
    html = (root / "report.html").read_text()
    found = 0
    for fig_id in report.figure_ids(html):
        for text in strings(report.figure_data(html, fig_id)):
            assert "<a" not in text and "</a>" not in text, (fig_id, text)
            found += "&lt;a href=" in text
    assert found > 0  # the names are there, as text
    assert report.plotly_text("x<br>y <b>z</b> & w") == "x<br>y &lt;b&gt;z&lt;/b&gt; &amp; w"


KINDS = {  # sweep kind -> (algos, statuses of the runs to plant)
    "base only": (("none",), {}),
    "one run": (("es",), {}),
    "all failed": (("es", "grpo"), "failed"),
    "no ES": (("none", "grpo"), {}),
    "no GRPO": (("none", "es"), {}),
    "sequences only": (("es_grpo", "grpo_es"), {}),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_page_builds_for_every_kind_of_sweep(tmp_path, kind):
    algos, statuses = KINDS[kind]
    root = tmp_path / "sweep"
    one = kind == "one run"
    ids = write_synthetic_sweep(root, models={"tiny-s": 4e6} if one else {"tiny-xs": 1e6, "tiny-s": 4e6},
                                pops=(8,) if one else (8, 16), seeds=(0,) if one else (0, 1), algos=algos,
                                iterations=2, eval_every=2, problems=10, samples=4, unused_null=True,
                                statuses=None if statuses != "failed" else {})
    if statuses == "failed":  # rewrite every summary as a failed run (no final evaluation)
        for rid in ids:
            path = root / "runs" / rid / "summary.json"
            s = json.loads(path.read_text())
            s.update(status="failed", final=None, phases=[], error="RuntimeError: out of memory")
            path.write_text(json.dumps(s))
    agg = aggregate(root, bootstrap=20)
    html = (root / "report.html").read_text()
    assert len(agg.runs) == len(ids) and html.rstrip().endswith("</html>")
    assert "fig-status" in report.figure_ids(html)
    summary = re.search(r'<section id="summary">(.*?)</section>', html, re.S).group(1)
    assert f"{len(ids)} runs in" in summary
    if statuses == "failed":
        assert f"{len(ids)} failed" in summary and "no run has a final evaluation yet" in summary
        assert html.count("RuntimeError: out of memory") == len(ids)  # the problems table
    else:
        assert "fig-passk" in report.figure_ids(html)
        passk = report.figure_data(html, "fig-passk")
        assert {t["meta"]["algo"] for t in passk["data"]} == {"base", *algos} - {"none"}
    for out in ("runs.parquet", "runs.csv", "curves.parquet", "trend.json", "aggregate.json"):
        assert (root / out).stat().st_size > 0


def test_real_base_only_sweep_ends_with_a_page(tmp_path):
    """The issue's reproduction: a sweep of base evaluations only aggregated at its end."""
    r = cli("esopt.sweep", "-m", "model=tiny-xs", "algo=none", "seed=0,1", "eval.problems=4",
                "eval.samples=2", "task.n_train=16", "task.n_test=8", "task.n_heldout=8",
                f"sweep.root={tmp_path}", "sweep.name=base", env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "aggregation failed" not in r.stderr and "aggregated:" in r.stdout
    html = (tmp_path / "base" / "report.html").read_text()
    assert "2 runs in" in html and "fig-passk" in report.figure_ids(html)
