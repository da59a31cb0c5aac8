"""Forgetting probes (eval.probes): the probe tasks, the evaluator's probe_* keys, the summary's
base/final/min probe Pass@1 and curve, the runs table's columns, validation and the floor warning."""

import json
from dataclasses import replace

import pytest
import torch

from esopt import engines, tasks
from esopt.core.config import EvalConfig
from esopt.core.errors import ConfigError
from esopt.evaluator import PROBE_FLOOR, evaluate, evaluate_config, format_table, probe_floor_warnings, probe_scores
from esopt.models import char_tokenizer
from helpers import cli, random_model, run_config

torch.set_num_threads(1)

SMALL = {"n_test": 12, "n_heldout": 4}


def probe_tasks(ev, tokenizer, style):
    """The eval block's probes built by name, as a run builds them from its plan's probe_specs."""
    return {p["name"]: tasks.get(p, tokenizer=tokenizer, style=p.get("style") or style) for p in ev.probes}


# --- the probe tasks (no model) ------------------------------------------------------------------
@pytest.mark.parametrize("name, right, wrong", [
    ("copy", " {w}\n", " {w}x"), ("upper", " {W}", " {w}"), ("first_letter", " {f}", " {w}"),
])
def test_word_probes_verify_the_transformed_word(name, right, wrong):
    task = tasks.get({"name": name, **SMALL})
    rows = task.split("test").to_list()
    assert task.style == "compact" and len(rows) == 12
    assert len({r["question"] for r in rows}) == 12  # distinct problems
    held = {r["question"] for r in task.split("heldout").to_list()}
    assert not held & {r["question"] for r in rows}  # disjoint splits
    r = rows[0]
    word = r["question"].split()[-1].rstrip("?")
    fill = {"w": word, "W": word.upper(), "f": word[0]}
    assert task.verify(right.format(**fill), r).correct
    assert not task.verify(wrong.format(**fill), r).correct
    assert r["prompt"].startswith("Q: ") and r["prompt"].endswith(f"Q: {r['question']}\nA:")
    assert r["prompt"].count("\nA: ") == 3  # three answered examples before the question
    assert task.stop == ["\n"]


def test_successor_probe_and_its_chat_style():
    task = tasks.get({"name": "successor", **SMALL, "style": "chat"})
    r = task.split("test")[0]
    n = int(r["question"].split("?")[0].split()[-1])
    assert r["answer"] == str(n + 1) and task.style == "chat"
    assert task.verify(f"The answer is {n + 1}.", r).correct and not task.verify(str(n), r).correct
    assert r["prompt"].startswith("User: ")  # no tokenizer: the plain-text chat rendering


# --- the evaluator (a random model: a spread of per-problem success, no pretraining) ------------
@pytest.fixture(scope="module")
def engine():
    tok = char_tokenizer()
    return engines.get({"name": "hf", "device": "cpu", "max_batch": 32}, random_model(tok), tok)


def test_probes_are_evaluated_beside_the_task_with_their_own_settings(engine):
    """Each probe is one more evaluation with the probe settings (samples, problems, split, no
    greedy): probe_<name> is its Pass@1, probe_pass1 the mean; the run's task is untouched."""
    task = tasks.get({"name": "compare", **SMALL}, tokenizer=engine.tokenizer, style="compact")
    ev = EvalConfig(problems=4, samples=2, temperature=1.0, greedy=False)
    plain = evaluate_config(ev, engine, task)
    assert not any(k.startswith("probe") for k in plain)  # null control: no probes, no keys
    ev = replace(ev, probes=({"name": "addition", **SMALL}, {"name": "reverse", **SMALL}),
                 probe_split="heldout", probe_problems=3, probe_samples=5)
    probes = probe_tasks(ev, engine.tokenizer, "compact")
    assert list(probes) == ["addition", "reverse"]
    r = evaluate_config(ev, engine, task, probes=probes)
    direct = {name: evaluate(engine, t, split="heldout", problems=3, samples=5, temperature=1.0, seed=0,
                             greedy=False, entropy=False) for name, t in probes.items()}
    for name, d in direct.items():
        assert r[f"probe_{name}"] == d["pass@k"]["1"] and r[f"probe_{name}_ci"] == d["pass@k_ci"]["1"]
    assert r["probe_names"] == ["addition", "reverse"]
    assert r["probe_pass1"] == pytest.approx((r["probe_addition"] + r["probe_reverse"]) / 2)
    assert r["tokens_generated"] == plain["tokens_generated"] + sum(d["tokens_generated"] for d in direct.values())
    assert r["pass@k"] == plain["pass@k"] and r["correct_counts"] == plain["correct_counts"]
    assert "forgetting probes (Pass@1):" in format_table(r)
    json.dumps(r)
    with pytest.raises(ValueError, match="eval.probes is set but its tasks were not given"):
        evaluate_config(ev, engine, task)


def test_a_text_probe_is_scored_by_likelihood(engine):
    """passages: no generation; its Pass@1 is the top-1 next-token accuracy over the passages'
    tokens and loglik the mean log probability per token, as one forward pass computes them."""
    from esopt.evaluator import evaluate_likelihood

    task = tasks.get({"name": "passages"}, tokenizer=engine.tokenizer, style="compact")
    test, held = task.split("test").to_list(), task.split("heldout").to_list()
    assert len(test) >= 10 and not {r["prompt"] for r in test} & {r["prompt"] for r in held}
    r = evaluate_likelihood(engine, task, split="test", problems=3)
    n = hits = 0
    logp_sum = 0.0
    for row in test[:3]:
        ids = torch.tensor([engine.tokenizer(row["prompt"])["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(engine.model(input_ids=ids).logits[0, :-1].float(), -1)
        target = ids[0, 1:]
        n += len(target)
        hits += int((logp.argmax(-1) == target).sum())
        logp_sum += float(logp.gather(-1, target[:, None]).sum())
    assert r["n_problems"] == 3 and r["tokens_scored"] == n and r["tokens_generated"] == 0
    assert r["pass@k"]["1"] == pytest.approx(hits / n) and r["loglik"] == pytest.approx(logp_sum / n, rel=1e-5)
    assert r["pass@k_ci"]["1"][0] <= r["pass@k"]["1"] <= r["pass@k_ci"]["1"][1] and r["loglik"] < 0
    ev = EvalConfig(problems=2, samples=2, greedy=False, probes=({"name": "passages"},), probe_problems=3)
    out = evaluate_config(ev, engine, tasks.get({"name": "compare", **SMALL}, style="compact"),
                          probes=probe_tasks(ev, engine.tokenizer, "compact"))
    assert out["probe_passages"] == r["pass@k"]["1"] and out["probe_passages_loglik"] == r["loglik"]
    assert f"log-lik {r['loglik']:.3f} nats/token" in format_table(out)


def test_probe_scores_read_base_final_and_min_over_the_evaluations():
    def ev(a, b):
        return {"probe_names": ["a", "b"], "probe_a": a, "probe_b": b, "probe_pass1": (a + b) / 2}

    s = probe_scores([(0, ev(0.8, 0.6)), (5, ev(0.4, 0.4)), (10, ev(0.6, 0.6))])
    assert (s["base_probe_pass1"], s["final_probe_pass1"], s["min_probe_pass1"]) == (0.7, 0.6, 0.4)
    assert s["probe_curve"] == {"a": {"0": 0.8, "5": 0.4, "10": 0.6}, "b": {"0": 0.6, "5": 0.4, "10": 0.6},
                                "mean": {"0": 0.7, "5": 0.4, "10": 0.6}}
    assert probe_scores([(0, ev(0.2, 0.4))])["min_probe_pass1"] == pytest.approx(0.3)  # base counts
    assert probe_scores([(0, {"pass@1": 0.5})]) == {}  # a run without probes: no keys


def test_floor_warning_names_the_probe_and_its_score():
    r = {"probe_names": ["copy", "upper"], "probe_copy": 0.86, "probe_upper": 0.12}
    (line,) = probe_floor_warnings(r)
    assert "upper" in line and "0.120" in line and f"< {PROBE_FLOOR:g}" in line and "\n" not in line
    assert probe_floor_warnings({"pass@1": 0.0}) == []


# --- a run end to end ------------------------------------------------------------------------------
def test_a_run_records_its_probe_curve_and_the_runs_table_has_the_three_keys(results_root):
    """Runs the tiny-xs model through ES (two iterations, an evaluation each): the subject is
    what a run records at every evaluation, which only a run writes. compare is a task tiny-xs
    was pretrained on (above the floor), reverse one it is at the floor on: its warning is one
    line and the run completes."""
    from esopt.study import tables

    args = ["model=tiny-xs", "algo=es", "pop=2", "iterations=2", "es.batch_size=4", "eval.every=1",
            "eval.problems=4", "eval.samples=2", "eval.probes=[compare,addition]", "eval.probe_problems=8",
            "eval.probe_samples=2", f"sweep.root={results_root}", "sweep.aggregate=false"]
    proc = cli("esopt.sweep", *args)
    assert proc.returncode == 0, proc.stderr
    (summary,) = (results_root / "default" / "runs").glob("*/summary.json")
    s = json.loads(summary.read_text())
    lines = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if x["kind"] == "eval"]
    assert [x["iteration"] for x in evals] == [0, 1, 2]
    means = [x["probe_pass1"] for x in evals]
    assert means == [(x["probe_compare"] + x["probe_addition"]) / 2 for x in evals]
    assert s["base_probe_pass1"] == means[0] == s["base"]["probe_pass1"]
    assert s["final_probe_pass1"] == means[-1] == s["final"]["probe_pass1"]
    assert s["min_probe_pass1"] == min(means)
    assert s["probe_curve"]["compare"] == {str(x["iteration"]): x["probe_compare"] for x in evals}
    assert s["base"]["probe_compare"] >= PROBE_FLOOR  # tiny-xs compares well
    warned = [x for x in proc.stderr.splitlines() if "eval.probes" in x]
    assert warned == [x for x in warned if x.startswith("esopt: warning:")]
    assert ("addition" in " ".join(warned)) == (s["base"]["probe_addition"] < PROBE_FLOOR)
    assert not any("compare" in x for x in warned)
    row = tables.load(results_root / "default").runs.set_index("run_id").loc[s["run_id"]]
    for key in ("base_probe_pass1", "final_probe_pass1", "min_probe_pass1"):
        assert row[key] == s[key]
    assert row["probe_curve.compare.1"] == evals[1]["probe_compare"]


# --- validation and run ids -------------------------------------------------------------------------
TINY = ("model=tiny-xs", "algo=es", "iterations=2", "pop=2", "es.batch_size=4", "eval.problems=4")


@pytest.mark.parametrize("override, message", [
    ("eval.probes=[copy,nonsense]", "unknown eval.probes task 'nonsense'"),
    ("eval.probes=[countdown]", "eval.probes names the training task 'countdown'"),
    ("eval.probes=[copy,copy]", "eval.probes names a task twice"),
    ("eval.require_probes=true", "has no held-out probes and eval.require_probes is set"),
    ("eval.probe_samples=0", "eval.probe_samples must be >= 1"),
    ("eval.probe_split=dev", "eval.probe_split must be one of"),
    ("engine=vllm eval.probes=[passages]", "passages is scored by likelihood, which engine vllm cannot do"),
    ("task=passages", "task passages is scored by likelihood"),
])
def test_bad_probe_settings_are_one_error_line_before_dispatch(override, message):
    with pytest.raises(ConfigError, match=message):
        run_config(*TINY, *override.split(), check_data=False)


def test_a_probe_split_too_small_is_caught_with_the_data(results_root):
    with pytest.raises(ConfigError, match="eval.probe_problems=20 exceeds the test split of probe copy"):
        run_config(*TINY, "eval.probes=[{name: copy, n_test: 10}]", "eval.probe_problems=20")


def test_the_sweep_stops_an_unknown_probe_with_exit_2_and_no_run(results_root):
    proc = cli("esopt.sweep", *TINY, "eval.probes=[nonsense]", f"sweep.root={results_root}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line
    assert proc.stderr.startswith("esopt: error: unknown eval.probes task 'nonsense'")
    assert not (results_root / "default" / "runs").exists()


def test_runs_without_probes_keep_their_ids_and_probes_change_them():
    from esopt.runtime.validate import identity, run_id

    plain = run_config(*TINY, check_data=False)
    assert not any("probe" in k for k in identity(plain)["eval"])
    assert run_id(run_config(*TINY, "eval.probes=[]", "eval.probe_samples=8", check_data=False)) == run_id(plain)
    checked = run_config(*TINY, "eval.probes=[copy]", "eval.require_probes=true", check_data=False)
    with_probes = run_config(*TINY, "eval.probes=[copy]", check_data=False)
    assert run_id(checked) == run_id(with_probes) != run_id(plain)  # a check is not what is measured
    assert with_probes.eval.probes[0]["style"] == "compact" and with_probes.eval.probe_problems == 200


def test_the_token_estimate_counts_generated_probes_and_not_text_ones():
    from esopt.runtime.budget import estimate_tokens, n_evaluations

    plain = run_config(*TINY, check_data=False)
    copy = run_config(*TINY, "eval.probes=[copy,passages]", check_data=False)
    # copy: 200 problems x 4 samples x its 16-token budget per evaluation; passages generates nothing
    assert estimate_tokens(copy) - estimate_tokens(plain) == (1 + n_evaluations(plain)) * 200 * 4 * 16
