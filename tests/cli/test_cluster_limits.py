"""A cluster as it is (issue 51): its job time limit, checked in the dry run before anything
is submitted. Dry runs only (no Slurm needed: ``sweep.max_job_hours`` is given, so sinfo is
not asked)."""

import pytest
from helpers import cli

from esopt.runtime.layout import slurm_minutes

SLURM_DRY = ["esopt.sweep", "-m", "hydra/launcher=slurm", "model=tiny-xs", "sweep.dry_run=true"]


@pytest.mark.parametrize("text, minutes", [
    ("infinite", None), ("UNLIMITED", None), ("45", 45), ("30:00", 30), ("2:00:00", 120),
    ("1-00:00:00", 1440), ("2-12:30:59", 3630)])
def test_slurm_time_limits_read_as_minutes(text, minutes):
    assert slurm_minutes(text) == minutes


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_job_limit_that_is_not_positive_is_one_line(tmp_path, value):
    r = cli(*SLURM_DRY, f"sweep.max_job_hours={value}", f"sweep.root={tmp_path}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("esopt: error: "), r.stderr
    assert "sweep.max_job_hours" in lines[0]


def test_runs_over_the_job_limit(tmp_path):
    """An evaluation-only run (algo=none: nothing to resume from) estimated over a 1-minute job
    limit is refused, exit 2, naming the run and the limit; an ES run over the limit x (1 +
    sweep.max_requeues) jobs is listed with a warning and the dry run goes on; under the limit,
    neither."""
    big = ["iterations=2000", "eval.problems=5000", "task.n_test=5000", "sweep.max_job_hours=0.02"]
    r = cli(*SLURM_DRY, "algo=none", *big, f"sweep.root={tmp_path}")
    assert r.returncode == 2 and r.stderr.count("esopt: error:") == 1, r.stderr[-2000:]
    assert "may take about 2 min, over its Slurm job's 1 min (sweep.max_job_hours), and algo=none cannot " \
           "checkpoint" in r.stderr
    r = cli(*SLURM_DRY, "algo=es", *big, "sweep.max_requeues=1", f"sweep.root={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "more than 2 Slurm jobs of 1 min (sweep.max_job_hours; the first and sweep.max_requeues=1" in r.stderr
    r = cli(*SLURM_DRY, "algo=es", "iterations=2", "sweep.max_job_hours=1", f"sweep.root={tmp_path}")
    assert r.returncode == 0 and "Slurm job" not in r.stderr, r.stderr[-2000:]
