"""ES's weight operations bound to one set of live tensors (``WeightOps`` of esopt.engines.base):
an HF model's parameters (engine=hf) or the HF-named views inside a vLLM worker.

    ops = Weights(model.named_parameters())
    ops.perturb(seed, sigma, sign)      # theta_i = theta + sign * sigma * eps(seed)
    ...generate...
    ops.restore()                       # back to theta, bitwise
    ops.update(seeds, z * signs, lr)    # theta += lr / N * sum_i z_i sign_i eps_i
    ops.anchor(decay)                   # theta -= decay * (theta - theta_0)  (es.anchor_decay)

How a member is held (the arithmetic is ``esopt.noise``'s either way, so both give the same bits):

swap
    When every tensor is a whole ``nn.Parameter`` of one dtype in host memory (an HF model on
    the CPU), the member's tensors are ``noise.perturbed`` into one flat buffer allocated once,
    each parameter is pointed at its slice (``param.data = ...``), and ``restore`` points it back
    at the original tensors, which were never written: the exact restore costs nothing. Cost: one
    extra copy of the weights. It saves the in-place path's second noise draw and bit checks:
    on whole ES iterations (hf, pop 16, 32 Countdown prompts, 2-core CPU, side by side; issue
    30) tiny-2xl took 0.78 [q1 0.72 - q3 0.88] of the in-place CPU time, tiny-s 0.93; the
    benchmark's ``inplace_over_swap`` row keeps measuring it (benchmarks/bench_es.py). A
    weight-sized buffer allocated per member instead of reused made glibc raise its mmap
    threshold and keep later allocations on the heap (tiny-2xl: +90 MB peak RSS, not +24 MB).
in place
    Otherwise (vLLM's fused tensors are seen through row views; on a GPU the extra copy would
    compete with the KV cache for memory): ``noise.perturb`` in place with sparse fix-ups, and
    ``noise.restore``.

``shard`` is appended to every tensor name when seeding (tensor-parallel shards of one tensor
must not share noise); ``""`` for unsharded models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from esopt import noise


class Weights:
    """perturb / restore / update / checksum / drift on live tensors, holding the pending
    member and, optionally, a host copy of the base weights for the drift diagnostic."""

    def __init__(self, named_params: noise.Params, shard: str = "", swap: bool | None = None):
        """``swap``: hold members by swapping (module docstring); None = whenever possible."""
        self.params = noise._items(named_params)
        self.shard = shard
        can_swap = (bool(self.params) and all(isinstance(w, torch.nn.Parameter) for _, w in self.params)
                    and len({w.dtype for _, w in self.params}) == 1
                    and all(w.device.type == "cpu" for _, w in self.params))
        if swap and not can_swap:
            raise ValueError("swap needs whole nn.Parameters of one dtype in host memory")
        self.swap = can_swap if swap is None else bool(swap)
        self._fixups: noise.RestoreState | None = None      # in place: the pending member's fix-ups
        self._perturbed: list[tuple[str, torch.Tensor]] = []  # in place: the tensors it perturbed
        self._originals: list[torch.Tensor] | None = None   # swap: the tensors the parameters held
        self._buffer: torch.Tensor | None = None            # swap: the member's flat buffer, made once
        self.base: dict[str, torch.Tensor] | None = None
        self.base_norm: float | None = None

    def _named(self) -> list[tuple[str, torch.Tensor]]:
        return [(n + self.shard, w) for n, w in self.params] if self.shard else self.params

    @property
    def pending(self) -> bool:
        """Whether a member is perturbed in and not yet restored."""
        return self._fixups is not None or self._originals is not None

    def _select(self, targets: str) -> list[tuple[str, torch.Tensor]]:
        """The seed-named tensors ``targets`` covers (``esopt.engines.lora``), selected by HF name."""
        named = self._named()
        if targets == "all":
            return named
        from esopt.engines import lora

        keep = {n for n, _ in lora.select(self.params, targets)}
        return [(sn, w) for (n, _), (sn, w) in zip(self.params, named) if n in keep]

    @torch.no_grad()
    def perturb(self, member_seed: int, sigma: float, sign: float = 1.0, rank: int | None = None,
                targets: str = "all") -> int:
        """``theta <- fl(theta + sign * sigma * eps(member_seed))``; returns the bytes held for the
        restore beyond the weights themselves (the fix-ups; swap: the member buffer).
        ``targets``: as in ``update`` (a subset: in-place mode only)."""
        if self.pending:
            raise RuntimeError("perturb called twice without restore")
        if targets != "all" and self.swap:
            raise ValueError("perturbing a subset of the weights needs the in-place mode (swap=False)")
        if not self.swap:
            self._perturbed = self._select(targets)
            self._fixups = noise.perturb(self._perturbed, member_seed, sigma, sign, rank)
            return self._fixups.nbytes
        if self._buffer is None:
            w0 = self.params[0][1]
            self._buffer = torch.empty(sum(w.numel() for _, w in self.params), dtype=w0.dtype, device=w0.device)
        member = noise.perturbed(self._named(), member_seed, sigma, sign, rank, out=self._buffer)
        self._originals = [w.data for _, w in self.params]
        for new, (_, w) in zip(member, self.params):
            w.data = new
        return self._buffer.numel() * self._buffer.element_size()

    @torch.no_grad()
    def restore(self) -> None:
        """Back to the weights before ``perturb``, bitwise."""
        if not self.pending:
            raise RuntimeError("restore called without a pending perturbation")
        if self._originals is not None:
            for original, (_, w) in zip(self._originals, self.params):
                w.data = original
            self._originals = None
        else:
            noise.restore(self._perturbed, self._fixups)
            self._fixups = None

    def discard(self) -> None:
        """Forget a pending member without restoring it (the weights were replaced wholesale).
        A swapped member is undone all the same: its parameters point back at their tensors."""
        if self._originals is not None:
            self.restore()
        self._fixups = None

    def update(self, seeds: Sequence[int], weights: Sequence[float], lr: float, rank: int | None = None,
               n: int | None = None, targets: str = "all") -> float:
        """``theta += (lr / N) * sum_i weights_i * eps(seeds_i)`` (``noise.update``); the step's norm.
        ``targets``: ``all`` tensors, or ``linear`` (the linear layers' weights only,
        ``esopt.engines.lora``: what a LoRA member perturbs)."""
        if self.pending:
            raise RuntimeError("update with a pending perturbation")
        return noise.update(self._select(targets), seeds, weights, lr, rank, n)

    def anchor(self, decay: float) -> float:
        """``theta <- theta - decay (theta - theta_0)`` toward the snapshot (``noise.anchor``);
        the pull's norm. Needs :meth:`snapshot_base` first."""
        if self.pending:
            raise RuntimeError("anchor with a pending perturbation")
        if self.base is None:
            raise RuntimeError("anchor needs snapshot_base() first")
        return noise.anchor(self.params, self.base, decay)

    def checksum(self) -> int:
        return noise.checksum(self.params)

    def nonfinite(self) -> str | None:
        """Name of the first tensor holding a NaN or inf, or None."""
        for name, w in self.params:
            if not bool(torch.isfinite(w).all()):
                return name
        return None

    def snapshot_base(self) -> None:
        """Keep a host (CPU) copy of the current weights as the drift reference."""
        self.base = {n: w.detach().to("cpu", copy=True) for n, w in self.params}
        self.base_norm = noise.l2_norm(self.base)

    def drift(self) -> float | None:
        """Relative L2 drift ``||theta - theta_0|| / ||theta_0||`` (None without a snapshot)."""
        if self.base is None:
            return None
        return noise.l2_distance(self.params, self.base) / max(self.base_norm, 1e-30)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {n: w.detach() for n, w in self.params}

    @torch.no_grad()
    def load_state_dict(self, saved: Mapping[str, torch.Tensor]) -> None:
        """Copy saved tensors into the live parameters, bitwise; every parameter must be present."""
        for name, w in self.params:
            if name not in saved:
                raise KeyError(f"saved weights lack parameter {name}")
            w.copy_(saved[name].to(w.device))


def full_parameters(model):
    """``(name, tensor)`` of ``model``'s parameters as whole tensors, detached, under the model's
    own names: FSDP2's sharded ones (``DTensor``) all-gathered, so every rank must call it at the
    same point (GRPO on G GPUs: the rollouts' weight sync, each rank's own vLLM engine), and the
    ``_checkpoint_wrapped_module.`` that FSDP's activation checkpointing puts into the names
    removed (seen on an H200: the sync would name no weight the engine knows)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import _CHECKPOINT_PREFIX
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        yield name.replace(_CHECKPOINT_PREFIX, ""), (p.full_tensor() if isinstance(p, DTensor) else p).detach()
