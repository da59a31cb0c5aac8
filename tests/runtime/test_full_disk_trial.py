"""Issue 42: after a disk-full rerun a run had both a FAIL and a COMPLETE Optuna trial. The
disk (a real small tmpfs) fills just before the run records its end: the summary stays
``running`` (the run resumes), so its trial must stay RUNNING for the attempt that finishes it."""

import optuna
from optuna.trial import TrialState

from helpers import fill_disk, run_config, small_disk

from esopt.core import store
from esopt.runtime import tuning
from esopt.runtime.run import run
from esopt.runtime.validate import run_id


def test_an_end_not_recorded_on_a_full_disk_leaves_one_trial_for_the_resume(tmp_path, monkeypatch, capsys):
    journal = tmp_path / "optuna.journal"          # the study off the full disk
    with small_disk(tmp_path / "disk", "8m") as disk:
        rc = run_config("model=tiny-xs", "algo=es", "pop=2", "iterations=1", "es.batch_size=2", "eval.problems=4",
                        "eval.samples=2", "task.n_train=16", "task.n_test=8", "task.n_heldout=4",
                        f"sweep.root={disk}", f"tuning.storage={journal}", "sweep.save_model=false")
        write = store.RunDir.write_summary
        filled = []

        def full_at_the_end(self, summary):        # the real ENOSPC, at the moment that matters
            if summary.get("status") != "running" and not filled:
                filled.append(fill_disk(disk))
            return write(self, summary)

        monkeypatch.setattr(store.RunDir, "write_summary", full_at_the_end)
        first = run(rc)
        rd = store.RunDir.for_run(str(disk), rc.sweep.name, run_id(rc))
        assert first["status"] == "completed" and rd.status == "running"
        assert "could not record the end of run" in capsys.readouterr().err
        filled[0].unlink()
        again = run(rc)                              # the rerun resumes it
        assert again["status"] == "completed" and rd.status == "completed"
    study = optuna.load_study(study_name=rc.tuning_settings.study, storage=tuning.open_storage(str(journal)))
    mine = [t for t in study.get_trials() if t.user_attrs.get("run_id") == run_id(rc)]
    assert [t.state for t in mine] == [TrialState.COMPLETE], [t.state for t in mine]
    assert mine[0].value == tuning.metric_value(again["final"])
