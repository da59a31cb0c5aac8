"""Learning on the real model (issue 26 item 3): ES, GRPO and a sequence on SmolLM2-135M-Instruct,
each against the base on the same held-out problems, paired by problem.

    ESOPT_CACHE=... python benchmarks/bench_smollm2_learning.py --runs es,grpo,grpo_es:1
    ... --report-only --write-docs     # read the finished runs, write docs/results/smollm2.md

Each entry of RUNS is one ``python -m esopt.sweep`` command (COMMON + its settings + ``seed=``).
The sweep skips a completed run (same run id), so a second call only reads the results; a run
this script launches is timed here (wall, and the CPU seconds of its process tree). Per run: held-out
Pass@1 base -> final and its paired change with a 95% percentile bootstrap interval over the
problems (``esopt.study.analyses.common.paired_change``, 10,000 resamples), the same for Pass@4 (unbiased,
per problem) and greedy accuracy, the answer format, the wall time split into evaluations and
training (from metrics.jsonl), and the seconds per ES iteration / GRPO step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _results
from _results import REPO, write_table  # noqa: E402

from esopt.core.metrics import pass_at_k  # noqa: E402
from esopt.study.analyses.common import paired_change  # noqa: E402

SWEEP = "smollm2_learning"
COMMON = ["model=smollm2-135m", "task=arith", "task.ops=+", "eval.split=heldout", "eval.problems=100",
          "eval.samples=4", "eval.every=1000", f"sweep.name={SWEEP}"]
ES = ["pop=8", "es.batch_size=16", "es.max_new_tokens=16"]          # sigma 1e-3, lr 5e-4: the card's
GRPO = ["grpo.prompts_per_step=4", "grpo.num_generations=8"]        # 32 completions a step, lr 1e-5
RUNS = {
    "es": ["algo=es", "iterations=30", *ES],
    "grpo": ["algo=grpo", "iterations=30", "lr=1e-5", *GRPO],
    "grpo_es": ["algo=grpo_es", "iterations=30", *GRPO, *ES],      # 15 GRPO steps, then 15 ES iterations
    "es_grpo": ["algo=es_grpo", "iterations=30", *ES, *GRPO],
    # GRPO's 30-step budget (the one that gained alone), then 10 ES iterations: 15 GRPO steps
    # only taught the format (grpo_es, docs/results/smollm2.md)
    "grpo30_es10": ["algo=grpo_es", "iterations=40", "sequence.split=0.75", *GRPO, *ES],
}
K = 4
N_BOOT = 10_000


def command(name: str, seed: int, threads: int) -> list[str]:
    return [sys.executable, "-m", "esopt.sweep", *COMMON, f"engine.threads={threads}", *RUNS[name], f"seed={seed}"]


def launch(cmd: list[str]) -> dict:
    """Run one sweep command; its wall time and the CPU seconds of its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    rc = subprocess.run(cmd, cwd=REPO).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": rc, "wall_s": time.time() - t0, "cpu_s": cpu}


def run_dir(cmd: list[str]) -> Path:
    """The run directory the sweep gives this command (its dry run prints it)."""
    out = subprocess.run([*cmd, "sweep.dry_run=true"], cwd=REPO, capture_output=True, text=True).stdout
    paths = [line.strip() for line in out.splitlines() if f"{SWEEP}/runs/" in line]
    if not paths:
        raise SystemExit(f"bench_smollm2_learning: no run directory in the dry run of {' '.join(cmd)}:\n{out}")
    return REPO / paths[-1].split()[-1]


def change(base: np.ndarray, final: np.ndarray) -> str:
    mean, (lo, hi) = paired_change(base, final, n_boot=N_BOOT)
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def timing(rd: Path) -> dict:
    """Training seconds per ES iteration / GRPO step (per phase) and evaluation seconds, from
    metrics.jsonl (cumulative ``wall_s`` on training lines, ``eval_wall_s`` on evaluation lines)."""
    lines = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines() if x.strip()]
    evals = sum(float(x.get("eval_wall_s") or 0.0) for x in lines)
    steps: dict[str, list[float]] = {}
    last, evaluating = 0.0, 0.0
    for x in lines:
        if "eval_wall_s" in x:  # an evaluation since the last step: not the next step's time
            evaluating += float(x.get("eval_wall_s") or 0.0)
            continue
        if x.get("wall_s") is None:
            continue
        algo = x.get("phase") or x.get("algo") or "train"
        steps.setdefault(algo, []).append(float(x["wall_s"]) - last - evaluating)
        last, evaluating = float(x["wall_s"]), 0.0
    return {"eval_s": evals, "per_step": {a: float(np.median(v)) for a, v in steps.items()},
            "steps": {a: len(v) for a, v in steps.items()}}


def row(name: str, seed: int, rd: Path, timed: dict | None) -> list[str]:
    s = json.loads((rd / "summary.json").read_text())
    if s.get("status") != "completed":
        return [f"{name} (seed {seed})", " ".join(RUNS[name]), s.get("status"), *["-"] * 6]
    b, f = s["base"], s["final"]
    n = int(b["samples"])
    cb, cf = np.asarray(b["correct_counts"]), np.asarray(f["correct_counts"])
    p1 = change(cb / n, cf / n)
    pk = change(pass_at_k(n, cb, K), pass_at_k(n, cf, K))
    gr = (change(np.asarray(b["greedy_correct"], float), np.asarray(f["greedy_correct"], float))
          if b.get("greedy_correct") and f.get("greedy_correct") else "-")
    t = timing(rd)
    per = ", ".join(f"{a} {v:.0f} s x {t['steps'][a]}" for a, v in t["per_step"].items())
    wall = f"{s['wall_s'] / 60:.0f} min ({t['eval_s'] / 60:.0f} of it evaluating; {per})"
    if timed:
        wall += f"; CPU {timed['cpu_s'] / 60:.0f} min"
    return [f"{name} (seed {seed})", " ".join(RUNS[name]),
            f"{(cb / n).mean():.3f} -> {(cf / n).mean():.3f}", f"**{p1}**", pk, gr,
            f"{b['format']:.0%} -> {f['format']:.0%}", wall, rd.name]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="es,grpo,grpo_es",
                    help=f"comma-separated NAME or NAME:SEED (seed 0 by default), NAME of {', '.join(RUNS)}")
    ap.add_argument("--threads", type=int, default=2, help="engine.threads of each run (torch threads)")
    ap.add_argument("--report-only", action="store_true", help="launch nothing; read the run directories")
    ap.add_argument("--note", default="", help="appended to the table's notes (e.g. what else ran)")
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args(argv)
    specs = [(x.partition(":")[0], int(x.partition(":")[2] or 0)) for x in a.runs.split(",") if x]
    if unknown := [n for n, _ in specs if n not in RUNS]:
        ap.error(f"unknown run(s) {unknown}; known: {list(RUNS)}")
    rows = []
    for name, seed in specs:
        cmd = command(name, seed, a.threads)
        rd = run_dir(cmd)
        done = (rd / "summary.json").exists() and json.loads((rd / "summary.json").read_text()).get(
            "status") == "completed"
        timed = None if (a.report_only or done) else launch(cmd)
        rows.append(row(name, seed, rd, timed))
        print(" | ".join(map(str, rows[-1])), flush=True)
    header = ["run", "settings", "held-out Pass@1 base -> final", "paired change [95% CI]",
              f"Pass@{K} change [95% CI]", "greedy change [95% CI]", "format", "wall", "run id"]
    notes = (f"Common settings: `{' '.join(COMMON)} engine.threads={a.threads}`; the model card's "
             f"hyperparameters otherwise (conf/model/smollm2-135m.yaml). {len(rows)} run(s); paired by "
             f"problem over the same 100 held-out problems x {4} samples at T=0.6, plus greedy; "
             f"{N_BOOT:,} bootstrap resamples of the problems. Per-step seconds are medians. {a.note}")
    if a.write_docs:
        cmd = f"python benchmarks/bench_smollm2_learning.py --runs {a.runs} --threads {a.threads}"
        write_table("smollm2", "Learning on arith sums, measured", cmd, header, rows, notes=notes)
    else:
        print(notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
