"""Evolution strategies for LLM post-training, readable top to bottom.

Algorithm (Qiu et al. 2025, arXiv 2509.24372; Ba et al. 2026, arXiv 2608.27351)::

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
``esopt.engines.population``; multi-process helpers in ``esopt.algorithms.distributed``.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np
from tqdm.auto import tqdm

from esopt import engines, models
from esopt.algorithms import distributed
from esopt.core import metrics, store
from esopt.core.config import at_least, block, check_axes, model_default
from esopt.core.errors import ConfigError, NonFinite


# --------------------------------------------------------------------------------------------
# Hyperparameters: the `es:` config block (registered with Hydra by esopt.cli.configs).
# --------------------------------------------------------------------------------------------
# Knobs that change how fast a run goes, never its numbers (each tested bitwise: checkpoint /
# resume, rank checksums): not part of the run id.
SPEED_ONLY = ("checkpoint_every", "checksum_every")


@dataclass
class ESConfig:
    """The ``es:`` block. The run's grid axes (``pop``, ``sigma``, ``lr``, ``iterations``,
    ``seed``) are top-level keys; ``ESRun`` joins them with this block."""

    sigma: Optional[float] = None  # noise scale when the top-level sigma is null; null = the model's (model.hparams.es_sigma)
    lr: Optional[float] = None     # step size (1/sigma absorbed) when the top-level lr is null; null = model.hparams.es_lr
    batch_size: int = 64           # training prompts per iteration, a fresh draw from the train split (the study: 64)
    temperature: float = 0.0       # training decoding temperature; 0 = greedy (the study's easy setting; hard: 0.6)
    samples: int = 1               # completions per prompt per member (forced to 1 when greedy)
    max_new_tokens: Optional[int] = None  # generation budget while training; null = the task's default
    normalize: str = "zscore"      # reward normalisation: zscore (the study) | rank (centred ranks) | none
    antithetic: bool = False       # mirrored pairs (+eps, -eps) sharing a seed; pop must be even (the study: no gain)
    batched: bool = False          # score the population in batched generate calls (engines that batch one: hf)
    full_rank: bool = False        # batched: full-rank per-member weights (N model copies: small models only)
    rank: int = 1                  # batched without full_rank: EGGROLL low-rank perturbation rank r
    checkpoint_every: int = 10     # checkpoint every k iterations and at the end (0 = never)
    checksum_every: int = 10       # multi-process: compare a weight checksum across ranks every k (0 = never)
    drift: bool = True             # log relative L2 drift from the base (keeps a host copy of it)


NORMALIZE = ("zscore", "rank", "none")
ZSCORE_EPS = 1e-8            # added to the reward std in zscore normalisation
MEMBER_STREAM = 0xE5         # the member seeds' stream: rng([run seed, iteration, MEMBER_STREAM])
PROMPT_STREAM = 0xBA7C       # the prompt batches' stream: rng([run seed, iteration, PROMPT_STREAM])
MAX_MEMBER_SEED = 2**62      # member seeds are drawn from [0, MAX_MEMBER_SEED)
GEN_SEED_STRIDE = 1_000_003  # the iteration's sampling seed: run seed * GEN_SEED_STRIDE + iteration


@dataclass
class ESRun(ESConfig):
    """``ESConfig`` resolved for one run: sigma and lr filled in, plus the run's axes."""

    pop: int = 16                  # N, members per iteration (top-level `pop`)
    iterations: int = 30           # ES iterations of this run (or of this sequence phase)
    seed: int = 0                  # run seed: member seeds and prompt batches

    @classmethod
    def from_run(cls, cfg) -> "ESRun":
        """Top-level ``sigma`` / ``lr`` if set, else ``es.sigma`` / ``es.lr``, else the model's
        defaults (``model.hparams.es_sigma`` / ``es_lr``); plus ``pop``, ``iterations``, ``seed``."""
        es = asdict(block(ESConfig, cfg.es, "es"))
        es["sigma"] = cfg.sigma if cfg.sigma is not None else es["sigma"]
        es["lr"] = cfg.lr if cfg.lr is not None else es["lr"]
        if es["sigma"] is None:
            es["sigma"] = model_default(cfg, "es_sigma")
        if es["lr"] is None:
            es["lr"] = model_default(cfg, "es_lr")
        return cls(**es, pop=int(cfg.pop), iterations=int(cfg.iterations), seed=int(cfg.seed))

    def validate(self) -> "ESRun":
        """Raise ConfigError (one line) on the first bad value."""
        check_axes(self.pop, self.sigma, self.lr, self.iterations)
        for key, lo, allow_none in (("rank", 1, False), ("batch_size", 1, False), ("samples", 1, False),
                                    ("max_new_tokens", 1, True), ("checkpoint_every", 0, False),
                                    ("checksum_every", 0, False)):
            at_least(f"es.{key}", getattr(self, key), lo, allow_none=allow_none)
        at_least("es.temperature", self.temperature, 0, kind=float)
        if self.normalize not in NORMALIZE:
            raise ConfigError(f"es.normalize must be one of {', '.join(NORMALIZE)}, got {self.normalize!r}")
        if self.antithetic and self.pop % 2:
            raise ConfigError(f"es.antithetic needs an even pop, got {self.pop}")
        return self

    @property
    def noise_rank(self) -> int | None:
        """Rank of the perturbations: EGGROLL low rank in batched mode, else full (None)."""
        return self.rank if self.batched and not self.full_rank else None


def validate(cfg) -> None:
    """Config-time check for algorithms that use ES (before any work)."""
    es = ESRun.from_run(cfg).validate()
    if es.batched and not engines.engine_class(cfg.engine).batches_population:
        name = (cfg.engine or {}).get("name")
        raise ConfigError(f"es.batched needs an engine that batches a population; engine={name} schedules "
                          "its own batches (use es.batched=false: members one after another)")


def estimate_tokens(cfg, iterations: int, budget: int, train_rows: int | None = None) -> int:
    """Upper bound on ES's generated training tokens: iterations * pop * prompts per iteration
    (:func:`prompts_per_iteration`: es.batch_size clamped to the ``train_rows`` of the train
    split, as the run draws them) * samples (1 when greedy) * budget (es.max_new_tokens or the
    task's)."""
    es = block(ESConfig, cfg.es, "es")
    per_prompt = 1 if es.temperature <= 0 else es.samples
    prompts = es.batch_size if train_rows is None else prompts_per_iteration(es.batch_size, train_rows)
    return int(iterations * cfg.pop * prompts * per_prompt * (es.max_new_tokens or budget))


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
        return (a - a.mean()) / (a.std() + ZSCORE_EPS)
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
    rng = np.random.default_rng([int(run_seed), int(iteration), MEMBER_STREAM])
    if antithetic:
        half = rng.integers(0, MAX_MEMBER_SEED, size=pop // 2).tolist()
        return [s for s in half for _ in (0, 1)], [1.0, -1.0] * (pop // 2)
    return rng.integers(0, MAX_MEMBER_SEED, size=pop).tolist(), [1.0] * pop


def prompts_per_iteration(batch_size: int, n_rows: int) -> int:
    """Training prompts of one iteration: ``min(es.batch_size, rows of the train split)`` (the
    run's :func:`prompt_batch` and the sweep's token estimate alike)."""
    return min(int(batch_size), int(n_rows))


def prompt_batch(run_seed: int, iteration: int, n_rows: int, batch_size: int) -> list[int]:
    """Indices of the iteration's training prompts: a fresh draw without replacement."""
    rng = np.random.default_rng([int(run_seed), int(iteration), PROMPT_STREAM])
    return sorted(rng.choice(n_rows, size=prompts_per_iteration(batch_size, n_rows), replace=False).tolist())


# --------------------------------------------------------------------------------------------
# One ES iteration: the algorithm box.
# --------------------------------------------------------------------------------------------
def _gen_kwargs(es: ESRun, task, seed: int) -> dict:
    """Training decoding. Every member of an iteration uses the same sampling seed: with the hf
    engine's row-keyed sampling noise these are common random numbers, so members differ by
    their weights, not by sampling luck (irrelevant when greedy)."""
    greedy = es.temperature <= 0
    return dict(n=1 if greedy else es.samples, temperature=es.temperature,
                max_new_tokens=es.max_new_tokens or task.max_new_tokens, seed=seed,
                stop=tuple(task.stop))


def score(task, gen, rows: Sequence[Mapping], memo: dict | None = None) -> tuple[float, list[float]]:
    """Member reward = mean verifier reward over prompts and samples; also the per-prompt
    success probability estimated from the samples (greedy: one sample, p in {0, 1}).
    ``memo`` caches verdicts by (prompt index, completion) within an iteration: members often
    write the same completion, and the verifier is a pure function of the two."""
    rewards, success = [], []
    memo = {} if memo is None else memo
    for p, (comps, row) in enumerate(zip(gen.completions, rows)):
        verdicts = []
        for c in comps:
            v = memo.get((p, c))
            if v is None:
                v = memo[(p, c)] = task.verify(c, row)
            verdicts.append(v)
        rewards += [v.reward for v in verdicts]
        success.append(sum(bool(v.correct) for v in verdicts) / len(verdicts))  # exact: a count / n
    return float(np.mean(rewards)), success


class Clock(dict):
    """Seconds spent per phase of an iteration (``with clock("gen"): ...``), for diagnostics."""

    @contextmanager
    def __call__(self, phase: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self[phase] = self.get(phase, 0.0) + time.perf_counter() - t


def score_members(engine, weights, task, rows, members: Sequence[int], seeds, signs, es: ESRun,
                  gen_seed: int, clock: Clock) -> tuple[np.ndarray, np.ndarray, int]:
    """Rewards [len(members)], per-prompt success [len(members), P] and generated tokens of
    the given members: perturb the engine's weights, generate, restore them bitwise (or, with
    ``es.batched``, all members in the engine's batched forward passes without touching the
    shared weights)."""
    prompts = [r["prompt"] for r in rows]
    kw = _gen_kwargs(es, task, gen_seed)
    if es.batched:
        with clock("gen"):
            gens = engine.generate_population(prompts, [(seeds[i], signs[i]) for i in members], es.sigma,
                                              rank=es.noise_rank, **kw) if members else []
    else:
        gens = []
        for i in members:
            with clock("perturb"):
                weights.perturb(seeds[i], es.sigma, signs[i])          # theta_i = theta + sign_i sigma eps_i
            try:
                with clock("gen"):
                    gens.append(engine.generate(prompts, **kw))
            finally:
                with clock("restore"):
                    weights.restore()                                  # back to theta, bitwise
    with clock("score"):
        memo: dict = {}
        scored = [score(task, g, rows, memo) for g in gens]
    rewards = np.asarray([r for r, _ in scored], dtype=np.float64)
    success = np.asarray([s for _, s in scored], dtype=np.float64).reshape(len(members), len(rows))
    return rewards, success, int(sum(g.n_tokens for g in gens))


def es_step(engine, task, train_rows, es: ESRun, iteration: int, weights=None) -> dict:
    """One ES iteration on the engine's weights; returns its diagnostics line (no drift).

    Every rank calls it: each scores its share of the members, rewards are all-gathered, and
    every rank applies the same update from the shared seeds and rewards.
    """
    weights = weights if weights is not None else engine.weights()
    clock = Clock()
    seeds, signs = member_seeds(es.seed, iteration, es.pop, es.antithetic)        # s_1..s_N
    rows = [train_rows[i] for i in prompt_batch(es.seed, iteration, len(train_rows), es.batch_size)]
    mine = distributed.my_members(es.pop, distributed.world_size(), distributed.rank(), es.antithetic)
    r_mine, s_mine, tokens = score_members(engine, weights, task, rows, mine, seeds, signs, es,
                                           es.seed * GEN_SEED_STRIDE + iteration, clock)  # R_i
    rewards, success, tokens = distributed.gather_members(mine, r_mine, s_mine, tokens, es.pop, len(rows))
    if not np.all(np.isfinite(rewards)):
        raise NonFinite(f"non-finite reward at iteration {iteration}: {rewards.tolist()}")
    z = normalize_rewards(rewards, es.normalize)                                  # z = normalise(R)
    with clock("update"):
        step_norm = weights.update(seeds, (z * np.asarray(signs)).tolist(), es.lr,  # theta += lr/N sum z_i eps_i
                                   rank=es.noise_rank)
    bad = weights.nonfinite()
    if bad is not None:
        raise NonFinite(f"non-finite weights in {bad} after the update of iteration {iteration}")
    world = distributed.world_size()
    return {
        "world_size": world,
        **({"members_by_rank": [distributed.my_members(es.pop, world, r, es.antithetic) for r in range(world)]}
           if world > 1 else {}),
        "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
        "reward_max": float(rewards.max()), "reward_min": float(rewards.min()),
        "rewards": [round(float(x), 6) for x in rewards],
        "js_succ": float(np.mean([metrics.js_succ(success[:, p]) for p in range(success.shape[1])])),
        "p_pop": float(np.mean([metrics.p_pop(success[:, p]) for p in range(success.shape[1])])),
        "update_norm": step_norm, "tokens_generated": int(tokens),
        **{f"wall_{k}": round(v, 4) for k, v in clock.items()},
    }


# --------------------------------------------------------------------------------------------
# Checkpoints: the engine's weights as an HF folder (esopt.models.save) + state.json.
# --------------------------------------------------------------------------------------------
def save_checkpoint(ctx, state: dict) -> None:
    """Write ``<run>/checkpoint/`` as a whole or not at all: the weights the engine generates
    with (copied into the HF model first when the engine holds its own copy), state.json and,
    last, the sha256 manifest that :func:`load_checkpoint` checks."""
    ctx.engine.sync_to(ctx.model)
    models.save(ctx.model, ctx.tokenizer, ctx.run.checkpoint_dir,
                extra={"state.json": json.dumps(state, indent=2)}, manifest=True)


def load_checkpoint(ctx, phase: str) -> dict | None:
    """Copy a checkpoint's weights into the model and the engine (bitwise); return its state.
    A checkpoint whose files do not match its manifest (a flipped byte, a truncated file, no
    manifest) is not used: the previous one (``checkpoint.old``, left by a kill mid-swap) if it
    is sound, else None (the run restarts), with one warning line naming the file."""
    current = Path(ctx.run.checkpoint_dir)
    bad = None
    for directory in (current, current.with_name(current.name + ".old")):
        if not directory.exists():
            continue
        reason = store.verify_manifest(directory)
        if reason is None:
            try:
                state = json.loads((directory / "state.json").read_text())
            except (OSError, ValueError) as e:  # pragma: no cover - the manifest covers it
                reason = f"{directory / 'state.json'}: unreadable ({e})"
        if reason is not None:
            bad = bad or reason
            continue
        if state.get("algo") != "es" or state.get("phase") != phase:
            return None
        if bad:
            store.checkpoint_warning(bad, directory.name)
        models.load_weights(ctx.model, directory)
        ctx.engine.sync_from(ctx.model)
        return state
    if bad:
        store.checkpoint_warning(bad, None)
    return None


# --------------------------------------------------------------------------------------------
# The training loop: iterations, plus recording, checkpoints and evaluations around them.
# --------------------------------------------------------------------------------------------
def train(ctx) -> None:
    """ES on the engine's weights for ``ctx.iterations`` iterations.

    Logs one train line per iteration (rank 0), evaluates every ``eval.every`` run iterations
    and at the end, checkpoints every ``es.checkpoint_every``, resumes from the run's
    checkpoint. Drift is measured from the weights this phase started from.
    """
    es = ESRun.from_run(ctx.cfg)
    es.iterations = int(ctx.iterations)
    es.validate()
    # the summary's lr is ES's only when ES is the whole run; in a sequence GRPO's lr is its own
    ctx.set_effective(sigma=es.sigma, es_sigma=es.sigma, es_lr=es.lr,
                      **({"lr": es.lr} if ctx.phase == ctx.cfg.algo else {}))
    distributed.init()
    lead = distributed.rank() == 0
    train_rows = list(ctx.task.split("train"))
    weights = ctx.engine.weights()
    if es.drift:  # a host copy of the starting weights (7B bf16: 14 GB; es.drift=false there)
        weights.snapshot_base()

    start = 0
    state = load_checkpoint(ctx, ctx.phase) if ctx.run is not None else None
    if state is not None:
        start = int(state["iteration"])
        ctx.add_tokens(int(state["tokens_total"]) - ctx.tokens_total)
    distributed.check_same(weights.checksum(), where=f"start (iteration {start})")
    if lead and ctx.run is not None:  # lines an interrupted attempt wrote after its checkpoint
        last = ctx.iteration_offset + start

        def keep(line) -> bool:  # the evaluation at the checkpoint is redone below (same weights)
            it = int(line.get("iteration", 0))
            return line.get("phase") != ctx.phase or it < last or (it == last and line.get("kind") != "eval")

        ctx.run.truncate_metrics(keep)
    # A kill between the checkpoint and the evaluation due at that iteration would lose that
    # curve point (and its Optuna report): evaluate it now, on the checkpoint's weights.
    if lead and start > 0 and ctx.eval_due(start):
        ctx.evaluate(start)

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
            save_checkpoint(ctx, {"algo": "es", "phase": ctx.phase, "iteration": it,
                                  "tokens_total": ctx.tokens_total, "config": asdict(es)})
        if lead and ctx.eval_due(it):
            ctx.evaluate(it)
        distributed.barrier()
