"""esopt.study.claims.design: a grid's power per claim through the claim rules, what a grid lacks in the
rules' words, the cheapest design that decides (re-evaluated from its own command line), a
pilot's components and their bounds, the GPU throughput table and the presets' design blocks."""

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, SHARED_DATA, local_data_overrides, write_planted_sweep
from hydra.core.global_hydra import GlobalHydra

from esopt.core.errors import ConfigError
from esopt.core.metrics import wilson_interval
from esopt.study.claims import design as D
from esopt.study.claims.simulate import MEASURED, Components, Design

SIMS = 20  # few, seeded: the tests check the machinery, docs/results/design.md the numbers


def composed(*overrides):
    """The runs esopt.sweep -m would compose for these overrides (the design's own path)."""
    from esopt.cli.design import compose

    GlobalHydra.instance().clear()
    try:
        return compose(list(overrides))
    finally:
        GlobalHydra.instance().clear()


def grid(**kw):
    base = dict(cell_model="m", cell_seeds={"es": 4, "grpo": 4}, problems=200, samples=32, split_rows=500,
                iterations=30, ood=True, sparsity=((0.22,), ("global", "random", "equal_norm")),
                es_temperature=1.0, es_samples=4, grpo_mid=True)
    return D.Grid(**{**base, **kw})


def test_wilson_interval():
    lo, hi = wilson_interval(11, 200)
    assert (round(lo, 3), round(hi, 3)) == (0.031, 0.096)
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("kw, cid, words", [
    ({"ood": False}, 2, "eval.ood_task"),
    ({"sparsity": ()}, 5, "analysis=[sparsity]"),
    ({"sparsity": ((0.22,), ("global", "random"))}, 5, "equal_norm"),
    ({"cell_seeds": {"es": 2, "grpo": 4}}, 1, "fewer than 3 seeds"),
    ({"samples": 16}, 3, "Pass@8 needs >= 32 samples"),
    ({"cell_seeds": {"es": 4, "grpo": 4}}, 6, "no es_grpo or grpo_es runs"),
    ({}, 8, "eval.probes"),                                   # the rivals: what each needs, in the rules' words
    ({"probes": True}, 9, "analysis=[drift]"),
    ({"cell_seeds": {"es": 4, "grpo": 4, "es_anchor": 4}}, 10, "eval.probes"),
    ({}, 11, "esopt.analyze connectivity"),
])
def test_what_a_grid_lacks_is_said_in_the_rules_words(kw, cid, words):
    g = grid(**kw)
    gap = D.data_gap(cid, D.design_of(g), MEASURED, D.shaper(g))
    assert gap is not None and words in gap


def test_greedy_members_and_too_few_sizes_leave_the_family_claims_undecidable():
    fam = {f"s{j}": {"params": 1e5 * 3 ** j, "pops": {8, 16}, "seeds": 3} for j in range(3)}
    g = grid(family=fam, es_temperature=0.0, es_samples=1)
    d, c = D.design_of(g), D.components_for(g)
    assert c.params == (1e5, 9e5)                         # the trend's range is the grid's
    assert "greedily" in D.data_gap(4, d, c, D.shaper(g))
    assert "3 model size(s)" in D.data_gap(7, d, c, D.shaper(g))
    assert D.bears_on(g) == [1, 2, 3, 4, 5, 6, 7]
    assert D.bears_on(grid(cell_seeds={"es": 3})) == [1, 5]
    # the rivals: where the grid measures what they read (probes, drift, connectivity, anchored ES)
    assert D.bears_on(grid(probes=True, update_stats=True, connectivity=True)) == [1, 2, 3, 5, 6, 8, 9, 11]
    assert 10 in D.bears_on(grid(cell_seeds={"es": 3, "es_anchor": 3}))


def test_the_rivals_data_are_there_when_the_grid_makes_them():
    """Probes, drift.json and connectivity.json, and the anchored ES arm: with them the rivals'
    rules measure (no gap); the shaper drops each where the grid does not ask for it."""
    g = grid(cell_seeds={"es": 4, "grpo": 4, "es_anchor": 4}, probes=True, update_stats=True, connectivity=True)
    level = replace(MEASURED, grpo_gain=MEASURED.es_gain)   # claims 8 and 9 read where the gains overlap
    for cid in (8, 9, 10, 11):
        assert D.data_gap(cid, D.design_of(g), level, D.shaper(g)) is None, cid
    for cid in (8, 9):                                       # the measured gains do not: the rule says so
        assert "gains do not overlap" in D.data_gap(cid, D.design_of(g), MEASURED, D.shaper(g)), cid
    from esopt.study.claims.simulate import Design, simulate

    recs = simulate(Design(seeds=4, problems=50), rng=np.random.default_rng(0), parts=("cell",))
    bare = D.shaper(grid())(recs)
    assert not any(r.get("anchor_decay") for r in bare)
    assert not any(k in r for r in bare for k in ("final_probe_pass1", "update_l2", "connectivity_barrier"))


def test_power_rises_with_seeds_and_false_yes_stays_low():
    g = grid()
    low = D.claim_power(1, replace_seeds(g, 3), Components(), D.shaper(g), SIMS, gens=["current"])
    high = D.claim_power(1, replace_seeds(g, 12), Components(), D.shaper(grid(cell_seeds={"es": 12})), SIMS,
                         gens=["current"])
    assert high["power"] > low["power"]
    assert high["false_yes"] <= 0.1 and high["power_ci"][0] <= high["power"] <= high["power_ci"][1]


def replace_seeds(g, r):
    return replace(D.design_of(g), seeds=r)


def test_power_is_the_least_favourable_generators():
    g = grid()
    p = D.claim_power(2, D.design_of(g), MEASURED, D.shaper(g), 10, false_yes=False)
    assert set(p["by_gen"]) == {"current", *D.REGISTRY[2].generators} and len(p["by_gen"]) >= 5
    assert p["power"] == min(p["by_gen"].values()) == p["by_gen"][p["power_gen"]]


def test_search_returns_a_design_whose_own_command_line_meets_the_target():
    """The search's design, composed again from the overrides it prints, has power >= the
    target at the search's sims and seed, and a fresh seed does not contradict it."""
    runs = composed("model=tiny-s", "algo=es", "seed=0,1,2")
    g = D.grid_of(runs)
    found = D.search(g, runs, [1], 0.8, 10.0, Components(), sims=SIMS, seeds=(3, 6, 12), problems=(200, 500),
                     samples=(32, 128))
    assert found["found"], found
    assert len(found["overrides"]) == 1 and "seed=range(" in found["overrides"][0]
    again = composed(*found["overrides"][0].split())
    g2 = D.grid_of(again)
    d2 = D.design_of(g2)
    assert (d2.seeds, d2.problems, d2.samples) == (found["_design"].seeds, found["_design"].problems,
                                                   found["_design"].samples)
    assert found["hours"] == pytest.approx(D.cost(again)["cpu_hours"], rel=1e-6)
    p = D.claim_power(1, d2, Components(), D.shaper(g2), SIMS, seed=0, false_yes=False)
    assert p["power"] >= 0.8
    fresh = D.claim_power(1, d2, Components(), D.shaper(g2), SIMS, seed=1, false_yes=False)
    assert fresh["power_ci"][1] >= 0.8


def test_search_within_a_small_cap_says_nothing_reaches_it_and_the_best_power():
    runs = composed("model=tiny-s", "algo=es", "seed=0,1,2")
    g = D.grid_of(runs)
    found = D.search(g, runs, [1], 0.8, 0.1, MEASURED, sims=10, seeds=(3, 4), problems=(200,), samples=(32,))
    assert not found["found"] and 0 <= found["best"]["power"] < 0.8 and found["best"]["hours"] <= 0.1
    none = D.search(g, runs, [1], 0.8, 1e-9, MEASURED, sims=10, seeds=(3,), problems=(200,), samples=(32,))
    assert not none["found"] and "design" not in none["best"]


def test_pilot_components_have_bounds_around_the_point(tmp_path):
    write_planted_sweep(tmp_path / "pilot", seeds=(0, 1, 2, 3), problems=100, noise=0.01, rng_seed=3)
    point, pess, opt, how = D.pilot_components(tmp_path / "pilot", boot=10)
    assert point.sigma_seed > 0 and "bounds" in how and "sigma_seed" in how
    for k in ("sigma_seed", "sigma_problem_algo", "sigma_size"):
        assert getattr(opt, k) <= getattr(pess, k)
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    with pytest.raises(ConfigError):
        D.pilot_components(tmp_path / "empty")


def test_gpu_throughput_table_is_the_codes():
    from esopt.models import REGISTRY_PARAMS
    from esopt.runtime.budget import THROUGHPUT, gpu_rate

    text = (REPO / "docs" / "design" / "gpu_throughput.md").read_text()
    rows = re.findall(r"^\| (\S+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|$", text, re.M)
    assert {r[0] for r in rows} == set(REGISTRY_PARAMS)
    for name, params, *rates in rows:
        assert int(params.replace(",", "")) == REGISTRY_PARAMS[name]
        want = [gpu_rate(e, REGISTRY_PARAMS[name], g)[0] for e, g in (("vllm", "H100"), ("vllm", "H200"), ("hf", "H100"))]
        assert [int(r.replace(",", "")) for r in rates] == [round(w) for w in want]
    for row in THROUGHPUT:   # every published row is in the doc, with a link
        assert f"| {row.engine} | {row.params:,.0f} | {row.device} | {row.tokens_per_s:,.0f} |" in text
        assert "https://" in row.source


def _header(preset):
    text = (REPO / "sweeps" / f"{preset}.yaml").read_text()
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(D.HEADER + " ("))
    block = []
    for ln in lines[start + 1:]:
        if not ln.startswith("#   "):
            break
        block.append(ln[4:])
    return lines[start], block


GPU_PRESETS = sorted(p.stem for p in (REPO / "sweeps").glob("*_gpu.yaml"))


@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_gpu_presets_carry_their_design(preset, tmp_path):
    """The design block in each *_gpu preset's header (bench_design.py --write-presets, 100 sims)
    matches esopt.design now: the runs, token bound and GPU-hours exactly, what each claim lacks
    exactly, each power's Wilson 99% interval overlapping a seeded 20-sim recomputation's."""
    if not (SHARED_DATA / "gsm8k" / "test.jsonl").exists() and "countdown" not in preset:
        pytest.skip("the full GSM8K (../shared/data/gsm8k) sets these presets' problem counts")
    from esopt.engines import vllm

    head, block = _header(preset)
    sims = int(re.search(r"; (\d+) sims", head).group(1))
    from hydra import compose, initialize_config_dir

    from esopt.cli import configs

    configs.register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        base = compose(config_name="config", overrides=[f"+experiment={preset}"])
    data = local_data_overrides(base, tmp_path)
    runs = composed(f"+experiment={preset}", *data, *([] if vllm.available() else ["engine=hf"]))
    g = D.grid_of(runs)
    c = D.cost(runs, engine=str(base.engine.name))   # priced at the preset's engine (composed with hf here)
    assert block[0] == D.header_cost(c)
    command = re.match(r"# design \((python -m esopt\.design \+experiment=\S+ [^;]*);", head).group(1)
    source = re.search(r" sims, (\w+) components;", head).group(1)
    assert D.header_lines({"cost": c, "sims": sims, "source": source, "claims": {}}, command)[:2] == \
        [head, "#   " + block[0]]   # the benchmark's formatter wrote this header line
    claimed = {int(m.group(1)): m.group(2) for ln in block[2:] if (m := re.match(r"claim (\d+): (.*)", ln))}
    decided = []
    for cid, text in claimed.items():   # under unknown seed spreads: where it decides; else the point value
        m = re.search(r"decidable while the seed spread is <= ([\d.]+)", text)
        if m or ("seed spread" not in text and "), decidable" in text):
            decided.append(f"claim {cid}" + (f" while the seed spread is <= {m.group(1)}" if m else ""))
    assert block[1] == ("decides: " + "; ".join(decided) if decided else
                        "decides no claim under these components: a pilot or a demo")
    first = (REPO / "sweeps" / f"{preset}.yaml").read_text().splitlines()[1]
    assert bool(decided) or first.startswith(("# Pilot", "# Demo")), first   # one that decides nothing says so
    assert sorted(claimed) == D.bears_on(g)
    powers = {cid: float(m.group(1)) for cid, text in claimed.items() if (m := re.match(r"power ([\d.]+) ", text))}
    assert all((rc.sweep.design_power or {}) == powers for _, rc in runs), (powers, runs[0][1].sweep.design_power)
    from esopt.study.claims.component_sets import component_set

    named = component_set(re.search(r"--components (\S+?);", head).group(1))[0]   # the header's component set
    d, comps, shape = D.design_of(g), D.components_for(g, named), D.shaper(g)
    for cid, text in claimed.items():
        gap = D.data_gap(cid, d, comps, shape)
        if text.startswith("cannot decide: "):
            assert gap is not None and text == f"cannot decide: {gap.split('; ')[0]}"
            continue
        assert gap is None
        m = re.match(r"power ([\d.]+) \[[\d.]+, [\d.]+\] \((\w+)\), (decidable|cannot decide)", text)
        power = float(m.group(1))
        k = round(power * sims)
        assert (m.group(3) == "decidable") == (power >= D.TARGET)
        now = D.claim_power(cid, d, comps, shape, SIMS, gens=[m.group(2)], false_yes=False)
        lo, hi = wilson_interval(round(now["power"] * SIMS), SIMS, level=0.99)
        lo0, hi0 = wilson_interval(k, sims, level=0.99)
        assert lo <= hi0 and lo0 <= hi, (cid, power, now["power"])   # the two 99% intervals overlap


def test_grid_of_reads_the_family_and_es_members_as_composed():
    runs = composed("model=tiny-s,tiny-m", "pop=4,8", "seed=0,1,2", "es.temperature=1.0", "es.samples=4")
    g = D.grid_of(runs)
    assert set(g.family) == {"tiny-s", "tiny-m"} and g.family_seeds == 3 and g.family_pops == (4, 8)
    assert (g.es_temperature, g.es_samples) == (1.0, 4)
    d = D.design_of(g)
    assert (d.sizes, d.pops, d.family_seeds) == (2, (4, 8), 3)
    gap = D.data_gap(4, d, D.components_for(g), D.shaper(g))
    assert gap is None or "greedily" not in gap
    assert "2 model size(s)" in D.data_gap(7, d, D.components_for(g), D.shaper(g))


def test_a_written_confirmatory_preset_recomposes_to_the_design_found(tmp_path):
    """``esopt.design --write``: the found design written as a preset (fresh seeds after the pilot's,
    its own sweep name), composed again through Hydra, is the same design at the same cost."""
    from esopt.cli.design import write_preset
    from helpers import write_planted_sweep

    pilot = tmp_path / "pilot"
    write_planted_sweep(pilot, seeds=(0, 1, 2), problems=20)
    runs = composed("model=tiny-s", "algo=es", "seed=0,1,2")
    g = D.grid_of(runs)
    found = D.search(g, runs, [1], 0.8, 10.0, Components(), sims=SIMS, seeds=(3, 6, 12), problems=(200, 500),
                     samples=(32, 128))
    assert found["found"], found
    (tmp_path / "experiment").mkdir()
    path = write_preset(tmp_path / "experiment" / "confirm_t.yaml", found, g, runs, [],
                        {"--pilot": str(pilot), "--target-power": 0.8}, ["..."], None)
    text = path.read_text()
    assert text.startswith("# @package _global_\n# Confirmatory (registered design)") and "seeds from 3" in text
    again = composed(f"hydra.searchpath=[file://{tmp_path}]", "+experiment=confirm_t")
    d2 = D.design_of(D.grid_of(again))
    d = found["_design"]
    assert (d2.seeds, d2.problems, d2.samples) == (d.seeds, d.problems, d.samples)
    assert sorted({rc.seed for _, rc in again}) == list(range(3, 3 + d.seeds))          # none the pilot ran
    assert {rc.sweep.name for _, rc in again} == {"confirm_t"}
    assert found["hours"] == pytest.approx(D.cost(again)["cpu_hours"], rel=1e-6)
    want = {c: round(pw, 2) for c, pw in found["power"].items()}
    assert all(rc.sweep.design_power == want for _, rc in again) and want[1] >= 0.8   # the power it was written with
    from esopt.study import claims as C   # registered as the sweep starts: the report's "planned power"
    reg = C.register(tmp_path / "confirm_t", again)
    assert reg["design_power"] == {str(c): pw for c, pw in want.items()}


def test_one_cell_picker_for_composed_runs_and_records():
    """The grid (runs composed before any ran) and the verdicts (their records) pick the
    comparison cell with one function (claims.cell_model): most of the cell's algorithms, then
    most runs of them; a random_search run is not one of the cell's and does not count."""
    from esopt.study.claims import cell_model, select_cell

    runs = (composed("model=tiny-m,tiny-s", "algo=es,grpo", "seed=0") + composed("model=tiny-s", "algo=es", "seed=1,2")
            + composed("model=tiny-m", "algo=random_search", "seed=0,1,2,3"))
    records = [{"run_id": rid, "model": p.model["name"], "algo": p.algo, "seed": p.seed, "pop": p.pop,
                "iterations": p.iterations, "status": "completed"} for rid, p in runs]
    assert D.grid_of(runs).cell_model == select_cell(records)["model"] == "tiny-s"
    assert cell_model([("b", "es"), ("a", "es")]) == "a" and cell_model([]) is None
    assert cell_model([("b", "es"), ("b", "grpo"), ("a", "es"), ("a", "es"), ("a", "es")]) == "b"
