"""Pure metric functions: coverage (pass@k, maj@k), population diversity (JS_succ, P_pop),
token entropy, and bootstrap confidence intervals over problems.

Conventions: entropies are in nats (natural log); every function is side-effect free.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np
import torch


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem (Chen et al. 2021).

    With n samples of which c are correct:
        pass@k = 1 - C(n-c, k) / C(n, k)
    computed in the numerically stable product form
        pass@k = 1                                   if n - c < k
               = 1 - prod_{i=n-c+1..n} (1 - k/i)     otherwise.
    Requires 0 <= c <= n and 1 <= k <= n. Average it over problems for a dataset score.
    """
    n, c, k = int(n), int(c), int(k)
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n} c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got n={n} k={k}")
    if n - c < k:
        return 1.0
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(1.0 - np.prod(1.0 - k / i))


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


def entropy_per_token(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy (nats) of softmax(z / T) at every position: H = logsumexp(z/T) - sum softmax(z/T) * z/T.

    logits [..., V] -> entropies [...], computed in float32; -inf logits (masked tokens) add 0.
    """
    if temperature <= 0:
        raise ValueError(f"entropy temperature must be > 0, got {temperature}")
    z = logits.float() / temperature
    lse = torch.logsumexp(z, dim=-1)
    p = torch.softmax(z, dim=-1)
    pz = torch.where(p > 0, p * z, torch.zeros_like(z))
    return lse - pz.sum(dim=-1)


def token_entropy(logits: torch.Tensor, mask: torch.Tensor | None = None, temperature: float = 1.0) -> torch.Tensor:
    """Token-mean entropy (nats) of the temperature-scaled distributions over masked positions.

        H_t = logsumexp(z_t / T) - sum_v softmax(z_t / T)_v * z_t,v / T
        token_entropy = sum_t mask_t * H_t / sum_t mask_t
    logits [B, L, V] (any leading shape), mask [B, L] (bool or 0/1; None = all positions).
    Token-mean: every completion token weighs the same, so long completions weigh more than
    short ones (not a mean of per-sequence means). Returns a 0-d float32 tensor (0 if the mask
    is empty).
    """
    h = entropy_per_token(logits, temperature)
    if mask is None:
        return h.mean()
    m = mask.to(h.dtype)
    return (h * m).sum() / m.sum().clamp(min=1.0)


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
    lo, hi = np.percentile(reps, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return (float(lo), float(hi))
