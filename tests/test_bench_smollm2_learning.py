"""benchmarks/bench_smollm2_learning.py: a finished run's row (paired changes over the same
problems, per-step seconds from metrics.jsonl) and an unfinished run's row."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
_spec = importlib.util.spec_from_file_location("bench_smollm2_learning", REPO / "benchmarks" / "bench_smollm2_learning.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _run(tmp_path, base, final, greedy_base, greedy_final, walls):
    rd = tmp_path / "runs" / "abc123"
    rd.mkdir(parents=True)
    ev = lambda c, g, f: {"samples": 4, "correct_counts": c, "greedy_correct": g, "format": f}  # noqa: E731
    (rd / "summary.json").write_text(json.dumps({
        "status": "completed", "wall_s": walls[-1] + 60.0,
        "base": ev(base, greedy_base, 0.04), "final": ev(final, greedy_final, 0.5)}))
    lines = [{"kind": "eval", "phase": "base", "eval_wall_s": 30.0}]
    lines += [{"kind": "train", "iteration": i + 1, "phase": "grpo" if i < 2 else "es", "wall_s": w}
              for i, w in enumerate(walls)]
    lines += [{"kind": "eval", "phase": "final", "eval_wall_s": 30.0}]
    (rd / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return rd


def test_row_reports_paired_changes_and_per_step_seconds(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2, 100).tolist()                    # Pass@1 about 0.125
    final = [min(4, c + 2) for c in base]                      # every problem +2 of 4: +0.5 exactly
    rd = _run(tmp_path, base, final, [0] * 100, [1] * 50 + [0] * 50, [50.0, 70.0, 80.0, 90.0, 100.0])
    row = bench.row("grpo_es", 0, rd, {"cpu_s": 1800.0, "wall_s": 2000.0, "rc": 0})
    assert row[3] == "**+0.500 [+0.500, +0.500]**"            # no spread: the interval is the point
    assert row[5].startswith("+0.500 [+0.4")                   # greedy 0 -> 0.5, resampled
    assert row[6] == "4% -> 50%"
    assert "grpo 20 s x 2" in row[7] and "es 10 s x 3" in row[7] and "CPU 30 min" in row[7]
    assert row[-1] == "abc123"


def test_unfinished_run_is_a_row_without_numbers(tmp_path):
    rd = tmp_path / "r"
    rd.mkdir()
    (rd / "summary.json").write_text(json.dumps({"status": "failed"}))
    row = bench.row("es", 1, rd, None)
    assert row[2] == "failed" and set(row[3:]) == {"-"}
