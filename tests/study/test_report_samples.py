"""The report page shows base against final completions of each best configuration's run
(issue 44), as text: a completion is model output and may hold any markup."""

from helpers import write_synthetic_sweep

from esopt.evaluator import write_samples
from esopt.runtime.context import samples_path
from esopt.study.report import page as report
from esopt.study.report.aggregate import aggregate
from test_report_robust import MARKUP, SCRIPT_END, Tags


def record(pid: str, text: str, correct: bool, truncated: bool = False) -> dict:
    comp = {"text": text, "extracted": text[-3:], "reward": float(correct), "correct": correct,
            "tokens": 7, "truncated": truncated}
    return {"id": pid, "prompt": "1 2 3=6:", "gold": 6, "completions": [comp, comp]}


def test_base_and_final_completions_are_shown_escaped(tmp_path):
    root = tmp_path / "sweep"
    ids = write_synthetic_sweep(root, models={"tiny-xs": 1e6, "tiny-s": 4e6}, pops=(8,), seeds=(0,),
                                algos=("es", "grpo"), iterations=2, eval_every=2, problems=4, samples=2)
    for rid in ids:
        run = root / "runs" / rid
        write_samples(samples_path(run, 0), [record("countdown/test/0", f"base {MARKUP}", False),
                                             record("countdown/test/1", "1+2+3", True)], 1, {"truncated": 0.25})
        write_samples(samples_path(run, 2), [record("countdown/test/0", f"final {SCRIPT_END} 1*2*3", True, True),
                                             record("countdown/test/1", "1+2+3", True)], 1, {"truncated": 0.5}, iteration=2)
    aggregate(root, bootstrap=50)
    html = (root / "report.html").read_text()
    assert "table-samples" in html and MARKUP not in html and SCRIPT_END not in html
    parser = Tags()
    parser.feed(html)
    assert "img" not in parser.tags and parser.tags.count("script") == 2 + len(report.figure_ids(html))
    text = "".join(parser.texts)
    for rid in ids:  # one run per best configuration: each (model, algo) here
        assert f"{rid} (" in text
    assert text.count(f"base {MARKUP}") == len(ids) and text.count(f"final {SCRIPT_END} 1*2*3") == len(ids)
    assert "base 25% truncated, final 50% truncated (iteration 2)" in text
    assert "correct, answer '2*3', 7 tokens, truncated" in text
    assert "countdown/test/1" not in text  # only the problems kept in full (eval.save_samples)


def test_a_malformed_samples_file_is_a_note_not_a_traceback(tmp_path, capsys):
    """A samples file with "truncated": "abc", or its problems a dict, made the standalone
    aggregate end in a traceback (exit 1, no report). Now that file is left out of the page with
    one note naming it (printed by the command, kept in aggregate.json) and the rest is written."""
    import json

    from esopt.cli.aggregate import main as aggregate_main

    root = tmp_path / "sweep"
    ids = write_synthetic_sweep(root, models={"tiny-xs": 1e6}, pops=(8,), seeds=(0,), algos=("es", "grpo"),
                                iterations=2, eval_every=2, problems=4, samples=2)
    good, bad = (root / "runs" / rid for rid in ids)
    write_samples(samples_path(good, 0), [record("countdown/test/0", "fine 1+2+3", True)], 1, {"truncated": 0.0})
    write_samples(samples_path(bad, 0), [record("countdown/test/0", "never shown", True)], 1, {"truncated": 0.0})
    path = samples_path(bad, 0)
    for spoil, why in ((lambda d: d.update(truncated="abc"), "its truncated is not a number ('abc')"),
                       (lambda d: d.update(problems={"a": 1}), "its problems are not a list of records"),
                       (lambda d: d.update(iteration="x"), "its iteration is not an integer ('x')")):
        data = json.loads(samples_path(good, 0).read_text())
        spoil(data)
        path.write_text(json.dumps(data))
        assert aggregate_main([str(root), "--bootstrap", "20"]) == 0
        out = capsys.readouterr().out
        assert f"  note: {path} cannot be read ({why}); its completions are not shown" in out.splitlines()
        html = (root / "report.html").read_text()
        assert "fine 1+2+3" in html and "never shown" not in html
        assert any(why in n for n in json.loads((root / "aggregate.json").read_text())["notes"])
