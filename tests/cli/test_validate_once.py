"""A run is validated once (``esopt.runtime.validate.validate``): a single run by the command
line's check, whose plan its task function takes (a real ES run: tests/runtime/test_parse_once.py);
a sweep's job by the sweeper, whose plan its worker reads. Counted by code object
(``helpers.counted_calls``), nothing replaced. The commands run in this interpreter
(``helpers.cli``): a tiny-xs evaluation of 2 problems and a dry run, nothing trained."""

from esopt.core import store
from esopt.runtime.validate import validate
from helpers import cli, compose, counted_calls, run_config

DRY = ("model=tiny-xs", "algo=es", "pop=4", "iterations=2", "sweep.dry_run=true")


def test_a_single_evaluation_is_validated_once(tmp_path):
    """``esopt.evaluate`` reads the plan its command line's check made (tiny-xs on 2 problems)."""
    with counted_calls(validate=validate) as n:
        out = cli("esopt.evaluate", "model=tiny-xs", "eval.problems=2", f"eval.out={tmp_path}/e.json")
    assert out.returncode == 0 and (tmp_path / "e.json").is_file(), out.stderr
    assert n["validate"] == 1


def test_each_sweep_job_is_validated_once_by_the_sweeper_and_not_by_its_worker(tmp_path):
    from esopt.cli.sweep import main_run, ship
    from esopt.runtime import runplan

    with counted_calls(validate=validate) as n:
        out = cli("esopt.sweep", "-m", *DRY, "seed=0,1,2", f"sweep.root={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert n["validate"] == 3  # three jobs, each once
    p = run_config(*DRY, f"sweep.root={tmp_path}", check_data=False)
    runplan.write(p, store.RunDir.for_run(p.sweep.root, p.sweep.name, p.run_id).path)
    cfg = compose(*DRY, f"sweep.root={tmp_path}", ship(p.run_id))
    with counted_calls(validate=validate) as n:
        summary = main_run(cfg)
    assert summary == {"status": "dry_run", "run_id": p.run_id} and n["validate"] == 0
