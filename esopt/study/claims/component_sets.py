"""Named component sets the planner can assume (``python -m esopt.design --components NAME``).

    comps, source = component_set("paper")
    spreads = SEED_SPREADS                 # the paper set's seed spread is unknown: power over these

``tiny``: the tiny family's, measured (``simulate.MEASURED``). ``paper``: the gains the study and
its rivals published, with everything they do not report kept at the tiny family's values and the
seed spread unknown: the planner prints power over :data:`SEED_SPREADS` (a sensitivity row) and
the spread at which each claim stops being decidable. A model with its own pilot's components
(``simulate.MODEL_COMPONENTS``) is a set under its model's name.
"""

from __future__ import annotations

from dataclasses import replace

from esopt.core.errors import ConfigError
from esopt.study.claims.simulate import MEASURED, MODEL_COMPONENTS, Components

# The study (Ba et al. 2026, arXiv 2608.27351), hard setting, Qwen2.5-1.5B, math average (its
# headline table): Pass@1 / @16 / @32 of base 47.7 / 73.5 / 77.4, GRPO 52.9 / 74.7 / 78.0,
# ES 49.9 / 75.0 / 78.9, ES->GRPO 52.3 / 75.8 / 79.2. Gains: ES +0.022, GRPO +0.052.
# Difficulty: 22.6% of problems never solved in 32 samples (1 - 0.774); the rest with a mean
# solve rate of 0.477 / 0.774 = 0.62: beta(2.0, 1.25) (mean 0.615).
# The rivals agree on the size of the gains: ES near GRPO on the task, GRPO marginally ahead in
# most cells (Abdi et al. 2026, arXiv 2601.20861, Qwen2.5-1.5B and Llama-3.2-1B); ES matches or
# exceeds GRPO (Hoy et al. 2026, arXiv 2604.01499, Qwen3-4B): no other number is taken from them.
# The family's range is the study's sizes, Qwen2.5-0.5B to 3B. Seed spread: none of the papers
# reports one (single runs); 0.01 (one point of Pass@1 between seeds) is the point value shown,
# SEED_SPREADS the range the sensitivity row covers.
PAPER_SOURCE = ("paper: the study's hard-setting 1.5B table (arXiv 2608.27351: base 47.7, GRPO 52.9, ES 49.9 "
                "Pass@1; Pass@32 77.4) and its rivals' (arXiv 2601.20861, 2604.01499); seed spread unknown; "
                "the rest the tiny family's; esopt/study/claims/component_sets.py")
PAPER = replace(MEASURED, es_gain=0.499 - 0.477, grpo_gain=0.529 - 0.477, unsolvable=1 - 0.774, beta=(2.0, 1.25),
                sigma_seed=0.01, params=(494_032_768, 3_085_938_688))
SEED_SPREADS = (0.0025, 0.005, 0.01, 0.02, 0.04)   # sd of a run's Pass@1 between seeds (sigma_seed)

TINY_SOURCE = ("tiny family: paper_cpu (tiny-s, 8 seeds) and paper_cpu_family (tiny-xs..xl, 116 runs), "
               "esopt/study/claims/simulate.py MEASURED")
SETS: dict[str, tuple[Components, str, tuple]] = {
    "tiny": (MEASURED, TINY_SOURCE, ()),
    "paper": (PAPER, PAPER_SOURCE, SEED_SPREADS),
    **{m: (c, f"{m}: esopt/study/claims/simulate.py MODEL_COMPONENTS", ()) for m, c in MODEL_COMPONENTS.items()},
}


def component_set(name: str) -> tuple[Components, str, tuple]:
    """(components, source, seed spreads to scan: () for a measured set) of a named set;
    ConfigError naming the known ones for another name."""
    if name not in SETS:
        raise ConfigError(f"--components: unknown component set {name!r} (known: {', '.join(SETS)})")
    return SETS[name]
