"""Sequential training: ``algo=grpo_es`` (GRPO then ES) and ``algo=es_grpo`` (ES then GRPO).

The registry entry (``esopt.algorithms.sequence``) names the phases, in order. The run's
``iterations`` budget is split: phase one gets ``sequence.split * iterations`` rounded half up
(at least 1, at most iterations - 1), phase two the rest (the study: an equal split). Each
phase is the unchanged single algorithm (its registry entry's ``train``) run on a phase view
of the context (``ctx.for_phase``): its metrics lines carry ``phase`` = its
algo, and its iteration numbers continue the run's count. Each phase checkpoints into its
own ``<run>/checkpoint/phase<k>-<algo>/``; when it ends, the model is saved there (HF
``save_pretrained`` in ``final/``) with the phase's evaluation and token count
(``done.json``), and the evaluation is recorded into the summary's ``phases``
(``ctx.phase_done``). A requeued job skips a finished phase by loading its saved weights;
an unfinished phase resumes from its own algorithm's checkpoint.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path

from esopt import algorithms, models
from esopt.core.errors import ConfigError
from esopt.core.store import atomic_write_json


@dataclass(frozen=True)
class SequenceConfig:
    """The ``sequence:`` block of ``algo=grpo_es`` / ``es_grpo``."""

    split: float = 0.5  # share of `iterations` given to phase one (the study: an equal split)


def split_of(cfg) -> float:
    """``sequence.split`` of a run config (its default when unset)."""
    return cfg.block("sequence").get("split", SequenceConfig.split)


def phases(cfg) -> tuple[str, ...]:
    """The run's phases, in order (its registry entry's ``phases``)."""
    return algorithms.get(cfg.algo).phases


def validate(cfg) -> None:
    """Each phase's own checks, then the sequence's: a split in (0, 1), at least one iteration
    per phase, and no top-level lr (the two phases' step sizes differ ~100x: set es.lr /
    grpo.lr)."""
    for name in phases(cfg):
        algorithms.get(name).validate(cfg)
    split = split_of(cfg)
    if isinstance(split, bool) or not isinstance(split, (int, float)) or not 0.0 < float(split) < 1.0:
        raise ConfigError(f"sequence.split must be in (0, 1), got {split!r}")
    if cfg.iterations < 2:
        raise ConfigError(f"iterations must be >= 2 for a sequence ({cfg.algo}), got {cfg.iterations}")
    if cfg.lr is not None:
        raise ConfigError(
            f"lr sets one step size for both phases of {cfg.algo}, whose scales differ ~100x; "
            "leave lr=null and set es.lr / grpo.lr"
        )


def split_iterations(total: int, split: float) -> tuple[int, int]:
    """Phase budgets ``(n1, n2)``.

    ``n1 = clamp(floor(split * total + 1/2), 1, total - 1)``, ``n2 = total - n1``.
    """
    if total < 2:
        raise ConfigError(f"iterations must be >= 2 for a sequence, got {total}")
    if not 0.0 < float(split) < 1.0:
        raise ConfigError(f"sequence.split must be in (0, 1), got {split!r}")
    n1 = min(max(math.floor(float(split) * total + 0.5), 1), total - 1)
    return n1, total - n1


def budgets(cfg) -> tuple[int, int]:
    """The two phases' iterations (:func:`split_iterations` of the run's)."""
    return split_iterations(int(cfg.iterations), split_of(cfg))


def phase_dir(ctx, index: int, algo: str) -> Path:
    """Phase k's own checkpoint directory: ``<run>/checkpoint/phase<k>-<algo>/``."""
    return Path(ctx.run.checkpoint_dir) / f"phase{index}-{algo}"


def _phase_view(ctx, name: str, n: int, offset: int, where: Path):
    """``ctx.for_phase`` whose ``run.checkpoint_dir`` is the phase's own directory, so the two
    algorithms' checkpoints (ES swaps its whole directory atomically) never touch each other."""
    view = ctx.for_phase(name, n, offset)
    run = copy.copy(ctx.run)
    run.checkpoint_dir = where
    view.run = run
    return view


def _save_phase(ctx, path: Path, record: dict) -> None:
    """The phase's final weights (``final/``), then ``done.json``, which marks it complete."""
    ctx.engine.sync_to(ctx.model)
    models.save(ctx.model, None, path / "final")
    atomic_write_json(path / "done.json", record)


def planned(ctx) -> list[tuple[str, int, int]]:
    """``(algo, iterations, offset)`` of each phase: the run plan's (``RunPlan.phases``, split
    once by validate: :func:`budgets`)."""
    return [(p.algo, p.iterations, p.offset) for p in ctx.cfg.phases]


def train(ctx) -> dict | None:
    """Run both phases on ``ctx.model`` in place; return the final evaluation."""
    plan = planned(ctx)
    if len(plan) != 2:
        raise ConfigError(f"a sequence needs two phases, algo {ctx.cfg.algo!r} has {[p[0] for p in plan]}")
    result = None
    for index, (name, n, offset) in enumerate(plan, start=1):
        where = phase_dir(ctx, index, name)
        view = _phase_view(ctx, name, n, offset, where)
        if (where / "done.json").exists():  # finished before a requeue
            record = json.loads((where / "done.json").read_text())
            models.load_weights(ctx.model, where / "final")
            ctx.engine.sync_from(ctx.model)
            ctx.add_tokens(int(record["tokens_total"]) - int(ctx.tokens_total))
            result = record["eval"]
        else:
            result = algorithms.get(name).train(view)
            shared = getattr(view, "shared", None)
            if result is None and shared is not None and shared.last_eval_iteration == offset + n:
                result = shared.last_eval
            if result is None:
                result = view.evaluate(n)
            ctx.model.eval()
            _save_phase(ctx, where, {"algo": name, "iterations": n, "offset": offset,
                                           "tokens_total": int(ctx.tokens_total), "eval": result})
        view.phase_done(name, result)
    return result
