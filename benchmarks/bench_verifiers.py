"""Verifier cost on hostile completions (goal: any completion up to 1 MB scored in < 50 ms).

    python benchmarks/bench_verifiers.py [--sizes 10000,30000,100000,1048576] [--old-max 30000] [--write-docs]

For each input family of tests/tasks/test_verifier_fuzz.py (repeated and unclosed tags, a valid
completion with 2,000 random tag insertions, digit strings, GSM8K markers, ...) and each size,
times one full scoring by both tasks: Countdown chat verdict + compact verdict, GSM8K
strict + flexible verdict (best of 3; wall, and this process's CPU time: on a shared
machine the wall time mostly measures the other users). "growth" = t(largest) / t(previous size) (about the size
ratio for linear code; its square for quadratic code). "old" times the public reward's regexes
(esopt.tasks.countdown._FULL / _THINK / _ANSWER, the previous implementation) on the chat
families, only up to --old-max characters: they are quadratic (the issue measured up to 14 s
at 100 KB and no result within 120 s at 1 MB). ``--write-docs`` writes the table to
docs/results/verifiers.md (benchmarks/_results.py).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "tasks"))
from test_verifier_fuzz import hostile, ref_format_score, ref_last_answer  # noqa: E402

from esopt.tasks import countdown, gsm8k  # noqa: E402

GOAL_S = 0.050
CHAT = ("unclosed think", "mid tags, no end", "unclosed answers", "blocks then junk", "huge valid answer",
        "mutated valid")


def best_of(fn, repeats=3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def cpu_of(fn, repeats=3) -> float:
    """CPU seconds of this process (what the scoring costs, without the waits a loaded machine adds)."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,30000,100000,1048576")
    ap.add_argument("--old-max", type=int, default=30000)
    ap.add_argument("--write-docs", action="store_true", help="write the table to docs/results/verifiers.md")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    g8 = gsm8k.GSM8KTask({"source": "unused.jsonl"})

    def score(c):
        countdown.chat_verdict(c, [3, 7, 2], 23)
        countdown.compact_verdict(c, [3, 7, 2], 23)
        g8.verify(c, {"gold": "23"})

    inputs = {n: hostile(n, random.Random(2)) for n in sizes}
    families = list(inputs[sizes[0]])
    head = " | ".join(f"{n // 1000} KB ms" for n in sizes)
    old_sizes = [n for n in sizes if n <= args.old_max]
    old_head = " | ".join(f"old {n // 1000} KB ms" for n in old_sizes)
    load0 = os.getloadavg()[0]
    print(f"load average {load0:.1f}; goal {GOAL_S * 1000:.0f} ms at {sizes[-1] // 1000} KB")
    header = ["family", *head.split(" | "), f"CPU ms at {sizes[-1] // 1000} KB", "growth", "goal",
              *(old_head.split(" | ") if old_head else [])]
    print(f"| family | {head} | CPU ms at {sizes[-1] // 1000} KB | growth | goal | {old_head} |")
    print("|---" * (len(sizes) + 4 + len(old_sizes)) + "|")
    worst = worst_cpu = 0.0
    table = []
    for fam in families:
        times = [best_of(lambda: score(inputs[n][fam])) for n in sizes]
        cpu = cpu_of(lambda: score(inputs[sizes[-1]][fam]))
        worst, worst_cpu = max(worst, times[-1]), max(worst_cpu, cpu)
        growth = times[-1] / max(times[-2], 1e-9) if len(times) > 1 else float("nan")
        olds = []
        for n in old_sizes:
            if fam in CHAT:
                c = inputs[n][fam]
                olds.append(f"{1000 * best_of(lambda: (ref_format_score(c), ref_last_answer(c)), 1):.1f}")
            else:
                olds.append("-")
        row = [fam, *(f"{1000 * t:.1f}" for t in times), f"{1000 * cpu:.1f}", f"{growth:.1f}x",
               "met" if times[-1] < GOAL_S else "missed", *olds]
        table.append(row)
        print("| " + " | ".join(row) + " |", flush=True)
    summary = (f"worst at {sizes[-1] // 1000} KB: {1000 * worst:.1f} ms wall ({'met' if worst < GOAL_S else 'missed'}), "
               f"{1000 * worst_cpu:.1f} ms CPU ({'met' if worst_cpu < GOAL_S else 'missed'})")
    print(summary)
    if args.write_docs:
        from _results import write_table

        write_table("verifiers", "Verifier cost on hostile completions", None, header, table,
                    notes=f"{summary}; load average {load0:.1f} at the start; goal {GOAL_S * 1000:.0f} ms.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
