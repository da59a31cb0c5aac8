"""task=math: MATH / MATH-500 / AIME / AMC rows from jsonl, json and parquet (and MATH's answer
inside its solution), the split rules, the study's boxed reward (1 / 0.1 / 0), math-verify
deciding the evaluation and the exact fallback without it, named benchmarks, eval.ood_task, an
evaluation of tiny-xs through the shared evaluator, and bad input (one line, exit 2).

Data: tests/data/math (20 problems in MATH-500's format, 10 in an AIME file's, written for
esopt; see tests/data/README.md). Hub benchmarks need the network: only their resolution (no
data) and their offline error are tested here."""

import json

import pytest
from helpers import cli, REPO, run_cli, run_config

from esopt.core.errors import ConfigError
from esopt.tasks import get, gsm8k, resolved
from esopt.tasks import math as mt

DATA = REPO / "tests" / "data" / "math"
M500 = DATA / "math500_sample.jsonl"
AIME = DATA / "aime_sample.json"
needs_mv = pytest.mark.skipif(not mt.math_verify_available(),
                              reason="math-verify is not installed (pip install 'esopt[math]')")


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def task(source=M500, style="chat", **kw):
    return get({"name": "math", "source": str(source), **kw}, style=style)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def math_format(rows):
    """MATH's own columns (problem, level "Level N", type, solution; no answer column)."""
    return [{"problem": r["problem"], "level": f"Level {r['level']}", "type": r["subject"],
             "solution": r["solution"]} for r in rows]


# ------------------------------------------------------------------------------ loading


def test_each_file_format_loads_with_its_columns(tmp_path):
    m500 = lines(M500)
    t = task()
    rows = t.split("test").to_list()
    assert len(rows) == 20 and not t.split("train") and not t.split("heldout")
    assert [r["gold"] for r in rows] == [r["answer"] for r in m500]
    assert [(r["problem"], r["level"], r["subject"], r["unique_id"]) for r in rows] == \
        [(r["problem"], r["level"], r["subject"], r["unique_id"]) for r in m500]
    assert rows[0]["id"] == "math/test/0"

    aime = json.loads(AIME.read_text())  # a JSON array: ID / Problem / Solution / Answer (ints)
    a = task(AIME, style="compact").split("test").to_list()
    assert [r["gold"] for r in a] == [str(x["Answer"]) for x in aime]
    assert [r["unique_id"] for r in a] == [x["ID"] for x in aime] and a[0]["level"] is None
    assert a[3]["prompt"] == f"Q: {aime[3]['Problem']}\nA:"

    import datasets

    pq = tmp_path / "m500.parquet"
    datasets.Dataset.from_list(m500).to_parquet(str(pq))
    assert task(pq).split("test").to_list() == rows

    # MATH: the gold is the last \boxed{} of the solution (nested braces kept), levels "Level N"
    m = task(write_jsonl(tmp_path / "math.jsonl", math_format(m500))).split("test").to_list()
    assert [r["gold"] for r in m] == [r["answer"] for r in m500]
    assert [r["level"] for r in m] == [r["level"] for r in m500]
    assert [r["subject"] for r in m] == [r["subject"] for r in m500]
    # AMC-style rows: 'question' and a float answer; OlympiadBench's one-item final_answer list
    amc = write_jsonl(tmp_path / "amc.jsonl", [{"id": 0, "question": "q0?", "answer": 27.0},
                                               {"id": 1, "question": "q1?", "answer": 2.5}])
    assert [r["gold"] for r in task(amc).split("test").to_list()] == ["27", "2.5"]
    ob = write_jsonl(tmp_path / "ob.jsonl", [{"question": "q?", "final_answer": ["$\\frac{1}{3}$"]}])
    assert task(ob).split("test")[0]["gold"] == "\\frac{1}{3}"


def test_levels_filter_both_spellings(tmp_path):
    m500 = lines(M500)
    hard = [r["answer"] for r in m500 if r["level"] >= 3]
    assert 0 < len(hard) < 20
    for source in (M500, write_jsonl(tmp_path / "math.jsonl", math_format(m500))):
        got = task(source, levels=[3, 4, 5]).split("test").to_list()
        assert [r["gold"] for r in got] == hard and {r["level"] for r in got} == {3, 4, 5}
    with pytest.raises(ConfigError, match=r"has 0 problems of levels \[6\]; n_train=0"):
        task(levels=[6]).split("test")
    with pytest.raises(ConfigError, match="levels must be a list of levels"):
        task(levels=3)


# ------------------------------------------------------------------------------ splits


def test_one_split_sources_are_carved_by_position():
    m500 = [r["problem"] for r in lines(M500)]
    t = task(n_train=5, n_heldout=3, n_test=4)
    got = {s: [r["problem"] for r in t.split(s).to_list()] for s in ("train", "test", "heldout")}
    assert got == {"train": m500[:5], "test": m500[5:9], "heldout": m500[17:]}
    assert len(task(n_train=5, n_heldout=3).split("test")) == 12
    with pytest.raises(ConfigError, match=r"has 20 problems; n_train=15 \+ n_heldout=5 leaves no test"):
        task(n_train=15, n_heldout=5).split("test")


def test_two_split_sources_hold_out_a_seeded_draw_and_stay_disjoint(tmp_path):
    m500 = lines(M500)
    d = tmp_path / "folder"
    d.mkdir()
    # train repeats a test problem (dropped) and one of its own rows (dropped once)
    write_jsonl(d / "train.jsonl", math_format(m500[:14] + m500[15:16] + m500[3:4]))
    write_jsonl(d / "test.jsonl", m500[15:])
    t = task(d, train_split="train", n_heldout=4, seed=1)
    assert t.cfg["test_split"] == "test" and t.cfg["n_train"] is None
    parts = {s: [r["problem"] for r in t.split(s).to_list()] for s in ("train", "test", "heldout")}
    assert parts["test"] == [r["problem"] for r in m500[15:]]
    pool = {r["problem"] for r in m500[:14]}  # the 16 train rows hold 14 new problems
    assert 3 <= len(parts["heldout"]) <= 4 and set(parts["heldout"] + parts["train"]) == pool
    everything = sum(parts.values(), [])
    assert len(set(everything)) == len(everything) == 19
    again = task(d, train_split="train", n_heldout=4, seed=1)
    assert [r["problem"] for r in again.split("heldout").to_list()] == parts["heldout"]
    other = task(d, train_split="train", n_heldout=4, seed=2)
    assert [r["problem"] for r in other.split("heldout").to_list()] != parts["heldout"]
    assert len(task(d, train_split="train", n_heldout=4, n_train=3).split("train")) == 3
    with pytest.raises(ConfigError, match="a file has no splits"):
        task(M500, train_split="train")


def test_benchmarks_resolve_without_reading_data():
    r = resolved({"name": "math"})  # the default: MATH-500, evaluated whole
    assert (r["source"], r["test_split"], r["train_split"], r["n_train"], r["n_heldout"]) == \
        ("math500", "test", None, 0, 0)
    r = resolved({"name": "math", "source": "math_l3_5"})
    assert r["levels"] == [3, 4, 5] and r["train_split"] == "train" and r["n_heldout"] == 500
    assert r["hub_config"] == mt.BENCHMARKS["math_l3_5"].config and r["n_train"] is None
    assert resolved({"name": "math", "source": "aime24"})["test_split"] == "train"  # its only split
    assert resolved({"name": "math", "source": "math_l3_5", "levels": [5]})["levels"] == [5]
    assert resolved({"name": "math", "source": "someone/math-set"})["test_split"] == "test"
    with pytest.raises(ConfigError, match=r"^task math: unknown benchmark 'math501' \(known: math500, "):
        resolved({"name": "math", "source": "math501"})


# ------------------------------------------------------------------------------ reward


def test_prompt_budget_and_the_study_reward():
    t = task()
    assert mt.SYSTEM_BOXED == "Please reason step by step, and put your final answer within \\boxed{}."
    row = t.split("test")[1]  # gold \frac{3}{4}
    assert row["prompt"].startswith(f"System: {mt.SYSTEM_BOXED}\nUser: {row['problem']}")
    assert t.max_new_tokens == get({"name": "gsm8k"}, style="chat").max_new_tokens == 2048
    assert task(style="compact").max_new_tokens == 256 and task(style="compact").stop == ["\nQ:"]
    cases = [  # completion, reward
        ("so the answer is \\boxed{\\frac{3}{4}}.", 1.0),
        ("\\boxed{0.75}", 1.0), ("\\boxed{\\dfrac{3}{4}}", 1.0), ("\\boxed{3/4}", 1.0),
        ("first \\boxed{1} then \\boxed{\\frac34}", 1.0),  # the last boxed answer counts
        ("\\boxed{\\frac{4}{3}}", 0.1), ("\\boxed{}", 0.1),   # boxed but wrong
        ("the answer is 3/4", 0.0), ("\\boxed{\\frac{3}{4}", 0.0), ("", 0.0),  # unboxed / unclosed
    ]
    got = [t.verify(c, row) for c, _ in cases]
    assert [v.reward for v in got] == [r for _, r in cases]
    assert [v.format for v in got] == [1.0] * 7 + [0.0] * 3
    assert [v.correct for v in got] == [r == 1.0 for _, r in cases]
    assert got[0].extracted == got[1].extracted == "0.75"  # majority votes pool equal answers
    assert t.rewards([c for c, _ in cases], [row] * len(cases)) == [r for _, r in cases]


def test_exact_fallback_on_every_answer_kind():
    t = task()
    rows = t.split("test").to_list()
    right = {  # gold -> an equal answer written otherwise (exact after normalisation)
        "(1,2)": "( 1, 2 )", "2\\sqrt{2}": "2 \\sqrt{2}", "\\left( 3, \\frac{\\pi}{2} \\right)":
        "(3,\\dfrac{\\pi}{2})", "\\text{(B)}": "B", "25\\%": "25", "x^2 - x - 6": "x^2-x-6",
        "\\dfrac{5}{6}": "\\frac{5}{6}", "-1": "-1.0", "\\frac{1}{2}": "\\tfrac12", "2i": "$2i$",
    }
    wrong = {"(1,2)": "(2,1)", "2\\sqrt{2}": "\\sqrt{8}", "\\text{(B)}": "(C)", "2i": "2"}
    for r in rows:
        g = r["gold"]
        assert t.verify(f"\\boxed{{{g}}}", r).reward == 1.0 and t.verify(r["solution"], r).correct
        if g in right:
            assert t.verify(f"\\boxed{{{right[g]}}}", r).reward == 1.0, g
        if g in wrong:
            assert t.verify(f"\\boxed{{{wrong[g]}}}", r).reward == 0.1, g
    assert mt.normalize_answer("\\left( 3, \\dfrac{\\pi}{2} \\right).") == "(3,\\frac{\\pi}{2})"
    assert mt.same_answer("33", "033") and not mt.same_answer(None, "1") and not mt.same_answer("", "")


# ------------------------------------------------------------------------------ evaluation


@needs_mv
def test_math_verify_decides_the_evaluation():
    t = task(math_verify=True)
    assert t.math_verify and t.verifier == "math-verify + last-boxed exact fallback"
    rows = {r["gold"]: r for r in t.split("test").to_list()}
    cases = [  # gold, completion, fallback says, math-verify says
        ("\\frac{1}{2}", "\\boxed{0.5}", True, True),
        ("\\frac{1}{2}", "\\boxed{\\dfrac12}", True, True),
        ("2\\sqrt{2}", "\\boxed{\\sqrt{8}}", False, True),
        ("x^2 - x - 6", "\\boxed{-6 - x + x^2}", False, True),
        ("(1,2)", "\\boxed{(2,1)}", False, False),
        ("\\text{(B)}", "\\boxed{\\textbf{(B)}}", True, True),
        ("25\\%", "\\boxed{25}", True, False),   # math-verify keeps the percent sign
        ("42", "I think it is 42", False, True),  # the study's extraction reads plain numbers too
        ("42", "no idea", False, False),          # math-verify finds nothing: the fallback decides
    ]
    comps, rs = [c for _, c, _, _ in cases], [rows[g] for g, _, _, _ in cases]
    fast, full = [t.verify(c, r) for c, r in zip(comps, rs)], t.verdicts(comps, rs)
    assert [v.correct for v in fast] == [f for _, _, f, _ in cases]
    assert [v.correct for v in full] == [m for _, _, _, m in cases]
    assert [v.reward for v in full] == [v.reward for v in fast]  # training's reward is unchanged
    golds = ["$\\frac{1}{2}$", "$2\\sqrt{2}$"] * 40  # batched over subprocesses, order kept
    preds = ["\\boxed{0.5}", "\\boxed{\\sqrt{7}}"] * 40
    assert gsm8k.math_verify_batch(golds, preds, 5, workers=2, gold_format="latex") == [True, False] * 40


def test_fallback_decides_without_math_verify(monkeypatch):
    monkeypatch.setattr(mt, "math_verify_available", lambda: False)
    with pytest.raises(ConfigError, match="math_verify=true needs the math-verify package"):
        task(math_verify=True)

    def no_call(*a, **k):
        raise AssertionError("math-verify called without being available")

    monkeypatch.setattr(mt, "math_verify_batch", no_call)
    t = task()
    assert t.math_verify is False and t.verifier == "last-boxed exact fallback"
    rows = {r["gold"]: r for r in t.split("test").to_list()}
    comps = ["\\boxed{0.5}", "\\boxed{\\sqrt{8}}", "\\boxed{B}", "\\boxed{(2,1)}"]
    rs = [rows[g] for g in ("\\frac{1}{2}", "2\\sqrt{2}", "\\text{(B)}", "(1,2)")]
    assert [v.correct for v in t.verdicts(comps, rs)] == [True, False, True, False]
    assert task(math_verify=False).math_verify is False
    with pytest.raises(ConfigError, match="math_verify must be auto, true or false"):
        task(math_verify="yes")


def test_evaluate_tiny_xs_with_an_ood_benchmark(tmp_path):
    """python -m esopt.evaluate on a benchmark file evaluated whole (no train rows: the
    evaluation entry point validates as algo=none), with an AIME file as eval.ood_task."""
    out = tmp_path / "eval.json"
    p = run_cli("esopt.evaluate", "model=tiny-xs", "task=math", f"task.source={M500}",
                "task.math_verify=false", "eval.greedy=false", "eval.problems=4", "eval.samples=2",
                "eval.max_new_tokens=24", f"eval.out={out}",
                f"eval.ood_task={{name:math,source:{AIME}}}", "eval.ood_problems=3", timeout=300)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert (r["task"], r["split"], r["n_problems"], r["samples"]) == ("math", "test", 4, 2)
    assert r["verifier"] == "last-boxed exact fallback" and r["greedy"] is None
    assert len(r["correct_counts"]) == 4 and all(0 <= c <= 2 for c in r["correct_counts"])
    assert r["pass@k"]["1"] == pytest.approx(sum(r["correct_counts"]) / 8)
    assert (r["ood_task"], r["ood_n_problems"]) == ("math", 3) and set(r["ood_pass@k"]) == {"1", "2"}
    assert "math / test: 4 problems x 2 samples" in p.stdout


def test_ood_task_takes_a_benchmark_or_a_file():
    rc = run_config("model=tiny-xs", "task=countdown", f"eval.ood_task={{name:math,source:{AIME}}}")
    assert rc.eval.ood_task["source"] == str(AIME) and rc.eval.ood_task["n_train"] == 0
    assert rc.eval.ood_problems == 100  # the eval block's default (the file has 10: all of them)
    rc = run_config("model=tiny-xs", "task=countdown", "eval.ood_task={name:math,source:aime24}",
                    check_data=False)
    assert rc.eval.ood_task["test_split"] == "train" and rc.eval.ood_task["n_heldout"] == 0
    with pytest.raises(ConfigError, match="unknown benchmark 'aime2024'"):
        run_config("model=tiny-xs", "eval.ood_task={name:math,source:aime2024}", check_data=False)


# ------------------------------------------------------------------------------ bad input


def test_bad_rows_name_the_file_and_row(tmp_path, monkeypatch):
    good = lines(M500)[:3]
    cases = [
        ({"problem": "q?", "solution": "no boxed answer"},
         "no 'answer' field (or 'Answer', 'final_answer') and no 'solution' with a \\boxed{} answer; "
         "fields: problem, solution"),
        ({"problem": "q?", "answer": "  "}, "no 'answer' field"),
        ({"answer": "1"}, "no 'problem' field (or 'Problem', 'question') with text; fields: answer"),
    ]
    for bad, msg in cases:
        f = write_jsonl(tmp_path / "bad.jsonl", good[:1] + [bad] + good[1:])
        with pytest.raises(ConfigError) as e:
            task(f).split("test")
        assert str(e.value).startswith(f"{f}: row 1: {msg}") and "\n" not in str(e.value)
    arr = tmp_path / "bad.json"
    arr.write_text(json.dumps([{"Problem": "q?", "Answer": 1}, {"Problem": "q2?"}]))
    with pytest.raises(ConfigError, match=rf"^{arr}: row 1: no 'answer' field"):
        task(arr).split("test")

    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match=r"^task math: cannot load 'HuggingFaceH4/MATH-500' "
                                          r"\(split 'test'\)") as e:
        task("math500").split("test")
    assert "\n" not in str(e.value)


def test_cli_bad_input_exits_2_before_any_run(tmp_path):
    rows = math_format(lines(M500))
    rows[7]["solution"] = "we stop here without an answer"
    f = write_jsonl(tmp_path / "math.jsonl", rows)
    root = tmp_path / "results"
    p = cli("esopt.sweep", "model=tiny-xs", "task=math", f"task.source={f}", "task.n_train=10",
                f"sweep.root={root}", "algo=es", timeout=300)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"esopt: error: {f}: row 7: no 'answer' field (or 'Answer', 'final_answer') and no "
        "'solution' with a \\boxed{} answer; fields: problem, level, type, solution"]
    assert not root.exists() or not any(root.rglob("summary.json"))
    p = cli("esopt.evaluate", "model=tiny-xs", "task=math", "task.source=amc22", timeout=300)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "esopt: error: task math: unknown benchmark 'amc22' (known: math500, math, math_l3_5, "
        "aime24, aime25, amc23; or a .jsonl / .json / .parquet file, a folder, or a hub dataset "
        "name owner/name)"]
