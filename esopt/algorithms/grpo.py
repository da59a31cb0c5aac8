"""GRPO baseline: TRL's ``GRPOTrainer`` wired to esopt's tasks, evaluator and run directory.

Nothing here re-implements GRPO. This module only
  * turns the ``grpo:`` config block into a ``trl.GRPOConfig`` (:class:`GRPOSettings`),
  * builds the reward function from the task's verifier (``Verdict.reward`` of ``task.verify``),
  * records every optimizer step into ``metrics.jsonl`` (a ``TrainerCallback.on_log``, one log
    per step), in the same shape as ES train lines: reward_mean/std/max/min, accuracy, format,
    TRL's entropy, kl (beta > 0), clip_ratio(_low/_high), frac_reward_zero_std,
    completion_length, loss, grad_norm, lr, tokens_generated, tokens_fwd_bwd, wall_step;
    then runs the shared held-out evaluator (``ctx.evaluate``: model in eval mode, no grad,
    the same weights the engine wraps) every ``eval.every`` run iterations and at the end,
    before that step's checkpoint is written,
  * counts compute the same way as ES: generated tokens (EOS included; into ``ctx.add_tokens``),
    prompt+completion tokens through the policy's forward+backward (padding excluded), wall time,
  * checkpoints with the Trainer's own ``save_steps`` (HF weights + optimizer, scheduler, RNG
    and ``trainer_state.json``, which also keeps the run's token count) under
    ``<run>/checkpoint/grpo/checkpoint-<step>/`` (a sequence phase: under its phase directory)
    and resumes from the newest one, so a requeued job continues at the step it reached;
    metrics lines a killed attempt wrote after that checkpoint are dropped first.

Precision: GRPO trains fp32 master weights with fp32 AdamW state whatever ``model.dtype``
(:func:`keep_masters`: the weights loaded at ``model.dtype``, then held in float32), and computes
in ``model.dtype`` through accelerate's own mixed precision (``grpo.bf16``, null = when
``model.dtype`` is bfloat16: TRL's ``bf16=True``, torch autocast on CPU and GPU alike; float16:
``fp16=True`` with its gradient scaler). An update of lr = 1e-6 is far below half a bf16 step
at typical weight magnitudes (|w| / 256) and would round away in bf16-resident weights.
``<run>/model/`` holds the masters (``model.save_dtype`` casts them for serving).

Batch geometry (TRL's terms): one optimizer step consumes ``prompts_per_step`` prompts x
``num_generations`` completions = ``B`` completions, split into ``grad_accum`` micro-batches of
``B / grad_accum`` (``per_device_train_batch_size``); generation happens once per step
(``steps_per_generation = grad_accum``), so with ``num_iterations = 1`` GRPO is on-policy.
The top-level ``iterations`` is the number of optimizer steps (``max_steps``).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from esopt.core.config import at_least, block, model_default
from esopt.core.errors import ConfigError
from esopt.algorithms import distributed
from esopt.core import preempt, store
from esopt.core.store import apply_umask

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo")
SCALE_REWARDS = ("group", "batch", "none")


# GRPOConfig fields esopt derives from its own keys (grpo.trl may not override them): batch
# geometry, the step budget, lr, one log line per step, checkpoint location and cadence.
MANAGED = frozenset({
    "output_dir", "max_steps", "num_train_epochs", "learning_rate", "per_device_train_batch_size",
    "gradient_accumulation_steps", "generation_batch_size", "steps_per_generation", "num_generations",
    "logging_steps", "logging_strategy", "save_strategy", "save_steps", "save_total_limit", "seed",
    "data_seed", "use_cpu", "report_to", "max_completion_length", "temperature", "beta",
    "bf16", "fp16", "bf16_full_eval", "fp16_full_eval", "half_precision_backend",  # masters: keep_masters
})
# GRPOConfig fields that shard the model over processes (FSDP, DeepSpeed ZeRO): esopt sets them (grpo.sharding)
SHARDING = frozenset({"fsdp", "fsdp_config", "deepspeed"})
# grpo.sharding: how G processes hold the model (accelerate's FSDP2; DeepSpeed is not used)
SHARDINGS = {
    "full_shard": "FSDP2, parameters resharded after forward (ZeRO-3)",
    "shard_grad_op": "FSDP2, parameters kept gathered between forward and backward (ZeRO-2)",
    "none": "every process holds the whole model, gradients averaged (DDP)",
}
ROLLOUTS = ("trl", "engine")  # grpo.rollouts
HALF = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}


@dataclass(frozen=True)
class GRPOSettings:
    """The ``grpo:`` config block (registered with Hydra by esopt.cli.configs). Defaults are the
    study's GRPO setting (group size 8, temperature 1.0; lr per model in model.hparams.grpo_lr:
    1e-6 for hub models) and TRL's defaults elsewhere (beta 0, epsilon 0.2, loss dapo, group
    reward scaling). The top-level ``iterations`` is the number of optimizer steps. Its terms
    shared with ES (docs/design/architecture.md, "Terms"): prompts per step
    (``prompts_per_step``), samples per prompt (``num_generations``)."""

    num_generations: int = 8          # samples per prompt: group size G (completions per prompt); the study: 8
    #                                   (ES's es.samples)
    prompts_per_step: int = 8         # prompts per step: prompts per optimizer step (B = prompts * G completions;
    #                                   ES's es.batch_size)
    grad_accum: int = 1               # micro-batches per step; must divide B
    num_iterations: int = 1           # TRL's mu: optimizer passes per generation batch
    beta: float = 0.0                 # KL coefficient; 0 = no reference model (TRL default)
    epsilon: float = 0.2              # lower clip range
    epsilon_high: float | None = None  # upper clip range; null = epsilon (DAPO suggests 0.28)
    loss_type: str = "dapo"           # TRL default
    scale_rewards: str = "group"      # group | batch | none
    temperature: float = 1.0          # sampling temperature during training; the study: 1.0
    top_p: float = 1.0
    max_completion_length: int | None = None  # null = the task's max_new_tokens
    lr: Optional[float] = None        # when the top-level lr is null; null = the model's (model.hparams.grpo_lr)
    lr_scheduler: str = "constant"    # HF scheduler name; constant = like ES
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    save_every: int | None = None     # checkpoint every N steps; null = eval.every
    gradient_checkpointing: bool = False
    bf16: bool | None = None          # bf16 autocast (accelerate's mixed precision) over the fp32 master weights;
    #                                   null = when model.dtype is bfloat16 (the run's plan holds the answer)
    sharding: str | None = None       # G > 1 processes (model.resources.gpus / ranks): full_shard | shard_grad_op
    #                                   (FSDP2 through accelerate, GPUs only) | none (replicated); null = full_shard
    #                                   on GPUs with engine=vllm, else none (sharding_of)
    rollouts: str = "trl"             # who samples the completions: trl (TRL, with its generate or, grpo.use_vllm,
    #                                   its own colocated vLLM) | engine (the run's engine, synced to the policy
    #                                   every step: an engine that serves rollouts, engine=vllm; CPU or GPU)
    use_vllm: bool = False            # TRL's own colocated vLLM samples (GPU only; engine=hf), its GPU share
    #                                   engine.colocated_gpu_share; with an engine that serves rollouts it means
    #                                   grpo.rollouts=engine (its spelling before that key)
    trl: dict = field(default_factory=dict)  # extra GRPOConfig fields, passed through verbatim

    @classmethod
    def from_config(cls, raw: Mapping | None) -> "GRPOSettings":
        """Build and check the settings; raise ConfigError (one line) on bad input."""
        nullable = ("epsilon_high", "max_completion_length", "save_every", "bf16", "sharding")
        known = {f.name for f in fields(cls)}
        s = block(cls, {k: v for k, v in dict(raw or {}).items()
                        if v is not None or k in nullable or k not in known}, "grpo")
        s.validate()
        return s

    def validate(self) -> None:
        """One clear line for every input TRL would reject mid-run (or silently misuse)."""
        def integer(name: str, lo: int) -> int:
            return at_least(f"grpo.{name}", getattr(self, name), lo)

        g = integer("num_generations", 1)
        if g < 2:
            raise ConfigError(f"grpo.num_generations (group size) must be >= 2 to form advantages, got {g}")
        p = integer("prompts_per_step", 1)
        a = integer("grad_accum", 1)
        integer("num_iterations", 1)
        integer("warmup_steps", 0)
        if (p * g) % a:
            raise ConfigError(
                f"grpo.grad_accum={a} must divide prompts_per_step*num_generations={p}*{g}={p * g} "
                "(each micro-batch must hold whole completions)"
            )
        if self.max_completion_length is not None:
            integer("max_completion_length", 1)
        if self.save_every is not None:
            integer("save_every", 1)
        for name in ("beta", "epsilon", "weight_decay", "max_grad_norm"):
            at_least(f"grpo.{name}", getattr(self, name), 0.0, kind=float)
        at_least("grpo.epsilon_high", self.epsilon_high, 0, kind=float, allow_none=True)
        if not isinstance(self.temperature, (int, float)) or self.temperature <= 0:
            raise ConfigError(f"grpo.temperature must be > 0 (GRPO samples), got {self.temperature!r}")
        if self.rollouts not in ROLLOUTS:
            raise ConfigError(f"grpo.rollouts must be one of {', '.join(ROLLOUTS)}, got {self.rollouts!r}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ConfigError(f"grpo.top_p must be in (0, 1], got {self.top_p!r}")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"grpo.loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}")
        if self.scale_rewards not in SCALE_REWARDS:
            raise ConfigError(
                f"grpo.scale_rewards must be one of {', '.join(SCALE_REWARDS)}, got {self.scale_rewards!r}"
            )
        at_least("grpo.lr", self.lr, 0, kind=float, above=True, allow_none=True)
        from transformers import SchedulerType

        if self.lr_scheduler not in {t.value for t in SchedulerType}:
            raise ConfigError(f"grpo.lr_scheduler must be a transformers scheduler name, got {self.lr_scheduler!r}")
        if not isinstance(self.trl, Mapping):
            raise ConfigError(f"grpo.trl must be a mapping of GRPOConfig fields, got {self.trl!r}")
        from trl import GRPOConfig

        bad = sorted(set(self.trl) - {f.name for f in fields(GRPOConfig)})
        if bad:
            raise ConfigError(f"grpo.trl has unknown GRPOConfig field(s): {', '.join(bad)}")
        sharding = sorted(k for k in set(self.trl) & SHARDING if self.trl[k])
        if sharding:
            raise ConfigError(
                f"grpo.trl.{sharding[0]}: esopt shards GRPO's processes itself; set grpo.sharding "
                f"({' | '.join(SHARDINGS)}) and model.resources.gpus")
        if self.sharding is not None and self.sharding not in SHARDINGS:
            raise ConfigError(
                f"grpo.sharding={self.sharding!r}: esopt's GRPO shards with accelerate's FSDP2 (DeepSpeed is not used); "
                f"one of {', '.join(f'{k} ({v})' for k, v in SHARDINGS.items())}")
        managed = sorted(set(self.trl) & MANAGED)
        if managed:
            raise ConfigError(
                f"grpo.trl may not set {', '.join(managed)}: esopt sets it (use the grpo./eval./top-level keys)"
            )

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations

    @property
    def micro_batch(self) -> int:
        """Completions per micro-batch of one process (TRL's per_device_train_batch_size; on G
        processes: :func:`process_batches`)."""
        return self.completions_per_step // self.grad_accum


def process_batches(settings: GRPOSettings, world: int) -> tuple[int, int] | None:
    """TRL's ``(per_device_train_batch_size, gradient_accumulation_steps)`` on ``world``
    processes, whose product times ``world`` is the step's B completions, so the global batch,
    and with it the loss and the update, is the one-process run's: each process takes
    micro-batches of the one-process size (B / grad_accum, the same memory per GPU) and
    ``grad_accum / world`` of them when that divides, else each of the ``grad_accum``
    micro-batches is split over the processes (B / (grad_accum x world)); None when neither
    divides."""
    world = max(1, int(world))
    b, a = settings.completions_per_step, settings.grad_accum
    if a % world == 0:
        return b // a, a // world
    if b % (a * world) == 0:
        return b // (a * world), a
    return None


def sharding_of(settings: GRPOSettings, world: int, cuda: bool, engine_holds_weights: bool = True) -> str:
    """How ``world`` processes hold the model (:data:`SHARDINGS`): ``grpo.sharding``, or when
    null full_shard on GPUs with an engine that generates with its own copy (vLLM), none
    otherwise (CPU processes: accelerate runs them replicated; the hf engine generates with the
    policy itself, whose sharded forward passes would be collectives); one process: none."""
    if world < 2:
        return "none"
    return settings.sharding or ("full_shard" if cuda and engine_holds_weights else "none")


def engine_rollouts(settings: GRPOSettings, engine, world: int) -> bool:
    """Whether GRPO samples through the run's engine: ``grpo.rollouts=engine``, and on several
    processes whenever the engine serves rollouts and TRL's own vLLM is not asked for (TRL's
    generate would draw every process's samples from the same random stream; the engine keys
    each row by its global index, so G processes draw what one does)."""
    if settings.rollouts == "engine":
        return True
    return world > 1 and not settings.use_vllm and bool(type(engine).serves_rollouts)


def check_processes(plan, settings: GRPOSettings) -> None:
    """Refuse, before dispatch, G processes the run's GRPO cannot use (ConfigError, one line):
    a batch that does not split over them, FSDP sharding on CPU processes or on one process, a
    sharded policy that the hf engine would generate with (its forward passes are collectives:
    ranks generating different lengths would wait on each other), or TRL's colocated vLLM asked
    to sample by the engine."""
    from esopt import engines
    from esopt.engines.base import resolve_device

    lay = plan.layout  # validate's draft holds its layout
    world = int(lay.ranks) if lay is not None else 1
    engine = engines.engine_class(plan.engine_config)
    if settings.rollouts == "engine" and settings.use_vllm and not engine.holds_weights:
        raise ConfigError("grpo.rollouts=engine with grpo.use_vllm=true on engine=hf: use_vllm asks for TRL's "
                          "colocated vLLM; set engine=vllm (its own vLLM samples) or grpo.rollouts=trl")
    if settings.sharding in ("full_shard", "shard_grad_op") and world < 2:
        raise ConfigError(f"grpo.sharding={settings.sharding} shards over several processes, but the run has one: "
                          "set model.resources.gpus (or model.resources.ranks) to 2 or more")
    if world < 2:
        return
    if process_batches(settings, world) is None:
        raise ConfigError(
            f"grpo.prompts_per_step*num_generations={settings.completions_per_step} in grpo.grad_accum="
            f"{settings.grad_accum} micro-batches does not split over {world} processes: make grad_accum a multiple "
            f"of {world} or the completions a multiple of {settings.grad_accum * world}")
    cuda = (lay is not None and lay.gpus_per_rank > 0) or resolve_device(plan.engine_config.device) == "cuda"
    sharded = sharding_of(settings, world, cuda, engine.holds_weights) != "none"
    if sharded and not cuda:
        raise ConfigError(f"grpo.sharding={settings.sharding} on CPU processes: accelerate runs FSDP on GPUs only "
                          "(CPU processes train replicated); set grpo.sharding=none or model.resources.gpus")
    if sharded and not engine.holds_weights:
        raise ConfigError(
            f"grpo.sharding={settings.sharding} with engine={plan.engine_config.name}: that engine "
            "generates with the sharded policy itself; set engine=vllm (its own copy per GPU) or grpo.sharding=none")


def validate(plan) -> GRPOSettings:
    """Config-time check for grpo / grpo_es / es_grpo (before any work): that the run can keep
    fp32 master weights (:func:`check_masters`; the block was resolved and checked once, into
    the plan's phase)."""
    settings = plan.phase("grpo").settings
    check_masters(plan, settings)
    check_processes(plan, settings)
    return settings


def resolve(cfg, iterations: int) -> GRPOSettings:
    """The run's GRPO settings, checked, with ``lr`` resolved (:func:`resolve_lr`) and ``bf16``
    (null: whether ``model.dtype`` is bfloat16): what the run's plan holds
    (``esopt.algorithms.Algorithm.resolve``); ``iterations`` is the phase's step budget, which
    TRL reads from the run context."""
    settings = resolve_rollouts(cfg, GRPOSettings.from_config(cfg.block("grpo")))
    bf16 = settings.bf16 if settings.bf16 is not None else load_dtype(cfg) == "bfloat16"
    return replace(settings, lr=resolve_lr(cfg, settings), bf16=bool(bf16))


def resolve_rollouts(cfg, settings: GRPOSettings) -> GRPOSettings:
    """``grpo.rollouts`` as the run's engine allows (its ``serves_rollouts`` capability):
    ``use_vllm=true`` on a vLLM engine (one that serves rollouts and holds its own weights) is
    ``rollouts=engine`` (the spelling before that key: one run, one id, :func:`id_form`); on
    engine=hf it stays TRL's colocated vLLM; ``rollouts=engine`` on an engine that does not
    serve rollouts is a ConfigError (one line)."""
    from esopt import engines

    engine = cfg.engine_config  # the plan's typed engine block
    cls = engines.engine_class(engine)
    serves = cls.serves_rollouts
    if settings.use_vllm and serves and cls.holds_weights:
        return replace(settings, rollouts="engine", use_vllm=False)
    if settings.rollouts == "engine" and not serves:
        raise ConfigError(f"grpo.rollouts=engine needs an engine that serves rollouts (engine=vllm); engine="
                          f"{engine.name} leaves them to TRL (grpo.rollouts=trl)")
    return settings


def id_form(block: dict, engine: str | None = None) -> dict:
    """The ``grpo`` block as run ids hash it: ``rollouts=engine`` as ``use_vllm: true`` (its
    spelling before ``grpo.rollouts``; the engine's name is in the id too), ``rollouts=trl`` left
    out, so runs keep the ids they had before the key. On an engine that does not hold its own
    weights (engine=hf, whose rollouts came later) ``rollouts=engine`` stays itself: there
    ``use_vllm: true`` is TRL's own colocated vLLM, another run."""
    from esopt import engines

    out = dict(block)
    if out.get("rollouts", "trl") == "engine" and (engine is None or engines.engine_class({"name": engine}).holds_weights):
        out.pop("rollouts")
        out["use_vllm"] = True
    elif out.get("rollouts", "trl") == "trl":
        out.pop("rollouts", None)
    return out


ID_NEUTRAL = (("sharding", None),)  # a key added later, at its neutral value: runs keep their ids


def load_dtype(cfg) -> str:
    """``model.dtype`` by its canonical name (float32, bfloat16, float16)."""
    dtype = str(cfg.model.get("dtype") or "float32")
    return HALF.get(dtype, "float32" if dtype in ("fp32", "float32") else dtype)


def check_masters(cfg, settings: GRPOSettings) -> None:
    """Refuse, before dispatch, a setting under which the optimizer could not hold fp32 master
    weights or the compute dtype would contradict the load dtype (ConfigError, one line):
    the hf engine told to cast the weights it generates with (``engine.dtype``: they are the
    masters GRPO trains), bf16 autocast over float16 weights."""
    engine = cfg.engine_config
    edtype = engine.dtype or "auto"
    from esopt import engines

    if not engines.engine_class(engine).holds_weights and edtype not in ("auto", "float32"):
        raise ConfigError(
            f"engine.dtype={edtype} with a GRPO phase on engine={engine.name}: that engine generates with "
            f"the trained model itself, whose weights are GRPO's fp32 masters; leave engine.dtype=auto and set "
            f"model.dtype={edtype} (loaded in {edtype}, trained as fp32 masters, computed in {edtype})")
    if settings.bf16 and load_dtype(cfg) == "float16":
        raise ConfigError("grpo.bf16=true with model.dtype=float16: autocast computes in one half type; "
                          "set grpo.bf16=null (float16 autocast) or model.dtype=bfloat16")


def autocast_dtype(settings: GRPOSettings, loaded: str) -> str | None:
    """The dtype accelerate's autocast computes in over the fp32 masters: bfloat16 with
    ``grpo.bf16``, float16 for float16-loaded weights, else None (float32 throughout)."""
    if settings.bf16:
        return "bfloat16"
    return "float16" if loaded == "float16" else None


def compute_error(dtype: str | None, device: str, bf16_supported: bool | None = None) -> str | None:
    """Why ``device`` cannot compute in ``dtype`` (None when it can): bfloat16 on a CUDA GPU
    without bf16 (before Ampere: ``torch.cuda.is_bf16_supported()``). CPUs autocast in both
    half types."""
    if dtype == "bfloat16" and device == "cuda":
        if bf16_supported is None:
            bf16_supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        if not bf16_supported:
            return ("this GPU cannot compute in bfloat16 (torch.cuda.is_bf16_supported() is false): "
                    "set model.dtype=float16 or float32")
    return None


def keep_masters(model) -> str:
    """Hold ``model``'s weights in float32 (in place: the engine wrapping it sees the same
    object): the optimizer's master weights and, through them, its fp32 state. Values are
    unchanged (bf16 and fp16 widen to fp32 exactly). Returns the dtype it was loaded in."""
    loaded = str(next(model.parameters()).dtype).removeprefix("torch.")
    if loaded != "float32":
        model.float()
    return loaded


def resolve_lr(cfg, settings: GRPOSettings) -> float:
    """Top-level ``lr`` if set, else ``grpo.lr``, else the model's ``hparams.grpo_lr``."""
    if cfg.lr is not None:
        return float(cfg.lr)
    if settings.lr is not None:
        return float(settings.lr)
    return model_default(cfg, "grpo_lr")


def estimate_tokens(g: GRPOSettings, iterations: int, budget: int) -> int:
    """Upper bound on GRPO's generated training tokens (``g``: the phase's resolved settings):
    steps * prompts_per_step * num_generations * budget (grpo.max_completion_length or the task's)."""
    return int(iterations * g.prompts_per_step * g.num_generations * (g.max_completion_length or budget))


def checkpoint_saves(g: GRPOSettings, iterations: int, eval_every: int) -> int:
    """Checkpoints the Trainer writes in a phase of ``iterations`` steps: every grpo.save_every
    (null: eval.every) steps and at the last (transformers saves there with save_strategy=steps):
    ``ceil(iterations / save_every)``."""
    return -(-int(iterations) // int(g.save_every or eval_every))


# --------------------------------------------------------------------------- rewards


def make_reward(task, stats: dict):
    """TRL reward callable from the task's verifier.

    TRL calls it with ``prompts``, ``completions``, ``completion_ids`` and every dataset column
    as a keyword list (one entry per completion). Returns ``Verdict.reward`` per completion and
    accumulates generated tokens / accuracy / format into ``stats`` for the step's train line.
    """
    skip = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
            "environments"}

    def reward(prompts, completions, completion_ids=None, **columns):
        cols = {k: v for k, v in columns.items() if k not in skip and isinstance(v, list)}
        rows = [{k: v[i] for k, v in cols.items()} | {"prompt": prompts[i]} for i in range(len(completions))]
        verdicts = [task.verify(c, r) for c, r in zip(completions, rows)]
        stats["tokens_generated"] += sum(len(ids) for ids in (completion_ids or []))
        stats["n"] += len(verdicts)
        stats["correct"] += sum(bool(v.correct) for v in verdicts)
        stats["format"] += sum(float(v.format) for v in verdicts)
        stats["rewards"].extend(float(v.reward) for v in verdicts)
        return [float(v.reward) for v in verdicts]

    reward.__name__ = f"{task.name}_reward"
    return reward


# --------------------------------------------------------------------------- trainer + recorder


def _trainer_class():
    from trl import GRPOTrainer

    class Trainer(GRPOTrainer):
        """GRPOTrainer plus one counter: tokens (prompt + completion, no padding) per fwd+bwd."""

        esopt_fwd_bwd = 0

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            self.esopt_fwd_bwd += int(inputs["prompt_mask"].sum()) + int(inputs["completion_mask"].sum())
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    return Trainer


# TRL log key -> metrics.jsonl key
_LOG_KEYS = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "entropy": "entropy",
    "kl": "kl",
    "clip_ratio/region_mean": "clip_ratio",
    "clip_ratio/low_mean": "clip_ratio_low",
    "clip_ratio/high_mean": "clip_ratio_high",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "completions/mean_length": "completion_length",
    "completions/clipped_ratio": "completion_clipped",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "lr",
}


def _recorder(ctx, trainer_ref: list, stats: dict, settings: GRPOSettings):
    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        """One train line per optimizer step (on_log, logging_steps=1); evaluation after it."""

        last_eval_step = -1
        last_eval: dict | None = None
        preempted = False
        t_step = time.perf_counter()
        fwd_bwd_seen = 0

        def on_step_begin(self, args, state, control, **kw):
            self.t_step = time.perf_counter()

        def on_save(self, args, state, control, **kw):
            """The Trainer's checkpoint (written in place, not atomically) with the process
            umask's modes (safetensors writes 0600), then its sha256 manifest, written last:
            only then is it trusted (:func:`last_checkpoint`) and the older ones removed (kept
            with ``sweep.keep_checkpoints``)."""
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            distributed.barrier()  # every process has written its part (its RNG state) first
            if distributed.rank() == 0:
                apply_umask(path)
                store.write_manifest(path)
                for old in _checkpoints(Path(args.output_dir)) if not ctx.cfg.sweep.keep_checkpoints else ():
                    if _step(old) < state.global_step:
                        shutil.rmtree(old, ignore_errors=True)
            distributed.barrier()
            if self.preempted:  # saved on the scheduler's warning (on_step_end): requeue now
                preempt.release()
                raise SystemExit(-1)

        def on_step_end(self, args, state, control, **kw):
            """The job's time is nearly up (``esopt.core.preempt``, on any process: they agree,
            so every process saves at the same step): save at this step."""
            self.preempted = distributed.any_rank(preempt.requested())
            if self.preempted:
                control.should_save = True

        def on_log(self, args, state, control, logs=None, model=None, **kw):
            logs = logs or {}
            if "reward" not in logs:  # the end-of-train summary log
                return
            step = int(state.global_step)
            trainer = trainer_ref[0]
            line: dict[str, Any] = {"kind": "train", "iteration": step}
            for src, dst in _LOG_KEYS.items():
                if logs.get(src) is not None:
                    line[dst] = float(logs[src])
            total = distributed.sum_ranks([stats["tokens_generated"], stats["n"], stats["correct"], stats["format"],
                                           trainer.esopt_fwd_bwd - self.fwd_bwd_seen])  # every process's rows
            rewards = distributed.sum_ranks([max(stats["rewards"], default=-1e30), -min(stats["rewards"], default=1e30)],
                                            op="max")
            if rewards[0] > -1e30:  # some process scored completions
                line["reward_max"], line["reward_min"] = rewards[0], -rewards[1]
            if total[1]:
                line["accuracy"] = total[2] / total[1]
                line["format"] = total[3] / total[1]
            line["tokens_generated"] = int(total[0])
            line["tokens_fwd_bwd"] = int(total[4])
            line["wall_step"] = time.perf_counter() - self.t_step
            self.fwd_bwd_seen = trainer.esopt_fwd_bwd
            ctx.add_tokens(int(total[0]))
            if state.log_history and state.log_history[-1].get("step") == step:
                # saved with the checkpoint (trainer_state.json), restored on resume
                state.log_history[-1]["esopt_tokens_total"] = int(ctx.tokens_total)
            for k in ("tokens_generated", "n", "correct", "format"):
                stats[k] = 0
            stats["rewards"].clear()
            if distributed.rank() == 0:  # rank 0 records; every process evaluates its share below
                ctx.log(**line)
            if ctx.eval_due(step):
                self.evaluate(model if model is not None else trainer.model, step)

        def evaluate(self, model, step: int) -> dict:
            """Shared evaluator on the same weights: eval mode, no grad, then back to train."""
            was_training = model.training
            model.eval()
            try:
                with torch.no_grad():
                    ctx.engine.sync_from(ctx.model)  # an engine holding its own copy (vLLM) pulls them
                    result = ctx.evaluate(step)
            finally:
                if was_training:
                    model.train()
            self.last_eval_step, self.last_eval = step, result
            return result

    return Recorder()


def fsdp_arguments(sharding: str, gradient_checkpointing: bool) -> dict:
    """GRPOConfig's FSDP fields for ``sharding`` (:data:`SHARDINGS`; none: {}): accelerate's FSDP2
    (``fsdp_config.version`` 2, as TRL's ``accelerate_configs/fsdp2.yaml``), each decoder layer
    its own unit (``_no_split_modules``), resharded after forward for full_shard, the full
    state dict for checkpoints, and gradient checkpointing as FSDP's own activation
    checkpointing (transformers: the Trainer's would add an all-gather to every backward)."""
    if sharding == "none":
        return {}
    return {"fsdp": True, "gradient_checkpointing": False, "fsdp_config": {
        "version": 2, "reshard_after_forward": sharding == "full_shard", "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "state_dict_type": "FULL_STATE_DICT", "activation_checkpointing": bool(gradient_checkpointing)}}


def grpo_config(ctx, settings: GRPOSettings, output_dir: Path, lr: float, trl_vllm: bool | None = None,
                loaded: str = "float32", world: int = 1):
    """The ``trl.GRPOConfig`` for this run (CPU: use_cpu). ``trl_vllm``: TRL's own colocated
    vLLM generates (default ``grpo.use_vllm``); false when the run's engine does. ``loaded``:
    the dtype the weights were loaded in (:func:`autocast_dtype` picks accelerate's mixed
    precision from it). ``world``: the run's processes (:func:`process_batches`; on GPUs
    sharded by :func:`fsdp_arguments`)."""
    trl_vllm = bool(settings.use_vllm) if trl_vllm is None else trl_vllm
    from trl import GRPOConfig

    cfg = ctx.cfg
    device = next(ctx.model.parameters()).device
    on_cpu = device.type == "cpu"
    max_len = settings.max_completion_length or int(ctx.task.max_new_tokens)
    save_every = settings.save_every or int(cfg.eval.every)
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        max_steps=int(ctx.iterations),
        learning_rate=lr,
        lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=settings.warmup_steps,
        weight_decay=settings.weight_decay,
        max_grad_norm=settings.max_grad_norm,
        per_device_train_batch_size=process_batches(settings, world)[0],
        gradient_accumulation_steps=process_batches(settings, world)[1],
        num_generations=settings.num_generations,
        num_iterations=settings.num_iterations,
        beta=settings.beta,
        epsilon=settings.epsilon,
        epsilon_high=settings.epsilon_high,
        loss_type=settings.loss_type,
        scale_rewards=settings.scale_rewards,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_completion_length=max_len,
        gradient_checkpointing=settings.gradient_checkpointing,
        bf16=autocast_dtype(settings, loaded) == "bfloat16",
        fp16=autocast_dtype(settings, loaded) == "float16",
        use_cpu=on_cpu,
        use_vllm=trl_vllm,
        seed=int(cfg.seed),
        data_seed=int(cfg.seed),
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_every,
        save_total_limit=None,  # on_save removes the older ones once the new one has its manifest
        #                         (unless sweep.keep_checkpoints)
        report_to="none",
        disable_tqdm=True,
        log_completions=False,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    sharding = sharding_of(settings, world, not on_cpu, type(ctx.engine).holds_weights)
    kwargs.update(fsdp_arguments(sharding, settings.gradient_checkpointing))
    if trl_vllm:
        kwargs.update(vllm_mode="colocate", vllm_gpu_memory_utilization=cfg.engine_config.colocated_gpu_share)
    if ctx.task.stop and trl_vllm:
        kwargs["generation_kwargs"] = {"stop": list(ctx.task.stop)}
    kwargs.update(settings.trl)
    return GRPOConfig(**kwargs)


ROLLOUT_SEED_STRIDE = 1_000_003  # rollout seed = run seed * this + step: distinct per (run seed, step)


def rollout_function(ctx, settings: GRPOSettings, max_new_tokens: int):
    """TRL's ``rollout_func`` generating GRPO's completions with the run's engine
    (``grpo.rollouts=engine``, e.g. with ``engine=vllm``: one vLLM engine per run serves both the
    rollouts and the evaluations, instead of TRL starting a second one).

    Before the first rollout of each optimizer step the engine takes the policy's current
    weights (``engine.sync_from``), so generation is on-policy. TRL passes the step's prompts
    with each repeated ``num_generations`` times (on G processes, each its block of them, in
    process order); every copy is its own request with its own seed (run seed, step, global
    position), so a group holds distinct samples and G processes draw what one does. Returns the prompt ids
    (``esopt.engines.base.encode_prompts``, as the evaluator's engines tokenize), the completion
    ids including the EOS that ended them, and NaN sampling log-probabilities: TRL reads those
    only for its own vLLM importance-sampling correction and off-policy mask, which treat NaN
    as "not scored"."""
    from esopt.engines.base import encode_prompts

    synced = {"step": None}
    stop = tuple(getattr(ctx.task, "stop", ()) or ())

    def rollout(prompts, trainer):
        step = int(trainer.state.global_step)
        if synced["step"] != step:
            with torch.no_grad():
                ctx.engine.sync_from(ctx.model)
            synced["step"] = step
        if any(not isinstance(p, str) for p in prompts):
            raise ConfigError("engine rollouts need text prompts (the task's prompts are conversational)")
        prompt_ids = encode_prompts(ctx.tokenizer, prompts)
        completion_ids = ctx.engine.rollouts(  # this process's rows of the step's batch, keyed globally
            prompt_ids, temperature=settings.temperature, top_p=settings.top_p, max_new_tokens=max_new_tokens,
            seed=int(ctx.cfg.seed) * ROLLOUT_SEED_STRIDE + step, stop=stop,
            first_row=int(trainer.accelerator.process_index) * len(prompts))
        nan = float("nan")
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
                "logprobs": [[nan] * len(c) for c in completion_ids]}

    return rollout


def checkpoint_dir(ctx) -> Path:
    """Where this run's (or this sequence phase's) Trainer checkpoints live."""
    return Path(ctx.run.checkpoint_dir) / "grpo"


def _step(p: Path) -> int:
    return int(p.name.split("-")[-1])


def _checkpoints(path: Path) -> list[Path]:
    """The ``checkpoint-<step>`` folders under ``path``, newest first."""
    found = [p for p in path.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=_step, reverse=True)


def last_checkpoint(path: Path) -> str | None:
    """Newest ``checkpoint-<step>`` folder whose files match the manifest recorded when it was
    saved, or None. Newer ones that do not (TRL writes in place: a kill or a full disk leaves
    an empty trainer_state.json or a truncated rng_state.pth; a flipped byte) are removed,
    with one warning line naming the file and where the run goes on from."""
    if not path.is_dir():
        return None
    bad: list[tuple[Path, str]] = []
    good = None
    for p in _checkpoints(path):
        reason = store.verify_manifest(p)
        if reason is None:
            good = p
            break
        bad.append((p, reason))
    if bad:
        store.checkpoint_warning(bad[0][1], good.name if good else None)
        for p, _ in bad:
            shutil.rmtree(p, ignore_errors=True)
    return str(good) if good else None


def _strip_double_bos(dataset, tokenizer):
    """TRL tokenizes prompts with the tokenizer's special tokens; a chat-templated prompt that
    already starts with the BOS text would get two (the engine avoids that, so must we)."""
    bos = tokenizer.bos_token
    if not bos or not all(p.startswith(bos) for p in dataset["prompt"]):
        return dataset
    ids = tokenizer("x")["input_ids"]
    if not ids or ids[0] != tokenizer.bos_token_id:
        return dataset
    return dataset.map(lambda row: {"prompt": row["prompt"][len(bos):]})


def _prepare_resume(ctx, resume: str | None, record: bool = True) -> None:
    """Before (re)starting at checkpoint step k (0 = none): restore the run's token count
    saved with the checkpoint, and (``record``: the process that records, rank 0) drop this
    phase's metrics lines after step k (written by an attempt that died before its next
    checkpoint), so every step is recorded once."""
    step = 0
    if resume is not None:
        state = json.loads((Path(resume) / "trainer_state.json").read_text())
        step = int(state.get("global_step", 0))
        saved = [h["esopt_tokens_total"] for h in state.get("log_history", []) if "esopt_tokens_total" in h]
        if saved:
            ctx.add_tokens(int(saved[-1]) - int(ctx.tokens_total))
    last = int(getattr(ctx, "iteration_offset", 0)) + step
    final = step >= int(getattr(ctx, "iterations", step + 1))  # train() re-evaluates the end

    def keep(line) -> bool:
        it = int(line.get("iteration", 0))
        return line.get("phase") != ctx.phase or it < last or (
            it == last and not (final and line.get("kind") == "eval"))

    if record and hasattr(ctx.run, "truncate_metrics"):
        ctx.run.truncate_metrics(keep)


def train(ctx) -> dict | None:
    """Train ``ctx.model`` in place with TRL's GRPOTrainer for ``ctx.iterations`` steps.

    Resumes from the newest checkpoint under :func:`checkpoint_dir`. Returns the final
    evaluation dict (also logged and reported through ``ctx.evaluate``).
    """
    import datasets

    settings = ctx.settings  # the plan's settings for this phase, lr resolved (resolve)
    device = next(ctx.model.parameters()).device.type
    loaded = keep_masters(ctx.model)  # fp32 masters; the engine generates with them (hf) or a synced copy
    problem = compute_error(autocast_dtype(settings, loaded), device)
    if problem is not None:
        raise ConfigError(problem)
    world = distributed.world_size()  # the run's processes (esopt.runtime.run.join_ranks joined them)
    by_engine = engine_rollouts(settings, ctx.engine, world)
    if settings.use_vllm and next(ctx.model.parameters()).device.type != "cuda":
        raise ConfigError("grpo.use_vllm=true needs the model on a GPU (engine.device=cuda) for TRL's colocated "
                          "vLLM, or an engine that serves rollouts (engine=vllm, grpo.rollouts=engine)")
    lr = float(settings.lr)
    max_steps = int(ctx.iterations)
    if hasattr(ctx, "set_effective"):  # summary: lr when GRPO is the whole run; grpo_lr always (sequences)
        ctx.set_effective(grpo_lr=lr, **({"lr": lr} if ctx.phase == ctx.cfg.algo else {}))
    out = checkpoint_dir(ctx)
    out.mkdir(parents=True, exist_ok=True)

    dataset = ctx.task.split("train")
    if not isinstance(dataset, datasets.Dataset) or "prompt" not in dataset.column_names:
        raise ConfigError(f"task {ctx.task.name!r} train split must be a Dataset with a 'prompt' column")
    if len(dataset) < settings.prompts_per_step:
        raise ConfigError(
            f"grpo.prompts_per_step={settings.prompts_per_step} exceeds the task's train split "
            f"({len(dataset)} prompts)"
        )

    dataset = _strip_double_bos(dataset, ctx.tokenizer)
    stats = {"tokens_generated": 0, "n": 0, "correct": 0, "format": 0.0, "rewards": []}
    args = grpo_config(ctx, settings, out, lr, trl_vllm=bool(settings.use_vllm) and not by_engine,
                       loaded=loaded, world=world)
    trainer_ref: list = []
    recorder = _recorder(ctx, trainer_ref, stats, settings)
    Trainer = _trainer_class()
    tokenizer = ctx.tokenizer
    trainer = Trainer(
        model=ctx.model,
        reward_funcs=[make_reward(ctx.task, stats)],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[recorder],
        **({"rollout_func": rollout_function(ctx, settings, int(args.max_completion_length))}
           if by_engine else {}),
    )
    trainer_ref.append(trainer)
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for noisy in (PrinterCallback, ProgressCallback):  # metrics go to metrics.jsonl, not stdout
        trainer.remove_callback(noisy)
    if trainer.model is not ctx.model:  # pragma: no cover - TRL must train the engine's weights
        raise RuntimeError("GRPOTrainer replaced the model object; evaluation would not see its weights")

    lead = distributed.rank() == 0
    resume = distributed.from_rank0(last_checkpoint(out) if lead else None)  # rank 0 alone removes bad ones
    _prepare_resume(ctx, resume, record=lead)
    ctx.model.train()
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        ctx.model.eval()
        ctx.model.zero_grad(set_to_none=True)
    # A requeue that lands after the final checkpoint trains nothing: still evaluate the end.
    if recorder.last_eval_step != max_steps:
        recorder.evaluate(ctx.model, max_steps)
        ctx.model.eval()
    del trainer
    ctx.engine.sync_from(ctx.model)  # from here on the engine generates with the trained weights
    state = distributed.full_state(ctx.model)  # FSDP2: the shards gathered for model/ (rank 0 writes it)
    if state is not None:
        ctx.shared.trained_state = state
    return recorder.last_eval
