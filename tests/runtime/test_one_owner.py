"""One owner per run: two real processes released at the same instant start the same run
(two sweeps over one grid, a requeued task racing its original); exactly one trains it."""

import json
import os
import subprocess
import sys
import time
from collections import Counter

import optuna

from helpers import REPO
from esopt.core import store
from esopt.runtime import tuning

OVERRIDES = ["algo=es", "model=tiny-xs", "pop=4", "iterations=4", "eval.every=2", "es.batch_size=4",
             "es.checkpoint_every=2", "eval.problems=4", "eval.samples=2", "task.n_train=32",
             "task.n_test=8", "task.n_heldout=8"]

WORKER = """
import json, os, sys, time
sys.path.insert(0, {tests!r})
from helpers import run_config
from esopt.runtime.run import run
rc = run_config(*{overrides!r})
open({ready!r}, "w").close()
while not os.path.exists({go!r}):
    time.sleep(0.0005)
released = time.time()
s = run(rc)
print(json.dumps({{"pid": os.getpid(), "status": s["status"], "released": released}}))
"""


def test_two_processes_released_together_train_the_run_once(tmp_path):
    root = tmp_path / "results"
    overrides = OVERRIDES + [f"sweep.root={root}", "sweep.name=race"]
    go = tmp_path / "go"
    procs = []
    for i in range(2):
        code = WORKER.format(tests=str(REPO / "tests"), overrides=overrides, ready=str(tmp_path / f"ready{i}"),
                             go=str(go))
        procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, "OMP_NUM_THREADS": "1"}))
    deadline = time.time() + 300
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()  # both are spinning on this file: released within a millisecond
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-3000:] for _, e in outs]
    results = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    assert abs(results[0]["released"] - results[1]["released"]) < 0.05

    # exactly one stepped aside, naming the other as the owner
    aside = [i for i, (_, err) in enumerate(outs) if "not started twice" in err]
    assert len(aside) == 1, [e[-2000:] for _, e in outs]
    winner = results[1 - aside[0]]
    assert f"pid {winner['pid']}" in outs[aside[0]][1]
    assert winner["status"] == "completed" and results[aside[0]]["status"] == "running"

    (run_dir,) = (root / "race" / "runs").iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "completed" and s["attempts"] == 1 and s["worker"]["pid"] == winner["pid"]
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = Counter((ln["kind"], ln["phase"], ln["iteration"]) for ln in lines)
    assert max(keys.values()) == 1, keys  # no iteration recorded twice
    assert sorted(k[2] for k in keys if k[0] == "train") == [1, 2, 3, 4]
    assert sorted(k[2] for k in keys if k[0] == "eval") == [0, 2, 4]
    assert not (run_dir / store.LOCK_NAME).exists()

    study = optuna.load_study(study_name="esopt:race:tiny-xs:es:countdown",
                              storage=tuning.open_storage(str(root / "race" / "optuna.journal")))
    states = [t.state for t in study.get_trials()]
    assert states == [optuna.trial.TrialState.COMPLETE], states
