"""Sequential training on tiny-xs Countdown: grpo_es and es_grpo run both phases, record both
evaluations, carry the phase on every line, and a requeue skips a finished phase."""

import json

import pytest
import torch
from helpers import run_config

from esopt.algorithms import sequence
from esopt.core import store
from esopt.core.errors import ConfigError
from esopt.runtime.context import RunContext
from esopt.runtime.run import load_components, run
from esopt.runtime.validate import run_id

torch.set_num_threads(1)

SMALL = ["model=tiny-xs", "task=countdown", "engine.device=cpu", "iterations=4", "eval.problems=8",
         "eval.samples=4", "eval.every=2", "grpo.num_generations=4", "grpo.prompts_per_step=4",
         "pop=4", "es.batch_size=16"]


def config(results_root, *overrides):
    return run_config(*SMALL, f"sweep.root={results_root}", *overrides)


def lines(run_path, kind):
    out = [json.loads(x) for x in (run_path / "metrics.jsonl").read_text().splitlines()]
    return [x for x in out if x["kind"] == kind]


@pytest.mark.parametrize("total, split, expected", [
    (4, 0.5, (2, 2)), (5, 0.5, (3, 2)), (2, 0.1, (1, 1)), (10, 0.95, (9, 1)), (30, 0.2, (6, 24)),
])
def test_split_iterations(total, split, expected):
    assert sequence.split_iterations(total, split) == expected


def test_split_iterations_rejects_bad_input():
    with pytest.raises(ConfigError, match="iterations must be >= 2"):
        sequence.split_iterations(1, 0.5)
    with pytest.raises(ConfigError, match=r"sequence.split must be in \(0, 1\)"):
        sequence.split_iterations(10, 1.0)


@pytest.mark.parametrize("algo, first, second", [("grpo_es", "grpo", "es"), ("es_grpo", "es", "grpo")])
def test_sequence_runs_both_phases_and_records_both_evaluations(results_root, algo, first, second):
    rc = config(results_root, f"algo={algo}", "sweep.keep_checkpoints=true")  # the phases' checkpoints are read
    summary = run(rc)
    assert summary["status"] == "completed", summary["error"]
    path = store.RunDir.for_run(rc.sweep.root, rc.sweep.name, run_id(rc)).path
    train = lines(path, "train")
    assert [(t["phase"], t["iteration"]) for t in train] == [(first, 1), (first, 2), (second, 3), (second, 4)]
    totals = [t["tokens_total"] for t in train]
    assert totals == sorted(totals) and totals[0] > 0 and totals[2] > totals[1]
    assert summary["tokens_generated"] == totals[-1]
    evals = [(e["phase"], e["iteration"]) for e in lines(path, "eval")]
    assert evals == [("base", 0), (first, 2), (second, 4)]
    phases = summary["phases"]
    assert [(p["algo"], p["iterations"]) for p in phases] == [(first, 2), (second, 2)]
    for p in phases:
        assert 0.0 <= p["eval"]["pass@k"]["1"] <= p["eval"]["pass@k"]["4"] <= 1.0
        assert p["eval"]["entropy"] > 0
    assert summary["final"]["pass@k"] == phases[1]["eval"]["pass@k"]
    for k, name in ((1, first), (2, second)):
        done = json.loads((path / "checkpoint" / f"phase{k}-{name}" / "done.json").read_text())
        assert done["algo"] == name and done["eval"]["pass@k"] == phases[k - 1]["eval"]["pass@k"]
    # phase two starts from phase one's weights: they differ from the base, the final from both
    base = load_components(rc)[0]
    w = {k: dict(type(base).from_pretrained(path / "checkpoint" / f"phase{k}-{n}" / "final").named_parameters())
         for k, n in ((1, first), (2, second))}
    for a, b in ((dict(base.named_parameters()), w[1]), (w[1], w[2])):
        assert max((a[n] - b[n]).abs().max().item() for n in a) > 0


class Preempted(BaseException):
    """Stands in for the job being killed in the middle of phase two."""


def test_requeue_skips_the_finished_phase(results_root, tmp_path):
    rc = config(results_root, "algo=es_grpo")

    def context(path, stop_at=None):
        model, tok, engine, task = load_components(rc)
        rd = store.RunDir(path)
        rd.create(rc.to_dict())
        ctx = RunContext(rc, model, tok, engine, task, rd, phase=rc.algo, iterations=4)
        if stop_at is not None:
            real = store.RunDir.log

            class Dying(store.RunDir):
                def log(self, **line):
                    real(self, **line)
                    if line.get("kind") == "train" and line["iteration"] == stop_at:
                        raise Preempted
            ctx.run = Dying(path)
        return ctx

    straight = context(tmp_path / "straight")
    sequence.train(straight)
    first = context(tmp_path / "requeued", stop_at=3)  # dies in GRPO's first step
    with pytest.raises(Preempted):
        sequence.train(first)
    assert [p["algo"] for p in first.shared.phases] == ["es"]
    second = context(tmp_path / "requeued")
    sequence.train(second)

    train = lines(tmp_path / "requeued", "train")
    assert [(t["phase"], t["iteration"]) for t in train] == [("es", 1), ("es", 2), ("grpo", 3), ("grpo", 4)]
    assert [p["algo"] for p in second.shared.phases] == ["es", "grpo"]
    assert second.shared.phases[0]["eval"] == first.shared.phases[0]["eval"]  # from done.json
    assert second.tokens_total == straight.tokens_total
    a, b = dict(straight.model.named_parameters()), dict(second.model.named_parameters())
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
