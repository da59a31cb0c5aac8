"""False-prune and true-prune rates of every pruner offered, on real tiny-model sweeps.

    python benchmarks/bench_pruning.py                        # tiny-s and tiny-xs (~35-45 min loaded)
    python benchmarks/bench_pruning.py --models tiny-xs --seeds 8 --poor-seeds 3   # smaller
    python benchmarks/bench_pruning.py --cli-check            # + the issue's two commands, live
    python benchmarks/bench_pruning.py --write-docs           # + the tables into docs/results/pruning.md

1. Record: per model, two real ES sweeps (``algo=es pop=8 iterations=12 eval.every=3
   eval.problems=40 eval.samples=8``, the issue's setting) run to the end without pruning:
   (a) an equal-quality grid, one configuration x ``--seeds`` seeds; (b) a planted grid,
   ``--poor-seeds`` seeds each of the default lr (0.005, good) and of lr 0.02 and 1.0 (planted
   poor: ES steps 4x and 200x too large; on tiny-s the first decays slowly, the second
   collapses at once). Every evaluation stores its per-problem results with
   its Optuna trial (``esopt.runtime.pruning``), so the journal holds every trial's whole
   trajectory. Sweeps already recorded in ``--root`` are reused (the sweeper skips them).
2. Replay: a run's trajectory does not depend on whether other runs were pruned, so each
   pruner's decisions are replayed exactly, with the real Optuna pruner and the code the runs
   use (``tuning.start_trial``, ``RunTrial.report`` / ``should_prune``, an in-memory study per
   replay), in ``--orders`` random launch orders, two ways: sequential (one run after another,
   as the local launcher does) and lockstep (all runs at once; at each evaluation step every
   live run reports, in a new random order per step, as the jobs of a Slurm array do). A
   pruned run stops at the step it was cut.
   In the equal grid the 16 seeds are labelled as 8 configurations of 2 seeds (a null control
   for the configuration-level comparison: identical configurations under different names);
   ``auto`` with the seeds' true label (one configuration) never compares them at all.
3. Print, per pruner (Optuna's at their esopt defaults, and ``auto``), averaged over orders:
   false-prune rate (runs of the equal grid; lr 0.005 runs of the planted grid), per planted
   lr the share of its runs pruned at or before half the iterations (and at any step), and
   compute saved (iterations not run / iterations of the full grid). Goals for ``auto``:
   false-prune <= 10%, true-prune >= 90% before half the budget.

``--cli-check`` then runs the issue's commands end to end with ``tuning.pruner=auto`` (8 seeds
of one config; 5 seeds of lr 0.005 then 5 of lr 1.0; the same with lr 1.0 launched first;
tiny-s) and prints how many runs were pruned.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SETTING = ["algo=es", "pop=8", "iterations=12", "eval.every=3", "eval.problems=40", "eval.samples=8"]
ITERATIONS = 12
GOOD_LR, POOR_LRS = 0.005, (0.02, 1.0)
PRUNERS = [  # (label, tuning knobs): Optuna's pruners at esopt's defaults, then auto
    ("median", {"pruner": "median"}),
    ("percentile (25)", {"pruner": "percentile"}),
    ("successive_halving", {"pruner": "successive_halving"}),
    ("hyperband", {"pruner": "hyperband"}),
    ("wilcoxon", {"pruner": "wilcoxon"}),
    ("auto", {"pruner": "auto"}),
    ("auto, pool_seeds=false", {"pruner": "auto", "pool_seeds": False}),
    ("auto, baseline=false", {"pruner": "auto", "baseline": False}),
]


@dataclass
class Run:
    run_id: str
    seed: int
    lr: float | None
    config_id: str
    steps: list[int]
    values: dict[int, float]
    evidence: dict[int, dict]
    final: float | None
    label: str = ""          # configuration label used in the replay
    poor: bool = False
    base: dict | None = None  # per-problem results of the run's evaluation before training
    extra: dict = field(default_factory=dict)


def sweep(name: str, root: Path, model: str, extra: list[str], pruner: str = "none") -> float:
    """One real multirun (in process, local launcher); returns its wall time."""
    cmd = [sys.executable, "-m", "esopt.sweep", "-m", f"model={model}", *SETTING, *extra,
           f"sweep.root={root}", f"sweep.name={name}", "sweep.aggregate=false", f"tuning.pruner={pruner}"]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    if r.returncode != 0:
        sys.exit(f"sweep {name} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return time.time() - t0


def load(root: Path, name: str, metric: str = "pass@1") -> list[Run]:
    """Every trial of the sweep's study with its whole trajectory, in trial order."""
    import optuna

    from esopt.runtime import pruning, tuning

    storage = tuning.open_storage(str(root / name / tuning.JOURNAL_NAME))
    (study_name,) = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=study_name, storage=storage)
    runs = []
    for t in study.get_trials(deepcopy=False):
        ev = {int(k[len(pruning.EVIDENCE_PREFIX):]): v for k, v in t.user_attrs.items()
              if k.startswith(pruning.EVIDENCE_PREFIX) and k != pruning.BASE_KEY}
        runs.append(Run(t.user_attrs["run_id"], int(t.user_attrs["seed"]), t.user_attrs.get("lr"),
                        t.user_attrs["config_id"], sorted(t.intermediate_values), dict(t.intermediate_values),
                        ev, t.value, base=t.user_attrs.get(pruning.BASE_KEY)))
    return runs


def replay(runs: list[Run], knobs: dict, order: list[int], mode: str, metric: str = "pass@1") -> dict[str, int | None]:
    """Replay one sweep under one pruner: {run_id: step it was pruned at, or None}."""
    import optuna

    from esopt.runtime import tuning

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t = tuning.settings({**knobs, "metric": metric})
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction=t["direction"],
                                pruner=tuning.make_pruner(t))
    out: dict[str, int | None] = {}

    def start(r: Run):
        trial = tuning.start_trial(study, r.run_id, {"seed": r.seed, "lr": r.lr, "config_id": r.label})
        rt = tuning.RunTrial(study, trial, metric, True, t["pruner"])
        if r.base is not None:  # as esopt.runtime.run does before training
            rt.record_base({"samples": r.base["samples"], "correct_counts": r.base["correct"],
                            "greedy_correct": r.base.get("greedy")})
        return rt

    def step(rt, r: Run, s: int) -> bool:
        ev = r.evidence.get(s) or {}
        rt.report({metric: r.values[s], "samples": ev.get("samples"), "correct_counts": ev.get("correct"),
                   "greedy_correct": ev.get("greedy")}, s)
        if s < ITERATIONS and rt.should_prune():  # the last evaluation is never pruned (context.py)
            rt.finish("pruned")
            out[r.run_id] = s
            return True
        return False

    def done(rt, r: Run):
        if r.run_id not in out:
            out[r.run_id] = None
            rt.finish({"status": "completed"}, r.values[r.steps[-1]])

    if mode == "sequential":
        for i in order:
            r = runs[i]
            rt = start(r)
            for s in r.steps:
                if step(rt, r, s):
                    break
            done(rt, r)
    else:  # lockstep: every run started, then one evaluation of each, in a new random order per step
        live = [(runs[i], start(runs[i])) for i in order]
        shuffle = random.Random(order[0] if order else 0)
        for s in sorted({s for r in runs for s in r.steps}):
            for r, rt in shuffle.sample(live, len(live)):
                if r.run_id not in out and s in r.values:
                    step(rt, r, s)
        for r, rt in live:
            done(rt, r)
    return out


def rates(runs: list[Run], pruned: list[dict]) -> dict:
    """Mean over replays: false-prune (share of good runs pruned), per planted lr the share of
    its runs pruned at or before half the iterations and at any step, compute saved
    (iterations not run / iterations of the full grid)."""
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    good = [r for r in runs if not r.poor]
    out = {"false": mean([mean([p[r.run_id] is not None for r in good]) for p in pruned]),
           "saved": mean([sum(ITERATIONS - p[r.run_id] for r in runs if p[r.run_id] is not None)
                          / (ITERATIONS * len(runs)) for p in pruned])}
    for lr in POOR_LRS:
        poor = [r for r in runs if r.poor and float(r.lr) == lr]
        out[f"half {lr}"] = mean([mean([p[r.run_id] is not None and p[r.run_id] <= ITERATIONS / 2 for r in poor])
                                  for p in pruned]) if poor else float("nan")
        out[f"any {lr}"] = (mean([mean([p[r.run_id] is not None for r in poor]) for p in pruned])
                            if poor else float("nan"))
    return out


def pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.0f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-s,tiny-xs")
    ap.add_argument("--seeds", type=int, default=16, help="seeds of the equal-quality grid (even)")
    ap.add_argument("--poor-seeds", type=int, default=5, help="seeds per config of the planted grid")
    ap.add_argument("--orders", type=int, default=50, help="random launch orders replayed per pruner")
    ap.add_argument("--root", default="/tmp/esopt-bench-pruning", help="sweeps are kept (and reused) here")
    ap.add_argument("--cli-check", action="store_true", help="also run the issue's two commands with pruner=auto")
    ap.add_argument("--write-docs", action="store_true", help="write the tables to docs/results/pruning.md")
    args = ap.parse_args()
    root = Path(args.root)
    models = [m for m in args.models.split(",") if m]

    data: dict[str, dict[str, list[Run]]] = {}
    for model in models:
        seeds = ",".join(map(str, range(args.seeds)))
        pseeds = ",".join(map(str, range(args.poor_seeds)))
        lrs = ",".join(map(str, (GOOD_LR, *POOR_LRS)))
        w1 = sweep(f"equal-{model}", root, model, [f"seed={seeds}"])
        w2 = sweep(f"planted-{model}", root, model, [f"lr={lrs}", f"seed={pseeds}"])
        print(f"{model}: equal grid ({args.seeds} runs) {w1:.0f} s, planted grid "
              f"({args.poor_seeds * (1 + len(POOR_LRS))} runs) {w2:.0f} s", flush=True)
        eq = load(root, f"equal-{model}")
        for i, r in enumerate(sorted(eq, key=lambda r: r.seed)):
            r.label = f"equal-{i // 2}"           # 8 identical configurations of 2 seeds
        pl = load(root, f"planted-{model}")
        for r in pl:
            r.label, r.poor = r.config_id, float(r.lr) in POOR_LRS
        data[model] = {"equal": eq, "planted": pl}
        for lr in (GOOD_LR, *POOR_LRS):
            fin = [r.final for r in pl if float(r.lr) == lr and r.final is not None]
            v3 = [r.values.get(3) for r in pl if float(r.lr) == lr]
            print(f"  lr={lr}: pass@1 at iteration 3 {sum(v3) / len(v3):.3f}, final "
                  f"{sum(fin) / len(fin):.3f} (mean of {len(fin)} seeds)")
        fe = [r.final for r in eq]
        print(f"  equal grid: final pass@1 {min(fe):.3f}..{max(fe):.3f} over {len(fe)} seeds")

    rng = random.Random(0)
    tables = {}
    for mode in ("sequential", "lockstep"):
        title = (f"{mode} launch, mean over {args.orders} random orders; ES pop 8, {ITERATIONS} "
                 f"iterations, evaluation every 3 on 40 problems x 8 samples; planted: pruned at or "
                 f"before iteration {ITERATIONS // 2} (at any iteration)")
        print(f"\n{title}")
        head = ["model", "pruner", "equal grid: false-prune", "saved", f"planted: false-prune (lr {GOOD_LR})",
                *(f"lr {lr} pruned" for lr in POOR_LRS), "saved"]
        rows = []
        for model in models:
            eq, pl = data[model]["equal"], data[model]["planted"]
            for label, knobs in PRUNERS:
                res = []
                for grid in (eq, pl):
                    orders = [rng.sample(range(len(grid)), len(grid)) for _ in range(args.orders)]
                    res.append(rates(grid, [replay(grid, knobs, o, mode) for o in orders]))
                rows.append([model, label, pct(res[0]["false"]), pct(res[0]["saved"]), pct(res[1]["false"]),
                             *(f"{pct(res[1][f'half {lr}'])} ({pct(res[1][f'any {lr}'])})" for lr in POOR_LRS),
                             pct(res[1]["saved"])])
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        sys.stdout.flush()
        tables[mode] = (title, head, rows)

    checks = cli_check(root, data) if args.cli_check else []
    if args.write_docs:
        from _results import write_table

        for mode, (title, head, rows) in tables.items():
            write_table("pruning", f"Pruners replayed, {mode} launch", None, head, rows, notes=title + ".")
        if checks:
            write_table("pruning", "Command-line check, tuning.pruner=auto", None,
                        ["sweep", "grid", "pruned", "all runs pruned", "wall s"], checks,
                        notes="tiny-s, " + " ".join(SETTING) + ".")


def cli_check(root: Path, data: dict) -> list[list]:
    """The issue's two commands, live, with tuning.pruner=auto (tiny-s); returns the table rows."""
    import json

    rows = []
    print("\nthe command line, tuning.pruner=auto, tiny-s (" + " ".join(SETTING) + "):")
    for name, extra, count in (
        ("cli-equal", ["seed=0,1,2,3,4,5,6,7"], lambda s: True),
        ("cli-planted", [f"lr={GOOD_LR},1.0", "seed=0,1,2,3,4"], lambda s: float(s["lr"]) == 1.0),
        # lr 1.0 launched first: no other configuration has reported yet, only the base model
        ("cli-planted-first", [f"lr=1.0,{GOOD_LR}", "seed=0,1,2,3,4"], lambda s: float(s["lr"]) == 1.0),
    ):
        wall = sweep(name, root, "tiny-s", extra, pruner="auto")
        summaries = [json.loads(p.read_text()) for p in sorted((root / name / "runs").glob("*/summary.json"))]
        sel = [s for s in summaries if count(s)]
        pruned = [s for s in sel if s["status"] == "pruned"]
        print(f"  {name}: {' '.join(extra)}: {len(pruned)} of {len(sel)} "
              f"{'runs' if name == 'cli-equal' else 'lr=1.0 runs'} pruned "
              f"(all runs: {sum(s['status'] == 'pruned' for s in summaries)} of {len(summaries)} pruned), "
              f"wall {wall:.0f} s")
        for s in pruned[:2]:
            print(f"    e.g. {s['run_id']}: {s['error']}")
        rows.append([name, " ".join(extra), f"{len(pruned)} of {len(sel)}",
                     f"{sum(s['status'] == 'pruned' for s in summaries)} of {len(summaries)}", f"{wall:.0f}"])
    return rows


if __name__ == "__main__":
    main()
