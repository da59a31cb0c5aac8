"""Predicted against measured hours of every recorded CPU run (``esopt.runtime.budget.run_cost``):
the SmolLM2 and tiny-family presets' per-run means and whole-sweep wall times, and the SmolLM2
learning runs' CPU times, as docs/results records them. Goal: predicted / measured in [0.67, 1.5];
the rows outside are listed as outliers.

    python benchmarks/bench_costs.py [--write-docs]

Each recorded run is composed again from its preset or overrides (``esopt.cli.design.compose``, as
``esopt.sweep`` composes it; a confirmatory sweep with its seeds and test draw, as
benchmarks/bench_paper_cpu.py --confirm ran it) and priced as the planner prices it: its run time (generation and
training; a run's recorded ``wall_s`` excludes its analyses) against the recorded mean per
algorithm; a whole sweep (runs + analyses, over its 2 workers) against its recorded wall time.
No GPU run is recorded yet: the GPU rows of the throughput table stay published figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_table  # noqa: E402

LOW, HIGH = 0.67, 1.5
CPD = "claims_paper_cpu.md"
CS2 = "claims_smollm2.md"
# (sweep as recorded, where, the overrides that compose it, {algo: (runs, mean run s)}, sweep wall min, workers)
SWEEPS = (
    ("paper_cpu", CPD, ["+experiment=paper_cpu"],
     {"es": (16, 19.1), "es_grpo": (8, 30.1), "grpo": (16, 36.6), "grpo_es": (8, 29.8)}, 14.9, 2),
    ("paper_cpu_confirm1", CPD, ["+experiment=paper_cpu", "task.test_draw=1", "seed=range(16,32)"],
     {"es": (16, 42.0), "grpo": (16, 63.4), "es_grpo": (16, 53.3), "grpo_es": (16, 53.4)}, 68.4, 2),
    ("paper_cpu_confirm2", CPD, ["+experiment=paper_cpu", "task.test_draw=2", "seed=range(32,48)"],
     {"grpo_es": (16, 42.3), "es": (16, 40.2), "grpo": (16, 53.4), "es_grpo": (16, 43.4)}, 30.8, 2),
    ("paper_cpu_family", CPD, ["+experiment=paper_cpu_family"], {"es": (150, 26.0)}, 33.6, 2),
    ("paper_cpu_family_confirm2", CPD, ["+experiment=paper_cpu_family", "task.test_draw=2", "seed=range(20,30)"], {"es": (150, 42.3)}, 54.8, 2),
    ("paper_smollm2", CS2, ["+experiment=paper_smollm2"], {"es": (6, 1237.3), "grpo": (3, 1028.8)}, 119.3, 2),
    ("paper_smollm2_confirm1", CS2, ["+experiment=paper_smollm2", "seed=range(16,19)"], {"es": (6, 1240.1), "grpo": (3, 1095.0)}, 96.2, 2),
)
# paper_cpu_family_confirm1 (160 runs, pop 32 included) ran an older preset: not composable now.
LEARNING = ["model=smollm2-135m", "task=arith", "task.ops=+", "eval.split=heldout", "eval.problems=100",
            "eval.samples=4", "eval.every=1000", "engine.threads=1", "pop=8", "es.batch_size=16",
            "es.max_new_tokens=16", "grpo.prompts_per_step=4", "grpo.num_generations=8"]
# docs/results/smollm2.md, "SmolLM2 learning": CPU time (user + system) of each run's process
RUNS = (
    ("smollm2 learning: es seed 1", "smollm2.md", LEARNING + ["algo=es", "iterations=30", "seed=1"], 31 * 60),
    ("smollm2 learning: grpo_es", "smollm2.md", LEARNING + ["algo=grpo_es", "iterations=30"], 28 * 60),
    ("smollm2 learning: grpo30_es10", "smollm2.md", LEARNING + ["algo=grpo_es", "iterations=40", "sequence.split=0.75"],
     29 * 60),
)


def composed(overrides: list[str]) -> list:
    from hydra.core.global_hydra import GlobalHydra

    from esopt.cli.design import compose

    GlobalHydra.instance().clear()
    try:
        return [rc for _, rc in {rid: rc for rid, rc in compose(overrides)}.items()]
    finally:
        GlobalHydra.instance().clear()


def verdict(ratio: float) -> str:
    return "yes" if LOW <= ratio <= HIGH else "**no**"


def rows_of(share_root: str) -> list[list]:
    from esopt.runtime.budget import run_cost

    rows = []
    for name, doc, overrides, per_algo, wall_min, workers in SWEEPS:
        rcs = composed(overrides)
        costs = [(rc, run_cost(rc, root=share_root)) for rc in rcs]
        for algo, (n, mean_s) in per_algo.items():
            pred = statistics.mean((c["hours"]["generate"] + c["hours"]["train"]) * 3600
                                   for rc, c in costs if rc.algo == algo)
            rows.append([f"{name}: {algo} runs (mean of {n})", doc, f"{pred:.0f} s", f"{mean_s:.0f} s",
                         f"{pred / mean_s:.2f}", verdict(pred / mean_s)])
        pred = sum(c["total"] for _, c in costs) * 3600 / workers / 60
        rows.append([f"{name}: the sweep ({len(costs)} runs + analyses, {workers} workers)", doc, f"{pred:.1f} min",
                     f"{wall_min:.1f} min", f"{pred / wall_min:.2f}", verdict(pred / wall_min)])
    for name, doc, overrides, secs in RUNS:
        (rc,) = composed(["-m", *overrides])
        pred = run_cost(rc, root=share_root)["total"] * 3600
        rows.append([name + " (CPU time)", doc, f"{pred / 60:.1f} min", f"{secs / 60:.0f} min", f"{pred / secs:.2f}",
                     verdict(pred / secs)])
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = rows_of(share_root="/nonexistent")   # the algorithms' default shares: no recorded run folders here
    for r in rows:
        print(" | ".join(map(str, r)))
    out = [r[0] for r in rows if r[-1] != "yes"]
    within = len(rows) - len(out)
    print(f"{within} of {len(rows)} within [{LOW}, {HIGH}]; outliers: {'; '.join(out) or 'none'}")
    if args.write_docs:
        write_table("costs", "Predicted against recorded CPU hours", None,
                    ["recorded run", "recorded in docs/results/", "predicted", "measured", "predicted / measured",
                     f"within [{LOW}, {HIGH}]"], rows,
                    notes=(f"{within} of {len(rows)} within [{LOW}, {HIGH}]. Outliers: {'; '.join(out) or 'none'}. "
                           "Predicted: esopt.runtime.budget.run_cost on the run composed again now (the hf engine "
                           "costs the token bound: static batches decode until their longest completion stops; "
                           "the CPU rate is the engine's measured one, or for small models the paper_cpu runs' "
                           "rate). Measured: the recorded per-run means (summary.json wall_s, analyses excluded), "
                           "the whole sweep's wall time (analyses included, 2 workers), and the SmolLM2 learning "
                           "runs' process CPU time. The recorded runs shared a 2-core machine with other jobs "
                           f"(load 2-9): the same preset's runs took 19-42 s apart. Wall {time.time() - t0:.0f} s."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
