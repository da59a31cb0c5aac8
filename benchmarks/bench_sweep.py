"""Per-run overhead of the sweep machinery (store, Optuna, launcher) over the runs' own time.

    python benchmarks/bench_sweep.py                 # local and (if sinfo works) local Slurm
    python benchmarks/bench_sweep.py --runs 6 --no-slurm
    python benchmarks/bench_sweep.py --write-docs    # also write both tables to docs/results/sweep.md

End to end, per launcher: one sweep of N tiny runs (tiny-xs, algo=none, 8 problems x 4
samples; Slurm with array_parallelism=1 so the runs follow each other). A run's own time is
[start, end] = [config.yaml written, summary.json written] in its run directory. Then

    gap              = mean over i >= 2 of (start_i - end_{i-1}): launcher + Hydra job setup
                       (+ for Slurm: scheduling, a fresh Python process and its imports)
    extra_in_run     = median run time - the local launcher's median run time: imports a
                       fresh process pays inside run() (transformers), 0 for local
    overhead per run = gap + extra_in_run + the per-run bookkeeping measured in process
                       (composing/validating the job, store writes, Optuna)   goal < 2 s
    fixed cost       = start_1 - sweep start (process start, Hydra, composing/validating all
                       jobs, first submission) + end of sweep - end_N (table, exit)

Rows: local (in process), slurm (one array task per run), slurm_packed (runs_per_job = N/2:
two array tasks, so the gap mixes in-process and new-task starts).

``--preset quickstart [--pairs 2]``: instead, a CPU preset's whole sweep (runs + aggregation)
with ``hydra/launcher=local`` (one run after another) and ``joblib`` (one warm worker per core,
what the CPU presets use), alternating, each into its own fresh root; the wall times, their
ratio, and whether every run's final Pass@1 is the same under both (it must be: same configs).

In process, per run (median of --reps): compose + validate + run id, the store's writes, and
the Optuna journal (attach, 3 reports + should_prune, finish). Prints tables; writes nothing
outside a temporary directory (or --root).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = ["model=tiny-xs", "algo=none", "eval.problems=8", "eval.samples=4", "task.n_train=32",
        "task.n_test=16", "task.n_heldout=16", "sweep.aggregate=false", "hydra/sweeper=esopt"]


def slurm_up() -> bool:
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and any(s in r.stdout for s in ("idle", "mix", "alloc"))


def launcher_overrides(launcher: str, n: int) -> list[str]:
    if launcher == "local":
        return ["hydra/launcher=local"]
    k = 1 if launcher == "slurm" else max(1, n // 2)  # slurm_packed: two array tasks
    return ["hydra/launcher=slurm", "hydra.launcher.array_parallelism=1", "hydra.launcher.mem_gb=1",
            "hydra.launcher.timeout_min=10", f"hydra.launcher.runs_per_job={k}"]


def sweep_env() -> dict:
    """The environment every benchmarked sweep runs in: this checkout, one thread, offline."""
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def sweep(root: Path, name: str, n: int, launcher: str) -> dict:
    """Run one sweep; return its timestamps and its runs' (start, end, wall_s)."""
    extra = launcher_overrides(launcher, n)
    cmd = [sys.executable, "-m", "esopt.sweep", "-m", *TINY, *extra, f"sweep.root={root}",
           f"sweep.name={name}", "seed=" + ",".join(str(i) for i in range(n))]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=REPO, env=sweep_env(), capture_output=True, text=True)
    t1 = time.time()
    if r.returncode != 0:
        sys.exit(f"bench: sweep failed ({launcher}, {n} runs):\n{r.stderr[-2000:]}")
    runs = []
    for d in (root / name / "runs").iterdir():
        s = json.loads((d / "summary.json").read_text())
        runs.append(((d / "config.yaml").stat().st_mtime, (d / "summary.json").stat().st_mtime, s["wall_s"]))
    assert len(runs) == n, f"expected {n} runs, found {len(runs)}"
    return {"t0": t0, "t1": t1, "runs": sorted(runs)}


def end_to_end(root: Path, launchers: list[str], n: int, bookkeeping_s: float = 0.0):
    rows, local_own = [], None
    for launcher in launchers:
        s = sweep(root, launcher, n, launcher)
        runs = s["runs"]
        gap = statistics.mean(b[0] - a[1] for a, b in zip(runs, runs[1:]))
        own = statistics.median(e - b for b, e, _ in runs)
        if local_own is None:
            local_own = own  # the first row is local: its runs import nothing new
        extra = max(0.0, own - local_own)
        overhead = gap + extra + bookkeeping_s
        rows.append({"launcher": launcher, "runs": n, "sweep_wall_s": round(s["t1"] - s["t0"], 2),
                     "fixed_cost_s": round((runs[0][0] - s["t0"]) + (s["t1"] - runs[-1][1]), 2),
                     "run_own_s": round(own, 2), "gap_s": round(gap, 2), "extra_in_run_s": round(extra, 2),
                     "overhead_per_run_s": round(overhead, 2), "goal_<2s": "yes" if overhead < 2 else "NO"})
    return rows


def preset_by_launcher(root: Path, preset: str, pairs: int) -> list[dict]:
    """Wall time of one preset's sweep under the local and the joblib launcher (alternating)."""
    from esopt.runtime.tuning import metric_value

    walls: dict[str, list[float]] = {"local": [], "joblib": []}
    scores: dict[str, dict] = {}
    for i in range(pairs):
        for launcher in ("local", "joblib"):
            out = root / f"{launcher}{i}"
            cmd = [sys.executable, "-m", "esopt.sweep", "-m", f"+experiment={preset}", f"hydra/launcher={launcher}",
                   f"sweep.root={out}"]
            t0 = time.time()
            r = subprocess.run(cmd, cwd=REPO, env=sweep_env(), capture_output=True, text=True)
            walls[launcher].append(time.time() - t0)
            if r.returncode != 0:
                sys.exit(f"bench: {preset} failed under {launcher}:\n{r.stderr[-2000:]}")
            for d in out.glob("*/runs/*"):
                final = json.loads((d / "summary.json").read_text()).get("final")
                scores.setdefault(launcher, {})[d.name] = metric_value(final, "pass@1")
            print(f"{preset} {launcher} #{i}: {walls[launcher][-1]:.1f} s", flush=True)
    same = scores.get("local") == scores.get("joblib") and bool(scores.get("local"))
    local, pool = statistics.median(walls["local"]), statistics.median(walls["joblib"])
    return [{"preset": preset, "runs": len(scores.get("local", {})), "pairs": pairs,
             "local_s": " / ".join(f"{w:.1f}" for w in walls["local"]),
             "joblib_s": " / ".join(f"{w:.1f}" for w in walls["joblib"]),
             "local / joblib (medians)": round(local / pool, 2), "same final Pass@1": "yes" if same else "NO"}]


def components(root: Path, reps: int):
    """Median in-process seconds per run of each piece of bookkeeping."""
    from hydra import compose, initialize_config_dir

    from esopt.cli import configs
    from esopt.core import store
    from esopt.runtime import tuning
    from esopt.runtime.validate import run_id, validate

    configs.register()

    overrides = [o for o in TINY if not o.startswith("hydra/")] + [f"sweep.root={root}", "sweep.name=comp"]
    times: dict[str, list[float]] = {"compose+validate+run_id": [], "store writes": [], "optuna journal": []}
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for i in range(reps):
            t = time.perf_counter()
            rc = validate(compose(config_name="config", overrides=overrides + [f"seed={i}"]))
            rid = run_id(rc)
            times["compose+validate+run_id"].append(time.perf_counter() - t)

            t = time.perf_counter()
            rd = store.RunDir.for_run(rc.sweep.root, rc.sweep.name, rid)
            rd.create(rc.to_dict())
            summary = {"status": "running", "run_id": rid}
            rd.write_summary(summary)
            for it in range(3):
                rd.log(kind="eval", iteration=it, phase="none", tokens_total=0, wall_s=0.0, **{"pass@1": 0.1})
            summary["status"] = "completed"
            rd.write_summary(summary)
            rd.read_summary()
            times["store writes"].append(time.perf_counter() - t)

            t = time.perf_counter()
            trial = tuning.attach(rc.tuning_settings, rid, {"pop": rc.pop, "seed": rc.seed})
            for it in range(3):
                trial.report({"pass@k": {"1": 0.1 * it}}, it)
                trial.should_prune()
            trial.finish({"status": "completed", "final": {"pass@k": {"1": 0.2}}})
            times["optuna journal"].append(time.perf_counter() - t)
    rows = [{"part (in process)": k, "median_s": round(statistics.median(v), 4), "max_s": round(max(v), 4)}
            for k, v in times.items()]
    rows.append({"part (in process)": "total", "median_s": round(sum(r["median_s"] for r in rows), 4),
                 "max_s": None})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6, help="runs per sweep (default 6)")
    ap.add_argument("--reps", type=int, default=20, help="repetitions of the in-process parts")
    ap.add_argument("--no-slurm", action="store_true", help="only the local launcher")
    ap.add_argument("--root", default=None, help="keep results here (default: a temporary dir)")
    ap.add_argument("--write-docs", action="store_true", help="write the tables to docs/results/sweep.md")
    ap.add_argument("--preset", default=None, help="a CPU preset's wall time under local vs joblib instead")
    ap.add_argument("--pairs", type=int, default=1, help="with --preset: (local, joblib) pairs (default 1)")
    args = ap.parse_args(argv)
    if args.runs < 2:
        sys.exit("bench: --runs must be >= 2")
    if args.pairs < 1:
        sys.exit("bench: --pairs must be >= 1")
    if args.preset and not (REPO / "sweeps" / f"{args.preset}.yaml").is_file():
        sys.exit(f"bench: no preset {args.preset!r} (the files in sweeps/, e.g. quickstart)")
    import pandas as pd

    root = Path(args.root or tempfile.mkdtemp(prefix="bench_sweep_")).resolve()
    try:
        if args.preset:
            rows = preset_by_launcher(root, args.preset, args.pairs)
            print(pd.DataFrame(rows).to_string(index=False))
            if args.write_docs:
                from _results import write_table

                write_table("sweep", "A CPU preset's wall time by launcher", None, list(rows[0]),
                            [list(r.values()) for r in rows],
                            notes=f"OMP_NUM_THREADS=1; load average {os.getloadavg()[0]:.1f} "
                                  "at the end.")
            return 0
        comp = components(root, args.reps)
        print(pd.DataFrame(comp).to_string(index=False))
        inside = next(r["median_s"] for r in comp if r["part (in process)"] == "total")
        launchers = ["local"]
        if not args.no_slurm:
            if slurm_up():
                launchers += ["slurm", "slurm_packed"]
            else:
                print("(local Slurm not running: start it with scripts/start_slurm.sh; slurm row skipped)")
        print()
        e2e = end_to_end(root, launchers, args.runs, inside)
        print(pd.DataFrame(e2e).to_string(index=False))
        formula = ("overhead_per_run_s = gap_s + extra_in_run_s "
                   f"+ {inside:.3f} s per-run bookkeeping (compose/validate, store, Optuna)")
        print(formula)
        if args.write_docs:
            from _results import write_table

            load = f"load average {os.getloadavg()[0]:.1f} at the end"
            write_table("sweep", "Per-run bookkeeping in process", None, list(comp[0]),
                        [list(r.values()) for r in comp], notes=f"Median of {args.reps} repetitions; {load}.")
            write_table("sweep", "Per-run overhead by launcher", None, list(e2e[0]),
                        [list(r.values()) for r in e2e], notes=f"{formula}; {load}.")
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
