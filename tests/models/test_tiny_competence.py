"""The shipped tiny family is a partially competent, diverse base on Countdown (issue 2):
Pass@1 in [5%, 60%] and Pass@32 >= 1.5 x Pass@1, measured by the shared evaluator at its
defaults (32 samples, temperature 0.6, top_p 1, the task's 24-token budget) on the test split.
Here on the first 100 test problems for the smallest and largest member (the full 200-problem
numbers of every size are in esopt/models/tiny/<name>/pretrain_card.json)."""

import pytest
import torch

from esopt import engines, models, tasks
from esopt.evaluator import evaluate


@pytest.fixture(scope="module")
def task():
    return tasks.get({"name": "countdown"}, style="compact")


def _eval(name, task):
    torch.set_num_threads(min(2, torch.get_num_threads()))
    model, tok = models.load(name)
    engine = engines.get({"name": "hf", "device": "cpu", "max_batch": 800}, model, tok)
    return evaluate(engine, task, split="test", problems=100, samples=32, temperature=0.6,
                    top_p=1.0, seed=0, greedy=True, entropy=False)


@pytest.fixture(scope="module")
def results(task):
    return {name: _eval(name, task) for name in ("tiny-xs", "tiny-l")}


@pytest.mark.parametrize("name", ["tiny-xs", "tiny-l"])
def test_partially_competent_and_diverse(results, name):
    r = results[name]
    p1, p32 = r["pass@k"]["1"], r["pass@k"]["32"]
    assert 0.05 <= p1 <= 0.60, (name, p1)
    assert p32 >= 1.5 * p1, (name, p1, p32)
    assert r["format"] > 0.9, (name, r["format"])  # almost always a well-formed expression


def test_larger_is_better(results):
    assert results["tiny-l"]["pass@k"]["1"] > results["tiny-xs"]["pass@k"]["1"]
    assert results["tiny-l"]["pass@k"]["32"] >= results["tiny-xs"]["pass@k"]["32"]
