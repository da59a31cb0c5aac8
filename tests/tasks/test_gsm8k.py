"""GSM8K under the study's protocol: train on train, evaluate on the whole test split, held-out
from train; the \\boxed{} prompt and its 1 / 0.1 / 0 reward; the evaluation check (#### / boxed /
"answer is N", math-verify when installed); bad input.

Data: tests/data/gsm8k (40 train + 30 test rows of the real files, MIT) everywhere; the full
splits in ../shared/data/gsm8k when present (skipped with a reason otherwise)."""

import json
import time

import pytest
from helpers import cli, REPO, SHARED_DATA

from esopt.core.errors import ConfigError
from esopt.tasks import Verdict, get
from esopt.tasks import gsm8k as g8

SAMPLE = REPO / "tests" / "data" / "gsm8k"
FULL = SHARED_DATA / "gsm8k"
needs_full = pytest.mark.skipif(not (FULL / "test.jsonl").exists(),
                                reason=f"the full GSM8K splits are not at {FULL} (a clone without ../shared)")
needs_mv = pytest.mark.skipif(not g8.math_verify_available(),
                              reason="math-verify is not installed (pip install 'esopt[math]')")


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def cfg(**kw):
    return {"name": "gsm8k", "source": str(SAMPLE), "n_heldout": 10, **kw}


# ------------------------------------------------------------------------------ the protocol


def test_splits_follow_the_protocol_on_the_sample():
    train_file, test_file = lines(SAMPLE / "train.jsonl"), lines(SAMPLE / "test.jsonl")
    task = get(cfg(), style="chat")
    tr, te, ho = (task.split(s).to_list() for s in ("train", "test", "heldout"))
    # test = the whole test file, in file order; train + heldout = the train file, disjoint
    assert [r["question"] for r in te] == [r["question"] for r in test_file]
    assert len(ho) == 10 and len(tr) == 30
    assert sorted(r["question"] for r in tr + ho) == sorted(r["question"] for r in train_file)
    assert not {r["question"] for r in tr} & {r["question"] for r in ho}
    assert [r["question"] for r in tr] == [r["question"] for r in train_file
                                           if r["question"] not in {h["question"] for h in ho}]
    assert [r["gold"] for r in te[:3]] == ["18", "3", "70000"]
    # the held-out draw is seeded: same seed, same rows; another seed, other rows
    assert get(cfg(), style="chat").split("heldout").to_list() == ho
    assert get(cfg(seed=1), style="chat").split("heldout")["question"] != [r["question"] for r in ho]
    # caps
    capped = get(cfg(n_train=5, n_test=7), style="chat")
    assert len(capped.split("train")) == 5 and len(capped.split("test")) == 7
    assert capped.split("train")["question"] == [r["question"] for r in tr[:5]]
    # evaluation size: eval.problems null = the whole split for gsm8k, 200 for countdown
    assert g8.GSM8KTask.eval_problems is None


@needs_full
def test_full_splits_train_on_train_and_test_on_all_1319():
    task = get({"name": "gsm8k", "source": str(FULL)}, style="chat")
    tr, te, ho = (task.split(s) for s in ("train", "test", "heldout"))
    assert (len(tr), len(te), len(ho)) == (7473 - 500, 1319, 500)
    assert te["question"] == [r["question"] for r in lines(FULL / "test.jsonl")]
    assert not set(tr["question"]) & set(te["question"])
    assert not set(ho["question"]) & (set(te["question"]) | set(tr["question"]))
    # the gold answers of every real row parse, and the gold solutions pass both extractions
    rows = lines(FULL / "test.jsonl") + lines(FULL / "train.jsonl")
    assert all(g8.gold_answer(r["answer"]) is not None for r in rows)
    assert g8.gold_answer(rows[146]["answer"]) == "2125"  # "#### 2,125"
    for r in rows[:50]:
        gold = g8.gold_answer(r["answer"])
        assert g8.extract_strict(r["answer"]) == gold == g8.extract_flexible(r["answer"])
        assert g8.extract_answer(r["answer"]) == gold


def test_prompts_and_budgets():
    boxed = get(cfg(), style="chat")
    row = boxed.split("test")[0]
    assert row["prompt"].startswith(f"System: {g8.SYSTEM_BOXED}\nUser: {row['question'].strip()}")
    assert row["prompt"].endswith("Assistant: ") and boxed.max_new_tokens == 2048

    class Templated:  # duck-typed tokenizer with a chat template
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|>"

    t = get(cfg(), tokenizer=Templated())
    assert t.style == "chat"
    assert t.split("test")[0]["prompt"] == (f"<|system|>{g8.SYSTEM_BOXED}<|user|>"
                                            f"{row['question'].strip()}<|assistant|>")
    hashed = get(cfg(answer_format="hash"), style="chat").split("test")[0]["prompt"]
    assert "'#### <answer>'" in hashed and "boxed" not in hashed
    compact = get(cfg())
    assert compact.style == "compact" and compact.split("test")[0]["prompt"] == f"Q: {row['question']}\nA:"


# ------------------------------------------------------------------------------ verifiers


def test_boxed_extraction_and_numbers():
    assert g8.extract_boxed(r"a \boxed{1} then \boxed{ \frac{3}{2} } end") == r"\frac{3}{2}"
    assert g8.extract_boxed(r"\boxed {7}") == "7"
    assert g8.extract_boxed(r"\boxed{\text{\$}18") is None  # never closed
    assert g8.extract_boxed(r"\boxed 7") is None and g8.extract_boxed("no box") is None
    for text, want in ((r"\frac{3}{2}", "1.5"), (r"\dfrac{36}{2}", "18"), ("3/2", "1.5"),
                       (r"\$1,234.50", "1234.5"), (r"18 \text{ dollars}", "18"), ("x = 5", "5"),
                       (r"40\%", "40"), ("1/3", "1/3"), ("1/0", None), ("eighteen", None),
                       ("7" * 300, None)):
        assert g8.boxed_number(text) == want, text
    assert g8.same_number("18", "18.0") and g8.same_number("1/2", "0.5")
    assert not g8.same_number("18", "18.01") and not g8.same_number(None, "1")


def test_boxed_reward_and_evaluation_check_on_real_rows():
    task = get(cfg(), style="chat")
    for row in task.split("test").to_list():
        gold = row["gold"]
        body = row["answer"].rsplit("####", 1)[0]
        wrong = str(int(gold) + 1)
        # planted right and wrong answers in the study's format: 1.0 and 0.1
        assert task.verify(f"{body}\nSo the answer is \\boxed{{{gold}}}.", row) == Verdict(
            1.0, 1.0, 1.0, True, gold)
        assert task.verify(f"{body}\n\\boxed{{{wrong}}}", row) == Verdict(0.1, 1.0, 0.0, False, wrong)
        # no boxed answer: reward 0, but the evaluation fallback still reads #### / "answer is"
        assert task.verify(f"{body}\n#### {gold}", row) == Verdict(0.0, 0.0, 0.0, True, gold)
        assert task.verify(f"The answer is {gold}.", row) == Verdict(0.0, 0.0, 0.0, True, gold)
        assert task.verify(body, row) == Verdict(0.0, 0.0, 0.0, False, None)  # null control
    row = task.split("test")[0]  # gold 18
    # the fallback's order: #### first, then the last boxed answer, then "answer is"
    assert task.verify(r"#### 17 but \boxed{18}", row) == Verdict(1.0, 1.0, 1.0, False, "17")
    assert task.verify(r"the answer is 17, \boxed{18}", row).correct
    assert task.verify(r"\boxed{18} no wait, the answer is 17", row).correct
    assert task.rewards([r"\boxed{18}", r"\boxed{19}", "18"], [row] * 3) == [1.0, 0.1, 0.0]


def test_hash_format_keeps_the_old_extractions():
    task = get(cfg(answer_format="hash"), style="chat")
    row = task.split("test")[0]
    gold = row["gold"]
    assert task.verify(f"... so\n#### {gold}", row) == Verdict(1.0, 1.0, 1.0, True, gold)
    assert task.verify(f"It is {gold}.", row) == Verdict(1.0, 0.0, 1.0, True, gold)
    assert task.verify(f"#### {int(gold) + 1} (maybe {gold})", row).correct is False
    strict = get(cfg(answer_format="hash", extraction="strict"), style="chat")
    assert strict.verify(f"It is {gold}.", row) == Verdict(0.0, 0.0, 0.0, False, None)
    assert g8.extract_strict("so #### 1,234.") == "1234" and g8.extract_strict("answer: 5") is None
    assert g8.extract_flexible("I paid $1,200.00 in total.") == "1200"
    assert g8.extract_flexible("It is 3.5, not 4") == "4" and g8.extract_flexible("none.") is None


def test_fallback_extraction_is_linear_on_hostile_text():
    for text in ("answer is" + " " * 200_000 + "x", "#### " + "1," * 100_000 + "x",
                 "\\boxed{" * 50_000, "answer is 1" + "0" * 100_000):
        t = time.perf_counter()
        g8.extract_answer(text)
        assert time.perf_counter() - t < 2.0


# ------------------------------------------------------------------------------ math-verify


def test_math_verify_off_or_absent(monkeypatch):
    monkeypatch.setattr(g8, "math_verify_available", lambda: False)
    with pytest.raises(ConfigError, match="math_verify=true needs the math-verify package"):
        get(cfg(math_verify=True))
    task = get(cfg(), style="chat")  # auto: not installed -> the fallback decides
    assert task.math_verify is False and task.verifier == "####/boxed/answer-is fallback"
    row = task.split("test")[0]
    assert [v.correct for v in task.verdicts(["$18$", r"\boxed{18}"], [row, row])] == [False, True]
    with pytest.raises(ConfigError, match="math_verify must be auto, true or false"):
        get(cfg(math_verify="yes"))


@needs_mv
def test_math_verify_decides_the_evaluation_when_installed():
    task = get(cfg(math_verify=True), style="chat")
    assert task.math_verify and task.verifier.startswith("math-verify")
    assert get(cfg(), style="chat").math_verify  # auto: installed -> used
    row = task.split("test")[0]  # gold 18
    comps = ["$18$", "$17$", r"so \boxed{\frac{36}{2}}", r"\boxed{19}", "no answer at all",
             "#### 18"]
    fast = [task.verify(c, row).correct for c in comps]
    full = [v.correct for v in task.verdicts(comps, [row] * len(comps))]
    # "$18$" has no ####, boxed or "answer is": the fallback misses it, math-verify reads it
    assert fast == [False, False, True, False, False, True]
    assert full == [True, False, True, False, False, True]
    # rewards never change (training does not run math-verify)
    assert [v.reward for v in task.verdicts(comps, [row] * len(comps))] == \
        [task.verify(c, row).reward for c in comps]
    # split over several subprocesses, the verdicts keep their order
    golds = [str(i) for i in range(70)]
    preds = [f"$ {i if i % 3 else i + 1} $" for i in range(70)]
    assert g8.math_verify_batch(golds, preds, timeout=5, workers=3) == [i % 3 != 0 for i in range(70)]


# ------------------------------------------------------------------------------ bad input


def _folder(tmp_path, train, test):
    d = tmp_path / "gsm"
    d.mkdir(exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_bad_input_names_file_row_and_field(tmp_path, monkeypatch):
    good = lines(SAMPLE / "test.jsonl")[:3]
    cases = [
        ({"answer": "#### 2"}, "field 'question' must be a non-empty string"),
        ({"question": "q?", "answer": "no gold here"}, "field 'answer' must end in '#### <number>'"),
        ({"question": "q?", "answer": "1+1\n#### two"}, "field 'answer' must end in '#### <number>', got ...'two'"),
        ({"question": "q?", "answer": 5}, "field 'answer' must be a string"),
    ]
    for bad, msg in cases:
        d = _folder(tmp_path, good, good[:1] + [bad] + good[1:])
        with pytest.raises(ConfigError, match=f"^{d / 'test.jsonl'}: row 1: " + msg.replace("(", r"\(")) as e:
            get({"name": "gsm8k", "source": str(d)}).split("test")
        assert "\n" not in str(e.value)
    d = _folder(tmp_path, good, good)
    (d / "test.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"has no test\.jsonl, test\.json or test\.parquet"):
        get({"name": "gsm8k", "source": str(d)}).split("test")
    with pytest.raises(ConfigError, match="answer_format must be boxed or hash"):
        get(cfg(answer_format="latex"))
    with pytest.raises(ConfigError, match="n_test must be null or an integer >= 1"):
        get(cfg(n_test=0))

    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match=r"task gsm8k: cannot load 'esopt-no-such/gsm8k' \(split 'test'\)") as e:
        get({"name": "gsm8k", "source": "esopt-no-such/gsm8k"}).split("test")
    assert "\n" not in str(e.value)


def test_cli_bad_row_exits_2_before_any_run(tmp_path):
    good = lines(SAMPLE / "train.jsonl")[:12]
    d = _folder(tmp_path, good, good[:4] + [{"question": "q?", "answer": "#### x"}])
    root = tmp_path / "results"
    p = cli("esopt.sweep", "model=tiny-xs", "task=gsm8k", f"task.source={d}",
                f"sweep.root={root}", "algo=es", timeout=300)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"esopt: error: {d / 'test.jsonl'}: row 4: field 'answer' must end in '#### <number>', "
        "got ...'x'"]
    assert not root.exists() or not any(root.rglob("summary.json"))


def test_empty_split_after_carving_is_a_config_error(tmp_path):
    from helpers import run_config

    good = lines(SAMPLE / "train.jsonl")[:12]
    d = _folder(tmp_path, good, good[:4])
    args = ["model=tiny-xs", "task=gsm8k", f"task.source={d}", "task.n_heldout=12"]
    with pytest.raises(ConfigError) as e:  # all 12 train rows held out: nothing to train on
        run_config(*args, "algo=es")
    assert str(e.value) == (f"task gsm8k: the train split is empty (source={d}, n_train=None, "
                            "n_test=None, n_heldout=12); held-out rows are carved from train and rows that "
                            "repeat earlier ones are dropped")
    assert run_config(*args, "algo=none").task["n_heldout"] == 12  # evaluating only: fine
    with pytest.raises(ConfigError, match="the heldout split is empty"):
        run_config("model=tiny-xs", "task=gsm8k", f"task.source={d}", "task.n_heldout=0",
                   "eval.split=heldout")


# ------------------------------------------------------------------------------ offline first


def _no_cache(monkeypatch, tmp_path):
    import datasets
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")


def test_an_unreachable_hub_fails_validation_in_seconds_naming_task_source(monkeypatch, tmp_path):
    """task=gsm8k without task.source where the hub cannot be reached: one line at validation,
    in seconds (datasets alone retries for about 25 s), naming task.source= and the files."""
    import datasets
    import huggingface_hub

    from helpers import run_config

    _no_cache(monkeypatch, tmp_path)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "https://esopt-unreachable.invalid")  # RFC 2606
    t = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        run_config("model=tiny-xs", "task=gsm8k", "algo=none")
    assert time.perf_counter() - t < 10
    msg = str(e.value)
    assert msg.startswith("task gsm8k: cannot fetch 'openai/gsm8k' from the hub (https://esopt-unreachable.invalid: ")
    assert "task.source=<path> (a folder holding train.jsonl and test.jsonl" in msg and "'#### <number>'" in msg
    assert "\n" not in msg


def test_offline_mode_names_task_source_too(monkeypatch, tmp_path):
    import datasets

    _no_cache(monkeypatch, tmp_path)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match=r"^task gsm8k: cannot load 'openai/gsm8k' \(split 'test'\): .*; give "
                                          r"the data as a local copy: task\.source=<path> \(a folder holding "
                                          r"train\.jsonl and test\.jsonl"):
        get({"name": "gsm8k"}).split("test")


# ------------------------------------------------------------------------------ math-verify's parser


@needs_mv
def test_math_verify_latex_parser_is_importable_and_parses():
    """What `pip install -e ".[math]"` must bring: math-verify with an antlr4 runtime its LaTeX
    parser (latex2sympy2_extended) supports, so LaTeX answers are read, not silently skipped."""
    import sympy
    from latex2sympy2_extended import latex2sympy
    from math_verify import parse, verify

    assert g8.math_verify_problem() is None
    assert latex2sympy(r"\frac{3}{4}") == sympy.Rational(3, 4)
    assert verify(parse("$\\frac{1}{2}$"), parse("The answer is $\\boxed{0.5}$"))


def test_math_verify_missing_or_broken_is_one_warning_not_silence(monkeypatch, capsys):
    monkeypatch.setattr(g8, "_MV_PROBLEM", ["math-verify is installed but cannot load its LaTeX parser "
                                            "(ImportError: Unsupported ANTLR version 4.7.2)"])
    monkeypatch.setattr(g8, "_MV_WARNED", [])
    with pytest.raises(ConfigError, match=r"math_verify=true needs the math-verify package .*: math-verify is "
                                          r"installed but cannot load its LaTeX parser \(ImportError"):
        get(cfg(math_verify=True))
    tasks = [get(cfg(), style="chat") for _ in range(2)]  # auto: the fallback decides, said once
    assert not any(t.math_verify for t in tasks)
    err = capsys.readouterr().err.splitlines()
    assert err == ["esopt: warning: math-verify is installed but cannot load its LaTeX parser (ImportError: "
                   "Unsupported ANTLR version 4.7.2); task gsm8k checks answers with its fallback extraction "
                   "only (pip install 'esopt[math]'; task.math_verify=false silences this)"]
    assert not get(cfg(math_verify=False)).math_verify and capsys.readouterr().err == ""
