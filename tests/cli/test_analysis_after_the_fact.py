"""``analysis=[...]`` asked of runs that finished without it (issue 42: a finished grid wrote
nothing and exited 0; a single run whose model/ was deleted said nothing)."""

import json

from helpers import REPO, cli, run_config

from esopt.cli.sweep import analyses
from esopt.core import store
from esopt.runtime.validate import run_id

TINY = ["model=tiny-xs", "algo=es", "pop=2", "iterations=1", "es.batch_size=2", "eval.problems=4", "eval.samples=2",
        "task.n_train=16", "task.n_test=8", "task.n_heldout=4"]
ENV = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def test_a_completed_run_without_its_model_says_the_analysis_was_not_computed(tmp_path, capsys):
    rc = run_config(*TINY, "analysis=[drift]", f"sweep.root={tmp_path}")
    rd = store.RunDir.for_run(str(tmp_path), rc.sweep.name, run_id(rc))
    rd.path.mkdir(parents=True)
    summary = {"status": "completed", "run_id": run_id(rc)}
    assert analyses(rc, summary) == summary
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"esopt: warning: run {run_id(rc)}: analysis=[drift] not computed: {rd.model_dir} is missing "
                   "(deleted, or the run had sweep.save_model=false)"]
    assert not (rd.path / "drift.json").exists()


def test_an_analysis_added_to_a_finished_grid_is_computed(tmp_path):
    """The sweeper's own skip-or-launch decision on a Hydra multirun (in this interpreter, as
    helpers.cli runs it). The rerun trains nothing (the run is kept); its worker computes drift
    from the saved model/."""
    args = ["esopt.sweep", "-m", *TINY, "seed=0", f"sweep.root={tmp_path}", "sweep.name=g", "sweep.aggregate=false"]
    first = cli(*args, env=ENV)
    assert first.returncode == 0, first.stderr[-2000:]
    (run,) = (tmp_path / "g" / "runs").iterdir()
    summary = (run / "summary.json").read_text()
    again = cli(*args, "analysis=[drift]", env=ENV)
    assert again.returncode == 0, again.stderr[-2000:]
    drift = json.loads((run / "drift.json").read_text())
    assert drift and json.loads((run / "summary.json").read_text())["analyses"]["drift"] == str(run / "drift.json")
    assert json.loads(summary)["attempts"] == json.loads((run / "summary.json").read_text())["attempts"]  # not retrained
