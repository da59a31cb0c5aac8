"""No refusal after queueing: every ``*_gpu`` preset's grid, with the Qwen models swapped for
tiny ones and one iteration, runs with engine=vllm on CPU and every run completes (vLLM's CPU
build; ``python -m pytest -m vllm``).

The grids run as a user's sweep does (``python -m esopt.sweep -m +experiment=<preset>``), in
this process with the local launcher, so consecutive runs of a model share one vLLM engine
(esopt/engines/vllm.py). Swapped for CPU scale: the models (tiny-xs / tiny-s / tiny-m for the
0.5B / 1.5B / 3B sizes, tiny-s for 1.5B alone), the launcher (local instead of Slurm) and the
device (cpu instead of the presets' cuda), the
iterations (1; 2 for the presets with sequence arms, which need one per phase), the seeds (0
alone: another seed draws other numbers on the same path; every seed of every grid composes and
validates in tests/cli/test_sweeper.py) and the sizes of a run (4 training prompts per ES
iteration, 4 GRPO prompts, 8 evaluation problems x 2 samples, 4 out-of-domain problems).
Algorithms, populations, sigma / lr values, analyses and the presets' own GRPO settings
(grpo.use_vllm=true: rollouts by the run's vLLM engine) are the presets' own. The task is fixed
to countdown, which the tiny family knows; the Countdown preset's GSM8K out-of-domain set is
the GSM8K sample's questions short enough for the tiny family's 128-token context.
"""

import json
import sys

import pytest
from helpers import GSM8K_SAMPLE, require_vllm, vllm_tiny_family, write_countdown_es_file

pytestmark = pytest.mark.vllm

SMALL = ["hydra/launcher=local", "engine=vllm", "engine.device=cpu", "task=countdown", "es.batch_size=4", "eval.problems=8",
         "eval.samples=2", "eval.ood_problems=4", "seed=0"]
OOD = {"sequential_gpu": "countdown", "es_vs_grpo_gpu": "countdown", "es_vs_grpo_countdown_gpu": "gsm8k",
       "pilot_gpu": "countdown"}  # the presets' out-of-domain sets (the others have none)
SHORT_PROMPT = 112  # characters of a compact GSM8K prompt: "Q: <question>\nA:", one token each on the tiny family
RIVALS = ("es_vs_grpo_gpu", "es_vs_grpo_countdown_gpu")   # presets with the rivals' probes (claims 8, 10)
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


def write_short_gsm8k(folder) -> int:
    """A GSM8K folder (test.jsonl, train.jsonl) whose test split is the rows of the sample in
    tests/data whose compact prompt leaves room in the tiny family's 128-token context (most
    GSM8K prompts are longer, which vLLM refuses). Returns the number of test rows."""
    rows = [json.loads(line) for f in ("test.jsonl", "train.jsonl") for line in
            (GSM8K_SAMPLE / f).read_text().splitlines() if line.strip()]
    short = [r for r in rows if len(f"Q: {r['question']}\nA:") <= SHORT_PROMPT]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in short))
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r not in short))
    return len(short)


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
        # its GSM8K out-of-domain set: the short questions of the sample (most GSM8K prompts
        # exceed the tiny family's 128-token context, which vLLM refuses)
        assert write_short_gsm8k(results_root.parent / "gsm8k") >= 4
        extra = [*extra, f"task.source={results_root.parent / 'countdown.json'}",
                 f"++eval.ood_task.source={results_root.parent / 'gsm8k'}"]
    if preset in RIVALS:  # the held-out probes' few-shot prompts exceed the tiny family's 128-token context
        extra = [*extra, "eval.probes=[]", "eval.require_probes=false"]   # (drift, connectivity, the anchored arm stay)
    sweep_in_process(monkeypatch, f"+experiment={preset}", *vllm_tiny_family(names), f"iterations={iterations}",
                     *SMALL, *extra, f"sweep.root={results_root}")
    runs = sorted((results_root / preset / "runs").glob("*/summary.json"))
    summaries = [json.loads(p.read_text()) for p in runs]
    # one seed; the 1.5B-only grids' model (sequences, anchored ES) is overridden by the command
    # line's three tiny models, and the 1.5B ES/GRPO grids fall onto the others' run ids: 15, not 9
    expected = {"sequential_gpu": 4, "sigma_lr_gpu": 16, "es_vs_grpo_gpu": 15, "pop_vs_size_gpu": 12,
                "es_vs_grpo_countdown_gpu": 15, "pilot_gpu": 2}[preset]
    assert len(summaries) == expected
    bad = [(s["run_id"], s["algo"], s.get("error")) for s in summaries if s["status"] != "completed"]
    assert not bad, bad
    assert {s["model"]["name"] for s in summaries} == set(names)
    for s in summaries:
        assert s["final"]["n_problems"] == 8 and s["tokens_generated"] > 0
        if preset in OOD:  # the out-of-domain set was evaluated too
            assert s["final"]["ood_task"] == OOD[preset] and s["final"]["ood_n_problems"] == 4, s["final"]
    assert (results_root / preset / "runs.parquet").exists()  # the sweep's aggregation ran too
