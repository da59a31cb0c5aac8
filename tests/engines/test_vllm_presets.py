"""No refusal after queueing: every ``*_gpu`` preset's grid, with the Qwen models swapped for
tiny ones and one iteration, runs with engine=vllm on CPU and every run completes (vLLM's CPU
build; ``python -m pytest -m vllm``).

The grids run as a user's sweep does (``python -m esopt.sweep -m +experiment=<preset>``), in
this process with the local launcher, so consecutive runs of a model share one vLLM engine
(esopt/engines/vllm.py). Swapped for CPU scale: the models (tiny-xs / tiny-s / tiny-m for the
0.5B / 1.5B / 3B sizes, tiny-s for 1.5B alone), the launcher (local instead of Slurm) and the
device (cpu instead of the presets' cuda), the
iterations (1; 2 for the presets with sequence arms, which need one per phase), and the sizes
of a run (4 training prompts per ES iteration, 4 GRPO prompts, 8 evaluation problems x 2
samples). Algorithms, populations, sigma / lr values, seeds and the presets' own GRPO settings
(grpo.use_vllm=true: rollouts by the run's vLLM engine) are the presets' own. The task is fixed
to countdown, which the tiny family knows.
"""

import json
import sys

import pytest
from helpers import require_vllm, vllm_tiny_family, write_countdown_es_file

pytestmark = pytest.mark.vllm

SMALL = ["hydra/launcher=local", "engine=vllm", "engine.device=cpu", "task=countdown", "es.batch_size=4", "eval.problems=8",
         "eval.samples=2"]
GRPO_SMALL = ["++grpo.prompts_per_step=4", "++grpo.grad_accum=16"]  # presets with GRPO runs: micro-batches of 2, as theirs

# preset -> (tiny models in grid order, iterations); the order lets consecutive presets reuse
# the engine of the model the previous one ended with
PRESETS = {
    "sequential_gpu": (("tiny-s",), 2),
    "sigma_lr_gpu": (("tiny-s",), 1),
    "es_vs_grpo_gpu": (("tiny-s", "tiny-xs", "tiny-m"), 2),
    "pop_vs_size_gpu": (("tiny-m", "tiny-xs", "tiny-s"), 1),
    "es_vs_grpo_countdown_gpu": (("tiny-xs", "tiny-s", "tiny-m"), 2),
    "pilot_gpu": (("tiny-m",), 1),
}


def sweep_in_process(monkeypatch, *args: str) -> None:
    """``python -m esopt.sweep -m <args>`` in this process."""
    from hydra.core.global_hydra import GlobalHydra

    from esopt.cli import sweep

    monkeypatch.setattr(sys, "argv", ["esopt.sweep", "-m", *args])
    GlobalHydra.instance().clear()
    try:
        sweep.main()
    finally:
        GlobalHydra.instance().clear()


def test_presets_sweep_dir_lists_every_gpu_preset():
    from helpers import REPO

    assert sorted(p.stem for p in (REPO / "sweeps").glob("*_gpu.yaml")) == sorted(PRESETS)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_gpu_preset_grid_runs_with_vllm_on_cpu(preset, monkeypatch, results_root):
    require_vllm()
    names, iterations = PRESETS[preset]
    extra = GRPO_SMALL if preset != "pop_vs_size_gpu" and preset != "sigma_lr_gpu" else []
    if preset == "es_vs_grpo_countdown_gpu":  # the ES repository's file format, at its size
        write_countdown_es_file(results_root.parent / "countdown.json")
        # the preset's GSM8K out-of-domain prompts (~290 tokens) exceed the tiny family's 128-token
        # context, which vLLM refuses, and no other task takes its compact style: no OOD set here
        extra = [*extra, f"task.source={results_root.parent / 'countdown.json'}", "eval.ood_task=null"]
    sweep_in_process(monkeypatch, f"+experiment={preset}", *vllm_tiny_family(names), f"iterations={iterations}",
                     *SMALL, *extra, f"sweep.root={results_root}")
    runs = sorted((results_root / preset / "runs").glob("*/summary.json"))
    summaries = [json.loads(p.read_text()) for p in runs]
    # the sequence grids' model is overridden by the command line's three tiny models: 36, not 24
    expected = {"sequential_gpu": 12, "sigma_lr_gpu": 16, "es_vs_grpo_gpu": 36, "pop_vs_size_gpu": 36,
                "es_vs_grpo_countdown_gpu": 36, "pilot_gpu": 6}[preset]
    assert len(summaries) == expected
    bad = [(s["run_id"], s["algo"], s.get("error")) for s in summaries if s["status"] != "completed"]
    assert not bad, bad
    assert {s["model"]["name"] for s in summaries} == set(names)
    for s in summaries:
        assert s["final"]["n_problems"] == 8 and s["tokens_generated"] > 0
    assert (results_root / preset / "runs.parquet").exists()  # the sweep's aggregation ran too
