"""Pure statistics, the one home of every number esopt reports: coverage (pass@k, maj@k),
population diversity (JS_succ, P_pop), bootstrap and percentile intervals, rank correlation.

Conventions: entropies are in nats (natural log); every function is side-effect free and
numpy-only (no torch), so the study layer and the tests use it cheaply. Token entropy, which
works on logits, lives with the engines (``esopt.engines.base``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

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
    return _pass_at_k_table(n, k)[counts.astype(np.int64)]


@functools.lru_cache(maxsize=256)
def _pass_at_k_table(n: int, k: int) -> np.ndarray:
    """pass@k for c = 0..n (read-only: it is shared by every call with this n and k)."""
    table = np.array([_pass_at_k_one(n, j, k) for j in range(n + 1)], dtype=np.float64)
    table.flags.writeable = False
    return table


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


# ---------------------------------------------------------------------------------------
# the bootstrap: every resample esopt draws comes from resample_indices, every interval from
# percentile_interval, and a mean resampled over a few runs is widened by widen()
def resample_indices(rng: np.random.Generator, n_boot: int, n: int, groups=None) -> np.ndarray:
    """Bootstrap resample indices (n_boot, n): each row draws n entries with replacement.

    groups None: uniformly from 0..n-1 (``rng.integers(0, n, (n_boot, n))``). groups (n,)
    labels: entry j is replaced by a uniform draw among the entries of its own group
    (``order[start_g + floor(u * count_g)]``, u ~ U[0, 1) from ``rng.random``), so each group
    keeps its size. Calling it for consecutive blocks of rows draws the same stream as one call.
    """
    if groups is None:
        return rng.integers(0, n, size=(n_boot, n))
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    g = g.ravel()
    order = np.argsort(g, kind="stable")
    counts = np.bincount(g)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = starts[g] + (rng.random((n_boot, n)) * counts[g]).astype(np.int64)
    return order[pos]


def widen(reps, observed, n):
    """Replicates of a mean over ``n`` resampled units (runs, seeds), widened to the unbiased
    spread: ``observed + sqrt(n / (n - 1)) * (reps - observed)`` (n = 1: unchanged);
    ``observed`` is what the resampling varies around (a number, or one per replicate).

    A plain bootstrap of a mean of n draws has variance (n - 1)/n * s^2/n, not s^2/n: with 3
    seeds its intervals are about 18% too narrow. The one rule: esopt widens the deviation that
    resampling runs (seeds) adds to a mean (the study's claims and the trend fit); resampling
    problems (hundreds) is left as is. ``n`` may be an array broadcasting against ``reps``.
    """
    n = np.asarray(n, dtype=np.float64)
    return observed + np.sqrt(n / np.maximum(n - 1, 1)) * (np.asarray(reps, dtype=np.float64) - observed)


def bootstrap_ci(
    values,
    stat: Callable = np.mean,
    n: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap (1 - alpha) confidence interval of stat(values), resampling problems.

    values: array [P, ...], one entry (row) per problem; each of the n replicates draws P rows
    with replacement (:func:`resample_indices`) and computes stat(rows); the interval is the
    (alpha/2, 1 - alpha/2) percentiles of the replicates. Seeded (numpy default_rng(seed)),
    so deterministic. Returns (nan, nan) for empty values.
    """
    a = np.asarray(values, dtype=np.float64)
    if a.shape[0] == 0:
        return (float("nan"), float("nan"))
    idx = resample_indices(np.random.default_rng(seed), n, a.shape[0])
    if stat in (np.mean, np.median) and a.ndim == 1:
        reps = stat(a[idx], axis=1)  # vectorised fast path
    else:
        reps = np.array([stat(a[row]) for row in idx], dtype=np.float64)
    lo, hi = _percentiles(reps, alpha)
    return (lo, hi)


def bootstrap_means(arrays: Mapping[str, np.ndarray], *, n_boot: int, seed: int,
                    pair_rows: Iterable[Iterable[str]] = (), widen_runs: bool = True) -> dict[str, np.ndarray]:
    """Cell means of per-run, per-problem arrays: row 0 observed, rows 1..n_boot resampled.

    ``arrays[name]`` is (R_name, P) with the same P (problem p is the same problem in every
    array). Each replicate draws one problem resample (P indices, shared by all arrays: paired
    over problems) and, per array, R_name run indices with replacement; arrays named together
    in ``pair_rows`` (same R) share their run indices (e.g. base and final of the same runs).
    mean_b = mean_{i, j} X[rows_b[i], probs_b[j]]; with ``widen_runs`` the part the run
    resampling adds is widened (:func:`widen`, n = R_name) around c_b = mean_{i, j}
    X[i, probs_b[j]] (all runs, the replicate's problems):
        mean_b' = c_b + sqrt(R / (R - 1)) * (mean_b - c_b)
    so the problem part (hundreds of problems) is not inflated, and arrays paired over runs stay
    paired (a planted shift stays exact). Returns name -> (n_boot + 1,).
    """
    rng = np.random.default_rng(seed)
    names = list(arrays)
    P = {np.asarray(a).shape[1] for a in arrays.values()}
    if len(P) != 1:
        raise ValueError(f"arrays must share the problem axis, got sizes {sorted(P)}")
    P = P.pop()
    probs = resample_indices(rng, n_boot, P)
    group_of = {n: n for n in names}
    for grp in pair_rows:
        grp = [g for g in grp if g in arrays]
        for g in grp[1:]:
            group_of[g] = grp[0]
    rows: dict[str, np.ndarray] = {}
    out = {}
    for name in names:
        x = np.asarray(arrays[name], dtype=np.float64)
        g = group_of[name]
        if g not in rows:
            rows[g] = resample_indices(rng, n_boot, x.shape[0])
        colmeans = x[:, probs].mean(axis=2)                            # (R, B): per run, resampled problems
        picked = np.take_along_axis(colmeans.T, rows[g], axis=1).mean(axis=1)   # (B,)
        if widen_runs:                                 # widen what the run resampling adds
            picked = widen(picked, colmeans.mean(axis=0), x.shape[0])
        out[name] = np.concatenate([[x.mean()], picked])
    return out


def bootstrap_runs(values, *, n_boot: int, seed: int, widen_runs: bool = True) -> np.ndarray:
    """Mean of per-run values (row 0) and of n_boot resamples of the runs (rows 1..), widened
    (:func:`widen`, n = the number of runs): :func:`bootstrap_means` with one problem."""
    v = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    return bootstrap_means({"v": v}, n_boot=n_boot, seed=seed, widen_runs=widen_runs)["v"]


def _percentiles(reps: np.ndarray, alpha: float, axis=None):
    """The (alpha/2, 1 - alpha/2) percentiles of ``reps``: a (1 - alpha) percentile interval."""
    lo, hi = np.percentile(reps, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=axis)
    return (float(lo), float(hi)) if axis is None else (lo, hi)


def percentile_interval(reps, level: float = 0.95, axis: int | None = None):
    """The ``level`` percentile interval of the finite replicates ``reps`` (``_percentiles``
    with alpha = 1 - level); None when there are none. With ``axis``: (lo, hi) arrays of the
    percentiles along that axis (a band, e.g. one interval per k or per x of a fit)."""
    reps = np.asarray(reps, dtype=np.float64)
    if axis is not None:
        return _percentiles(reps, 1 - level, axis=axis)
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


# ---------------------------------------------------------------------------------------
# tests of the study's claims: t statistics with variance components, one-sided p-values,
# power at an effect, Holm's step-down. The claims (esopt.study.claims.rules) use only these.
def contrast(arms: Sequence[tuple[np.ndarray, float]]) -> dict:
    """A linear contrast of cell means with seeds and problems as variance components.

    ``arms`` = [(X_a, w_a)], X_a (R_a, P) per-run, per-problem scores on the same P problems
    (problem p is the same problem in every arm: paired; runs independent between arms; a
    run's paired parts, e.g. final - base, are combined into one arm beforehand). With
    m_ar = mean_p X_a[r, p], xbar_ap = mean_r X_a[r, p], y_p = sum_a w_a xbar_ap and MSE_a the
    residual mean square of arm a's two-way (run x problem) table:
        theta = sum_a w_a mean_{r,p} X_a
        V_a = w_a^2 var_r(m_ar) / R_a                      (seeds, with the sampling noise)
        V_P = max(0, var_p(y_p) - sum_a w_a^2 MSE_a / R_a) / P   (problems, the noise removed)
        se^2 = sum_a V_a + V_P
        df = se^4 / (sum_a V_a^2 / (R_a - 1) + V_P^2 / (P - 1))   (Welch-Satterthwaite)
    (the two-way random-effects ANOVA's var(mean) = (MS_runs + MS_problems - MS_error) / (R P),
    one arm.) Needs R_a >= 2 in every arm; P = 1 (run-level values) gives Welch's t.
    Returns {"effect", "se", "df", "runs": [R_a], "problems": P, "var_runs": sum_a V_a,
    "var_problems": V_P} (the split says what more data would shrink: ``claims.data_needed``)."""
    xs = [np.atleast_2d(np.asarray(x, dtype=np.float64)) for x, _ in arms]
    ws = [float(w) for _, w in arms]
    P = {x.shape[1] for x in xs}
    if len(P) != 1:
        raise ValueError(f"arms must share the problem axis, got sizes {sorted(P)}")
    P = P.pop()
    if any(x.shape[0] < 2 for x in xs):
        raise ValueError("contrast needs at least 2 runs per arm")
    v_runs, noise = [], 0.0
    for x, w in zip(xs, ws):
        R = x.shape[0]
        m = x.mean(axis=1)
        v_runs.append(w * w * float(m.var(ddof=1)) / R)
        if P > 1:
            resid = x - m[:, None] - x.mean(axis=0)[None, :] + x.mean()
            noise += w * w * float((resid ** 2).sum()) / ((R - 1) * (P - 1)) / R
    v_p = 0.0
    if P > 1:
        y = sum(w * x.mean(axis=0) for x, w in zip(xs, ws))
        v_p = max(0.0, float(np.var(y, ddof=1)) - noise) / P
    se2 = sum(v_runs) + v_p
    den = sum(v * v / (x.shape[0] - 1) for v, x in zip(v_runs, xs)) + (v_p * v_p / (P - 1) if P > 1 else 0.0)
    df = se2 * se2 / den if den > 0 else float("inf")
    return {"effect": float(sum(w * x.mean() for x, w in zip(xs, ws))), "se": math.sqrt(se2), "df": float(df),
            "runs": [x.shape[0] for x in xs], "problems": P, "var_runs": float(sum(v_runs)), "var_problems": v_p}


def ratio_influence(num, den) -> tuple[float, np.ndarray]:
    """A ratio of means and its per-run influence values (the delta method):
        Q = mean(num) / mean(den),   u_r = (num_r - Q den_r) / mean(den)
    so var(Q) ~ var(u) / R; ``contrast([(u[:, None], 1)])`` gives its se (its effect is 0:
    report Q). mean(den) must be nonzero."""
    a, b = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    q = float(a.mean() / b.mean())
    return q, (a - q * b) / b.mean()


def p_above(effect: float, se: float, df: float, boundary: float) -> float:
    """One-sided p-value of H0: theta <= boundary against theta > boundary:
        p = 1 - F_t(df)((effect - boundary) / se)     (df = inf: the normal)
    se = 0 (no spread at all): 0 if effect > boundary, else 1."""
    from scipy.stats import t as student_t

    if se <= 0 or not math.isfinite(se):
        return 0.0 if effect > boundary else 1.0
    return float(student_t.sf((effect - boundary) / se, df))


def t_interval(effect: float, se: float, df: float, level: float = 0.95) -> list[float]:
    """The two-sided ``level`` t interval effect -+ t_{(1 + level)/2, df} * se (df = inf: z)."""
    from scipy.stats import t as student_t

    h = float(student_t.ppf((1 + level) / 2, df)) * se if se > 0 else 0.0
    return [effect - h, effect + h]


def power_at(delta: float, se: float, df: float, alpha: float) -> float:
    """Power of the one-sided level-alpha t test at a true distance ``delta`` from its boundary:
        power = 1 - F_t(df)(t_{1-alpha, df} - delta / se)    (normal approximation of the
    noncentral t; se = 0: 1 when delta > 0)."""
    from scipy.stats import t as student_t

    if se <= 0 or not math.isfinite(se):
        return 1.0 if delta > 0 else 0.0
    return float(student_t.sf(student_t.isf(alpha, df) - delta / se, df))


def holm(pvalues: Mapping, alpha: float = 0.05, m: int | None = None) -> dict:
    """Holm's step-down: the hypotheses rejected at family-wise error ``alpha``.

    Sort the m p-values p_(1) <= ... <= p_(m); reject H_(i) while p_(i) <= alpha / (m - i + 1),
    stop at the first that is not. Returns key -> (rejected, adjusted p), the adjusted
    p_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)). None values are left out (not tested).
    ``m``: the family's size fixed in advance (hypotheses not in ``pvalues`` count with p = 1);
    default (and at least) the number of p-values given."""
    keys = sorted((k for k, p in pvalues.items() if p is not None), key=lambda k: pvalues[k])
    m = max(len(keys), int(m or 0))
    out, running, going = {}, 0.0, True
    for i, k in enumerate(keys):
        running = max(running, min(1.0, (m - i) * float(pvalues[k])))
        going = going and float(pvalues[k]) <= alpha / (m - i)
        out[k] = (going, running)
    return out


def ols(y, X) -> dict:
    """Ordinary least squares of y (n,) on the columns of X (n, q) with the classical covariance:
        b = (X'X)^-1 X'y,  s^2 = |y - X b|^2 / (n - q),  cov(b) = s^2 (X'X)^-1,  df = n - q.
    Returns {"coef", "cov", "df", "resid"}; None when X'X is singular (a column not identified)
    or n <= q."""
    y, X = np.asarray(y, dtype=np.float64), np.asarray(X, dtype=np.float64)
    n, q = X.shape
    if n <= q or np.linalg.matrix_rank(X) < q:
        return None
    xtx_inv = np.linalg.inv(X.T @ X)
    b = xtx_inv @ (X.T @ y)
    resid = y - X @ b
    s2 = float(resid @ resid) / (n - q)
    return {"coef": b, "cov": s2 * xtx_inv, "df": float(n - q), "resid": resid}


def pass_at_k_noise_var(n: int, c, k: int) -> float:
    """Unbiased estimate of the sampling (evaluation) variance of a run's mean Pass@k over P
    problems, from ``c`` correct of ``n`` samples each (needs n >= 2k). With g_j(c) =
    C(n - c, j) / C(n, j) = 1 - pass@j, unbiased for (1 - p)^j, the estimator 1 - g_k has
        Var = E[g_k^2] - (1 - p)^(2k),  estimated without bias by  g_k(c)^2 - g_2k(c)
    per problem; the mean's variance is their sum / P^2. It is the part of a run's score that
    another evaluation of the same model would redraw (the plug-in delta method was off by
    0.7-2x at n = 32, k = 8)."""
    if n < 2 * k:
        raise ValueError(f"pass_at_k_noise_var needs n >= 2k, got n={n} k={k}")
    c = np.asarray(c)
    g_k, g_2k = 1.0 - pass_at_k(n, c, k), 1.0 - pass_at_k(n, c, 2 * k)
    return float(np.sum(g_k * g_k - g_2k)) / float(c.size) ** 2


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The two-sided ``level`` Wilson score interval of a binomial rate k / n:
        (p + z^2 / 2n -+ z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n),  z = z_{(1 + level) / 2}
    (11 / 200 -> [0.031, 0.096]). n = 0: (0, 1)."""
    from statistics import NormalDist

    if n <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf((1 + level) / 2)
    p = k / n
    mid, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (mid - half) / (1 + z * z / n)), min(1.0, (mid + half) / (1 + z * z / n))


def wilson_upper(k: int, n: int, level: float = 0.95) -> float:
    """Upper end of :func:`wilson_interval` (11 / 200 -> 0.096). n = 0: 1."""
    return wilson_interval(k, n, level)[1]
