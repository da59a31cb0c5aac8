"""task=arith (esopt/tasks/arith.py): chat arithmetic answered with a number."""

import pytest

from esopt.core.errors import ConfigError
from esopt.tasks import Verdict, get
from esopt.tasks.arith import last_integer, verdict

SMALL = {"n_train": 300, "n_test": 100, "n_heldout": 100}


def test_splits_are_seeded_disjoint_and_in_range():
    both = {**SMALL, "ops": "+-"}
    a, b = get({"name": "arith", **both}, style="chat"), get({"name": "arith", **both}, style="chat")
    c = get({"name": "arith", **both, "seed": 1}, style="chat")
    keys = {}
    for split, n in (("train", 300), ("test", 100), ("heldout", 100)):
        rows = a.split(split).to_list()
        assert rows == b.split(split).to_list() and len(rows) == n
        keys[split] = {r["question"] for r in rows}
        assert len(keys[split]) == n
        for r in rows:
            x, op, y = r["question"].removeprefix("What is ").split("?")[0].split()
            x, y = int(x), int(y)
            assert 10 <= x <= 99 and 10 <= y <= 99 and op in "+-"
            assert r["answer"] == (x + y if op == "+" else x - y) >= 0
            assert r["prompt"].endswith(f"User: {r['question']}\nAssistant: ")  # no tokenizer: plain chat
    assert not (keys["train"] & keys["test"]) and not (keys["train"] & keys["heldout"])
    assert not (keys["test"] & keys["heldout"])
    assert c.split("test")["question"] != a.split("test")["question"]
    assert {r["question"].split()[3] for r in a.split("train")} == {"+", "-"}
    assert get({"name": "arith", **both, "n_train": 600}, style="chat").split("test").to_list() == \
        a.split("test").to_list()  # test does not depend on n_train
    only_sub = get({"name": "arith", **SMALL, "ops": "-"}, style="chat")
    assert {r["question"].split()[3] for r in only_sub.split("test")} == {"-"}
    default = get({"name": "arith", **SMALL}, style="chat")  # sums only (what SmolLM2-135M half-solves)
    assert {r["question"].split()[3] for r in default.split("train")} == {"+"}


def test_verdict_parses_the_last_integer_and_never_evaluates():
    assert verdict("41", 41) == Verdict(1.1, 1.0, 1.0, True, "41")
    assert verdict(" 41.\n", 41) == Verdict(1.1, 1.0, 1.0, True, "41")
    assert verdict("10 + 31 = 41", 41) == Verdict(1.0, 0.0, 1.0, True, "41")
    assert verdict("The answer is 33.", 41) == Verdict(0.0, 0.0, 0.0, False, "33")
    assert verdict("33", 41) == Verdict(0.1, 1.0, 0.0, False, "33")
    assert verdict("10 + 31", 41) == Verdict(0.0, 0.0, 0.0, False, "31")  # an expression is not evaluated
    assert verdict("forty-one", 41) == Verdict(0.0, 0.0, 0.0, False, None)
    assert verdict("", 41) == Verdict(0.0, 0.0, 0.0, False, None)
    assert verdict("-7", -7).correct and last_integer("1,234 apples") == 1234
    assert last_integer("12,34") == 34 and verdict("12,34", 34).format == 0.0


def test_bad_knobs_and_style():
    with pytest.raises(ConfigError, match="supports style chat, not 'compact'"):
        get({"name": "arith"}, style="compact")
    with pytest.raises(ConfigError, match="ops must be a string of \\+ and/or -"):
        get({"name": "arith", "ops": "*"}, style="chat")
    with pytest.raises(ConfigError, match="max_number must be an integer >= 50"):
        get({"name": "arith", "min_number": 50, "max_number": 20}, style="chat")
    with pytest.raises(ConfigError, match="distinct problems"):
        get({"name": "arith", "min_number": 1, "max_number": 3}, style="chat").split("test")
    t = get({"name": "arith", **SMALL}, style="chat")
    assert t.max_new_tokens == 32 and t.stop == [] and t.reference(t.split("test")[0]) == str(t.split("test")[0]["answer"])
