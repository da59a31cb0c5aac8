"""A Slurm job cancelled (``scancel``) or lost is noticed within a bounded time, even where
``sacct`` has no accounting (the local Slurm: submitit alone waited forever, issue 29 item 2):
the run is recorded failed with an error naming the job and "cancelled", and the sweep ends
with its table. Skipped, with the reason, when Slurm is not running (scripts/start_slurm.sh)."""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from helpers import REPO, require_slurm



@pytest.fixture(autouse=True)
def _slurm_up():
    require_slurm()  # a skip with the reason; a failure in CI, which starts Slurm


def test_a_job_squeue_does_not_know_is_lost():
    from hydra_plugins.esopt_sweeper.launchers import LOST, squeue_states

    assert squeue_states(["987654321", "987654322_3"]) == {"987654321": {"State": LOST},
                                                           "987654322_3": {"State": LOST}}


def _jobs(name: str) -> list[tuple[str, str]]:
    r = subprocess.run(["squeue", "-h", "-r", "--states=all", "-n", name, "-o", "%i|%T"],
                       capture_output=True, text=True, timeout=30)
    return [tuple(line.split("|")) for line in r.stdout.split()]


def test_a_cancelled_slurm_job_is_recorded_failed_and_the_sweep_ends(tmp_path):
    name = f"esopt-cancel-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "esopt.sweep", "-m", "hydra/launcher=slurm", "model=tiny-xs", "algo=es", "pop=4",
           "iterations=5000", "es.batch_size=4", "eval.problems=4", "eval.samples=2", "eval.every=5000",
           "task.n_train=32", "task.n_test=16", "task.n_heldout=16", "hydra.launcher.timeout_min=10",
           "hydra.launcher.mem_gb=2", "hydra.launcher.cpus_per_task=1", f"hydra.launcher.name={name}",
           "hydra.launcher.poll_s=3", "sweep.aggregate=false", f"sweep.root={tmp_path}", "sweep.name=cancel"]
    sweep = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        summaries = tmp_path / "cancel" / "runs"
        while time.time() < deadline and not list(summaries.glob("*/summary.json")):  # the run has started
            assert sweep.poll() is None, sweep.communicate()
            time.sleep(1)
        (job, state), = _jobs(name)
        assert state == "RUNNING"
        subprocess.run(["scancel", job.split("_")[0]], check=True, timeout=30)
        cancelled = time.time()
        out, err = sweep.communicate(timeout=120)  # noticed within poll_s + submitit's 15 s wait
        waited = time.time() - cancelled
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 1, (out[-2000:], err[-2000:])
    assert waited < 60, waited
    (run,) = summaries.iterdir()
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "failed" and f"Slurm job {job}" in s["error"] and "cancelled" in s["error"], s["error"]
    assert "1 of 1 runs did not complete (1 failed" in err and run.name in out  # the table was printed
