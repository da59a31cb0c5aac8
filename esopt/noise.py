"""Seeded per-tensor noise and the ES weight operations: perturb, exact restore, update.

Everything here is pure weight arithmetic on ``(name, tensor)`` pairs; it works on the
parameters of a Hugging Face model, of a vLLM worker's model, or on plain tensors.

Noise
    Member ``i`` has an integer seed ``s_i``. The noise of a tensor named ``name`` is
    ``eps = N(0, 1)`` drawn in fp32 by a ``torch.Generator`` on the tensor's device, seeded with
    ``tensor_seed(s_i, name)`` (SHA-256 of seed and name), so same-shaped tensors get independent
    noise and the noise never depends on iteration order. CPU and CUDA generators differ: all
    processes of one run must keep weights on the same device type.
    With ``rank=r`` (EGGROLL, Sarkar et al. 2025) the noise of a 2-D tensor ``W`` (m x n) is
    low-rank, ``eps = A B^T / sqrt(r)`` with ``A`` (m x r) then ``B`` (n x r) drawn from the same
    generator; tensors of any other dimension keep full-rank noise. ``esopt.engines.population`` applies the
    same factors inside the forward pass.

Exact restore (sparse fix-up)
    ``perturb`` sets ``w' = fl(w + d)`` with ``d = fl(sign * sigma * eps)`` (fp32 arithmetic, one
    cast to the tensor dtype). ``restore`` computes ``fl(w' - d)`` with the same ops, which equals
    ``w`` for most entries but misses by about one ulp for a few percent of them (REFERENCE.md s.2:
    ~4.6% at sigma 1e-3, ~22% at 1e-2). At perturb time we evaluate that very subtraction, compare
    bit patterns (so -0.0 vs +0.0 and NaN payloads count), and keep ``(flat index, original
    value)`` only where it differs; restore = subtraction + write-back of those entries. The ops are
    deterministic elementwise IEEE ops on the same device, so the restore reproduces the
    perturb-time check bit for bit and the result is exactly ``w`` in fp32, bf16 and fp16.
    Memory: tensors are processed in flat chunks of ``CHUNK`` elements (2**22), so the transient
    is a few fp32 buffers of one chunk (~64 MiB), whatever the model size; persistent until
    restore = ``miss_rate * numel * (4 + itemsize)`` bytes (int32 index + value; int64 index for
    tensors over 2**31 entries): bf16 ~0.28 bytes/param at sigma 1e-3 (4.6% misses, 14% of the
    weights' bytes), fp32 ~1.8 bytes/param at sigma 1e-2 (22% misses, 45%).
    ``RestoreState.nbytes`` reports it. The update holds one fp32 accumulator chunk.

Update
    ``update`` applies ``theta += (lr / N) * sum_i w_i * eps_i`` per tensor, accumulated in fp32
    and cast once. ``w_i`` are the normalised rewards (times the antithetic sign). There is no
    ``1 / sigma`` factor: as in the published setups (Salimans et al. 2017 in practice, Qiu et al.
    2025), ``1 / sigma`` is absorbed into ``lr``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

Params = Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor]

_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _items(params: Params) -> list[tuple[str, torch.Tensor]]:
    return list(params.items()) if isinstance(params, Mapping) else list(params)


def tensor_seed(member_seed: int, name: str) -> int:
    """Seed of tensor ``name`` for a member: first 63 bits of ``sha256(f"{member_seed}/{name}")``.

    Stable across processes and Python versions (unlike ``hash()``).
    """
    digest = hashlib.sha256(f"{int(member_seed)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


CHUNK = 1 << 22  # elements per noise chunk (16 MiB of fp32): bounds every transient buffer


def _chunks(tensor: torch.Tensor, seed: int, rank: int | None = None):
    """Yield ``(start, end, eps)``: the tensor's noise as consecutive flat chunks, fp32.

    Full rank: one ``torch.Generator`` on the tensor's device seeded with ``seed`` draws
    ``randn(end - start)`` for each chunk of ``CHUNK`` elements in turn (this chunked stream IS
    the definition of the noise, so it never depends on free memory). Low rank (2-D, ``rank``):
    the factors are drawn whole and the product is emitted by blocks of rows.
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


def _bounds(tensor: torch.Tensor, rank: int | None = None) -> list[tuple[int, int]]:
    """The flat ``(start, end)`` of each noise chunk of ``tensor`` (``_chunks``): ``CHUNK``
    elements at a time, or, low rank on a 2-D tensor, whole blocks of rows."""
    numel = tensor.numel()
    if rank is not None and tensor.dim() == 2:
        n = tensor.shape[1]
        rows = max(1, CHUNK // max(n, 1))
        return [(r0 * n, min(r0 + rows, tensor.shape[0]) * n) for r0 in range(0, tensor.shape[0], rows)]
    return [(start, min(start + CHUNK, numel)) for start in range(0, numel, CHUNK)]


def _streams(tensor: torch.Tensor, seed: int, rank: int | None, kept: torch.Tensor | None):
    """``_chunks``, or the same chunks sliced from ``kept`` (the tensor's whole flat fp32 noise
    for this seed, kept by ``perturbed``): the same values, without drawing them again."""
    if kept is None:
        return _chunks(tensor, seed, rank)
    return ((start, end, kept[start:end]) for start, end in _bounds(tensor, rank))


def noise_like(tensor: torch.Tensor, seed: int, rank: int | None = None) -> torch.Tensor:
    """fp32 noise with ``tensor``'s shape on its device from generator seed ``seed``.

    Full rank: ``eps ~ N(0, I)`` (drawn chunk by chunk, see ``_chunks``). Low rank (``rank``
    given, 2-D tensor m x n): ``eps = A B^T / sqrt(rank)``, ``A ~ N(0,1)^{m x r}`` then
    ``B ~ N(0,1)^{n x r}`` (``lowrank_factors``), so every entry has unit variance.
    """
    out = torch.empty(tensor.numel(), dtype=torch.float32, device=tensor.device)
    for start, end, eps in _chunks(tensor, seed, rank):
        out[start:end] = eps
    return out.view(tensor.shape)


def draw_into(out: torch.Tensor, seed: int, generator: torch.Generator) -> torch.Tensor:
    """Full-rank noise from ``seed`` (the chunked stream ``_chunks`` draws) written into the
    contiguous fp32 tensor ``out``; ``generator`` (on ``out``'s device) is reseeded and reused."""
    generator.manual_seed(seed)
    flat = out.view(-1)
    for start, end in _bounds(out):
        torch.randn(end - start, generator=generator, device=out.device, dtype=torch.float32, out=flat[start:end])
    return out


def lowrank_factors(tensor: torch.Tensor, seed: int, rank: int,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The EGGROLL factors of a 2-D tensor (m x n): ``A`` (m x rank), ``B`` (n x rank), fp32.
    ``generator``: one to reseed and reuse (on the tensor's device) instead of making one."""
    m, n = tensor.shape
    gen = (generator or torch.Generator(device=tensor.device)).manual_seed(seed)
    a = torch.randn((m, rank), generator=gen, device=tensor.device, dtype=torch.float32)
    b = torch.randn((n, rank), generator=gen, device=tensor.device, dtype=torch.float32)
    return a, b


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_INT_VIEW[t.element_size()])


@dataclass
class RestoreState:
    """What ``restore`` needs: the member's seed/scale and the sparse fix-ups per tensor."""

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
    """In place ``w <- fl(w + sign * sigma * eps(member_seed, name))`` for every tensor.

    Returns the state ``restore`` needs to put every tensor back bitwise (module docstring).
    """
    state = RestoreState(int(member_seed), float(sign) * float(sigma), rank)
    for name, w in _items(params):
        flat = w.view(-1)
        idx_type = torch.int32 if flat.numel() < 2**31 else torch.int64
        idxs, vals = [], []
        for start, end, eps in _chunks(w, tensor_seed(member_seed, name), rank):
            part = flat[start:end]
            d = eps.mul_(state.scale)
            new = (part.float() + d).to(w.dtype)
            back = (new.float() - d).to(w.dtype)
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
            part.copy_((part.float() - eps.mul_(state.scale)).to(w.dtype))
        idx, vals = state.fixups[name]
        if idx.numel():
            flat[idx] = vals


@torch.no_grad()
def perturbed(params: Params, member_seed: int, sigma: float, sign: float = 1.0,
              rank: int | None = None, keep: dict | None = None,
              out: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The tensors ``perturb`` would write, ``fl(w + sign * sigma * eps)`` (the same chunked fp32
    arithmetic and one cast), computed into new tensors; ``params`` are left untouched. Used to
    prepare a member off the critical path, from a snapshot of the weights. ``keep``: a dict
    that receives each tensor's flat fp32 noise, ``keep[(member_seed, name)] = eps``, for
    ``update(..., kept=keep)``. ``out``: one flat tensor of the params' (common) dtype holding
    all their elements, written into instead of allocating (the results are views of it).

    When the whole model is one chunk (full rank, one dtype and device, at most ``CHUNK``
    elements: the small models ES prepares member by member), the noise is drawn straight into
    the output (or into one fp32 buffer when it is kept) with few ops per tensor: the same values
    (each tensor is one chunk; the ops are elementwise) in fewer calls, whether the member is
    prepared inline or on the prefetch thread (where each call is a GIL hand-off with the
    generating thread). Kept noises are then views of one buffer (``update`` sums them in one
    pass)."""
    scale = float(sign) * float(sigma)
    items = _items(params)
    sizes = [w.numel() for _, w in items]
    one_chunk = _one_chunk(items, rank)
    if out is None and one_chunk:
        out = torch.empty(sum(sizes), dtype=items[0][1].dtype, device=items[0][1].device)
    if out is None:
        outs = [torch.empty_like(w).view(-1) for _, w in items]
    else:
        if out.numel() != sum(sizes) or any(w.dtype != out.dtype for _, w in items):
            raise ValueError("perturbed: out must hold every parameter's elements in their dtype")
        outs = list(out.split(sizes))
    if one_chunk:
        _perturbed_flat(items, sizes, outs, out, member_seed, scale, keep)
    else:
        for (name, w), new in zip(items, outs):
            flat = w.view(-1)
            whole = None if keep is None else torch.empty(w.numel(), dtype=torch.float32, device=w.device)
            for start, end, eps in _chunks(w, tensor_seed(member_seed, name), rank):
                if whole is not None:
                    whole[start:end] = eps
                    d = eps * scale               # the same product as eps.mul_(scale), eps kept intact
                else:
                    d = eps.mul_(scale)
                new[start:end] = (flat[start:end].float() + d).to(w.dtype)
            if whole is not None:
                keep[(int(member_seed), name)] = whole
    return [new.view(w.shape) for new, (_, w) in zip(outs, items)]


def _one_chunk(items: list[tuple[str, torch.Tensor]], rank: int | None) -> bool:
    """Full-rank noise of tensors sharing one dtype and device, ``CHUNK`` elements in all."""
    return (rank is None and bool(items) and len({(w.dtype, w.device) for _, w in items}) == 1
            and sum(w.numel() for _, w in items) <= CHUNK)


SMALL = 1 << 18  # elements (1 MiB of fp32, within a core's L2): one pass over a whole member


def _perturbed_flat(items, sizes, outs, out, member_seed: int, scale: float, keep: dict | None) -> None:
    """``perturbed``'s one-chunk path: the noise drawn straight into ``out`` (or, when it is
    kept or the weights are not fp32, into one fp32 buffer), ``d = scale * eps``, then
    ``fl(w + d)`` (= ``fl(d + w)``). Up to ``SMALL`` elements in all, the scaling and the adding
    are one pass each over the whole member (the fewest calls: per-call overhead, and on the
    prefetch thread GIL hand-offs, dominate at this size); above it, tensor by tensor, so each
    slice is drawn, scaled and added while it is in cache (one pass per step over a big member
    evicted the generation's data)."""
    dtype, dev = items[0][1].dtype, items[0][1].device
    fp32 = dtype == torch.float32
    eps_all = out if fp32 and keep is None else torch.empty(sum(sizes), dtype=torch.float32, device=dev)
    small = sum(sizes) <= SMALL
    gen = torch.Generator(device=dev)
    for (name, w), eps, new in zip(items, eps_all.split(sizes), outs):
        draw_into(eps, tensor_seed(member_seed, name), gen)
        if keep is not None:
            keep[(int(member_seed), name)] = eps
        if not small:
            _add_scaled(w.view(-1), eps, scale, keep is None, new, fp32)
    if small:
        _add_scaled(torch.cat([w.view(-1) for _, w in items]), eps_all, scale, keep is None, out, fp32)


def _add_scaled(w: torch.Tensor, eps: torch.Tensor, scale: float, in_place: bool, new: torch.Tensor,
                fp32: bool) -> None:
    """``new = fl(w + fl(scale * eps))`` in ``w``'s dtype; ``in_place``: ``eps`` may be scaled in place."""
    d = eps.mul_(scale) if in_place else eps * scale
    if fp32:
        torch.add(w, d, out=new)
    else:
        new.copy_((w.float() + d).to(new.dtype))


def member_coefficients(seeds: Sequence[int], weights: Sequence[float]) -> dict[int, float]:
    """Sum the weights of members that share a seed (antithetic pairs: ``w_+ - w_-``)."""
    coef: dict[int, float] = {}
    for s, w in zip(seeds, weights, strict=True):
        coef[int(s)] = coef.get(int(s), 0.0) + float(w)
    return coef


@torch.no_grad()
def update(params: Params, seeds: Sequence[int], weights: Sequence[float], lr: float,
           rank: int | None = None, n: int | None = None, threads: int = 1,
           kept: Mapping | None = None) -> float:
    """ES step ``theta += (lr / N) * sum_i weights_i * eps(seeds_i)``; returns the step's L2 norm.

    ``weights_i`` = normalised reward times the member's sign (+1, or -1 for the mirrored member of
    an antithetic pair, which shares its partner's seed). ``N = n or len(seeds)``. The sum is
    accumulated in fp32 (chunk by chunk; within a chunk member by member, in seed order) and cast once
    to the tensor dtype. ``1/sigma`` is absorbed into ``lr`` (Qiu et al. 2025). The returned
    norm is that of the fp32 step before the cast. ``threads > 1`` updates tensors in parallel
    (each tensor's arithmetic, and the order the norm is summed in, are unchanged: bitwise the
    same result). ``kept``: noise already drawn by ``perturbed(..., keep=...)``, used instead of
    drawing it again for the seeds it holds (the same values: bitwise the same result).
    """
    n = len(seeds) if n is None else n
    kept = kept or {}
    coef = [(s, c) for s, c in member_coefficients(seeds, weights).items() if c != 0.0]

    @torch.no_grad()  # grad mode is per thread: the pool's threads need their own
    def one(item) -> list[float]:
        name, w = item
        sq = []
        flat = w.view(-1)
        streams = [_streams(w, tensor_seed(s, name), rank, kept.get((s, name))) for s, _ in coef]
        for start, end in _bounds(w, rank) if coef else ():  # no member counts: nothing to add
            acc = torch.zeros(end - start, dtype=torch.float32, device=w.device)
            for (_, c), stream in zip(coef, streams):  # one member's chunk alive at a time
                acc.add_(next(stream)[2], alpha=c)
            acc.mul_(lr / n)
            sq.append(_apply_step(flat[start:end], acc))
        return sq

    items = _items(params)
    flat_noise = _flat_kept(items, [s for s, _ in coef], kept, rank)
    if flat_noise is not None:  # every member's noise is one buffer (perturbed's flat path): one pass each
        acc = torch.zeros(flat_noise[0].numel(), dtype=torch.float32, device=flat_noise[0].device)
        for (_, c), eps in zip(coef, flat_noise):
            acc.add_(eps, alpha=c)
        acc.mul_(lr / n)
        sq, start = 0.0, 0
        for _, w in items:  # per tensor, as below: the same values, norm parts and sum order
            sq += _apply_step(w.view(-1), acc[start:start + w.numel()])
            start += w.numel()
        return sq ** 0.5
    if threads > 1 and len(items) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:  # torch releases the GIL: tensors in parallel
            parts = list(pool.map(one, items))
    else:
        parts = [one(item) for item in items]
    sq = 0.0
    for part in parts:  # chunk by chunk in tensor order, as one sequential sum
        for x in part:
            sq += x
    return sq ** 0.5


def _apply_step(part: torch.Tensor, step: torch.Tensor) -> float:
    """``part += step`` (fp32 sum, one cast to ``part``'s dtype); returns ``||step||^2`` (fp64)."""
    part.copy_((part.float() + step).to(part.dtype))
    return float(step.double().pow(2).sum())


def _flat_kept(items, seeds: Sequence[int], kept: Mapping, rank: int | None) -> list[torch.Tensor] | None:
    """Each seed's kept noise as one flat buffer, when ``perturbed`` drew it so (its flat path:
    every tensor's noise a consecutive slice of one buffer, in this order); else None."""
    if not seeds or not _one_chunk(items, rank):
        return None
    out = []
    for s in seeds:
        views = [kept.get((s, name)) for name, _ in items]
        base = views[0]._base if views[0] is not None else None
        if base is None or base.numel() != sum(w.numel() for _, w in items):
            return None
        start = 0
        for v, (_, w) in zip(views, items):
            if v is None or v._base is not base or v.storage_offset() != start or v.numel() != w.numel():
                return None
            start += w.numel()
        out.append(base)
    return out


@torch.no_grad()
def checksum(params: Params, chunk: int = 1 << 20) -> int:
    """Exact, order-independent weight fingerprint: ``sum_j bits(w_j) * (j mod 65521 + 1)`` over
    every tensor's raw bit patterns (integer arithmetic mod 2**63). Equal weights give equal sums
    on any process; a one-ulp drift anywhere changes it."""
    total = 0
    for name, w in _items(params):
        flat = _bits(w.detach().contiguous()).view(-1)
        total = (total + tensor_seed(0, name) % 1000003) % 2**63
        for start in range(0, flat.numel(), chunk):
            part = flat[start:start + chunk].long()
            pos = torch.arange(start, start + part.numel(), device=part.device) % 65521 + 1
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


class Prepared(list):
    """A member's perturbed tensors from ``Weights.prepare``: views of one of its two buffers,
    buffer ``issue % 2`` (``issue``: which prepare wrote it; 0: fresh tensors, no buffer)."""
    issue: int = 0


class Weights:
    """The ES weight operations bound to one set of live parameters (an HF model, or the model
    inside a vLLM worker): perturb / restore / update / checksum / drift, holding the pending
    restore state and, optionally, a host copy of the base weights for the drift diagnostic.

    ``shard`` is appended to every tensor name when seeding (tensor-parallel shards of one
    tensor must not share noise); ``""`` for unsharded models.

    Prefetch (``start_iteration`` + ``prepare``): the arithmetic moves off the critical path. At
    the start of an iteration the weights are copied once (the snapshot); ``prepare`` computes a
    member's perturbed tensors from the snapshot -- on another thread while the previous member
    generates -- and then ``perturb(..., prepared=...)`` is one copy into the live weights and
    ``restore`` one copy back from the snapshot: the same bits as the sparse fix-up path
    (``perturbed`` is ``perturb``'s arithmetic; the snapshot is the exact original). When every
    tensor is a whole ``nn.Parameter`` (an HF model) nothing is copied at all: the snapshot is
    the live tensors themselves, ``perturb`` points each parameter at the prepared tensor
    (``param.data = new``) and ``restore`` points it back. Memory: two extra copies of the
    weights in their dtype (the snapshot, or the member generating, and the member being
    prepared), against the fix-ups' ~14% (bf16, sigma 1.5e-3) to ~45% (fp32, sigma 1e-2) of one
    copy. Prepared members are written into two buffers allocated once and used in turn (the
    member generating, the member being prepared), so a prepared member is valid until the
    next-but-one ``prepare`` (``perturb`` refuses an overwritten one): a fresh weight-sized
    allocation freed per member made glibc raise its mmap threshold and keep the generation's
    later allocations on the heap (tiny-2xl: +90 MB peak RSS instead of +24 MB).
    """

    def __init__(self, named_params: Params, shard: str = ""):
        self.params = _items(named_params)
        self.shard = shard
        self.state: RestoreState | str | None = None
        self.base: dict[str, torch.Tensor] | None = None
        self.base_norm: float | None = None
        self.snapshot: list[torch.Tensor] | None = None
        self.kept: dict | None = None     # this iteration's members' noise (start_iteration(keep_noise=True))
        # whole parameters (an HF model's): a prepared member is swapped in (``param.data``), not copied
        self.swap = bool(self.params) and all(isinstance(w, torch.nn.Parameter) for _, w in self.params)
        self._buffers: list[torch.Tensor] = []  # the two flat member buffers (one dtype), made on first use
        self._prepared = 0                      # members prepared into them so far

    supports_prefetch = True

    @torch.no_grad()
    def start_iteration(self, keep_noise: bool = False) -> None:
        """Copy the current weights (the snapshot ``prepare`` and ``restore`` use this iteration).
        ``keep_noise``: ``prepare`` keeps each member's fp32 noise (one weight-sized fp32 copy per
        member) and this iteration's ``update`` uses it instead of drawing it again."""
        if self.state is not None:
            raise RuntimeError("start_iteration with a pending perturbation")
        self.kept = {} if keep_noise else None
        if self.swap:  # the live tensors themselves: members are swapped in, these stay untouched
            self.snapshot = [w.data for _, w in self.params]
            return
        if self.snapshot is None:
            self.snapshot = [w.detach().clone() for _, w in self.params]
        else:
            for snap, (_, w) in zip(self.snapshot, self.params):
                snap.copy_(w)

    @property
    def on_cpu(self) -> bool:
        return all(w.device.type == "cpu" for _, w in self.params)

    @property
    def numel(self) -> int:
        return sum(w.numel() for _, w in self.params)

    def prepare(self, member_seed: int, sigma: float, sign: float = 1.0, rank: int | None = None):
        """A member's perturbed tensors, computed from the snapshot (thread-safe: reads only)."""
        if self.snapshot is None:
            raise RuntimeError("prepare needs start_iteration first")
        snapshot = [(name, snap) for (name, _), snap in zip(self._named(), self.snapshot)]
        out = None
        if len({w.dtype for _, w in self.params}) == 1:  # mixed dtypes: no shared buffer, fresh tensors
            if not self._buffers:
                w0 = self.params[0][1]
                self._buffers = [torch.empty(self.numel, dtype=w0.dtype, device=w0.device) for _ in range(2)]
            self._prepared += 1
            out = self._buffers[self._prepared % 2]
        member = Prepared(perturbed(snapshot, member_seed, sigma, sign, rank, keep=self.kept, out=out))
        member.issue = self._prepared if out is not None else 0
        return member

    def _named(self) -> list[tuple[str, torch.Tensor]]:
        return [(n + self.shard, w) for n, w in self.params] if self.shard else self.params

    @torch.no_grad()
    def perturb(self, member_seed: int, sigma: float, sign: float = 1.0, rank: int | None = None,
                prepared: list[torch.Tensor] | None = None) -> int:
        """Perturb the live weights: copy in ``prepared`` (from ``prepare``) or compute in place
        with sparse fix-ups for the exact restore. Returns the bytes held for the restore."""
        if self.state is not None:
            raise RuntimeError("perturb called twice without restore")
        if prepared is not None:
            if isinstance(prepared, Prepared) and prepared.issue and self._prepared - prepared.issue >= 2:
                raise RuntimeError("perturb: this prepared member's buffer was reused by a later prepare "
                                   "(at most two prepared members are valid at a time)")
            if self.swap:
                for new, (_, w) in zip(prepared, self.params):
                    w.data = new
                self.state = "swapped"
                return 0
            for new, (_, w) in zip(prepared, self.params):
                w.copy_(new)
            self.state = "snapshot"
            return 0
        self.state = perturb(self._named(), member_seed, sigma, sign, rank)
        return self.state.nbytes

    @torch.no_grad()
    def restore(self) -> None:
        if self.state is None:
            raise RuntimeError("restore called without a pending perturbation")
        if self.state == "swapped":
            for snap, (_, w) in zip(self.snapshot, self.params):
                w.data = snap
        elif self.state == "snapshot":
            for snap, (_, w) in zip(self.snapshot, self.params):
                w.copy_(snap)
        else:
            restore(self._named(), self.state)
        self.state = None

    def update(self, seeds: Sequence[int], weights: Sequence[float], lr: float, rank: int | None = None,
               n: int | None = None, threads: int = 1) -> float:
        kept, self.kept = self.kept, None
        return update(self._named(), seeds, weights, lr, rank, n, threads=threads, kept=kept)

    def checksum(self) -> int:
        return checksum(self.params)

    def nonfinite(self) -> str | None:
        """Name of the first tensor holding a NaN or inf, or None."""
        for name, w in self.params:
            if not bool(torch.isfinite(w).all()):
                return name
        return None

    def snapshot_base(self) -> None:
        """Keep a host (CPU) copy of the current weights as the drift reference."""
        self.base = {n: w.detach().to("cpu", copy=True) for n, w in self.params}
        self.base_norm = l2_norm(self.base)

    def drift(self) -> float | None:
        """Relative L2 drift ``||theta - theta_0|| / ||theta_0||`` (None without a snapshot)."""
        if self.base is None:
            return None
        return l2_distance(self.params, self.base) / max(self.base_norm, 1e-30)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {n: w.detach() for n, w in self.params}

    @torch.no_grad()
    def load_state_dict(self, saved: Mapping[str, torch.Tensor]) -> None:
        """Copy saved tensors into the live parameters, bitwise; every parameter must be present."""
        for name, w in self.params:
            if name not in saved:
                raise KeyError(f"saved weights lack parameter {name}")
            w.copy_(saved[name].to(w.device))
