"""``python -m esopt.evaluate`` on a researcher's own model folder (issue 44): the completions
beside eval.out, a few printed on request, a CPU-time warning for a budget a CPU cannot pay,
and nothing else left behind (no Hydra folder)."""

import json
import sys

import pytest
from hydra.core.global_hydra import GlobalHydra

from esopt import models


def evaluate_in_process(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    from esopt.cli import evaluate as cli

    monkeypatch.setattr(sys, "argv", ["esopt.evaluate", *args])
    GlobalHydra.instance().clear()
    code = 0
    try:
        cli.main()
    except SystemExit as e:
        code = e.code
    finally:
        GlobalHydra.instance().clear()
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def own_model(tmp_path):
    """A model folder as a researcher has one: save_pretrained of a (tiny) model."""
    model, tok = models.load("tiny-xs")
    return models.save(model, tok, tmp_path / "my-model")


def test_evaluate_records_completions_beside_its_results_and_leaves_nothing_else(
        tmp_path, monkeypatch, capsys, own_model):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code, out, err = evaluate_in_process(
        monkeypatch, capsys, f"model={own_model}", "task=countdown", "eval.problems=5", "eval.samples=2",
        "eval.out=res.json", "eval.save_samples=2", "eval.print_samples=1")
    assert code == 0, err
    result = json.loads((work / "res.json").read_text())
    saved = json.loads((work / "res.samples.json").read_text())
    assert sorted(p.name for p in work.iterdir()) == ["res.json", "res.samples.json"]  # no results/.hydra
    assert saved["model"]["path"] == str(own_model) and saved["truncated"] == result["truncated"]
    assert len(saved["problems"]) == 2 and len(saved["counts"]) == 3
    assert [sum(c["correct"] for c in p["completions"]) for p in saved["problems"]] == result["correct_counts"][:2]
    first = saved["problems"][0]
    assert f"--- {first['id']} (gold {first['gold']!r})" in out
    assert first["completions"][0]["text"] in out and "truncated" in out and "maj@1 " not in out
    assert "esopt: warning" not in err  # a tiny budget: no CPU-time warning


def test_a_budget_a_cpu_cannot_pay_is_one_warning_before_it_starts(tmp_path, monkeypatch, capsys):
    """The GSM8K chat defaults (2,048 new tokens) for a 0.5B model on a CPU: one warning
    naming the estimate and eval.problems / eval.samples / eval.max_new_tokens, before the
    model is loaded (here it cannot be: no hub, so the run stops at loading)."""
    import huggingface_hub

    from helpers import REPO

    monkeypatch.chdir(tmp_path)
    # an empty hub cache (tests run offline): the 0.5B model is never found, so never run here
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    data = REPO / "tests" / "data" / "gsm8k"
    code, out, err = evaluate_in_process(monkeypatch, capsys, "model=qwen0.5b", "task=gsm8k",
                                         f"task.source={data}", "task.n_heldout=10", "engine=hf",
                                         "engine.device=cpu", "eval.problems=20")
    lines = [x for x in err.splitlines() if x.startswith("esopt: warning: this run may take")]
    assert len(lines) == 1, err
    assert code == 2 and "cannot load model 'qwen0.5b'" in err  # warned before loading
    assert "eval.problems=20 x (eval.samples=32 + 1 greedy) x eval.max_new_tokens=2048" in lines[0]
    assert "docs/results/smollm2.md" in lines[0] and "1,351,680 generated tokens" in lines[0]
