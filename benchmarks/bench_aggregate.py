"""Reading and aggregation speed on a large synthetic sweep (goal: 10,000 run directories in <= 5 s).

    python benchmarks/bench_aggregate.py [--runs 10000] [--dir DIR] [--iterations 10] [--write-docs]
                                         [--distinct-keys [K]]

Writes N synthetic run directories (tests/helpers.py write_synthetic_sweep: 10 model sizes x
4 pops x N/40 seeds of ES; each run: summary.json with base/final evaluations over 200 problems
x 32 samples incl. per-problem counts, metrics.jsonl with `iterations` train lines carrying the
per-member rewards list, plus an eval line every 5 iterations), then times, in-process, the
reader (``esopt.study.tables.load``, esopt.study.run_read) three ways:

    read                 Arrow over whole chunks of runs (no file needs the per-file reader)
    read, malformed      one corrupt summary and one bad metrics line per 2,000 runs: only those
                         files go to the per-file reader (planted, then restored)
    read, per file       every file through the per-file reader (Python's json), for comparison

and the aggregation:

    aggregate (no page)  read + tables + runs.parquet/csv + curves.parquet + trend fit
                         (1000 bootstrap resamples) + trend.json      <- the 5 s goal
    page                 report.html (all figures, plotly.js embedded)
    total                both

``--distinct-keys K`` (default 10): every run's summary and metrics lines also carry K keys no
other run has (a later version's knobs, a tracker's fields); the goal for 2,000 such runs:
under 30 s and 1 GB peak memory ("peak rss").

The file cache is warm (the sweep was just written), as after a sweep on the same machine.
Wall seconds decide "met"; CPU seconds (this process, all its threads) and the load average
are printed too, since on a shared machine wall time mostly measures the other users.
``--write-docs`` also writes the tables to docs/results/aggregate.md (benchmarks/_results.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers import write_synthetic_sweep  # noqa: E402

from esopt.study import run_read, tables  # noqa: E402
from esopt.study.report import page as report  # noqa: E402
from esopt.study.report.aggregate import aggregate  # noqa: E402

GOAL_S = 5.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--dir", default=None, help="reuse/keep the synthetic sweep here")
    ap.add_argument("--distinct-keys", type=int, nargs="?", const=10, default=0, metavar="K",
                    help="give every run K keys of its own (summary and metrics lines)")
    ap.add_argument("--write-docs", action="store_true", help="write the table to docs/results/aggregate.md")
    args = ap.parse_args(argv)

    tmp = None
    if args.dir:
        root = Path(args.dir)
    else:
        tmp = tempfile.mkdtemp(prefix="esopt-bench-agg-")
        root = Path(tmp) / "sweep"
    models = {f"m{i}": 1e6 * 2 ** i for i in range(10)}
    pops = (8, 16, 32, 64)
    n_seeds = max(1, args.runs // (len(models) * len(pops)))
    try:
        if not (root / "runs").is_dir():
            t = time.perf_counter()
            write_synthetic_sweep(root, models=models, pops=pops, seeds=range(n_seeds),
                                  iterations=args.iterations, eval_every=5, problems=200, samples=32)
            if args.distinct_keys:
                add_distinct_keys(root, args.distinct_keys)
            print(f"wrote synthetic sweep in {time.perf_counter() - t:.1f} s: {root}", file=sys.stderr)
        load0 = os.getloadavg()[0]
        reads = time_reads(root)
        out = root.parent / "agg-out"
        t0, c0 = time.perf_counter(), time.process_time()
        agg = aggregate(root, out=out, html=False)
        t1, c1 = time.perf_counter(), time.process_time()
        (out / "report.html").write_text(report.build(agg), encoding="utf-8")
        t2, c2 = time.perf_counter(), time.process_time()
        n, lines = len(agg.runs), len(agg.curves)
        rows = [("aggregate (no page)", t1 - t0, c1 - c0), ("page", t2 - t1, c2 - c1), ("total", t2 - t0, c2 - c0)]
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"\npeak rss {rss:.2f} GB")
        print(f"{n} runs, {lines} metrics lines; load average {load0:.1f} -> {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores; stages (wall): "
              + ", ".join(f"{k} {v:.2f}s" for k, v in agg.timings.items() if k.endswith("_s")))
        read_table = stage_table(reads, n, goal_for="read")
        table = stage_table(rows, n, goal_for="aggregate (no page)")
        if args.write_docs:
            from _results import write_table

            header = ["stage", "runs", "wall s", "cpu s", "runs/s", "goal s", "met"]
            load = f"load average {load0:.1f} at the start" + (
                f" on {os.cpu_count()} cores (a shared machine: wall s includes the time spent waiting for a "
                "core; cpu s is this process's own work, all its threads)" if load0 > (os.cpu_count() or 1) else "")
            write_table("aggregate", "Reading a large synthetic sweep", None, header, read_table,
                        notes=f"{n} runs, {lines} metrics lines; `read, per file`: the files Arrow reads, read "
                              f"as a malformed one is; {load}.")
            write_table("aggregate", "Aggregation of a large synthetic sweep", None, header, table,
                        notes=f"{n} runs, {lines} metrics lines; {load}.")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def time_reads(root: Path) -> list[tuple[str, float, float]]:
    """(stage, wall s, cpu s) of reading the sweep with the one reader: as it is, with one corrupt
    summary and one bad metrics line per chunk of runs (restored after), every file per file."""
    def timed(name, **kw):
        t, c = time.perf_counter(), time.process_time()
        agg = tables.load(root, **kw)
        out.append((name, time.perf_counter() - t, time.process_time() - c))
        print(f"{name}: files read per file {agg.timings['read_per_file']}", file=sys.stderr)

    out: list = []
    runs = sorted((root / "runs").iterdir())
    run_read.read_runs(runs[:100], str(root))                   # warm-up: imports, Arrow's thread pool
    timed("read")
    planted = runs[max(1, min(1000, len(runs) // 2))::2000]     # one run per chunk of 2,000
    saved = {p: ((p / "summary.json").read_bytes(), (runs[runs.index(p) - 1] / "metrics.jsonl").read_bytes())
             for p in planted}
    try:
        for p, (summary, metrics) in saved.items():
            (p / "summary.json").write_bytes(summary[: len(summary) // 2])          # a torn summary
            (runs[runs.index(p) - 1] / "metrics.jsonl").write_bytes(b'{"kind": "tr\n' + metrics)  # a bad line
        timed("read, malformed")
    finally:
        for p, (summary, metrics) in saved.items():
            (p / "summary.json").write_bytes(summary)
            (runs[runs.index(p) - 1] / "metrics.jsonl").write_bytes(metrics)
    timed("read, per file", per_file=True)
    return out


def stage_table(rows, n: int, goal_for: str) -> list[list]:
    """Print and return the rows of one table (the ``goal_for`` stage has the 5 s goal)."""
    print(f"{'stage':<22}{'runs':>8}{'wall s':>9}{'cpu s':>8}{'runs/s':>9}{'goal s':>8}{'met':>6}")
    table = []
    for name, sec, cpu in rows:
        goal = GOAL_S if name == goal_for else None
        met = "-" if goal is None else ("yes" if sec <= goal else "no")
        print(f"{name:<22}{n:>8}{sec:>9.2f}{cpu:>8.2f}{n / sec:>9.0f}{goal or '-':>8}{met:>6}")
        table.append([name, n, f"{sec:.2f}", f"{cpu:.2f}", f"{n / sec:.0f}", goal or "-", met])
    return table


def add_distinct_keys(root: Path, k: int) -> None:
    """Give run i the summary keys ``extra_<i>_<j>`` and ``effective.knob_<i>_<j>`` and the
    metrics line keys ``x_<i>_<j>`` (j < k): columns of their own."""
    import json

    for i, run in enumerate(sorted((root / "runs").iterdir())):
        s = json.loads((run / "summary.json").read_text())
        for j in range(k):
            s[f"extra_{i}_{j}"] = i
            s.setdefault("effective", {})[f"knob_{i}_{j}"] = 0.5 * i
        (run / "summary.json").write_text(json.dumps(s))
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        (run / "metrics.jsonl").write_text("".join(json.dumps({**x, **{f"x_{i}_{j}": 1.0 * j for j in range(k)}}) + "\n" for x in lines))


if __name__ == "__main__":
    sys.exit(main())
