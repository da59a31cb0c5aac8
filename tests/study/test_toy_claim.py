"""A claim is one object: a toy twelfth claim declared in one file (tests/study/toy_claim.py) is
simulated (its draw and its planted effect), calibrated, planned and decided by the code that
loops over the registry, in a family of 2 x 12 hypotheses; a registration made before it was
added judges later verdicts exploratory. Records only (the simulator's): no model, no store."""

import numpy as np
import pytest
import toy_claim

from esopt.study import claims as C
from esopt.study.claims import design as D
from esopt.study.claims import rules as R
from esopt.study.claims.simulate import Design, calibrate, simulate, table

DESIGN = Design(seeds=6, problems=60, samples=16)


@pytest.fixture(scope="module")
def toy():
    before = set(R.REGISTRY)
    toy_claim.register()
    try:
        yield R.REGISTRY[toy_claim.CID]
    finally:
        R.unregister(toy_claim.CID)
        assert set(R.REGISTRY) == before


def test_the_toy_claim_is_simulated_and_calibrated(toy):
    recs = simulate(DESIGN, {toy.id: 2.0}, rng=np.random.default_rng(0), parts=("cell",))
    length = {a: np.mean([r["toy_length"] for r in recs if r["algo"] == a]) for a in ("es", "grpo")}
    assert length["grpo"] - length["es"] == pytest.approx(2.0, abs=0.6)
    rest = simulate(DESIGN, {}, rng=np.random.default_rng(0), nothing_trains=True, parts=("cell",))
    assert abs(np.mean([r["toy_length"] for r in rest if r["algo"] == "es"]) - toy_claim.BASE_LENGTH) < 0.6
    rates = calibrate(DESIGN, sims=20, seed=1, only=["null12", "sesoi12"])
    assert rates["null12"]["yes"] <= 0.1 and rates["sesoi12"]["yes"] >= 0.5, rates
    assert table(rates)[0].startswith("claim 12 false_yes=")


def test_the_toy_claim_is_planned(toy):
    g = D.Grid(cell_model="m", cell_seeds={"es": 6, "grpo": 6}, problems=60, samples=16, split_rows=500,
               iterations=30, ood=True, sparsity=(), es_temperature=1.0, es_samples=4, grpo_mid=True)
    assert toy.id in D.bears_on(g) and D.generators_for(toy.id) == ["current", *R.PER_PROBLEM]
    row = D.assess(g, [], claims=[toy.id], sims=8)["claims"][toy.id]
    assert row["key"] == "toy_shorter" and row["power"] >= 0.75 and row["false_yes"] <= 0.25, row


def test_the_toy_claim_is_decided_in_a_family_of_24(toy, tmp_path):
    recs = simulate(DESIGN, {toy.id: 2.0}, rng=np.random.default_rng(2), parts=("cell",))
    out = C.compute(recs)
    row = next(c for c in out["claims"] if c["id"] == toy.id)
    assert C.hypothesis_count() == out["hypotheses"] == 24 and "24 yes and no hypotheses" in row["decision"]
    assert row["reproduced"] == "yes" and row["effect"] == pytest.approx(2.0, abs=0.6), row
    reg = {"design": {"run_ids": sorted(r["run_id"] for r in recs)}, "claims": list(range(1, 12)), "amendments": [],
           "graph": C.registered_graph()}
    look = C.judge_look(reg, recs)
    assert not look["confirmatory"] and "added since: 12" in look["why"], look
    assert C.judge_look({**reg, "claims": sorted(R.REGISTRY)}, recs)["confirmatory"]
