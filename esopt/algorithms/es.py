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
ES here is a strategy (:class:`ES`: ask for the members, tell their rewards); the loop around it
(scoring the members, records, checkpoints, resume, evaluations) is ``esopt.algorithms.trainer``.
The weight arithmetic lives in ``esopt.noise``; population-batched generation in
``esopt.engines.population``; multi-process helpers in ``esopt.algorithms.distributed``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np

from esopt import engines
from esopt.algorithms import trainer
from esopt.algorithms.strategy import Strategy
from esopt.core.config import at_least, block, check_axes, model_default
from esopt.core.errors import ConfigError


# --------------------------------------------------------------------------------------------
# Hyperparameters: the `es:` config block (registered with Hydra by esopt.cli.configs).
# --------------------------------------------------------------------------------------------
# Knobs that change how fast a run goes, never its numbers (each tested bitwise: checkpoint /
# resume, rank checksums): not part of the run id.
SPEED_ONLY = ("checkpoint_every", "checksum_every")
# keys added after runs were recorded, at the value that leaves a run's id as it was
ID_NEUTRAL = (("anchor_decay", 0.0), ("targets", None))


def inert_keys(block: dict) -> dict[str, str]:
    """The ``es:`` keys set away from their default that the block's other values leave unread:
    ``perturb_rank`` unless batched low rank, ``full_rank`` unless batched. ``ESRun.from_run`` resolves them
    to their defaults (the run, and its id, are full-rank ES's), and a note says so."""
    batched = block.get("batched") is True
    out = {}
    if "perturb_rank" in block and block["perturb_rank"] != ESConfig.perturb_rank \
            and not (batched and block.get("full_rank") is not True):
        out["perturb_rank"] = "es.batched=false (full-rank ES)" if not batched else "es.full_rank=true"
    if "full_rank" in block and block["full_rank"] is True and not batched:
        out["full_rank"] = "es.batched=false (ES is full rank)"
    return out


@dataclass(frozen=True)
class ESConfig:
    """The ``es:`` block. The run's grid axes (``pop``, ``sigma``, ``lr``, ``iterations``,
    ``seed``) are top-level keys; ``ESRun`` joins them with this block. Its terms shared with
    GRPO (docs/design/architecture.md, "Terms"): prompts per step (``batch_size``), samples per
    prompt (``samples``)."""

    sigma: Optional[float] = None  # noise scale when the top-level sigma is null; null = the model's (model.hparams.es_sigma)
    lr: Optional[float] = None     # step size (1/sigma absorbed) when the top-level lr is null; null = model.hparams.es_lr
    batch_size: int = 64           # prompts per step: training prompts per iteration, a fresh draw from the train
    #                                split (the study: 64; GRPO's grpo.prompts_per_step)
    temperature: float = 0.0       # training decoding temperature; 0 = greedy (the study's easy setting; hard: 0.6)
    samples: int = 1               # samples per prompt: completions per prompt per member (forced to 1 when
    #                                greedy; GRPO's grpo.num_generations)
    max_new_tokens: Optional[int] = None  # generation budget while training; null = the task's default
    normalize: str = "zscore"      # reward normalisation: zscore (the study) | rank (centred ranks) | none
    antithetic: bool = False       # mirrored pairs (+eps, -eps) sharing a seed; pop must be even (the study: no gain)
    batched: bool = False          # score the population in batched generate calls (engines that batch one: hf)
    full_rank: bool = False        # batched: full-rank per-member weights (N model copies: small models only)
    perturb_rank: int = 1          # batched without full_rank: the rank r of each member's EGGROLL low-rank
    #                                perturbation (was es.rank; not normalize=rank, nor a process's rank)
    targets: Optional[str] = None  # batched low rank: what members perturb, all | linear (the linear layers'
    #                                weights only: what LoRA reaches); null = the engine's first (hf: all, vllm: linear)
    checkpoint_every: int = 10     # checkpoint every k iterations and at the end (0 = never)
    checksum_every: int = 10       # multi-process: compare a weight checksum across ranks every k (0 = never)
    drift: bool = True             # log relative L2 drift from the base (keeps a host copy of it)
    anchor_decay: float = 0.0      # anchored weight decay lambda (Schweighofer et al. 2026): after each
    #                                update theta <- theta - lambda (theta - theta_0), theta_0 = the weights
    #                                the ES phase started from (a host copy, as for drift); 0 = off


NORMALIZE = ("zscore", "rank", "none")
ZSCORE_EPS = 1e-8            # added to the reward std in zscore normalisation
MEMBER_STREAM = 0xE5         # the member seeds' stream: rng([run seed, iteration, MEMBER_STREAM])
PROMPT_STREAM = 0xBA7C       # the prompt batches' stream: rng([run seed, iteration, PROMPT_STREAM])
MAX_MEMBER_SEED = 2**62      # member seeds are drawn from [0, MAX_MEMBER_SEED)


@dataclass(frozen=True)
class ESRun(ESConfig):
    """``ESConfig`` resolved for one run: sigma and lr filled in, plus the run's axes."""

    pop: int = 16                  # N, members per iteration (top-level `pop`)
    iterations: int = 30           # ES iterations of this run (or of this sequence phase)
    seed: int = 0                  # run seed: member seeds and prompt batches

    @classmethod
    def from_run(cls, cfg) -> "ESRun":
        """Top-level ``sigma`` / ``lr`` if set, else ``es.sigma`` / ``es.lr``, else the model's
        defaults (``model.hparams.es_sigma`` / ``es_lr``); plus ``pop``, ``iterations``, ``seed``."""
        es = asdict(block(ESConfig, cfg.block("es"), "es"))
        at_least("es.perturb_rank", es["perturb_rank"], 1)  # checked as written, though unread below
        for key in inert_keys(es):  # unread with the other values: the default (one run, one id)
            es[key] = getattr(ESConfig, key)
        es["sigma"] = cfg.sigma if cfg.sigma is not None else es["sigma"]
        es["lr"] = cfg.lr if cfg.lr is not None else es["lr"]
        if es["targets"] is None and es["batched"] and not es["full_rank"]:
            es["targets"] = _engine_targets(cfg)[0]
        if es["targets"] == "all":  # null and all are one ES (and keep the ids runs had before targets)
            es["targets"] = None
        for key in ("sigma", "lr"):  # a float either way, so a stated 1 and 1.0 are one run
            value = es[key]
            es[key] = model_default(cfg, f"es_{key}") if value is None else (
                float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value)
        return cls(**es, pop=int(cfg.pop), iterations=int(cfg.iterations), seed=int(cfg.seed))

    def validate(self) -> "ESRun":
        """Raise ConfigError (one line) on the first bad value."""
        check_axes(self.pop, self.sigma, self.lr, self.iterations)
        for key, lo, allow_none in (("perturb_rank", 1, False), ("batch_size", 1, False), ("samples", 1, False),
                                    ("max_new_tokens", 1, True), ("checkpoint_every", 0, False),
                                    ("checksum_every", 0, False)):
            at_least(f"es.{key}", getattr(self, key), lo, allow_none=allow_none)
        at_least("es.temperature", self.temperature, 0, kind=float)
        at_least("es.anchor_decay", self.anchor_decay, 0, kind=float)
        if self.anchor_decay >= 1:
            raise ConfigError(f"es.anchor_decay must be in [0, 1): 1 or more resets to (or past) the start "
                              f"weights every iteration, got {self.anchor_decay}")
        if self.normalize not in NORMALIZE:
            raise ConfigError(f"es.normalize must be one of {', '.join(NORMALIZE)}, got {self.normalize!r}")
        if self.targets is not None and self.targets not in TARGETS:
            raise ConfigError(f"es.targets must be one of {', '.join(TARGETS)} or null, got {self.targets!r}")
        if self.targets == "linear" and self.noise_rank is None:
            raise ConfigError("es.targets=linear is low-rank batched ES: it needs es.batched=true and es.full_rank=false")
        if self.antithetic and self.pop % 2:
            raise ConfigError(f"es.antithetic needs an even pop, got {self.pop}")
        return self

    @property
    def noise_rank(self) -> int | None:
        """Rank of the perturbations: EGGROLL low rank in batched mode, else full (None)."""
        return self.perturb_rank if self.batched and not self.full_rank else None

    @property
    def noise_targets(self) -> str:
        """What members perturb and the update moves: ``all``, or ``linear`` (esopt.engines.lora)."""
        return self.targets or "all"

    @property
    def label(self) -> str:
        """How the run's ES is named in tables: ``full-rank`` (the study's ES) or
        ``EGGROLL r=<rank>`` (+ ``, linear layers`` when only those are perturbed)."""
        if self.noise_rank is None:
            return "full-rank"
        return f"EGGROLL r={self.noise_rank}" + (", linear layers" if self.noise_targets == "linear" else "")


TARGETS = ("all", "linear")  # es.targets (esopt.engines.lora)


def _engine_targets(cfg) -> tuple[str, ...]:
    """The ``es.targets`` the run's engine batches, its default first (the plan's typed engine)."""
    try:
        return tuple(engines.engine_class(cfg.engine_config).population_targets)
    except Exception:  # noqa: BLE001 - an unknown engine: its own validation says so
        return ("all",)


def check_engine(cfg, es: ESRun) -> None:
    """What a batched population needs of the run's engine, read from the engine class's
    capabilities (``batches_population``, ``population_full_rank``, ``population_targets``,
    ``check_population``)."""
    if not es.batched:
        return
    cls = engines.engine_class(cfg.engine_config)
    name = cfg.engine_config.name
    if not cls.batches_population:
        raise ConfigError(f"es.batched needs an engine that batches a population; engine={name} schedules "
                          "its own batches (use es.batched=false: members one after another)")
    if es.full_rank and not cls.population_full_rank:
        raise ConfigError(f"engine={name} batches low-rank members only: es.full_rank=true needs engine=hf "
                          "(or es.batched=false)")
    supported = _engine_targets(cfg)
    if es.noise_rank is not None and es.noise_targets not in supported:
        raise ConfigError(f"engine={name} batches members over es.targets={' or '.join(supported)} only "
                          f"(LoRA reaches the linear layers, not embeddings, norms or biases), "
                          f"got es.targets={es.noise_targets}")
    cls.check_population(cfg.engine_config, cfg.model, es.noise_rank)


def noise_label(plan) -> str | None:
    """How a run's ES perturbs, for tables (dry run, report): ``full-rank`` (the study's ES) or
    ``EGGROLL r=<rank>[, linear layers]`` (low-rank batched ES is EGGROLL, not the study's ES),
    read from its plan's ES phase; None when it has none."""
    planned = [p.settings for p in plan.phases if isinstance(p.settings, ESRun)]
    return planned[0].label if planned else None


def estimate_tokens(es: ESRun, iterations: int, budget: int, train_rows: int | None = None) -> int:
    """Upper bound on ES's generated training tokens (``es``: the phase's resolved ``ESRun``):
    iterations * pop * prompts per iteration (:func:`prompts_per_iteration`: es.batch_size
    clamped to the ``train_rows`` of the train split, as the run draws them) * samples (1 when
    greedy) * budget (es.max_new_tokens or the task's)."""
    per_prompt = 1 if es.temperature <= 0 else es.samples
    prompts = es.batch_size if train_rows is None else prompts_per_iteration(es.batch_size, train_rows)
    return int(iterations * es.pop * prompts * per_prompt * (es.max_new_tokens or budget))


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
# The strategy: ask for the members, tell their rewards (the loop around it: trainer.py).
# --------------------------------------------------------------------------------------------
class ES(Strategy):
    """ES as an ask/tell strategy over ``cfg`` (an :class:`ESRun`): the registry's ``es`` entry
    (its checks, settings, token estimate and train are this class's, ``Strategy``)."""

    name = "es"
    config = ESRun

    @classmethod
    def validate(cls, plan) -> None:
        """Config-time check for a run of ES or a variant of it (before any work): a batched
        population fits the engine (:func:`check_engine`; its settings were resolved and
        validated once, into the plan's phase)."""
        check_engine(plan, plan.phase(cls.name).settings)

    estimate_tokens = staticmethod(estimate_tokens)

    def ask(self, iteration: int, n_rows: int) -> tuple[list[int], list[float], list[int]]:
        """The iteration's member seeds and signs, and its prompt batch (indices)."""
        c = self.cfg
        seeds, signs = member_seeds(c.seed, iteration, c.pop, c.antithetic)           # s_1..s_N
        return seeds, signs, prompt_batch(c.seed, iteration, n_rows, c.batch_size)

    def tell(self, seeds, signs, rewards: np.ndarray, weights) -> float:
        """``theta += (lr / N) * sum_i z_i * sign_i * eps(s_i)``, z = normalise(R); the step's norm."""
        z = normalize_rewards(rewards, self.cfg.normalize)                            # z = normalise(R)
        targets = {"targets": self.cfg.noise_targets} if self.cfg.noise_targets != "all" else {}
        return weights.update(seeds, (z * np.asarray(signs)).tolist(), self.cfg.lr,   # theta += lr/N sum z_i eps_i
                              rank=self.cfg.noise_rank, **targets)

    def effective(self, ctx) -> dict:
        """sigma, lr and the noise in summary.json: the summary's lr is ES's only when ES is the
        whole run (in a sequence GRPO's lr is its own); low-rank (EGGROLL) runs are not the
        study's full-rank ES."""
        es = self.cfg
        return dict(sigma=es.sigma, es_sigma=es.sigma, es_lr=es.lr, es_rank=es.noise_rank,
                    es_targets=es.noise_targets, es_noise=es.label,
                    **({"lr": es.lr} if ctx.phase == ctx.cfg.algo else {}))


def es_step(engine, task, train_rows, es: ESRun, iteration: int, weights=None) -> dict:
    """One ES iteration on the engine's weights (:func:`esopt.algorithms.trainer.step`)."""
    return trainer.step(ES(es), engine, task, train_rows, iteration, weights)


# ES on the engine's weights for ``ctx.iterations`` iterations (the loop, its records,
# checkpoints and evaluations: :func:`esopt.algorithms.trainer.train`); the run's settings for
# ``iterations``; the config-time checks.
train, resolve, validate = ES.train, ES.resolve, ES.validate
