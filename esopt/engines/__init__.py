"""Generation engines: one interface, two back ends.

    engine = esopt.engines.get(cfg.engine, model, tokenizer)
    gen = engine.generate(prompts, n=32, temperature=0.6, max_new_tokens=24, seed=0)
    gen.completions[p][s]      # text of sample s for prompt p (no prompt / pad / EOS)

`hf` (engines/hf.py) runs Hugging Face `generate` on CPU or GPU; `vllm` (engines/vllm.py) is a
thin adapter over vLLM for GPU runs (optional extra). Both return a `Generation`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from esopt.config import ConfigError

ENGINE_NAMES = ("hf", "vllm")


@dataclass
class Generation:
    completions: list[list[str]]  # [prompt][sample], decoded, without prompt / pad / EOS
    token_ids: list[list[list[int]]]  # generated ids per sample (EOS excluded)
    lengths: list[list[int]]  # generated token count per sample (EOS included)
    entropy: list[list[float]] | None  # per-sample token-mean entropy (nats) if requested
    n_tokens: int  # total generated tokens (sum of lengths)


class Engine(Protocol):
    model: object
    tokenizer: object
    device: torch.device
    max_batch: int

    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 32,
        seed: int = 0,
        stop: Sequence[str] = (),
        return_entropy: bool = False,
    ) -> Generation: ...

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]: ...


def get(cfg: Mapping, model, tokenizer) -> Engine:
    """Build the engine named by cfg["name"] ("hf" | "vllm") from the engine config dict."""
    name = cfg.get("name", "hf")
    if name == "hf":
        from esopt.engines.hf import HFEngine

        return HFEngine(model, tokenizer, device=cfg.get("device", "auto"), max_batch=int(cfg.get("max_batch", 256)))
    if name == "vllm":
        from esopt.engines.vllm import VLLMEngine

        return VLLMEngine.from_config(cfg, model, tokenizer)
    raise ConfigError(f"unknown engine {name!r}; known engines: {', '.join(ENGINE_NAMES)}")
