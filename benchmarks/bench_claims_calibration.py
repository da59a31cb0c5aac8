"""Calibration of the study's claims by simulation: false yes, false no and power per claim.

    python benchmarks/bench_claims_calibration.py [--quick] [--sims N] [--seeds R] [--problems P]
                                                  [--samples n] [--design-grid] [--write-docs]
                                                  [--from-sweeps CELL_SWEEP [FAMILY_SWEEP]] [--family-design PxN]

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
``--from-sweeps``: the variance components estimated from real runs (aggregated sweep folders:
the comparison cell's, e.g. paper_cpu, and the ES family's, e.g. paper_cpu_family;
esopt.study.simulate.estimate_components) instead of the assumed ones, printed with how each
was estimated; ``--family-design 200x16`` measures claims 4 and 7 at the family preset's
problems x samples (the others at ``--problems`` x ``--samples``).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_table  # noqa: E402

from esopt.study.simulate import Components, Design, calibrate, components_from_sweeps, table  # noqa: E402

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
    ap.add_argument("--from-sweeps", nargs="+", metavar="SWEEP", default=None,
                    help="estimate the variance components from these sweeps (cell, then family)")
    ap.add_argument("--family-design", default=None, metavar="PxN", help="claims 4 and 7 at P problems x N samples")
    args = ap.parse_args(argv)
    if args.family_design and not re.fullmatch(r"[1-9]\d*x[1-9]\d*", args.family_design):
        ap.error(f"--family-design must be PROBLEMSxSAMPLES, e.g. 200x16, got {args.family_design!r}")
    missing = [d for d in args.from_sweeps or [] if not (Path(d) / "runs.parquet").exists()]
    if missing:
        ap.error(f"--from-sweeps: no aggregated sweep (runs.parquet) in {', '.join(missing)}")
    sims = args.sims or (200 if args.quick else 1000)
    design = Design(seeds=args.seeds, problems=args.problems, samples=args.samples)
    t0 = time.time()
    comp, how = Components(), None
    if args.from_sweeps:
        comp, how = components_from_sweeps(*args.from_sweeps[:2])
        for field, text in how.items():
            print(f"# component {field} = {getattr(comp, field)}: {text}")
    rates = calibrate(design, sims=sims, seed=args.seed, components=comp)
    fam_design = None
    if args.family_design:
        fp, fn = (int(x) for x in args.family_design.split("x"))
        fam_design = Design(seeds=args.seeds, problems=fp, samples=fn)
        rates.update(calibrate(fam_design, sims=sims, seed=args.seed, components=comp,
                               only=["null4", "sesoi4", "null7", "sesoi7"]))
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
        if how is not None:  # the rates under the components estimated from real runs: a table of their own
            write_table("claims_calibration", "Claims: false yes, false no, power, components from real runs", None,
                        ["claim", "false yes (null)", "false no (at delta)", "power (at delta)", "sims"], rows,
                        notes=(f"Design: {design.seeds} seeds, {design.problems} problems x {design.samples} samples "
                               f"(Pass@{design.k})" + (f"; claims 4 and 7 at the family's {fam_design.problems} x "
                                                       f"{fam_design.samples}" if fam_design else "") +
                               f", family {design.sizes} sizes x pops {list(design.pops)}. Family-wise false yes "
                               f"where nothing trains: {fw}. Components estimated from "
                               f"{', '.join(args.from_sweeps)} (esopt.study.simulate.estimate_components): " +
                               "; ".join(f"{f} {_fmt(getattr(comp, f))} ({t})" for f, t in how.items()) +
                               f". Wall {wall:.0f} s."))
            return 0
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


def _fmt(v) -> str:
    return "(" + ", ".join(f"{x:.3g}" for x in v) + ")" if isinstance(v, tuple) else f"{v:.3g}"


if __name__ == "__main__":
    sys.exit(main())
