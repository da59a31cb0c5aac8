"""A torn or garbage tail of the Optuna journal (issue 29, item 1: a full disk left a partial
last line, the next append was glued to it, every later run failed) is set aside before Optuna
reads it: a copy kept, one warning naming the file, every complete record kept; a kept run
whose COMPLETE record was lost is re-reported from its summary.json."""

import json
import os

import optuna
import pytest
from helpers import cli, run_cli
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from esopt.runtime import tuning

ENV = {"OMP_NUM_THREADS": "1"}


def fresh_trials(path):
    """Every trial of every study, read by a new Optuna storage (no cache)."""
    st = JournalStorage(JournalFileBackend(str(path)))
    return [t for s in optuna.get_all_study_summaries(st)
            for t in optuna.load_study(study_name=s.study_name, storage=st).trials]


def write_journal(path, n=3):
    st = JournalStorage(JournalFileBackend(str(path)))
    study = optuna.create_study(storage=st, study_name="s", direction="maximize")
    for i in range(n):
        t = study.ask()
        t.set_user_attr("run_id", f"r{i}")
        study.tell(t, 0.1 * i)


@pytest.mark.parametrize("damage", ["torn", "garbage", "torn+glued"])
def test_a_damaged_journal_tail_is_set_aside_and_the_study_goes_on(tmp_path, capsys, damage):
    path = tmp_path / "optuna.journal"
    write_journal(path)
    size = path.stat().st_size
    if damage == "torn":
        os.truncate(path, size - 40)  # the last record (trial 2's COMPLETE) torn
    else:
        with open(path, "ab") as f:
            f.write(b'{"op_code":6,"worker_id":"w","tri' + (b"" if damage == "torn+glued" else b"\x00garbage\n"))
    if damage == "torn+glued":  # the next append lands glued to the partial line
        rec = {"op_code": 2, "worker_id": "w", "study_id": 0, "user_attr": {"glued": 1}}  # a study attr
        with open(path, "ab") as f:
            f.write(json.dumps(rec, separators=(",", ":")).encode() + b"\n")
    original = path.read_bytes()
    tuning._STORAGES.clear()
    study = optuna.create_study(storage=tuning.open_storage(str(path)), study_name="s", load_if_exists=True,
                                direction="maximize")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("esopt: warning: Optuna journal ") and str(path) in err[0], err
    copies = list(tmp_path.glob("optuna.journal.torn-*"))
    assert len(copies) == 1 and copies[0].read_bytes() == original and copies[0].name in err[0]
    t = study.ask()  # the study goes on: a new trial appended after the repair
    study.tell(t, 0.9)
    trials = fresh_trials(path)  # read back by a fresh reader: no decode error
    complete = [t.value for t in trials if t.state == TrialState.COMPLETE]
    if damage == "torn":
        assert complete == pytest.approx([0.0, 0.1, 0.9]) and trials[2].state == TrialState.RUNNING
    else:
        assert complete == pytest.approx([0.0, 0.1, 0.2, 0.9])
    glued = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path)))).user_attrs
    assert (glued.get("glued") == 1) == (damage == "torn+glued")  # the record glued to a torn one kept
    tuning._STORAGES.clear()
    tuning.open_storage(str(path))  # a sound journal: untouched, no warning
    assert capsys.readouterr().err == "" and len(list(tmp_path.glob("optuna.journal.torn-*"))) == 1


def test_the_issue_repro_completes_with_every_record(tmp_path):
    """``seed=0,1``, ``truncate -s -40`` the journal, then ``seed=0,1,2``: the first two are
    kept, the third runs, and the journal holds a COMPLETE record for every run. The rerun is a
    new interpreter, as a user's is: this process's storage would still hold the journal as it
    read it before the truncation."""
    args = ["esopt.sweep", "-m", "model=tiny-xs", "pop=4", "iterations=4", "eval.problems=10", "eval.samples=2",
            f"sweep.root={tmp_path}", "sweep.name=j"]
    r = cli(*args, "seed=0,1", env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    journal = tmp_path / "j" / "optuna.journal"
    os.truncate(journal, journal.stat().st_size - 40)
    r = run_cli(*args, "seed=0,1,2", env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "esopt: 3 runs: 3 completed" in r.stdout and r.stdout.count("completed (kept)") == 2
    warnings = [line for line in r.stderr.splitlines() if "torn or garbage" in line]
    assert len(warnings) == 1 and str(journal) in warnings[0], r.stderr[-2000:]
    runs = {p.name: json.loads((p / "summary.json").read_text()) for p in (tmp_path / "j" / "runs").iterdir()}
    trials = fresh_trials(journal)
    done = {t.user_attrs["run_id"]: t.value for t in trials if t.state == TrialState.COMPLETE}
    assert set(done) == set(runs) and len(runs) == 3
    for rid, s in runs.items():
        assert s["status"] == "completed" and done[rid] == pytest.approx(tuning.metric_value(s["final"]))
