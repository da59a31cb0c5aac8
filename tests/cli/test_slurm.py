"""A 2x2 grid of tiny runs through ``hydra/launcher=slurm`` and a real local Slurm (sbatch job
array, two runs per array task), then the four run directories. Skipped, with the reason,
when Slurm is not running (start it with ``scripts/start_slurm.sh``; CI's ``.ci/run`` does)."""

import json
import re

import pytest

from helpers import REPO, run_cli, require_slurm




@pytest.fixture(autouse=True)
def _slurm_up():
    require_slurm()  # a skip with the reason; a failure in CI, which starts Slurm


def test_2x2_grid_through_slurm_job_array(tmp_path):
    # Jobs inherit this environment (sbatch --export=ALL) and run submitit with sys.executable,
    # so they import esopt and hydra_plugins from this checkout.
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = run_cli(
        "esopt.sweep", "-m", "hydra/sweeper=esopt", "hydra/launcher=slurm", "model=tiny-xs", "algo=none",
        "eval.problems=8", "eval.samples=4", "task.n_train=32", "task.n_test=16", "task.n_heldout=16",
        "eval.temperature=0.6,1.0", "seed=0,1", "hydra.launcher.timeout_min=10", "hydra.launcher.mem_gb=1",
        "hydra.launcher.cpus_per_task=1", "hydra.launcher.runs_per_job=2", f"sweep.root={tmp_path}", "sweep.name=slurm",
        "sweep.aggregate=false", env=env, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    runs = sorted((tmp_path / "slurm" / "runs").iterdir())
    assert len(runs) == 4
    seen = set()
    for d in runs:
        s = json.loads((d / "summary.json").read_text())
        assert s["status"] == "completed" and s["run_id"] == d.name
        assert (d / "config.yaml").exists() and (d / "metrics.jsonl").read_text().strip()
        assert 0.0 <= s["final"]["pass@k"]["1"] <= 1.0
        seen.add((s["config"]["eval"]["temperature"], s["seed"]))
    assert seen == {(0.6, 0), (0.6, 1), (1.0, 0), (1.0, 1)}
    # the runs really went through sbatch: one job array of two tasks (runs_per_job=2), each
    # with its own submitit log and result
    arrays = [p for p in (tmp_path / "slurm" / ".hydra").glob("*/.submitit/*")
              if p.is_dir() and re.fullmatch(r"\d+_\d+", p.name)]
    assert len(arrays) == 2, arrays
    assert len({p.name.split("_")[0] for p in arrays}) == 1
    for p in arrays:
        assert list(p.glob("*_result.pkl")), f"no submitit result in {p}"
        assert "".join(f.read_text() for f in p.glob("*_log.out")).count(" completed: ") == 2


def test_es_with_two_slurm_tasks_equals_one_task(tmp_path):
    """One ES run as 2 Slurm tasks (gloo ranks standing in for GPUs) through the real local
    Slurm ends with bitwise the same weights as the same run as 1 task; its metrics lines record
    the world size and which members each rank scored; rank 0 alone wrote the run directory."""
    from safetensors.torch import load_file

    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    common = ["esopt.sweep", "-m", "hydra/launcher=slurm", "model=tiny-xs", "algo=es", "pop=4", "iterations=2",
              "es.batch_size=4", "es.checksum_every=1", "eval.problems=4", "eval.samples=2", "eval.every=2",
              "task.n_train=32", "task.n_test=16", "task.n_heldout=16", "hydra.launcher.timeout_min=10",
              "hydra.launcher.mem_gb=2", "sweep.aggregate=false", f"sweep.root={tmp_path}"]
    one = run_cli(*common, "sweep.name=one", "model.resources.ranks=1", env=env, timeout=900)
    assert one.returncode == 0, (one.stdout[-2000:], one.stderr[-2000:])
    two = run_cli(*common, "sweep.name=two", "model.resources.ranks=2", env=env, timeout=900)
    assert two.returncode == 0, (two.stdout[-2000:], two.stderr[-2000:])
    (d1,), (d2,) = [list((tmp_path / s / "runs").iterdir()) for s in ("one", "two")]
    assert d1.name == d2.name                       # ranks are a launcher setting, not part of the run id
    w1, w2 = load_file(str(d1 / "model" / "model.safetensors")), load_file(str(d2 / "model" / "model.safetensors"))
    assert w1.keys() == w2.keys() and all(w1[k].equal(w2[k]) for k in w1)
    base = load_file(str(REPO / "esopt" / "models" / "tiny" / "tiny-xs" / "model.safetensors"))
    assert any(not w1[k].equal(base[k]) for k in w1)   # and ES did move the weights
    lines = [json.loads(x) for x in (d2 / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["kind"] == "train"]
    assert [x["iteration"] for x in train] == [1, 2]   # one writer: no duplicate lines
    assert all(x["world_size"] == 2 and x["members_by_rank"] == [[0, 2], [1, 3]] for x in train)
    assert all(x["world_size"] == 1 for x in (json.loads(y) for y in (d1 / "metrics.jsonl").read_text().splitlines())
               if x["kind"] == "train")
    arrays = list((tmp_path / "two" / ".hydra").glob("*/.submitit/*"))
    logs = "".join(f.read_text() for p in arrays for f in p.glob("*_log.*"))
    assert "_0_log" in " ".join(f.name for p in arrays for f in p.glob("*_log.*"))
    assert "completed:" in logs


def _slurm_times(job_id: str) -> tuple:
    """(StartTime, EndTime) of a finished Slurm job, from ``scontrol show job`` (the local Slurm
    has no accounting daemon for sacct; it keeps ended jobs MinJobAge=300 s)."""
    import datetime
    import subprocess

    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    t = dict(re.findall(r"\b(StartTime|EndTime)=(\S+)", out))
    return tuple(datetime.datetime.fromisoformat(t[k]) for k in ("StartTime", "EndTime"))


def test_two_resource_groups_run_at_once(tmp_path):
    """Two runs whose launcher requests differ (seed=1,2 with mem_gb=${seed}: two resource
    groups, so two job arrays) through the real local Slurm, each job sleeping 8 s before its
    run: both arrays are submitted before either is waited on, so both jobs start before either
    ends (one after another, the second would start after the first's end). Their scripts carry
    the time limit (capped by sweep.max_job_hours) and sweep.offline's exports."""
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = run_cli(
        "esopt.sweep", "-m", "hydra/launcher=slurm", "model=tiny-xs", "algo=none", "eval.problems=4",
        "eval.samples=2", "task.n_train=16", "task.n_test=8", "task.n_heldout=8", "seed=1,2",
        "hydra.launcher.mem_gb=${seed}",
        "hydra.launcher.timeout_min=10", "hydra.launcher.cpus_per_task=1", "hydra.launcher.poll_s=1",
        "hydra.launcher.setup=[sleep 8]", "sweep.max_job_hours=0.1", "sweep.offline=true", f"sweep.root={tmp_path}",
        "sweep.name=groups", "sweep.aggregate=false",
        env=env, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    tasks = [p.name for p in (tmp_path / "groups" / ".hydra").glob("*/.submitit/*") if re.fullmatch(r"\d+(_\d+)?", p.name)]
    assert len({t.split("_")[0] for t in tasks}) == 2, tasks   # two arrays, one per resource shape
    (s1, e1), (s2, e2) = [_slurm_times(t) for t in sorted(tasks)]
    assert max(s1, s2) < min(e1, e2), ((s1, e1), (s2, e2))      # they overlapped
    assert (min(e1, e2) - max(s1, s2)).total_seconds() >= 6     # by about the sleep: ~T in all, not 2T
    scripts = "".join(p.read_text() for p in (tmp_path / "groups" / ".hydra").glob("*/.submitit/*/*_submission.sh"))
    assert scripts.count("#SBATCH --time=6\n") == 2           # timeout_min=10 capped by max_job_hours=0.1
    for line in ("export HF_HUB_OFFLINE=1", "export HF_DATASETS_OFFLINE=1", "export WANDB_MODE=offline"):
        assert scripts.count(line + "\n") == 2                  # sweep.offline: the jobs' setup


def test_es_saves_on_the_time_limit_signal_and_resumes_bitwise(tmp_path):
    """One ES run as a Slurm job (es.checkpoint_every=0: no scheduled checkpoint) gets the
    scheduler's warning (SIGUSR2, as ``--signal=USR2@signal_delay_s`` sends it before the time
    limit; sent here with scancel once the run has logged an iteration, so the test waits
    seconds, not a minute-long limit): it saves at that iteration boundary, submitit requeues the
    job, and the second attempt resumes there. The final weights equal, bitwise, the same run
    uninterrupted in this process; every iteration is recorded once."""
    import subprocess
    import threading
    import time

    from safetensors.torch import load_file

    from helpers import cli

    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    run = ["model=tiny-xs", "algo=es", "pop=4", "iterations=20", "es.batch_size=4", "es.checkpoint_every=0",
           "eval.problems=2", "eval.samples=1", "eval.every=20", "task.n_train=32", "task.n_test=8",
           "task.n_heldout=8", "sweep.aggregate=false", f"sweep.root={tmp_path}"]
    signalled = []

    def signal_once_running() -> None:  # the job's first train line: send the warning
        deadline = time.time() + 600
        while time.time() < deadline and not signalled:
            logs = list((tmp_path / "slurm" / "runs").glob("*/metrics.jsonl"))
            folders = [p for p in (tmp_path / "slurm" / ".hydra").glob("*/.submitit/*") if p.is_dir()]
            if logs and '"kind": "train"' in logs[0].read_text() and folders:
                subprocess.run(["scancel", "--signal=USR2", folders[0].name], check=True)
                signalled.append(time.time())
            time.sleep(0.2)
        while signalled and time.time() < deadline:  # Slurm holds a requeued job 120 s: release it
            state = subprocess.run(["squeue", "-h", "-j", folders[0].name, "-o", "%T"], capture_output=True,
                                   text=True).stdout.strip()
            if state in ("PENDING", ""):
                subprocess.run(["scontrol", "update", f"JobId={folders[0].name}", "StartTime=now"])
                if state == "" or "Resources" not in subprocess.run(["squeue", "-h", "-j", folders[0].name, "-o",
                                                                    "%r"], capture_output=True, text=True).stdout:
                    return
            time.sleep(0.2)

    watcher = threading.Thread(target=signal_once_running, daemon=True)
    watcher.start()
    r = run_cli("esopt.sweep", "-m", "hydra/launcher=slurm", *run, "sweep.name=slurm", "hydra.launcher.poll_s=1",
                "hydra.launcher.timeout_min=10", "hydra.launcher.mem_gb=2", env=env, timeout=900)
    watcher.join(timeout=1)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert signalled
    straight = cli("esopt.sweep", "-m", *run, "sweep.name=straight")
    assert straight.returncode == 0, straight.stderr[-2000:]
    (d1,), (d2,) = [list((tmp_path / s / "runs").iterdir()) for s in ("slurm", "straight")]
    logs = "".join(f.read_text() for f in (tmp_path / "slurm" / ".hydra").glob("*/.submitit/*/*_log.*"))
    resumed = re.findall(r"resumes from its checkpoint at iteration (\d+)", logs)
    assert len(resumed) == 1 and 1 <= int(resumed[0]) < 20, resumed   # saved on the signal, mid-run
    assert "DUE TO JOB REQUEUE" in logs                                # submitit's handler requeued it
    w1, w2 = load_file(str(d1 / "model" / "model.safetensors")), load_file(str(d2 / "model" / "model.safetensors"))
    assert w1.keys() == w2.keys() and all(w1[k].equal(w2[k]) for k in w1)
    train = [json.loads(x)["iteration"] for x in (d1 / "metrics.jsonl").read_text().splitlines()
             if json.loads(x)["kind"] == "train"]
    assert train == list(range(1, 21))
