"""A population strategy: the extension point of the shared loop (``esopt.algorithms.trainer``).

A strategy is one class; its registry entry names it (``Algorithm(module="pkg.mod:Class")``),
and the entry's ``validate`` / ``resolve`` / ``estimate_tokens`` / ``train`` are the class's own,
inherited from this base or from the strategy it varies (``RandomSearch(ES)``), so a variant
cannot leave its checks out. The class declares:

- ``name``: its checkpoints' ``algo`` (the registry name);
- ``config``: its resolved config dataclass, ``config.from_run(cfg)`` (a run's config -> one
  phase's settings, what the run's plan holds and ``ctx.settings`` gives back) and
  ``config.validate()`` (ConfigError, one line, on the first bad value). The loop reads the
  population's fields from it: ``pop``, ``seed``, ``iterations``, ``sigma``, ``antithetic``,
  the decoding (``temperature``, ``samples``, ``max_new_tokens``), the noise (``batched``,
  ``noise_rank``, ``noise_targets``) and the bookkeeping (``drift``, ``anchor_decay``,
  ``checkpoint_every``, ``checksum_every``): ES's ``ESRun`` has them all, and a variant's
  config subclasses it with its own fields;
- ``validate(plan)``: every check of the run for it beyond its settings' own, before any work
  (its phase's settings are resolved and validated once, by ``resolve``; default: none);
- ``ask(iteration, n_rows) -> (seeds, signs, prompt indices)`` and ``tell(seeds, signs,
  rewards, weights) -> step norm``;
- ``state_dict()`` / ``load_state_dict(state)``: what it carries from one iteration to the
  next besides the weights (a momentum, Adam's moments): a dict of numbers, lists and tensors.
  The trainer saves it into every checkpoint (``strategy.pt``, covered by the checkpoint's
  manifest) and hands it back on resume, so a resumed run tells what an uninterrupted one
  would. Default: none (ES and random search draw everything from the run seed and the
  iteration);
- ``effective(ctx)``: the hyperparameters it resolved from defaults, for the run's summary.

tests/algorithms/test_toy_strategy.py adds ES with momentum in that one file.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar


class Strategy:
    """Base of the population strategies (module docstring)."""

    name: ClassVar[str] = ""
    config: ClassVar[type]  # its resolved config dataclass (ESRun or a subclass of it)

    def __init__(self, cfg: Any):
        self.cfg = cfg

    # --- declared: its config and its checks, read by the registry entry ----------------
    @classmethod
    def resolve(cls, cfg, iterations: int) -> Any:
        """The phase's settings for ``iterations``, checked (``Algorithm.resolve``)."""
        return replace(cls.config.from_run(cfg), iterations=int(iterations)).validate()

    @classmethod
    def validate(cls, plan) -> None:
        """Every check of a run of this strategy beyond its settings' own (``Algorithm.validate``,
        over the run's draft plan, whose phase settings :meth:`resolve` made and checked once);
        ConfigError, one line. Default: none."""

    @staticmethod
    def estimate_tokens(settings, iterations: int, budget: int, train_rows: int | None = None) -> int:
        """Upper bound on the phase's generated training tokens (0: none declared)."""
        return 0

    @staticmethod
    def checkpoint_saves(settings, iterations: int, eval_every: int) -> int:
        """Checkpoints a phase of ``iterations`` writes on the trainer's schedule, every
        ``checkpoint_every`` iterations and at the end (0 = never): ``ceil(iterations / k)``."""
        k = int(settings.checkpoint_every or 0)
        return -(-int(iterations) // k) if k else 0

    @classmethod
    def train(cls, ctx) -> None:
        """The strategy on the engine's weights for the phase (the loop: ``trainer.train``)."""
        from esopt.algorithms import trainer

        strategy = cls(ctx.settings)  # the plan's settings for this phase (resolved once, by validate)
        ctx.set_effective(**strategy.effective(ctx))
        trainer.train(ctx, strategy)

    # --- one iteration ----------------------------------------------------------------
    def ask(self, iteration: int, n_rows: int) -> tuple[list[int], list[float], list[int]]:
        raise NotImplementedError

    def tell(self, seeds, signs, rewards, weights) -> float:
        raise NotImplementedError

    # --- what survives a resume --------------------------------------------------------
    def state_dict(self) -> dict:
        """Its state beyond the weights (saved in each checkpoint); {} = stateless."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output (a resumed run); a stateless strategy takes {}."""
        if state:
            raise ValueError(f"strategy {self.name!r} keeps no state, got {sorted(state)}")

    def effective(self, ctx) -> dict:
        """Hyperparameters resolved from defaults, recorded in the run's summary."""
        return {}
