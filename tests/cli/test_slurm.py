"""A 2x2 grid of tiny runs through ``hydra/launcher=slurm`` and a real local Slurm (sbatch job
array, two runs per array task), then the four run directories. Skipped, with the reason,
when Slurm is not running (start it with ``scripts/start_slurm.sh``; CI's ``.ci/run`` does)."""

import json
import os
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


def _proc_status(pid: int) -> dict:
    """/proc/<pid>/status as {field: value}; {} once the process is gone."""
    try:
        text = open(f"/proc/{pid}/status").read()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def test_es_saves_at_a_real_time_limit_and_resumes_bitwise(tmp_path):
    """One ES run as a Slurm job with a real 2-minute limit (``#SBATCH --time=2``) and
    ``--signal=USR2@30``: Slurm's own time-limit check sends the warning, the run saves at that
    iteration boundary (es.checkpoint_every=0: no scheduled checkpoint), submitit requeues the job
    and the second attempt resumes there. The final weights equal, bitwise, the same run
    uninterrupted; every iteration is recorded once.

    It starts Slurm jobs and takes two to three minutes: slurmctld checks limits every 30 s, so
    the warning comes 60-90 s into the job. Slurm's least limit, 1 minute, would put it 20-50 s
    in (at USR2@10; the launcher's grace to reach an iteration boundary is half the lead), before
    a loaded 2-core machine has the run at its first iteration (30-45 s measured). To keep a tiny
    run (a second an iteration) in the middle of an iteration when it comes, without burning a
    CPU through that window, the job's process is paused (SIGSTOP) after its first train line,
    as a long GPU iteration would hold it; Slurm continues it to deliver the warning (the test
    does, should it not). The uninterrupted run goes meanwhile, in a process of its own."""
    import datetime
    import signal
    import subprocess
    import threading
    import time

    from safetensors.torch import load_file

    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    run = ["model=tiny-xs", "algo=es", "pop=4", "iterations=6", "es.batch_size=4", "es.checkpoint_every=0",
           "eval.problems=2", "eval.samples=1", "eval.every=6", "task.n_train=32", "task.n_test=8",
           "task.n_heldout=8", "sweep.aggregate=false", f"sweep.root={tmp_path}"]
    hydra = tmp_path / "slurm" / ".hydra"
    seen: dict = {}
    done = threading.Event()
    straight = threading.Thread(target=lambda: seen.update(straight=run_cli(
        "esopt.sweep", "-m", *run, "sweep.name=straight", env=env, timeout=900)))

    def job_started() -> float | None:  # the first attempt's start, as submitit logged it
        logs = "".join(f.read_text() for f in hydra.glob("*/.submitit/*/*_log.out"))
        m = re.search(r"submitit INFO \((\S+ \S+)\) - Starting with JobEnvironment", logs)
        return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None

    def pause_until_the_warning() -> None:
        deadline = time.time() + 600
        while time.time() < deadline and not done.is_set():   # the first train line: pause the job there
            seen["job"] = next((p.name for p in hydra.glob("*/.submitit/*") if p.name.isdigit()), None)
            run_dir = next((tmp_path / "slurm" / "runs").glob("*/metrics.jsonl"), tmp_path).parent
            if (run_dir / "owner.lock").exists() and '"kind": "train"' in (run_dir / "metrics.jsonl").read_text():
                seen["trained_at"] = time.time() - (job_started() or 0)
                if seen["trained_at"] < 55:  # before the warning's window: 60-90 s into the job
                    seen["pid"] = int(json.loads((run_dir / "owner.lock").read_text())["pid"])
                    os.kill(seen["pid"], signal.SIGSTOP)
                    seen["straight_started"] = True
                    straight.start()   # on the CPU the paused job leaves
                break
            time.sleep(0.1)
        while "pid" in seen and time.time() < deadline:          # until Slurm's warning wakes it
            st = _proc_status(seen["pid"])
            stopped = st.get("State", "").startswith("T")
            seen["stopped"] = seen.get("stopped") or stopped
            pending = int(st.get("ShdPnd", "0"), 16) | int(st.get("SigPnd", "0"), 16)
            if not st or (seen["stopped"] and not stopped) or pending & (1 << (signal.SIGUSR2 - 1)):
                seen["warned"] = time.time()
                if st:
                    os.kill(seen["pid"], signal.SIGCONT)
                break
            time.sleep(0.1)
        while not done.is_set() and time.time() < deadline:     # Slurm holds a requeued job 120 s: release it
            out = subprocess.run(["squeue", "-h", "-j", str(seen.get("job")), "-o", "%T %r"], capture_output=True,
                                 text=True).stdout.split()
            if out[:2] == ["PENDING", "BeginTime"]:
                subprocess.run(["scontrol", "update", f"JobId={seen['job']}", "StartTime=now"])
            time.sleep(0.5)

    watcher = threading.Thread(target=pause_until_the_warning, daemon=True)
    watcher.start()
    r = run_cli("esopt.sweep", "-m", "hydra/launcher=slurm", *run, "sweep.name=slurm", "hydra.launcher.poll_s=1",
                "hydra.launcher.timeout_min=2", "hydra.launcher.runs_per_job=1", "hydra.launcher.signal_delay_s=30",
                "hydra.launcher.mem_gb=2", env=env, timeout=900)
    done.set()
    watcher.join(timeout=5)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    script = "".join(p.read_text() for p in hydra.glob("*/.submitit/*/*_submission.sh"))
    assert "#SBATCH --time=2\n" in script and "#SBATCH --signal=USR2@30\n" in script
    # the warning came from Slurm's time limit, 60-90 s into the job (its 30-s check), while paused
    assert seen.get("stopped"), f"the first train line came {seen.get('trained_at')} s into the job, after 55 s"
    assert 60 - 3 <= seen["warned"] - job_started() <= 90 + 3, (seen["warned"], job_started())
    logs = "".join(f.read_text() for f in hydra.glob("*/.submitit/*/*_log.*"))
    assert "DUE TO JOB REQUEUE" in logs                                # submitit's handler requeued it
    resumed = re.findall(r"resumes from its checkpoint at iteration (\d+)", logs)
    assert len(resumed) == 1 and 1 <= int(resumed[0]) < 6, resumed   # saved on the warning, mid-run
    if not seen.get("straight_started"):
        straight.start()
    straight.join(timeout=900)
    assert seen["straight"].returncode == 0, seen["straight"].stderr[-2000:]
    (d1,), (d2,) = [list((tmp_path / s / "runs").iterdir()) for s in ("slurm", "straight")]
    w1, w2 = load_file(str(d1 / "model" / "model.safetensors")), load_file(str(d2 / "model" / "model.safetensors"))
    assert w1.keys() == w2.keys() and all(w1[k].equal(w2[k]) for k in w1)
    train = [json.loads(x)["iteration"] for x in (d1 / "metrics.jsonl").read_text().splitlines()
             if json.loads(x)["kind"] == "train"]
    assert train == list(range(1, 7))
