"""Random search over ES's perturbations: a baseline, and a control for the study's ES claims.

Each iteration tries exactly the members ES would try (the same seeds, signs and prompt batch
from the run seed, the same ``es:`` block: pop, sigma, decoding) and moves the weights to the
best member's point, ``theta <- theta + sign_b * sigma * eps(s_b)``, b = the first member with
the highest reward. No gradient estimate, no learning rate: what ES gains beyond this is what
its reward-weighted average adds to picking the luckiest perturbation.

Everything around the two methods (scoring the members, records, checkpoints, resume,
evaluations on the run's schedule) is the shared loop, ``esopt.algorithms.trainer``; the
registry entry names the class (``esopt.algorithms.strategy``).
"""

from __future__ import annotations

import numpy as np

from esopt.algorithms.es import ES


class RandomSearch(ES):
    """ES's ask, config and checks (inherited); its tell moves to the best member instead of
    averaging them."""

    name = "random_search"

    def tell(self, seeds, signs, rewards: np.ndarray, weights) -> float:
        best = int(np.argmax(rewards))
        return weights.update([seeds[best]], [signs[best]], self.cfg.sigma, rank=self.cfg.noise_rank, n=1)

    def effective(self, ctx) -> dict:
        return {"sigma": self.cfg.sigma}  # no lr: random search has none
