"""A run killed mid-training and resumed: every curve point once, wall time over both
attempts, every file it wrote created with the process umask (a shared results tree)."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from helpers import REPO

ARGS = ["algo=es", "model=tiny-xs", "pop=4", "iterations=6", "eval.every=2", "es.batch_size=4",
        "es.checkpoint_every=2", "eval.problems=4", "eval.samples=2", "task.n_train=32", "task.n_test=8",
        "task.n_heldout=8", "sweep.keep_checkpoints=true"]  # the checkpoint's file modes are checked too


def start(root):
    return subprocess.Popen([sys.executable, "-m", "esopt.sweep", *ARGS, f"sweep.root={root}"], cwd=REPO,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.umask(0o027),
                            start_new_session=True)


def metrics(run):
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for raw in path.read_text().splitlines():
        try:
            out.append(json.loads(raw))
        except ValueError:
            pass
    return out


def test_killed_run_resumes_with_every_point_once_wall_time_summed_and_umask_modes(tmp_path):
    root = tmp_path / "results"
    p = start(root)
    run = None
    deadline = time.time() + 300
    try:
        while time.time() < deadline:
            runs = list((root / "default" / "runs").glob("*")) if (root / "default" / "runs").exists() else []
            run = runs[0] if runs else None
            if run and any(x.get("kind") == "train" and x["iteration"] >= 3 for x in metrics(run)):
                break
            assert p.poll() is None, p.stderr.read()[-2000:]
            time.sleep(0.05)
        else:
            raise AssertionError("the run did not reach iteration 3 in 300 s")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    first = json.loads((run / "summary.json").read_text())
    assert first["status"] == "running"
    wall_killed = max(float(x.get("wall_s") or 0) for x in metrics(run))
    assert wall_killed > 0

    p = start(root)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and s["attempts"] == 2
    assert s["wall_s"] > wall_killed  # the first attempt's time is counted
    lines = metrics(run)
    keys = Counter((x["kind"], x["iteration"]) for x in lines)
    assert max(keys.values()) == 1, keys
    assert sorted(k[1] for k in keys if k[0] == "train") == [1, 2, 3, 4, 5, 6]
    assert sorted(k[1] for k in keys if k[0] == "eval") == [0, 2, 4, 6]
    assert [x["wall_s"] for x in lines if x["kind"] == "train"] == sorted(
        x["wall_s"] for x in lines if x["kind"] == "train")  # one clock across attempts

    files = [f for f in run.rglob("*") if f.is_file()]
    names = {f.name for f in files}
    assert {"summary.json", "config.yaml", "metrics.jsonl", "model.safetensors", "state.json"} <= names
    modes = {str(f.relative_to(run)): oct(f.stat().st_mode & 0o777) for f in files}
    assert set(modes.values()) == {"0o640"}, modes
