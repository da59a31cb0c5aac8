"""Every registered algorithm's tiny run against its recorded reference: a refactor that moves no
behaviour keeps each run's id, its training lines, its final evaluation's per-problem counts and
its saved weights (tests/algorithms/reference_runs.json). A change that means to move behaviour
rewrites the file in the same commit, saying why:

    ESOPT_WRITE_REFERENCE=1 python -m pytest -n0 tests/algorithms/test_reference_runs.py

It starts one tiny-xs run of each algorithm in this process (two iterations, four problems x two
samples: about 15 s on one core), because what it guards is the whole run path, plan to weights.
The weights are compared by each tensor's float64 sum and sum of squares to 1e-6 relative (a
change of behaviour moves them by far more; a machine's last-bit rounding does not)."""

import json
import math
import os
from pathlib import Path

import pytest
from helpers import run_config

from esopt import algorithms
from esopt.runtime.run import run

REFERENCE = Path(__file__).with_name("reference_runs.json")
TINY = ["model=tiny-xs", "eval.problems=4", "eval.samples=2", "task.n_train=32", "task.n_test=16",
        "task.n_heldout=16", "sweep.aggregate=false", "iterations=2", "seed=0", "es.batch_size=4",
        "grpo.num_generations=4", "grpo.prompts_per_step=4"]
TRAIN_KEYS = ("iteration", "phase", "reward_mean", "reward_max", "tokens_generated")


def weights_digest(model_dir: Path) -> dict:
    """{tensor name: [sum, sum of squares]} in float64 of the run's saved weights."""
    from safetensors.torch import load_file

    out = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        for name, t in sorted(load_file(str(f)).items()):
            t = t.double()
            out[name] = [float(t.sum()), float((t * t).sum())]
    return out


def observed(algo: str, root: Path) -> dict:
    plan = run_config(*TINY, f"algo={algo}", f"sweep.root={root}", "sweep.name=ref")
    summary = run(plan)
    path = root / "ref" / "runs" / plan.run_id
    train = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
    return {"status": summary["status"], "run_id": plan.run_id,
            "final_counts": (summary.get("final") or {}).get("correct_counts"),
            "train": [{k: t.get(k) for k in TRAIN_KEYS} for t in train if t.get("kind") == "train"],
            "weights": weights_digest(path / "model")}


def close(a, b) -> bool:
    """Equal, floats to 1e-6 relative (nested lists and dicts)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)
    return a == b


def test_every_algorithm_runs_as_recorded(tmp_path):
    got = {name: observed(name, tmp_path) for name in sorted(algorithms.ALGORITHMS)}
    if os.environ.get("ESOPT_WRITE_REFERENCE") == "1":
        REFERENCE.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {REFERENCE.name}")
    want = json.loads(REFERENCE.read_text())
    assert sorted(got) == sorted(want), "the registered algorithms changed: rewrite the reference"
    assert len(got) >= 6 and all(g["status"] == "completed" for g in got.values())
    for name in want:
        for field in ("run_id", "final_counts", "train", "weights"):
            assert close(got[name][field], want[name][field]), (name, field)
