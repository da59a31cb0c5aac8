"""The simulator's Pass@K arithmetic that claims' simulation hooks share (``rules``: a hook sets
its claim's effect on a synthetic problem set; ``simulate`` draws the runs).

A run shifts every solvable problem's solve rate by g / (1 - unsolvable) (the mean Pass@1 gain
over all problems is g), its seed by u ~ N(0, sigma_seed^2), so

    E Pass@K(g) = E_u mean_p [1 - (1 - clip(p_p + (g + u) / (1 - unsolvable), 0, 1))^K]

over the solvable problems (the unsolvable ones stay at 0), the expectation over u by
Gauss-Hermite quadrature (``HERMITE``, 6 nodes). An arm with its own per-problem spread sigma_A
(``problem_spread``) moves p_p to clip(p_p + d_p - c_A, 0.01, 0.99) first (d_p ~ N(0, sigma_A^2),
c_A = ``centre``), and the expectation runs over d too (the same quadrature): Pass@K is concave
in p, so an arm's spread lowers its Pass@K, more for the arm that spreads more.
"""

from __future__ import annotations

import math

import numpy as np

HERMITE = np.polynomial.hermite_e.hermegauss(6)


CLIP = (0.01, 0.99)   # a problem's success probability under an arm's per-problem offset


def problem_spread(c, algo: str) -> float:
    """Arm ``algo``'s per-problem spread sigma_A: ES's and GRPO's own where the components have
    them (``sigma_problem_es``, ``sigma_problem_grpo``), else ``sigma_problem_algo`` (the
    sequences always)."""
    own = {"es": c.sigma_problem_es, "grpo": c.sigma_problem_grpo}.get(algo)
    return float(own if own is not None else c.sigma_problem_algo)


def centre(p: np.ndarray, sd: float, lo: float = CLIP[0], hi: float = CLIP[1]) -> float:
    """The constant c with mean_p E[clip(p_p + d - c, lo, hi)] = mean_p p_p, d ~ N(0, sd^2): for
    X ~ N(x, sd^2), E clip(X) = lo F(a) + hi (1 - F(b)) + x (F(b) - F(a)) + sd (f(a) - f(b)),
    a = (lo - x) / sd, b = (hi - x) / sd (F, f: the standard normal cdf and pdf); Newton's
    method from c = 0 (the clipped mean falls as c rises, with slope -mean_p (F(b) - F(a))),
    kept inside a bracket that bisection narrows wherever a step would leave it (where the slope
    is flat, p near the bounds), to 1e-12. A constant, not a draw's own mean: the draw's mean over
    problems stays in the arm's Pass@1."""
    from scipy.special import ndtr

    target, l_, h_, cc = float(p.mean()), -0.5, 0.5, 0.0
    for _ in range(100):
        x = p - cc
        a, b = (lo - x) / sd, (hi - x) / sd
        Fa, Fb = ndtr(a), ndtr(b)
        gap = float(np.mean(lo * Fa + hi * (1 - Fb) + x * (Fb - Fa)
                            + sd * (np.exp(-a * a / 2) - np.exp(-b * b / 2)) / math.sqrt(2 * math.pi))) - target
        if gap > 0:      # the clipped mean is above the target: c is too small
            l_ = cc
        else:
            h_ = cc
        if abs(gap) < 1e-13 or h_ - l_ < 1e-12:
            break
        slope = float(np.mean(Fb - Fa))
        step = cc + gap / slope if slope > 0 else None
        cc = step if step is not None and l_ < step < h_ else (l_ + h_) / 2
    return cc


def _spread(p: np.ndarray, sd: float) -> tuple:
    """(weights (J,), the solvable problems' p after an offset at each quadrature node (J, P))."""
    solv = p[p > 0]
    if sd <= 0:
        return np.ones(1), solv[None, :]
    x, w = HERMITE
    return w / w.sum(), np.clip(solv[None, :] + sd * x[:, None] - centre(solv, sd), *CLIP)


def pass_k_expected(p: np.ndarray, shift: float, c, K: int, sd: float = 0.0, _nodes=None) -> float:
    """E over u ~ N(0, sigma_seed^2) (and an arm's offsets d ~ N(0, sd^2)) of mean_p
    [1 - (1 - p'_p)^K], p' the shifted solvable p (``c``: the simulator's Components)."""
    x, w = HERMITE
    wd, ps = _nodes or _spread(p, sd)
    q = np.clip(ps[:, None, :] + ((shift + c.sigma_seed * x) / (1 - c.unsolvable))[None, :, None], 0.0, 1.0)
    per = (1 - (1 - q) ** K).sum(-1) / p.size                     # (offset node, seed node)
    return float(wd @ per @ (w / w.sum()))


def solve_shift(p, target: float, c, K: int, lo=-0.2, hi=0.3, sd: float = 0.0) -> float:
    """The shift g with E Pass@K(g) = target for an arm of spread ``sd`` (bisection: Pass@K rises
    with g)."""
    nodes = _spread(p, sd)
    for _ in range(32):
        mid = (lo + hi) / 2
        if pass_k_expected(p, mid, c, K, _nodes=nodes) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
