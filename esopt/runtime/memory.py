"""GPU memory of a run, estimated before it is queued: a plan that cannot fit is refused.

    est = estimate(plan)          # Estimate(parts in bytes per GPU, gpus, gpu_bytes), or None
    check(plan)                   # ConfigError, one line naming the numbers, when it does not fit

Per GPU, for ``algo=grpo`` on G processes (one per GPU), a model of P parameters, L layers,
hidden size h, vocabulary V, micro-batch b completions of T tokens (prompt allowance +
completion budget) per process, with S = G when the processes shard the model
(``grpo.sharding``, resolved by ``esopt.algorithms.grpo.sharding_of``: FSDP2 full_shard or
shard_grad_op) and S = 1 when each holds all of it (one process, or ``none``: DDP):

    masters      4 P / S     fp32 master weights (grpo.keep_masters), sharded by FSDP2
    gradients    4 P / S     fp32, reduce-scattered
    optimizer    8 P / S     AdamW's two fp32 moments
    reference    2 P / S     the KL reference model in bf16 (grpo.beta > 0 only)
    compute      2 P         the bf16 copy autocast keeps for a step (S = 1, and shard_grad_op,
                             which keeps the gathered parameters from forward to backward);
                             full_shard: two gathered layers, 2 x 2 P / L
    activations  34 b T h L  per layer in bf16 (Korthikanti et al. 2022, without the attention
                             scores: flash / SDPA attention); with gradient checkpointing
                             2 b T h L (each layer's input) + 34 b T h (one layer recomputed)
    logits       4 b T V     bf16 logits and their gradient (64 x 2,048 x 151,936 x 2 B = 40 GB)
    vllm         u M         a colocated vLLM's share u of the GPU's M bytes (engine.colocated_gpu_share;
                             grpo.use_vllm: TRL's vLLM; grpo.rollouts=engine: the run's engine)
    overhead     2 GB        CUDA context and the allocator's slack

``algo=es`` (and every rank of it) holds the weights in ``model.dtype`` inside its engine: an
engine that reserves a share u of the GPU up front (its config's ``gpu_share``: vLLM's
``engine.gpu_memory_utilization``) takes it for weights and KV cache, counted as
weights + max(weights, u M - weights) (the weights may take at most half of the share, the rest
is KV cache for the population's batches); the hf engine needs the weights plus the KV cache of
``engine.max_batch`` sequences (2 L kv_heads head_dim bytes x tokens each).

M is ``model.resources.gpu_mem_gb`` (80 by default: an A100 / H100 80 GB). A sequence's GRPO
phase is checked as GRPO. Runs without GPUs, and models whose architecture is not known here (a
hub name not in :data:`ARCH` and not on disk), are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from esopt import algorithms, models
from esopt.algorithms import grpo
from esopt.core.errors import ConfigError

GB = 1e9
GPU_MEM_GB = 80.0            # model.resources.gpu_mem_gb when unset
PROMPT_TOKENS = 256          # the prompt allowance of a GRPO sequence (GSM8K's chat prompt: ~150-200)
OVERHEAD = 2 * GB
ACT_PER_LAYER = 34           # bytes x b T h per transformer layer, bf16, no attention-score term
GPU_COUNTS = (1, 2, 4, 8)    # what a suggestion picks from: the GPUs of one node

# (layers, hidden, vocab, kv heads, head dim) of the registry's hub models, from their config.json
ARCH: dict[str, tuple[int, int, int, int, int]] = {
    "qwen0.5b": (24, 896, 151936, 2, 64), "qwen1.5b": (28, 1536, 151936, 2, 128),
    "qwen3b": (36, 2048, 151936, 2, 128), "qwen7b": (28, 3584, 152064, 4, 128),
    "llama1b": (16, 2048, 128256, 8, 64), "llama3b": (28, 3072, 128256, 8, 128),
    "llama8b": (32, 4096, 128256, 8, 128),
}


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU by part, the GPUs the run uses and each one's bytes."""

    parts: dict
    gpus: int
    gpu_bytes: float

    @property
    def total(self) -> float:
        return float(sum(self.parts.values()))

    @property
    def fits(self) -> bool:
        return self.total <= self.gpu_bytes

    def line(self) -> str:
        shown = ", ".join(f"{k} {v / GB:.1f}" for k, v in self.parts.items() if v)
        return f"{self.total / GB:.1f} GB per GPU ({shown}) on {self.gpus} x {self.gpu_bytes / GB:.0f} GB"


def arch(model_cfg) -> tuple[int, int, int, int, int] | None:
    """(layers, hidden, vocab, kv heads, head dim) of the run's model: its config.json when it
    is on disk, else :data:`ARCH` for a hub name; None when unknown."""
    cfg = models.local_config(model_cfg.get("name"), model_cfg.get("path"))
    if cfg:
        text = cfg.get("text_config") or cfg
        try:
            heads = int(text["num_attention_heads"])
            hd = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
            return (int(text["num_hidden_layers"]), int(text["hidden_size"]), int(text["vocab_size"]),
                    int(text.get("num_key_value_heads") or heads), hd)
        except (KeyError, TypeError, ValueError):
            return None
    return ARCH.get(str(model_cfg.get("name")))


def grpo_parts(params: int, shape, gpus: int, settings, max_len: int, gpu_bytes: float,
               dtype_bytes: int = 2, sharding: str | None = None, colocated: float = 0.3) -> dict:
    """Bytes per GPU of GRPO (module docstring), by part; ``sharding``: how the ``gpus``
    processes hold the model (None: full_shard when gpus > 1); ``colocated``: the GPU share of a
    vLLM beside training (the engine's ``colocated_gpu_share``), counted when one samples."""
    layers, hidden, vocab = shape[0], shape[1], shape[2]
    sharding = sharding or ("full_shard" if gpus > 1 else "none")
    shards = gpus if sharding != "none" else 1
    from esopt.algorithms.grpo import process_batches

    split = process_batches(settings, gpus)
    micro = split[0] if split else max(1, settings.micro_batch // gpus)  # completions per process per micro-batch
    tokens = micro * (PROMPT_TOKENS + max_len)
    if settings.gradient_checkpointing:
        act = 2 * tokens * hidden * layers + ACT_PER_LAYER * tokens * hidden
    else:
        act = ACT_PER_LAYER * tokens * hidden * layers
    return {
        "masters": 4 * params / shards, "gradients": 4 * params / shards, "optimizer": 8 * params / shards,
        "reference": 2 * params / shards if settings.beta > 0 else 0,
        "compute": 2 * dtype_bytes * params / layers if sharding == "full_shard" else dtype_bytes * params,
        "activations": act, "logits": 2 * dtype_bytes * tokens * vocab,
        "vllm": colocated * gpu_bytes if settings.use_vllm or settings.rollouts == "engine" else 0,
        "overhead": OVERHEAD,
    }


def es_parts(params: int, shape, engine_config, max_len: int, gpu_bytes: float, dtype_bytes: int) -> dict:
    """Bytes per GPU of an ES rank: its weights, and the KV cache an engine needs beside them."""
    layers, kv_heads, head_dim = shape[0], shape[3], shape[4]
    weights = dtype_bytes * params
    if engine_config.gpu_share is not None:  # vLLM: its share, of which the weights take at most half
        share = engine_config.gpu_share * gpu_bytes
        return {"weights": weights, "kv cache": max(weights, share - weights), "overhead": OVERHEAD}
    kv = 2 * layers * kv_heads * head_dim * dtype_bytes * max_len * int(engine_config.max_batch)
    return {"weights": weights, "kv cache": kv, "overhead": OVERHEAD}


def engines_hold_weights(engine_config) -> bool:
    """Whether the run's engine generates with its own copy of the weights (vLLM)."""
    from esopt import engines

    return bool(engines.engine_class(engine_config).holds_weights)


def estimate(plan, gpus: int | None = None) -> Estimate | None:
    """The run's per-GPU estimate on ``gpus`` GPUs (default: the GPUs its layout uses); None when
    it uses no GPU or its model's size or architecture is unknown here."""
    lay = plan.layout
    gpus = int(gpus if gpus is not None else lay.gpus_used)
    params = models.param_count(plan.model)
    shape = arch(plan.model)
    if gpus < 1 or not params or shape is None:
        return None
    res = plan.model.get("resources") or {}
    gpu_bytes = float(res.get("gpu_mem_gb") or GPU_MEM_GB) * GB
    dtype_bytes = 4 if models.DTYPES.get(plan.model.get("dtype", "float32")) == models.DTYPES["float32"] else 2
    budget = plan.task_spec.max_new_tokens
    best: dict | None = None
    for phase in plan.phases:
        entry = algorithms.get(phase.algo)
        if entry.master_weights:
            max_len = int(phase.settings.max_completion_length or budget)
            sharding = grpo.sharding_of(phase.settings, gpus if entry.multi_rank else 1, True,
                                        engines_hold_weights(plan.engine_config))
            parts = grpo_parts(params, shape, gpus, phase.settings, max_len, gpu_bytes, sharding=sharding,
                               colocated=plan.engine_config.colocated_gpu_share)
        else:
            per_rank = max(1, gpus // max(1, lay.ranks))
            parts = {k: v / per_rank for k, v in es_parts(params, shape, plan.engine_config,
                                                          PROMPT_TOKENS + budget, gpu_bytes, dtype_bytes).items()}
        if best is None or sum(parts.values()) > sum(best.values()):
            best = parts
    return None if best is None else Estimate(best, gpus, gpu_bytes)


def suggest(plan) -> int | None:
    """The fewest GPUs of :data:`GPU_COUNTS` on which the run's estimate fits (None: none)."""
    for g in GPU_COUNTS:
        est = estimate(plan, g)
        if est is not None and est.fits:
            return g
    return None


def check(plan) -> None:
    """Refuse, before anything is queued, a run whose estimate exceeds its GPUs' memory: one
    line naming the estimate by part and what would hold it."""
    est = estimate(plan)
    if est is None or est.fits:
        return
    head = f"algo={plan.algo} model={plan.model.get('name')} does not fit: {est.line()}"
    if not any(algorithms.get(p.algo).master_weights for p in plan.phases):
        raise ConfigError(f"{head}; its weights and KV cache need a GPU with more memory "
                          "(model.resources.gpu_mem_gb) or a smaller model")
    g = suggest(plan)
    if not algorithms.get(plan.algo).multi_rank:
        g, sharded = None, f"algo={plan.algo} runs as one process"
    elif g is None:
        sharded = "it does not fit on 8 GPUs either" + (
            "" if engines_hold_weights(plan.engine_config) else " (engine=hf: replicated, unsharded; engine=vllm shards)")
    else:
        sharded = f"on model.resources.gpus={g} it would take {estimate(plan, g).total / GB:.1f} GB each"
    state = sum(est.parts[k] for k in ("masters", "gradients", "optimizer"))
    if state + est.parts["overhead"] > est.gpu_bytes:
        raise ConfigError(f"{head}; its fp32 weights, gradients and AdamW state alone take {state / GB:.1f} GB; "
                          f"{sharded}" + ("" if g is not None and algorithms.get(plan.algo).multi_rank
                                          else ": use a smaller model"))
    raise ConfigError(f"{head}; {sharded}: lower the completions per micro-batch (raise grpo.grad_accum), set "
                      "grpo.gradient_checkpointing=true, lower engine.colocated_gpu_share, or use a smaller model")
