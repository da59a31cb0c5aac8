"""Inputs a cluster trips on (issue 29, item 8): a control character in a name that reaches a
path, a study or an ``sbatch`` job name is one line and exit 2; the dry-run token estimate uses
the sizes the run uses (es.batch_size clamped to the train split, like ``es.prompt_batch``)."""

import re

import pytest
from helpers import cli, run_config

from esopt.cli import configs
from esopt.cli.common import prepare_argv

configs.register()


@pytest.mark.parametrize("argv, needle", [
    (["sweep.name='a\nb'"], "sweep.name must not contain control characters, got 'a\\nb'"),
    (["-m", "sweep.name=ok,'x\ty'"], "sweep.name must not contain control characters"),
    (["sweep.root='res\rults'"], "sweep.root must not contain control characters"),
    (["hydra.launcher.name='es\nopt'"], "hydra.launcher.name must not contain control characters"),
    (["tuning.study='s\x1b[31m'"], "tuning.study must not contain control characters"),
])
def test_control_characters_in_names_are_one_line(capsys, argv, needle):
    with pytest.raises(SystemExit) as e:
        prepare_argv(list(argv))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("esopt: error: "), err
    assert needle in err


def test_control_characters_in_a_config_are_refused_too():
    from esopt.core.errors import ConfigError
    from helpers import compose
    from esopt.runtime.validate import validate

    cfg = compose("model=tiny-xs")
    cfg.tuning.study = "s\nt"
    with pytest.raises(ConfigError, match="tuning.study must not contain control characters"):
        validate(cfg, check_data=False)


def test_a_plain_name_passes(capsys):
    prepare_argv(["sweep.name=plain-name_1", "hydra/launcher=slurm", "hydra.launcher.name=esopt-1"])


def test_dry_run_estimate_uses_the_clamped_batch(tmp_path):
    from esopt.algorithms import es
    from hydra_plugins.esopt_sweeper.sweepers import _rows, estimate_tokens

    # above the train split's 2,000 rows, within esopt.runtime.limits' bound on es.batch_size
    huge = run_config("model=tiny-xs", "es.batch_size=60000", check_data=False)
    rows = _rows(huge.task_spec, "train", None)
    clamped = run_config("model=tiny-xs", f"es.batch_size={rows}", check_data=False)
    assert rows == 2000 and estimate_tokens(huge) == estimate_tokens(clamped)
    assert es.prompts_per_iteration(10**7, rows) == len(es.prompt_batch(0, 1, rows, 10**7)) == rows
    assert estimate_tokens(run_config("model=tiny-xs", "es.batch_size=10", check_data=False)) \
        < estimate_tokens(clamped)  # below the split's size nothing is clamped
    r = cli("esopt.sweep", "-m", "model=tiny-xs", "es.batch_size=60000", "sweep.dry_run=true",
                f"sweep.root={tmp_path}", env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    shown = int(re.search(r"max generated tokens \(upper bound\): ([\d,]+) to run", r.stdout).group(1)
                .replace(",", ""))
    assert shown == estimate_tokens(clamped)
