"""The run's plan (esopt.runtime.runplan): resolved once by validate, and the run id it hashes."""

import dataclasses
import json

import pytest

from esopt.core import store
from esopt.runtime.migrate_ids import old_run_id as legacy_run_id
from esopt.runtime.runplan import RunPlan
from esopt.runtime.validate import run_id
from helpers import run_config

TINY = ("model=tiny-xs", "iterations=4", "pop=4", "es.batch_size=4", "eval.problems=4")


def plan(*overrides: str, root=None) -> RunPlan:
    extra = (f"sweep.root={root}",) if root is not None else ()
    return run_config(*TINY, *overrides, *extra, check_data=False)


def test_es_plan_holds_its_resolved_block_the_engine_and_the_task_spec():
    p = plan("algo=es")
    assert isinstance(p, RunPlan)
    assert p.run_id == run_id(p)
    (phase,) = p.phases
    es = phase.settings
    # tiny-xs's hparams (conf/model/tiny-xs.yaml): es_sigma 0.01, es_lr 0.005
    assert (phase.algo, phase.iterations, phase.offset) == ("es", 4, 0)
    assert (es.sigma, es.lr, es.pop, es.iterations, es.seed, es.batch_size) == (0.01, 0.005, 4, 4, 0, 4)
    assert p.engine_config.name == p.engine["name"] != "auto"    # engine=auto picked
    assert (p.task_spec.style, p.task_spec.max_new_tokens) == ("compact", 24)
    assert p.model["name"] == "tiny-xs" and p.sigma is None      # the config as written reads through
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.phases = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        es.sigma = 0.5
    json.loads(p.to_json())  # plain JSON


def test_sequence_plan_holds_each_phase_with_its_share_of_the_iterations():
    p = plan("algo=es_grpo", "es.sigma=0.02")
    assert [(q.algo, q.iterations, q.offset) for q in p.phases] == [("es", 2, 0), ("grpo", 2, 2)]
    assert p.phase("es").settings.sigma == 0.02 and p.phase("es").settings.iterations == 2
    assert p.phase("grpo").settings.lr == 1e-4                   # tiny-xs's grpo_lr
    assert plan("algo=none").phases == ()


@pytest.mark.parametrize("algo, stated", [
    ("es", ("sigma=0.01", "lr=0.005")),
    ("es", ("es.sigma=0.01", "es.lr=0.005")),
    ("grpo", ("lr=1e-4",)),
    ("grpo", ("grpo.lr=0.0001",)),
    ("random_search", ("sigma=0.01",)),
    ("grpo_es", ("es.sigma=0.01", "grpo.lr=1e-4")),
])
def test_a_stated_default_and_an_implied_one_are_one_run(algo, stated):
    implied = plan(f"algo={algo}")
    given = plan(f"algo={algo}", *stated)
    assert run_id(given) == run_id(implied)
    assert legacy_run_id(given) != legacy_run_id(implied)        # the ids before the plan differed


def test_another_value_is_another_run_and_what_an_algorithm_does_not_read_is_no_run():
    assert run_id(plan("algo=es", "sigma=0.02")) != run_id(plan("algo=es"))
    assert run_id(plan("algo=grpo", "lr=3e-4")) != run_id(plan("algo=grpo"))
    assert run_id(plan("algo=random_search", "es.lr=0.5")) == run_id(plan("algo=random_search"))  # no lr read
    assert run_id(plan("algo=none", "sigma=0.5")) == run_id(plan("algo=none"))


def test_a_run_that_trains_nothing_keeps_its_id():
    p = plan("algo=none")
    assert run_id(p) == legacy_run_id(p)


def _record(p: RunPlan, rid: str, status: str) -> store.RunDir:
    rd = store.RunDir.for_run(p.sweep.root, p.sweep.name, rid)
    rd.create(p.to_dict())
    rd.write_summary({"status": status, "run_id": rid, "inputs": p.inputs})
    return rd


@pytest.mark.parametrize("status, moved", [("completed", True), ("pruned", True), ("failed", False),
                                           ("running", False)])
def test_a_run_recorded_under_its_legacy_id_is_migrated_when_it_ended(tmp_path, capsys, status, moved):
    """esopt.migrate_ids renames a run folder recorded under its id of before the resolved plan
    (from its config.yaml: no plan.json then) to its current id, rewriting its summary; a run
    that did not end is left to the sweep, and a taken current id leaves the folder alone."""
    from esopt.cli.migrate_ids import main
    from esopt.runtime.run import run

    p = plan("algo=es", "sigma=0.01", root=tmp_path)
    old, new = legacy_run_id(p), run_id(p)
    old_rd = _record(p, old, status)
    if status == "pruned":  # a plan.json of then (it named the old id too): read, rewritten with the current ids
        d = json.loads(p.to_json())
        d["resolved"].update(legacy_id=old, run_id=old)
        (old_rd.path / "plan.json").write_text(json.dumps(d))
    assert main([str(tmp_path), "--dry-run"]) == 0 and old_rd.path.is_dir()
    assert (f"would rename {old} -> {new}" in capsys.readouterr().out) == moved
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr()
    new_rd = store.RunDir.for_run(p.sweep.root, p.sweep.name, new)
    assert (f"renamed {old} -> {new}" in out.out) == moved == new_rd.path.is_dir() != old_rd.path.is_dir()
    if not moved:
        assert f"recorded {status}; a sweep runs it under its current id {new}" in out.err
        return
    assert new_rd.read_summary() == {"status": status, "run_id": new, "migrated_from": old, "inputs": p.inputs}
    if status == "pruned":
        assert RunPlan.from_json((new_rd.path / "plan.json").read_text()) == p
    assert run(p)["run_id"] == new and f"run {new} already {status}; skipped" in capsys.readouterr().err
    again = _record(p, old, status)                             # its current id is taken now: left alone
    assert main([str(tmp_path)]) == 0 and again.path.is_dir()
    assert f"its current id {new} is taken ({status}" in capsys.readouterr().err


def test_a_migrated_run_keeps_its_optuna_trial(tmp_path):
    """The sweep's re-report of a kept run finds a migrated run's trial under the id it ran with
    (summary.json's migrated_from), so the study gets no second trial for it."""
    from esopt.runtime import tuning

    p = plan("algo=es", "tuning.pruner=median", "eval.every=1", root=tmp_path)
    old = legacy_run_id(p)
    tuning.attach(p.tuning_settings, old, p.trial_attrs()).finish("completed", 0.5)
    summary = {"status": "completed", "run_id": p.run_id, "final": {"pass@1": 0.5}}
    assert not tuning.rereport(p.tuning_settings, p.run_id, {**summary, "migrated_from": old})
    assert tuning.rereport(p.tuning_settings, p.run_id, summary)  # not migrated: a trial of its own


def test_migrate_ids_with_no_run_folders_is_one_line(tmp_path, capsys):
    from esopt.cli.migrate_ids import main

    with pytest.raises(SystemExit) as e:
        main([str(tmp_path)])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == f"esopt: error: {tmp_path} holds no run folders " \
                                              "(<root>/<sweep>/runs/<id>/ or <sweep>/runs/<id>/)"


@pytest.mark.parametrize("algo", ["none", "es", "grpo", "es_grpo", "random_search"])
def test_the_plan_reads_back_from_its_json_as_it_was(algo):
    p = plan(f"algo={algo}", "sigma=0.02" if algo in ("es", "random_search") else "seed=1")
    back = RunPlan.from_json(p.to_json())
    assert back == p and run_id(back) == run_id(p)
    assert back.to_json() == p.to_json()


def test_a_multirun_worker_reads_the_plan_the_sweeper_shipped(tmp_path):
    """The sweeper writes <run>/plan.json and adds +run_plan='<run id>'; the worker's task
    function takes that plan as it is (no second validation), and a torn file is one line.
    Run ids Hydra would read as numbers unquoted (621e01573466 -> inf: a real sweep lost a run
    to it) reach the worker as written."""
    from esopt.cli.sweep import SHIPPED, main_run, ship, shipped_plan
    from esopt.core.errors import ConfigError
    from esopt.runtime import runplan
    from helpers import compose

    p = plan("algo=es", root=tmp_path)
    for rid in ("621e01573466", "012345678901"):  # reach the worker as written: the folder named in the error
        runplan.write(p, store.RunDir.for_run(p.sweep.root, p.sweep.name, rid).path)
        with pytest.raises(ConfigError, match=f"runs/{rid}/plan.json: the plan of run {p.run_id} is in the folder "
                                              f"of run {rid} "):
            shipped_plan(compose(*TINY, "algo=es", f"sweep.root={tmp_path}", ship(rid)))
    runplan.write(p, store.RunDir.for_run(p.sweep.root, p.sweep.name, p.run_id).path)
    cfg = compose(*TINY, "algo=es", f"sweep.root={tmp_path}", ship(p.run_id))
    assert shipped_plan(cfg) == p and SHIPPED not in cfg
    path = store.RunDir.for_run(p.sweep.root, p.sweep.name, run_id(p)).path / "plan.json"
    # a job whose plan is missing raises (its launcher returns the error and the sweeper records
    # the run failed), where a single run would exit: one job never ends the sweep
    with pytest.raises(ConfigError, match="run 0123456789ab: its plan.json is missing"):
        main_run(compose(*TINY, "algo=es", f"sweep.root={tmp_path}", ship("0123456789ab")))
    assert shipped_plan(compose(*TINY, "algo=es", f"sweep.root={tmp_path}")) is None
    assert runplan.load(path.parent) == p
    path.write_text(path.read_text()[:40])
    with pytest.raises(ConfigError, match="unreadable .*plan.json"):
        runplan.load(path.parent)


def test_an_edited_shipped_plan_fails_its_run_on_every_attempt(tmp_path):
    """A queued run's plan.json edited (pop 4 made 8, in the config or in the resolved block)
    must not run pop 8 under the pop-4 id: the worker recomputes the ids from the file's content,
    and the run fails with one line naming the file. A Slurm requeue calls the same task function
    with the same overrides, so every attempt reads the file again and fails the same way; nothing
    is written into the run's folder but the failure (runtime.run.record_ended)."""
    from esopt.cli.sweep import main_run, ship
    from esopt.core.errors import ConfigError
    from esopt.runtime import runplan
    from esopt.runtime.run import record_ended
    from helpers import compose

    p = plan("algo=es", root=tmp_path)
    rd = store.RunDir.for_run(p.sweep.root, p.sweep.name, p.run_id)
    path = runplan.write(p, rd.path)
    shipped = json.loads(path.read_text())
    resolves = "its resolved phases are not what its config resolves to"
    for edit, says in ((lambda d: d["config"].update(pop=8), resolves),
                       (lambda d: d["resolved"]["phases"][0]["settings"].update(pop=8), resolves),
                       (lambda d: d["config"]["eval"].update(samples=8), "its content is run id "),
                       (lambda d: d["resolved"].update(run_id="0123456789ab"), "its content is run id ")):
        d = json.loads(json.dumps(shipped))
        edit(d)
        path.write_text(json.dumps(d))
        for attempt in range(2):  # the job, then its requeue
            with pytest.raises(ConfigError) as e:
                main_run(compose(*TINY, "algo=es", f"sweep.root={tmp_path}", ship(p.run_id)))
            line = str(e.value)
            assert "\n" not in line and line.startswith(f"{path}: {says}"), line
        assert sorted(x.name for x in rd.path.iterdir()) == ["plan.json"]
    assert record_ended(p.config, p.run_id, e.value)
    assert rd.read_summary()["error"] == f"ConfigError: {line}" and rd.status == "failed"


def test_the_summary_axes_are_the_plans_resolved_values():
    """summary.json's sigma / lr (run._first_summary) come from the plan, not patched in later."""
    assert (plan("algo=es").axis("sigma"), plan("algo=es").axis("lr")) == (0.01, 0.005)
    assert (plan("algo=grpo").axis("sigma"), plan("algo=grpo").axis("lr")) == (None, 1e-4)
    assert (plan("algo=random_search").axis("sigma"), plan("algo=random_search").axis("lr")) == (0.01, None)
    seq = plan("algo=grpo_es", "es.sigma=0.02")
    assert (seq.axis("sigma"), seq.axis("lr")) == (0.02, None)  # each phase has its own lr
    assert (plan("algo=none").axis("sigma"), plan("algo=none").axis("pop")) == (None, None)


def test_the_optuna_trial_records_the_plans_resolved_values(tmp_path):
    """A run's trial (and a kept run's re-report) records the plan's sigma / lr, not the
    config's null: one home, RunPlan.trial_attrs, read by the run and the sweeper."""
    from esopt.runtime import tuning

    p = plan("algo=es", "tuning.pruner=median", "eval.every=1", root=tmp_path)
    attrs = p.trial_attrs(1234)
    assert attrs == {"model": "tiny-xs", "params": 1234, "pop": 4, "sigma": 0.01, "lr": 0.005, "seed": 0,
                     "algo": "es", "config_id": p.config_id}
    t = p.tuning_settings
    assert (t.metric, t.pruner, t.study) == ("pass@1", "median", "esopt:default:tiny-xs:es:countdown")
    assert t.storage == str(tmp_path / "default" / tuning.JOURNAL_NAME)
    trial = tuning.attach(t, p.run_id, attrs)
    assert trial.trial.user_attrs["sigma"] == 0.01 and trial.trial.user_attrs["lr"] == 0.005
    assert plan("algo=grpo").trial_attrs()["sigma"] is None


def test_the_plan_keeps_its_trackers_options_typed_and_reads_them_back():
    """logger=[...]: validate checks logger_opts once and the plan keeps each tracker's typed
    options, in logger's order; the run's trackers are built from them (trackers.attach)."""
    pytest.importorskip("wandb")
    pytest.importorskip("tensorboard")
    p = plan("algo=es", "logger=[wandb,tensorboard]", "logger_opts.wandb.project=mine")
    assert list(p.tracker_options) == ["wandb", "tensorboard"]
    assert p.tracker_options["wandb"].project == "mine"
    back = RunPlan.from_json(p.to_json())
    assert back == p and back.tracker_options["wandb"].project == "mine"
    assert plan("algo=es").tracker_options == {}


def test_the_plan_holds_the_probes_as_specs_and_reads_them_back():
    """eval.probes: validate resolves each probe once into a TaskSpec (its style and budget), in
    eval.probes' order; the run builds its probe tasks from those specs (run.load_probe_tasks)."""
    from esopt.models import char_tokenizer
    from esopt.runtime.run import load_probe_tasks

    p = plan("algo=es", "eval.probes=[addition,reverse]", "eval.probe_problems=3", "eval.probe_samples=2")
    assert [s.config["name"] for s in p.probe_specs] == ["addition", "reverse"]
    assert all(s.style == "compact" and s.max_new_tokens for s in p.probe_specs)
    back = RunPlan.from_json(p.to_json())
    assert back == p and back.probe_specs == p.probe_specs
    built = load_probe_tasks(back, char_tokenizer())
    assert list(built) == ["addition", "reverse"] and all(t.style == "compact" for t in built.values())
    assert plan("algo=es").probe_specs == () and load_probe_tasks(plan("algo=es"), None) == {}
