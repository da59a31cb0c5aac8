"""GRPO on G processes (esopt.algorithms.grpo, model.resources.gpus / ranks): 2 CPU processes
train what 1 does, FSDP2's configuration is accelerate's, a sharded model's weights gather whole,
and settings the processes cannot use are one line before dispatch."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import cli, run_config

from esopt.algorithms import distributed, grpo
from esopt.engines.weights import full_parameters
from esopt.core import store
from esopt.core.errors import ConfigError
from esopt.runtime.run import run
from esopt.runtime.validate import run_id

torch.set_num_threads(1)

# 4 prompts x 8 completions in one micro-batch: 2 processes take 16 each. lr 1e-3 so that two
# AdamW steps move the weights far beyond float32 rounding (up to 2e-3 each).
RUN = ["model=tiny-xs", "task=countdown", "task.n_train=8", "algo=grpo", "engine.device=cpu", "engine.threads=1",
       "eval.problems=2", "eval.samples=1", "grpo.num_generations=8", "grpo.prompts_per_step=4", "iterations=2",
       "lr=1e-3"]


def _run(root):
    """The run's train lines and model/ weights under ``root``."""
    from safetensors.torch import load_file

    (path,) = (root / "default" / "runs").iterdir()
    lines = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
    weights = {}
    for f in (path / "model").glob("*.safetensors"):
        weights.update(load_file(str(f)))
    return [x for x in lines if x["kind"] == "train"], weights


def test_two_cpu_processes_train_what_one_does(tmp_path):
    """Why processes: the subject is two processes training one model (accelerate's MULTI_CPU,
    gloo, launched by torchrun as Slurm's tasks would be), each sampling its half of every step's
    32 completions through the engine, keyed by the global row. Against the same run in one
    process (grpo.rollouts=engine, the sampler the processes use): the same rewards and token
    counts to the bit, losses and gradient norms to 1e-5 (float32 sums in another order), and
    final weights within 1e-4 of the update's L2 norm and 1e-5 per weight (measured: 1.2e-5 of
    the norm, at most 2.4e-6 per weight, against updates of up to 2e-3)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1")
    two = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                            "-m", "esopt.sweep", *RUN, "model.resources.ranks=2", f"sweep.root={tmp_path / 'two'}"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    one = run(run_config(*RUN, "grpo.rollouts=engine", f"sweep.root={tmp_path / 'one'}"))
    out, err = two.communicate(timeout=600)
    assert one["status"] == "completed", one["error"]
    assert two.returncode == 0 and "completed: algo=grpo" in out, err[-3000:]
    (train1, w1), (train2, w2) = _run(tmp_path / "one"), _run(tmp_path / "two")
    assert [t["iteration"] for t in train2] == [1, 2]  # rank 0 alone records
    for a, b in zip(train1, train2):
        for k in ("reward_mean", "reward_std", "reward_max", "reward_min", "accuracy", "format",
                  "tokens_generated", "tokens_fwd_bwd"):
            assert a[k] == b[k], k
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
    assert all(t["reward_std"] > 0 and t["grad_norm"] > 0 for t in train1)  # both steps moved the weights
    from esopt import models

    base = dict(models.load("tiny-xs")[0].named_parameters())
    update = torch.cat([(w1[k] - base[k]).detach().flatten() for k in w1])
    diff = torch.cat([(w1[k] - w2[k]).flatten() for k in w1])
    assert update.abs().max() > 1e-3 and diff.norm() <= 1e-4 * update.norm(), (diff.norm(), update.norm())
    assert diff.abs().max() <= 1e-5, diff.abs().max()  # AdamW's first steps amplify gradients near 0


def test_fsdp2_arguments_make_accelerates_plugin(tmp_path):
    """On GPUs, G processes shard with accelerate's FSDP2: what grpo_config adds builds TRL's
    config and accelerate's plugin, with the sharding stage and activation checkpointing asked."""
    from accelerate import FullyShardedDataParallelPlugin
    from trl import GRPOConfig

    assert grpo.fsdp_arguments("none", True) == {}
    for stage, reshard in (("full_shard", True), ("shard_grad_op", False)):
        args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, bf16=False,
                          **grpo.fsdp_arguments(stage, gradient_checkpointing=True))
        plugin = FullyShardedDataParallelPlugin(**args.fsdp_plugin_args)
        assert (plugin.fsdp_version, plugin.reshard_after_forward, plugin.activation_checkpointing) == (2, reshard, True)
        assert str(plugin.state_dict_type).endswith("FULL_STATE_DICT") and not args.gradient_checkpointing


def test_process_batches_keep_the_global_batch():
    s = grpo.GRPOSettings(num_generations=8, prompts_per_step=8, grad_accum=32)
    assert grpo.process_batches(s, 1) == (2, 32) and grpo.process_batches(s, 4) == (2, 8)  # same micro-batch
    s = grpo.GRPOSettings(num_generations=8, prompts_per_step=4, grad_accum=1)
    assert grpo.process_batches(s, 2) == (16, 1)  # the micro-batch split
    assert grpo.process_batches(grpo.GRPOSettings(num_generations=2, prompts_per_step=3), 4) is None  # 6 completions


def test_a_sharded_models_weights_gather_whole(tmp_path):
    """torch's FSDP2 on one gloo process (it runs on CPU; accelerate enables it on GPUs only),
    each layer activation-checkpointed as fsdp_arguments asks: the engine sync's full_parameters
    and model/'s full_state are the unsharded weights under the model's own names."""
    import torch.distributed as dist
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from esopt import models

    model, tok = models.load("tiny-xs")
    whole = {k: v.clone() for k, v in model.state_dict().items()}
    assert distributed.full_state(model) is None  # nothing sharded
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        apply_activation_checkpointing(model, check_fn=lambda m: m in set(model.model.layers))
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        assert isinstance(next(model.parameters()), DTensor)
        assert "_checkpoint_wrapped_module" in next(n for n, _ in model.named_parameters() if "layers" in n)
        full = dict(full_parameters(model))
        assert set(full) <= set(whole) and all(torch.equal(p, whole[n]) and not isinstance(p, DTensor)
                                               for n, p in full.items())
        state = distributed.full_state(model)
    finally:
        dist.destroy_process_group()
    assert set(whole) <= set(state) and all(torch.equal(state[k], whole[k]) for k in whole)
    models.save(model, tok, tmp_path / "model", state=state)
    assert all(torch.equal(v, whole[k]) for k, v in models.load("tiny-xs", path=str(tmp_path / "model"))[0]
               .state_dict().items())


@pytest.mark.parametrize("overrides, message", [
    (["grpo.sharding=zero3"], "grpo.sharding='zero3': esopt's GRPO shards with accelerate's FSDP2 (DeepSpeed is not used)"),
    (["grpo.sharding=full_shard"], "grpo.sharding=full_shard shards over several processes, but the run has one"),
    (["grpo.sharding=full_shard", "model.resources.ranks=2"], "grpo.sharding=full_shard on CPU processes: accelerate "
                                                              "runs FSDP on GPUs only"),
    (["model.resources.ranks=3"], "grpo.prompts_per_step*num_generations=16 in grpo.grad_accum=1 micro-batches does "
                                  "not split over 3 processes"),
    (["grpo.rollouts=engine", "grpo.use_vllm=true", "engine=hf"], "grpo.rollouts=engine with grpo.use_vllm=true on "
                                                                    "engine=hf"),
    (["grpo.rollouts=vllm"], "grpo.rollouts must be one of trl, engine, got 'vllm'"),
])
def test_process_settings_that_cannot_work_are_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        run_config("algo=grpo", "model=tiny-s", "grpo.num_generations=4", "grpo.prompts_per_step=4", *overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_sharded_hf_engine_is_refused_before_dispatch(tmp_path):
    """A GPU job's FSDP2 with an engine generating with the sharded policy: exit 2, one line."""
    r = cli("esopt.sweep", "-m", "model=qwen0.5b", "algo=grpo", "engine=hf", "model.resources.gpus=2",
            "grpo.sharding=full_shard", "hydra/launcher=slurm", "sweep.dry_run=true", f"sweep.root={tmp_path}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("esopt: error: grpo.sharding=full_shard with engine=hf: that engine generates with "
                               "the sharded policy itself")
