"""esopt.runtime.tuning: Optuna 5 studies in a journal file, trial attach by run id, pruners."""

import multiprocessing as mp

import optuna
import pytest
from optuna.trial import TrialState

from esopt.core.errors import ConfigError
from esopt.runtime import tuning
from esopt.runtime.pruning import ConfidencePruner


def cfg(root, **tun):
    """A run's resolved tuning settings (what its plan holds) for a tuning block ``tun``."""
    return tuning.resolve({"sweep": {"root": str(root), "name": "s"}, "model": {"name": "tiny-xs"}, "algo": "es",
                           "task": {"name": "countdown"}, "tuning": tun})


def test_study_name_and_default_storage(tmp_path):
    c = cfg(tmp_path)
    assert c.study == "esopt:s:tiny-xs:es:countdown"
    assert c.storage == str(tmp_path / "s" / "optuna.journal")
    assert cfg(tmp_path, study="mine").study == "mine"
    assert (c.metric, c.pruner, c.enabled, c.prunes) == ("pass@1", "none", True, False)
    assert cfg(tmp_path, pruner="MEDIAN").pruner == "median" and cfg(tmp_path, pruner="median").prunes


@pytest.mark.parametrize("name,cls,check", [
    ("none", optuna.pruners.NopPruner, {}),
    ("median", optuna.pruners.MedianPruner, {"_n_startup_trials": 3, "_n_warmup_steps": 2}),
    ("percentile", optuna.pruners.PercentilePruner, {"_percentile": 40.0, "_n_startup_trials": 3}),
    ("successive_halving", optuna.pruners.SuccessiveHalvingPruner, {"_reduction_factor": 2}),
    ("hyperband", optuna.pruners.HyperbandPruner, {"_reduction_factor": 2}),
    ("wilcoxon", optuna.pruners.WilcoxonPruner, {"_p_threshold": 0.2}),
    ("auto", ConfidencePruner, {"n_warmup_steps": 2, "confidence": 0.9, "metric": "pass@1", "pool_seeds": True}),
])
def test_make_pruner_from_knobs(name, cls, check):
    knobs = dict(pruner=name, n_startup_trials=3, n_warmup_steps=2, percentile=40.0, reduction_factor=2,
                 p_threshold=0.2, confidence=0.9)
    p = tuning.make_pruner(knobs)
    assert type(p) is cls
    for attr, value in check.items():
        assert getattr(p, attr) == value
    # built identically every time (a pruner is not stored with the study)
    assert vars(tuning.make_pruner(knobs)).keys() == vars(p).keys()


@pytest.mark.parametrize("bad,match", [
    ({"pruner": "asha"}, "unknown tuning.pruner"),
    ({"prunner": "median"}, "unknown tuning key"),
    ({"direction": "up"}, "direction"),
    ({"metric": "pass @1"}, "tuning.metric"),
])
def test_bad_tuning_config_is_one_line_error(bad, match):
    with pytest.raises(ConfigError, match=match) as e:
        tuning.settings(bad)
    assert "\n" not in str(e.value)


def test_metric_value_nested_flat_and_missing():
    ev = {"pass@k": {"1": 0.25, "4": 0.5}, "maj@k": {"4": 0.3}, "greedy": 0.2}
    assert tuning.metric_value(ev, "pass@1") == 0.25
    assert tuning.metric_value(ev, "maj@4") == 0.3
    assert tuning.metric_value(ev, "greedy") == 0.2
    assert tuning.metric_value({"pass@1": 0.7}, "pass@1") == 0.7
    assert tuning.metric_value(ev, "pass@8") is None
    assert tuning.metric_value(float("nan")) is None


def _worker(root, i, barrier, queue):
    barrier.wait()  # all eight hit the journal at once
    t = tuning.attach(cfg(root), f"run{i}", {"pop": 8 + i})
    for step in range(3):
        t.report({"pass@k": {"1": i / 10 + step / 100}}, step)
    again = tuning.attach(cfg(root), f"run{i}", {"pop": 8 + i})  # a requeued attempt re-attaches
    t.finish({"status": "completed", "final": {"pass@k": {"1": i / 10}}})
    queue.put((i, t.number, again.number))


def test_eight_concurrent_processes_one_journal(tmp_path):
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(tmp_path, i, barrier, queue)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    got = sorted(queue.get(timeout=5) for _ in range(8))
    assert all(first == again for _, first, again in got)  # attach found the same trial

    study = optuna.load_study(study_name="esopt:s:tiny-xs:es:countdown",
                              storage=tuning.open_storage(str(tmp_path / "s" / "optuna.journal")))
    trials = study.get_trials()
    assert len(trials) == 8  # none lost, none duplicated
    assert sorted(t.user_attrs["run_id"] for t in trials) == [f"run{i}" for i in range(8)]
    assert sorted(t.number for t in trials) == list(range(8))
    for t in trials:
        i = int(t.user_attrs["run_id"][3:])
        assert t.state == TrialState.COMPLETE
        assert t.value == pytest.approx(i / 10)
        assert t.user_attrs["pop"] == 8 + i
        assert t.intermediate_values == pytest.approx({s: i / 10 + s / 100 for s in range(3)})


def test_median_pruner_prunes_and_records_pruned(tmp_path):
    c = cfg(tmp_path, pruner="median", n_startup_trials=1)
    good = tuning.attach(c, "good", {})
    for step in range(3):
        good.report(0.9, step)
        assert not good.should_prune()
    good.finish({"status": "completed", "final": {"pass@1": 0.9}})

    bad = tuning.attach(c, "bad", {})
    bad.report(0.1, 0)
    assert bad.should_prune()
    bad.finish({"status": "pruned"})
    failed = tuning.attach(c, "boom", {})
    failed.finish({"status": "failed", "error": "RuntimeError: x"})

    study = tuning.open_study(c)
    states = {t.user_attrs["run_id"]: t.state for t in study.get_trials()}
    assert states == {"good": TrialState.COMPLETE, "bad": TrialState.PRUNED, "boom": TrialState.FAIL}
    # a retried run gets a fresh trial; the finished one is kept
    retry = tuning.attach(c, "boom", {})
    assert retry.number == 3


def test_no_pruning_by_default(tmp_path):
    c = cfg(tmp_path)
    tuning.attach(c, "a", {}).finish({"status": "completed", "final": {"pass@1": 0.9}})
    t = tuning.attach(c, "b", {})
    t.report(0.0, 0)
    assert not t.should_prune()


def test_disabled_tuning_attaches_nothing(tmp_path):
    assert tuning.attach(cfg(tmp_path, enabled=False), "a", {}) is None
    assert not (tmp_path / "s" / "optuna.journal").exists()


def test_real_run_is_pruned_and_recorded(tmp_path):
    """A tiny ES run reports pass@1 at each evaluation; a study whose other trial scored 1.0
    prunes it at its first report: summary.json says pruned and so does its trial."""
    from helpers import run_config

    from esopt.runtime.run import run

    overrides = ["model=tiny-xs", "algo=es", "iterations=3", "pop=2", "es.batch_size=2", "eval.every=1",
                 "eval.problems=4", "eval.samples=2", "task.n_train=16", "task.n_test=8", "task.n_heldout=8",
                 f"sweep.root={tmp_path}", "sweep.name=p", "tuning.pruner=median",
                 "tuning.n_startup_trials=1"]
    rc = run_config(*overrides)
    best = tuning.attach(rc.tuning_settings, "another-run", {})
    for step in range(4):
        best.report(1.0, step)
    best.finish({"status": "completed", "final": {"pass@1": 1.0}})

    summary = run(rc)
    assert summary["status"] == "pruned", summary.get("error")
    assert "pruned at iteration 1" in summary["error"]
    trial = tuning.find_trial(tuning.open_study(rc.tuning_settings), summary["run_id"])
    assert trial.state == TrialState.PRUNED
    assert list(trial.intermediate_values) == [1]


def test_journal_opens_in_optuna_dashboard(tmp_path):
    """The README's command, `optuna-dashboard results/<sweep>/optuna.journal`, serves the
    sweep's studies (on loopback; the server is stopped at the end)."""
    import json
    import shutil
    import socket
    import subprocess
    import time
    import urllib.request

    exe = shutil.which("optuna-dashboard")
    if exe is None:
        pytest.skip("optuna-dashboard is not installed (pip install -e '.[test]')")
    cfg = tuning.resolve({"sweep": {"root": str(tmp_path), "name": "s"}, "model": {"name": "tiny-s"},
                          "algo": "es", "task": {"name": "countdown"}, "tuning": {}})
    trial = tuning.attach(cfg, "run-1", {"pop": 8})
    trial.report(0.25, 1)
    trial.finish({"status": "completed", "final": {"pass@1": 0.3}})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, str(tmp_path / "s" / "optuna.journal"), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, studies = time.time() + 60, None
        while time.time() < deadline and studies is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    studies = json.loads(r.read())["study_summaries"]
            except OSError:
                time.sleep(0.5)
        assert studies is not None, "optuna-dashboard did not answer"
        assert [s["study_name"] for s in studies] == ["esopt:s:tiny-s:es:countdown"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
