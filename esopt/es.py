"""Evolution strategies for LLM post-training, readable top to bottom.

Algorithm (Qiu et al. 2025; Ba et al. 2026; REFERENCE.md sections 1-3)::

    for t = 1..T:
        draw N member seeds s_i (antithetic: members 2j, 2j+1 share s_j with signs +, -)
        draw a fresh batch of B training prompts
        for each member i:                                    (or all at once: es.batched)
            theta <- theta + sign_i * sigma * eps(s_i)          (esopt.noise.perturb)
            R_i   <- mean task reward of greedy completions of the batch
            theta <- theta - ...                                (exact restore, bitwise)
        z = normalize(R)                                      (zscore | rank | none)
        theta <- theta + (lr / N) * sum_i z_i * sign_i * eps(s_i)   (1/sigma absorbed in lr)

Seeds and prompt batches are pure functions of (run seed, iteration), so a resumed run draws
exactly what an uninterrupted one would, and every distributed rank draws the same.
The weight arithmetic lives in ``esopt.noise``; population-batched generation in
``esopt.population``; multi-process helpers in ``esopt.distributed``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from esopt import distributed, metrics, noise


# --------------------------------------------------------------------------------------------
# Hyperparameters (conf/algo/es.yaml declares the same keys under `es:`).
# --------------------------------------------------------------------------------------------
@dataclass
class ESConfig:
    pop: int = 16                 # N, members per iteration (top-level `pop`)
    sigma: float = 0.01           # noise scale (top-level `sigma`; null -> es.sigma)
    lr: float = 0.005             # step size, 1/sigma absorbed (top-level `lr`; null -> es.lr)
    iterations: int = 30          # ES iterations (top-level `iterations`)
    seed: int = 0                 # run seed (top-level `seed`): member seeds + prompt batches
    batch_size: int = 64          # training prompts per iteration, fresh batch every iteration
    temperature: float = 0.0      # training decoding temperature; 0 = greedy (the easy setting)
    samples: int = 1              # completions per prompt per member (forced to 1 when greedy)
    max_new_tokens: int | None = None  # generation budget; null = the task's default
    normalize: str = "zscore"     # reward normalisation: zscore | rank (centred ranks) | none
    antithetic: bool = False      # mirrored pairs (+eps, -eps); pop must then be even
    batched: bool = False         # evaluate the population in one batched generate
    full_rank: bool = False       # batched mode: full-rank per-member weights (N model copies)
    rank: int = 1                 # batched mode without full_rank: EGGROLL noise rank r
    checkpoint_every: int = 10    # save a checkpoint every k iterations and at the end (0 = never)
    checksum_every: int = 10      # distributed: compare a weight checksum across ranks every k
    drift: bool = True            # log relative L2 drift from the base (keeps a CPU copy of it)

    _NORMALIZE = ("zscore", "rank", "none")

    @classmethod
    def from_run(cls, cfg) -> "ESConfig":
        """Merge a RunConfig's top-level axes with its ``es`` block.

        A null top-level ``sigma`` / ``lr`` takes ``es.sigma`` / ``es.lr``, which may be a number
        or a mapping by model family ``{tiny: ..., hub: ...}`` (conf/algo/es.yaml).
        """
        es = dict(cfg.es or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(es) - known)
        if unknown:
            from esopt.config import ConfigError

            raise ConfigError(f"unknown es key(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        family = "tiny" if str((cfg.model or {}).get("name", "")).startswith("tiny-") else "hub"
        for key in ("sigma", "lr"):
            if isinstance(es.get(key), Mapping):
                es[key] = es[key].get(family)
        es = {k: v for k, v in es.items() if v is not None or k == "max_new_tokens"}
        es["pop"], es["iterations"], es["seed"] = int(cfg.pop), int(cfg.iterations), int(cfg.seed)
        if cfg.sigma is not None:
            es["sigma"] = float(cfg.sigma)
        if cfg.lr is not None:
            es["lr"] = float(cfg.lr)
        return cls(**es)

    def validate(self) -> "ESConfig":
        """Raise esopt.config.ConfigError (one line) on the first bad value."""
        from esopt.config import ConfigError

        checks = [
            (self.pop >= 2, f"pop must be >= 2 (ES needs at least two members), got {self.pop}"),
            (self.sigma > 0 and math.isfinite(self.sigma), f"sigma must be > 0, got {self.sigma}"),
            (self.lr > 0 and math.isfinite(self.lr), f"lr must be > 0, got {self.lr}"),
            (self.iterations >= 1, f"iterations must be >= 1, got {self.iterations}"),
            (self.rank >= 1, f"es.rank must be >= 1, got {self.rank}"),
            (self.batch_size >= 1, f"es.batch_size must be >= 1, got {self.batch_size}"),
            (self.samples >= 1, f"es.samples must be >= 1, got {self.samples}"),
            (self.temperature >= 0, f"es.temperature must be >= 0, got {self.temperature}"),
            (self.normalize in self._NORMALIZE,
             f"es.normalize must be one of {', '.join(self._NORMALIZE)}, got {self.normalize!r}"),
            (not self.antithetic or self.pop % 2 == 0, f"es.antithetic needs an even pop, got {self.pop}"),
            (self.max_new_tokens is None or self.max_new_tokens >= 1,
             f"es.max_new_tokens must be >= 1, got {self.max_new_tokens}"),
            (self.checkpoint_every >= 0, f"es.checkpoint_every must be >= 0, got {self.checkpoint_every}"),
            (self.checksum_every >= 0, f"es.checksum_every must be >= 0, got {self.checksum_every}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        return self

    @property
    def noise_rank(self) -> int | None:
        """Rank of the perturbations: EGGROLL low rank in batched mode, else full (None)."""
        return self.rank if self.batched and not self.full_rank else None


def validate(cfg) -> None:
    """Hook called by esopt.config.validate for algorithms that use ES (before any work)."""
    es = ESConfig.from_run(cfg).validate()
    if es.batched and (cfg.engine or {}).get("name") == "vllm":
        from esopt.config import ConfigError

        raise ConfigError("es.batched needs engine=hf (vLLM schedules its own batches)")


# --------------------------------------------------------------------------------------------
# Pure pieces.
# --------------------------------------------------------------------------------------------
def normalize_rewards(r: Sequence[float], mode: str = "zscore") -> np.ndarray:
    """Normalised rewards ``z`` used as the update weights.

    zscore: ``z_i = (r_i - mean r) / (std r + 1e-8)`` (population std, as Qiu et al.).
    rank:   centred ranks ``z_i = rank(r_i) / (N - 1) - 0.5`` in [-0.5, 0.5] (ties share the
            mean rank), Salimans et al. 2017.
    none:   ``z_i = r_i``.
    """
    a = np.asarray(r, dtype=np.float64)
    if mode == "zscore":
        return (a - a.mean()) / (a.std() + 1e-8)
    if mode == "rank":
        from scipy.stats import rankdata

        return (rankdata(a) - 1.0) / max(len(a) - 1, 1) - 0.5
    if mode == "none":
        return a.copy()
    raise ValueError(f"unknown normalisation {mode!r}")


def member_seeds(run_seed: int, iteration: int, pop: int, antithetic: bool) -> tuple[list[int], list[float]]:
    """Seeds and signs of the N members of ``iteration`` (a pure function of its arguments).

    Antithetic: members 2j and 2j+1 share seed s_j with signs +1 and -1.
    """
    rng = np.random.default_rng([int(run_seed), int(iteration), 0xE5])
    if antithetic:
        half = rng.integers(0, 2**62, size=pop // 2).tolist()
        return [s for s in half for _ in (0, 1)], [1.0, -1.0] * (pop // 2)
    return rng.integers(0, 2**62, size=pop).tolist(), [1.0] * pop


def prompt_batch(run_seed: int, iteration: int, n_rows: int, batch_size: int) -> list[int]:
    """Indices of the iteration's training prompts: a fresh draw without replacement."""
    rng = np.random.default_rng([int(run_seed), int(iteration), 0xBA7C])
    return sorted(rng.choice(n_rows, size=min(batch_size, n_rows), replace=False).tolist())


# --------------------------------------------------------------------------------------------
# Scoring the population.
# --------------------------------------------------------------------------------------------
def _gen_kwargs(es: ESConfig, task, seed: int) -> dict:
    """Training decoding. Every member of an iteration uses the same sampling seed: with the hf
    engine's row-keyed sampling noise these are common random numbers, so members differ by
    their weights, not by sampling luck (irrelevant when greedy)."""
    greedy = es.temperature <= 0
    return dict(n=1 if greedy else es.samples, temperature=es.temperature,
                max_new_tokens=es.max_new_tokens or task.max_new_tokens, seed=seed,
                stop=tuple(task.stop))


def score(task, gen, rows: Sequence[Mapping]) -> tuple[float, list[float]]:
    """Member reward = mean verifier reward over prompts and samples; also the per-prompt
    success probability estimated from the samples (greedy: one sample, p in {0, 1})."""
    rewards, success = [], []
    for comps, row in zip(gen.completions, rows):
        verdicts = [task.verify(c, row) for c in comps]
        rewards += [v.reward for v in verdicts]
        success.append(float(np.mean([v.correct for v in verdicts])))
    return float(np.mean(rewards)), success


def weights_of(engine) -> noise.Weights:
    """The engine's weight operations: local parameters (hf engine), or the vLLM workers'
    parameters through ``collective_rpc`` (esopt.engines.vllm_worker.VLLMWeights)."""
    if hasattr(engine, "llm"):
        from esopt.engines.vllm_worker import VLLMWeights

        return VLLMWeights(engine.llm)
    return noise.Weights(engine.named_parameters())


def evaluate_members(engine, weights, task, rows, members: Sequence[int], seeds, signs, sigma: float,
                     es: ESConfig, gen_seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Rewards [len(members)] and success [len(members), P] of the given member indices.

    Sequential: perturb in place, generate, restore (bitwise). Batched: esopt.population.
    """
    prompts = [r["prompt"] for r in rows]
    kw = _gen_kwargs(es, task, gen_seed)
    rewards, success = [], []
    wall = {"gen": 0.0, "noise": 0.0, "tokens": 0}
    if es.batched and members:
        from esopt import population

        t = time.perf_counter()
        gens = population.generate(engine, prompts, [(seeds[i], signs[i]) for i in members], sigma,
                                   rank=es.noise_rank, **kw)
        wall["gen"] += time.perf_counter() - t
        for g in gens:
            r, s = score(task, g, rows)
            rewards.append(r), success.append(s)
            wall["tokens"] += g.n_tokens
    else:
        for i in members:
            t = time.perf_counter()
            weights.perturb(seeds[i], sigma, signs[i])
            t2 = time.perf_counter()
            try:
                g = engine.generate(prompts, **kw)
            finally:
                t3 = time.perf_counter()
                weights.restore()
                wall["noise"] += (t2 - t) + (time.perf_counter() - t3)
                wall["gen"] += t3 - t2
            r, s = score(task, g, rows)
            rewards.append(r), success.append(s)
            wall["tokens"] += g.n_tokens
    return np.asarray(rewards, dtype=np.float64), np.asarray(success, dtype=np.float64).reshape(len(members), -1), wall


def es_step(engine, task, train_rows, es: ESConfig, iteration: int, weights: noise.Weights | None = None) -> dict:
    """One ES iteration on the engine's weights (all ranks call it; each scores its share of
    the members, rewards are all-gathered, every rank applies the same update).
    Returns the diagnostics line (without the drift)."""
    weights = weights if weights is not None else weights_of(engine)
    world, rank = distributed.world_size(), distributed.rank()
    seeds, signs = member_seeds(es.seed, iteration, es.pop, es.antithetic)
    idx = prompt_batch(es.seed, iteration, len(train_rows), es.batch_size)
    rows = [train_rows[i] for i in idx]
    mine = distributed.my_members(es.pop, world, rank, es.antithetic)
    r_local, s_local, wall = evaluate_members(engine, weights, task, rows, mine, seeds, signs, es.sigma, es,
                                              gen_seed=es.seed * 1_000_003 + iteration)
    rewards, success, tokens = distributed.gather_members(mine, r_local, s_local, wall["tokens"],
                                                          es.pop, len(rows))
    if not np.all(np.isfinite(rewards)):
        raise _nonfinite(f"non-finite reward at iteration {iteration}: {rewards.tolist()}")
    z = normalize_rewards(rewards, es.normalize)
    t = time.perf_counter()
    step_norm = weights.update(seeds, (z * np.asarray(signs)).tolist(), es.lr, rank=es.noise_rank)
    wall_update = time.perf_counter() - t
    bad = weights.nonfinite()
    if bad is not None:
        raise _nonfinite(f"non-finite weights in {bad} after the update of iteration {iteration}")
    return {
        "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
        "reward_max": float(rewards.max()), "reward_min": float(rewards.min()),
        "rewards": [round(float(x), 6) for x in rewards],
        "js_succ": float(np.mean([metrics.js_succ(success[:, p]) for p in range(success.shape[1])])),
        "p_pop": float(np.mean([metrics.p_pop(success[:, p]) for p in range(success.shape[1])])),
        "update_norm": step_norm, "tokens_generated": int(tokens),
        "wall_gen": round(wall["gen"], 4), "wall_noise": round(wall["noise"], 4),
        "wall_update": round(wall_update, 4),
    }


def _nonfinite(message: str) -> Exception:
    try:
        from esopt.sweep import NonFinite
    except ImportError:  # pragma: no cover
        NonFinite = FloatingPointError
    return NonFinite(message)


# --------------------------------------------------------------------------------------------
# Checkpoints: HF save_pretrained + state.json, swapped in atomically.
# --------------------------------------------------------------------------------------------
def save_checkpoint(directory: Path, model, tokenizer, state: dict, weights: noise.Weights | None = None) -> None:
    """Write ``directory`` as a whole or not at all (tmp dir, then rename; old kept as .old).

    hf engine: ``model.save_pretrained`` (loadable with ``model.path=<dir>``). vLLM engine: the
    workers' own tensors (fused vLLM names) via ``weights.save``.
    """
    directory = Path(directory)
    tmp, old = directory.with_name(directory.name + ".tmp"), directory.with_name(directory.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if hasattr(weights, "save"):
        weights.save(tmp)
    else:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    (tmp / "state.json").write_text(json.dumps(state, indent=2))
    if directory.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(tmp, directory)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(directory: Path, weights: noise.Weights, phase: str) -> dict | None:
    """Copy a checkpoint's weights into the live parameters (bitwise); return its state or None."""
    directory = Path(directory)
    if not (directory / "state.json").exists():
        directory = directory.with_name(directory.name + ".old")  # killed mid-swap
        if not (directory / "state.json").exists():
            return None
    state = json.loads((directory / "state.json").read_text())
    if state.get("algo") != "es" or state.get("phase") != phase:
        return None
    if hasattr(weights, "load"):
        weights.load(directory)
        return state
    from safetensors.torch import load_file

    saved: dict[str, torch.Tensor] = {}
    for f in sorted(directory.glob("*.safetensors")):
        saved.update(load_file(str(f)))
    weights.load_state_dict(saved)
    return state


# --------------------------------------------------------------------------------------------
# The training loop.
# --------------------------------------------------------------------------------------------
def train(ctx) -> None:
    """ES on ``ctx.model`` through ``ctx.engine`` for ``ctx.iterations`` iterations.

    Logs one train line per iteration (rank 0), evaluates every ``eval.every`` iterations and
    at the end, checkpoints every ``es.checkpoint_every``, resumes from ``ctx.run.checkpoint_dir``.
    Drift is measured from the weights this phase started from (the base model for algo=es).
    """
    es = ESConfig.from_run(ctx.cfg)
    es.iterations = int(ctx.iterations)
    es.validate()
    # the summary's sigma/lr are ES's only for algo=es; in a sequence GRPO's lr is its own
    ctx.set_effective(sigma=es.sigma, es_sigma=es.sigma, es_lr=es.lr,
                      **({"lr": es.lr} if ctx.cfg.algo == "es" else {}))
    distributed.init()
    lead = distributed.rank() == 0
    train_rows = list(ctx.task.split("train"))
    weights = weights_of(ctx.engine)
    # Drift reference: a host copy of the base weights in their own dtype (for a 7B bf16 model
    # that is 14 GB of host RAM; set es.drift=false there). Drift = ||theta - theta_0|| /
    # ||theta_0|| with fp64 sums: exact up to summation rounding.
    if es.drift:
        weights.snapshot_base()

    start = 0
    state = load_checkpoint(ctx.run.checkpoint_dir, weights, ctx.phase) if ctx.run is not None else None
    if state is not None:
        start = int(state["iteration"])
        ctx.add_tokens(int(state["tokens_total"]) - ctx.tokens_total)
    distributed.check_same(weights.checksum(), where=f"start (iteration {start})")
    if lead and ctx.run is not None:  # lines an interrupted attempt wrote after its checkpoint
        last = ctx.iteration_offset + start
        ctx.run.truncate_metrics(
            lambda line: line.get("phase") != ctx.phase or int(line.get("iteration", 0)) <= last)

    # progress bar per run (iteration, reward, ETA) on a terminal; silent in logs and on ranks > 0
    bar = tqdm(range(start + 1, es.iterations + 1), initial=start, total=es.iterations,
               desc=f"es {ctx.phase}", disable=None if lead else True, leave=False, dynamic_ncols=True)
    for it in bar:
        line = es_step(ctx.engine, ctx.task, train_rows, es, it, weights)
        ctx.add_tokens(line["tokens_generated"])
        bar.set_postfix(reward=f"{line['reward_mean']:.3f}", refresh=False)
        if es.drift:
            line["drift"] = weights.drift()
        if es.checksum_every and it % es.checksum_every == 0:
            distributed.check_same(weights.checksum(), where=f"iteration {it}")
        if lead:
            ctx.log(kind="train", iteration=it, **line)
        if es.checkpoint_every and (it % es.checkpoint_every == 0 or it == es.iterations) and lead \
                and ctx.run is not None:
            save_checkpoint(ctx.run.checkpoint_dir, ctx.model, ctx.tokenizer,
                            {"algo": "es", "phase": ctx.phase, "iteration": it,
                             "tokens_total": ctx.tokens_total, "config": asdict(es)}, weights)
        # the eval schedule counts run iterations, so a sequence's curves line up with GRPO's
        if lead and ((ctx.iteration_offset + it) % ctx.cfg.eval.every == 0 or it == es.iterations):
            ctx.evaluate(it)
        distributed.barrier()
