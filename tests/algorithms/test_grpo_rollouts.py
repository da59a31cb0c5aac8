"""Who samples GRPO's completions (``grpo.rollouts``): the run's engine when it serves rollouts
(a declared capability, ``Engine.serves_rollouts``), else TRL. The older spelling
``grpo.use_vllm=true`` on such an engine is the same run with the same id; on one that does not
it stays TRL's own colocated vLLM. Validation only (no model runs)."""

import pytest
from helpers import compose

from esopt.core.errors import ConfigError
from esopt.runtime.validate import identity, validate

TINY = ("model=tiny-xs", "algo=grpo", "hydra/launcher=slurm")


def plan(*over):
    return validate(compose(*TINY, *over), check_data=False, cuda=True)  # a GPU job: vLLM need not be here


def test_the_engine_spelling_and_the_older_one_are_one_run():
    new = plan("engine=vllm", "grpo.rollouts=engine")
    old = plan("engine=vllm", "grpo.use_vllm=true")
    assert (new.run_id, new.legacy_id, new.config_id) == (old.run_id, old.legacy_id, old.config_id)
    settings = old.phase("grpo").settings
    assert (settings.rollouts, settings.use_vllm) == ("engine", False)  # resolved to the engine's spelling
    grpo_id = identity(old)["grpo"]  # hashed as before the key: runs keep their ids
    assert grpo_id["use_vllm"] is True and "rollouts" not in grpo_id
    trl = plan("engine=vllm")
    assert trl.phase("grpo").settings.rollouts == "trl" and trl.run_id != old.run_id
    assert "rollouts" not in identity(trl)["grpo"] and identity(trl)["grpo"]["use_vllm"] is False


def test_an_engine_that_serves_no_rollouts_leaves_them_to_trl():
    s = plan("engine=hf", "grpo.use_vllm=true").phase("grpo").settings  # TRL's own colocated vLLM
    assert (s.rollouts, s.use_vllm) == ("trl", True)
    with pytest.raises(ConfigError, match="grpo.rollouts=engine needs an engine that serves rollouts"):
        plan("engine=hf", "grpo.rollouts=engine")
    with pytest.raises(ConfigError, match="grpo.rollouts must be one of trl, engine, got 'vllm'"):
        plan("engine=hf", "grpo.rollouts=vllm")
