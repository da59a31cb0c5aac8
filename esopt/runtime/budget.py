"""What a run will cost, known before it starts: generated tokens, disk, and time on a CPU.

    tokens = estimate_tokens(plan)        # upper bound on generated tokens (the dry run's max_tokens)
    disk = run_disk(plan)                 # bytes of model/ and of the resume checkpoint, or None
    line = cpu_time_warning(plan, tokens) # one warning when a CPU would need over an hour

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
from dataclasses import dataclass
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
    one iteration's training tokens over the ranks, whichever is larger) at the rate of one rank
    (:func:`tokens_rate`: on a GPU the throughput table's row for the run's engine and size on a
    ``DEFAULT_GPU``, as a Slurm job's hours; on a CPU the engine's measured rate), times
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
    rate = tokens_rate(plan, params, DEFAULT_GPU if cuda else "cpu")[0]
    seconds = max(COLLECTIVE_FLOOR_S, COLLECTIVE_MARGIN * longest / rate)
    return seconds, (f"{TIMEOUT_SETTING}=null: {COLLECTIVE_MARGIN:g} x {longest:,.0f} bound tokens per rank "
                     f"between collectives at ~{rate:,.0f} tokens/s, at least {COLLECTIVE_FLOOR_S / 60:.0f} min")


def n_evaluations(plan) -> int:
    """Evaluations after the base one: every ``eval.every`` iterations and at the end (0 for
    an algorithm that trains nothing)."""
    from esopt import algorithms

    if not algorithms.get(plan.algo).trains:
        return 0
    every = plan.eval.every
    return plan.iterations // every + (1 if plan.iterations % every else 0)


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


def run_disk(plan) -> tuple[int, int] | None:
    """``(model bytes, checkpoint bytes)`` of one run at its peak, from the model's parameter
    count (``esopt.models.param_count``) and ``model.dtype`` (fp32 for an algorithm that trains
    master weights, GRPO; ``model.save_dtype`` for ``model/``): ``model/`` holds the weights once
    (when the algorithm trains and ``sweep.save_model``). One checkpoint holds
    ``Algorithm.checkpoint_copies`` copies of the weights (ES 1, GRPO 3: with AdamW's moments);
    a run keeps only its last, and while a new one is written the previous one stays:

        checkpoint bytes = 2 x one checkpoint
                         = (saves + 1) x one checkpoint   with sweep.keep_checkpoints

    (``saves``: the checkpoints its schedule writes, ``Algorithm.checkpoint_saves`` summed over
    its phases, each phase's at its own size; + 1 for a save on the time-limit signal). None when
    the size is unknown. Measured for a 0.5B fp32 model (issue 44): ES left 4.8 GB after one
    iteration, GRPO 9.5 GB (a 5.0 GB optimizer.pt); this estimate gives 4.0 and 8.0 GB
    (tokenizer and optimizer bookkeeping not counted)."""
    from esopt import algorithms, models

    params = models.param_count(plan.model)
    if params is None:
        return None
    algo = algorithms.get(plan.algo)
    loaded = DTYPE_BYTES.get(str(plan.model.get("dtype", "float32")), 4)
    trained = 4 if algo.master_weights else loaded  # fp32 masters (GRPO), whatever model.dtype
    saved = DTYPE_BYTES.get(str(plan.model.get("save_dtype") or ""), trained)
    kept = params * saved if algo.trains and plan.sweep.save_model else 0
    one = params * trained * algo.checkpoint_copies
    if not plan.sweep.keep_checkpoints:
        return kept, int(2 * one)
    every = sum(algorithms.get(p.algo).checkpoint_saves(p, plan.eval.every) * algorithms.get(p.algo).checkpoint_copies
                for p in plan.phases)
    return kept, int(params * trained * every + one)


def sweep_disk(rcs: list, at_once: int = 1) -> dict | None:
    """The disk a sweep of runs ``rcs`` needs at its peak: every run's ``model/``, plus the
    checkpoints: every one of every run with ``sweep.keep_checkpoints`` (:func:`run_disk`), else
    only the last ones of the runs in flight (the ``at_once`` largest; a completed run frees its
    own). None when a run's size is unknown."""
    sizes = [run_disk(plan) for plan in rcs]
    if not sizes or any(s is None for s in sizes):
        return None
    keep = any(plan.sweep.keep_checkpoints for plan in rcs)
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


def size_text(n: float) -> str:
    """Bytes as a short size with three significant digits in the unit that fits (``121 kB``,
    ``3.62 MB``, ``1.2 GB``): a small model's 0.000121 GB, or a full disk's few kB free, never
    reads as "0.0 GB"."""
    if n == float("inf"):
        return "unlimited"
    for unit, size in (("TB", 1e12), ("GB", GB), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def disk_line(need: dict, where) -> str:
    """The dry run's disk line: what the sweep needs at its peak, of which model weights and
    checkpoints, and the free space where it writes."""
    free, at = free_bytes(where)
    ckpt = ("every checkpoint of every run, kept (sweep.keep_checkpoints=true)" if need["keep_checkpoints"]
            else "the running runs' checkpoints (each its last only), each removed when its run completes")
    return (f"disk (estimate, from each model's parameters and dtype): per run up to {size_text(need['run_model'])} "
            f"of trained weights (model/) and {size_text(need['run_checkpoint'])} of resume checkpoint"
            + (" (all of them)" if need["keep_checkpoints"] else " while it runs") + "; "
            f"{need['runs']} run(s) need about {size_text(need['peak'])} at the peak: "
            f"{size_text(need['models'])} of weights + {size_text(need['checkpoints'])} for {ckpt}; "
            f"{size_text(free)} free in {at}")


def disk_warning(need: dict | None, where) -> str | None:
    """One warning line when the sweep's estimated peak exceeds the free space, else None."""
    if need is None:
        return None
    free, at = free_bytes(where)
    if need["peak"] <= free:
        return None
    return (f"this sweep needs about {size_text(need['peak'])} on disk at its peak (model/ of every run "
            f"+ checkpoints) but {at} has {size_text(free)} free; free space, or lower it with "
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


def cpu_tokens_per_s(plan, params: int) -> tuple[float, str]:
    """Generated tokens per second of the run's engine on a CPU for a model of ``params``
    parameters, and where that number comes from: the engine's measured rate
    (``EngineConfig.cpu_param_tokens_per_s``: tokens/s x parameters of a measured model,
    docs/results/smollm2.md) scaled by parameters (each token costs ~2 x params FLOPs)."""
    cfg = type(plan.engine_config)
    rate = float(cfg.cpu_param_tokens_per_s)
    if rate / params > SMALL_MODEL_CPU_TOKENS_PER_S:  # a tiny model is latency-bound, not FLOP-bound
        return SMALL_MODEL_CPU_TOKENS_PER_S, SMALL_MODEL_CPU_SOURCE
    return rate / params, cfg.cpu_throughput_source


def cpu_seconds(plan, tokens: int, cuda: bool | None = None) -> float | None:
    """Seconds ``tokens`` generated tokens take at the engine's CPU rate (:func:`cpu_tokens_per_s`)
    when the run goes to a CPU (``cuda``: whether it will see a GPU, None = this process's
    answer); None for a GPU run or a model of unknown size."""
    from esopt import models
    from esopt.engines import cuda_visible

    device = str(plan.engine_config.device)
    on_cpu = device == "cpu" or (device == "auto" and not (cuda_visible() if cuda is None else cuda))
    params = models.param_count(plan.model)
    if not on_cpu or not params:
        return None
    return tokens / cpu_tokens_per_s(plan, params)[0]


def cpu_time_warning(plan, tokens: int, cuda: bool | None = None) -> str | None:
    """One warning line when the run goes to a CPU and ``tokens`` (its :func:`estimate_tokens`)
    at that engine's measured CPU throughput would take longer than ``CPU_WARN_S``, naming the
    estimate and the keys that set it; None otherwise (a GPU run, an unknown size, a short run)."""
    from esopt import models

    seconds = cpu_seconds(plan, tokens, cuda)
    if seconds is None or seconds <= CPU_WARN_S:
        return None
    params = models.param_count(plan.model)
    rate, source = cpu_tokens_per_s(plan, params)
    ev = plan.eval
    budget = ev.max_new_tokens or plan.task_spec.max_new_tokens
    per_eval = (f"eval.problems={eval_rows(plan)} x (eval.samples={ev.samples}" + (" + 1 greedy" if ev.greedy else "")
                + f") x eval.max_new_tokens={budget}")
    evals = 1 + n_evaluations(plan)
    return (f"this run may take about {_duration(seconds)} on this CPU: up to {tokens:,} generated tokens "
            f"({per_eval} per evaluation, {evals} evaluation(s)"
            + (", plus training" if n_evaluations(plan) else "") + f") at about {rate:.3g} tokens/s "
            f"({plan.engine_config.name} engine, {params / 1e6:.0f}M parameters; {source}); lower eval.problems, "
            "eval.samples or eval.max_new_tokens")


def local_refusal(secs: dict, at_once: int, max_hours: float) -> str | None:
    """The one line refusing a sweep whose runs on this machine (``secs``: run id -> estimated
    seconds, :func:`cpu_seconds`) take longer than ``max_hours`` (``sweep.max_local_hours``),
    run ``at_once`` at a time:

        hours = sum(secs) / min(at_once, runs) / 3600      (at least the longest run's)

    None when it fits (or nothing runs here)."""
    busy = {k: v for k, v in secs.items() if v}
    if not busy:
        return None
    longest = max(busy, key=busy.get)
    hours = max(sum(busy.values()) / min(max(1, at_once), len(busy)), busy[longest]) / 3600
    if hours <= max_hours:
        return None
    return (f"this sweep may take about {_duration(hours * 3600)} on this machine ({len(busy)} run(s) on its CPU, "
            f"{min(max(1, at_once), len(busy))} at a time; the longest, run {longest}, {_duration(busy[longest])}), "
            f"over sweep.max_local_hours={max_hours:g}: send it to a cluster (hydra/launcher=slurm, "
            "README's cluster section), shrink it (eval.problems, eval.samples, fewer runs), or set sweep.force=true")


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


# --- what a run costs: expected tokens, parts, hours on a CPU or a GPU --------------------------

ANALYSIS_EVALS = {"drift": 0, "connectivity": len((0.0, 0.25, 0.5, 0.75, 1.0))}   # evaluations per run
# (connectivity: its path's five points, computed once per ES/GRPO pair, counted on the pair's ES run)


def analysis_evaluations(plan) -> dict[str, int]:
    """Evaluations each analysis of ``analysis=[...]`` adds to a run (each one of ``eval.problems``
    x ``eval.samples`` on the held-out split, no greedy pass): sparsity 1 (trained) + per |delta|
    mode ``len(fractions)``, per control mode ``len(control_fractions)`` + 1 (base) (the defaults:
    6 x 3 + 2 + 2 = 22); forgetting 2 per held-out task; connectivity 5 on an ES run; drift 0."""
    from esopt import algorithms

    names = list(plan.analysis or [])
    out = {}
    for name in names:
        if name == "sparsity":
            sp = plan.sparsity
            control = set(type(sp).control_modes)
            out[name] = 2 + sum(len(sp.control_fractions) if m in control else len(sp.fractions) for m in sp.modes)
        elif name == "forgetting":
            out[name] = 2 * 3   # base and trained on the default held-out tasks (esopt.study.analyses)
        elif name == "connectivity":
            out[name] = ANALYSIS_EVALS[name] if algorithms.kind(plan.algo) == "es" else 0
        else:
            out[name] = ANALYSIS_EVALS.get(name, 0)
    return out


def token_parts(plan) -> dict[str, int]:
    """The token bound of one run in parts: ``eval`` (its evaluations, :func:`estimate_tokens`),
    ``train`` (generated while training), ``analysis`` (the evaluations its analyses add,
    :func:`analysis_evaluations` x one evaluation of the main task without greedy), and
    ``train_pass`` (tokens through a forward+backward pass: each phase's generated training
    tokens x ``Algorithm.train_passes`` x ``grpo.num_iterations``)."""
    from esopt import algorithms

    budget = plan.task_spec.max_new_tokens
    ev = plan.eval
    train_rows = _rows(plan.task_spec, "train", None) if plan.phases else None
    train, passes = 0, 0.0
    for p in plan.phases:
        algo = algorithms.get(p.algo)
        t = algo.estimate_tokens(p, budget, train_rows=train_rows)
        train += t
        passes += t * algo.train_passes * float(getattr(p.settings, "num_iterations", 1) or 1)
    one_eval = eval_rows(plan) * ev.samples * (ev.max_new_tokens or budget)
    analysis = sum(analysis_evaluations(plan).values()) * one_eval
    return {"eval": estimate_tokens(plan) - train, "train": train, "analysis": analysis, "train_pass": int(passes)}


def run_family(model_name: str) -> str:
    """A model's family: the leading letters of its name (tiny, smollm, qwen, llama)."""
    import re

    m = re.match(r"[a-z]+", str(model_name).lower())
    return m.group(0) if m else str(model_name)


_RECORDED: dict[str, list] = {}


def recorded_shares(root) -> list[dict]:
    """Every completed run recorded under ``root`` (``<root>/<sweep>/runs/<id>/``) with its task,
    model family, algorithm and ``tokens_generated / token bound`` (the bound of its own plan.json);
    cached per root."""
    from esopt.runtime import runplan

    key = str(Path(root).resolve())
    if key in _RECORDED:
        return _RECORDED[key]
    out = []
    for summary in sorted(Path(root).glob("*/runs/*/summary.json"))[:2000]:
        try:
            s = json.loads(summary.read_text())
            if s.get("status") != "completed" or not s.get("tokens_generated"):
                continue
            plan = runplan.load(summary.parent)
            bound = estimate_tokens(plan) if plan is not None else 0
        except Exception:  # noqa: BLE001 - an unreadable run says nothing about lengths
            continue
        if bound > 0:
            out.append({"task": s.get("task"), "family": run_family((s.get("model") or {}).get("name")),
                        "algo": s.get("algo"), "share": float(s["tokens_generated"]) / bound,
                        "sweep": summary.parent.parent.parent.name})
    _RECORDED[key] = out
    return out


def generated_share(plan, root=None) -> tuple[float, str]:
    """Expected generated tokens over the bound for run ``plan``, and where it comes from: the
    median share of the completed runs recorded under ``root`` (default ``sweep.root``) with the
    same task, model family and algorithm, else the algorithm's declared default
    (``Algorithm.generated_share``)."""
    import statistics

    from esopt import algorithms

    root = plan.sweep.root if root is None else root
    task, fam = plan.task_spec.config.get("name"), run_family(plan.model["name"])
    same = [r for r in recorded_shares(root) if (r["task"], r["family"], r["algo"]) == (task, fam, plan.algo)] \
        if Path(root).is_dir() else []
    if same:
        shares = [r["share"] for r in same]
        return (statistics.median(shares), f"median of {len(same)} recorded {plan.algo} run(s) of {task} on the "
                f"{fam} family in {root} ({min(shares):.2f}-{max(shares):.2f})")
    return algorithms.get(plan.algo).generated_share, f"{plan.algo}'s default share (esopt.algorithms: Algorithm.generated_share)"


@dataclass(frozen=True)
class Rate:
    """One row of the throughput table: generated tokens a second of ``engine`` on one ``device``
    (a GPU kind, or ``cpu``: one process) for a model of ``params`` parameters."""

    engine: str
    params: float
    device: str
    tokens_per_s: float
    source: str
    measured: bool = False


# Published figures (assumed until docs/results/gpu.md measures a row: its rows replace these).
THROUGHPUT: tuple[Rate, ...] = (
    Rate("hf", 1_543_714_304, "H200", 30 * 200 * 1024 / (559.0 * 4),
         "es-at-scale's original HF code: Qwen2.5-1.5B ES, 30 members x 200 prompts x <= 1,024 tokens in 559 s "
         "on 4 x H200 (https://github.com/VsonicV/es-at-scale/issues/4)"),
    Rate("vllm", 1_543_714_304, "H200", 10 * 30 * 200 * 1024 / (559.0 * 4),
         "es-at-scale's authors: about 10x their HF code with vLLM, the same workload "
         "(https://github.com/VsonicV/es-at-scale/issues/4)"),
    Rate("vllm", 8_030_261_248, "H100", 12_500.0,
         "vLLM offline throughput: about 12,500 output tokens/s, Llama-3-8B bf16 on one H100 at large batch "
         "(public benchmarks, e.g. https://blog.vllm.ai/2024/09/05/perf-update.html)"),
)
# Memory bandwidth (decoding is bound by it): NVIDIA's data sheets, SXM parts
# (https://www.nvidia.com/en-us/data-center/h100/, /h200/, /a100/).
GPU_BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12, "A100": 2.04e12}
# Dense bf16 peak FLOP/s (same sheets) and the share a training pass reaches (assumed: 0.3, a common
# model-FLOPs utilisation of FSDP training; a measured row in docs/results/gpu.md replaces it).
GPU_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
TRAIN_MFU = 0.3
GPU_KINDS = tuple(GPU_BANDWIDTH)
DEFAULT_GPU = "H100"
GPU_RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "gpu.md"


def measured_rates(path=None) -> list[Rate]:
    """Generation rows of docs/results/gpu.md (benchmarks/bench_gpu.py): a markdown table with a
    tokens-a-second column (``tok/s``, ``tokens/s``) and a model (``params`` like ``494M``, else a conf/model name); its engine
    column, else hf; its GPU column, else the GPU its section's ``- machine:`` line names; with a
    ``row`` column only its ``generate`` rows. None of it: []."""
    import re

    from esopt import models

    p = Path(path) if path is not None else GPU_RESULTS
    if not p.is_file():
        return []
    out, head, machine = [], None, ""
    for line in p.read_text().splitlines():
        if line.startswith("- machine:"):
            machine = line
        if not line.startswith("|"):
            head = None
            continue
        cells = [c.strip().strip("`*") for c in line.strip().strip("|").split("|")]
        if head is None:
            head = [c.lower() for c in cells]
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        col = {k: next((i for i, h in enumerate(head) if k in h), None)
               for k in ("engine", "model", "params", "gpu", "row")}
        col["tok/s"] = next((i for i, h in enumerate(head) if "tok" in h and h.endswith("/s")), None)
        if col["tok/s"] is None or (col["model"] is None and col["params"] is None):
            continue
        if col["row"] is not None and cells[col["row"]] != "generate":
            continue
        try:
            rate = float(cells[col["tok/s"]].replace(",", "").split()[0])
            params = models.param_count({"name": cells[col["model"]]}) if col["model"] is not None else None
            if not params and col["params"] is not None:
                m = re.fullmatch(r"([\d.,]+(?:e[+-]?\d+)?)\s*([KMB]?)", cells[col["params"]])
                params = float(m.group(1).replace(",", "")) * {"": 1, "K": 1e3, "M": 1e6, "B": 1e9}[m.group(2)]
        except (ValueError, IndexError, TypeError, AttributeError):
            continue
        where = cells[col["gpu"]] if col["gpu"] is not None else machine
        gpu = next((k for k in GPU_KINDS if k.lower() in where.lower()), None)
        if not params or gpu is None:
            continue
        engine = cells[col["engine"]].lower() if col["engine"] is not None else "hf"
        out.append(Rate(engine, float(params), gpu, rate, f"measured: {p.name}", measured=True))
    return out


def gpu_rate(engine: str, params: float, gpu: str = DEFAULT_GPU, table=None) -> tuple[float, str]:
    """Generated tokens a second on one ``gpu`` for ``engine`` and a model of ``params``
    parameters, and the source. The rows of that engine (the measured ones, docs/results/gpu.md,
    when there are any, else the published :data:`THROUGHPUT`; an engine with none borrows every
    engine's), each moved to ``gpu`` by memory bandwidth (decoding reads every weight once a step):

        rate_row(gpu) = row.rate x bandwidth[gpu] / bandwidth[row.device]

    then, between two rows, interpolated in log(rate) over log(params); outside them the nearest
    row scaled by parameters, ``rate = rate_row x row.params / params`` (time per token grows with
    the weights read)."""
    import math

    rows = list(table) if table is not None else [*measured_rates(), *THROUGHPUT]
    gpu_rows = [r for r in rows if r.device in GPU_BANDWIDTH]
    pool = [r for r in gpu_rows if r.engine == engine] or gpu_rows
    pool = [r for r in pool if r.measured] or pool
    bw = GPU_BANDWIDTH.get(gpu, GPU_BANDWIDTH[DEFAULT_GPU])
    pts = sorted((r.params, r.tokens_per_s * bw / GPU_BANDWIDTH[r.device], r) for r in pool)
    below = [p for p in pts if p[0] <= params]
    above = [p for p in pts if p[0] >= params]
    if below and above and below[-1][0] != above[0][0]:
        (p0, r0, a), (p1, r1, b) = below[-1], above[0]
        w = math.log(params / p0) / math.log(p1 / p0)
        rate = math.exp((1 - w) * math.log(r0) + w * math.log(r1))
        ends = a.source if a.source == b.source else f"between {a.source} and {b.source}"   # one table: named once
        return rate, (f"{ends} (moved to {gpu} by bandwidth, interpolated in log-log over parameters between "
                      f"{p0 / 1e9:.3g}B and {p1 / 1e9:.3g}B)")
    p0, r0, row = below[-1] if below else above[0]
    how = "" if (p0, row.device) == (params, gpu) else \
        f" (scaled from {p0 / 1e9:.3g}B on {row.device} by parameters and bandwidth)"
    return r0 * p0 / params, f"{row.source}{how}"


def rate_for(rates, model_name: str):
    """``design.tokens_per_s`` (esopt.design): one number for every model, or {model name: rate} (``default``: the rest)."""
    if isinstance(rates, dict):
        return rates.get(model_name, rates.get("default"))
    return rates


def run_cost(plan, gpu: str = DEFAULT_GPU, tokens_per_s=None, root=None, engine: str | None = None) -> dict:
    """What one run costs, in hours on its device (``"cpu"`` when its model asks the scheduler
    for no GPU, ``model.resources.gpus``; else ``gpu``'s GPU-hours, every GPU of the run counted):

        bound     = :func:`token_parts` eval + train + analysis (every completion at its budget)
        expected  = bound x :func:`generated_share` (recorded runs, or the algorithm's default)
        priced    = expected on an engine that batches continuously (vLLM: a finished sequence
                    frees its slot), the bound on one that decodes static batches (hf: a batch
                    runs until its longest completion stops)
        generate  = priced (eval + train) / rate;  analysis = priced analysis / rate
        train     = 6 x params x train_pass tokens x share / (bf16 peak x TRAIN_MFU)   (GPU only; on a CPU
                    the measured rate already holds GRPO's update)

    ``engine``: price at this engine instead of the run's (a plan composed with engine=hf where
    vLLM is missing prices the preset's vLLM). rate: ``tokens_per_s`` (``design.tokens_per_s`` (esopt.design), a
    number or per model name), else :func:`tokens_rate`. Returns {"device", "bound", "expected",
    "share_source", "hours": {generate, train, analysis}, "total", "bound_hours", "rate" (tokens/s),
    "rate_source", "sources" (of the training passes)}."""
    from esopt import engines, models

    eng = engines.ENGINES.get(engine) if engine else type(plan.engine_config)
    if eng is None:
        raise ValueError(f"unknown engine {engine!r} (known: {', '.join(engines.ENGINES)})")
    params = models.param_count(plan.model) or 0
    gpus = int(((plan.model.get("resources") or {}).get("gpus")) or 0)
    device = gpu if gpus else "cpu"
    parts = token_parts(plan)
    share, share_src = generated_share(plan, root)
    bound = parts["eval"] + parts["train"] + parts["analysis"]
    out = {"device": device, "bound": bound, "expected": int(bound * share), "share": share, "share_source": share_src,
           "hours": {"generate": float("nan"), "train": 0.0, "analysis": float("nan")}, "sources": []}
    if not params:
        out |= {"total": float("nan"), "bound_hours": float("nan"), "rate": float("nan"),
                "rate_source": "model size unknown"}
        return out
    rate, src = tokens_rate(plan, params, device, eng.name, tokens_per_s)
    priced = share if eng.continuous_batching else 1.0
    out["hours"]["generate"] = (parts["eval"] + parts["train"]) * priced / rate / 3600
    out["hours"]["analysis"] = parts["analysis"] * priced / rate / 3600
    out |= {"rate": rate, "rate_source": src}
    if device != "cpu" and parts["train_pass"]:
        flops = 6 * params * parts["train_pass"] * share
        out["hours"]["train"] = flops / (GPU_BF16_FLOPS.get(gpu, GPU_BF16_FLOPS[DEFAULT_GPU]) * TRAIN_MFU) / 3600
        out["sources"].append(f"training passes: 6 x params FLOPs a token at {TRAIN_MFU:g} of {gpu}'s bf16 peak "
                              "(assumed)")
    out["total"] = sum(out["hours"].values())
    out["bound_hours"] = bound / rate / 3600 + out["hours"]["train"] / share
    return out


def tokens_rate(plan, params: float, device: str, engine: str | None = None, tokens_per_s=None) -> tuple[float, str]:
    """Generated tokens a second of one rank of run ``plan`` (one GPU of kind ``device``, or
    ``"cpu"``: one process) for a model of ``params`` parameters, and the source: the one reading
    of the throughput table that the planner's prices (:func:`run_cost`), a Slurm job's hours
    and its ``sweep.max_job_hours`` check (:func:`wall_hours`) and the process group's timeout
    (:func:`collective_timeout`) share. ``tokens_per_s`` (``design.tokens_per_s`` (esopt.design), a number or per
    model name) when given; on a CPU :func:`cpu_tokens_per_s`; on a GPU :func:`gpu_rate` for
    ``engine`` (default the run's) over the table (docs/results/gpu.md's measured rows, else the
    published :data:`THROUGHPUT`)."""
    fixed = rate_for(tokens_per_s, plan.model["name"])
    if fixed:
        return float(fixed), "design.tokens_per_s"
    if device == "cpu":
        return cpu_tokens_per_s(plan, params)
    return gpu_rate(engine or type(plan.engine_config).name, params, device)


def wall_hours(plan, gpu: str = DEFAULT_GPU) -> float | None:
    """A run's wall-clock hours at its token bound, for a Slurm job's time limit: its
    :func:`run_cost` at the bound (``bound_hours``: every completion at its budget, analyses and
    training passes included, at :func:`tokens_rate`) over the GPUs its ranks use
    (``model.resources.gpus`` > 0, on ``gpu``), or on a CPU as it is; None for a model of
    unknown size:

        hours = bound_hours / gpus_used
    """
    from esopt import models

    if not models.param_count(plan.model):
        return None
    hours = run_cost(plan, gpu)["bound_hours"]
    gpus = int(((plan.model.get("resources") or {}).get("gpus")) or 0)
    return hours / max(1, plan.layout.gpus_used or gpus) if gpus else hours
