"""Pure statistics (esopt.core.metrics): pass@k vs brute force, maj@k, JS_succ, P_pop, bootstrap."""

import itertools
import math

import numpy as np
import pytest

from esopt.core import metrics


def brute_pass_at_k(n, c, k):
    """Fraction of k-subsets of n samples (c correct) containing a correct sample."""
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_brute_force_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert metrics.pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_edges_and_large_n():
    assert metrics.pass_at_k(32, 0, 1) == 0.0
    assert metrics.pass_at_k(32, 0, 32) == 0.0
    assert metrics.pass_at_k(32, 32, 1) == 1.0
    assert metrics.pass_at_k(32, 1, 32) == 1.0  # k = n: any correct sample counts
    assert metrics.pass_at_k(32, 5, 1) == pytest.approx(5 / 32)
    # Large n where the binomial form overflows floats: compare with exact integers.
    n, c, k = 2000, 7, 100
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert metrics.pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)
    with pytest.raises(ValueError):
        metrics.pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        metrics.pass_at_k(4, 1, 5)


def test_maj_at_k_majority_ties_and_missing_answers():
    answers = ["5", "7", "7", None, "5", "5"]
    correct = [True, False, False, False, True, True]
    assert metrics.maj_at_k(answers, correct, 1) == 1.0
    assert metrics.maj_at_k(answers, correct, 2) == 1.0  # tie 1-1: first occurrence ("5") wins
    assert metrics.maj_at_k(answers, correct, 3) == 0.0  # "7" has 2 votes
    assert metrics.maj_at_k(answers, correct, 4) == 0.0  # None does not vote
    assert metrics.maj_at_k(answers, correct, 5) == 1.0  # tie 2-2 -> "5" occurred first
    assert metrics.maj_at_k(answers, correct, 6) == 1.0
    assert metrics.maj_at_k([None, None], [False, False], 2) == 0.0
    with pytest.raises(ValueError):
        metrics.maj_at_k(answers, correct, 7)


def test_binary_entropy():
    assert metrics.binary_entropy(0.0) == 0.0
    assert metrics.binary_entropy(1.0) == 0.0
    assert metrics.binary_entropy(0.5) == pytest.approx(math.log(2))
    assert metrics.binary_entropy(0.2) == pytest.approx(-(0.2 * math.log(0.2) + 0.8 * math.log(0.8)))
    np.testing.assert_allclose(metrics.binary_entropy([0.0, 0.5]), [0.0, math.log(2)])


def test_js_succ_values_and_bounds():
    assert metrics.js_succ([0.3, 0.3, 0.3]) == pytest.approx(0.0, abs=1e-15)
    assert metrics.js_succ([0.0, 1.0]) == pytest.approx(math.log(2))
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.random(rng.integers(1, 10))
        assert 0.0 <= metrics.js_succ(p) <= math.log(2) + 1e-12
    # Hand example: two policies over 3 outcomes; the verifier marks outcome 0 correct.
    # JS_succ (projection onto correct/incorrect) <= JS of the policies themselves.
    pi = np.array([[0.6, 0.3, 0.1], [0.2, 0.1, 0.7]])

    def H(q):
        return -(q * np.log(q)).sum()

    js_pol = H(pi.mean(0)) - np.mean([H(q) for q in pi])
    js_s = metrics.js_succ(pi[:, 0])
    h = metrics.binary_entropy
    assert js_s == pytest.approx(h(0.4) - (h(0.6) + h(0.2)) / 2)
    assert 0 < js_s < js_pol


def test_p_pop():
    assert metrics.p_pop([0.5, 0.5]) == pytest.approx(0.75)
    assert metrics.p_pop([0.0, 0.0, 0.0]) == 0.0
    assert metrics.p_pop([1.0, 0.0]) == 1.0
    p = np.array([0.1, 0.5, 0.05, 0.3])
    assert metrics.p_pop(p) >= 1 - (1 - p.mean()) ** len(p)  # coverage bound from the paper


def test_bootstrap_ci_contains_mean_and_narrows():
    rng = np.random.default_rng(1)
    small = rng.random(20)
    big = rng.random(2000)
    lo_s, hi_s = metrics.bootstrap_ci(small)
    lo_b, hi_b = metrics.bootstrap_ci(big)
    assert lo_s <= small.mean() <= hi_s
    assert lo_b <= big.mean() <= hi_b
    assert (hi_b - lo_b) < (hi_s - lo_s) / 4
    assert metrics.bootstrap_ci(small) == metrics.bootstrap_ci(small)  # seeded
    assert metrics.bootstrap_ci([0.7, 0.7, 0.7]) == pytest.approx((0.7, 0.7))
    # Generic stat over rows (ratio of sums), as the evaluator uses for token-mean entropy.
    pairs = np.stack([rng.random(50) * 10, np.full(50, 10.0)], axis=1)
    lo, hi = metrics.bootstrap_ci(pairs, stat=lambda a: a[:, 0].sum() / a[:, 1].sum())
    assert lo <= pairs[:, 0].sum() / pairs[:, 1].sum() <= hi


def test_spearman_matches_scipy_and_handles_constant():
    from scipy.stats import spearmanr

    x, y = np.array([1.0, 3, 2, 5, 4, 4]), np.array([2.0, 1, 4, 6, 5, 7])
    assert metrics.spearman(x, y)[0] == pytest.approx(spearmanr(x, y).statistic)
    assert np.isnan(metrics.spearman(np.ones(5), np.arange(5.0))[0])


def test_percentile_interval():
    reps = np.arange(1001, dtype=float)
    assert metrics.percentile_interval(reps, 0.95) == pytest.approx([25.0, 975.0])
    assert metrics.percentile_interval([np.nan, np.inf]) is None


def test_bootstrap_means_pairs_problems_and_runs():
    rng = np.random.default_rng(0)
    base = rng.random((3, 50))
    b = metrics.bootstrap_means({"base": base, "final": base + 0.1}, n_boot=200, seed=1,
                                pair_rows=[("base", "final")])
    # paired over problems and runs: the difference is exactly the planted shift in every replicate
    assert np.allclose(b["final"] - b["base"], 0.1)
    unpaired = metrics.bootstrap_means({"base": base, "final": base + 0.1}, n_boot=200, seed=1)
    assert np.ptp(unpaired["final"] - unpaired["base"]) > 0.01
    assert b["base"][0] == pytest.approx(base.mean())
    with pytest.raises(ValueError, match="share the problem axis"):
        metrics.bootstrap_means({"a": np.zeros((2, 3)), "b": np.zeros((2, 4))}, n_boot=5, seed=0)


def test_widen_makes_a_run_bootstrap_unbiased():
    """A plain bootstrap of a mean of n runs has variance (n-1)/n * s^2/n; widened, s^2/n."""
    v = np.array([0.1, 0.5, 0.3])
    plain = metrics.bootstrap_runs(v, n_boot=40000, seed=0, widen_runs=False)
    wide = metrics.bootstrap_runs(v, n_boot=40000, seed=0)
    assert plain[0] == wide[0] == pytest.approx(v.mean())
    assert plain[1:].var() == pytest.approx(v.var(ddof=0) / 3, rel=0.03)
    assert wide[1:].var() == pytest.approx(v.var(ddof=1) / 3, rel=0.03)
    assert np.allclose(metrics.widen(np.array([1.0, 3.0]), 2.0, 1), [1.0, 3.0])    # n = 1: unchanged


def test_resample_indices_within_groups():
    groups = np.array(["a", "b", "a", "c", "b", "a"])
    idx = metrics.resample_indices(np.random.default_rng(0), 500, len(groups), groups=groups)
    assert idx.shape == (500, 6)
    assert (groups[idx] == groups[None, :]).all()                 # every draw stays in its group
    assert set(np.unique(idx[:, 0])) == {0, 2, 5}                 # and reaches every member of it
    assert (idx[:, 3] == 3).all()                                 # a group of one stays put
    rng1, rng2 = np.random.default_rng(3), np.random.default_rng(3)
    whole = metrics.resample_indices(rng1, 10, 6, groups=groups)
    parts = np.concatenate([metrics.resample_indices(rng2, n, 6, groups=groups) for n in (4, 6)])
    assert (whole == parts).all()                                 # blocks draw the same stream
