"""The ES weight math: seeded per-tensor noise, perturb, exact restore, update.

Pure functions on ``(name, tensor)`` pairs: the parameters of a Hugging Face model, of a vLLM
worker's model, or plain tensors. ``esopt.engines.weights.Weights`` binds them to live weights.

Noise
    Member ``i`` has an integer seed ``s_i``. The noise of a tensor named ``name`` is
    ``eps = N(0, 1)`` drawn in fp32 by a ``torch.Generator`` on the tensor's device, seeded with
    ``tensor_seed(s_i, name)`` (SHA-256 of seed and name), so same-shaped tensors get independent
    noise and the noise never depends on iteration order. It is drawn in flat chunks of ``CHUNK``
    elements, one ``randn`` per chunk from the one generator: that chunked stream is the
    definition of the noise. CPU and CUDA generators differ: all processes of one run must keep
    weights on the same device type.
    With ``rank=r`` (EGGROLL, Sarkar et al. 2025) the noise of a 2-D tensor ``W`` (m x n) is
    low-rank, ``eps = A B^T / sqrt(r)`` with ``A`` (m x r) then ``B`` (n x r) drawn from the same
    generator; tensors of any other dimension keep full-rank noise. ``esopt.engines.population``
    applies the same factors inside the forward pass.

Perturb
    ``w' = fl(w + d)``, ``d = fl(sign * sigma * eps)``: fp32 arithmetic, one cast to the tensor's
    dtype. ``perturb`` writes it in place; ``perturbed`` returns it in new tensors (the same bits).

Exact restore (sparse fix-up)
    ``fl(w' - d)`` equals ``w`` for most entries but misses by about one ulp for some of them
    (weights ~ N(0, 0.02): several percent at sigma 1e-3, about a quarter at 1e-2, in fp32 and
    bf16 alike). ``perturb`` evaluates that very subtraction, compares bit patterns (so -0.0 vs
    +0.0 and NaN payloads count) and keeps ``(flat index, original value)`` where it differs;
    ``restore`` = the subtraction + a write-back of those entries. The ops are deterministic
    elementwise IEEE ops on one device, so restore reproduces the check bit for bit: exactly
    ``w`` in fp32, bf16 and fp16.
    Memory: the transient is a few fp32 buffers of one chunk (~64 MiB) whatever the model size;
    held until restore: ``miss_rate * numel * (4 + itemsize)`` bytes (int32 index + value; int64
    index above 2**31 entries): bf16 ~0.28 bytes/param at sigma 1e-3 (14% of the weights' bytes),
    fp32 ~1.8 bytes/param at sigma 1e-2 (45%). ``RestoreState.nbytes`` reports it.

Update
    ``theta += (lr / N) * sum_i w_i * eps_i`` per tensor, accumulated in fp32 (chunk by chunk;
    within a chunk member by member, in seed order) and cast once. ``w_i`` are the normalised
    rewards times the member's sign; members sharing a seed (antithetic pairs) are summed first.
    No ``1 / sigma`` factor: as in the published setups (Salimans et al. 2017 in practice, Qiu et
    al. 2025) it is absorbed into ``lr``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch

Params = Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor]

CHUNK = 1 << 22  # elements per noise chunk (16 MiB of fp32): bounds every transient buffer
INT32_MAX_NUMEL = 2**31  # tensors with this many elements or more index their fix-ups in int64
_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _items(params: Params) -> list[tuple[str, torch.Tensor]]:
    return list(params.items()) if isinstance(params, Mapping) else list(params)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_INT_VIEW[t.element_size()])


# --------------------------------------------------------------------------------------------
# Noise
# --------------------------------------------------------------------------------------------
def tensor_seed(member_seed: int, name: str) -> int:
    """Seed of tensor ``name`` for a member: first 63 bits of ``sha256(f"{member_seed}/{name}")``.

    Stable across processes and Python versions (unlike ``hash()``).
    """
    digest = hashlib.sha256(f"{int(member_seed)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def lowrank_factors(tensor: torch.Tensor, seed: int, rank: int,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The EGGROLL factors of a 2-D tensor (m x n): ``A`` (m x rank), then ``B`` (n x rank), fp32.
    ``generator``: one to reseed and reuse (on the tensor's device) instead of making one."""
    m, n = tensor.shape
    gen = (generator or torch.Generator(device=tensor.device)).manual_seed(seed)
    a = torch.randn((m, rank), generator=gen, device=tensor.device, dtype=torch.float32)
    b = torch.randn((n, rank), generator=gen, device=tensor.device, dtype=torch.float32)
    return a, b


def _bounds(tensor: torch.Tensor, rank: int | None = None) -> list[tuple[int, int]]:
    """The flat ``(start, end)`` of each noise chunk of ``tensor``: ``CHUNK`` elements at a time,
    or, low rank on a 2-D tensor, whole blocks of rows."""
    numel = tensor.numel()
    if rank is not None and tensor.dim() == 2:
        n = tensor.shape[1]
        rows = max(1, CHUNK // max(n, 1))
        return [(r0 * n, min(r0 + rows, tensor.shape[0]) * n) for r0 in range(0, tensor.shape[0], rows)]
    return [(start, min(start + CHUNK, numel)) for start in range(0, numel, CHUNK)]


def _chunks(tensor: torch.Tensor, seed: int, rank: int | None = None) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Yield ``(start, end, eps)``: the tensor's noise as consecutive flat fp32 chunks.

    Full rank: one generator seeded with ``seed`` draws ``randn(end - start)`` for each chunk in
    turn. Low rank (2-D, ``rank``): the factors are drawn whole and ``A B^T / sqrt(rank)`` is
    emitted by blocks of rows.
    """
    dev = tensor.device
    if rank is not None and tensor.dim() == 2:
        a, b = lowrank_factors(tensor, seed, rank)
        n = tensor.shape[1]
        scale = 1.0 / float(rank) ** 0.5
        for start, end in _bounds(tensor, rank):
            yield start, end, (a[start // n:end // n] @ b.T).mul_(scale).view(-1)
        return
    gen = torch.Generator(device=dev).manual_seed(seed)
    for start, end in _bounds(tensor, rank):
        yield start, end, torch.randn(end - start, generator=gen, device=dev, dtype=torch.float32)


def noise_like(tensor: torch.Tensor, seed: int, rank: int | None = None) -> torch.Tensor:
    """fp32 noise with ``tensor``'s shape on its device from generator seed ``seed``: full rank
    ``eps ~ N(0, I)``; low rank (``rank``, 2-D m x n) ``eps = A B^T / sqrt(rank)`` with
    ``A ~ N(0,1)^{m x r}``, ``B ~ N(0,1)^{n x r}`` (``lowrank_factors``): unit variance."""
    out = torch.empty(tensor.numel(), dtype=torch.float32, device=tensor.device)
    for start, end, eps in _chunks(tensor, seed, rank):
        out[start:end] = eps
    return out.view(tensor.shape)


def draw_into(out: torch.Tensor, seed: int, generator: torch.Generator) -> torch.Tensor:
    """Full-rank noise from ``seed`` (the chunked stream of ``_chunks``) written into the
    contiguous fp32 tensor ``out``; ``generator`` (on ``out``'s device) is reseeded and reused."""
    generator.manual_seed(seed)
    flat = out.view(-1)
    for start, end in _bounds(out):
        torch.randn(end - start, generator=generator, device=out.device, dtype=torch.float32, out=flat[start:end])
    return out


# --------------------------------------------------------------------------------------------
# Perturb, exact restore
# --------------------------------------------------------------------------------------------
@dataclass
class RestoreState:
    """What ``restore`` needs: the member's seed, scale, rank and the sparse fix-ups per tensor."""

    member_seed: int
    scale: float                      # sign * sigma
    rank: int | None
    fixups: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes held by the fix-ups (indices + original values)."""
        return sum(i.numel() * i.element_size() + v.numel() * v.element_size()
                   for i, v in self.fixups.values())

    @property
    def n_fixups(self) -> int:
        return sum(i.numel() for i, _ in self.fixups.values())


@torch.no_grad()
def perturb(params: Params, member_seed: int, sigma: float, sign: float = 1.0,
            rank: int | None = None) -> RestoreState:
    """In place ``w <- fl(w + d)``, ``d = fl(sign * sigma * eps(member_seed, name))``, for every
    tensor; returns the fix-ups that make ``restore`` exact (module docstring)."""
    state = RestoreState(int(member_seed), float(sign) * float(sigma), rank)
    for name, w in _items(params):
        flat = w.view(-1)
        idx_type = torch.int32 if flat.numel() < INT32_MAX_NUMEL else torch.int64
        idxs, vals = [], []
        for start, end, eps in _chunks(w, tensor_seed(member_seed, name), rank):
            part = flat[start:end]
            d = eps.mul_(state.scale)
            new = (part.float() + d).to(w.dtype)
            back = torch.sub(new.float(), d, out=d).to(w.dtype)  # into d's buffer: one chunk less
            miss = (_bits(back) != _bits(part)).nonzero().view(-1)
            idxs.append((miss + start).to(idx_type))
            vals.append(part[miss].clone())
            part.copy_(new)
        state.fixups[name] = ((torch.cat(idxs), torch.cat(vals)) if idxs else
                              (torch.empty(0, dtype=idx_type, device=w.device), flat[:0].clone()))
    return state


@torch.no_grad()
def restore(params: Params, state: RestoreState) -> None:
    """Undo ``perturb`` exactly: ``w <- fl(w' - d)``, then write back the recorded misses."""
    for name, w in _items(params):
        flat = w.view(-1)
        for start, end, eps in _chunks(w, tensor_seed(state.member_seed, name), state.rank):
            part = flat[start:end]
            part.copy_(torch.sub(part.float(), eps.mul_(state.scale), out=eps))  # the cast: copy_'s
        idx, vals = state.fixups[name]
        if idx.numel():
            flat[idx] = vals


@torch.no_grad()
def perturbed(params: Params, member_seed: int, sigma: float, sign: float = 1.0,
              rank: int | None = None, out: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The tensors ``perturb`` would write, ``fl(w + fl(sign * sigma * eps))`` (the same chunked
    fp32 arithmetic and one cast), in new tensors; ``params`` are left untouched, so they are
    the exact restore. ``out``: one flat tensor of the params' (common) dtype holding all their
    elements, written into instead of allocating (the results are views of it)."""
    scale = float(sign) * float(sigma)
    items = _items(params)
    sizes = [w.numel() for _, w in items]
    if out is None:
        outs = [torch.empty(n, dtype=w.dtype, device=w.device) for n, (_, w) in zip(sizes, items)]
    elif out.numel() != sum(sizes) or any(w.dtype != out.dtype for _, w in items):
        raise ValueError("perturbed: out must hold every parameter's elements in their dtype")
    else:
        outs = list(out.split(sizes))
    for (name, w), new in zip(items, outs):
        flat = w.view(-1)
        for start, end, eps in _chunks(w, tensor_seed(member_seed, name), rank):
            new[start:end] = torch.add(flat[start:end].float(), eps.mul_(scale), out=eps)  # cast on copy
    return [new.view(w.shape) for new, (_, w) in zip(outs, items)]


# --------------------------------------------------------------------------------------------
# Update
# --------------------------------------------------------------------------------------------
def member_coefficients(seeds: Sequence[int], weights: Sequence[float]) -> dict[int, float]:
    """Sum the weights of members that share a seed (antithetic pairs: ``w_+ - w_-``)."""
    coef: dict[int, float] = {}
    for s, w in zip(seeds, weights, strict=True):
        coef[int(s)] = coef.get(int(s), 0.0) + float(w)
    return coef


@torch.no_grad()
def update(params: Params, seeds: Sequence[int], weights: Sequence[float], lr: float,
           rank: int | None = None, n: int | None = None) -> float:
    """ES step ``theta += (lr / N) * sum_i weights_i * eps(seeds_i)``; returns the step's L2 norm.

    ``weights_i`` = normalised reward times the member's sign (+1, or -1 for the mirrored member
    of an antithetic pair, which shares its partner's seed). ``N = n or len(seeds)``. The sum is
    accumulated in fp32 (chunk by chunk; within a chunk member by member, in seed order) and
    cast once to the tensor dtype. The returned norm is that of the fp32 step before the cast,
    summed chunk by chunk in tensor order (fp64).
    """
    n = len(seeds) if n is None else n
    coef = [(s, c) for s, c in member_coefficients(seeds, weights).items() if c != 0.0]
    if not coef:  # no member counts: nothing to add
        return 0.0
    sq = 0.0
    for name, w in _items(params):
        flat = w.view(-1)
        streams = [_chunks(w, tensor_seed(s, name), rank) for s, _ in coef]
        for start, end in _bounds(w, rank):
            acc = torch.zeros(end - start, dtype=torch.float32, device=w.device)
            for (_, c), stream in zip(coef, streams):  # one member's chunk alive at a time
                acc.add_(next(stream)[2], alpha=c)
            acc.mul_(lr / n)
            sq += float(acc.double().pow_(2).sum())
            part = flat[start:end]
            part.copy_(acc.add_(part))  # fl(acc + w) = fl(w + acc), cast once by copy_
    return sq ** 0.5


@torch.no_grad()
def anchor(params: Params, base: Mapping[str, torch.Tensor], decay: float) -> float:
    """Anchored weight decay (Schweighofer et al. 2026, arXiv 2605.30148):
    ``theta <- theta - decay * (theta - theta_0)``, elementwise in fp32 and cast once to the
    tensor's dtype, over the tensors present in ``base`` (theta_0). Elementwise, so every engine
    and every rank holding the same bits gets the same bits. Returns the pull's L2 norm
    ``decay * ||theta - theta_0||`` (fp64 accumulation, before the cast)."""
    sq = 0.0
    for name, w in _items(params):
        if name not in base:
            continue
        w32 = w.detach().float()
        pull = (w32 - base[name].to(w.device).float()).mul_(decay)
        sq += float(pull.double().pow_(2).sum())
        w.copy_(w32.sub_(pull))
    return sq ** 0.5


# --------------------------------------------------------------------------------------------
# Fingerprints and distances
# --------------------------------------------------------------------------------------------
CHECKSUM_CHUNK = 1 << 20   # elements per step of the checksum
CHECKSUM_PERIOD = 65521    # position weights cycle over 1..65521 (the largest prime below 2**16)
CHECKSUM_NAME_MOD = 1000003  # each tensor's name adds tensor_seed(0, name) mod this prime


@torch.no_grad()
def checksum(params: Params, chunk: int = CHECKSUM_CHUNK) -> int:
    """Exact, order-independent weight fingerprint: ``sum_j bits(w_j) * (j mod 65521 + 1)`` over
    every tensor's raw bit patterns, plus a term per tensor name (integer arithmetic mod 2**63).
    Equal weights give equal sums on any process; a one-ulp drift anywhere changes it."""
    total = 0
    for name, w in _items(params):
        flat = _bits(w.detach().contiguous()).view(-1)
        total = (total + tensor_seed(0, name) % CHECKSUM_NAME_MOD) % 2**63
        for start in range(0, flat.numel(), chunk):
            part = flat[start:start + chunk].long()
            pos = torch.arange(start, start + part.numel(), device=part.device) % CHECKSUM_PERIOD + 1
            total = (total + int((part * pos).sum())) % 2**63
    return total


def l2_norm(params: Params) -> float:
    """``||theta||_2`` over all tensors (fp64 accumulation)."""
    return sum(float(w.detach().double().pow(2).sum()) for _, w in _items(params)) ** 0.5


def l2_distance(params: Params, ref: Mapping[str, torch.Tensor]) -> float:
    """``||theta - ref||_2`` over the tensors present in ``ref`` (fp64 accumulation)."""
    sq = 0.0
    for name, w in _items(params):
        if name in ref:
            sq += float((w.detach().double() - ref[name].detach().to(w.device).double()).pow(2).sum())
    return sq ** 0.5
