"""What a run will cost, known before it starts: generated tokens, disk, and time on a CPU.

    tokens = estimate_tokens(plan)        # upper bound on generated tokens (the dry run's max_tokens)
    disk = run_disk(rc)                   # bytes of model/ and of the resume checkpoint, or None
    line = cpu_time_warning(rc, tokens)   # one warning when a CPU would need over an hour

The sweeper prints these in its dry run and checks the disk before launching
(hydra_plugins/esopt_sweeper); a single run and ``esopt.evaluate`` print the time warning.
Each reads the run's plan (``esopt.runtime.runplan.RunPlan``): its task specs (style, budget),
its phases' resolved settings, its typed engine config. Only light imports at module level: the
sweeper plugin imports this module at every start.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

# --- generated tokens ------------------------------------------------------------------------


def estimate_tokens(plan) -> int:
    """Upper bound on generated tokens of one run (every sample uses its whole budget).

    evals = 1 (base) + iterations // eval.every (+1 final if iterations % every);
    eval tokens = evals * (problems * (samples + greedy) * budget + ood_problems * samples *
    ood budget + per generated probe: probe_problems * probe_samples * its budget) (the
    budgets: the plan's task specs); plus each phase's training estimate from its resolved
    settings (``Algorithm.estimate_tokens``: ES, GRPO, each phase of a sequence over its
    share, per-iteration sizes clamped to the train split as the run clamps them).
    ``problems`` null (the whole split) counts the split's rows.
    """
    from esopt import algorithms

    budget = plan.task_spec.max_new_tokens
    train_rows = _rows(plan.task_spec, "train", None) if plan.phases else None  # the run clamps to it
    train = sum(algorithms.get(p.algo).estimate_tokens(p, budget, train_rows=train_rows) for p in plan.phases)
    return int((1 + n_evaluations(plan)) * eval_tokens(plan) + train)


def eval_tokens(plan) -> int:
    """Upper bound on the generated tokens of one evaluation (:func:`estimate_tokens`' per
    evaluation: the task, its out-of-domain set and its generated probes)."""
    from esopt import tasks
    from esopt.evaluator import scored_by_likelihood

    ev = plan.eval
    per_eval = eval_rows(plan) * (ev.samples + (1 if ev.greedy else 0)) * (ev.max_new_tokens or plan.task_spec.max_new_tokens)
    if plan.ood_spec is not None:
        per_eval += (_rows(plan.ood_spec, ev.ood_split, ev.ood_problems) * ev.samples
                     * plan.ood_spec.max_new_tokens)
    for spec in plan.probe_specs:
        if scored_by_likelihood(tasks.task_class(spec.config["name"])):
            continue  # scored, nothing generated
        per_eval += _rows(spec, ev.probe_split, ev.probe_problems) * ev.probe_samples * spec.max_new_tokens
    return int(per_eval)


# --- the process group's timeout ---------------------------------------------------------------

COLLECTIVE_MARGIN = 4.0        # x the token bound's time: the throughput estimate is rough
COLLECTIVE_FLOOR_S = 1800.0    # never below 30 min (torch's default for gloo; NCCL's is 10 min)


def collective_timeout(plan, params: int, cuda: bool) -> tuple[float, str]:
    """Seconds a collective of the run's ranks may wait, and where the number comes from:
    ``model.resources.collective_timeout_min`` when set, else the longest stretch one rank works
    between two collectives at the run's token bound (one evaluation's tokens over the ranks, or
    one iteration's training tokens over the ranks, whichever is larger) at the engine's
    estimated throughput (GPU: :func:`gpu_tokens_per_s`; CPU: :func:`cpu_tokens_per_s`), times
    ``COLLECTIVE_MARGIN``, at least ``COLLECTIVE_FLOOR_S``:

        timeout = max(floor, margin * max(eval_tokens, iteration_tokens) / ranks / tokens_per_s)
    """
    from esopt import algorithms
    from esopt.algorithms.distributed import TIMEOUT_SETTING

    set_min = (plan.model.get("resources") or {}).get("collective_timeout_min")
    if set_min is not None:
        return float(set_min) * 60.0, f"{TIMEOUT_SETTING}={set_min}"
    ranks = max(1, int(plan.layout.ranks))
    budget = plan.task_spec.max_new_tokens
    train_rows = _rows(plan.task_spec, "train", None) if plan.phases else None
    per_iteration = max((algorithms.get(p.algo).estimate_tokens(p, budget, train_rows=train_rows) / max(1, p.iterations)
                         for p in plan.phases), default=0)
    longest = max(eval_tokens(plan), per_iteration) / ranks
    rate = gpu_tokens_per_s(params)[0] if cuda else cpu_tokens_per_s(plan, params)[0]
    seconds = max(COLLECTIVE_FLOOR_S, COLLECTIVE_MARGIN * longest / rate)
    return seconds, (f"{TIMEOUT_SETTING}=null: {COLLECTIVE_MARGIN:g} x {longest:,.0f} bound tokens per rank "
                     f"between collectives at ~{rate:,.0f} tokens/s, at least {COLLECTIVE_FLOOR_S / 60:.0f} min")


def n_evaluations(rc) -> int:
    """Evaluations after the base one: every ``eval.every`` iterations and at the end (0 for
    an algorithm that trains nothing)."""
    from esopt import algorithms

    if not algorithms.get(rc.algo).trains:
        return 0
    every = rc.eval.every
    return rc.iterations // every + (1 if rc.iterations % every else 0)


def eval_rows(plan) -> int:
    """Problems one evaluation of the run covers (``eval.problems``, or its split's rows)."""
    return _rows(plan.task_spec, plan.eval.split, plan.eval.problems)


_ROWS: dict[str, int] = {}


def _rows(spec, split: str, problems) -> int:
    """Problems an evaluation covers: ``problems``, or (None) the length of the split of the
    task a spec (``TaskSpec``) builds (cached)."""
    if problems is not None:
        return int(problems)
    key = json.dumps([spec.config, split], sort_keys=True, default=str)
    if key not in _ROWS:
        from esopt import tasks

        _ROWS[key] = len(tasks.get(spec.config, style=spec.style).split(split))
    return _ROWS[key]


# --- disk --------------------------------------------------------------------------------------

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
GB = 1e9


def run_disk(rc) -> tuple[int, int] | None:
    """``(model bytes, checkpoint bytes)`` of one run, from the model's parameter count
    (``esopt.models.param_count``) and ``model.dtype`` (fp32 for an algorithm that trains master
    weights, GRPO; ``model.save_dtype`` for ``model/``): ``model/`` holds the weights once (when
    the algorithm trains and ``sweep.save_model``); the resume checkpoint holds
    ``Algorithm.checkpoint_copies`` copies of them (ES 1, GRPO 3: with AdamW's moments), and
    while a new one is written the previous one stays (x2). None when the size is unknown.
    Measured for a 0.5B fp32 model (issue 44): ES left 4.8 GB after one iteration, GRPO 9.5 GB
    (a 5.0 GB optimizer.pt); this estimate gives 4.0 and 8.0 GB (tokenizer and optimizer
    bookkeeping not counted)."""
    from esopt import algorithms, models

    params = models.param_count(rc.model)
    if params is None:
        return None
    algo = algorithms.get(rc.algo)
    loaded = DTYPE_BYTES.get(str(rc.model.get("dtype", "float32")), 4)
    trained = 4 if algo.master_weights else loaded  # fp32 masters (GRPO), whatever model.dtype
    saved = DTYPE_BYTES.get(str(rc.model.get("save_dtype") or ""), trained)
    kept = params * saved if algo.trains and rc.sweep.save_model else 0
    return kept, int(2 * params * trained * algo.checkpoint_copies)


def sweep_disk(rcs: list, at_once: int = 1) -> dict | None:
    """The disk a sweep of runs ``rcs`` needs at its peak: every run's ``model/``, plus the
    checkpoints: all of them with ``sweep.keep_checkpoints``, else only those of the runs in
    flight (the ``at_once`` largest; a completed run frees its own). None when a run's size is
    unknown."""
    sizes = [run_disk(rc) for rc in rcs]
    if not sizes or any(s is None for s in sizes):
        return None
    keep = any(rc.sweep.keep_checkpoints for rc in rcs)
    ckpts = sorted((c for _, c in sizes), reverse=True)
    models_b = sum(m for m, _ in sizes)
    ckpt_b = sum(ckpts) if keep else sum(ckpts[:max(1, at_once)])
    return {"models": models_b, "checkpoints": ckpt_b, "peak": models_b + ckpt_b, "keep_checkpoints": keep,
            "run_model": max(m for m, _ in sizes), "run_checkpoint": ckpts[0], "runs": len(sizes)}


def free_bytes(path) -> tuple[float, Path]:
    """Free bytes on the filesystem that will hold ``path`` (its nearest existing parent);
    infinity when the filesystem does not say."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free, p
    except OSError:
        return float("inf"), p


def disk_line(need: dict, where) -> str:
    """The dry run's disk line: what the sweep needs at its peak, of which model weights and
    checkpoints, and the free space where it writes."""
    free, at = free_bytes(where)
    ckpt = ("all runs' checkpoints, kept (sweep.keep_checkpoints=true)" if need["keep_checkpoints"]
            else "the running runs' checkpoints, each removed when its run completes")
    return (f"disk (estimate, from each model's parameters and dtype): per run up to {need['run_model'] / GB:.3g} GB "
            f"of trained weights (model/) and {need['run_checkpoint'] / GB:.3g} GB of resume checkpoint while it "
            f"runs; {need['runs']} run(s) need about {need['peak'] / GB:.3g} GB at the peak: "
            f"{need['models'] / GB:.3g} GB of weights + {need['checkpoints'] / GB:.3g} GB for {ckpt}; "
            f"{free / GB:.1f} GB free in {at}")


def disk_warning(need: dict | None, where) -> str | None:
    """One warning line when the sweep's estimated peak exceeds the free space, else None."""
    if need is None:
        return None
    free, at = free_bytes(where)
    if need["peak"] <= free:
        return None
    return (f"this sweep needs about {need['peak'] / GB:.1f} GB on disk at its peak (model/ of every run "
            f"+ checkpoints) but {at} has {free / GB:.1f} GB free; free space, or lower it with "
            "sweep.save_model=false (no model/ for analyses) or fewer runs")


# --- time on a CPU -----------------------------------------------------------------------------

CPU_WARN_S = 3600.0   # a run whose generated tokens alone would take longer on a CPU is warned about
# A ceiling on the parameter-scaled rate: the paper_cpu runs (tiny-s, 105,216 parameters, one thread
# each) took 42.0 / 63.4 / 53.3 / 53.4 s (es / grpo / es_grpo / grpo_es, docs/results/claims_paper_cpu.md,
# paper_cpu_confirm1) for token bounds of 1,408,000 / 1,804,800 / 1,408,000 / 1,408,000: 73.9M bound
# tokens in 2,540 run-seconds for the preset's 16 / 16 / 8 / 8 runs, 29,100 per second (evaluation
# and training included), where the SmolLM2 rate scaled to 105k parameters would say 107,000.
SMALL_MODEL_CPU_TOKENS_PER_S = 73_932_800 / 2_540.0
SMALL_MODEL_CPU_SOURCE = ("paper_cpu's tiny-s runs: 73.9M bound tokens in 2,540 run-seconds, "
                          "docs/results/claims_paper_cpu.md (small models are latency-bound)")


def cpu_tokens_per_s(rc, params: int) -> tuple[float, str]:
    """Generated tokens per second of the run's engine on a CPU for a model of ``params``
    parameters, and where that number comes from: the engine's measured rate
    (``EngineConfig.cpu_param_tokens_per_s``: tokens/s x parameters of a measured model,
    docs/results/smollm2.md) scaled by parameters (each token costs ~2 x params FLOPs)."""
    cfg = type(rc.engine_config)
    rate = float(cfg.cpu_param_tokens_per_s)
    if rate / params > SMALL_MODEL_CPU_TOKENS_PER_S:  # a tiny model is latency-bound, not FLOP-bound
        return SMALL_MODEL_CPU_TOKENS_PER_S, SMALL_MODEL_CPU_SOURCE
    return rate / params, cfg.cpu_throughput_source


def cpu_seconds(rc, tokens: int, cuda: bool | None = None) -> float | None:
    """Seconds ``tokens`` generated tokens take at the engine's CPU rate (:func:`cpu_tokens_per_s`)
    when the run goes to a CPU (``cuda``: whether it will see a GPU, None = this process's
    answer); None for a GPU run or a model of unknown size."""
    from esopt import models
    from esopt.engines import cuda_visible

    device = str(rc.engine_config.device)
    on_cpu = device == "cpu" or (device == "auto" and not (cuda_visible() if cuda is None else cuda))
    params = models.param_count(rc.model)
    if not on_cpu or not params:
        return None
    return tokens / cpu_tokens_per_s(rc, params)[0]


def cpu_time_warning(rc, tokens: int, cuda: bool | None = None) -> str | None:
    """One warning line when the run goes to a CPU and ``tokens`` (its :func:`estimate_tokens`)
    at that engine's measured CPU throughput would take longer than ``CPU_WARN_S``, naming the
    estimate and the keys that set it; None otherwise (a GPU run, an unknown size, a short run)."""
    from esopt import models

    seconds = cpu_seconds(rc, tokens, cuda)
    if seconds is None or seconds <= CPU_WARN_S:
        return None
    params = models.param_count(rc.model)
    rate, source = cpu_tokens_per_s(rc, params)
    ev = rc.eval
    budget = ev.max_new_tokens or rc.task_spec.max_new_tokens
    per_eval = (f"eval.problems={eval_rows(rc)} x (eval.samples={ev.samples}" + (" + 1 greedy" if ev.greedy else "")
                + f") x eval.max_new_tokens={budget}")
    evals = 1 + n_evaluations(rc)
    return (f"this run may take about {_duration(seconds)} on this CPU: up to {tokens:,} generated tokens "
            f"({per_eval} per evaluation, {evals} evaluation(s)"
            + (", plus training" if n_evaluations(rc) else "") + f") at about {rate:.3g} tokens/s "
            f"({rc.engine_config.name} engine, {params / 1e6:.0f}M parameters; {source}); lower eval.problems, "
            "eval.samples or eval.max_new_tokens")


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


# --- time on a GPU -----------------------------------------------------------------------------

# Generated tokens per GPU-second x parameters, anchored on one published figure, a user's report
# on es-at-scale (github.com/VsonicV/es-at-scale/issues/4): 559 s per ES iteration for Qwen2.5-1.5B
# (1,543,714,304 parameters), N = 30 members x 200 prompts x <= 1,024 new tokens, on 4 x H200. Counted as the
# token bound (every completion at its budget, as estimate_tokens counts): 6,144,000 tokens /
# (559 s x 4 GPUs) = 2,748 tokens/s per GPU. Other sizes: scaled by parameters (each token costs
# ~2 x params FLOPs), docs/design/gpu_throughput.md; ``plan.tokens_per_s=`` overrides it.
GPU_PARAM_TOKENS_PER_S = 30 * 200 * 1024 / (559.0 * 4) * 1_543_714_304
GPU_THROUGHPUT_SOURCE = ("es-at-scale issue #4: Qwen2.5-1.5B ES, 30 x 200 x <= 1,024 tokens in 559 s on 4 x H200 "
                         "(2,748 bound tokens/s per GPU), scaled by parameters; docs/design/gpu_throughput.md")


def gpu_tokens_per_s(params: int) -> tuple[float, str]:
    """Generated tokens (bound) per GPU-second for a model of ``params`` parameters on one GPU
    engine, and where the number comes from (:data:`GPU_PARAM_TOKENS_PER_S`)."""
    return GPU_PARAM_TOKENS_PER_S / params, GPU_THROUGHPUT_SOURCE


def wall_hours(rc, tokens: int) -> float | None:
    """A run's wall-clock hours at its token bound ``tokens``: on GPUs (``model.resources.gpus``
    > 0) tokens / (:func:`gpu_tokens_per_s` x the GPUs its ranks use); on a CPU,
    :func:`cpu_seconds`; None for a model of unknown size."""
    from esopt import models

    params = models.param_count(rc.model)
    if not params:
        return None
    gpus = int(((rc.model.get("resources") or {}).get("gpus")) or 0)
    if gpus:
        return tokens / (gpu_tokens_per_s(params)[0] * max(1, rc.layout.gpus_used or gpus)) / 3600
    seconds = cpu_seconds(rc, tokens, cuda=False)
    return None if seconds is None else seconds / 3600
