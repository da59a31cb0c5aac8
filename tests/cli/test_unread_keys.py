"""A key of one algorithm's block, given to a grid that also holds other algorithms, is applied
where it is read and noted once where it is not (never an error); keys no block has stay
one-line errors with exit 2."""

import re

import pytest
from helpers import cli

from esopt.cli import configs
from esopt.cli.common import prepare_argv

configs.register()
ENV = {"OMP_NUM_THREADS": "1"}


def test_a_block_key_of_another_algorithm_is_a_note_and_applied_where_read(tmp_path):
    r = cli("esopt.sweep", "-m", "model=tiny-s", "algo=none,es", "seed=3", "es.batch_size=32",
                "sweep.dry_run=true", f"sweep.root={tmp_path}", env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.splitlines().count("esopt: note: es.batch_size has no effect with algo=none") == 1
    assert "error" not in r.stderr and "dry run: 2 runs" in r.stdout
    rows = dict(re.findall(r"^\s*\d+\s+[0-9a-f]{12}\s+(\w+)\s+new\s+run\s+(\d+)\s+hf\s+transformers==\S+(?:\s+(?:-|full-rank))?\s*$", r.stdout, flags=re.M))
    from helpers import run_config

    from hydra_plugins.esopt_sweeper.sweepers import estimate_tokens

    def estimate(*over):
        return estimate_tokens(run_config("model=tiny-s", "seed=3", *over, check_data=False))

    # applied where it is read: the ES run's estimate is that of es.batch_size=32, not the default's
    assert int(rows["es"]) == estimate("algo=es", "es.batch_size=32") < estimate("algo=es")
    assert int(rows["none"]) == estimate("algo=none")


@pytest.mark.parametrize("bad, needle", [
    ("foo=1", "unknown key 'foo'"),
    ("es.nonsense=1", "unknown key 'es.nonsense'"),
    ("grpo.nonsense=1", "unknown key 'grpo.nonsense'"),
])
def test_keys_no_block_has_are_still_errors(capsys, bad, needle):
    with pytest.raises(SystemExit) as e:
        prepare_argv(["-m", "model=tiny-s", "algo=none,es", "seed=3", bad, "sweep.dry_run=true"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(f"esopt: error: {needle}"), err


def test_a_single_run_notes_the_keys_its_algorithm_does_not_read(capsys):
    prepare_argv(["model=tiny-s", "algo=grpo", "pop=8", "es.batch_size=32", "grpo.beta=0.1"])
    assert capsys.readouterr().err.strip() == "esopt: note: pop, es.batch_size have no effect with algo=grpo"


def test_a_block_key_the_other_values_leave_unread_is_a_note_and_the_default_run(capsys):
    """es.perturb_rank=4 with es.batched=false made a new run id with no note, while the dry run labelled
    it full-rank: now it resolves to the default (the same run, the same id) and a note says so.
    A bad value is still refused, read or not."""
    from helpers import run_config

    from esopt.core.errors import ConfigError

    base = ["model=tiny-xs", "algo=es", "eval.problems=4"]
    assert run_config(*base, "es.perturb_rank=4", check_data=False).run_id == run_config(*base, check_data=False).run_id
    assert run_config(*base, "es.full_rank=true", check_data=False).run_id == run_config(*base, check_data=False).run_id
    low = run_config(*base, "es.batched=true", "es.perturb_rank=4", check_data=False)
    assert low.run_id != run_config(*base, "es.batched=true", check_data=False).run_id and low.phases[0].settings.perturb_rank == 4
    prepare_argv([*base, "es.perturb_rank=4"])
    assert "esopt: note: es.perturb_rank has no effect with es.batched=false (full-rank ES)" in capsys.readouterr().err
    prepare_argv([*base, "es.batched=true", "es.full_rank=true", "es.perturb_rank=4"])
    assert "esopt: note: es.perturb_rank has no effect with es.full_rank=true" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="es.perturb_rank must be an integer >= 1, got 0"):
        run_config(*base, "es.perturb_rank=0", check_data=False)
