"""The esopt Hydra sweeper end to end on the local launcher, with real tiny runs (algo=none:
load the model, evaluate 8 problems x 4 samples): dry run, validation before dispatch,
SIGKILL + rerun, failing runs, Optuna search mode."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import cli, local_data_overrides, model_copy, REPO

TINY = ["model=tiny-xs", "algo=none", "eval.problems=8", "eval.samples=4", "task.n_train=32",
        "task.n_test=16", "task.n_heldout=16", "sweep.aggregate=false", "hydra/sweeper=esopt"]
ENV = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def sweep_args(root, name, *args, multirun=True):
    return ["esopt.sweep", *(["-m"] if multirun else []), *TINY, f"sweep.root={root}", f"sweep.name={name}", *args]


def summaries(root, name):
    runs = root / name / "runs"
    out = {}
    for d in sorted(runs.iterdir()) if runs.is_dir() else []:
        f = d / "summary.json"
        if f.exists():
            out[d.name] = json.loads(f.read_text())
    return out


def test_dry_run_lists_grid_completed_ids_and_tokens(tmp_path):
    single = cli(*sweep_args(tmp_path, "dry", "pop=8", "seed=0", multirun=False), env=ENV)
    assert single.returncode == 0, single.stderr[-2000:]
    (done_id,) = summaries(tmp_path, "dry")

    r = cli(*sweep_args(tmp_path, "dry", "pop=8", "seed=0,1,2", "sweep.dry_run=true"), env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "dry run: 3 runs" in out
    ids = re.findall(r"^\s*\d+\s+([0-9a-f]{12})\s", out, flags=re.M)
    assert len(set(ids)) == 3 and done_id in ids
    assert re.search(rf"{done_id}\s+0\s+completed\s+skip\s+960\b", out), out
    assert len(re.findall(r"\bnew\s+run\s+960\b", out)) == 2
    assert f"completed already (skipped): 1 [{done_id}]" in out
    # upper bound: 1 evaluation x 8 problems x (4 samples + greedy) x 24 tokens = 960 per run
    assert "1,920 to run, 2,880 for the whole grid" in out
    assert list(summaries(tmp_path, "dry")) == [done_id]  # nothing launched


@pytest.mark.parametrize("bad,needle", [
    ("pop=8,1", "pop must be >= 2"),
    ("sigma=1e-3,-1", "sigma must be > 0"),
    ("model=tiny-xs,nosuchmodel", "nosuchmodel"),
])
def test_invalid_values_rejected_before_dispatch(tmp_path, bad, needle):
    r = cli(*sweep_args(tmp_path, "bad", "seed=0,1", bad), env=ENV)
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("esopt: error:")]
    assert len(errors) == 1 and needle in errors[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "bad" / "runs").exists()  # not even the valid runs were started


def test_sigkill_mid_grid_then_rerun_completes_each_run_once(tmp_path):
    args = sweep_args(tmp_path, "kill", "seed=0,1,2,3")
    p = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env={**os.environ, **ENV},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            s = summaries(tmp_path, "kill")
            done = [k for k, v in s.items() if v["status"] == "completed"]
            if done and any(v["status"] == "running" for v in s.values()):
                break
            assert p.poll() is None, "sweep ended before it could be killed"
            time.sleep(0.1)
        else:
            pytest.fail("no run completed within 300 s")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    before = summaries(tmp_path, "kill")
    finished = {k: (tmp_path / "kill" / "runs" / k / "summary.json").stat().st_mtime_ns
                for k, v in before.items() if v["status"] == "completed"}
    assert 1 <= len(finished) < 4

    r = cli(*args, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    after = summaries(tmp_path, "kill")
    assert len(after) == 4 and all(v["status"] == "completed" for v in after.values())
    for rid, mtime in finished.items():  # finished runs were neither redone nor touched
        assert (tmp_path / "kill" / "runs" / rid / "summary.json").stat().st_mtime_ns == mtime
        assert after[rid] == before[rid]
    for rid, s in after.items():
        lines = [json.loads(x) for x in (tmp_path / "kill" / "runs" / rid / "metrics.jsonl").read_text().splitlines()]
        assert sum(ln["phase"] == "base" for ln in lines) == 1  # each run evaluated exactly once
        assert s["attempts"] == (2 if before.get(rid, {}).get("status") == "running" else 1)
    assert f"{len(finished)} of 4 runs already recorded" in r.stdout


def test_failing_run_is_recorded_and_the_rest_complete(tmp_path):
    bad = model_copy(tmp_path / "ckpt", mismatched=True)  # passes the checks, fails to load
    args = sweep_args(tmp_path, "fail", f"model.path=null,{bad}")
    r = cli(*args, env=ENV)
    assert r.returncode == 1
    s = summaries(tmp_path, "fail")
    statuses = sorted(v["status"] for v in s.values())
    assert statuses == ["completed", "failed"]
    failed = next(v for v in s.values() if v["status"] == "failed")
    assert failed["error"] and failed["attempts"] == 1
    assert "2 runs: 1 completed, 1 failed" in r.stdout
    assert "1 of 2 runs did not complete (1 failed" in r.stderr

    again = cli(*args, env=ENV)  # failed runs are kept unless retry_failed
    assert again.returncode == 1
    assert summaries(tmp_path, "fail") == s
    retry = cli(*args, "sweep.retry_failed=true", env=ENV)
    assert retry.returncode == 1
    s2 = summaries(tmp_path, "fail")
    assert next(v for v in s2.values() if v["status"] == "failed")["attempts"] == 2
    assert next(v for v in s2.values() if v["status"] == "completed") == \
        next(v for v in s.values() if v["status"] == "completed")


def test_unreadable_summary_is_listed_and_never_blocks_the_sweep(tmp_path):
    """A run whose summary.json is not UTF-8 is kept and listed as unreadable (sweep table,
    report); the other runs of the grid run as usual."""
    from helpers import run_config

    from esopt.runtime.validate import run_id

    args = sweep_args(tmp_path, "unread", "seed=0,1,2", "sweep.aggregate=true")
    rc = run_config(*[a for a in args[2:] if not a.startswith(("hydra/", "seed="))], "seed=1")
    bad = tmp_path / "unread" / "runs" / run_id(rc)
    bad.mkdir(parents=True)
    (bad / "summary.json").write_bytes(b'\xff\xfe{"status": "completed"\x80')
    r = cli(*args, env=ENV)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "3 runs: 2 completed, 1 unreadable" in r.stdout
    assert re.search(rf"{run_id(rc)}\s+1\s+unreadable \(kept\)", r.stdout), r.stdout
    assert "1 of 3 runs did not complete (1 unreadable" in r.stderr
    assert (bad / "summary.json").read_bytes().startswith(b"\xff\xfe")  # left as it was
    done = [d for d in (tmp_path / "unread" / "runs").iterdir() if d != bad]
    assert len(done) == 2 and all(json.loads((d / "summary.json").read_text())["status"] == "completed"
                                  for d in done)
    page = (tmp_path / "unread" / "report.html").read_text()
    skipped = re.search(r'<table id="table-skipped">(.*?)</table>', page, re.S).group(1)
    assert f"<td>{run_id(rc)}</td><td>corrupt summary.json" in skipped


def test_optuna_search_mode_runs_trials_and_prints_best(tmp_path):
    import optuna

    from esopt.runtime import tuning

    args = sweep_args(tmp_path, "search", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
                      "hydra.sweeper.n_jobs=2", "seed=choice(0,1)", "eval.temperature=interval(0.2,1.0)")
    r = cli(*args, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"best trial #\d: 0\.\d+ \(pass@1\)", r.stdout), r.stdout
    study = optuna.load_study(study_name="esopt:search:search",
                              storage=tuning.open_storage(str(tmp_path / "search" / "optuna.journal")))
    trials = study.get_trials()
    assert len(trials) == 2
    runs = summaries(tmp_path, "search")
    for t in trials:
        assert t.state == optuna.trial.TrialState.COMPLETE
        s = runs[t.user_attrs["run_id"]]
        assert s["seed"] == t.params["seed"]
        assert s["config"]["eval"]["temperature"] == pytest.approx(t.params["eval.temperature"])
        assert 0.2 <= t.params["eval.temperature"] <= 1.0
        assert t.value == pytest.approx(s["final"]["pass@k"]["1"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process start times come from /proc")
def test_worker_alive_tells_live_other_processes_from_dead_and_self():
    from esopt.core import store

    me = store.worker_info()
    assert me["pid"] == os.getpid() and me["host"]
    assert store.worker_alive(me) is None  # this very process (e.g. a requeued job) may resume
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = {**me, "pid": p.pid, "pid_start": store._proc_start(p.pid)}
        assert store.worker_alive(other) == f"pid {p.pid} on {me['host']}"
        assert store.worker_alive({**other, "pid_start": other["pid_start"] + 1}) is None  # pid reused
    finally:
        p.kill()
        p.wait()
    assert store.worker_alive(other) is None  # gone: the run may be resumed
    assert store.worker_alive({}) is None


def test_launch_order_keeps_each_models_runs_together():
    """A grid whose model axis varies fastest is launched model by model (the grid's order kept
    within a model), so an in-process launcher starts one vLLM engine per model, not per run."""
    from types import SimpleNamespace

    from hydra_plugins.esopt_sweeper.sweepers import Job, by_model

    jobs = [Job(overrides=[], plan=SimpleNamespace(model={"name": m, "path": None}), rid=f"{m}{seed}", launcher={})
            for seed in (0, 1, 2) for m in ("tiny-s", "tiny-xs", "tiny-m")]
    assert [j.rid for j in by_model(jobs)] == ["tiny-s0", "tiny-s1", "tiny-s2", "tiny-xs0", "tiny-xs1",
                                               "tiny-xs2", "tiny-m0", "tiny-m1", "tiny-m2"]
    assert by_model(jobs[:1]) == jobs[:1] and by_model([]) == []


@pytest.mark.parametrize("preset", sorted(p.stem for p in (REPO / "sweeps").glob("*.yaml")))
def test_every_preset_value_composes_and_validates(preset, tmp_path):
    """Each value of each grid axis of every preset (``params`` and any sub-``grids``), varied
    one at a time from the grid's first point, gives a valid run config (nothing runs). Hub and
    user-supplied data (GSM8K, the Countdown file) are pointed at local copies (no network)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from esopt.cli import configs
    from esopt.core.errors import ConfigError
    from esopt import engines
    from esopt.models import smollm2
    from esopt.runtime.validate import validate

    configs.register()
    try:
        smollm2.package_gguf()
        smollm2_installed = True
    except ConfigError:
        smollm2_installed = False

    def values(v):
        return [x.strip() for x in re.split(r",(?![^\[]*\])", str(v))]

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        base = compose(config_name="config", overrides=[f"+experiment={preset}"], return_hydra_config=True)
        data = local_data_overrides(base, tmp_path)
        assert base.hydra.sweeper._target_.endswith("EsoptSweeper")
        if preset.endswith("_gpu"):
            assert base.hydra.launcher._target_.endswith("EsoptSlurmLauncher")
        sweeper = OmegaConf.to_container(base.hydra.sweeper)
        params, grids = sweeper.get("params") or {}, sweeper.get("grids") or [{}]
        assert params or grids != [{}], f"{preset} has no grid"
        for grid in grids:
            axes = {**params, **grid}
            first = {k: values(v)[0] for k, v in axes.items()}
            for key, vs in axes.items():
                for value in values(vs):
                    point = {**first, key: value}
                    overrides = [f"+experiment={preset}", *data] + [f"{k}={v}" for k, v in point.items()]
                    cfg = compose(config_name="config", overrides=overrides)
                    if cfg.model.name == smollm2.NAME and not smollm2_installed:
                        # the real model: refused up front, naming its install, where it is missing
                        with pytest.raises(ConfigError, match="scripts/install_smollm2.sh"):
                            validate(cfg)
                        continue
                    if preset.endswith("_gpu") and not engines.cuda_visible():
                        # a GPU job's engine is its own environment's: here (no GPU) the same config
                        # run in this process is refused, sent to a Slurm GPU job it validates
                        with pytest.raises(ConfigError, match="engine.device=cuda but this run would not see a GPU"):
                            validate(cfg)
                    rc = validate(cfg, cuda=True if preset.endswith("_gpu") else None)  # as the sweeper does
                    if preset.endswith("_gpu"):
                        assert rc.engine_config.device == "cuda"
                    assert rc.sweep.name == preset
                    if preset.endswith("_tiny"):
                        assert rc.model["name"].startswith("tiny-")
                    if preset.endswith("_gpu"):  # the study's tasks, not the tiny generator
                        assert rc.task["name"] == "gsm8k" or rc.task["source"] is not None
                        assert rc.model["prompt_style"] == "chat"
