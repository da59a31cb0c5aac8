"""The GPU memory estimate (esopt/runtime/memory.py): its parts against the published figures,
and a plan its GPUs cannot hold refused before it is queued, in one line naming the numbers."""

import pytest
from helpers import GSM8K_SAMPLE, compose

from esopt.core.errors import ConfigError
from esopt.runtime import memory
from esopt.runtime.validate import validate

GB = 1e9
DATA = ["task=gsm8k", f"task.source={GSM8K_SAMPLE}", "task.n_heldout=10"]
FITTED = ["grpo.gradient_checkpointing=true", "grpo.grad_accum=32", "engine.colocated_gpu_share=0.2"]


def gpu_job(*overrides):
    """A run sent to a Slurm job with GPUs, validated as the sweeper does (``cuda=True``)."""
    return validate(compose(*DATA, "engine=vllm", "grpo.use_vllm=true", "hydra/launcher=slurm", *overrides),
                    check_data=False, cuda=True)


def test_grpo_parts_follow_the_published_figures():
    """7B with fp32 masters: 16 B per parameter of training state (REFERENCE: 112-126 GB before
    activations); logits of 64 completions x 2,048 tokens x 151,936 in bf16: 40 GB, with their
    gradient twice that."""
    plan = gpu_job("model=qwen0.5b", "algo=grpo", *FITTED)
    settings = plan.phase("grpo").settings
    params, shape = 7_615_616_512, memory.ARCH["qwen7b"]
    parts = memory.grpo_parts(params, shape, 1, settings, 1792, 80 * GB, colocated=plan.engine_config.colocated_gpu_share)
    assert (parts["masters"] + parts["gradients"] + parts["optimizer"]) / GB == pytest.approx(121.8, abs=0.1)
    assert parts["vllm"] == 0.2 * 80 * GB and parts["reference"] == 0  # beta 0: no reference model
    wide = type(settings)(**{**settings.__dict__, "grad_accum": 1})  # 64 completions in one micro-batch
    logits = memory.grpo_parts(params, memory.ARCH["qwen0.5b"], 1, wide, 1792, 80 * GB)["logits"]
    assert logits / 2 == pytest.approx(64 * 2048 * 151936 * 2)
    four = memory.grpo_parts(params, shape, 4, settings, 1792, 80 * GB)
    assert four["optimizer"] == parts["optimizer"] / 4  # FSDP2 shards the state
    assert four["compute"] == 2 * 2 * params / 28        # full_shard: two gathered layers at a time
    zero2 = memory.grpo_parts(params, shape, 4, settings, 1792, 80 * GB, sharding="shard_grad_op")
    assert zero2["optimizer"] == four["optimizer"] and zero2["compute"] == 2 * params  # gathered fwd to bwd
    ddp = memory.grpo_parts(params, shape, 4, settings, 1792, 80 * GB, sharding="none")
    assert ddp["optimizer"] == parts["optimizer"] and ddp["activations"] == four["activations"]


def test_7b_grpo_on_one_80gb_gpu_is_refused_naming_the_numbers():
    with pytest.raises(ConfigError) as err:
        gpu_job("model=qwen7b", "algo=grpo", "model.resources.gpus=1", *FITTED)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("algo=grpo model=qwen7b does not fit: 159.4 GB per GPU")
    assert "optimizer 60.9" in msg and "on 1 x 80 GB" in msg and "alone take 121.8 GB" in msg
    assert "on model.resources.gpus=4 it would take 53.8 GB each" in msg
    est = memory.estimate(gpu_job("model=qwen7b", "algo=grpo", *FITTED))  # the preset's 4 GPUs: 4 FSDP2 processes
    assert est.gpus == 4 and round(est.total / GB, 1) == 53.8  # micro-batches of 2 per process, 8 each


def test_the_study_sizes_fit_with_the_presets_settings_and_not_without():
    for model in ("qwen0.5b", "qwen1.5b", "qwen3b"):
        est = memory.estimate(gpu_job(f"model={model}", "algo=grpo", *FITTED))
        assert est.fits and est.total / GB < 80, (model, est.line())
        assert memory.estimate(gpu_job(f"model={model}", "algo=es")).fits
    with pytest.raises(ConfigError, match="raise grpo.grad_accum"):  # 64 completions x 2,304 tokens at once
        gpu_job("model=qwen0.5b", "algo=grpo")


def test_runs_without_gpus_are_not_estimated():
    assert memory.estimate(validate(compose("model=tiny-s", "algo=grpo"), check_data=False)) is None
