"""Calibration of the study's claims by simulation: false yes, false no and power per claim.

    python benchmarks/bench_claims_calibration.py [--quick] [--sims N] [--seeds R] [--problems P]
                                                  [--samples n] [--design-grid] [--write-docs]

Draws synthetic sweeps (esopt.study.simulate: runs x problems x samples from seed variance,
problem difficulty spread and per-sample binomial noise; its docstring states the assumed
magnitudes) and feeds each through the real claim code (esopt.study.claims.compute). Per claim:
    false_yes = P(yes) with the claim's effect at its boundary (its null), the others true
    false_no  = P(no)  with the effect at boundary + the smallest effect of interest
    power     = P(yes) there
and ``familywise false_yes`` = P(some claim says yes) where nothing trains (weights move, no
gain). Printed as ``claim <n> false_yes=<rate> false_no=<rate> power=<rate> sims=<count>`` lines
and one ``familywise false_yes=<rate>`` line. The design defaults to paper_cpu's cell (3 seeds,
500 problems) with the 32 samples Pass@8 needs (n >= 4K). ``--quick``: 200 seeded sims per
scenario (a few minutes on 2 cores); default 1000. ``--design-grid`` also prints the power of
every claim at its smallest effect of interest for seeds x problems designs (what a preset
needs for 80%). ``--write-docs`` writes the tables to docs/results/claims_calibration.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_table  # noqa: E402

from esopt.study.simulate import Design, calibrate, table  # noqa: E402

# (seeds per cell, problems, family sizes, family seeds): paper_cpu's design first
GRID = [(3, 500, 5, 3), (5, 1000, 5, 5), (8, 500, 5, 8), (8, 1000, 5, 8), (8, 500, 12, 8), (8, 500, 20, 8)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 sims per scenario (seeded)")
    ap.add_argument("--sims", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3, help="seeds per cell (and per family cell)")
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--design-grid", action="store_true", help="power per claim over seeds x problems designs")
    ap.add_argument("--write-docs", action="store_true", help="write docs/results/claims_calibration.md")
    args = ap.parse_args(argv)
    sims = args.sims or (200 if args.quick else 1000)
    design = Design(seeds=args.seeds, problems=args.problems, samples=args.samples)
    t0 = time.time()
    rates = calibrate(design, sims=sims, seed=args.seed)
    lines = table(rates)
    print("\n".join(lines))
    wall = time.time() - t0
    print(f"# design: {design}; {sims} sims per scenario; {wall:.0f} s")
    grid = []
    if args.design_grid:
        only = [f"sesoi{i}" for i in range(1, 8)]
        for seeds, problems, sizes, fam in GRID:
            d = Design(seeds=seeds, problems=problems, samples=args.samples, sizes=sizes, family_seeds=fam)
            r = calibrate(d, sims=max(sims // 2, 50), seed=args.seed + 1, only=only)
            row = [seeds, problems, args.samples, sizes, fam] + [f"{r[f'sesoi{i}']['yes']:.2f}" for i in range(1, 8)]
            grid.append(row)
            print("design seeds={} problems={} samples={} sizes={} family_seeds={} ".format(*row[:5])
                  + " ".join(f"power{i}={v}" for i, v in zip(range(1, 8), row[5:])), flush=True)
    if args.write_docs:
        rows = [ln.replace("claim ", "").split(" ") for ln in lines if ln.startswith("claim ")]
        rows = [[r[0]] + [x.split("=")[1] for x in r[1:]] for r in rows]
        fw = next(ln for ln in lines if ln.startswith("familywise")).split("=")[1]
        write_table("claims_calibration", "Claims: false yes, false no, power", None,
                    ["claim", "false yes (null)", "false no (at delta)", "power (at delta)", "sims"], rows,
                    notes=(f"Design: {design.seeds} seeds per cell, {design.problems} problems, {design.samples} "
                           f"samples (Pass@{design.k}), family {design.sizes} sizes x pops {list(design.pops)}. "
                           f"Family-wise false yes where nothing trains: {fw}. Simulator and assumed variance "
                           "components: esopt/study/simulate.py. Wall {:.0f} s.".format(wall)))
        if grid:
            write_table("claims_calibration", "Claims: power at the smallest effect of interest by design", None,
                        ["seeds", "problems", "samples", "sizes", "family seeds"] + [f"claim {i}" for i in range(1, 8)],
                        grid,
                        notes=f"{max(sims // 2, 50)} sims per claim and design; >= 0.80 is the goal.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
