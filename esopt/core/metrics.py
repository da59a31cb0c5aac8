"""Pure statistics, the one home of every number esopt reports: coverage (pass@k, maj@k),
population diversity (JS_succ, P_pop), bootstrap and percentile intervals, rank correlation.

Conventions: entropies are in nats (natural log); every function is side-effect free and
numpy-only (no torch), so the study layer and the tests use it cheaply. Token entropy, which
works on logits, lives with the engines (``esopt.engines.base``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np


def _pass_at_k_one(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(1.0 - np.prod(1.0 - k / i))


def pass_at_k(n: int, c, k: int):
    """Unbiased pass@k (Chen et al. 2021) for problems with ``c`` correct of ``n`` samples.

    With n samples of which c are correct:
        pass@k = 1 - C(n-c, k) / C(n, k)
    computed in the numerically stable product form
        pass@k = 1                                   if n - c < k
               = 1 - prod_{i=n-c+1..n} (1 - k/i)     otherwise.
    Requires 0 <= c <= n and 1 <= k <= n. ``c`` an integer -> a float; an array of counts
    (any shape) -> an array of the same shape, each entry computed exactly as the scalar case
    (a table over c = 0..n). Average it over problems for a dataset score.
    """
    n, k = int(n), int(k)
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got n={n} k={k}")
    if np.ndim(c) == 0:
        c = int(c)
        if not 0 <= c <= n:
            raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n} c={c}")
        return _pass_at_k_one(n, c, k)
    counts = np.asarray(c)
    if counts.size and (counts.min() < 0 or counts.max() > n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n} and counts in "
                         f"[{counts.min()}, {counts.max()}]")
    table = np.array([_pass_at_k_one(n, j, k) for j in range(n + 1)], dtype=np.float64)
    return table[counts.astype(np.int64)]


def maj_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """Majority-vote accuracy over the first k samples of one problem (maj@k).

    answers[j] is sample j's normalised final answer (None = no answer extracted), correct[j]
    whether sample j is correct. Among the first k samples, those with an answer vote; the answer
    with the most votes wins, ties broken by the earliest first occurrence; the score is
        maj@k = correct[j*]   with j* the first sample whose answer is the winning answer
    (1.0 or 0.0), and 0.0 if none of the first k samples has an answer. This is one draw of the
    majority vote (not its expectation over k-subsets); averaged over problems it estimates
    the expected majority-vote accuracy with k samples. Requires 1 <= k <= len(answers).
    """
    if len(answers) != len(correct):
        raise ValueError(f"maj_at_k: {len(answers)} answers but {len(correct)} correctness flags")
    if not 1 <= k <= len(answers):
        raise ValueError(f"maj_at_k needs 1 <= k <= {len(answers)}, got k={k}")
    votes: dict[Hashable, int] = {}
    first: dict[Hashable, int] = {}
    for j in range(k):
        a = answers[j]
        if a is None:
            continue
        votes[a] = votes.get(a, 0) + 1
        first.setdefault(a, j)
    if not votes:
        return 0.0
    winner = max(votes, key=lambda a: (votes[a], -first[a]))
    return 1.0 if correct[first[winner]] else 0.0


def binary_entropy(p):
    """Binary entropy in nats: h(p) = -p ln p - (1-p) ln(1-p), with 0 ln 0 = 0.

    Accepts a scalar (returns float) or an array (returns an array of the same shape).
    """
    a = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(np.where(a > 0, a * np.log(a), 0.0) + np.where(a < 1, (1 - a) * np.log1p(-a), 0.0))
    return float(h) if h.ndim == 0 else h


def js_succ(p: Sequence[float]) -> float:
    """Verifier-projected Jensen-Shannon diversity of a population on one prompt, in nats.

    For members i = 1..N with success probabilities p_i on the prompt:
        JS_succ = h(mean_i p_i) - mean_i h(p_i),   h = binary entropy (nats).
    0 when all p_i are equal; at most ln 2 (reached by p = [0, 1]); a lower bound on the
    Jensen-Shannon divergence of the members' policies (data processing through the verifier).
    """
    a = np.asarray(p, dtype=np.float64)
    if a.size == 0:
        raise ValueError("js_succ needs at least one member")
    return max(0.0, float(binary_entropy(a.mean()) - np.mean(binary_entropy(a))))


def p_pop(p: Sequence[float]) -> float:
    """Population coverage with one sample per member: P_pop = 1 - prod_i (1 - p_i).

    It is >= 1 - (1 - mean p)^N (AM-GM), with equality when all p_i are equal.
    """
    a = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    return float(1.0 - np.prod(1.0 - a))


def bootstrap_ci(
    values,
    stat: Callable = np.mean,
    n: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap (1 - alpha) confidence interval of stat(values), resampling problems.

    values: array [P, ...], one entry (row) per problem; each of the n replicates draws P rows
    with replacement and computes stat(rows); the interval is the (alpha/2, 1 - alpha/2)
    percentiles of the replicates. Seeded (numpy default_rng(seed)), so deterministic.
    Returns (nan, nan) for empty values.
    """
    a = np.asarray(values, dtype=np.float64)
    if a.shape[0] == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.shape[0], size=(n, a.shape[0]))
    if stat in (np.mean, np.median) and a.ndim == 1:
        reps = stat(a[idx], axis=1)  # vectorised fast path
    else:
        reps = np.array([stat(a[row]) for row in idx], dtype=np.float64)
    lo, hi = _percentiles(reps, alpha)
    return (lo, hi)


def _percentiles(reps: np.ndarray, alpha: float) -> tuple[float, float]:
    """The (alpha/2, 1 - alpha/2) percentiles of ``reps``: a (1 - alpha) percentile interval."""
    lo, hi = np.percentile(reps, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def percentile_interval(reps, level: float = 0.95) -> list[float] | None:
    """The ``level`` percentile interval of the finite replicates ``reps`` (``_percentiles``
    with alpha = 1 - level); None when there are none."""
    reps = np.asarray(reps, dtype=np.float64)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return None
    return list(_percentiles(reps, 1 - level))


def spearman(x, y) -> np.ndarray:
    """Spearman rank correlation per row of ``x``, ``y`` (B, n): Pearson's r of the (average,
    for ties) ranks; nan where a row is constant."""
    from scipy.stats import rankdata

    rx, ry = rankdata(np.atleast_2d(x), axis=1), rankdata(np.atleast_2d(y), axis=1)
    rx, ry = rx - rx.mean(1, keepdims=True), ry - ry.mean(1, keepdims=True)
    den = np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, (rx * ry).sum(1) / den, np.nan)


def seed_variance(groups: Sequence) -> float:
    """Run-to-run (seed) variance of a run's score, pooled over configurations.

    groups: one entry per configuration, each an array [R_g, P] of per-problem scores of its
    R_g runs (seeds) on the same P problems. With m_gr = mean_p x_grp (run r's score):
        tau2 = sum_g sum_r (m_gr - mean_r m_gr)^2 / sum_g (R_g - 1)
    over the configurations with R_g >= 2; 0.0 when none has two runs.
    """
    ss, dof = 0.0, 0
    for g in groups:
        a = np.asarray(g, dtype=np.float64)
        if a.ndim != 2 or a.shape[0] < 2:
            continue
        m = a.mean(axis=1)
        ss += float(((m - m.mean()) ** 2).sum())
        dof += a.shape[0] - 1
    return ss / dof if dof else 0.0


def config_bounds(values, tau2: float = 0.0, level: float = 0.95) -> tuple[float, float, float]:
    """A configuration's score with its two-sided ``level`` normal-approximation bounds, its
    seed replicates pooled (the statistic of the ``auto`` pruner, esopt.runtime.pruning).

    values: [R, P] per-problem scores (e.g. per-problem pass@1) of the configuration's R runs
    on the same P problems. With xbar_p = mean_r x_rp and m = mean_p xbar_p:
        SE^2 = var_p(xbar_p) / P + tau2 / R       (var with ddof = 1; 0 for P = 1)
        lower, upper = m -+ z * SE,  z = Phi^-1((1 + level) / 2)   (1.96 at level 0.95)
    The first term is the evaluation's noise (which problems, which samples); ``tau2`` is
    the run-to-run variance of a run's score (:func:`seed_variance`), shrunk by the R seeds
    pooled. Returns (m, lower, upper).
    """
    from statistics import NormalDist

    a = np.atleast_2d(np.asarray(values, dtype=np.float64))
    if a.size == 0:
        raise ValueError("config_bounds needs at least one run with one problem")
    if not 0.0 < level < 1.0:
        raise ValueError(f"config_bounds needs 0 < level < 1, got {level}")
    xbar = a.mean(axis=0)
    p, r = xbar.size, a.shape[0]
    var = (float(xbar.var(ddof=1)) / p if p > 1 else 0.0) + max(float(tau2), 0.0) / r
    z = NormalDist().inv_cdf((1.0 + level) / 2.0)
    m = float(xbar.mean())
    half = z * var ** 0.5
    return m, m - half, m + half
