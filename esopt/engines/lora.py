"""ES members as LoRA adapters: what a batched low-rank member perturbs, and the adapters that
express it (vLLM's multi-LoRA batching, ``esopt.engines.vllm``'s ``generate_population``).

A low-rank (EGGROLL) member perturbs a linear weight ``W`` (m x n) by
``c_i A B^T`` with ``A`` (m x r), ``B`` (n x r) the factors of
``esopt.noise.lowrank_factors(W, tensor_seed(s_i, name), r)`` and ``c_i = sign_i sigma / sqrt(r)``.
As a LoRA adapter (scaling ``lora_alpha / r`` = 1): ``lora_B = c_i A`` (m x r), ``lora_A = B^T``
(r x n), so ``x W^T + (x lora_A^T) lora_B^T`` is exactly the member's forward, as
``esopt.engines.population`` computes it on the hf engine.

Targets (``es.targets``)
    ``all``: every parameter (the hf engine's batched path: embeddings low rank, norms and
    biases full rank per member). ``linear``: the weights of the linear layers only
    (:func:`is_linear_target`: 2-D tensors other than the token embedding and the lm_head);
    embeddings, lm_head, norms and biases are left unperturbed and are not updated. That is
    what LoRA can express, so it is the only scope of engine=vllm's batched path; the hf
    engine offers it too, which makes both engines run the same ES.

vLLM is not imported here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

TARGETS = ("all", "linear")
# module names of 2-D parameters that are not linear layers (token / position embeddings, output head)
NOT_LINEAR = ("embed_tokens", "lm_head", "wte", "wpe", "embed_positions", "embed_out", "word_embeddings",
              "output_embeddings")
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM 0.32's allowed max_lora_rank values


def is_linear_target(name: str, shape: Sequence[int]) -> bool:
    """Whether parameter ``name`` (Hugging Face name) is a linear layer's weight matrix: what
    ``es.targets=linear`` perturbs and updates."""
    if len(shape) != 2 or not name.endswith(".weight"):
        return False
    module = name[: -len(".weight")].rpartition(".")[2]
    return module not in NOT_LINEAR


def select(params: Iterable[tuple[str, torch.Tensor]], targets: str | None) -> list[tuple[str, torch.Tensor]]:
    """The ``(name, tensor)`` pairs ``targets`` covers (``all`` / None: every one)."""
    items = list(params.items()) if isinstance(params, Mapping) else list(params)
    if targets in (None, "all"):
        return items
    if targets != "linear":
        raise ValueError(f"unknown targets {targets!r} (one of {', '.join(TARGETS)})")
    return [(n, w) for n, w in items if is_linear_target(n, w.shape)]


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds rank ``rank`` adapters."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"es.perturb_rank={rank} is above vLLM's largest LoRA rank {VLLM_LORA_RANKS[-1]}")


def linear_shapes(hf_config: Mapping) -> dict[str, tuple[int, int]]:
    """``(out, in)`` of a decoder layer's linear weights, from an HF config dict (Llama / Qwen2 /
    Mistral style names); {} when the config does not say."""
    c = dict(hf_config.get("text_config") or hf_config)
    h, inter = c.get("hidden_size"), c.get("intermediate_size")
    heads = c.get("num_attention_heads")
    if not (h and heads):
        return {}
    hd = c.get("head_dim") or h // heads
    kv = c.get("num_key_value_heads") or heads
    out = {"q_proj": (heads * hd, h), "k_proj": (kv * hd, h), "v_proj": (kv * hd, h), "o_proj": (h, heads * hd)}
    if inter:
        out |= {"gate_proj": (inter, h), "up_proj": (inter, h), "down_proj": (h, inter)}
    return out


def smallest_dim(hf_config: Mapping) -> int | None:
    """The smallest dimension of a decoder layer's linear weights (None when unknown)."""
    shapes = linear_shapes(hf_config)
    return min(min(s) for s in shapes.values()) if shapes else None


# --------------------------------------------------------------------------------------------
# Adapters
# --------------------------------------------------------------------------------------------
def member_factors(params: Sequence[tuple[str, torch.Tensor]], member_seed: int, sign: float, sigma: float,
                   rank: int, generator: torch.Generator | None = None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{name: (lora_A, lora_B)}`` of one member over the linear targets among ``params``:
    ``lora_B = c A`` (m x r), ``lora_A = B^T`` (r x n), in each tensor's dtype, with the
    arithmetic of ``esopt.engines.population`` (factors cast to the dtype, then times ``c`` =
    ``fl32(sign sigma) / sqrt(r)`` cast to the dtype)."""
    from esopt import noise

    scale = torch.tensor([float(sign)], dtype=torch.float32) * float(sigma)
    out = {}
    for name, w in select(params, "linear"):
        a, b = noise.lowrank_factors(w, noise.tensor_seed(member_seed, name), rank, generator)
        c = (scale.to(a.device) / math.sqrt(rank)).to(w.dtype)
        out[name] = (b.to(w.dtype).t().contiguous(), (a.to(w.dtype) * c).contiguous())
    return out


def write_adapter(path: Path, factors: Mapping[str, tuple[torch.Tensor, torch.Tensor]], rank: int) -> Path:
    """A PEFT LoRA adapter folder at ``path`` (adapter_config.json + adapter_model.safetensors)
    holding ``factors`` under their HF module names; scaling ``lora_alpha / r`` = 1."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    tensors, modules = {}, set()
    for name, (la, lb) in factors.items():
        module = name[: -len(".weight")]
        modules.add(module.rpartition(".")[2])
        tensors[f"base_model.model.{module}.lora_A.weight"] = la.detach().to("cpu")
        tensors[f"base_model.model.{module}.lora_B.weight"] = lb.detach().to("cpu")
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": int(rank), "lora_alpha": int(rank), "target_modules": sorted(modules),
        "bias": "none", "use_rslora": False, "use_dora": False, "modules_to_save": None,
        "task_type": "CAUSAL_LM"}))
    return path
