"""Mechanism analyses of a trained run: functional sparsity, drift by module, forgetting.

    python -m esopt.analyze sparsity   <run-dir> [--fractions 1,0.5,0.22,0.1,0.05,0.01]
                                       [--modes global,per_tensor,smallest] [eval options]
    python -m esopt.analyze drift      <run-dir> [<run-dir> ...] [--top 0.01] [--out FILE]
    python -m esopt.analyze forgetting <run-dir> [--tasks addition,compare,reverse] [eval options]
    eval options: --split heldout --problems 64 --samples 8 --temperature T --seed S
                  --max-new-tokens N --greedy --bootstrap 1000 --base NAME|PATH --device cpu|cuda

Each writes ``sparsity.json`` / ``drift.json`` / ``forgetting.json`` into the run directory
(the aggregator turns their scalars into ``sparsity_*`` / ``drift_*`` / ``forgetting_*``
columns; the page draws sparsity curves and drift by module). The trained model is the run's
``model/`` (HF save_pretrained, safetensors); the base model is the run's ``config.yaml``
``model`` (name / path), or ``--base``. Bad input (no ``model/``, a base whose tensors do not
match the trained ones) is one line ``esopt: error: ...`` and exit code 2.

Definitions (``delta = theta_trained - theta_base``, computed per entry in float32 from the
weights as loaded in the run's dtype):

* Functional sparsity. For a keep fraction f, ``k = round(f * nnz)`` of the ``nnz`` nonzero
  entries of delta are kept and the rest set back to the base value: the evaluated weights are
  ``where(keep, theta_trained, theta_base)`` (no arithmetic, so f = 1 is the trained model and
  f = 0 the base, bit for bit). Modes: ``global`` (the k largest |delta| over the whole model),
  ``per_tensor`` (``round(f * nnz_t)`` largest within each tensor), ``smallest`` (control: the k
  smallest nonzero |delta| over the whole model). Ties at the threshold are kept in tensor
  order, then flat index, so exactly k entries are kept. Share of gain kept:
  ``share = (S_pruned - S_base) / (S_trained - S_base)`` for S = Pass@1 and Pass@K (K =
  samples), with a 95% paired percentile bootstrap over problems (the same resampled problems
  for the three models; replicates with zero gain are dropped; None when the gain is 0).
* Drift. ``||delta|| / ||theta_base||`` overall and per module type (embeddings, attn_q/k/v/o,
  mlp, norm, lm_head, other); a tied LM head is one tensor with the embeddings (reported as
  ``tied_embeddings: true`` and counted under embeddings). Squared norms add up over types.
  Where the largest ``top`` fraction (default 1%) of the nonzero |delta| sit: counts per type
  and per layer, share and enrichment (= share / the type's share of parameters).
* Forgetting. Base and trained model evaluated on tasks not trained on (tiny family:
  addition, compare, reverse; others: gsm8k), change = trained - base per problem, mean and
  95% paired bootstrap interval over problems.

Memory: only the base model and (for sparsity) one working model live in memory; trained
tensors are read one at a time from the safetensors files (memory-mapped), and every pass
works on flat chunks of at most ``CHUNK`` entries. The global top-k threshold is exact without
materialising |delta|: |delta| >= 0 in float32 orders like its int32 bit pattern, so one pass
histograms the high 16 bits (32,768 bins) and a second pass histograms the low 16 bits inside
the bucket holding each wanted rank (65,536 bins) -> the exact k-th largest value and the
number of entries above it (:func:`rank_thresholds`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from esopt import engines, models, tasks
from esopt.core.config import ANALYSES, SPLITS
from esopt.core.errors import ConfigError
from esopt.core.metrics import bootstrap_ci, pass_at_k, percentile_interval, resample_indices
from esopt.core.store import RunDir, atomic_write_json
from esopt.evaluator import evaluate
from esopt.runtime.run import resolve_device
from esopt.runtime.validate import validate
DEFAULT_FRACTIONS = (1.0, 0.5, 0.22, 0.1, 0.05, 0.01)
MODES = ("global", "per_tensor", "smallest")
HEADLINE_KEEP = 0.22
TINY_HELDOUT_TASKS = ("addition", "compare", "reverse")
REAL_HELDOUT_TASKS = ("gsm8k",)
CHUNK = 1 << 22          # entries per streamed chunk (16 MiB of float32)
MODULE_TYPES = ("embeddings", "attn_q", "attn_k", "attn_v", "attn_o", "attn_qkv", "mlp", "norm",
                "lm_head", "other")


# ---------------------------------------------------------------------------------------------
# run directory, models and weights
# ---------------------------------------------------------------------------------------------
def run_config(run_dir: str | Path):
    """The run's RunConfig from its ``config.yaml`` (ConfigError when it is not a run)."""
    import yaml

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"not a run directory: {run_dir} (no config.yaml)")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"unreadable {path}: {str(e).splitlines()[0]}") from None
    return validate(raw, check_data=False)


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


def _base_source(rc, base: str | None) -> tuple[str, str | None]:
    """(name, path) of the base model: ``--base`` (a model name or a directory) or the run's."""
    if base is None:
        return rc.model["name"], rc.model.get("path")
    if Path(base).is_dir():
        return Path(base).name, str(Path(base).resolve())
    return base, None


def load_model(rc, name: str, path: str | None, device: str):
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return models.load(name, path=path, dtype=rc.model.get("dtype", "float32"), device=device)


def _device(rc, device: str | None) -> str:
    return resolve_device(device or rc.engine.get("device", "auto"))


@dataclass
class Pair:
    """A run's base model (in memory) and trained weights (on disk), checked to match."""

    rc: object
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
    rc = run_config(run_dir)
    tdir = trained_dir(run_dir)
    trained = TrainedWeights(tdir)
    name, path = _base_source(rc, base)
    dev = _device(rc, device)
    model, tok = load_model(rc, name, path, dev)
    bp = params(model)
    check_match(bp, trained, name if path is None else f"{name} ({path})")
    return Pair(rc, run_dir, name, path, model, tok, bp, trained, dev)


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


def trained_tensor(pair: Pair, name: str, like: torch.Tensor) -> torch.Tensor:
    return pair.trained.get(name).to(device=like.device, dtype=like.dtype)


def stream_bits(pair: Pair, names: Iterable[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(tensor name, |delta| bits of one chunk) over the model, tensor order then flat order."""
    keep = None if names is None else set(names)
    for name, b in pair.base_params:
        if keep is not None and name not in keep:
            continue
        t = trained_tensor(pair, name, b)
        for _, _, d in delta_chunks(b, t, name):
            yield name, magnitude_bits(d)


# ---------------------------------------------------------------------------------------------
# exact rank thresholds without materialising |delta|
# ---------------------------------------------------------------------------------------------
def rank_thresholds(stream: Callable[[], Iterable[torch.Tensor]], ranks: Iterable[int]) -> dict[int, tuple[int, int, int]]:
    """For each rank r >= 1: (bits of the r-th largest value, count above it, count equal to it).

    ``stream()`` yields int32 bit patterns of non-negative float32 values (chunks, any number of
    passes). Pass 1 counts the high 16 bits; pass 2 counts the low 16 bits of the entries inside
    each bucket that holds a wanted rank. Exact; memory: the histograms plus one chunk.
    """
    ranks = sorted({int(r) for r in ranks})
    if not ranks:
        return {}
    hi = torch.zeros(1 << 15, dtype=torch.int64)
    for bits in stream():                                  # histograms count on the chunk's device
        hi += torch.bincount((bits >> 16).reshape(-1), minlength=1 << 15).cpu()
    tail_hi = np.cumsum(hi.numpy()[::-1])[::-1]           # tail_hi[h] = count(high bits >= h)
    total = int(tail_hi[0])
    where = {}
    for r in ranks:
        if not 1 <= r <= total:
            raise ValueError(f"rank {r} out of range 1..{total}")
        h = int(np.nonzero(tail_hi >= r)[0].max())
        where[r] = (h, int(tail_hi[h + 1]) if h + 1 < len(tail_hi) else 0)
    buckets = sorted({h for h, _ in where.values()})
    lo = {h: torch.zeros(1 << 16, dtype=torch.int64) for h in buckets}
    for bits in stream():
        bits = bits.reshape(-1)
        top = bits >> 16
        for h in buckets:
            sel = bits[top == h]
            if sel.numel():
                lo[h] += torch.bincount(sel & 0xFFFF, minlength=1 << 16).cpu()
    out = {}
    for r, (h, above) in where.items():
        tail_lo = np.cumsum(lo[h].numpy()[::-1])[::-1]
        need = r - above
        low = int(np.nonzero(tail_lo >= need)[0].max())
        n_gt = above + (int(tail_lo[low + 1]) if low + 1 < len(tail_lo) else 0)
        out[r] = ((h << 16) | low, n_gt, int(lo[h][low]))
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


def apply_rule(pair: Pair, work_params: dict, rule_for: Callable[[str], Rule]) -> int:
    """Set the working model to where(keep, trained, base), tensor by tensor. Returns entries kept."""
    kept = 0
    with torch.no_grad():
        for name, b in pair.base_params:
            w = work_params[name]
            t = trained_tensor(pair, name, w)
            rule = rule_for(name)
            wf, bf, tf = w.data.view(-1), b.detach().reshape(-1), t.reshape(-1)
            for s, e, d in delta_chunks(b, t, name):
                keep = rule.mask(magnitude_bits(d))
                kept += int(keep.sum())
                wf[s:e] = torch.where(keep, tf[s:e], bf[s:e])
    return kept


# ---------------------------------------------------------------------------------------------
# evaluation and intervals
# ---------------------------------------------------------------------------------------------
@dataclass
class EvalOpts:
    """Evaluation size and sampling for the analyses (small defaults for CPU)."""

    split: str = "heldout"
    problems: int | None = 64               # None = the whole split
    samples: int = 8
    temperature: float | None = None      # None = the run's eval.temperature
    top_p: float | None = None            # None = the run's eval.top_p
    max_new_tokens: int | None = None     # None = the run's eval.max_new_tokens / task default
    seed: int | None = None               # None = the run's eval.seed
    greedy: bool = False
    bootstrap: int = 1000

    def resolved(self, rc) -> "EvalOpts":
        ev = rc.eval
        return dataclasses.replace(
            self,
            temperature=ev.temperature if self.temperature is None else float(self.temperature),
            top_p=ev.top_p if self.top_p is None else float(self.top_p),
            max_new_tokens=ev.max_new_tokens if self.max_new_tokens is None else int(self.max_new_tokens),
            seed=ev.seed if self.seed is None else int(self.seed))

    def check(self) -> None:
        if self.split not in SPLITS:
            raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if (self.problems is not None and self.problems < 1) or self.samples < 1:
            raise ConfigError(f"--problems and --samples must be >= 1, got {self.problems}, {self.samples}")
        if self.bootstrap < 1:
            raise ConfigError(f"--bootstrap must be >= 1, got {self.bootstrap}")


def run_evaluate(engine, task, o: EvalOpts) -> dict:
    return evaluate(engine, task, split=o.split, problems=o.problems, samples=o.samples,
                    temperature=o.temperature, top_p=o.top_p, max_new_tokens=o.max_new_tokens,
                    seed=o.seed, greedy=o.greedy, entropy=False)


def per_problem(counts: Sequence[int], n: int, k: int) -> np.ndarray:
    """Per-problem unbiased pass@k from correct counts out of n samples."""
    return np.asarray(pass_at_k(n, np.asarray(counts, dtype=np.int64), k), dtype=np.float64)


def gain_share(base: np.ndarray, trained: np.ndarray, pruned: np.ndarray, *, n_boot: int = 1000,
               seed: int = 0, alpha: float = 0.05) -> tuple[float | None, list | None]:
    """Share of the trained model's gain a pruned model keeps, with a paired bootstrap interval.

    share = (mean(pruned) - mean(base)) / (mean(trained) - mean(base)), means over problems.
    Each replicate resamples problems once and uses the same rows for the three models; the
    interval is the (alpha/2, 1-alpha/2) percentiles of the replicates whose gain is nonzero.
    Returns (None, None) when the point gain is 0.
    """
    base, trained, pruned = (np.asarray(a, dtype=np.float64) for a in (base, trained, pruned))
    gain = trained.mean() - base.mean()
    if gain == 0:
        return None, None
    share = float((pruned.mean() - base.mean()) / gain)
    idx = resample_indices(np.random.default_rng(seed), n_boot, len(base))
    g = trained[idx].mean(1) - base[idx].mean(1)
    ok = g != 0
    if not ok.any():
        return share, None
    reps = (pruned[idx].mean(1)[ok] - base[idx].mean(1)[ok]) / g[ok]
    return share, percentile_interval(reps, 1 - alpha)


def paired_change(base: np.ndarray, trained: np.ndarray, *, n_boot: int = 1000, seed: int = 0) -> tuple[float, list]:
    """mean(trained - base) over problems and its 95% paired percentile bootstrap interval."""
    diff = np.asarray(trained, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    return float(diff.mean()), list(bootstrap_ci(diff, n=n_boot, seed=seed))


def _task(rc, tokenizer, task_cfg: dict | None = None):
    cfg = rc.task if task_cfg is None else task_cfg
    return tasks.get(cfg, tokenizer=tokenizer, style=rc.model.get("prompt_style"))


def _engine(rc, model, tokenizer, device: str):
    # analyses edit the HF model's tensors in place: always the hf engine on the analysis device
    return engines.get({"name": "hf", "device": device, "max_batch": rc.engine.get("max_batch", 256)},
                       model, tokenizer)


def _scores(result: dict, k: int) -> dict:
    out = {"pass@1": result["pass@k"]["1"], "pass@K": result["pass@k"][str(k)]}
    if result.get("greedy") is not None:
        out["greedy"] = result["greedy"]
    return out


def _header(kind: str, rc, run_dir: Path, base_name: str, base_path: str | None) -> dict:
    return {"analysis": kind, "version": 1, "run_dir": str(Path(run_dir).resolve()), "algo": rc.algo,
            "model": rc.model["name"], "task": rc.task.get("name"), "seed": rc.seed,
            "base": {"name": base_name, "path": base_path}}


def _write(run_dir: Path, kind: str, result: dict, write: bool) -> dict:
    if write:
        atomic_write_json(Path(run_dir) / f"{kind}.json", result)
    return result


# ---------------------------------------------------------------------------------------------
# functional sparsity
# ---------------------------------------------------------------------------------------------
def sparsity(run_dir: str | Path, *, fractions: Sequence[float] = DEFAULT_FRACTIONS,
             modes: Sequence[str] = MODES, base: str | None = None, device: str | None = None,
             opts: EvalOpts | None = None, write: bool = True, log: Callable[[str], None] | None = None) -> dict:
    """Evaluate where(top-|delta| mask, trained, base) for each keep fraction and mode; write
    ``sparsity.json``. See the module docstring for the definitions."""
    t0 = time.time()
    fractions = [float(f) for f in fractions]
    if not fractions or any(not 0.0 <= f <= 1.0 for f in fractions):
        raise ConfigError(f"--fractions must be in [0, 1], got {fractions}")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ConfigError(f"unknown sparsity mode(s) {bad or modes} (known: {', '.join(MODES)})")
    opts = opts or EvalOpts()
    opts.check()
    log = log or (lambda s: None)
    pair = open_pair(run_dir, base, device)
    rc = pair.rc
    o = opts.resolved(rc)
    k = o.samples
    work, tok = load_model(rc, rc.model["name"], str(pair.trained.path), pair.device)
    work_params = dict(params(work))
    engine = _engine(rc, work, tok, pair.device)
    task = _task(rc, tok)

    trained_eval = run_evaluate(engine, task, o)           # the working model is the trained one now
    nnz_t = count_nonzero(pair)
    nnz = sum(nnz_t.values())
    n_params = sum(p.numel() for _, p in pair.base_params)

    def whole():
        return (bits for _, bits in stream_bits(pair))

    rules: dict[str, dict] = {}
    if "global" in modes:
        rules["global"] = make_rules(whole, nnz, fractions, largest=True)
    if "smallest" in modes:
        rules["smallest"] = make_rules(whole, nnz, fractions, largest=False)
    if "per_tensor" in modes:
        per: dict[str, dict[float, Rule]] = {}
        for name, _ in pair.base_params:
            per[name] = make_rules(lambda name=name: (b for _, b in stream_bits(pair, [name])),
                                   nnz_t[name], fractions, largest=True)
        rules["per_tensor"] = {f: per for f in fractions}

    base_eval = None
    curves = []
    for mode in [m for m in MODES if m in modes]:
        for f in fractions:
            if mode == "per_tensor":
                fresh = {name: r[f].copy() for name, r in rules[mode][f].items()}
                rule_for, threshold = (lambda name, fresh=fresh: fresh[name]), None
            else:
                one = rules[mode][f].copy()
                rule_for = lambda name, one=one: one  # noqa: E731
                threshold = None if one.thr is None else float(np.array([one.thr], dtype=np.int32).view(np.float32)[0])
            kept = apply_rule(pair, work_params, rule_for)
            ev = run_evaluate(engine, task, o)
            log(f"sparsity {mode:<10} keep {f:<5g} ({kept} of {nnz} entries): pass@1 {ev['pass@k']['1']:.4f}")
            curves.append({"mode": mode, "keep": f, "kept": kept, "threshold": threshold, **_scores(ev, k),
                           "correct_counts": ev["correct_counts"], "greedy_correct": ev.get("greedy_correct")})
            if base_eval is None and kept == 0:
                base_eval = ev
    if base_eval is None:                                  # evaluate the base itself
        apply_rule(pair, work_params, lambda name: Rule(True, None, 0, 0))
        base_eval = run_evaluate(engine, task, o)

    b_c, t_c = base_eval["correct_counts"], trained_eval["correct_counts"]
    per_metric = {"pass@1": 1, "pass@K": k}
    for c in curves:
        for metric, kk in per_metric.items():
            share, ci = gain_share(per_problem(b_c, k, kk), per_problem(t_c, k, kk),
                                   per_problem(c["correct_counts"], k, kk), n_boot=o.bootstrap, seed=o.seed)
            c[f"share_{metric}"], c[f"share_{metric}_ci"] = share, ci
        c["delta_pass@1"] = c["pass@1"] - trained_eval["pass@k"]["1"]
    base_s, trained_s = _scores(base_eval, k), _scores(trained_eval, k)
    result = {
        **_header("sparsity", rc, pair.run_dir, pair.base_name, pair.base_path),
        "trained_path": str(pair.trained.path), "split": o.split, "n_problems": trained_eval["n_problems"],
        "samples": o.samples, "k": k, "temperature": o.temperature, "eval_seed": o.seed,
        "n_params": int(n_params), "nnz": int(nnz), "changed_frac": nnz / max(n_params, 1),
        "fractions": fractions, "modes": [m for m in MODES if m in modes],
        "base_score": base_s, "trained_score": trained_s,
        "gain": {m: trained_s[m] - base_s[m] for m in base_s},
        "headline": _headline(curves),
        "curves": curves,
        "base_counts": b_c, "trained_counts": t_c,
        "wall_s": round(time.time() - t0, 3),
    }
    return _write(pair.run_dir, "sparsity", result, write)


def _headline(curves: list[dict]) -> dict:
    """The global-mode point nearest keep 0.22 (the study's 78% zeroed), with its control."""
    glob = [c for c in curves if c["mode"] == "global"] or curves
    if not glob:
        return {}
    best = min(glob, key=lambda c: abs(c["keep"] - HEADLINE_KEEP))
    out = {"mode": best["mode"], "keep": best["keep"]}
    for key in ("pass@1", "pass@K", "delta_pass@1", "share_pass@1", "share_pass@1_ci", "share_pass@K",
                "share_pass@K_ci"):
        out[key] = best.get(key)
    ctrl = [c for c in curves if c["mode"] == "smallest" and c["keep"] == best["keep"]]
    if ctrl:
        out["smallest_share_pass@1"] = ctrl[0]["share_pass@1"]
        out["smallest_share_pass@1_ci"] = ctrl[0]["share_pass@1_ci"]
    return out


# ---------------------------------------------------------------------------------------------
# drift
# ---------------------------------------------------------------------------------------------
_TYPE_PATTERNS = (
    ("lm_head", r"(^|\.)(lm_head|embed_out|output_layer)\."),
    ("embeddings", r"(^|\.)(embed_tokens|embed_positions|wte|wpe|word_embeddings|embeddings)\."),
    ("norm", r"norm|(^|\.)ln_?\w*\."),
    ("attn_qkv", r"(^|\.)(qkv_proj|c_attn|query_key_value|Wqkv)\."),
    ("attn_q", r"(^|\.)(q_proj|query)\."),
    ("attn_k", r"(^|\.)(k_proj|key)\."),
    ("attn_v", r"(^|\.)(v_proj|value)\."),
    ("attn_o", r"(^|\.)(o_proj|out_proj)\.|attn\.c_proj\.|attention\.dense\."),
    ("mlp", r"(^|\.)(mlp|feed_forward|ffn)\.|(gate_proj|up_proj|down_proj|fc1|fc2)\."),
)


def module_type(name: str) -> str:
    """Module type of a parameter name (Qwen2/Llama names; common GPT-style names too)."""
    for kind, pattern in _TYPE_PATTERNS:
        if re.search(pattern, name):
            return kind
    return "other"


def layer_of(name: str) -> str:
    """The transformer layer index in a parameter name, or "none" (embeddings, final norm, head)."""
    m = re.search(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.", name)
    return m.group(1) if m else "none"


def drift(run_dir: str | Path, *, top: float = 0.01, base: str | None = None, device: str | None = "cpu",
          write: bool = True) -> dict:
    """Relative L2 drift overall / per module type / per layer and where the top updates sit;
    write ``drift.json``. Only the base model is loaded; trained tensors stream from disk."""
    t0 = time.time()
    if not 0.0 < top <= 1.0:
        raise ConfigError(f"--top must be in (0, 1], got {top}")
    pair = open_pair(run_dir, base, device)
    rc = pair.rc
    tied = tied_embeddings(pair.base_model)
    acc = {}                       # name -> [n, delta_sq, base_sq, nnz]
    for name, b in pair.base_params:
        t = trained_tensor(pair, name, b)
        a = acc[name] = [b.numel(), 0.0, float(b.detach().double().pow(2).sum()), 0]
        for _, _, d in delta_chunks(b, t, name):
            a[1] += float(d.double().pow(2).sum())
            a[3] += int((d != 0).sum())
    nnz = sum(a[3] for a in acc.values())
    k = keep_count(top, nnz) if nnz else 0
    top_count = {name: 0 for name in acc}
    threshold = None
    if k > 0:
        rule = make_rules(lambda: (bits for _, bits in stream_bits(pair)), nnz, [top], largest=True)[top]
        threshold = float(np.array([rule.thr], dtype=np.int32).view(np.float32)[0])
        for name, bits in stream_bits(pair):
            top_count[name] += int(rule.mask(bits).sum())

    n_all = sum(a[0] for a in acc.values())
    d_all = sum(a[1] for a in acc.values())
    b_all = sum(a[2] for a in acc.values())

    def summarise(groups: dict[str, list[str]]) -> dict:
        out = {}
        for key, names in groups.items():
            n = sum(acc[x][0] for x in names)
            dsq, bsq = sum(acc[x][1] for x in names), sum(acc[x][2] for x in names)
            tc = sum(top_count[x] for x in names)
            out[key] = {
                "n": n, "delta_sq": dsq, "base_sq": bsq,
                "relative": math.sqrt(dsq / bsq) if bsq > 0 else None,
                "share_sq": dsq / d_all if d_all > 0 else None,
                "contrib": dsq / b_all if b_all > 0 else None,
                "top": tc, "top_share": tc / k if k else None,
                "top_enrichment": (tc / k) / (n / n_all) if k and n else None,
            }
        return out

    by_type: dict[str, list[str]] = {}
    by_layer: dict[str, list[str]] = {}
    by_cell: dict[str, list[str]] = {}
    for name in acc:
        by_type.setdefault(module_type(name), []).append(name)
        by_layer.setdefault(layer_of(name), []).append(name)
        by_cell.setdefault(f"{layer_of(name)}|{module_type(name)}", []).append(name)
    modules = summarise({t: by_type[t] for t in MODULE_TYPES if t in by_type})
    layers = summarise(dict(sorted(by_layer.items(), key=lambda kv: (kv[0] == "none", int(kv[0]) if kv[0].isdigit() else 0))))
    cells = summarise(by_cell)
    result = {
        **_header("drift", rc, pair.run_dir, pair.base_name, pair.base_path),
        "tied_embeddings": tied,
        "note": "lm_head is tied to the input embeddings: counted under embeddings" if tied else None,
        "n_params": n_all, "nnz": nnz, "changed_frac": nnz / max(n_all, 1),
        "delta_norm": math.sqrt(d_all), "base_norm": math.sqrt(b_all),
        "relative": math.sqrt(d_all / b_all) if b_all > 0 else None,
        "delta_sq": d_all, "base_sq": b_all,
        "top_fraction": top, "top_k": k, "top_threshold": threshold,
        "top_module": max(modules, key=lambda t: modules[t]["top"]) if k else None,
        "modules": modules,
        "layers": [{"layer": key, **v} for key, v in layers.items()],
        "cells": [{"layer": key.split("|")[0], "module": key.split("|")[1], **v} for key, v in cells.items()],
        "tensors": [{"name": name, "module": module_type(name), "layer": layer_of(name), "n": a[0],
                     "delta_sq": a[1], "base_sq": a[2], "nnz": a[3], "top": top_count[name]}
                    for name, a in acc.items()],
        "wall_s": round(time.time() - t0, 3),
    }
    return _write(pair.run_dir, "drift", result, write)


def compare_drift(results: Sequence[dict]) -> dict:
    """Runs side by side: relative drift overall and per module type, ratio to the first run."""
    labels, seen = [], {}
    for r in results:
        lab = r.get("algo") or "run"
        seen[lab] = seen.get(lab, 0) + 1
        labels.append(lab if seen[lab] == 1 else f"{lab}#{seen[lab]}")
    types = [t for t in MODULE_TYPES if any(t in r["modules"] for r in results)]
    out = {"runs": [{"label": lab, "run_dir": r["run_dir"], "relative": r["relative"],
                     "top_module": r["top_module"]} for lab, r in zip(labels, results)],
           "modules": {t: {lab: (r["modules"].get(t) or {}).get("relative") for lab, r in zip(labels, results)}
                       for t in types},
           "top_share": {t: {lab: (r["modules"].get(t) or {}).get("top_share") for lab, r in zip(labels, results)}
                         for t in types},
           "top_enrichment": {t: {lab: (r["modules"].get(t) or {}).get("top_enrichment")
                                  for lab, r in zip(labels, results)} for t in types}}
    first = results[0]["relative"]
    out["ratio_to_first"] = {lab: (r["relative"] / first if first else None) for lab, r in zip(labels, results)}
    rel = dict(zip(labels, (r["relative"] for r in results)))
    if rel.get("es") is not None and rel.get("grpo"):
        out["es_over_grpo"] = rel["es"] / rel["grpo"]          # the study: ES moves 40-44x farther
    return out


def format_drift(cmp: dict) -> str:
    labels = [r["label"] for r in cmp["runs"]]
    w = max(10, *(len(x) + 2 for x in labels))

    def f(v):
        return "-" if v is None else f"{v:.3e}"

    lines = [f"{'relative drift':<16}" + "".join(f"{x:>{w}}" for x in labels)
             + "   top-1% share (enrichment), per run"]
    lines.append(f"{'overall':<16}" + "".join(f"{f(r['relative']):>{w}}" for r in cmp["runs"]))
    for t, row in cmp["modules"].items():
        share, enr = cmp["top_share"][t], cmp["top_enrichment"][t]
        lines.append(f"{t:<16}" + "".join(f"{f(row[x]):>{w}}" for x in labels) + "   "
                     + "  ".join("-" if share[x] is None else f"{share[x]:.2f} ({enr[x]:.2f}x)" for x in labels))
    if len(labels) > 1:
        lines.append("ratio to " + labels[0] + ": " + ", ".join(f"{x} {v:.3g}" for x, v in cmp["ratio_to_first"].items()
                                                                if v is not None))
    if cmp.get("es_over_grpo") is not None:
        lines.append(f"relative drift ES / GRPO: {cmp['es_over_grpo']:.3g}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# forgetting
# ---------------------------------------------------------------------------------------------
def default_tasks(rc) -> list[str]:
    pool = TINY_HELDOUT_TASKS if models.is_tiny(rc.model) else REAL_HELDOUT_TASKS
    return [t for t in pool if t != rc.task.get("name")]


def task_config(name: str) -> dict:
    """The config of task ``name`` at its defaults (the task class holds them)."""
    if name not in tasks.TASK_NAMES:
        raise ConfigError(f"unknown task {name!r} (known: {', '.join(tasks.TASK_NAMES)})")
    return {"name": name}


def forgetting(run_dir: str | Path, *, tasks: Sequence[str] | None = None, base: str | None = None,
               device: str | None = None, opts: EvalOpts | None = None, write: bool = True,
               log: Callable[[str], None] | None = None) -> dict:
    """Base vs trained on tasks the run did not train on; write ``forgetting.json``.

    One model in memory at a time (base first, then trained)."""
    t0 = time.time()
    opts = opts or EvalOpts(greedy=True)
    opts.check()
    log = log or (lambda s: None)
    run_dir = Path(run_dir)
    rc = run_config(run_dir)
    tdir = trained_dir(run_dir)
    names = list(tasks) if tasks else default_tasks(rc)
    if not names:
        raise ConfigError("no held-out tasks to evaluate (give --tasks)")
    cfgs = {n: task_config(n) for n in names}
    o = opts.resolved(rc)
    k = o.samples
    dev = _device(rc, device)
    bname, bpath = _base_source(rc, base)
    evals: dict[str, dict] = {}
    for which, (name, path) in (("base", (bname, bpath)), ("trained", (rc.model["name"], str(tdir)))):
        model, tok = load_model(rc, name, path, dev)
        if which == "base":
            check_match(params(model), TrainedWeights(tdir), bname if bpath is None else f"{bname} ({bpath})")
        engine = _engine(rc, model, tok, dev)
        for tname, cfg in cfgs.items():
            ev = run_evaluate(engine, _task(rc, tok, cfg), o)
            evals[f"{which}/{tname}"] = ev
            log(f"forgetting {which:<7} {tname:<10} pass@1 {ev['pass@k']['1']:.4f}")
        del model, engine
    out_tasks = {}
    for tname in names:
        b, t = evals[f"base/{tname}"], evals[f"trained/{tname}"]
        change = {}
        for metric, kk in (("pass@1", 1), ("pass@K", k)):
            v, ci = paired_change(per_problem(b["correct_counts"], k, kk), per_problem(t["correct_counts"], k, kk),
                                  n_boot=o.bootstrap, seed=o.seed)
            change[metric], change[f"{metric}_ci"] = v, ci
        if b.get("greedy_correct") is not None:
            change["greedy"], change["greedy_ci"] = paired_change(b["greedy_correct"], t["greedy_correct"],
                                                                  n_boot=o.bootstrap, seed=o.seed)
        out_tasks[tname] = {"n_problems": b["n_problems"], "base": _scores(b, k), "trained": _scores(t, k),
                            "change": change, "base_counts": b["correct_counts"], "trained_counts": t["correct_counts"],
                            "base_greedy": b.get("greedy_correct"), "trained_greedy": t.get("greedy_correct")}
    metrics_ = [m for m in ("pass@1", "pass@K", "greedy") if all(m in v["change"] for v in out_tasks.values())]
    result = {
        **_header("forgetting", rc, run_dir, bname, bpath),
        "trained_task": rc.task.get("name"), "tasks_evaluated": names, "split": o.split,
        "samples": o.samples, "k": k, "temperature": o.temperature, "eval_seed": o.seed,
        "tasks": out_tasks,
        "mean_change": {m: float(np.mean([v["change"][m] for v in out_tasks.values()])) for m in metrics_},
        "wall_s": round(time.time() - t0, 3),
    }
    return _write(run_dir, "forgetting", result, write)


# ---------------------------------------------------------------------------------------------
# sweep hook and CLI
# ---------------------------------------------------------------------------------------------
def run_analyses(rc, run_dir: str | Path, names: Iterable[str], opts: dict | None = None) -> dict:
    """Run the named analyses on a finished run (sweep.run calls this after saving ``model/``).

    Evaluation sizes default to the run's own eval config (problems, samples, temperature,
    seed) on the task's ``heldout`` split; ``opts`` overrides (keys of :class:`EvalOpts` plus
    ``fractions``, ``modes``, ``top``, ``tasks``). Returns name -> path of the written JSON, or
    name -> ``{"error": line}``; never raises for an analysis that fails (it is reported on
    stderr as a warning), except for unknown names (ConfigError).
    """
    names = list(names)
    unknown = [n for n in names if n not in ANALYSES]
    if unknown:
        raise ConfigError(f"unknown analysis {unknown[0]!r} (known: {', '.join(ANALYSES)})")
    opts = dict(opts or {})
    fields = {f.name for f in dataclasses.fields(EvalOpts)}
    eo = EvalOpts(**{"problems": rc.eval.problems, "samples": rc.eval.samples, "greedy": False,
                     **{k: v for k, v in opts.items() if k in fields}})
    out: dict = {}
    for name in names:
        try:
            if name == "sparsity":
                sparsity(run_dir, fractions=opts.get("fractions", DEFAULT_FRACTIONS),
                         modes=opts.get("modes", MODES), opts=eo, device=opts.get("device"))
            elif name == "drift":
                drift(run_dir, top=float(opts.get("top", 0.01)), device=opts.get("device", "cpu"))
            else:
                forgetting(run_dir, tasks=opts.get("tasks"), device=opts.get("device"),
                           opts=dataclasses.replace(eo, greedy=bool(opts.get("greedy", True))))
            out[name] = str(Path(run_dir) / f"{name}.json")
        except Exception as e:  # noqa: BLE001 - an analysis never fails the run
            line = f"{type(e).__name__}: {e}".splitlines()[0][:500]
            print(f"esopt: warning: analysis {name} failed for {run_dir}: {line}", file=sys.stderr)
            out[name] = {"error": line}
    return out
