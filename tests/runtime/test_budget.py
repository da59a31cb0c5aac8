"""What a run will cost, said before it starts (issue 44): the disk of its weights and
checkpoints from the model's parameter count and dtype, against the free space, and a warning
when its generated tokens at the engine's measured CPU rate would take over an hour."""

import sys

import pytest
from hydra.core.global_hydra import GlobalHydra

from helpers import REPO, run_config

from esopt.runtime import budget

GSM8K = ["task=gsm8k", f"task.source={REPO / 'tests' / 'data' / 'gsm8k'}", "task.n_heldout=10"]
TINY_2XL = 3_043_840  # parameters of the shipped tiny-2xl


def test_disk_of_a_run_from_its_parameters_dtype_and_algorithm(tmp_path):
    w = TINY_2XL * 4  # float32
    root = f"sweep.root={tmp_path}"
    es, grpo, none = (run_config("model=tiny-2xl", f"algo={a}", root, check_data=False) for a in ("es", "grpo", "none"))
    assert budget.run_disk(es) == (w, 2 * w)        # model/ + one weights checkpoint, twice while swapping
    assert budget.run_disk(grpo) == (w, 6 * w)      # + AdamW's two moments
    assert budget.run_disk(none) == (0, 0)
    assert budget.run_disk(run_config("model=tiny-2xl", "algo=es", "sweep.save_model=false", root,
                                      check_data=False)) == (0, 2 * w)
    seq = run_config("model=tiny-2xl", "algo=grpo_es", root, check_data=False)
    assert budget.run_disk(seq) == (w, 8 * w)
    need = budget.sweep_disk([es, grpo])
    assert need["peak"] == 2 * w + 6 * w and need["checkpoints"] == 6 * w and not need["keep_checkpoints"]
    assert budget.sweep_disk([es, grpo], at_once=2)["peak"] == 2 * w + 8 * w
    kept = [run_config("model=tiny-2xl", f"algo={a}", "sweep.keep_checkpoints=true", root, check_data=False)
            for a in ("es", "grpo")]
    # kept: every scheduled checkpoint (30 iterations, one every 10: 3) and one more being written
    assert [budget.run_disk(k)[1] for k in kept] == [(3 + 1) * w, (3 + 1) * 3 * w]
    assert budget.sweep_disk(kept)["peak"] == 2 * w + 4 * w + 12 * w
    seq_kept = run_config("model=tiny-2xl", "algo=grpo_es", "sweep.keep_checkpoints=true", root, check_data=False)
    assert budget.run_disk(seq_kept)[1] == (2 * 3 + 2 * 1 + 4) * w      # GRPO's 2 of 15 steps, ES's 2 of 15
    qwen = run_config("model=qwen0.5b", "algo=es", root, *GSM8K, check_data=False)
    assert budget.run_disk(qwen) == (494_032_768 * 2, 494_032_768 * 4)  # bfloat16, before any download

    assert budget.disk_warning(need, tmp_path) is None
    free, _ = budget.free_bytes(tmp_path / "not" / "yet")
    line = budget.disk_warning({**need, "peak": free + 10**12}, tmp_path / "not" / "yet")
    assert line.startswith(f"this sweep needs about {budget.size_text(free + 10**12)} on disk") and str(tmp_path) in line
    assert f"has {budget.size_text(free)} free" in line


def test_a_run_a_cpu_cannot_finish_in_an_hour_is_warned_about(tmp_path):
    root = f"sweep.root={tmp_path}"
    rc = run_config("model=qwen0.5b", "algo=none", "engine=hf", "engine.device=cpu", "eval.problems=10",
                    root, *GSM8K)
    tokens = budget.estimate_tokens(rc)
    assert tokens == 10 * 33 * 2048
    rate = 83.4 * 134.5e6 / 494_032_768        # docs/results/smollm2.md's rate, scaled by parameters
    assert budget.cpu_seconds(rc, tokens) == pytest.approx(tokens / rate)
    line = budget.cpu_time_warning(rc, tokens)
    assert line.startswith(f"this run may take about {tokens / rate / 3600:.1f} hours on this CPU: up to 675,840 ")
    for key in ("eval.problems=10", "eval.samples=32", "eval.max_new_tokens=2048"):
        assert key in line
    small = run_config("model=qwen0.5b", "algo=none", "engine=hf", "engine.device=cpu", "eval.problems=2",
                       "eval.samples=1", "eval.max_new_tokens=64", root, *GSM8K)
    assert budget.cpu_time_warning(small, budget.estimate_tokens(small)) is None
    from helpers import compose

    from esopt.runtime.validate import validate

    gpu = validate(compose("model=qwen0.5b", "algo=none", "engine=hf", "engine.device=cuda", root, *GSM8K),
                   check_data=False, cuda=True)  # sent to a Slurm GPU job, as the sweeper validates it
    assert budget.cpu_time_warning(gpu, tokens) is None


def test_the_dry_run_states_tokens_and_disk(tmp_path, monkeypatch, capsys):
    from esopt.cli import sweep

    monkeypatch.setattr(sys, "argv", ["esopt.sweep", "model=qwen0.5b", "algo=grpo", "engine=hf",
                                      "engine.device=cpu", "sweep.dry_run=true", f"sweep.root={tmp_path}", *GSM8K])
    GlobalHydra.instance().clear()
    try:
        sweep.main()
    finally:
        GlobalHydra.instance().clear()
    out, err = capsys.readouterr()
    assert "max generated tokens (upper bound):" in out
    assert ("per run up to 1.98 GB of trained weights (model/) and 11.9 GB of resume checkpoint while it runs; "
            "1 run(s) need about 13.8 GB at the peak") in out  # bf16-loaded, trained (and kept) as fp32 masters
    assert err.count("esopt: warning: this run may take about") == 1


def test_a_sweep_states_its_disk_and_warns_once_for_its_longest_cpu_run(tmp_path, monkeypatch, capsys):
    """The multirun dry run: the disk line for the grid and one CPU-time warning, for the
    largest model's run, counting the others."""
    from esopt.cli import sweep

    monkeypatch.setattr(sys, "argv", ["esopt.sweep", "-m", "model=qwen0.5b,qwen1.5b", "algo=es", "engine=hf",
                                      "engine.device=cpu", "sweep.dry_run=true", f"sweep.root={tmp_path}", *GSM8K])
    GlobalHydra.instance().clear()
    try:
        sweep.main()
    finally:
        GlobalHydra.instance().clear()
    out, err = capsys.readouterr()
    w05, w15 = 494_032_768 * 2, 1_543_714_304 * 2  # bfloat16
    peak = (w05 + w15 + 2 * w15) / 1e9             # both model/ + the larger checkpoint, twice while swapping
    assert f"2 run(s) need about {peak:.3g} GB at the peak" in out
    big = run_config("model=qwen1.5b", "algo=es", "engine=hf", "engine.device=cpu", f"sweep.root={tmp_path}",
                     *GSM8K, check_data=False)
    from esopt.runtime.validate import run_id

    warnings = [x for x in err.splitlines() if x.startswith("esopt: warning: this run may take")]
    assert len(warnings) == 1 and warnings[0].endswith(f"(2 of 2 runs over an hour; the longest, run {run_id(big)})")
    assert "1544M parameters" in warnings[0]


def test_grpo_disk_counts_its_fp32_masters(tmp_path):
    root = f"sweep.root={tmp_path}"
    bf16 = run_config("model=tiny-2xl", "algo=grpo", "model.dtype=bfloat16", root, check_data=False)
    assert budget.run_disk(bf16) == (4 * TINY_2XL, 6 * 4 * TINY_2XL)  # masters + AdamW's moments, fp32
    served = run_config("model=tiny-2xl", "algo=grpo", "model.dtype=bfloat16", "model.save_dtype=bfloat16", root,
                        check_data=False)
    assert budget.run_disk(served) == (2 * TINY_2XL, 6 * 4 * TINY_2XL)
    es = run_config("model=tiny-2xl", "algo=es", "model.dtype=bfloat16", root, check_data=False)
    assert budget.run_disk(es) == (2 * TINY_2XL, 2 * 2 * TINY_2XL)  # ES updates bf16 in place


def test_the_ranks_collective_timeout_follows_the_token_bound(tmp_path, monkeypatch):
    """timeout = max(30 min, 4 x the longest stretch of one rank's tokens / the throughput), the
    throughput being the table's row for the run's engine and size on an H100, as the planner's
    and the Slurm job's hours read it: a measured row moves all three."""
    root = f"sweep.root={tmp_path}"
    monkeypatch.setattr(budget, "GPU_RESULTS", tmp_path / "no-gpu.md")   # the published rows alone
    study = run_config("model=qwen7b", "algo=es", "engine=hf", "eval.problems=1319", "eval.samples=32",
                       "eval.max_new_tokens=2048", "model.resources.gpus=4", root, *GSM8K, check_data=False)
    params = 7_615_616_512
    seconds, why = budget.collective_timeout(study, params, cuda=True)
    longest = 1319 * 33 * 2048 / 4  # one evaluation (32 samples + greedy) over 4 ranks outlasts an ES iteration
    hf_h100 = 30 * 200 * 1024 / (559.0 * 4) * 3.35 / 4.8 * 1_543_714_304 / params   # es-at-scale's HF row, moved
    assert seconds == pytest.approx(4 * longest / hf_h100)
    assert seconds > 24 * 3600  # NCCL's 10-minute default would have ended it
    assert "model.resources.collective_timeout_min=null" in why and "\n" not in why
    cost = budget.run_cost(study, "H100", root=tmp_path)
    assert cost["rate"] == pytest.approx(hf_h100)
    assert budget.wall_hours(study) == pytest.approx(cost["bound_hours"] / 4)      # 4 GPUs share the bound
    md = tmp_path / "gpu.md"
    md.write_text("| engine | model | GPU | generated tokens/s |\n|---|---|---|---|\n| hf | qwen7b | H100 | 1,000 |\n")
    monkeypatch.setattr(budget, "GPU_RESULTS", md)
    assert budget.collective_timeout(study, params, cuda=True)[0] == pytest.approx(4 * longest / 1000.0)
    assert budget.run_cost(study, "H100", root=tmp_path)["rate"] == 1000.0
    assert budget.wall_hours(study) == pytest.approx(budget.estimate_tokens(study) / 1000.0 / 3600 / 4)
    tiny = run_config("model=tiny-s", "algo=es", "model.resources.ranks=2", root, check_data=False)
    assert budget.collective_timeout(tiny, 105_216, cuda=False)[0] == budget.COLLECTIVE_FLOOR_S
    set_ = run_config("model=tiny-s", "algo=es", "model.resources.ranks=2", "model.resources.collective_timeout_min=90",
                      root, check_data=False)
    assert budget.collective_timeout(set_, 105_216, cuda=False) == (5400.0, "model.resources.collective_timeout_min=90")
    with pytest.raises(Exception, match="collective_timeout_min must be null or a number of minutes > 0"):
        run_config("model=tiny-s", "algo=es", "model.resources.collective_timeout_min=0", root, check_data=False)


def test_a_gpu_runs_hours_from_the_throughput_table_expected_tokens_and_parts(tmp_path, monkeypatch):
    """A GPU run is priced per part: generation at the table's rate for its engine, size and GPU
    kind (bandwidth-scaled, interpolated between published rows), at the expected tokens on a
    continuously batching engine and at the bound on hf; GRPO's training passes at FLOPs; the
    evaluations its analyses add. The published rows alone: no measured table."""
    import math

    monkeypatch.setattr(budget, "GPU_RESULTS", tmp_path / "no-gpu.md")

    root = f"sweep.root={tmp_path}"
    q = ["model=qwen1.5b", root, *GSM8K, "eval.problems=10", "iterations=2", "pop=4", "es.batch_size=4"]
    es = run_config(*q, "algo=es", "engine=hf", "analysis=[sparsity]", check_data=False)
    parts = budget.token_parts(es)
    one_eval = 10 * 32 * 2048                       # problems x samples x budget, no greedy
    assert parts["analysis"] == 22 * one_eval      # sparsity's default grid: 6 x 3 + 2 controls + trained + base
    assert parts["eval"] + parts["train"] == budget.estimate_tokens(es) and parts["train_pass"] == 0
    hf = budget.run_cost(es, "H200", root=tmp_path)
    rate = 30 * 200 * 1024 / (559.0 * 4)           # es-at-scale's HF row: this size, this GPU
    assert hf["rate"] == pytest.approx(rate) and "es-at-scale" in hf["rate_source"]
    assert hf["hours"]["generate"] == pytest.approx(budget.estimate_tokens(es) / rate / 3600)   # hf: the bound
    assert hf["hours"]["analysis"] == pytest.approx(parts["analysis"] / rate / 3600)
    assert hf["share"] == 0.67 and hf["expected"] == int(hf["bound"] * 0.67)
    vl = budget.run_cost(es, "H200", root=tmp_path, engine="vllm")
    assert vl["rate"] == pytest.approx(10 * rate)
    assert vl["total"] == pytest.approx(hf["total"] * 0.67 / 10)          # expected tokens, 10x the rate
    h100 = budget.run_cost(es, "H100", root=tmp_path, engine="vllm")
    assert h100["rate"] == pytest.approx(10 * rate * 3.35 / 4.8)          # moved by memory bandwidth
    mid = budget.gpu_rate("vllm", 3e9, "H100")[0]                         # between 1.5B and 8B: log-log
    lo, hi = 10 * rate * 3.35 / 4.8, 12_500.0
    w = math.log(3e9 / 1_543_714_304) / math.log(8_030_261_248 / 1_543_714_304)
    assert mid == pytest.approx(lo ** (1 - w) * hi ** w)
    assert budget.gpu_rate("vllm", 16e9, "H100")[0] == pytest.approx(12_500.0 * 8_030_261_248 / 16e9)
    grpo = run_config(*q, "algo=grpo", "engine=hf", "grpo.num_iterations=2", check_data=False)
    g = budget.run_cost(grpo, "H100", root=tmp_path)
    gp = budget.token_parts(grpo)
    assert gp["train_pass"] == 2 * gp["train"] > 0
    assert g["hours"]["train"] == pytest.approx(6 * 1_543_714_304 * gp["train_pass"] * 0.21 / (989e12 * 0.3) / 3600)
    fixed = budget.run_cost(grpo, "H100", tokens_per_s={"qwen1.5b": 1000.0, "default": 5.0}, root=tmp_path)
    assert fixed["rate"] == 1000.0 and fixed["rate_source"] == "design.tokens_per_s"


def test_expected_tokens_from_recorded_runs_and_measured_rates(tmp_path):
    """The share of the bound earlier runs of the same task, model family and algorithm generated
    (their summary.json over their plan.json's bound) replaces the default; a measured row of
    docs/results/gpu.md replaces the published ones for its engine."""
    import json

    from esopt.runtime import runplan

    rc = run_config("model=tiny-xs", "algo=es", "iterations=1", "pop=2", "eval.problems=4", "eval.samples=2",
                    f"sweep.root={tmp_path}", check_data=False)
    bound = budget.estimate_tokens(rc)
    for i, share in enumerate((0.30, 0.40, 0.35)):
        d = tmp_path / "old" / "runs" / f"r{i}"
        d.mkdir(parents=True)
        runplan.write(rc, d)
        (d / "summary.json").write_text(json.dumps({"status": "completed", "task": rc.task_spec.config["name"],
                                                    "model": {"name": "tiny-s"}, "algo": "es",
                                                    "tokens_generated": int(share * bound)}))
    share, src = budget.generated_share(rc)
    assert share == pytest.approx(0.35, abs=1e-3) and "median of 3 recorded es run(s)" in src
    other = run_config("model=tiny-xs", "algo=grpo", f"sweep.root={tmp_path}", check_data=False)
    assert budget.generated_share(other)[0] == 0.21          # no recorded GRPO run: the declared default
    md = tmp_path / "gpu.md"
    md.write_text("| engine | model | GPU | generated tokens/s |\n|---|---|---|---|\n"
                  "| vllm | qwen1.5b | NVIDIA H200 | 40,000 |\n| hf | qwen1.5b | H200 | n/a |\n\n"
                  "- machine: Linux x86_64, 16 CPUs, NVIDIA H100 80GB HBM3\n\n"   # bench_gpu.py's table
                  "| model | params | row | setting | wall s | generated tok/s | peak GiB |\n|---|---|---|---|---|---|---|\n"
                  "| qwen2-0.5b | 494M | generate | batch 64 x 128 new | 2.00 | 4096 | 1.2 |\n"
                  "| qwen2-0.5b | 494M | grpo_step | 2 steps | 9.00 | 100 | 5.0 |\n"
                  "| qwen2-1.5b | 1.54e+03M | generate | batch 64 x 128 new | 8.00 | 982 | 3.6 |\n"  # older format
                  "| qwen2-3b | 3.09B | generate | batch 64 x 128 new | 9.00 | 700 | 7.0 |\n")
    rows = budget.measured_rates(md)
    assert [(r.engine, r.params, r.device, r.tokens_per_s, r.measured) for r in rows] == \
        [("vllm", 1_543_714_304, "H200", 40_000.0, True), ("hf", 494e6, "H100", 4096.0, True),
         ("hf", pytest.approx(1.54e9), "H100", 982.0, True), ("hf", pytest.approx(3.09e9), "H100", 700.0, True)]
    rate, src = budget.gpu_rate("vllm", 1_543_714_304, "H200", table=[*rows, *budget.THROUGHPUT])
    assert rate == 40_000.0 and src == "measured: gpu.md"


def _sweep(monkeypatch, *argv):
    from esopt.cli import sweep

    monkeypatch.setattr(sys, "argv", ["esopt.sweep", *argv])
    GlobalHydra.instance().clear()
    try:
        sweep.main()
    finally:
        GlobalHydra.instance().clear()


def test_a_sweep_too_long_for_this_machine_is_refused_unless_forced(tmp_path, monkeypatch, capsys):
    """Over sweep.max_local_hours on this machine: exit 2, one line naming the estimate and a
    launcher, nothing written; the dry run says so in a note; sweep.force=true lets it through
    (shown with sweep.max_local_hours raised: a forced launch would run the sweep)."""
    grid = ["-m", "model=qwen0.5b,qwen1.5b", "algo=es", "engine=hf", "engine.device=cpu", f"sweep.root={tmp_path}",
            *GSM8K]
    with pytest.raises(SystemExit) as e:
        _sweep(monkeypatch, *grid)
    assert e.value.code == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("esopt: error:")]
    assert len(err) == 1 and "on this machine (2 run(s) on its CPU, 1 at a time; the longest, run " in err[0]
    assert "over sweep.max_local_hours=24: send it to a cluster (hydra/launcher=slurm" in err[0]
    assert "sweep.force=true" in err[0]
    assert not (tmp_path / "default" / "runs").exists()        # nothing launched
    _sweep(monkeypatch, *grid, "sweep.dry_run=true")
    assert "esopt: note: a launch would be refused: this sweep may take about" in capsys.readouterr().err
    secs = {"a": 20 * 3600.0, "b": 10 * 3600.0, "c": None}
    assert budget.local_refusal(secs, 2, 24) is None                     # max(30 h / 2, 20 h) = 20 h
    assert "about 1.2 days" in budget.local_refusal(secs, 1, 24)          # 30 h on one worker
    with pytest.raises(SystemExit) as e:
        _sweep(monkeypatch, "model=qwen0.5b", "algo=none", "engine=hf", "engine.device=cpu",
               "sweep.max_local_hours=1", f"sweep.root={tmp_path}", *GSM8K)   # one run of its own
    assert e.value.code == 2 and "esopt: error: this run may take about" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        _sweep(monkeypatch, *grid, "sweep.max_local_hours=0")
    assert e.value.code == 2 and "sweep.max_local_hours" in capsys.readouterr().err


def test_the_dry_run_table_shows_the_ranks_collective_timeout():
    from hydra_plugins.esopt_sweeper.sweepers import collective_minutes

    two = run_config("model=tiny-s", "algo=es", "model.resources.ranks=2", "model.resources.collective_timeout_min=45",
                     check_data=False)
    assert collective_minutes(two, cuda=False) == 45.0
    assert collective_minutes(run_config("model=tiny-s", "algo=es", check_data=False), cuda=False) is None
