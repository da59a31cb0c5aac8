"""``python -m esopt.design <the overrides a sweep takes>``: before a study runs, whether its grid
can decide each claim and what it costs; launches nothing.

    python -m esopt.design +experiment=pop_vs_size_gpu
    python -m esopt.design -m model=qwen1.5b,qwen7b pop=8,16,32
    python -m esopt.design +experiment=paper_cpu --pilot results/paper_cpu_quick
    python -m esopt.design --pilot results/pilot_smollm2 --print-components   # the literal for MODEL_COMPONENTS
    python -m esopt.design +experiment=es_vs_grpo_gpu --target-power 0.8 --claims 1,3 --max-hours 5000
    python -m esopt.design +experiment=es_vs_grpo_gpu --pilot results/pilot_gpu --target-power 0.8 \
        --claims 1,3 --max-gpu-hours 2000 --write sweeps/es_vs_grpo_confirm.yaml   # a confirmatory preset
    python -m esopt.design ... design.tokens_per_s=3000        # the throughput the hours are computed at
    python -m esopt.design ... design.tokens_per_s.qwen7b=9000 design.gpu=H200   # per model; the GPU kind priced

The grid is composed and validated by the esopt sweeper exactly as ``esopt.sweep`` composes it
(``EsoptSweeper.composed``: same presets, validation, run ids); the assessment is
``esopt.study.claims.design``'s. Flags: ``--claims 1,3`` (default: the claims the grid bears on),
``--pilot DIR`` (variance components from a finished pilot sweep, with bootstrap bounds; what it
does not measure stays the model's: each line says which), ``--print-components`` (with --pilot:
print the pilot's ``Components(...)`` for ``simulate.MODEL_COMPONENTS`` and exit; no grid needed),
without --pilot the cell model's shipped components (``MODEL_COMPONENTS``, else the tiny family's),
``--components NAME`` (a named set, ``esopt.study.claims.component_sets``: ``paper``, the study's
and its rivals' published gains with the seed spread unknown, so power is also shown over a range of
spreads; ``tiny``; a model with a pilot's components),
``--target-power P --max-hours H`` (search the cheapest design meeting P for every named claim),
``--max-gpu-hours H`` (the same cap as --max-hours), ``--write sweeps/<name>.yaml`` (with --pilot
and --target-power: the design found, written as a registered confirmatory preset: fresh seeds, a
fresh test draw where the task has one, the cost and power in its header; ``--force`` overwrites),
``--sims N`` (synthetic sweeps per scenario and generator, default 100), ``--seed S``.
Exit codes: 0 ok (whatever the verdicts), 2 bad input.
"""

from __future__ import annotations

import math
import re
import sys
import time

from esopt.cli.common import command_argv, fail, hydra_app
from esopt.core.errors import ConfigError

FLAGS = {"--pilot": str, "--target-power": float, "--claims": str, "--max-hours": float, "--sims": int,
         "--seed": int, "--components": str, "--max-gpu-hours": float, "--write": str}
SWITCHES = ("--print-components", "--force")
DESIGN_KEYS = {"design.tokens_per_s": float, "design.gpu": str, "design.engine": str}
OLD_PREFIX = "plan."   # the design.* keys' spelling before they were renamed: read for a release, one warning


def split_argv(argv: list[str]) -> tuple[dict, dict, list[str]]:
    """(flags, design.* keys, the sweep's own overrides); bad values: one line, exit 2. A key
    spelt ``plan.*`` (its old name) is read as ``design.*``, with one warning line."""
    flags, keys, rest = {}, {}, []
    warned = False
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, value = a.partition("=")
        key = name.lstrip("+")
        if key.startswith(OLD_PREFIX) and eq:
            key = "design." + key.removeprefix(OLD_PREFIX)
            if not warned:
                warned = True
                print(f"esopt: warning: {name.lstrip('+')} is deprecated and goes in a later release: it is {key} now",
                      file=sys.stderr)
        if a in SWITCHES:
            flags[a] = True
        elif name in FLAGS:
            if not eq:
                if i + 1 >= len(argv):
                    fail(f"{name} needs a value")
                i, value = i + 1, argv[i + 1]
            try:
                flags[name] = FLAGS[name](value)
            except ValueError:
                fail(f"{name}: not a {FLAGS[name].__name__}: {value!r}")
        elif key.startswith("design.tokens_per_s.") and eq:   # per model: design.tokens_per_s.<model>=N
            keys.setdefault("per_model", {})[key.split(".", 2)[2]] = _number(key, value)
        elif key in DESIGN_KEYS and eq:
            keys[key] = _number(key, value) if DESIGN_KEYS[key] is float else value
        elif key.startswith(("design.", OLD_PREFIX)):
            fail(f"unknown key {name!r} (known: {', '.join(DESIGN_KEYS)}, design.tokens_per_s.<model>)")
        else:
            rest.append(a)
        i += 1
    return flags, keys, rest


def _number(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        fail(f"{name}: not a number: {value!r}")


def rates(keys: dict):
    """``design.tokens_per_s``: None, one rate, or {model name: rate, "default": the rest's}."""
    one, per = keys.get("design.tokens_per_s"), keys.get("per_model")
    if not per:
        return one
    return {**per, **({"default": one} if one else {})}


def parse_claims(text: str | None) -> list[int] | None:
    from esopt.study.claims.rules import REGISTRY

    if text is None:
        return None
    try:
        ids = [int(x) for x in re.split(r"[,\s]+", text.strip()) if x]
    except ValueError:
        fail(f"--claims: claim numbers, e.g. 3,7 (got {text!r})")
    bad = [i for i in ids if i not in REGISTRY]
    if bad or not ids:
        fail(f"unknown claim {', '.join(map(str, bad)) or repr(text)} (known: {', '.join(map(str, sorted(REGISTRY)))})")
    return ids


def check(flags: dict, keys: dict) -> None:
    """Budgets and rates must be positive, a target power a probability."""
    if "--max-gpu-hours" in flags:
        if "--max-hours" in flags:
            fail("--max-gpu-hours and --max-hours are one cap: give one")
        flags["--max-hours"] = flags.pop("--max-gpu-hours")
        if not flags["--max-hours"] > 0:
            fail(f"--max-gpu-hours must be > 0 (got {flags['--max-hours']:g})")
    if "--max-hours" in flags and not flags["--max-hours"] > 0:
        fail(f"--max-hours must be > 0 (got {flags['--max-hours']:g})")
    if "--write" in flags:
        from pathlib import Path

        if "--pilot" not in flags or "--target-power" not in flags:
            fail("--write writes the design a pilot's components call for: give --pilot DIR and --target-power P")
        if Path(flags["--write"]).suffix != ".yaml":
            fail(f"--write: a preset is a .yaml file (got {flags['--write']!r})")
        if Path(flags["--write"]).exists() and "--force" not in flags:
            fail(f"--write: {flags['--write']} exists (--force overwrites it)")
        if not Path(flags["--write"]).resolve().parent.is_dir():
            fail(f"--write: no folder {Path(flags['--write']).parent}")
    from esopt import engines
    from esopt.runtime.budget import GPU_KINDS

    for name, rate in [("design.tokens_per_s", keys.get("design.tokens_per_s", 1.0)),
                       *((f"design.tokens_per_s.{m}", r) for m, r in (keys.get("per_model") or {}).items())]:
        if not rate > 0 or math.isinf(rate):
            fail(f"{name} must be a positive number (got {rate:g})")
    if keys.get("design.gpu", GPU_KINDS[0]) not in GPU_KINDS:
        fail(f"design.gpu: unknown GPU kind {keys['design.gpu']!r} (known: {', '.join(GPU_KINDS)})")
    if keys.get("design.engine", "hf") not in engines.ENGINES:
        fail(f"design.engine: unknown engine {keys['design.engine']!r} (known: {', '.join(engines.ENGINES)})")
    if "--target-power" in flags and not 0 < flags["--target-power"] < 1:
        fail(f"--target-power must be in (0, 1) (got {flags['--target-power']:g})")
    if "--sims" in flags and flags["--sims"] < 1:
        fail(f"--sims must be >= 1 (got {flags['--sims']})")
    if "--max-hours" in flags and "--target-power" not in flags:
        fail("--max-hours caps the search of --target-power: give both")
    if "--print-components" in flags and "--pilot" not in flags:
        fail("--print-components prints a pilot's components: give --pilot DIR")
    if "--components" in flags and "--pilot" in flags:
        fail("--components and --pilot both set the components: give one")


def compose(overrides: list[str]) -> list:
    """The grid's runs [(run_id, plan)], composed by the esopt sweeper as ``esopt.sweep -m`` would."""
    from esopt.cli.common import SWEEP_CONSUMER

    jobs: list = []
    argv = overrides if any(a in ("-m", "--multirun") for a in overrides) else ["-m", *overrides]
    saved, sys.argv = sys.argv, [sys.argv[0], *argv]
    SWEEP_CONSUMER.append(jobs.extend)
    try:
        hydra_app(_never)
    finally:
        SWEEP_CONSUMER.remove(jobs.extend)
        sys.argv = saved
    if not jobs:
        fail("the overrides compose no runs (esopt.design assesses a grid of the esopt sweeper)")
    return [(j.rid, j.plan) for j in jobs]


def _never(cfg):
    """The task function: never called (the sweeper hands the jobs over instead)."""
    raise RuntimeError("esopt.design launched a run")


def family_models(grid) -> list:
    """(name, params, model config) of the shipped models (conf/model) of the grid's family's
    kind (the leading letters of its names: tiny, qwen, llama), by size."""
    from omegaconf import OmegaConf

    from esopt import models
    from esopt.cli.configs import CONF_DIR

    kinds = {m.group(0) for name in grid.family if (m := re.match(r"[a-z]+", name))}
    out = []
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        m = re.match(r"[a-z]+", path.stem)
        if m and m.group(0) in kinds:
            cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
            if (p := models.param_count(cfg)):
                out.append((path.stem, int(p), cfg))
    return sorted(out, key=lambda t: t[1])


def main(argv: list[str] | None = None) -> int:
    from esopt.study.claims import design as D

    argv = command_argv(argv, __doc__)
    if argv is None:
        return 0
    flags, keys, overrides = split_argv(argv)
    check(flags, keys)
    claims = parse_claims(flags.get("--claims"))
    if "--print-components" in flags:
        try:
            print("\n".join(D.pilot_literal(flags["--pilot"])))
        except (ConfigError, FileNotFoundError, NotADirectoryError) as e:
            fail(f"--pilot {flags['--pilot']}: {e}" if "--pilot" not in str(e) else str(e))
        return 0
    t0 = time.time()
    runs = compose(overrides)
    try:
        grid = D.grid_of(runs)
    except ConfigError as e:
        fail(str(e))
    sizes = len({p.model["name"] for _, p in runs if p.algo == "es"})
    across = [c for c in claims or [] if (D.REGISTRY[c].more or ("",))[0] == "sizes"]   # compare model sizes
    if across and sizes < 2:
        fail(f"claim {across[0]} compares model sizes: the grid's ES runs have {sizes} "
             f"({grid.cell_model}); sweep model=a,b,c,... with >= 2 populations each")
    comps, source, bounds, spreads = None, None, None, ()
    if "--components" in flags:
        from esopt.study.claims.component_sets import component_set

        try:
            comps, source, spreads = component_set(flags["--components"])
        except ConfigError as e:
            fail(str(e))
    if "--pilot" in flags:
        try:
            start, start_source = D.model_components(grid.cell_model)   # what the pilot does not measure
            comps, pess, opt, how = D.pilot_components(flags["--pilot"], start=start, start_source=start_source)
        except (ConfigError, FileNotFoundError, NotADirectoryError) as e:
            fail(f"--pilot {flags['--pilot']}: {e}" if "--pilot" not in str(e) else str(e))
        if "--write" in flags:
            try:
                D.pilot_enough(flags["--pilot"])
            except ConfigError as e:
                fail(str(e))
        source, bounds = f"pilot {flags['--pilot']}", (pess, opt)
        for k, v in how.items():
            print(f"# component {k}: {v}")
    sims, seed, rate = flags.get("--sims", D.SIMS), flags.get("--seed", 0), rates(keys)
    price = {"gpu": keys.get("design.gpu"), "engine": keys.get("design.engine")}
    report = D.assess(grid, runs, claims, comps, source, bounds, sims=sims, seed=seed, tokens_per_s=rate,
                      target=flags.get("--target-power", D.TARGET), spreads=spreads, **price)
    print(f"esopt design: {report['cost']['runs']} runs (nothing launched)")
    for line in D.lines(report):
        print(line)
    if "--target-power" in flags:
        named = claims or [c for c, r in report["claims"].items() if "power" in r]
        if not named:
            fail("--target-power: name the claims to search for (--claims 1,3): the grid measures none of them")
        fam = family_models(grid) if any(D.REGISTRY[c].part == "family" for c in named) else None
        try:
            found = D.search(grid, runs, named, flags["--target-power"], flags.get("--max-hours", math.inf),
                             comps, sims, seed, rate, family_models=fam, **price)
        except ConfigError as e:
            fail(str(e))
        print(search_lines(found, named, flags["--target-power"], overrides))
        if "--write" in flags:
            if not found["found"]:
                fail(f"--write: no design within the cap reaches power {flags['--target-power']:g} for claims "
                     f"{','.join(map(str, named))}; nothing written")
            path = write_preset(flags["--write"], found, grid, runs, overrides, flags, argv, report)
            print(f"wrote {path}: python -m esopt.sweep -m +experiment={path.stem}")
    print(f"({time.time() - t0:.0f} s)")
    return 0


def write_preset(path, found: dict, grid, runs, overrides: list[str], flags: dict, argv: list[str], report) -> "Path":
    """The design ``found`` as a confirmatory preset at ``path``: the grid's own preset (its
    ``+experiment=``) as its base, the found design's grids with seeds the pilot never ran and
    (where the task has test draws) the next fresh test draw, and a header with the command, the
    design, its cost and power, the power per claim as ``sweep.design_power`` (``claims.register``
    records both when the sweep starts)."""
    import json
    from pathlib import Path

    from esopt.study.claims import design as D
    from esopt.study.claims.simulate import sweep_records

    path = Path(path)
    pilot = sweep_records(flags["--pilot"])
    first = 1 + max((int(r["seed"]) for r in pilot if r.get("seed") is not None), default=-1)
    rc0 = runs[0][1]
    draws = "test_draw" in rc0.task_spec.config
    draw = 1 + max([int((r.get("config") or {}).get("task", {}).get("test_draw") or 0) for r in pilot]
                   + [int(rc0.task_spec.config.get("test_draw") or 0)]) if draws else None
    base = [o.split("=", 1)[1] for o in overrides if o.startswith("+experiment=")]
    design, f = found["_design"], found.get("_family")
    ev = {"eval.problems": design.problems, "eval.samples": design.samples}
    grids = []
    if any(D.REGISTRY[c].part != "family" for c in found["power"]):
        grids.append({"model": grid.cell_model, "algo": ",".join(sorted(grid.cell_seeds)),
                      "seed": f"range({first},{first + design.seeds})", **ev})
    if f:
        grids.append({"algo": "es", "model": ",".join(f[0]), "pop": ",".join(map(str, f[2])),
                      "seed": f"range({first},{first + f[3]})", **ev})
    h = found["hours"]
    lines = ["# @package _global_",
             f"# Confirmatory (registered design): written by python -m esopt.design {' '.join(argv)}",
             f"# from the pilot {flags['--pilot']}: the cheapest design whose power >= {flags['--target-power']:g} "
             f"for claims {', '.join(map(str, found['power']))}: {found['design']}; seeds from {first} (none the pilot "
             "ran)" + (f", test draw {draw} (task.test_draw: a fresh test split)" if draws else "") + ".",
             f"# cost: {D.hours_text(h)} hours expected (GPU-hours for GPU runs); power "
             + ", ".join(f"claim {c} {p:.2f} ({found['generators'][c]})" for c, p in found["power"].items())
             + f" ({found['sims']} sims). Claims are registered into claims.json as the sweep starts.",
             "defaults:", *(f"  - {b}" for b in base), "  - _self_", "",
             f"sweep:\n  name: {path.stem}\n  design_power: {D.design_power_text({c: round(p, 2) for c, p in found['power'].items()})}   # registered"]
    if draws:
        lines.append(f"task:\n  test_draw: {draw}")
    lines.append("hydra:\n  sweeper:\n    params: null\n    grids:")
    lines += [f"      - {json.dumps({k: str(v) for k, v in g.items()})}" for g in grids]
    path.write_text("\n".join(lines) + "\n")
    return path


def search_lines(found: dict, claims: list[int], target: float, overrides: list[str]) -> str:
    from esopt.study.claims.design import hours_text

    cl = ",".join(map(str, claims))
    if found["found"]:
        keep = [o for o in overrides if o not in ("-m", "--multirun") and o.split("=", 1)[0].lstrip("+~") not in
                ("model", "algo", "seed", "pop", "eval.problems", "eval.samples", "iterations")]
        cmds = "\n".join(f"  python -m esopt.sweep -m {' '.join(keep + [o.removeprefix('-m ')])}"
                         for o in found["overrides"])
        return (f"search (claims {cl}, target {target:g}): cheapest design: {found['design']}; "
                f"{hours_text(found['hours'])} hours; power " + ", ".join(f"claim {c} {p:.2f} ({found['generators'][c]})"
                                                               for c, p in found["power"].items())
                + f" ({found['sims']} sims)\n{cmds}")
    b = found["best"]
    cap = "" if math.isinf(found["max_hours"]) else f" within {hours_text(found['max_hours'])} hours"
    best = (f"the best power reachable{cap}: {b['power']:.2f} ({b['design']}, {hours_text(b['hours'])} hours)"
            if b.get("design") else f"every design{cap} lacks data: {b['why']}" if b.get("why")
            else f"no candidate design fits{cap}")
    return f"search (claims {cl}, target {target:g}): nothing{cap} reaches power {target:g}; {best}"


if __name__ == "__main__":
    sys.exit(main())
