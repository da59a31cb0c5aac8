"""Task layer: registry, countdown generator and loaders, synthetic tasks (GSM8K:
test_gsm8k.py; the ES repo's Countdown file: test_countdown_files.py)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from esopt.core.errors import ConfigError
from esopt.tasks import TASK_NAMES, Task, Verdict, get
from esopt.tasks import countdown as cd

SMALL = {"n_train": 300, "n_test": 100, "n_heldout": 100}


def keys(ds):
    return {cd.key(r["numbers"], r["target"]) for r in ds}


# ---------------------------------------------------------------------------- registry


def test_registry_and_bad_config():
    assert TASK_NAMES[:4] == ("countdown", "gsm8k", "addition", "compare")
    for name in ("countdown", "addition", "compare", "reverse"):
        task = get({"name": name, **SMALL})
        assert isinstance(task, Task) and task.name == name and task.style == "compact"
    with pytest.raises(ConfigError, match="unknown task 'nope'; known tasks: countdown"):
        get({"name": "nope"})
    with pytest.raises(ConfigError, match="unknown option"):
        get({"name": "countdown", "n_trian": 5})
    with pytest.raises(ConfigError, match="supports style compact"):
        get({"name": "addition"}, style="chat")
    with pytest.raises(ConfigError, match="count must be"):
        get({"name": "countdown", "count": 7})
    with pytest.raises(ConfigError, match="max_number must be an integer >= 5"):
        get({"name": "countdown", "min_number": 5, "max_number": 2})
    with pytest.raises(ConfigError, match="unknown split"):
        get({"name": "countdown", **SMALL}).split("validation")
    with pytest.raises(ConfigError, match="distinct problems"):
        get({"name": "countdown", "max_number": 2, **SMALL}).split("test")


def test_omegaconf_and_style_precedence():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"name": "countdown", "count": [3, 4], "style": None, **SMALL})
    task = get(cfg, style="chat")
    assert task.style == "chat" and task.stop == ["</answer>"] and task.max_new_tokens == 1024
    cfg.style = "compact"
    task = get(cfg, style="chat")  # the task config wins over the model's style
    assert task.style == "compact" and task.stop == [] and task.max_new_tokens == 24


# -------------------------------------------------------------------- countdown generator


def test_countdown_generator_determinism_disjoint_reachable():
    from esopt.tasks import countdown_generator

    a = get({"name": "countdown", **SMALL})
    a.split("test")
    countdown_generator._draw.cache_clear()  # b draws afresh: the same knobs, the same problems
    b = get({"name": "countdown", **SMALL})
    c = get({"name": "countdown", **SMALL, "seed": 1})
    for split, n in (("train", 300), ("test", 100), ("heldout", 100)):
        assert a.split(split).to_list() == b.split(split).to_list()
        assert len(a.split(split)) == n
    assert a.split("test")["prompt"] != c.split("test")["prompt"]
    tr, te, ho = (keys(a.split(s)) for s in ("train", "test", "heldout"))
    assert len(tr) == 300 and len(te) == 100 and len(ho) == 100  # distinct within each split
    assert not (tr & te) and not (tr & ho) and not (te & ho)
    for split in ("train", "test", "heldout"):
        assert {len(r["numbers"]) for r in a.split(split)} == {3, 4}  # the default mix: 3 and 4 numbers
        for row in a.split(split):
            assert all(1 <= n <= 12 for n in row["numbers"]) and 1 <= row["target"] <= 100
            assert cd.check_expression(row["solution"], row["numbers"], row["target"])
            assert row["prompt"] == " ".join(map(str, row["numbers"])) + f"={row['target']}:"
            v = a.verify(row["solution"], row)
            assert v == Verdict(1.1, 1.0, 1.0, True, row["solution"])
    # test/heldout do not depend on n_train; train grows as a superset
    big = get({"name": "countdown", **SMALL, "n_train": 600})
    assert big.split("test").to_list() == a.split("test").to_list()
    assert big.split("heldout").to_list() == a.split("heldout").to_list()
    assert big.split("train")["id"][:300] == a.split("train")["id"]
    assert big.split("train")["prompt"][:300] == a.split("train")["prompt"]


def test_a_repeated_countdown_draw_is_a_copy_of_the_first():
    """A process draws a problem set once (a sweep's runs build the same splits): each call gets
    its own copy, equal to a fresh draw, whatever the caller did to the one before."""
    from esopt.tasks import countdown_generator as gen

    gen._draw.cache_clear()
    first = gen.generate(50, seed=5)
    first[0]["numbers"].append(99)
    first[1]["target"] = -1
    again = gen.generate(50, seed=5)
    assert gen._draw.cache_info().hits == 1
    gen._draw.cache_clear()
    assert again == gen.generate(50, seed=5)  # the caller's edits reached neither


def test_countdown_test_draw_is_a_fresh_disjoint_test_split(tmp_path):
    """task.test_draw (a confirmatory run's problems): each draw d >= 1 is n_test problems none of
    draw 0's splits nor any other draw holds, the same for the same knobs; train and heldout stay."""
    a = get({"name": "countdown", **SMALL})
    d1, d2 = (get({"name": "countdown", **SMALL, "test_draw": d}) for d in (1, 2))
    again = get({"name": "countdown", **SMALL, "test_draw": 1})
    t0, t1, t2 = (keys(t.split("test")) for t in (a, d1, d2))
    assert len(t0) == len(t1) == len(t2) == 100
    assert not (t0 & t1) and not (t0 & t2) and not (t1 & t2)
    assert not (t1 & (keys(a.split("train")) | keys(a.split("heldout"))))
    assert d1.split("test").to_list() == again.split("test").to_list()
    for split in ("train", "heldout"):
        assert d1.split(split).to_list() == a.split(split).to_list()
    for row in d1.split("test"):
        assert cd.check_expression(row["solution"], row["numbers"], row["target"])
    with pytest.raises(ConfigError, match="test_draw must be an integer >= 0, got -1"):
        get({"name": "countdown", **SMALL, "test_draw": -1})
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps({"nums": [1, 2, 3], "target": t}) + "\n" for t in range(1, 8)))
    with pytest.raises(ConfigError, match="test_draw=1 needs the generator"):
        get({"name": "countdown", "source": str(f), "n_train": 2, "test_draw": 1})


def test_countdown_counts_and_ranges():
    task = get({"name": "countdown", "count": [3, 4], "min_number": 2, "max_number": 20,
                "max_target": 500, "n_train": 200, "n_test": 50, "n_heldout": 50, "seed": 3})
    rows = task.split("train").to_list()
    sizes = {len(r["numbers"]) for r in rows}
    assert sizes == {3, 4}
    for r in rows:
        assert all(2 <= n <= 20 for n in r["numbers"]) and 1 <= r["target"] <= 500
        assert cd.check_expression(r["solution"], r["numbers"], r["target"])
    # compact prompt stays within the tiny models' context
    assert max(len(r["prompt"]) for r in rows) <= 64
    assert all(r["prompt"].isascii() for r in rows)


def test_countdown_chat_prompt_fallback_and_template():
    task = get({"name": "countdown", **SMALL}, style="chat")
    row = task.split("test")[0]
    assert row["prompt"].endswith("\nAssistant: <think>")
    assert f"Using the numbers [{', '.join(map(str, row['numbers']))}]" in row["prompt"]
    assert f"equals {row['target']}." in row["prompt"]
    assert "<answer> </answer>" in row["prompt"]

    class Templated:  # duck-typed stand-in for a tokenizer with a chat template
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            body = "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages)
            return body + "<|assistant|>"

    task = get({"name": "countdown", **SMALL}, tokenizer=Templated())
    assert task.style == "chat"  # chosen because the tokenizer has a chat template
    prompt = task.split("test")[0]["prompt"]
    assert prompt.startswith("<|system|>You are a helpful assistant.")
    assert prompt.endswith("<|assistant|><think>")
    good = " 7*5=35</think>\n<answer>" + row["solution"] + "</answer>"
    v = task.verify(good, row)
    assert (v.reward, v.format, v.correct) == (pytest.approx(1.1), 1.0, True)
    assert v.extracted == cd.canonical(row["solution"])
    assert task.rewards([good, "no"], [row, row]) == [pytest.approx(1.1), 0.0]
    v = task.verify(" hmm <answer>1+1</answer>", row)
    assert v == Verdict(pytest.approx(0.05), 0.5, 0.0, False, "1+1")


# -------------------------------------------------------------- countdown public formats

ROWS = [([3, 7, 2], 23), ([6, 4, 8], 12), ([1, 2, 3, 4], 10), ([5, 5, 5], 5), ([9, 8], 72),
        ([10, 2, 3], 8), ([11, 12], 1), ([4, 4, 4, 4], 16), ([7, 1], 7), ([2, 3], 6),
        ([12, 6, 3], 6), ([8, 8], 1)]


def _write(path: Path, fmt: str, kind: str):
    if fmt == "nums":
        recs = [{"nums": n, "target": t} for n, t in ROWS]
    else:
        recs = [{"numbers": n, "target": t, "context": f"Using the numbers {n} ... {t}",
                 "solution": None} for n, t in ROWS]
    if kind == "json":
        path.write_text(json.dumps(recs))
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    else:
        pd.DataFrame(recs).to_parquet(path)


@pytest.mark.parametrize("fmt", ["nums", "numbers"])
@pytest.mark.parametrize("kind", ["json", "jsonl", "parquet"])
def test_countdown_public_formats(tmp_path, fmt, kind):
    path = tmp_path / f"cd.{kind}"
    _write(path, fmt, kind)
    task = get({"name": "countdown", "source": str(path), "n_train": 4, "n_test": None,
                "n_heldout": 3})
    train, test, held = (task.split(s).to_list() for s in ("train", "test", "heldout"))
    # rule: first n_train rows train, last n_heldout heldout, the rows between test
    assert [(r["numbers"], r["target"]) for r in train] == ROWS[:4]
    assert [(r["numbers"], r["target"]) for r in test] == ROWS[4:9]
    assert [(r["numbers"], r["target"]) for r in held] == ROWS[9:]
    assert test[0]["prompt"] == "9 8=72:"
    assert task.verify("9*8", test[0]).correct
    capped = get({"name": "countdown", "source": str(path), "n_train": 4, "n_test": 2,
                  "n_heldout": 3})
    assert len(capped.split("test")) == 2 and len(capped.split("heldout")) == 3


def test_countdown_file_duplicates_dropped_and_errors(tmp_path):
    path = tmp_path / "dup.jsonl"
    recs = [{"nums": [3, 7, 2], "target": 23}, {"nums": [1, 2], "target": 3},
            {"nums": [2, 7, 3], "target": 23}, {"nums": [4, 5], "target": 9},
            {"nums": [2, 1], "target": 3}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    task = get({"name": "countdown", "source": str(path), "n_train": 1, "n_test": None,
                "n_heldout": 1})
    assert len(task.split("train")) == 1
    assert [r["numbers"] for r in task.split("test")] == [[1, 2], [4, 5]]  # [2,7,3]=23 dropped
    assert len(task.split("heldout")) == 0  # [2,1]=3 repeats a test problem

    with pytest.raises(ConfigError, match="data file not found"):
        get({"name": "countdown", "source": str(tmp_path / "missing.json")}).split("test")
    with pytest.raises(ConfigError, match="leaves no test rows"):
        get({"name": "countdown", "source": str(path), "n_train": 4, "n_heldout": 1}).split("test")
    for bad, field in (({"nums": [3, "x"], "target": 5}, "'nums' must be a list"),
                       ({"nums": [3, 4]}, "'target' is missing"),
                       ({"target": 5}, "'numbers' \\(or 'nums'\\) is missing"),
                       ({"nums": [3, 4], "target": "abc"}, "'target' must be a number, got 'abc'"),
                       ({"nums": [3, 4], "target": True}, "'target' must be a number"),
                       ({"nums": 7, "target": 7}, "'nums' must be a list")):
        p = tmp_path / "bad.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in [recs[0], bad, recs[1], recs[3]]))
        with pytest.raises(ConfigError, match=rf"^{p}: row 1: malformed countdown row: field {field}"):
            get({"name": "countdown", "source": str(p), "n_train": 2, "n_heldout": 1}).split("test")


def test_hub_name_offline_is_one_line_error(monkeypatch):
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="cannot load 'esopt-no-such/dataset'") as e:
        get({"name": "countdown", "source": "esopt-no-such/dataset"}).split("test")
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- synthetic


@pytest.mark.parametrize("name", ["addition", "compare", "reverse"])
def test_synthetic_tasks(name):
    task = get({"name": name, **SMALL})
    assert task.max_new_tokens == 8 and task.stop == []
    splits = {s: task.split(s).to_list() for s in ("train", "test", "heldout")}
    assert [len(splits[s]) for s in ("train", "test", "heldout")] == [300, 100, 100]
    assert get({"name": name, **SMALL})._build()["test"].to_list() == splits["test"]
    seen = {}
    for s, rows in splits.items():
        for r in rows:
            p, a, nums = r["prompt"], r["answer"], r["numbers"]
            k = tuple(nums) if name == "reverse" else tuple(sorted(nums))
            assert seen.setdefault(k, s) == s  # disjoint
            assert p.isascii() and p.isprintable() and len(p) <= 64 and len(a) <= 8
            if name == "addition":
                assert p == f"add {nums[0]} {nums[1]}:" and a == str(sum(nums))
            elif name == "compare":
                assert p == "max " + " ".join(map(str, nums)) + ":" and a == str(max(nums))
            else:
                digits = "".join(map(str, nums))
                assert p == f"reverse {digits}:" and a == digits[::-1]
            assert task.verify(f" {a}\n", r) == Verdict(1.0, 1.0, 1.0, True, a)
    r = splits["test"][0]
    assert task.verify(r["answer"] + "0", r).correct is False
    assert task.verify("", r) == Verdict(0.0, 0.0, 0.0, False, None)
    assert task.verify("abc", r) == Verdict(0.0, 0.0, 0.0, False, "abc")
    assert task.reference(r) == r["answer"]


def test_synthetic_known_examples():
    add = get({"name": "addition"})
    row = {"prompt": "add 12 34:", "numbers": [12, 34], "answer": "46"}
    assert add.verify("46", row).correct and not add.verify("47", row).correct
    with pytest.raises(ConfigError, match="max_digits must be <= 7"):
        get({"name": "addition", "max_digits": 9})
    with pytest.raises(ConfigError, match="distinct problems"):
        get({"name": "addition", "max_digits": 1, **SMALL}).split("test")
