"""Config validation (esopt.core.config + esopt.runtime.validate): every user error is one clear
line, raised before any work."""

import pytest
from helpers import compose as compose_cfg

from esopt.cli.common import check_group_choices
from esopt.core.errors import ConfigError
from esopt.runtime.validate import identity, validate


def test_defaults_validate():
    rc = validate(compose_cfg())
    assert rc.algo == "es" and rc.model["name"] == "tiny-s" and rc.task["name"] == "countdown"
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
        ("eval.ood_task=nope", "unknown eval.ood_task 'nope'"),
        ("eval.ood_task=5", "eval.ood_task must be a task name or a task config with a name"),
        ("eval.ood_split=dev", "eval.ood_split must be one of"),
        ("eval.ood_problems=0", "eval.ood_problems must be >= 1"),
        ("eval.problems=0", "eval.problems must be >= 1"),
        ("eval.ood_task={name:addition,n_trian:3}", "task addition: unknown option(s) n_trian"),
        ("+sweep.design_power={1:1.5}", "sweep.design_power: 1: 1.5 is not a claim id (>= 1) and a power in [0, 1]"),
        ("+sweep.design_power={0:0.5}", "sweep.design_power: 0: 0.5 is not a claim id"),
        ("+sweep.design_power={1:nan}", "sweep.design_power: 1: nan is not a claim id"),
        ("+sweep.design_power={one:0.5}", "sweep.design_power: 'one': 0.5 is not a claim id and a power"),
        ("+sweep.design_power=0.9", "sweep.design_power must map claim ids to powers"),
    ],
)
def test_bad_values_are_one_line(override, message):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(override))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_design_power_is_read_as_claim_ids_and_powers():
    """sweep.design_power (what esopt.design writes into a preset; the registration records it): ids
    as integers, powers as floats, and none by default; not part of the run's id."""
    rc = validate(compose_cfg("+sweep.design_power={3:0.42,1:0.9}"))
    assert rc.sweep.design_power == {1: 0.9, 3: 0.42} and list(rc.sweep.design_power) == [1, 3]
    assert validate(compose_cfg()).sweep.design_power is None
    assert identity(rc) == identity(validate(compose_cfg()))


def test_the_old_plan_power_key_is_read_for_a_release_with_one_warning(capsys):
    """sweep.plan_power (design_power's name before) sets design_power, with one warning line per
    process; the run id is the same (the sweep block is not in it)."""
    from esopt.core import config

    config._WARNED.clear()
    old = validate(compose_cfg("sweep.plan_power={3:0.42,1:0.9}"))
    validate(compose_cfg("sweep.plan_power={1:0.5}"))
    err = capsys.readouterr().err
    assert err.strip() == ("esopt: warning: sweep.plan_power is deprecated and goes in a later release: it is "
                           "sweep.design_power now (the same run, the same id)")
    new = validate(compose_cfg("sweep.design_power={3:0.42,1:0.9}"))
    assert old.sweep.design_power == new.sweep.design_power == {1: 0.9, 3: 0.42}
    assert old.run_id == new.run_id == validate(compose_cfg()).run_id
    assert "plan_power" not in vars(old.sweep)


def test_pop_is_read_as_a_key_not_the_method():
    rc = validate(compose_cfg("pop=8"))
    assert rc.pop == 8


def test_identity_excludes_sweep_bookkeeping():
    a = validate(compose_cfg("sweep.name=a", "engine.max_batch=64"))
    b = validate(compose_cfg("sweep.name=b", "engine.max_batch=128"))
    c = validate(compose_cfg("sweep.name=a", "seed=1"))
    assert identity(a) == identity(b)
    assert identity(a) != identity(c)
    # ES's speed-only knobs give bitwise the same result: the same run; a knob that matters does not
    fast = validate(compose_cfg("sweep.name=a", "algo=es", "es.checkpoint_every=3", "es.checksum_every=0"))
    assert identity(fast) == identity(validate(compose_cfg("sweep.name=a", "algo=es")))
    assert identity(validate(compose_cfg("algo=es", "es.batch_size=8"))) != identity(validate(compose_cfg("algo=es")))


def test_unknown_group_choice_exits_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        check_group_choices(["model=tiny-s,qwen9b", "pop=8"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("esopt: error: unknown model 'qwen9b' (known: ")
    assert "tiny-s" in err and "\n" not in err
    check_group_choices(["model=tiny-s,qwen7b", "algo=none"])  # known names pass


def test_defaults_come_from_the_code_that_owns_them():
    """Each block's defaults are stated once, in its dataclass; the composed config carries them."""
    from dataclasses import asdict

    from esopt.algorithms import blocks
    from esopt.algorithms.es import ESConfig
    from esopt.algorithms.grpo import GRPOSettings
    from esopt.core.config import RENAMED, EvalConfig, SweepConfig
    from esopt.runtime.tuning import TuningConfig

    cfg = compose_cfg("algo=es_grpo")
    for key, cls in (("eval", EvalConfig), ("sweep", SweepConfig), ("tuning", TuningConfig),
                     ("es", ESConfig), ("grpo", GRPOSettings)):
        renamed = {old: None for old, _ in getattr(blocks().get(key), "renamed", ())}  # old spellings, unset
        renamed |= {old.partition(".")[2]: None for old in RENAMED if old.partition(".")[0] == key}
        assert dict(cfg[key]) == {**asdict(cls()), **renamed}, key
    # every algorithm's blocks are composed (a grid over algorithms takes a key of any of them);
    # each run keeps its own algorithm's
    assert "es" in compose_cfg("algo=grpo") and "grpo" in compose_cfg("algo=es")
    assert list(validate(compose_cfg("algo=grpo"), check_data=False).blocks) == ["grpo"]
    assert list(validate(compose_cfg("algo=es"), check_data=False).blocks) == ["es"]
    assert validate(compose_cfg("algo=none"), check_data=False).blocks == {}


def test_task_dependent_defaults_are_resolved_into_the_run_config():
    """eval.problems null -> the task's default; a task's source-dependent sizes; the OOD task's
    knobs and size. The run id of a run without an OOD set does not mention one."""
    from helpers import REPO

    from esopt.tasks import task_class

    gsm = REPO / "tests" / "data" / "gsm8k"
    rc = validate(compose_cfg())
    assert rc.eval.problems == 200 and rc.eval.ood_task is None
    assert (rc.task["n_train"], rc.task["n_test"], rc.task["n_heldout"]) == (2000, 500, 500)
    assert not any(k.startswith("ood") for k in identity(rc)["eval"])
    g = validate(compose_cfg("task=gsm8k", f"task.source={gsm}", "task.n_heldout=10"))
    assert g.eval.problems is None  # the whole test split
    assert validate(compose_cfg("task=gsm8k", f"task.source={gsm}", "task.n_heldout=10",
                                "eval.problems=7")).eval.problems == 7
    o = validate(compose_cfg(f"eval.ood_task={{name:gsm8k,source:'{gsm}',n_heldout:10}}"))
    assert o.eval.ood_task["source"] == str(gsm) and o.eval.ood_task["answer_format"] == "boxed"
    assert o.eval.ood_split == "test" and o.eval.ood_problems == 100
    assert identity(o)["eval"]["ood_task"]["name"] == "gsm8k" and identity(o) != identity(rc)
    n = validate(compose_cfg("eval.ood_task=addition", "eval.ood_problems=null"), check_data=False)
    assert n.eval.ood_task == {"name": "addition", "style": None, **task_class("addition").knobs}
    assert n.eval.ood_problems == 200


def test_one_reading_of_booleans_and_integers_in_every_block():
    """config.boolean / config.integer, applied by config.block to every field declared bool or
    int: a quoted 'false' was truthy (sweep.keep_checkpoints='false' kept the checkpoints), 'no'
    passed as true, and seed=1e30 became 1000000000000000019884624838656 while 10**30 was refused."""
    from esopt.runtime.tuning import settings

    rc = validate(compose_cfg("sweep.keep_checkpoints='false'", "sweep.save_model='true'", "eval.greedy='False'",
                              "model.trust_remote_code='false'", "seed=4.0", "es.batch_size='8'"), check_data=False)
    assert (rc.sweep.keep_checkpoints, rc.sweep.save_model, rc.eval.greedy) == (False, True, False)
    assert rc.model["trust_remote_code"] is False and rc.seed == 4 and type(rc.seed) is int
    assert rc.phases[0].settings.batch_size == 8
    for override, line in (("sweep.save_model='no'", "sweep.save_model must be true or false, got 'no'"),
                           ("sweep.keep_checkpoints=1", "sweep.keep_checkpoints must be true or false, got 1"),
                           ("es.batched='0'", "es.batched must be true or false, got '0'"),
                           ("es.drift=yes", "es.drift must be true or false, got 'yes'"),
                           ("tuning.enabled=on", "tuning.enabled must be true or false, got 'on'"),
                           ("model.trust_remote_code=no", "model.trust_remote_code must be true or false, got 'no'"),
                           ("seed=1e30", "seed must be an integer of magnitude below 2**63, got 1e+30"),
                           (f"seed={10**30}", f"seed must be an integer of magnitude below 2**63, got {10**30}"),
                           ("es.perturb_rank=1e30", "es.perturb_rank must be an integer of magnitude below 2**63, got 1e+30"),
                           ("es.batch_size=2.5", "es.batch_size must be an integer, got 2.5"),
                           ("eval.print_samples=true", "eval.print_samples must be an integer, got True")):
        with pytest.raises(ConfigError) as err:
            validate(compose_cfg(override), check_data=False)
        assert str(err.value) == line, override
    with pytest.raises(ConfigError, match="^engine.enforce_eager must be true or false or null, got 'no'$"):
        validate(compose_cfg("engine=vllm", "engine.enforce_eager=no"), check_data=False)
    with pytest.raises(ConfigError, match="^tuning.n_warmup_steps must be an integer, got 'x'$"):
        settings(validate(compose_cfg("tuning.n_warmup_steps=x"), check_data=False))
