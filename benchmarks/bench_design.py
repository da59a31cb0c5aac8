"""The designs of the shipped ``*_gpu`` presets (``python -m esopt.design``): per claim its power at
the smallest effect of interest under the least favourable generator, or what the grid lacks;
runs, token bound, GPU-hours.

    python benchmarks/bench_design.py [--sims 100] [--seed 0] [--presets NAME ...] [--jobs N]
                                      [--write-docs] [--write-presets]

``--write-docs`` writes the table to docs/results/design.md; ``--write-presets`` rewrites each
preset's design block (its header comment, ``esopt.study.claims.design.header_lines``) and its
``sweep.design_power`` (the claims registration records it), which
tests/study/test_design.py checks against esopt.design. Composition needs no GPU: where vLLM is not
installed the presets are composed with ``engine=hf`` (the engine enters neither the tokens nor
the claims), GSM8K from ``../shared/data/gsm8k`` (or ESOPT_SHARED_DATA), the Countdown preset's
file replaced by a generated one in the published format (its eval.problems is fixed at 500).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_table  # noqa: E402

PRESETS = ("pop_vs_size_gpu", "es_vs_grpo_gpu", "sequential_gpu", "sigma_lr_gpu", "es_vs_grpo_countdown_gpu", "pilot_gpu")


def local_overrides(preset: str, tmp: Path) -> list[str]:
    """What composing the preset here needs: engine=hf without vLLM, local data."""
    from esopt.engines import vllm

    out = [] if vllm.available() else ["engine=hf"]
    if "countdown" in preset:
        sys.path.insert(0, str(REPO / "tests"))
        from helpers import write_countdown_es_file

        path = tmp / "countdown.json"
        if not path.exists():
            write_countdown_es_file(path)
        shared = Path(os.environ.get("ESOPT_SHARED_DATA") or REPO.parent / "shared" / "data") / "gsm8k"
        return out + [f"task.source={path}", f"++eval.ood_task.source={shared}"]   # its out-of-domain set
    shared = Path(os.environ.get("ESOPT_SHARED_DATA") or REPO.parent / "shared" / "data") / "gsm8k"
    if not (shared / "test.jsonl").exists():
        sys.exit(f"bench_design: the full GSM8K ({shared}) is needed for the GPU presets' problem counts")
    return out + [f"task.source={shared}"]


def preset_design(preset: str, name: str, sims: int, seed: int, tmp: Path, spread_sims: int) -> tuple[dict, float]:
    """(the preset's design under component set ``name``, seconds): a set with unknown seed spreads
    with its sensitivity row at ``spread_sims``. One process's work (``--jobs``)."""
    from hydra.core.global_hydra import GlobalHydra

    from esopt.cli.design import compose
    from esopt.study.claims import design as D
    from esopt.study.claims.component_sets import component_set

    t = time.time()
    GlobalHydra.instance().clear()
    runs = compose([f"+experiment={preset}", *local_overrides(preset, tmp)])
    GlobalHydra.instance().clear()
    comps, source, spreads = component_set(name)
    report = D.assess(D.grid_of(runs), runs, comps=comps, comp_source=source, sims=sims, seed=seed,
                      engine=preset_engine(preset), spreads=spreads, spread_sims=spread_sims)
    return report, time.time() - t


def all_designs(presets: list[str], sets: list[str], sims: int, seed: int, tmp: Path, spread_sims: int,
              jobs: int) -> dict:
    """{(preset, set): (report, seconds)}, ``jobs`` processes at a time (spawned: each its own
    Hydra; one torch thread each where OMP_NUM_THREADS=1 is set)."""
    todo = [(p, s) for p in presets for s in sets]
    if jobs <= 1:
        return {k: preset_design(k[0], k[1], sims, seed, tmp, spread_sims) for k in todo}
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futs = {k: pool.submit(preset_design, k[0], k[1], sims, seed, tmp, spread_sims) for k in todo}
        return {k: f.result() for k, f in futs.items()}


def preset_engine(preset: str) -> str:
    """The engine the preset names (priced as such when composed with engine=hf here)."""
    from hydra import compose, initialize_config_dir

    from esopt.cli import configs

    configs.register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return str(compose(config_name="config", overrides=[f"+experiment={preset}"]).engine.name)


def main(argv=None) -> int:
    from esopt.study.claims import design as D
    from esopt.study.claims.component_sets import SEED_SPREADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=D.SIMS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--write-presets", action="store_true")
    ap.add_argument("--components", nargs="+", default=["paper", "tiny"],
                    help="component sets side by side (the first one writes the presets' headers)")
    ap.add_argument("--spread-sims", type=int, default=30, help="sims per seed spread of the sensitivity row")
    ap.add_argument("--jobs", type=int, default=1, help="processes computing designs side by side (one per "
                                                        "preset and component set)")
    args = ap.parse_args(argv)
    rows, blocks, t0 = [], {}, time.time()
    with tempfile.TemporaryDirectory() as tmp:
        if any("countdown" in p for p in args.presets):   # its file written once, before the workers read it
            local_overrides(next(p for p in args.presets if "countdown" in p), Path(tmp))
        designs = all_designs(args.presets, args.components, args.sims, args.seed, Path(tmp), args.spread_sims, args.jobs)
        for preset in args.presets:
            reports = {name: designs[preset, name][0] for name in args.components}
            print(f"== {preset} ({sum(designs[preset, n][1] for n in args.components):.0f} s)")
            for name, report in reports.items():
                print(f"-- components {name}")
                for line in D.lines(report):
                    print(line)
                c = report["cost"]
                verdicts = "; ".join(
                    f"{cid}: " + (f"{r['power']:.2f} [{r['power_ci'][0]:.2f}, {r['power_ci'][1]:.2f}] "
                                  f"({r['power_gen']}){'' if r['decidable'] else ', cannot decide'}"
                                  + (f"; {D.spread_text(r)}" if r.get("spreads") else "")
                                  if "power" in r else f"cannot decide: {r['why'].split('; ')[0]}")
                    for cid, r in report["claims"].items())
                rows.append([preset, name, c["runs"], f"{c['tokens'] + c['analysis_tokens']:,}", f"{c['expected']:,}",
                             f"{D.hours_text(c['gpu_hours'])} ({D.hours_text(c['gpu_hours_bound'])})", verdicts])
            first = reports[args.components[0]]
            blocks[preset] = (D.header_lines(first, f"python -m esopt.design +experiment={preset} "
                                                    f"--components {args.components[0]}"), D.design_powers(first))
    wall = time.time() - t0
    if args.write_docs:
        write_table("design", "Designs of the GPU presets", None,
                    ["preset", "components", "runs", "generated tokens (bound)", "expected",
                     "GPU-hours expected (at the bound)",
                     "per claim: power at its smallest "
                     "effect [Wilson 95%] (least favourable generator), or what the grid lacks"], rows,
                    notes=(f"{args.sims} sims per scenario and generator, seed {args.seed}"
                           + ("" if args.sims >= D.SIMS else f" (the planner's default is {D.SIMS}: {args.sims} is "
                              "what this shared 2-core machine finished in the time it had)")
                           + "; components (--components): "
                           "paper = the study's and its rivals' published gains, seed spread unknown (power over "
                           f"sigma_seed in {', '.join(map(str, SEED_SPREADS))} at {args.spread_sims} sims each: the "
                           f"spread up to which each claim decides); tiny = {D.MEASURED_ON}; "
                           "GPU-hours expected on an H100 (esopt.runtime.budget.run_cost, docs/design/"
                           "gpu_throughput.md), priced at each preset's engine. Composed with "
                           "engine=hf where vLLM is missing, GSM8K from ../shared/data/gsm8k, the Countdown "
                           f"preset with a generated file in the published format. Wall {wall:.0f} s "
                           f"({args.jobs} process(es), one thread each)."))
    if args.write_presets:  # after the table: its commit stamp is the tree's before these edits
        for preset, (block, powers) in blocks.items():   # the header and sweep.design_power (registered)
            path = REPO / "sweeps" / f"{preset}.yaml"
            path.write_text(D.set_design_power(D.replace_header(path.read_text(), block), powers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
