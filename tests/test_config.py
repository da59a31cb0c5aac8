"""Config validation: every user error is one clear line, raised before any work."""

import pytest
from hydra import compose, initialize_config_dir

from esopt.config import ConfigError, validate
from esopt.sweep import CONF_DIR, check_group_choices


def compose_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_defaults_validate():
    rc = validate(compose_cfg())
    assert rc.algo == "none" and rc.model["name"] == "tiny-s" and rc.task["name"] == "countdown"
    assert rc.pop == 16 and rc.eval.samples == 32 and rc.eval.temperature == 0.6


@pytest.mark.parametrize(
    "override, message",
    [
        ("pop=1", "pop must be >= 2"),
        ("sigma=-1", "sigma must be > 0"),
        ("lr=0", "lr must be > 0"),
        ("iterations=0", "iterations must be >= 1"),
        ("eval.samples=0", "eval.samples must be >= 1"),
        ("eval.split=dev", "eval.split must be one of"),
        ("pop=2.5", "pop must be an integer"),
        ("model.name=nope", "unknown model 'nope'"),
        ("task.name=nope", "unknown task 'nope'"),
        ("engine.threads=0", "engine.threads must be an integer >= 1 or auto"),
    ],
)
def test_bad_values_are_one_line(override, message):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(override))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_pop_is_read_as_a_key_not_the_method():
    rc = validate(compose_cfg("pop=8"))
    assert rc.pop == 8


def test_identity_excludes_sweep_bookkeeping():
    a = validate(compose_cfg("sweep.name=a", "engine.max_batch=64"))
    b = validate(compose_cfg("sweep.name=b", "engine.max_batch=128"))
    c = validate(compose_cfg("sweep.name=a", "seed=1"))
    assert a.identity() == b.identity()
    assert a.identity() != c.identity()


def test_unknown_group_choice_exits_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        check_group_choices(["model=tiny-s,qwen9b", "pop=8"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("esopt: error: unknown model 'qwen9b' (known: ")
    assert "tiny-s" in err and "\n" not in err
    check_group_choices(["model=tiny-s,qwen7b", "algo=none"])  # known names pass
