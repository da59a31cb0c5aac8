"""evaluate(): schema, pass@k identities, CIs, greedy and entropy, on a real (small) model."""

import json
import string

import numpy as np
import pytest
import torch

from esopt import engines
from esopt.core import metrics
from esopt.core.errors import ConfigError
from esopt.evaluator import evaluate, format_table, k_values
from esopt.tasks import Task, Verdict, make_dataset

from helpers import random_model
from esopt.models import char_tokenizer

torch.set_num_threads(1)


class FirstCharTask(Task):
    """Correct iff the completion's first character is in the row's `gold` set. With a random
    model this gives a spread of per-problem success rates (no pretraining needed)."""

    name = "firstchar"
    budgets = {"compact": 4}

    def _build(self):
        import datasets

        letters = string.ascii_lowercase + string.digits + " "
        rows = []
        for i in range(12):
            gold = letters[: 3 * (i + 1)]  # larger gold sets -> easier problems
            rows.append({"prompt": f"{i} {i + 1}=:", "id": str(i), "gold": gold})
        ds = make_dataset(rows, {"prompt": datasets.Value("string"), "id": datasets.Value("string"),
                                 "gold": datasets.Value("string")})
        return {"train": ds, "test": ds, "heldout": ds}

    def verify(self, completion, row):
        first = completion[:1] or None
        ok = first is not None and first in row["gold"]
        fmt = 1.0 if first is not None else 0.0
        return Verdict(reward=0.1 * fmt + float(ok), format=fmt, answer=float(ok), correct=ok, extracted=first)


@pytest.fixture(scope="module")
def setup():
    tok = char_tokenizer()
    engine = engines.get({"name": "hf", "device": "cpu", "max_batch": 32}, random_model(tok), tok)
    return engine, FirstCharTask({}, tokenizer=tok, style="compact")


def test_k_values():
    assert k_values(1) == [1]
    assert k_values(32) == [1, 2, 4, 8, 16, 32]
    assert k_values(6) == [1, 2, 4, 6]


def test_evaluate_schema_and_identities(setup):
    engine, task = setup
    r = evaluate(engine, task, problems=10, samples=6, temperature=1.0, seed=0)
    assert set(r) == {
        "task", "split", "n_problems", "samples", "temperature", "max_new_tokens", "pass@k", "pass@k_ci",
        "maj@k", "maj@k_ci", "truncated", "greedy", "greedy_ci", "entropy", "entropy_ci", "format", "tokens_generated",
        "wall_s", "correct_counts", "greedy_correct",
    }
    json.dumps(r)  # JSON-serialisable
    assert (r["task"], r["split"], r["n_problems"], r["samples"]) == ("firstchar", "test", 10, 6)
    assert list(r["pass@k"]) == ["1", "2", "4", "6"] == list(r["maj@k"])
    c = np.array(r["correct_counts"])
    assert len(c) == 10 and 0 < c.sum() < 60  # a non-trivial spread of outcomes
    assert r["pass@k"]["1"] == pytest.approx(c.mean() / 6)
    assert r["pass@k"]["6"] == pytest.approx((c > 0).mean())
    vals = [r["pass@k"][k] for k in r["pass@k"]]
    assert all(a <= b + 1e-12 for a, b in zip(vals, vals[1:]))  # monotone in k
    assert vals[0] < vals[-1]
    assert r["pass@k"]["2"] == pytest.approx(np.mean([metrics.pass_at_k(6, x, 2) for x in c]))
    for key in ("pass@k", "maj@k"):
        for k, v in r[key].items():
            lo, hi = r[key + "_ci"][k]
            assert lo <= v + 1e-12 and v <= hi + 1e-12
    # greedy: one temperature-0 completion per problem, verified
    g = engine.generate([row["prompt"] for row in task.split("test").to_list()[:10]], n=1,
                        temperature=0.0, max_new_tokens=4)
    assert r["greedy_correct"] == [int(task.verify(x[0], row).correct) for x, row in
                                   zip(g.completions, task.split("test").to_list())]
    assert r["greedy"] == pytest.approx(np.mean(r["greedy_correct"]))
    assert 0 < r["entropy"] < np.log(len(engine.tokenizer))
    assert r["entropy_ci"][0] <= r["entropy"] <= r["entropy_ci"][1]
    assert 0 < r["format"] <= 1
    assert r["tokens_generated"] >= 10 * 6 + 10
    table = format_table(r)
    assert "pass@6" in table and "greedy" in table and "entropy" in table


def test_evaluate_is_seeded_and_options(setup):
    engine, task = setup
    kw = dict(problems=5, samples=4, temperature=1.0, greedy=False, entropy=False)
    a = evaluate(engine, task, seed=3, **kw)
    b = evaluate(engine, task, seed=3, **kw)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    assert a["greedy"] is None and a["entropy"] is None and a["greedy_correct"] is None
    assert "-" in format_table({**a, "wall_s": 0.0})
    assert evaluate(engine, task, problems=50, samples=1, greedy=False)["n_problems"] == 12
    with pytest.raises(ConfigError, match="eval.samples"):
        evaluate(engine, task, samples=0)
    with pytest.raises(ConfigError, match="eval.problems"):
        evaluate(engine, task, problems=0)


def test_evaluate_real_tiny_model_on_countdown():
    """The shipped tiny-s on the real Countdown task: a partially competent base, and the
    result does not depend on how the engine chunks the batch."""
    from esopt import models, tasks

    model, tok = models.load("tiny-s")
    task = tasks.get({"name": "countdown"}, tokenizer=tok, style="compact")
    kw = dict(problems=24, samples=8, temperature=0.6, seed=0)
    big = evaluate(engines.get({"name": "hf", "device": "cpu", "max_batch": 256}, model, tok), task, **kw)
    small = evaluate(engines.get({"name": "hf", "device": "cpu", "max_batch": 40}, model, tok), task, **kw)
    for r in (big, small):
        r.pop("wall_s")
    # identical samples; entropy may differ in the last float bits (different left padding)
    assert big.pop("entropy") == pytest.approx(small.pop("entropy"), rel=1e-5)
    assert big.pop("entropy_ci") == pytest.approx(small.pop("entropy_ci"), rel=1e-5)
    assert big == small
    assert 0 < big["pass@k"]["1"] < big["pass@k"]["8"] <= 1
    assert big["format"] > 0.5
    rows = task.split("test").to_list()[:24]
    assert all(r["prompt"] for r in rows) and len(big["correct_counts"]) == 24


def test_out_of_domain_entropy_and_pass_at_k(setup):
    """eval.ood_task: the evaluator adds the second task's entropy and Pass@K (ood_*), measured on
    that task's split with the run's sampling settings; without it nothing is added."""
    from dataclasses import replace

    from esopt.core.config import EvalConfig
    from esopt import tasks
    from esopt.evaluator import evaluate_config

    engine, task = setup
    ev = EvalConfig(problems=6, samples=4, temperature=1.0, greedy=False)
    plain = evaluate_config(ev, engine, task)
    assert not any(k.startswith("ood") for k in plain)  # null control
    ev = replace(ev, ood_task={"name": "addition", "n_train": 10, "n_test": 8, "n_heldout": 8},
                 ood_split="heldout", ood_problems=5)
    ood = tasks.get(ev.ood_task, tokenizer=engine.tokenizer, style="compact")
    assert ood.name == "addition" and ood.style == "compact"
    r = evaluate_config(ev, engine, task, ood)
    direct = evaluate(engine, ood, split="heldout", problems=5, samples=4, temperature=1.0,
                      seed=0, greedy=False)
    assert r["ood_task"] == "addition" and r["ood_split"] == "heldout" and r["ood_n_problems"] == 5
    assert r["ood_entropy"] == direct["entropy"] and r["ood_entropy_ci"] == direct["entropy_ci"]
    assert r["ood_pass@k"] == direct["pass@k"] and list(r["ood_pass@k"]) == ["1", "2", "4"]
    assert r["ood_entropy"] != pytest.approx(r["entropy"])  # another task's completions
    assert r["tokens_generated"] == plain["tokens_generated"] + direct["tokens_generated"]
    for key in ("pass@k", "entropy", "correct_counts"):  # the in-domain numbers are untouched
        assert r[key] == plain[key]
    json.dumps(r)
    assert "out of domain: addition / heldout, 5 problems" in format_table(r)
    with pytest.raises(ValueError, match="no out-of-domain task was given"):
        evaluate_config(ev, engine, task)
    assert evaluate(engine, task, problems=None, samples=1, greedy=False)["n_problems"] == 12


def test_truncated_reads_eos_stop_strings_and_the_budget():
    """A completion is truncated only when it used the whole budget without an EOS (lengths
    count it, token_ids drop it) or a stop string."""
    from esopt.engines.base import Generation, truncated

    gen = Generation(completions=[["abcd", "abc", "ab\nQ:", "ab"]], token_ids=[[[1] * 4, [1] * 3, [1] * 4, [1] * 2]],
                     lengths=[[4, 4, 4, 2]], entropy=None, n_tokens=14)
    assert truncated(gen, 4, ("\nQ:",)) == [[True, False, False, False]]
    assert truncated(gen, 4) == [[True, False, True, False]]


def test_completions_are_recorded_bounded_and_truncation_reported(setup, tmp_path):
    """evaluate(completions=[]) records every completion with its extracted answer, reward,
    verdict, tokens and truncation, consistent with the result's numbers; write_samples keeps
    the first N problems in full and counts for the rest; the table shows truncation, not maj@1."""
    from esopt.evaluator import format_samples, write_samples

    engine, task = setup
    records: list = []
    r = evaluate(engine, task, problems=6, samples=3, temperature=1.0, seed=1, completions=records)
    assert [x["id"] for x in records] == [str(i) for i in range(6)]
    rows = task.split("test").to_list()[:6]
    for rec, row, c in zip(records, rows, r["correct_counts"]):
        assert rec["prompt"] == row["prompt"] and rec["gold"] == row["gold"] and len(rec["completions"]) == 3
        assert sum(x["correct"] for x in rec["completions"]) == c
        for x in rec["completions"]:
            assert x["correct"] == task.verify(x["text"], row).correct and x["extracted"] == (x["text"][:1] or None)
            assert 1 <= x["tokens"] <= 4 and (not x["truncated"] or x["tokens"] == 4)
        assert rec["greedy"]["correct"] == bool(r["greedy_correct"][int(rec["id"])])
    flags = [x["truncated"] for rec in records for x in rec["completions"]]
    assert r["truncated"] == pytest.approx(np.mean(flags)) and 0 < r["truncated"] < 1
    assert sum(x["tokens"] for rec in records for x in rec["completions"]) + \
        sum(rec["greedy"]["tokens"] for rec in records) == r["tokens_generated"]

    write_samples(tmp_path / "s.json", records, 2, r, iteration=3)
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["iteration"] == 3 and saved["max_new_tokens"] == 4 and saved["truncated"] == r["truncated"]
    assert saved["problems"] == records[:2]
    assert [c["correct"] for c in saved["counts"]] == r["correct_counts"][2:]
    assert [c["truncated"] for c in saved["counts"]] == [sum(x["truncated"] for x in rec["completions"])
                                                          for rec in records[2:]]
    write_samples(tmp_path / "all.json", records, "all", r)
    assert len(json.loads((tmp_path / "all.json").read_text())["problems"]) == 6
    write_samples(tmp_path / "none.json", records, 0, r)
    assert not (tmp_path / "none.json").exists()

    table = format_table(r)
    assert "truncated" in table and "maj@2" in table and "maj@1 " not in table
    shown = format_samples(records, 1)
    assert shown.startswith("--- 0 (gold ") and shown.count("[sample ") == 2 and "[greedy]" in shown


def test_printed_samples_never_drive_the_terminal():
    """eval.print_samples printed model text raw: an ANSI colour code, an OSC title / hyperlink
    sequence or a C1 control reached the terminal (the extracted answer was already escaped)."""
    from esopt.evaluator import format_samples, terminal_safe

    hostile = "ok\x1b[31mred\x1b]0;owned\x07\x1b]8;;http://x\x1b\\link\x9b2J\x7f\ttab\nline 2 é ✓"
    comp = {"text": hostile, "extracted": "\x1b[0m", "reward": 0.0, "correct": False, "tokens": 9, "truncated": False}
    shown = format_samples([{"id": "0", "prompt": "p", "gold": 1, "completions": [comp]}], 1)
    assert not any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in shown)
    assert terminal_safe(hostile) == ("ok\\x1b[31mred\\x1b]0;owned\\x07\\x1b]8;;http://x\\x1b\\link\\x9b2J\\x7f"
                                      "\ttab\nline 2 é ✓")
    assert terminal_safe(hostile) in shown
