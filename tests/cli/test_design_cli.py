"""python -m esopt.design: composes the grid as esopt.sweep does and launches nothing; the headline
command is told it cannot decide the trend (also in the sweep's dry run); bad input is one line
and exit 2; a pilot's components come with their bounds."""

import json
import pytest
from helpers import cli, run_cli, write_planted_sweep

HEADLINE = ("-m", "model=qwen1.5b,qwen7b", "pop=8,16,32")


def test_headline_grid_cannot_decide_the_trend_and_nothing_is_launched(tmp_path):
    r = cli("esopt.design", *HEADLINE, f"sweep.root={tmp_path}", "--sims", "5")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "esopt design: 6 runs (nothing launched)" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("claim 7 (pop_vs_size)"))
    assert "cannot decide: 2 model size(s) with >= 2 populations of ES runs (need >= 5)" in line
    assert "sizes x 3 seeds: power" in line            # what would (or that nothing within 12 sizes would)
    assert "claim 1 (es_raises_pass1): cannot decide: fewer than 3 seeds" in out
    # hf's rate: a measured row of docs/results/gpu.md where one exists, else the published one
    assert "GPU-hours (H100;" in out and "expected" in out
    assert "measured: gpu.md" in out or "es-at-scale's original HF code" in out
    assert "components (tiny family" in out
    assert not any(tmp_path.iterdir())                # no sweep folder, no run


def test_readme_example_is_what_the_plan_prints(tmp_path):
    from helpers import REPO

    text = (REPO / "README.md").read_text()
    after = text.split("headline grid above (", 1)[1]
    hours, rest = after.split(" GPU-hours):\n", 1)
    shown = rest.splitlines()[0].strip("`").removesuffix("...").rstrip()
    r = cli("esopt.design", *HEADLINE, f"sweep.root={tmp_path}", "--sims", "3")
    assert any(ln.startswith(shown) for ln in r.stdout.splitlines()), shown
    assert f"; {hours} GPU-hours (H100;" in r.stdout


def test_design_composes_the_sweeps_run_ids(tmp_path):
    """The same grid, the same run ids as the sweep's dry run (one composition path)."""
    from esopt.cli.design import compose
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        ids = {rid for rid, _ in compose([*HEADLINE, f"sweep.root={tmp_path}"])}
    finally:
        GlobalHydra.instance().clear()
    r = cli("esopt.sweep", *HEADLINE, f"sweep.root={tmp_path}", "sweep.dry_run=true")
    shown = {ln.split()[1] for ln in r.stdout.splitlines() if ln.strip()[:1].isdigit() and len(ln.split()) > 2}
    assert len(ids) == 6 and ids == shown


def test_sweep_dry_run_prints_the_trend_verdict(tmp_path):
    r = cli("esopt.sweep", *HEADLINE, f"sweep.root={tmp_path}", "sweep.dry_run=true")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("design: claim 7"))
    assert "cannot decide: 2 model size(s)" in line and "sizes x 3 seeds: power" in line
    r = cli("esopt.sweep", "-m", "model=tiny-xs,tiny-s,tiny-m,tiny-l,tiny-xl", "pop=4,8", "seed=0,1,2",
            f"sweep.root={tmp_path}", "sweep.dry_run=true")      # enough sizes: the verdict is power's
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("design: claim 7"))
    assert "cannot decide: power 0.0" in line and "< 0.8" in line and "12 sizes x 3 seeds: power" in line
    r = cli("esopt.sweep", "-m", "model=tiny-s", "pop=8,16", f"sweep.root={tmp_path}", "sweep.dry_run=true")
    assert r.returncode == 0 and "design: claim 7" not in r.stdout    # one size: no trend to judge


def test_target_power_search_prints_the_command_or_the_best_reachable(tmp_path):
    r = cli("esopt.design", "-m", "model=tiny-s", "algo=es", "seed=0,1,2", f"sweep.root={tmp_path}", "--sims", "5",
            "--target-power", "0.8", "--claims", "1", "--max-hours", "0.05")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("search (claims 1, target 0.8)"))
    assert ("cheapest design" in line and "python -m esopt.sweep" in r.stdout) or \
        "nothing within 0 hours reaches power 0.8; the best power reachable" in line or "nothing within" in line


def test_pilot_components_and_their_bounds(tmp_path):
    pilot = tmp_path / "pilot"
    write_planted_sweep(pilot, seeds=(0, 1, 2), problems=60, noise=0.01)
    r = cli("esopt.design", "-m", "model=tiny-s", "algo=es,grpo", "seed=0,1,2", f"sweep.root={tmp_path}",
            "--pilot", str(pilot), "--claims", "1", "--sims", "3")
    assert r.returncode == 0, r.stderr
    assert "# component sigma_seed: within-algorithm spread" in r.stdout
    assert "# component bounds: 80% bootstrap bounds" in r.stdout
    assumed = next(ln for ln in r.stdout.splitlines() if ln.startswith("# component assumed: "))
    assert "probe_base" in assumed and "(not measured by this pilot: tiny family's values)" in assumed
    assert f"components (pilot {pilot})" in r.stdout
    assert "power at the components' bounds" in r.stdout


@pytest.mark.parametrize("args, words", [
    (("-m", "model=tiny-s", "--claims", "12"), "unknown claim 12 (known: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)"),
    (("-m", "model=tiny-s", "pop=8,16", "--claims", "7"), "claim 7 compares model sizes: the grid's ES runs have 1"),
    (("-m", "model=tiny-s", "--target-power", "0.8", "--max-hours", "-5"), "--max-hours must be > 0"),
    (("-m", "model=tiny-s", "design.tokens_per_s=-3"), "design.tokens_per_s must be a positive number"),
    (("-m", "model=tiny-s", "design.tokens_per_s.tiny-s=nan"), "design.tokens_per_s.tiny-s must be a positive number"),
    (("-m", "model=tiny-s", "design.gpu=V100"), "design.gpu: unknown GPU kind 'V100' (known: H100, H200, A100)"),
    (("-m", "model=tiny-s", "design.engine=tgi"), "design.engine: unknown engine 'tgi'"),
    (("-m", "model=tiny-s", "--components", "papers"), "--components: unknown component set 'papers' (known: tiny, "),
    (("-m", "model=tiny-s", "--target-power", "0.8", "--max-gpu-hours", "0"), "--max-gpu-hours must be > 0"),
    (("-m", "model=tiny-s", "--target-power", "0.8", "--max-gpu-hours", "nan"), "--max-gpu-hours must be > 0"),
    (("-m", "model=tiny-s", "--target-power", "0.8", "--write", "x.yaml"), "--write writes the design a pilot's"),
    (("-m", "model=tiny-s", "--target-power", "1.5"), "--target-power must be in (0, 1)"),
    (("-m", "model=tiny-s", "design.speed=3"), "unknown key 'design.speed'"),
    (("-m", "model=tiny-s", "popp=8"), "unknown key 'popp'"),
    (("-m", "model=tiny-s", "hydra/sweeper=optuna"), "the optuna sweeper picks its runs as it goes"),
])
def test_bad_input_is_one_line_and_exit_2(args, words, tmp_path):
    r = cli("esopt.design", *args, f"sweep.root={tmp_path}")
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("esopt: error: ") and words in lines[0], r.stderr


@pytest.mark.parametrize("make", ["missing", "empty", "unfinished", "unsolved", "unsolved-literal"])
def test_pilot_without_finished_runs_is_refused(make, tmp_path):
    """A pilot with nothing to estimate from is one line. "unsolved": every problem unsolved by its
    base model (unsolvable = 1) ended in a ZeroDivisionError in simulate.py, and --print-components
    printed Components(unsolvable=1.0)."""
    pilot = tmp_path / "pilot"
    if make != "missing":
        (pilot / "runs").mkdir(parents=True)
    if make != "missing" and make != "empty":
        write_planted_sweep(pilot, seeds=(0,), problems=20)
    for s in (pilot / "runs").glob("*/summary.json"):
        if make == "unfinished":
            s.write_text(s.read_text().replace('"status": "completed"', '"status": "failed"'))
        else:
            d = json.loads(s.read_text())
            for ev in (d.get("base"), d.get("final")):
                ev["correct_counts"] = [0] * len(ev["correct_counts"])
            s.write_text(json.dumps(d))
    literal = ("--print-components",) if make.endswith("literal") else ("-m", "model=tiny-s", f"sweep.root={tmp_path / 'r'}")
    r = cli("esopt.design", *literal, "--pilot", str(pilot))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"esopt: error: --pilot {pilot}"), r.stderr
    if make.startswith("unsolved"):
        assert "solved none of its 20 problems in 32 samples" in lines[0] and "Components(" not in r.stdout


def test_exit_code_of_a_real_process(tmp_path):
    """The process itself is the subject: its exit status on bad input, as a shell sees it."""
    r = run_cli("esopt.design", "-m", "model=tiny-s", "--claims", "0", f"sweep.root={tmp_path}")
    assert r.returncode == 2 and r.stderr.startswith("esopt: error: unknown claim 0")


def test_the_old_command_and_keys_are_read_for_a_release_with_one_warning_each(tmp_path):
    """``python -m esopt.plan`` and ``plan.*`` (the names before esopt.design): the same answer,
    one ``esopt: warning:`` line for the command and one for the keys."""
    grid = (*HEADLINE, f"sweep.root={tmp_path}", "--claims", "1", "--sims", "2")
    new = cli("esopt.design", *grid, "design.tokens_per_s=1e6", "design.gpu=H200")
    old = cli("esopt.plan", *grid, "plan.tokens_per_s=1e6", "plan.gpu=H200")
    assert new.returncode == old.returncode == 0, old.stderr
    assert "warning" not in new.stderr
    assert [ln for ln in old.stderr.splitlines() if ln.startswith("esopt: warning:")] == [
        "esopt: warning: python -m esopt.plan is deprecated and goes in a later release: it is now python -m esopt.design",
        "esopt: warning: plan.tokens_per_s is deprecated and goes in a later release: it is design.tokens_per_s now"]
    assert "rate on H200 (hf), tokens/s: qwen1.5b 1,000,000, qwen7b 1,000,000; design.tokens_per_s" in new.stdout
    assert old.stdout.splitlines()[:-1] == new.stdout.splitlines()[:-1]   # the last line: the seconds it took


def test_tokens_per_s_override_prices_the_grid(tmp_path):
    r = cli("esopt.design", *HEADLINE, f"sweep.root={tmp_path}", "--claims", "1", "--sims", "2",
            "design.tokens_per_s=1e6")
    assert r.returncode == 0, r.stderr
    # hf costs the bound: 382.4M / 1e6 / 3600 = 0.106
    assert "cost: 6 runs, <= 382,402,560 generated tokens (+ 0 in analyses), about 256,209,712 expected; " \
           "0.106 GPU-hours (H100; 0.106 at the bound)" in r.stdout
    assert "rate on H100 (hf), tokens/s: qwen1.5b 1,000,000, qwen7b 1,000,000; design.tokens_per_s" in r.stdout
    r = cli("esopt.design", *HEADLINE, f"sweep.root={tmp_path}", "--claims", "1", "--sims", "2",
            "design.tokens_per_s=1e6", "design.tokens_per_s.qwen7b=5e5", "design.engine=vllm")   # per model size
    assert "rate on H100 (vllm), tokens/s: qwen1.5b 1,000,000, qwen7b 500,000; design.tokens_per_s" in r.stdout
    assert "about 256,209,712 expected; 0.107 GPU-hours (H100; 0.159 at the bound)" in r.stdout   # 0.67 x (191.2M / 1e6 + 191.2M / 5e5) / 3600


def test_a_pilot_run_whose_summary_has_another_shape_is_left_out(tmp_path):
    """A pilot's summary.json edited into another shape (its counts a dict, its final evaluation
    a string, its config a list) gave a traceback; such a run's lists are left unread, so the
    run is not one of the pilot's finished runs, and the others are estimated from."""
    pilot = tmp_path / "pilot"
    write_planted_sweep(pilot, seeds=(0, 1), problems=20)
    summaries = sorted((pilot / "runs").glob("*/summary.json"))
    spoil = [lambda d: d["final"].update(correct_counts={"a": 1}), lambda d: d.update(final="x"),
             lambda d: d["final"].update(correct_counts=[1, True])]
    for s, f in zip([p for p in summaries if p.parent.name.startswith(("grpo-", "es_grpo-"))], spoil):
        d = json.loads(s.read_text())
        f(d)
        s.write_text(json.dumps(d))
    r = cli("esopt.design", "--pilot", str(pilot), "--print-components")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first == f"# components of {pilot} ({len(summaries) - len(spoil)} finished runs; estimate_components)", first


def test_write_refuses_an_existing_file_and_a_thin_pilot(tmp_path):
    """--write: an existing preset is not overwritten without --force, and a pilot with fewer than
    two finished runs of an algorithm cannot set a seed spread: one line, exit 2, nothing written."""
    pilot = tmp_path / "pilot"
    write_planted_sweep(pilot, seeds=(0,), problems=20)
    target = tmp_path / "confirm.yaml"
    target.write_text("# mine\n")
    args = ("-m", "model=tiny-s", "algo=es,grpo", f"sweep.root={tmp_path / 'r'}", "--pilot", str(pilot),
            "--target-power", "0.8", "--max-gpu-hours", "5", "--write")
    r = cli("esopt.design", *args, str(target))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and lines == [f"esopt: error: --write: {target} exists (--force overwrites it)"]
    assert target.read_text() == "# mine\n"
    fresh = tmp_path / "fresh.yaml"
    r = cli("esopt.design", *args, str(fresh))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("esopt: note")]
    assert r.returncode == 2 and len(lines) == 1 and "finished run(s); the components need >= 2 per algorithm" in lines[0]
    assert not fresh.exists()
