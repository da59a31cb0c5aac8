"""GRPO through TRL on tiny-xs Countdown: train lines, entropy, eval lines, resume, bad input."""

import json

import pytest
import torch
from helpers import cli, grpo_context, Preempted, run_config

from esopt.algorithms import grpo
from esopt.core import store
from esopt.core.errors import ConfigError
from esopt.runtime.run import load_components, run
from esopt.runtime.validate import run_id

torch.set_num_threads(1)

TRAIN_KEYS = ("reward_mean", "reward_std", "reward_max", "reward_min", "entropy", "clip_ratio",
              "tokens_generated", "tokens_fwd_bwd", "tokens_total", "wall_s", "accuracy", "format")
SMALL = ["model=tiny-xs", "task=countdown", "algo=grpo", "engine.device=cpu", "eval.problems=8",
         "eval.samples=4", "eval.every=2", "grpo.num_generations=4", "grpo.prompts_per_step=4"]


def config(results_root, *overrides):
    return run_config(*SMALL, f"sweep.root={results_root}", *overrides)


def lines(run_path, kind):
    return [json.loads(x) for x in (run_path / "metrics.jsonl").read_text().splitlines()
            if json.loads(x)["kind"] == kind]


def run_dir(rc):
    return store.RunDir.for_run(rc.sweep.root, rc.sweep.name, run_id(rc)).path


def test_grpo_learns_and_records_train_and_eval_lines(results_root):
    """12 GRPO steps on 8 Countdown problems raise their Pass@1 well above the base model's;
    every step is a train line with TRL's entropy, KL (beta > 0) and token counts."""
    rc = config(results_root, "iterations=12", "eval.every=6", "task.n_train=8", "eval.split=train",
                "eval.samples=16", "grpo.num_generations=8", "grpo.prompts_per_step=8", "lr=3e-4",
                "grpo.beta=0.04", "sweep.keep_checkpoints=true")  # its checkpoints are looked at below
    summary = run(rc)
    assert summary["status"] == "completed", summary["error"]
    path = run_dir(rc)
    train = lines(path, "train")
    assert [t["iteration"] for t in train] == list(range(1, 13))
    for t in train:
        assert all(k in t for k in TRAIN_KEYS), sorted(set(TRAIN_KEYS) - set(t))
        assert t["phase"] == "grpo"
        assert 0.0 < t["entropy"] < 5.0  # TRL's token entropy, nats (ln 99 = 4.6 is uniform)
        assert "kl" in t and t["kl"] >= 0.0  # beta > 0 -> KL to the reference is logged
        eps = 1e-6  # TRL averages rewards in float32
        assert 0.0 <= t["reward_min"] <= t["reward_mean"] + eps and t["reward_mean"] <= t["reward_max"] + eps
        assert t["reward_max"] <= 1.1 + eps
        # 64 completions per step, at most the task's 24-token budget each (EOS included)
        assert 64 <= t["tokens_generated"] <= 64 * 24
        assert t["tokens_fwd_bwd"] > t["tokens_generated"]  # prompts pass through fwd+bwd too
    assert max(t["kl"] for t in train) > 0  # the policy moved away from the reference
    totals = [t["tokens_total"] for t in train]
    assert totals == [sum(t["tokens_generated"] for t in train[: i + 1]) for i in range(12)]
    assert summary["tokens_generated"] == totals[-1]
    evals = [e for e in lines(path, "eval") if e["phase"] == "grpo"]
    assert [e["iteration"] for e in evals] == [6, 12]
    for e in evals:
        assert 0.0 <= e["pass@1"] <= e["pass@16"] <= 1.0 and e["entropy"] > 0
    assert summary["final"]["pass@k"]["1"] == evals[-1]["pass@1"]
    base = summary["base"]["pass@k"]["1"]
    assert evals[-1]["pass@1"] >= base + 0.15, (base, evals[-1]["pass@1"])  # measured 0.11 -> 0.54
    assert summary["lr"] == 3e-4
    kept = sorted((path / "checkpoint" / "grpo").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert [p.name for p in kept] == ["checkpoint-6", "checkpoint-12"]   # sweep.keep_checkpoints: every one
    assert all(store.verify_manifest(p) is None and (p / "trainer_state.json").exists() for p in kept)


def test_resume_continues_from_checkpoint(results_root, tmp_path):
    """Killed after step 3 (checkpoint at 2): the rerun continues at step 3, ending with the
    same weights as an uninterrupted run (TRL restores optimizer, scheduler and RNG state)."""
    rc = config(results_root, "iterations=4", "grpo.save_every=2", "eval.every=4")

    def context(path, stop_at=None):  # Preempted stands in for the job being killed mid-training
        return grpo_context(rc, path, stop_at)

    straight = context(tmp_path / "straight")
    grpo.train(straight)
    assert straight.shared.effective["lr"] == rc.model["hparams"]["grpo_lr"]  # lr: null -> the model's

    first = context(tmp_path / "resumed", stop_at=3)
    with pytest.raises(Preempted):
        grpo.train(first)
    second = context(tmp_path / "resumed")
    grpo.train(second)

    steps = [t["iteration"] for t in lines(tmp_path / "resumed", "train")]
    assert steps == [1, 2, 3, 4]  # step 3 redone from checkpoint-2 (its first record dropped)
    state = json.loads((tmp_path / "resumed/checkpoint/grpo/checkpoint-4/trainer_state.json").read_text())
    assert state["global_step"] == 4
    a, b = dict(straight.model.named_parameters()), dict(second.model.named_parameters())
    base, _ = load_components(rc)[:2]
    moved = max((a[k] - p).abs().max().item() for k, p in base.named_parameters())
    assert moved > 1e-4  # training changed the weights
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-3 * moved
    # the generated-token count continues from the checkpoint (saved in trainer_state.json)
    assert second.tokens_total == straight.tokens_total
    assert lines(tmp_path / "resumed", "train")[-1]["tokens_total"] == straight.tokens_total


@pytest.mark.parametrize("override, message", [
    ("grpo.num_generations=1", "num_generations (group size) must be >= 2"),
    ("grpo.grad_accum=3", "grpo.grad_accum=3 must divide prompts_per_step*num_generations"),
    ("grpo.loss_type=ppo", "grpo.loss_type must be one of"),
    ("+grpo.group=4", "unknown grpo key(s): group"),
    ("grpo.temperature=0", "grpo.temperature must be > 0"),
    ("+grpo.trl.bogus=1", "grpo.trl has unknown GRPOConfig field(s): bogus"),
    ("+grpo.trl.logging_steps=5", "grpo.trl may not set logging_steps"),
])
def test_bad_grpo_config_is_one_clear_line(results_root, override, message):
    with pytest.raises(ConfigError, match=".*") as err:
        config(results_root, override)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_group_size_from_the_command_line(results_root):
    res = cli("esopt.sweep", "algo=grpo", "grpo.num_generations=1", f"sweep.root={results_root}")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith("esopt: error: grpo.num_generations")
    assert "Traceback" not in res.stderr
    assert not results_root.exists() or not list(results_root.rglob("metrics.jsonl"))


def test_lr_default_is_the_models_unless_set():
    s = grpo.GRPOSettings.from_config({})
    tiny = run_config("algo=grpo", "model=tiny-s")
    assert grpo.resolve_lr(tiny, s) == tiny.model["hparams"]["grpo_lr"]
    assert grpo.resolve_lr(run_config("algo=grpo", "model=qwen0.5b", check_data=False), s) == 1e-6  # the study
    assert grpo.resolve_lr(tiny, grpo.GRPOSettings.from_config({"lr": 2e-5})) == 2e-5  # the block
    assert grpo.resolve_lr(run_config("algo=grpo", "lr=3e-5"), s) == 3e-5  # the top-level lr always wins


def test_the_time_limit_signal_saves_at_that_step_then_hands_over(results_root, tmp_path):
    """The scheduler's warning (SIGUSR2; in a Slurm job submitit has bound it, here a handler
    that records its call stands in) during step 2, with no checkpoint scheduled before step 4:
    GRPO saves checkpoint-3 at the next step's end, hands the signal to the bound handler and
    exits; the rerun resumes at step 4 (every step recorded once)."""
    import os
    import signal

    from esopt.core import preempt

    rc = config(results_root, "iterations=4", "grpo.save_every=4", "eval.every=4")
    calls = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    try:
        assert preempt.install(grace_s=600)
        ctx = grpo_context(rc, tmp_path)
        log = ctx.log

        def log_then_warn(**line):
            log(**line)
            if line.get("kind") == "train" and line["iteration"] == 2:
                os.kill(os.getpid(), signal.SIGUSR2)

        ctx.log = log_then_warn
        with pytest.raises(SystemExit):
            grpo.train(ctx)
        assert calls == [signal.SIGUSR2]
        assert sorted(p.name for p in (tmp_path / "checkpoint" / "grpo").glob("checkpoint-*")) == ["checkpoint-3"]
    finally:
        signal.signal(signal.SIGUSR2, previous)
    grpo.train(grpo_context(rc, tmp_path))
    assert [t["iteration"] for t in lines(tmp_path, "train")] == [1, 2, 3, 4]
