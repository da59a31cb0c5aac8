"""The claims' error rates, measured: a small seeded run of the calibration simulator
(esopt.study.simulate, benchmarks/bench_claims_calibration.py) through the real claim code.
Fails if a claim's false-yes rate under its null, or the family-wise false-yes rate where
nothing trains, is significantly above 5% (one-sided binomial test at 1%), and checks that
the truth at the smallest effect of interest is not called "no" more often than that."""

import pytest
from scipy.stats import binomtest

from esopt.study.simulate import Design, calibrate, table

SIMS = 50
BOUND = 0.05


@pytest.fixture(scope="module")
def rates():
    only = [f"null{i}" for i in range(1, 8)] + ["sesoi1", "sesoi5", "nothing_trains"]
    return calibrate(Design(problems=200), sims=SIMS, seed=7, only=only)


@pytest.mark.parametrize("cid", range(1, 8))
def test_false_yes_rate_within_its_bound(rates, cid):
    r = rates[f"null{cid}"]
    k = round(r["yes"] * r["sims"])
    assert binomtest(k, r["sims"], BOUND, alternative="greater").pvalue > 0.01, (cid, r)


def test_familywise_false_yes_where_nothing_trains(rates):
    r = rates["nothing_trains"]
    assert binomtest(round(r["any_yes"] * r["sims"]), r["sims"], BOUND, alternative="greater").pvalue > 0.01, r
    lines = table(rates)                      # the benchmark's lines: claims with both rates, then the family
    assert [ln.split(" ")[:2] for ln in lines] == [["claim", "1"], ["claim", "5"],
                                                   ["familywise", f"false_yes={r['any_yes']:.3f}"]]


@pytest.mark.parametrize("cid", [1, 5])
def test_false_no_rate_at_the_smallest_effect_of_interest(rates, cid):
    r = rates[f"sesoi{cid}"]
    assert binomtest(round(r["no"] * r["sims"]), r["sims"], BOUND, alternative="greater").pvalue > 0.01, r
    assert r["yes"] > r["no"]                      # the truth is called yes more often than no
