"""A run's update: base and trained weights side by side, ``delta = theta_trained - theta_base``.

Reading the pair (the run's ``model/`` against its base, checked to match), streaming delta
in flat chunks, and exact keep rules over |delta| (the top or bottom k entries), shared by the
sparsity and drift analyses (``esopt.study.analyses``). delta is computed per entry in float32
from the weights as loaded in the run's dtype.

Memory: only the base model and (for sparsity) one working model live in memory; trained
tensors are read one at a time from the safetensors files (memory-mapped), and every pass
works on flat chunks of at most ``CHUNK`` entries. The global top-k threshold is exact without
materialising |delta|: |delta| >= 0 in float32 orders like its int32 bit pattern, so one pass
histograms the high 16 bits (32,768 bins) and a second pass histograms the low 16 bits inside
the bucket holding each wanted rank (65,536 bins) -> the exact k-th largest value and the
number of entries above it (:func:`rank_thresholds`).

Keys: a rule selects over int32 keys per entry, by default |delta|'s bit pattern
(:func:`magnitude_key`); :func:`random_key` gives seeded random keys instead, so the same exact
top-k machinery draws a uniformly random k-subset of the nonzero entries (the sparsity
analysis's random-mask controls).
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from esopt import models
from esopt.core.errors import ConfigError
from esopt.core.store import RunDir
from esopt.engines.base import resolve_device
from esopt.noise import CHUNK  # entries per streamed chunk: the noise's bound on transient buffers
from esopt.runtime.validate import recorded_plan

HIGH_BINS = 1 << 15      # histogram of the high 16 bits of a non-negative float32 (sign bit 0)
LOW_BITS = 16            # |delta| bits split into high and low halves
LOW_BINS = 1 << LOW_BITS  # histogram of the low 16 bits inside one high bucket
LOW_MASK = LOW_BINS - 1


def run_plan(run_dir: str | Path):
    """The run's plan (``esopt.runtime.validate.recorded_plan``: its plan.json, else its
    config.yaml validated; ConfigError when it is not a run)."""
    return recorded_plan(run_dir)


def trained_dir(run_dir: str | Path) -> Path:
    d = RunDir(run_dir).model_dir
    if not (d / "config.json").is_file():
        raise ConfigError(f"run {run_dir} has no trained model ({d} missing; runs write it at the end of "
                          "training when sweep.save_model=true)")
    return d


class TrainedWeights:
    """Read a ``save_pretrained`` directory's tensors one at a time (safetensors, memory-mapped)."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self.path = Path(path)
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            files = json.loads(index.read_text())["weight_map"]
        elif (self.path / "model.safetensors").is_file():
            files = None
        else:
            raise ConfigError(f"{self.path} has no model.safetensors (expected an HF save_pretrained directory)")
        self._handles = {}
        self.file_of: dict[str, str] = {}
        names = sorted(set(files.values())) if files else ["model.safetensors"]
        for fname in names:
            h = safe_open(str(self.path / fname), framework="pt")
            self._handles[fname] = h
            for k in h.keys():
                self.file_of[k] = fname

    def shape(self, name: str) -> list[int]:
        return list(self._handles[self.file_of[name]].get_slice(name).get_shape())

    def get(self, name: str) -> torch.Tensor:
        return self._handles[self.file_of[name]].get_tensor(name)


def params(model) -> list[tuple[str, torch.Tensor]]:
    """Named parameters, tied tensors once (model.named_parameters() deduplicates them)."""
    return list(model.named_parameters())


def tied_embeddings(model) -> bool:
    try:
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
        return out is not None and inp is not None and out.weight is inp.weight
    except (AttributeError, NotImplementedError):
        return False


def check_match(base_params: Sequence[tuple[str, torch.Tensor]], trained: TrainedWeights, base_label: str) -> None:
    """ConfigError (one line) unless every base tensor is in the trained files with its shape
    and the trained files hold nothing else."""
    names = {n for n, _ in base_params}
    for name, p in base_params:
        if name not in trained.file_of:
            raise ConfigError(f"trained model {trained.path} does not match base {base_label}: "
                              f"no tensor {name} in the trained model")
        if trained.shape(name) != list(p.shape):
            raise ConfigError(f"trained model {trained.path} does not match base {base_label}: {name} is "
                              f"{trained.shape(name)} in the trained model, {list(p.shape)} in the base")
    extra = sorted(set(trained.file_of) - names)
    if extra:
        raise ConfigError(f"trained model {trained.path} does not match base {base_label}: it has tensors the "
                          f"base lacks ({', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''})")



def base_source(plan, base: str | None) -> tuple[str, str | None]:
    """(name, path) of the base model: ``--base`` (a model name or a directory) or the run's."""
    if base is None:
        return plan.model["name"], plan.model.get("path")
    if Path(base).is_dir():
        return Path(base).name, str(Path(base).resolve())
    return base, None


def load_model(plan, name: str, path: str | None, device: str):
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return models.load(name, path=path, dtype=plan.model.get("dtype", "float32"), device=device,
                       trust_remote_code=bool(plan.model.get("trust_remote_code", False)))


def analysis_device(plan, device: str | None) -> str:
    return resolve_device(device or plan.engine_config.device)


@dataclass
class Pair:
    """A run's base model (in memory) and trained weights (on disk), checked to match."""

    plan: object
    run_dir: Path
    base_name: str
    base_path: str | None
    base_model: object
    base_tokenizer: object
    base_params: list
    trained: TrainedWeights
    device: str


def open_pair(run_dir: str | Path, base: str | None = None, device: str | None = None) -> Pair:
    run_dir = Path(run_dir)
    plan = run_plan(run_dir)
    tdir = trained_dir(run_dir)
    trained = TrainedWeights(tdir)
    name, path = base_source(plan, base)
    dev = analysis_device(plan, device)
    model, tok = load_model(plan, name, path, dev)
    bp = params(model)
    check_match(bp, trained, name if path is None else f"{name} ({path})")
    return Pair(plan, run_dir, name, path, model, tok, bp, trained, dev)


def delta_chunks(b: torch.Tensor, t: torch.Tensor, name: str = "") -> Iterator[tuple[int, int, torch.Tensor]]:
    """(start, end, delta) over flat chunks: delta = t - b in float32 (t already in b's dtype)."""
    bf, tf = b.detach().reshape(-1), t.reshape(-1)
    for s in range(0, bf.numel(), CHUNK):
        e = min(s + CHUNK, bf.numel())
        d = tf[s:e].float() - bf[s:e].float()
        if not torch.isfinite(d).all():
            raise ConfigError(f"non-finite weights in {name or 'a tensor'} of the base or trained model")
        yield s, e, d


def magnitude_bits(d: torch.Tensor) -> torch.Tensor:
    """|d| as int32 bit patterns: for float32 x >= 0 the bit pattern orders like the value."""
    return d.abs().contiguous().view(torch.int32)


Key = Callable[[str, int, torch.Tensor], torch.Tensor]
"""(tensor name, chunk start, delta chunk) -> int32 keys >= 0, 0 exactly where delta is 0."""

RANDOM_KEY_SHIFT = 34    # a random key is the top 30 bits of a PCG64 output, plus 1: in [1, 2^30]


def magnitude_key(name: str, start: int, d: torch.Tensor) -> torch.Tensor:
    """The default key: |delta|'s bit pattern (:func:`magnitude_bits`)."""
    return magnitude_bits(d)


def random_key(seed: int) -> Key:
    """Seeded random keys: a draw in [1, 2^30] per nonzero delta entry, 0 where delta is 0.

    A chunk's draws are ``(PCG64(SeedSequence([seed, crc32(name), start])).random_raw(n) >> 34) + 1``
    (numpy's raw PCG64 stream, no further transformation; drawn on the CPU), so they depend only on
    (seed, tensor name, position): every pass, device and run sees the same keys. The k largest keys
    are then a uniformly random k-subset of the nonzero entries, except that entries whose draws tie
    at the threshold (about nnz / 2^30 of them) are kept in stream order.
    """
    def key(name: str, start: int, d: torch.Tensor) -> torch.Tensor:
        ss = np.random.SeedSequence([int(seed), zlib.crc32(name.encode()), int(start)])
        raw = np.random.PCG64(ss).random_raw(d.numel())
        k = torch.from_numpy(((raw >> np.uint64(RANDOM_KEY_SHIFT)) + np.uint64(1)).astype(np.int32))
        k = k.to(d.device).reshape(d.shape)
        return torch.where(d != 0, k, torch.zeros((), dtype=torch.int32, device=d.device))
    return key


def trained_tensor(pair: Pair, name: str, like: torch.Tensor) -> torch.Tensor:
    return pair.trained.get(name).to(device=like.device, dtype=like.dtype)


def stream_bits(pair: Pair, names: Iterable[str] | None = None,
                key: Key = magnitude_key) -> Iterator[tuple[str, torch.Tensor]]:
    """(tensor name, keys of one chunk: by default |delta| bits) over the model, tensor order
    then flat order."""
    keep = None if names is None else set(names)
    for name, b in pair.base_params:
        if keep is not None and name not in keep:
            continue
        t = trained_tensor(pair, name, b)
        for s, _, d in delta_chunks(b, t, name):
            yield name, key(name, s, d)


def rank_thresholds(stream: Callable[[], Iterable[torch.Tensor]], ranks: Iterable[int]) -> dict[int, tuple[int, int, int]]:
    """For each rank r >= 1: (bits of the r-th largest value, count above it, count equal to it).

    ``stream()`` yields int32 bit patterns of non-negative float32 values (chunks, any number of
    passes). Pass 1 counts the high 16 bits; pass 2 counts the low 16 bits of the entries inside
    each bucket that holds a wanted rank. Exact; memory: the histograms plus one chunk.
    """
    ranks = sorted({int(r) for r in ranks})
    if not ranks:
        return {}
    hi = torch.zeros(HIGH_BINS, dtype=torch.int64)
    for bits in stream():                                  # histograms count on the chunk's device
        hi += torch.bincount((bits >> LOW_BITS).reshape(-1), minlength=HIGH_BINS).cpu()
    tail_hi = np.cumsum(hi.numpy()[::-1])[::-1]           # tail_hi[h] = count(high bits >= h)
    total = int(tail_hi[0])
    where = {}
    for r in ranks:
        if not 1 <= r <= total:
            raise ValueError(f"rank {r} out of range 1..{total}")
        h = int(np.nonzero(tail_hi >= r)[0].max())
        where[r] = (h, int(tail_hi[h + 1]) if h + 1 < len(tail_hi) else 0)
    buckets = sorted({h for h, _ in where.values()})
    lo = {h: torch.zeros(LOW_BINS, dtype=torch.int64) for h in buckets}
    for bits in stream():
        bits = bits.reshape(-1)
        top = bits >> LOW_BITS
        for h in buckets:
            sel = bits[top == h]
            if sel.numel():
                lo[h] += torch.bincount(sel & LOW_MASK, minlength=LOW_BINS).cpu()
    out = {}
    for r, (h, above) in where.items():
        tail_lo = np.cumsum(lo[h].numpy()[::-1])[::-1]
        need = r - above
        low = int(np.nonzero(tail_lo >= need)[0].max())
        n_gt = above + (int(tail_lo[low + 1]) if low + 1 < len(tail_lo) else 0)
        out[r] = ((h << LOW_BITS) | low, n_gt, int(lo[h][low]))
    return out


@dataclass
class Rule:
    """Which entries of a stream of |delta| bits are kept: exactly ``k`` of the nonzero ones.

    largest: keep bits > thr, plus the first ``ties`` entries with bits == thr (stream order);
    smallest: keep 0 < bits < thr, plus the first ``ties`` with bits == thr; thr None: none.
    """

    largest: bool
    thr: int | None
    ties: int
    k: int

    def mask(self, bits: torch.Tensor) -> torch.Tensor:
        if self.thr is None:
            return torch.zeros_like(bits, dtype=torch.bool)
        keep = bits > self.thr if self.largest else (bits > 0) & (bits < self.thr)
        if self.ties > 0:
            eq = torch.nonzero(bits.reshape(-1) == self.thr).reshape(-1)[: self.ties]
            if eq.numel():
                keep.view(-1)[eq] = True
                self.ties -= int(eq.numel())
        return keep

    def copy(self) -> "Rule":
        return dataclasses.replace(self)


def keep_count(fraction: float, nnz: int) -> int:
    """k = round(fraction * nnz), halves rounded up, within [0, nnz]."""
    return max(0, min(nnz, int(math.floor(fraction * nnz + 0.5))))


def make_rules(stream: Callable[[], Iterable[torch.Tensor]], nnz: int, fractions: Sequence[float],
               largest: bool) -> dict[float, Rule]:
    """One exact :class:`Rule` per keep fraction over the given stream (two passes in all)."""
    ks = {f: keep_count(f, nnz) for f in fractions}
    rank_of = {f: (k if largest else nnz - k + 1) for f, k in ks.items() if k > 0}
    th = rank_thresholds(stream, rank_of.values())
    rules = {}
    for f, k in ks.items():
        if k == 0:
            rules[f] = Rule(largest, None, 0, 0)
            continue
        thr, n_gt, n_eq = th[rank_of[f]]
        below = nnz - n_gt - n_eq                          # nonzero entries strictly below thr
        rules[f] = Rule(largest, thr, k - n_gt if largest else k - below, k)
    return rules


def count_nonzero(pair: Pair) -> dict[str, int]:
    """Nonzero delta entries per tensor."""
    out: dict[str, int] = {}
    for name, bits in stream_bits(pair):
        out[name] = out.get(name, 0) + int((bits != 0).sum())
    return out


def apply_rule(pair: Pair, work_params: dict, rule_for: Callable[[str], Rule], key: Key = magnitude_key,
               scale: float = 1.0) -> int:
    """Set the working model to where(keep, trained, base), tensor by tensor (keep: the rule over
    ``key``). With ``scale`` c != 1 the kept entries are ``theta_base + c * delta`` instead,
    computed in float32 and rounded to the model's dtype (c = 1 is the trained value itself, no
    arithmetic). Returns entries kept."""
    kept = 0
    with torch.no_grad():
        for name, b in pair.base_params:
            w = work_params[name]
            t = trained_tensor(pair, name, w)
            rule = rule_for(name)
            wf, bf, tf = w.data.view(-1), b.detach().reshape(-1), t.reshape(-1)
            for s, e, d in delta_chunks(b, t, name):
                keep = rule.mask(key(name, s, d))
                kept += int(keep.sum())
                new = tf[s:e] if scale == 1.0 else (bf[s:e].float() + scale * d).to(wf.dtype)
                wf[s:e] = torch.where(keep, new, bf[s:e])
    return kept


def kept_norm(pair: Pair, rule_for: Callable[[str], Rule], key: Key = magnitude_key) -> float:
    """||keep * delta||_2 (float64 sum of squares) for the rule over ``key``; pass fresh rules
    (:meth:`Rule.mask` uses up its ties)."""
    sq = 0.0
    for name, b in pair.base_params:
        t = trained_tensor(pair, name, b)
        rule = rule_for(name)
        for s, _, d in delta_chunks(b, t, name):
            keep = rule.mask(key(name, s, d))
            sq += float(d[keep].double().square().sum())
    return math.sqrt(sq)
