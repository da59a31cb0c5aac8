"""The simulator's Pass@K arithmetic that claims' simulation hooks share (``rules``: a hook sets
its claim's effect on a synthetic problem set; ``simulate`` draws the runs).

A run shifts every solvable problem's solve rate by g / (1 - unsolvable) (the mean Pass@1 gain
over all problems is g), its seed by u ~ N(0, sigma_seed^2), so

    E Pass@K(g) = E_u mean_p [1 - (1 - clip(p_p + (g + u) / (1 - unsolvable), 0, 1))^K]

over the solvable problems (the unsolvable ones stay at 0), the expectation over u by
Gauss-Hermite quadrature (``HERMITE``, 6 nodes).
"""

from __future__ import annotations

import numpy as np

HERMITE = np.polynomial.hermite_e.hermegauss(6)


def pass_k_expected(p: np.ndarray, shift: float, c, K: int) -> float:
    """E over u ~ N(0, sigma_seed^2) of mean_p [1 - (1 - p'_p)^K], p' the shifted solvable p
    (``c``: the simulator's Components)."""
    x, w = HERMITE
    solv = p > 0
    out = 0.0
    for xi, wi in zip(x, w / w.sum()):
        q = np.clip(p[solv] + (shift + c.sigma_seed * xi) / (1 - c.unsolvable), 0.0, 1.0)
        out += wi * float(np.sum(1 - (1 - q) ** K)) / p.size
    return out


def solve_shift(p, target: float, c, K: int, lo=-0.2, hi=0.3) -> float:
    """The shift g with E Pass@K(g) = target (bisection: Pass@K rises with g)."""
    for _ in range(32):
        mid = (lo + hi) / 2
        if pass_k_expected(p, mid, c, K) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
