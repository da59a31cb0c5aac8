"""Who samples GRPO's completions (``grpo.rollouts``): the run's engine when it serves rollouts
(a declared capability, ``Engine.serves_rollouts``), else TRL. The older spelling
``grpo.use_vllm=true`` on a vLLM engine is the same run with the same id; on engine=hf it stays
TRL's own colocated vLLM. Validation only (no model runs)."""

import pytest
from helpers import compose

from esopt.core.errors import ConfigError
from esopt.runtime.migrate_ids import old_run_id
from esopt.runtime.validate import identity, validate

TINY = ("model=tiny-xs", "algo=grpo", "hydra/launcher=slurm")


def plan(*over):
    return validate(compose(*TINY, *over), check_data=False, cuda=True)  # a GPU job: vLLM need not be here


def test_the_engine_spelling_and_the_older_one_are_one_run():
    new = plan("engine=vllm", "grpo.rollouts=engine")
    old = plan("engine=vllm", "grpo.use_vllm=true")
    assert (new.run_id, old_run_id(new), new.config_id) == (old.run_id, old_run_id(old), old.config_id)
    settings = old.phase("grpo").settings
    assert (settings.rollouts, settings.use_vllm) == ("engine", False)  # resolved to the engine's spelling
    grpo_id = identity(old)["grpo"]  # hashed as before the key: runs keep their ids
    assert grpo_id["use_vllm"] is True and "rollouts" not in grpo_id
    trl = plan("engine=vllm")
    assert trl.phase("grpo").settings.rollouts == "trl" and trl.run_id != old.run_id
    assert "rollouts" not in identity(trl)["grpo"] and identity(trl)["grpo"]["use_vllm"] is False


def test_on_engine_hf_use_vllm_stays_trls_and_engine_rollouts_are_another_run():
    trl_vllm = plan("engine=hf", "grpo.use_vllm=true")
    s = trl_vllm.phase("grpo").settings  # TRL's own colocated vLLM
    assert (s.rollouts, s.use_vllm) == ("trl", True)
    hf = plan("engine=hf", "grpo.rollouts=engine")  # the hf engine's keyed sampler
    assert hf.phase("grpo").settings.rollouts == "engine" and hf.run_id != trl_vllm.run_id
    assert identity(trl_vllm)["grpo"]["use_vllm"] is True and identity(hf)["grpo"]["rollouts"] == "engine"
    assert "sharding" not in identity(hf)["grpo"]  # grpo.sharding at null: ids as before the key
    with pytest.raises(ConfigError, match="grpo.rollouts must be one of trl, engine, got 'vllm'"):
        plan("engine=hf", "grpo.rollouts=vllm")
