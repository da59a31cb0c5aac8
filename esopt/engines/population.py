"""Population-batched generation: many ES members in one batched ``generate``.

The batch is laid out member-major: ``G`` members x ``R`` rows each (R = prompts x samples).
While :class:`PopulationForward` is active, row ``b`` of every forward pass uses the weights
of member ``b // R``, realised without touching the shared base weights:

* ``nn.Linear`` (weight W, m x n):
  - low rank (EGGROLL, ``rank=r``): ``y = x W^T + b + c_i (x B_i) A_i^T`` with
    ``c_i = sign_i * sigma / sqrt(r)`` and ``A_i, B_i`` the factors of
    ``esopt.noise.lowrank_factors(W, tensor_seed(s_i, name), r)``; so the member's weight is
    exactly ``W + sign_i * sigma * noise_like(W, seed, rank=r)``, the perturbation the ES update
    (``noise.update(..., rank=r)``) is assembled from;
  - full rank (``rank=None``): per-member weights ``W_i = fl(W + sign_i sigma eps_i)`` (the very
    tensor ``noise.perturb`` would write) stacked [G, m, n], applied with one ``bmm``.
* ``nn.Embedding``: the same two schemes on the looked-up rows (``A_i[ids] B_i^T``); a tied
  ``lm_head`` shares the embedding's factors, as a tied weight must.
* 1-D parameters (biases, RMSNorm-style ``weight * x`` scales): full-rank per member (they are
  small), added per row (biases) or swapped in as a per-row [B, 1, d] tensor (norm scales).

``targets="linear"`` (``es.targets=linear``, ``esopt.engines.lora``): only the linear layers'
weight matrices are perturbed (low rank); embeddings, the lm_head, norms and biases run
unperturbed, as in engine=vllm's batched path, where members are LoRA adapters.

Other parameterised modules raise ``NotImplementedError`` naming them. Greedy completions of a
batched member equal those of the same member perturbed alone up to float summation order
(tests/engines/test_population.py). With temperature > 0 the engine's sampling noise is keyed by row,
so a member's samples differ from its sequential ones (still exact samples of its policy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from esopt import noise
from esopt.engines import lora
from esopt.engines.base import Generation


class PopulationForward:
    """Context manager that runs ``members`` side by side in ``model``'s forward passes.

    ``members``: list of (seed, sign). ``rows_per_member``: R. ``rank``: EGGROLL rank or None
    for full-rank per-member weights (N copies of every matrix: small models only).
    """

    def __init__(self, model: nn.Module, members: Sequence[tuple[int, float]], sigma: float,
                 rank: int | None, rows_per_member: int, targets: str = "all"):
        if targets not in lora.TARGETS:
            raise ValueError(f"unknown targets {targets!r}")
        if targets == "linear" and rank is None:
            raise ValueError("targets=linear is a low-rank scope: it needs a rank")
        self.linear_only = targets == "linear"
        self.model, self.members, self.sigma, self.rank = model, list(members), float(sigma), rank
        self.R = int(rows_per_member)
        self.G = len(self.members)
        names = {id(p): n for n, p in model.named_parameters()}
        self.stacks: dict[str, torch.Tensor | tuple[torch.Tensor, torch.Tensor]] = {}
        self._patched: list[tuple[nn.Module, str, object]] = []
        self._targets: list[tuple[nn.Module, str, str]] = []  # (module, kind, param name) the members perturb
        for mod in model.modules():
            own = [(a, p) for a, p in mod._parameters.items() if p is not None]
            if not own:
                continue
            if self.linear_only:  # only linear layers' weight matrices; every other module as is
                if isinstance(mod, nn.Linear) and lora.is_linear_target(names[id(mod.weight)], mod.weight.shape):
                    self._targets.append((mod, "linear", names[id(mod.weight)]))
                continue
            if isinstance(mod, nn.Linear):
                self._targets.append((mod, "linear", names[id(mod.weight)]))
            elif isinstance(mod, nn.Embedding):
                self._targets.append((mod, "embedding", names[id(mod.weight)]))
            elif len(own) == 1 and own[0][0] == "weight" and own[0][1].dim() == 1:
                self._targets.append((mod, "scale", names[id(own[0][1])]))
            else:
                raise NotImplementedError(
                    f"population batching supports Linear, Embedding and 1-D scale modules, "
                    f"not {type(mod).__name__}")
        params = dict(model.named_parameters())
        dev = next(model.parameters()).device
        signs = torch.tensor([s for _, s in self.members], dtype=torch.float32, device=dev)
        scales = signs * self.sigma  # fp32 sign_i * sigma, as noise.perturb scales eps
        gen = torch.Generator(device=dev)  # reseeded per (member, tensor): the same streams
        self.bias_delta: dict[str, torch.Tensor] = {}
        for mod, kind, name in self._targets:
            tensors = [(name, params[name])]
            if kind == "linear" and mod.bias is not None and not self.linear_only:
                tensors.append((names[id(mod.bias)], mod.bias))
            for n, w in tensors:
                if n in self.stacks:
                    continue  # tied weight: one stack, shared
                seeds = [noise.tensor_seed(s, n) for s, _ in self.members]
                if w.dim() == 2 and rank is not None:
                    fac = [noise.lowrank_factors(w, seed, rank, gen) for seed in seeds]
                    a = torch.stack([f[0] for f in fac]).to(w.dtype)  # [G, m, r]
                    b = torch.stack([f[1] for f in fac]).to(w.dtype)  # [G, n, r]
                    if rank == 1:  # strides (n, 1, n), not (n, 1, 1): bmm(x, b) then runs as a
                        b = b.view(self.G, 1, -1).transpose(1, 2)  # matrix-vector product, 5-10x faster
                    c = (scales / math.sqrt(rank)).to(w.dtype)  # [G]
                    self.stacks[n] = (a * c[:, None, None], b)
                else:  # full rank: the exact tensors noise.perturb would write, all members in one op
                    eps = torch.empty((self.G, *w.shape), dtype=torch.float32, device=dev)
                    for e, seed in zip(eps, seeds):
                        noise.draw_into(e, seed, gen)
                    self.stacks[n] = (w.float() + eps * scales.view(-1, *[1] * w.dim())).to(w.dtype)
                    if w.dim() == 1 and kind == "linear" and rank is not None:  # a low-rank layer's bias:
                        self.bias_delta[n] = (self.stacks[n] - w)[:, None, :]  # added to F.linear's
        self._names = names

    # --- per-kind forwards -----------------------------------------------------------------
    def _grouped(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != self.G * self.R:
            raise RuntimeError(f"population batch has {x.shape[0]} rows, expected {self.G} x {self.R}")
        return x.reshape(self.G, -1, x.shape[-1])  # [G, R*S, d]

    def _linear(self, mod: nn.Linear, wname: str):
        """``mod``'s population forward, with its tensors looked up once (it runs every step)."""
        st, weight, bias = self.stacks[wname], mod.weight, mod.bias
        bname = self._names[id(bias)] if bias is not None else None
        if bname is not None and bname not in self.stacks:  # targets=linear: the bias as is
            bname = None
        if isinstance(st, tuple):  # y = (x W^T + b) + (b_i - b) + (x B_i)(c_i A_i)^T
            a, b = st
            delta = self.bias_delta.get(bname)
            rank1 = a.shape[-1] == 1
            a = a.view(self.G, 1, -1) if rank1 else a.transpose(1, 2)

            def forward(x):
                xg = self._grouped(x)
                y = F.linear(xg, weight, bias)  # the bias fused into the matmul, as plain inference
                if delta is not None:
                    y.add_(delta)
                u = torch.bmm(xg, b)  # [G, T, r] = x B_i (b's layout makes it a fast matrix-vector product)
                if rank1:
                    y.addcmul_(u, a)  # + (x . b_i) c_i a_i: an outer product, no small bmm
                else:
                    y.baddbmm_(u, a)
                return y.reshape(*x.shape[:-1], y.shape[-1])
        elif bname is not None:  # y = b_i + x W_i^T
            wt, bi = st.transpose(1, 2), self.stacks[bname][:, None, :]

            def forward(x):
                y = torch.baddbmm(bi, self._grouped(x), wt)
                return y.reshape(*x.shape[:-1], y.shape[-1])
        else:
            wt = st.transpose(1, 2)

            def forward(x):
                y = torch.bmm(self._grouped(x), wt)
                return y.reshape(*x.shape[:-1], y.shape[-1])
        return forward

    def _embedding(self, mod: nn.Embedding, wname: str, ids: torch.Tensor) -> torch.Tensor:
        st = self.stacks[wname]
        idg = ids.reshape(self.G, -1)  # [G, R*S]
        if isinstance(st, tuple):
            a, b = st
            rows = torch.gather(a, 1, idg[..., None].expand(-1, -1, a.shape[-1]))  # [G, R*S, r]
            y = F.embedding(idg, mod.weight, mod.padding_idx)
            if a.shape[-1] == 1:  # rank 1: an outer product instead of a small bmm
                y = y.addcmul_(rows, b[:, None, :, 0])
            else:
                y = y + torch.bmm(rows, b.transpose(1, 2))
        else:
            y = torch.gather(st, 1, idg[..., None].expand(-1, -1, st.shape[-1]))
        return y.reshape(*ids.shape, y.shape[-1])

    # --- install / remove ------------------------------------------------------------------
    def __enter__(self):
        for mod, kind, name in self._targets:
            if kind == "linear":
                mod.forward = self._linear(mod, name)
                self._patched.append((mod, "forward", None))
            elif kind == "embedding":
                mod.forward = (lambda m, n: lambda ids: self._embedding(m, n, ids))(mod, name)
                self._patched.append((mod, "forward", None))
            else:  # scale: swap the Parameter for a per-row [B, 1, d] tensor
                per_row = self.stacks[name].repeat_interleave(self.R, dim=0)[:, None, :]
                self._patched.append((mod, "weight", mod._parameters["weight"]))
                mod._parameters["weight"] = per_row
        return self

    def __exit__(self, *exc):
        for mod, attr, saved in reversed(self._patched):
            if attr == "forward":
                del mod.forward
            else:
                mod._parameters[attr] = saved
        self._patched.clear()
        return False


def stack_bytes(model: nn.Module, n_members: int, rank: int | None) -> int:
    """Memory the per-member stacks take (full rank: N copies of every tensor)."""
    total = 0
    for _, w in model.named_parameters():
        if w.dim() == 2 and rank is not None:
            total += n_members * (w.shape[0] + w.shape[1]) * rank * w.element_size()
        else:
            total += n_members * w.numel() * w.element_size()
    return total


@contextmanager
def _max_batch(engine, rows: int):
    saved = getattr(engine, "max_batch", None)
    if saved is not None:
        engine.max_batch = max(saved, rows)
    try:
        yield
    finally:
        if saved is not None:
            engine.max_batch = saved


def generate(engine, prompts: Sequence[str], members: Sequence[tuple[int, float]], sigma: float, *,
             rank: int | None = 1, n: int = 1, max_rows: int | None = None, targets: str = "all",
             **gen_kwargs) -> list[Generation]:
    """Completions of every member on ``prompts``: one ``Generation`` per member.

    Members are packed ``max(1, max_rows // (len(prompts) * n))`` per ``engine.generate`` call
    (``max_rows`` defaults to the engine's ``max_batch``), so one call covers many members.
    """
    P = len(prompts)
    R = P * n
    max_rows = max_rows or getattr(engine, "max_batch", 256)
    per_call = max(1, max_rows // R)
    out: list[Generation] = []
    for start in range(0, len(members), per_call):
        group = list(members[start:start + per_call])
        pf = PopulationForward(engine.model, group, sigma, rank, R, targets)
        with _max_batch(engine, len(group) * R), pf:
            g = engine.generate(list(prompts) * len(group), n=n, **gen_kwargs)
        out.extend(g.split(len(group)))
        del pf
    return out
