"""``python -m esopt.aggregate results/<sweep>``: tables, trend, claims and the page of a sweep.

    python -m esopt.aggregate results/<sweep> [--metric pass@1] [--tolerance 0.01]
                              [--bootstrap 1000] [--seed 0] [--algo es] [--out DIR] [--no-html]

Reads only run directories and the sweep's Optuna journal (``esopt.study.tables``); writes
runs.parquet, runs.csv, curves.parquet, trend.json, claims.json, aggregate.json and
report.html (``esopt.study.report.aggregate``). Exit codes: 0 ok, 1 an output could not be written
(full disk; the previous file is kept), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from esopt.cli.common import Parser, quiet
from esopt.core.errors import ConfigError
from esopt.study import claims, fit
from esopt.study.report.aggregate import aggregate

SHOWN = 20  # skipped runs and notes printed (the rest are in aggregate.json)


def main(argv: list[str] | None = None) -> int:
    quiet()
    ap = Parser(
        prog="python -m esopt.aggregate",
        description="Aggregate a sweep into runs.parquet/csv, curves.parquet, trend.json and report.html.")
    ap.add_argument("sweep_dir", help="the sweep directory (holds runs/<run_id>/)")
    ap.add_argument("--metric", default="pass@1",
                    help="final metric for the fit and the page: pass@1, pass@32, maj@8, greedy, entropy, "
                         "or a runs-table column (default: pass@1)")
    ap.add_argument("--tolerance", type=float, default=0.01,
                    help="efficient pop = smallest pop within this of the best (default 0.01)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the fit (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    ap.add_argument("--algo", default="es", help="algorithm whose runs enter the pop-vs-size fit (default es)")
    ap.add_argument("--out", default=None, help="output directory (default: the sweep directory)")
    ap.add_argument("--no-html", action="store_true", help="skip report.html")
    ap.add_argument("--claims", action=argparse.BooleanOptionalAction, default=None,
                    help="write claims.json (esopt.study.claims); default: for paper_* sweeps and sweeps "
                         "with ES and other algorithms")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        agg = aggregate(args.sweep_dir, metric=args.metric, tolerance=args.tolerance,
                        bootstrap=args.bootstrap, seed=args.seed, algo=args.algo, out=args.out,
                        html=not args.no_html, claims=args.claims)
    except ConfigError as e:
        print(f"esopt: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk: every output is the previous one or a complete new one
        print(f"esopt: error: cannot write the outputs ({e}); the previous files are intact",
              file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else agg.sweep_dir
    counts = ", ".join(f"{v} {k}" for k, v in agg.runs["status"].value_counts().items())
    print(f"{len(agg.runs)} runs ({counts}), {len(agg.curves)} metrics lines, "
          f"{len(agg.skipped)} skipped, in {time.perf_counter() - t0:.2f} s")
    for s in agg.skipped[:SHOWN]:
        print(f"  skipped {s['run_id']}: {s['reason']}")
    if len(agg.skipped) > SHOWN:
        print(f"  ... {len(agg.skipped) - SHOWN} more in aggregate.json")
    for n in agg.notes[:SHOWN]:
        print(f"  note: {n}")
    tr = agg.trend
    if tr.get("slope") is not None:
        print(f"trend ({tr['metric']}, {tr['n_model_sizes']} sizes): log pop* = {tr['intercept']:.3g} "
              f"+ {tr['slope']:.3g} log params, 95% CI [{tr['slope_ci'][0]:.3g}, {tr['slope_ci'][1]:.3g}] "
              f"-> {tr['reading']} ({fit.DESCRIPTIVE})")
    else:
        print(f"trend: {tr['reading']} ({tr['reading_reason']})")
    if agg.claims:
        print("claims:\n  " + "\n  ".join(claims.table_lines(agg.claims)))
    print(f"wrote {out}/{{runs.parquet,runs.csv,curves.parquet,trend.json,aggregate.json"
          f"{'' if args.no_html else ',report.html'}{',claims.json' if agg.claims else ''}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
