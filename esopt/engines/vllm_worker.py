"""ES inside vLLM workers: a worker extension class plus the driver-side adapter.

vLLM runs the model in worker processes; the ES weight operations (esopt.noise) run there, on
``self.model_runner.model.named_parameters()``, called from the driver through
``LLM.collective_rpc``. Build the engine with::

    LLM(model=..., worker_extension_cls="esopt.engines.vllm_worker.ESWorkerExtension",
        enable_prefix_caching=False)     # a KV cache from one perturbation must not serve another

and drive it with :class:`VLLMWeights` (what ``VLLMEngine.weights()`` returns).
In-place edits keep CUDA graphs valid (their captured pointers do not move).

Names: vLLM fuses q/k/v into ``qkv_proj`` and gate/up into ``gate_up_proj`` (and may pad the
vocabulary), so its parameter names and shapes differ from Hugging Face's. Noise is seeded by
the vLLM names, so an ES run on vLLM is reproducible on vLLM, not bitwise on the hf engine, and
its checkpoints hold vLLM tensors (``es_save``), not an HF ``save_pretrained`` directory. With
tensor parallelism every shard seeds with ``name@tp<rank>`` so shards get independent noise.

vllm itself is imported lazily (only for the tensor-parallel rank); this module imports on CPU.
"""

from __future__ import annotations

from pathlib import Path

from esopt import noise


def _tp_rank() -> tuple[int, int]:
    try:
        from vllm.distributed import parallel_state as ps

        return ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()
    except Exception:  # noqa: BLE001 - vllm absent or not initialised: one shard
        return 0, 1


class ESWorkerExtension:
    """Mixed into vLLM's worker class; ``self.model_runner.model`` is the worker's nn.Module."""

    def _es(self) -> noise.Weights:
        if getattr(self, "_es_weights", None) is None:
            rank, world = _tp_rank()
            self._es_weights = noise.Weights(self.model_runner.model.named_parameters(),
                                             shard=f"@tp{rank}" if world > 1 else "")
        return self._es_weights

    def es_perturb(self, member_seed: int, sigma: float, sign: float = 1.0, rank: int | None = None) -> int:
        """Perturb in place; returns the bytes held for the exact restore."""
        return self._es().perturb(member_seed, sigma, sign, rank)

    def es_restore(self) -> None:
        self._es().restore()

    def es_update(self, seeds: list[int], weights: list[float], lr: float, rank: int | None = None,
                  n: int | None = None, threads: int = 1) -> float:
        return self._es().update(seeds, weights, lr, rank, n, threads=threads)

    def es_checksum(self) -> int:
        return self._es().checksum()

    def es_nonfinite(self) -> str | None:
        return self._es().nonfinite()

    def es_snapshot_base(self) -> None:
        self._es().snapshot_base()

    def es_drift(self) -> tuple[float, float] | None:
        """``(||theta - theta_0||^2, ||theta_0||^2)`` of this shard (None without a snapshot)."""
        w = self._es()
        d = w.drift()
        return None if d is None else ((d * w.base_norm) ** 2, w.base_norm ** 2)

    def es_save(self, directory: str) -> str:
        """Write this shard's tensors to ``directory/es-shard-<tp rank>.safetensors``."""
        from safetensors.torch import save_file

        rank, _ = _tp_rank()
        path = Path(directory) / f"es-shard-{rank:03d}.safetensors"
        save_file({n: w.contiguous().cpu() for n, w in self._es().state_dict().items()}, str(path))
        return str(path)

    def es_load(self, directory: str) -> None:
        from safetensors.torch import load_file

        rank, _ = _tp_rank()
        self._es().load_state_dict(load_file(str(Path(directory) / f"es-shard-{rank:03d}.safetensors")))


class VLLMWeights:
    """Driver side: the ``noise.Weights`` interface over ``llm.collective_rpc``.

    Every worker returns its own value: shard checksums are summed (mod 2**63), update norms and
    drift are combined from the shards' squared norms, a non-finite report of any shard is returned.
    """

    def __init__(self, llm):
        self.llm = llm

    def _rpc(self, method: str, *args):
        return self.llm.collective_rpc(method, args=tuple(args))

    def perturb(self, member_seed: int, sigma: float, sign: float = 1.0, rank: int | None = None,
                prepared=None) -> int:
        if prepared is not None:
            raise ValueError("the vLLM workers perturb in place (no prefetch)")
        return sum(self._rpc("es_perturb", int(member_seed), float(sigma), float(sign), rank))

    def restore(self) -> None:
        self._rpc("es_restore")

    def update(self, seeds, weights, lr: float, rank: int | None = None, n: int | None = None,
               threads: int = 1) -> float:
        norms = self._rpc("es_update", [int(s) for s in seeds], [float(w) for w in weights], float(lr), rank, n,
                          int(threads))
        return float(sum(x * x for x in norms) ** 0.5)

    def checksum(self) -> int:
        return sum(int(c) for c in self._rpc("es_checksum")) % 2**63

    def nonfinite(self) -> str | None:
        return next((x for x in self._rpc("es_nonfinite") if x is not None), None)

    def snapshot_base(self) -> None:
        self._rpc("es_snapshot_base")

    def drift(self) -> float | None:
        parts = [p for p in self._rpc("es_drift") if p is not None]
        if not parts:
            return None
        return float((sum(p[0] for p in parts) / max(sum(p[1] for p in parts), 1e-60)) ** 0.5)

    def save(self, directory) -> None:
        self._rpc("es_save", str(directory))

    def load(self, directory) -> None:
        self._rpc("es_load", str(directory))
