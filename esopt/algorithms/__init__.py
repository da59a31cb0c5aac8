"""The training algorithms and their registry.

Each algorithm declares, in one place, what the rest of esopt needs to know about it: the
config blocks it reads, its validation, the config keys that do not change its result (so they
stay out of its run id), its generated-token estimate and its train function. The run
lifecycle (``esopt.runtime``), the sweepers and the study look algorithms up here; nothing
else branches on an algorithm's name.

    algo = ALGORITHMS["es"]
    algo.validate(rc); algo.train(ctx); algo.estimate_tokens(rc, budget)

- ``none``: evaluate the base model only.
- ``es``: evolution strategies (``esopt.algorithms.es``; noise in ``esopt.noise``).
- ``grpo``: GRPO through TRL's GRPOTrainer (``esopt.algorithms.grpo``).
- ``grpo_es`` / ``es_grpo``: one after the other (``esopt.algorithms.sequence``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from esopt.core.errors import ConfigError

# Config keys of the run config; what each algorithm ignores is listed per algorithm.
_RUN_KEYS = ("pop", "sigma", "lr", "iterations", "es", "grpo", "sequence", "analysis")


@dataclass(frozen=True)
class Algorithm:
    name: str
    phases: tuple[str, ...]   # the single algorithms it runs, in order ("es",), ("grpo", "es"), ...
    ignores: tuple[str, ...]  # config keys it does not read (they do not enter its run id)
    summary: str              # one line for --help and the docs
    multi_rank: bool = False  # runs as several processes (ranks) splitting its work (ES)
    color: str = "#7f7f7f"    # its colour on the sweep's page (hex)
    order: int = 99           # its place on the page: base/none first, then es, grpo, grpo_es, es_grpo

    @property
    def _modules(self):
        return [importlib.import_module(f"esopt.algorithms.{p}") for p in self.phases]

    def uses(self, key: str) -> bool:
        """Whether a run of this algorithm reads the top-level or block key ``key``."""
        return key not in self.ignores

    def validate(self, cfg) -> None:
        """Every check of this algorithm's knobs, before any work (ConfigError, one line)."""
        for module in self._modules:
            module.validate(cfg)
        if len(self.phases) > 1:
            from esopt.algorithms import sequence

            sequence.validate(cfg)

    def train(self, ctx):
        """Train ``ctx.model`` through ``ctx.engine``; returns the final evaluation or None."""
        if not self.phases:
            return None
        if len(self.phases) == 1:
            return self._modules[0].train(ctx)
        from esopt.algorithms import sequence

        return sequence.train(ctx)

    def estimate_tokens(self, cfg, budget: int) -> int:
        """Upper bound on generated training tokens (every completion uses its whole budget)."""
        if len(self.phases) > 1:
            from esopt.algorithms import sequence

            budgets = sequence.split_iterations(cfg.iterations, sequence.split_of(cfg))
        else:
            budgets = (cfg.iterations,) * len(self.phases)
        return sum(m.estimate_tokens(cfg, n, budget) for m, n in zip(self._modules, budgets))


ALGORITHMS: dict[str, Algorithm] = {
    "none": Algorithm("none", (), _RUN_KEYS, "evaluate the base model only", color="#7f7f7f", order=0),
    "es": Algorithm("es", ("es",), ("grpo", "sequence"), "evolution strategies", multi_rank=True,
                    color="#1f77b4", order=1),
    "grpo": Algorithm("grpo", ("grpo",), ("pop", "sigma", "es", "sequence"), "GRPO through TRL",
                      color="#d62728", order=2),
    "grpo_es": Algorithm("grpo_es", ("grpo", "es"), (), "GRPO, then ES from its weights",
                         color="#9467bd", order=3),
    "es_grpo": Algorithm("es_grpo", ("es", "grpo"), (), "ES, then GRPO from its weights",
                         color="#2ca02c", order=4),
}


def get(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algo {name!r} (known: {', '.join(ALGORITHMS)})")
    return ALGORITHMS[name]
