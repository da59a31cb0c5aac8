"""Where a run puts its HF model beside an engine that holds its own weights (vLLM): the
algorithm's registry entry decides (``shares_gpu``), never its name; the engine's own config
holds the share it then takes (``engine.colocated_gpu_share``)."""


import dataclasses

import pytest
from helpers import run_config

from esopt import engines
from esopt.runtime.run import placement


def with_vllm(algo: str, *over: str, **knobs):
    rc = run_config("model=tiny-xs", f"algo={algo}", *over, check_data=False)
    block = {"name": "vllm", "gpu_memory_utilization": 0.85, **knobs}
    return dataclasses.replace(rc.replace_config(engine=block), engine_config=engines.parse(block))


@pytest.mark.parametrize("algo", ["none", "es"])
def test_the_host_copy_stays_on_the_cpu_when_nothing_trains_it_by_gradients(algo):
    engine, device = placement(with_vllm(algo), "cuda")
    assert device == "cpu" and engine.gpu_memory_utilization == 0.85


@pytest.mark.parametrize("algo", ["grpo", "es_grpo", "grpo_es"])
def test_gradient_training_shares_the_gpu_with_the_engine(algo):
    engine, device = placement(with_vllm(algo), "cuda")
    assert device == "cuda" and engine.gpu_memory_utilization == 0.3  # the default colocated share
    engine, _ = placement(with_vllm(algo, colocated_gpu_share=0.2), "cuda")
    assert engine.gpu_memory_utilization == 0.2
    engine, _ = placement(with_vllm(algo, colocated_gpu_share=0.9), "cuda")
    assert engine.gpu_memory_utilization == 0.85  # a cap, never a raise


def test_an_engine_without_its_own_weights_is_left_alone():
    rc = run_config("model=tiny-xs", "algo=grpo", check_data=False)
    assert placement(rc, "cuda") == (rc.engine_config, "cuda")
