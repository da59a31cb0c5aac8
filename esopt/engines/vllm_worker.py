"""ES and weight sync inside vLLM workers: a worker extension class plus the driver-side adapter.

vLLM runs the model in a worker process; esopt's weight operations run there, on the worker's
``self.model_runner.model``, called from the driver through ``LLM.collective_rpc``. The engine
(``esopt.engines.vllm``) builds ``LLM(..., worker_extension_cls=
"esopt.engines.vllm_worker.ESWorkerExtension", enable_prefix_caching=False)`` (a KV cache
computed under one ES perturbation must never serve another) and drives it with
:class:`VLLMWeights`.

Hugging Face names, vLLM layout
    vLLM fuses q/k/v into ``qkv_proj`` (rows ``cat([q, k, v])``), gate/up into ``gate_up_proj``
    (rows ``cat([gate, up])``), pads the vocabulary rows of ``embed_tokens`` / ``lm_head`` and
    drops a tied ``lm_head``. :func:`hf_views` turns the worker's parameters into
    ``(HF name, view)`` pairs: row slices of the fused tensors (``qkv_proj.weight[:q]`` is
    ``q_proj.weight``, ...), the first ``vocab`` rows of the embedding, every other tensor as is.
    Row slices of a contiguous tensor are contiguous views, so ``esopt.noise`` perturbs, restores
    and updates them in place, unchanged, and the noise of a member seed is keyed by the same
    names as on the hf engine: the same seeds give the same weights on both engines, bitwise.
    ``esopt_load`` / ``esopt_save`` copy an HF state dict (a safetensors file) into / out of those
    views (``Engine.sync_from`` / ``sync_to``). Tensor parallelism is not supported (one engine
    per GPU, as in the study): every tensor lives whole in the one worker.

CPU: keeping the weights live ("no-pack" mode)
    vLLM's CPU build repacks every linear weight for oneDNN after loading and leaves empty
    parameters behind, so in-place edits would not reach the matmuls. When this module is
    imported in a CPU worker (vLLM imports the extension before it loads the model) it replaces
    ``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`` so that every linear layer
    (and the lm_head) runs ``torch.nn.functional.linear`` on its live parameter. This is on by
    default on CPU; ``ESOPT_VLLM_CPU_PREPACK=1`` keeps vLLM's repacking (faster generation;
    evaluation only: ES and weight sync then refuse with an error). GPU vLLM never repacks, and
    in-place edits keep CUDA graphs valid (their captured pointers do not move).

vllm itself is imported lazily; this module imports without it.
"""

from __future__ import annotations

import os
import torch

from esopt.engines.weights import Weights

PREPACK_ENV = "ESOPT_VLLM_CPU_PREPACK"


def _keep_cpu_weights_live() -> bool:
    """Patch vLLM's CPU GEMM dispatch (see module doc); True if the patch is in place."""
    if os.environ.get(PREPACK_ENV, "") not in ("", "0"):
        return False
    try:
        from vllm.platforms import current_platform
        import vllm.model_executor.layers.utils as vllm_utils
    except Exception:  # noqa: BLE001 - vllm absent (the driver side imports this module too)
        return False
    if not current_platform.is_cpu():
        return False

    def plain_linear(layer, remove_weight):  # noqa: ARG001 - vLLM's signature
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)

    vllm_utils.dispatch_cpu_unquantized_gemm = plain_linear
    return True


NO_PACK = _keep_cpu_weights_live()


# --- CPU multi-LoRA: one GEMM over every adapter slot instead of per-token weight copies ------
def _slots(weights: torch.Tensor) -> torch.Tensor:
    return weights.squeeze(1) if weights.dim() == 4 else weights  # [L, rows, cols]


def _shrink(inputs, lora_a, idx, dtype):
    """``x_t @ A[idx_t]^T`` for every token t: ``[T, r]``. One ``[T, n] x [n, L*r]`` GEMM over all
    L adapter slots, then each token's slot is picked (vLLM's CPU op gathers a per-token copy of
    the adapter, ``[T, r, n]``: in a prefill of thousands of tokens that copy is the cost)."""
    w = _slots(lora_a).to(dtype)  # [L, r, n]
    n_slots, r, n = w.shape
    full = inputs.to(dtype) @ w.reshape(n_slots * r, n).t()  # [T, L*r]
    idx = (idx.long() % n_slots).view(-1, 1, 1).expand(-1, 1, r)  # negative indices as Python's
    return full.view(-1, n_slots, r).gather(1, idx).squeeze(1)


def _placed(inputs, n_slots: int, r: int, idx, dtype):
    """``[T, L*r]``: each token's inputs in its adapter slot's columns, zeros elsewhere."""
    x = inputs.to(dtype)
    placed = torch.zeros(x.shape[0], n_slots, r, dtype=dtype, device=x.device)
    placed.scatter_(1, (idx.long() % n_slots).view(-1, 1, 1).expand(-1, 1, r), x[:, None, :r])
    return placed.view(x.shape[0], n_slots * r)


def _expand_into(out, inputs, lora_b, idx, add: bool) -> None:
    """``out[t] (+)= B[idx_t] @ x_t`` for every token t, as one GEMM of the tokens' inputs placed
    in their slot's columns with all slots' B stacked, accumulated into ``out`` in place."""
    w = _slots(lora_b).to(out.dtype)  # [L, out, r]
    n_slots, width, r = w.shape
    placed = _placed(inputs, n_slots, r, idx, out.dtype)
    stacked = w.transpose(1, 2).reshape(n_slots * r, width)
    rows = placed.shape[0]
    if rows == 1 and out.shape[0] != 1:  # vLLM's broadcast of a single row
        placed, rows = placed.expand(out.shape[0], -1), out.shape[0]
    cols = min(width, out.shape[1])
    target = out[:rows, :cols]
    if add:
        target.addmm_(placed, stacked[:, :cols])
    else:
        torch.mm(placed, stacked[:, :cols], out=target) if target.is_contiguous() else \
            target.copy_(placed @ stacked[:, :cols])


def bgmv_shrink(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling: float = 1.0):
    outputs = _shrink(inputs, lora_a_weights, lora_indices_tensor, output_tensor.dtype)
    output_tensor[:, : outputs.shape[1]] = scaling * outputs


def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs: bool = True):
    _expand_into(output_tensor, inputs, lora_b_weights, lora_indices_tensor, add_inputs)


def bgmv_expand_slice(inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset: int,
                      slice_size: int, add_inputs: bool = True):
    _expand_into(output_tensor[:, slice_offset:slice_offset + slice_size], inputs, lora_b_weights,
                 lora_indices_tensor, add_inputs)


def _fast_cpu_lora() -> bool:
    """On a CPU worker, replace vLLM's torch LoRA ops (``vllm.lora.ops.torch_ops``, which the CPU
    punica wrapper and its sgmv ops call) with the GEMM forms above: the same sums in another
    order. ``ESOPT_VLLM_CPU_LORA_OPS=vllm`` keeps vLLM's."""
    if os.environ.get("ESOPT_VLLM_CPU_LORA_OPS", "") == "vllm":
        return False
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return False
        import vllm.lora.ops.torch_ops.lora_ops as ops
        import vllm.lora.punica_wrapper.punica_cpu as punica_cpu
    except Exception:  # noqa: BLE001 - vllm absent, or another layout: vLLM's own ops stay
        return False
    for name, fn in (("bgmv_shrink", bgmv_shrink), ("bgmv_expand", bgmv_expand),
                     ("bgmv_expand_slice", bgmv_expand_slice)):
        if not hasattr(ops, name):
            return False
    for mod in (ops, punica_cpu):
        for name, fn in (("bgmv_shrink", bgmv_shrink), ("bgmv_expand", bgmv_expand),
                         ("bgmv_expand_slice", bgmv_expand_slice)):
            if hasattr(mod, name):
                setattr(mod, name, fn)
    return True


FAST_CPU_LORA = _fast_cpu_lora()


def _split_sizes(module, parts: int) -> list[int]:
    """Row counts of the HF tensors fused into ``module`` (``output_sizes`` of vLLM's
    QKVParallelLinear / MergedColumnParallelLinear, one tensor-parallel rank)."""
    sizes = list(getattr(module, "output_sizes", []) or [])
    if len(sizes) != parts:
        raise RuntimeError(f"cannot split {type(module).__name__}: output_sizes {sizes}, {parts} parts")
    return [int(s) for s in sizes]


def hf_views(model, vocab_size: int) -> list[tuple[str, torch.Tensor]]:
    """The worker model's parameters as ``(Hugging Face name, view)`` pairs (module doc).

    ``vocab_size`` is the HF config's; embedding / lm_head rows beyond it (vLLM's padding) are
    left out. Raises if a fused tensor cannot be split or a weight was repacked away.
    """
    packed = dict(getattr(model, "packed_modules_mapping", None) or {})
    modules = dict(model.named_modules())
    out: list[tuple[str, torch.Tensor]] = []
    for name, p in model.named_parameters():
        data = p.data
        if data.numel() == 0:
            raise RuntimeError(
                f"vLLM parameter {name} is empty: its weight was repacked for the CPU kernels "
                f"({PREPACK_ENV}=1?); ES and weight sync need live weights")
        name = name.replace(".base_layer.", ".")  # LoRA on: vLLM wraps each layer (its weight: base_layer)
        module_name, _, leaf = name.rpartition(".")
        parent, _, short = module_name.rpartition(".")
        if short in packed:
            parts = packed[short]
            start = 0
            module = modules[module_name]
            module = getattr(module, "base_layer", module)  # LoRA's wrapper holds the fused layer
            for part, rows in zip(parts, _split_sizes(module, len(parts))):
                out.append((f"{parent}.{part}.{leaf}", data[start:start + rows]))
                start += rows
            if start != data.shape[0]:
                raise RuntimeError(f"{name}: split sizes cover {start} of {data.shape[0]} rows")
        elif name.endswith(("embed_tokens.weight", "lm_head.weight")) and data.shape[0] > vocab_size:
            out.append((name, data[:vocab_size]))
        else:
            out.append((name, data))
    for n, v in out:
        if not v.is_contiguous():
            raise RuntimeError(f"view of {n} is not contiguous")
    return out


class ESWorkerExtension:
    """Mixed into vLLM's worker class; ``self.model_runner.model`` is the worker's nn.Module."""

    def _es(self) -> Weights:
        if getattr(self, "_es_weights", None) is None:
            self._es_weights = Weights(self._views())  # row views, not whole Parameters: in place
        return self._es_weights

    def _views(self) -> list[tuple[str, torch.Tensor]]:
        hf_config = self.model_runner.model_config.hf_config
        vocab = int(getattr(hf_config.get_text_config(), "vocab_size", 0) or 0)
        return hf_views(self.model_runner.model, vocab)

    # --- ES (esopt.engines.weights.Weights, keyed by HF names) ----------------------------
    def es_perturb(self, member_seed: int, sigma: float, sign: float = 1.0, rank: int | None = None,
                   targets: str = "all") -> int:
        """Perturb in place; returns the bytes held for the exact restore."""
        return self._es().perturb(member_seed, sigma, sign, rank, targets)

    def es_restore(self) -> None:
        self._es().restore()

    def es_update(self, seeds: list[int], weights: list[float], lr: float, rank: int | None = None,
                  n: int | None = None, targets: str = "all") -> float:
        return self._es().update(seeds, weights, lr, rank, n, targets)

    @torch.no_grad()
    def es_write_adapters(self, root: str, members: list[tuple[int, float]], sigma: float, rank: int) -> list[str]:
        """Write one LoRA adapter folder per member under ``root`` (``esopt.engines.lora``): the
        member's low-rank perturbation of every linear layer, drawn here, on the worker's
        device, from the same HF-named views the update uses (the same noise as ES's)."""
        from pathlib import Path

        from esopt.engines import lora

        params = self._es().params
        gen = torch.Generator(device=params[0][1].device)
        out = []
        for k, (seed, sign) in enumerate(members):
            fac = lora.member_factors(params, int(seed), float(sign), float(sigma), int(rank), gen)
            out.append(str(lora.write_adapter(Path(root) / f"member{k}", fac, int(rank))))
        return out

    def esopt_lora_unreached(self) -> str | None:
        """The first linear layer (HF module name) that no LoRA-carrying vLLM module covers
        (fused q/k/v and gate/up count for their parts); None when LoRA reaches them all."""
        from esopt.engines import lora

        mods = set(self.esopt_lora_modules() or [])
        packed = dict(getattr(self.model_runner.model, "packed_modules_mapping", None) or {})
        part_of = {part: fused for fused, parts in packed.items() for part in parts}
        for name, _ in lora.select(self._es().params, "linear"):
            module = name[: -len(".weight")]
            parent, _, short = module.rpartition(".")
            if f"{parent}.{part_of.get(short, short)}" not in mods:
                return module
        return None

    def esopt_lora_modules(self) -> list[str] | None:
        """Names of the worker model's modules that carry LoRA (None: LoRA is off)."""
        mgr = getattr(self.model_runner, "lora_manager", None)
        if mgr is None:
            return None
        inner = getattr(mgr, "_adapter_manager", mgr)
        return sorted(getattr(inner, "modules", {}) or {})

    def es_anchor(self, decay: float) -> float:
        return self._es().anchor(decay)

    def es_checksum(self) -> int:
        return self._es().checksum()

    def es_nonfinite(self) -> str | None:
        return self._es().nonfinite()

    def es_snapshot_base(self) -> None:
        self._es().snapshot_base()

    def es_drift(self) -> tuple[float, float] | None:
        """``(||theta - theta_0||^2, ||theta_0||^2)`` (None without a snapshot)."""
        w = self._es()
        d = w.drift()
        return None if d is None else ((d * w.base_norm) ** 2, w.base_norm ** 2)

    # --- layout and weight sync (safetensors files, HF names) ----------------------------
    def esopt_layout(self) -> list[tuple[str, list[int], str]]:
        """``(HF name, shape, dtype)`` of every tensor the worker exposes."""
        return [(n, list(v.shape), str(v.dtype).removeprefix("torch.")) for n, v in self._es().params]

    def esopt_no_pack(self) -> bool:
        """Whether this worker's CPU linear layers run on the live weights (module doc)."""
        return NO_PACK

    def esopt_save(self, path: str) -> None:
        """Write the weights, under HF names, to the safetensors file ``path`` (host copies)."""
        from safetensors.torch import save_file

        save_file({n: v.detach().to("cpu", copy=True) for n, v in self._es().params}, path)

    @torch.no_grad()
    def esopt_load(self, path: str) -> None:
        """Copy the HF-named tensors of the safetensors file ``path`` into the live weights,
        bitwise (a cast when dtypes differ). Every tensor must be present with its shape; a
        pending perturbation is dropped (the weights are replaced)."""
        from safetensors.torch import load_file

        saved = load_file(path)
        w = self._es()
        params = dict(w.params)
        missing = sorted(set(params) - set(saved))
        unexpected = sorted(set(saved) - set(params))
        if missing or unexpected:
            raise KeyError(f"weights do not match the vLLM model: missing {missing[:3]}, unexpected {unexpected[:3]}")
        for name, view in params.items():
            t = saved[name]
            if tuple(t.shape) != tuple(view.shape):
                raise ValueError(f"{name}: shape {tuple(t.shape)} does not match the vLLM model's {tuple(view.shape)}")
            view.copy_(t.to(view.device))
        w.discard()

    def esopt_reset(self) -> None:
        """Forget a pending perturbation and the drift reference (a reused engine, new run)."""
        w = self._es()
        w.discard()
        w.base, w.base_norm = None, None


class VLLMWeights:
    """Driver side: ES's ``WeightOps`` (``esopt.engines.base``) over ``llm.collective_rpc``.

    One worker (no tensor parallelism), so every call returns that worker's answer.
    """

    def __init__(self, llm):
        self.llm = llm

    def _rpc(self, method: str, *args):
        return self.llm.collective_rpc(method, args=tuple(args))[0]

    def perturb(self, member_seed: int, sigma: float, sign: float = 1.0, rank: int | None = None,
                targets: str = "all") -> int:
        return int(self._rpc("es_perturb", int(member_seed), float(sigma), float(sign), rank, targets))

    def restore(self) -> None:
        self._rpc("es_restore")

    def update(self, seeds, weights, lr: float, rank: int | None = None, n: int | None = None,
               targets: str = "all") -> float:
        return float(self._rpc("es_update", [int(s) for s in seeds], [float(w) for w in weights], float(lr),
                               rank, n, targets))

    def anchor(self, decay: float) -> float:
        return float(self._rpc("es_anchor", float(decay)))

    def checksum(self) -> int:
        return int(self._rpc("es_checksum"))

    def nonfinite(self) -> str | None:
        return self._rpc("es_nonfinite")

    def snapshot_base(self) -> None:
        self._rpc("es_snapshot_base")

    def drift(self) -> float | None:
        part = self._rpc("es_drift")
        if part is None:
            return None
        return float((part[0] / max(part[1], 1e-60)) ** 0.5)
