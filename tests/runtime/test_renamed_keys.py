"""Renamed and moved config keys (``esopt.algorithms.Block.renamed``): the old spelling is still
read for a release, with one warning line, and both spellings are one run with one id, the id
the old spelling had (the value is hashed under it)."""

import pytest
from helpers import compose

from esopt.core import config
from esopt.runtime.migrate_ids import old_run_id
from esopt.runtime.validate import config_id, identity, validate

VLLM_JOB = ["engine=vllm", "model=qwen0.5b", "hydra/launcher=slurm", "grpo.gradient_checkpointing=true",
            "grpo.grad_accum=32", "grpo.rollouts=engine"]
CASES = {  # name: (old spelling, new spelling, the runs' other overrides, validated for a GPU job)
    "trl_vllm_share": ("grpo.vllm_gpu_memory_utilization=0.2", "engine.colocated_gpu_share=0.2",
                       ["algo=grpo", "engine=hf", "model=tiny-s"], False),
    "eggroll_rank": ("es.rank=4", "es.perturb_rank=4", ["algo=es", "es.batched=true", "model=tiny-s"], False),
    "eggroll_rank_in_a_sequence": ("es.rank=2", "es.perturb_rank=2", ["algo=es_grpo", "es.batched=true",
                                                                      "model=tiny-s"], False),
    "vllm_engine_share": ("grpo.vllm_gpu_memory_utilization=0.25", "engine.colocated_gpu_share=0.25",
                          ["algo=grpo_es", *VLLM_JOB], True),
}


def plan(*overrides, gpu=False):
    return validate(compose("task=countdown", *overrides), check_data=False, cuda=True if gpu else None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_old_and_new_spelling_are_one_plan_and_one_id(case, capsys):
    old, new, rest, gpu = CASES[case]
    config._WARNED.clear()
    before = plan(*rest, old, gpu=gpu)
    assert capsys.readouterr().err.count("esopt: warning:") == 1
    plan(*rest, old, gpu=gpu)  # once per process, however many runs a sweep validates
    err = capsys.readouterr().err
    after = plan(*rest, new, gpu=gpu)
    assert "warning" not in err + capsys.readouterr().err
    assert after == before
    assert (after.run_id, old_run_id(after), config_id(after)) == \
        (before.run_id, old_run_id(before), config_id(before))  # old_run_id: what the migration reads
    key, value = old.split("=")
    block, _, name = key.partition(".")
    assert identity(after)[block][name] == float(value)  # hashed under the spelling ids had
    assert new.split("=")[0].partition(".")[2] not in identity(after)[block]
    assert plan(*rest, gpu=gpu).run_id != after.run_id   # and the value is in it


def test_the_warning_names_both_spellings(capsys):
    config._WARNED.clear()
    p = plan("algo=grpo", "model=tiny-s", "grpo.vllm_gpu_memory_utilization=0.2")
    assert p.engine_config.colocated_gpu_share == 0.2 and "vllm_gpu_memory_utilization" not in p.config.block("grpo")
    assert capsys.readouterr().err.strip() == (
        "esopt: warning: grpo.vllm_gpu_memory_utilization is deprecated and goes in a later release: "
        "it is engine.colocated_gpu_share now (the same run, the same id)")


def test_a_vllm_engine_beside_grpo_takes_the_colocated_share():
    """The share caps vLLM's own gpu_memory_utilization when GRPO trains on its GPU
    (``esopt.runtime.run.placement``), whichever spelling set it."""
    from esopt.runtime.run import placement

    engine, device = placement(plan("algo=grpo", *VLLM_JOB, "engine.colocated_gpu_share=0.2", gpu=True), "cuda")
    assert device == "cuda" and engine.gpu_memory_utilization == 0.2


def test_an_unread_old_spelling_is_noted_as_its_new_key(capsys):
    """``es.rank=4`` without ``es.batched`` is unread, as ``es.perturb_rank=4`` is: one run, one
    id, and the note names the key as it is now."""
    from esopt.cli.common import inert_notes

    base = ["algo=es", "model=tiny-s"]
    old = plan(*base, "es.rank=4")
    assert old.run_id == plan(*base).run_id == plan(*base, "es.perturb_rank=4").run_id
    assert inert_notes(old, ["es.rank"]) == ["es.perturb_rank has no effect with es.batched=false (full-rank ES)"]
