"""Adding an algorithm is one file plus one registry line: this file is the toy algorithm (its
documented config block, its checks and its train function) and its registry line, and the
sweep runs it beside a registered algorithm (in process, tiny-xs, two iterations).

The toy scales every weight by ``1 + toy.step`` at each iteration: a change the test can
measure exactly in the saved weights."""

import json
import sys
from dataclasses import dataclass

import pytest
import torch
from helpers import run_config

from esopt import algorithms
from esopt.core.config import block
from esopt.core.errors import ConfigError


@dataclass
class ToyConfig:
    """The ``toy:`` block."""

    step: float = 0.01  # each iteration multiplies every weight by (1 + step); > -1


def validate(cfg) -> None:
    if not block(ToyConfig, cfg.block("toy"), "toy").step > -1:
        raise ConfigError(f"toy.step must be > -1, got {cfg.block('toy').get('step')}")


def train(ctx):
    """``ctx.iterations`` scalings; evaluations on the run's schedule (eval.every, the end)."""
    toy = block(ToyConfig, ctx.cfg.block("toy"), "toy")
    result = None
    for it in range(1, ctx.iterations + 1):
        with torch.no_grad():
            for p in ctx.model.parameters():
                p.mul_(1.0 + toy.step)
        ctx.engine.sync_from(ctx.model)
        ctx.log(kind="train", iteration=it, scale=(1.0 + toy.step) ** it)
        if ctx.eval_due(it):
            result = ctx.evaluate(it)
    return result


TOY = algorithms.Algorithm("toy", "scale the weights", sys.modules[__name__],
                           blocks=(algorithms.Block("toy", ToyConfig),), reads=("iterations",),
                           color="#8c564b", order=5)

TINY = ["model=tiny-xs", "eval.problems=4", "eval.samples=2", "eval.every=1", "task.n_train=32",
        "task.n_test=16", "task.n_heldout=16", "sweep.aggregate=false", "iterations=2"]


@pytest.fixture
def toy(monkeypatch):
    """The registry line, for this test only (the registry is restored afterwards)."""
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.setattr(algorithms, "ALGORITHMS", dict(algorithms.ALGORITHMS))
    algorithms.register(TOY)
    yield TOY
    GlobalHydra.instance().clear()  # an in-process sweep leaves Hydra initialized


def sweep(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """``python -m esopt.sweep <args>`` in this process (the toy is registered only here)."""
    from esopt.cli import sweep as cli

    monkeypatch.setattr(sys, "argv", ["esopt.sweep", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_entry_says_what_the_toy_reads(toy):
    assert toy.uses("toy.step") and toy.uses("iterations") and toy.uses("seed")
    assert not toy.uses("pop") and not toy.uses("es.batch_size") and not algorithms.get("es").uses("toy")
    assert "toy" in algorithms.blocks() and toy.trains
    base = run_config(*TINY, "algo=toy", check_data=False)
    assert toy.estimate_tokens(base.phases[0], 24) == 0 and toy.budgets(base) == (2,)  # it generates nothing
    assert base.blocks == {"toy": {"step": 0.01}}
    from esopt.runtime.validate import run_id

    same = [run_config(*TINY, "algo=toy", over, check_data=False) for over in ("es.batch_size=8", "pop=4")]
    assert {run_id(rc) for rc in same} == {run_id(base)}  # keys it does not read: the same run
    assert run_id(run_config(*TINY, "algo=toy", "toy.step=0.1", check_data=False)) != run_id(base)
    with pytest.raises(ConfigError, match=r"toy.step must be > -1"):
        run_config(*TINY, "algo=toy", "toy.step=-2", check_data=False)


def test_an_algorithm_without_checks_is_refused_not_skipped():
    import types

    bare = algorithms.Algorithm("bare", "no checks", types.SimpleNamespace(train=train))
    with pytest.raises(TypeError, match="'bare'.*declares no validate"):
        bare.validate(run_config(*TINY, "algo=none", check_data=False))


def test_bad_toy_keys_are_one_line_errors(toy, monkeypatch, capsys, tmp_path):
    for bad, needle in (("toy.nonsense=1", "unknown key 'toy.nonsense'"),
                        ("++toy.nonsense=1", "unknown toy key(s): nonsense"),
                        ("toy.step=-2", "toy.step must be > -1")):
        code, _, err = sweep(monkeypatch, capsys, "-m", *TINY, "algo=none,toy", bad, f"sweep.root={tmp_path}",
                             "sweep.dry_run=true")
        errors = [ln for ln in err.splitlines() if ln.startswith("esopt: error:")]
        assert code == 2 and len(errors) == 1 and needle in errors[0], err


def test_the_sweep_runs_the_toy_beside_a_registered_algorithm(toy, monkeypatch, capsys, tmp_path):
    code, out, err = sweep(monkeypatch, capsys, "-m", *TINY, "algo=none,toy", "toy.step=0.05", "es.batch_size=32",
                           f"sweep.root={tmp_path}", "sweep.name=toy")
    assert code == 0, err[-3000:]
    notes = [ln for ln in err.splitlines() if "no effect" in ln]
    assert notes == ["esopt: note: iterations, toy.step, es.batch_size have no effect with algo=none",
                     "esopt: note: es.batch_size has no effect with algo=toy"], err
    assert "2 runs: 2 completed" in out
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "toy" / "runs").glob("*/summary.json")]
    (s,) = [s for s in summaries if s["algo"] == "toy"]
    assert s["status"] == "completed" and s["iterations"] == 2 and s["pop"] is None
    assert s["config"]["toy"] == {"step": 0.05} and "es" not in s["config"]
    run = tmp_path / "toy" / "runs" / s["run_id"]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(x["phase"], x["iteration"]) for x in lines if x["kind"] == "train"] == [("toy", 1), ("toy", 2)]
    assert [(x["phase"], x["iteration"]) for x in lines if x["kind"] == "eval"] == [("base", 0), ("toy", 1),
                                                                                  ("toy", 2)]
    from esopt import models

    trained, _ = models.load("tiny-xs", path=str(run / "model"))
    base, _ = models.load("tiny-xs")
    for (name, p), (_, q) in zip(trained.named_parameters(), base.named_parameters()):
        torch.testing.assert_close(p, q * 1.05 ** 2, msg=name)
