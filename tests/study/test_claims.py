"""esopt.study.claims: every verdict can come out either way.

- Controls through the results store (tests/helpers.write_planted_sweep): a sweep with each of
  the study's effects planted says "yes" to all seven claims; one with each effect reversed (ES
  still learning) says "no" to claims 2-7; one where ES loses says "no" to claim 1 and leaves
  the claims about ES unclear; a sweep where nothing trains says "yes" to none.
- Unit tests per claim on run records (guards, power, missing data).
- The real null control: paper_cpu_quick with es.lr and grpo.lr ~ 0 (nothing trains), end to
  end: claims.json and the page, and no "yes" anywhere."""

import json
import zlib
import re

import numpy as np
import pytest

from helpers import run_cli, write_planted_sweep

from esopt.study import claims as C

ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}   # tiny models: one thread is fastest on a shared CPU
KW = dict(n_boot=400, seed=0, level=0.95, tolerance=0.01, band=0.10, keep=0.22, keep_share=0.90)
N, P = 16, 80


def counts(p, seed, n=N):
    """Per-problem correct counts ~ Binomial(n, p_problem); p: scalar or per-problem array."""
    rng = np.random.default_rng(seed)
    return rng.binomial(n, np.broadcast_to(np.asarray(p, dtype=float), (P,))).tolist()


def rec(algo, seed, base_p=0.3, final_p=0.3, *, model="tiny-s", pop=16, iterations=20, h0=0.8, h1=0.8, **extra):
    """One run record (a runs-table row plus per-problem lists); base counts are the same
    problems for every run (eval seed fixed), final counts differ per run."""
    return {"run_id": f"{algo}-{model}-{pop}-{seed}", "status": "completed", "algo": algo, "model": model,
            "params": 1e5, "pop": pop if algo != "grpo" else None, "seed": seed, "iterations": iterations,
            "sigma": 0.01, "lr": 0.005, "samples": N, "base_counts": counts(base_p, 999),
            "final_counts": counts(final_p, 100 * seed + zlib.crc32(algo.encode()) % 97), "base_entropy": h0,
            "final_entropy": h1, "tokens_generated": 1000, **extra}


# --- controls through the store: planted, reversed, ES failing, nothing trained ---------------
OPPOSITE = {"grpo_gain": 0.2, "grpo_entropy": 0.3, "es_entropy": 0.5, "coverage": "grpo", "diversity": -1.0,
            "sequence": "neither", "sparsity": 0.2, "slope": 0.5}
NOTHING_TRAINS = {"es_gain": 0.0, "grpo_gain": 0.0, "grpo_entropy": 0.0, "es_entropy": 0.0, "coverage": None,
                  "diversity": 0.0, "sequence": "base", "sparsity": 0.0, "curvature": 0.0}


def verdicts_of(tmp_path, name, planted, **kw):
    sweep = tmp_path / f"paper_{name}"
    write_planted_sweep(sweep, planted, **kw)
    out = C.claims(sweep, n_boot=300)
    return {c["id"]: c for c in out["claims"]}, out


def test_planted_effects_say_yes_to_every_claim(tmp_path):
    by, out = verdicts_of(tmp_path, "planted", {})
    assert {i: c["reproduced"] for i, c in by.items()} == {i: "yes" for i in range(1, 8)}, C.table_lines(out)
    assert by[7]["effect"] == pytest.approx(-0.5, abs=0.2)           # the planted slope
    assert len(by[7]["details"]["per_size"]) == 5
    assert by[6]["details"]["orders"].keys() == {"es_grpo", "grpo_es"}   # both orders tested
    assert by[4]["details"]["member_scoring"] == ["greedy (p_i in {0, 1})"]
    for c in out["claims"]:                                          # each states its power
        assert c["mde"] is not None and c["mde"] < abs(c["effect"] - c["boundary"]) + 1e-12, c


def test_reversed_effects_say_no_while_es_learns(tmp_path):
    by, out = verdicts_of(tmp_path, "reversed", OPPOSITE)
    assert by[1]["reproduced"] == "yes"                              # ES still learns: no guard
    assert {i: by[i]["reproduced"] for i in range(2, 8)} == {i: "no" for i in range(2, 8)}, C.table_lines(out)


def test_es_that_loses_says_no_to_claim1_and_unclear_about_es(tmp_path):
    by, out = verdicts_of(tmp_path, "es_fails", {"es_gain": -0.1})
    assert by[1]["reproduced"] == "no" and by[1]["ci"][1] < 0
    for i in (2, 3, 4, 5, 6, 7):
        assert by[i]["reproduced"] == "unclear", by[i]
    for i in (2, 3, 4, 6, 7):
        assert "ES did not learn" in by[i]["reason"]


def test_nothing_trained_says_no_yes(tmp_path):
    by, out = verdicts_of(tmp_path, "null", NOTHING_TRAINS, noise=0.0)
    assert "yes" not in {c["reproduced"] for c in by.values()}, C.table_lines(out)
    assert by[1]["effect"] == 0.0


# --- per claim: guards, power, missing data --------------------------------------------------
def learned(es):
    return C.es_gain(es, n_boot=400, seed=0)


@pytest.mark.parametrize("final_p,verdict", [(0.5, "yes"), (0.1, "no"), (0.3, "unclear")])
def test_claim1_es_raises_pass1(final_p, verdict):
    es = [rec("es", s, 0.3, final_p) for s in range(3)]
    c = C.claim_es_pass1(es, **KW)
    assert c["reproduced"] == verdict, c
    assert c["effect"] == pytest.approx(c["details"]["final"] - c["details"]["base"])
    assert c["n"] == {"runs": 3, "problems": P} and c["boundary"] == 0.0 and c["mde"] > 0
    if verdict == "yes":
        assert c["ci"][0] > 0 and abs(c["effect"] - 0.2) < 0.06
    assert C.claim_es_pass1([], **KW)["reason"].startswith("missing data")


def test_power_rule_marks_small_effects_underpowered():
    assert C.decide(0.01, [0.001, 0.02], 0.05, 0.0) == ("unclear", pytest.approx(
        "underpowered: the effect is 0.01 from the boundary +0, less than the minimum detectable 0.05", abs=0))
    assert C.decide(0.1, [0.05, 0.15], 0.05, 0.0)[0] == "yes"
    assert C.decide(-0.1, [-0.15, -0.05], 0.05, 0.0)[0] == "no"
    assert C.decide(-0.1, [-0.15, -0.05], 0.05, 0.0, above_is_yes=False)[0] == "yes"
    assert C.decide(0.1, [-0.05, 0.25], 0.05, 0.0)[0] == "unclear"
    # the seed-level term: 3 seeds of wildly different gains do not make a detectable effect
    reps = np.r_[0.03, np.random.default_rng(0).normal(0.03, 0.005, 400)]
    assert C.mde(reps) < 0.03 < C.mde(reps, [[0.0, 0.03, 0.06]])
    # what an underpowered effect would need: (mde / distance)^2 times the data
    assert C.data_needed(0.01, 0.05, 0.0) == pytest.approx(25.0)
    assert C.data_needed(0.1, 0.05, 0.0) is None and C.data_needed(None, 0.05, 0.0) is None
    c = C._claim(1, 0.01, [0.001, 0.02], "unclear", "underpowered: ...", mde=0.05, boundary=0.0)
    assert c["details"]["data_needed"] == pytest.approx(25.0) and "about 25x this cell's data" in c["reason"]
    assert "data_needed" not in C._claim(1, 0.1, [0.05, 0.15], "yes", "interval above", mde=0.05,
                                         boundary=0.0)["details"]


@pytest.mark.parametrize("g1,e1,verdict", [
    ([0.5, 0.55, 0.52], [0.8, 0.82, 0.79], "yes"),        # GRPO -35%, ES ~0%
    ([1.0, 1.05, 1.02], [0.8, 0.82, 0.79], "no"),         # GRPO rises (+28%)
    ([0.5, 0.55, 0.52], [1.2, 1.25, 1.3], "no"),          # ES leaves the +-10% band
    ([0.5, 0.9, 0.7], [0.8, 0.82, 0.79], "unclear"),      # GRPO's interval straddles 0
])
def test_claim2_entropy(g1, e1, verdict):
    grpo = [rec("grpo", s, h0=0.8, h1=h) for s, h in enumerate(g1)]
    es = [rec("es", s, 0.3, 0.5, h0=0.8, h1=h) for s, h in enumerate(e1)]
    c = C.claim_entropy(es, grpo, gain=learned(es), **KW)
    assert c["reproduced"] == verdict, c
    assert c["effect"] == pytest.approx(np.mean([(h - 0.8) / 0.8 for h in g1]))
    assert C.claim_entropy(es, [], gain=learned(es), **KW)["reason"] == \
        "missing data: no GRPO runs with base and final entropy"
    two = C.claim_entropy(es[:2], grpo[:2], gain=learned(es), **KW)   # two seeds: no verdict
    assert two["reproduced"] == "unclear" and two["reason"].startswith("fewer than 3 runs")
    still = [rec("es", s, 0.3, 0.3, h0=0.8, h1=h) for s, h in enumerate(e1)]   # ES did not learn
    c = C.claim_entropy(still, grpo, gain=learned(still), **KW)
    assert c["reproduced"] == "unclear" and "ES did not learn" in c["reason"]


def test_claim2_uses_the_out_of_domain_entropy_when_every_run_has_it():
    """eval.ood_task: the held-out (eval split) entropy stays flat for both algorithms, the
    out-of-domain entropy falls under GRPO only: the claim reads the out-of-domain one."""
    grpo = [rec("grpo", s, h0=0.8, h1=0.8, base_ood_entropy=1.0, final_ood_entropy=h)
            for s, h in enumerate([0.6, 0.62, 0.58])]
    es = [rec("es", s, 0.3, 0.5, h0=0.8, h1=0.8, base_ood_entropy=1.0, final_ood_entropy=h)
          for s, h in enumerate([1.0, 0.99, 1.01])]
    assert C.entropy_columns(es + grpo) == ("base_ood_entropy", "final_ood_entropy")
    c = C.claim_entropy(es, grpo, gain=learned(es), **KW)
    assert c["reproduced"] == "yes" and c["effect"] == pytest.approx(-0.4)
    assert c["details"]["entropy"] == "ood_entropy" and "out-of-domain" in c["measure"]
    # one run without it: the eval split's entropy for all (flat: GRPO does not fall)
    grpo[0].pop("final_ood_entropy")
    assert C.entropy_columns(es + grpo) == ("base_entropy", "final_entropy")
    c = C.claim_entropy(es, grpo, gain=learned(es), **KW)
    assert c["details"]["entropy"] == "entropy" and c["effect"] == pytest.approx(0.0)
    assert c["reproduced"] != "yes"


# --- claim 3 ---------------------------------------------------------------------------
SPREAD = 0.3                                                    # every problem p = 0.3: high Pass@K
PEAKED = np.where(np.arange(P) % 2 == 0, 0.9, 0.0)             # half the problems: Pass@K ~ 0.5


def test_claim3_coverage_yes_no_guard_missing():
    es = [rec("es", s, 0.1, SPREAD) for s in range(3)]
    grpo = [rec("grpo", s, final_p=PEAKED) for s in range(3)]
    c = C.claim_coverage(es, grpo, gain=learned(es), **KW)
    assert c["reproduced"] == "yes" and c["effect"] > 0.4 and c["details"]["k"] == N
    assert c["details"]["grpo_minus_es_pass1"] > 0.1         # GRPO leads at Pass@1
    peaked_es = [rec("es", s, 0.1, PEAKED) for s in range(3)]
    c = C.claim_coverage(peaked_es, [rec("grpo", s, final_p=SPREAD) for s in range(3)],
                         gain=learned(peaked_es), **KW)      # ES's coverage is the lower one
    assert c["reproduced"] == "no" and c["ci"][1] < -0.01
    flat = [rec("es", s, 0.3, SPREAD) for s in range(3)]      # no ES gain: nothing to compare
    c = C.claim_coverage(flat, grpo, gain=learned(flat), **KW)
    assert c["reproduced"] == "unclear" and "ES did not learn" in c["reason"]
    assert C.claim_coverage(es, [], **KW)["reason"] == "missing data: no GRPO runs in the comparison cell"


# --- claim 4 ---------------------------------------------------------------------------
def es_runs_with_diversity(sign, n=12, noise=0.0, confound=False):
    """ES runs in two populations of one model; js_succ follows the run's gain within each cell
    (sign), or (confound) only the population moves both: within a cell they are unrelated."""
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        pop = 8 if i % 2 else 16
        within = 0.01 * (i // 2) * (1 if i % 4 < 2 else -1) if confound else 0.01 * (i // 2)
        js = (0.2 if pop == 16 else 0.05) + (rng.normal(0, 0.01) if confound else within)
        gain = (0.1 if pop == 16 else 0.0) + (within if confound else sign * within) + noise * rng.normal()
        out.append({"run_id": f"es{i}", "status": "completed", "algo": "es", "model": "tiny-s", "pop": pop,
                    "seed": i, "k_max": 16, "js_succ": js, "p_pop": 0.5 + js, "base_pass@16": 0.6,
                    "final_pass@16": 0.6 + gain, "base_pass@1": 0.2, "final_pass@1": 0.3 + 0.1 * (pop == 16)
                    + 0.001 * (i % 3), "es_temperature": 0.0})
    return out


@pytest.mark.parametrize("sign,noise,verdict", [(1, 0.0, "yes"), (-1, 0.0, "no"), (1, 1.0, "unclear")])
def test_claim4_diversity_within_cells(sign, noise, verdict):
    c = C.claim_diversity(es_runs_with_diversity(sign, noise=noise), **KW)
    assert c["reproduced"] == verdict, c
    assert c["n"] == {"runs": 12, "cells": 2} and c["details"]["member_scoring"] == ["greedy (p_i in {0, 1})"]
    runs = es_runs_with_diversity(sign, noise=noise)      # the same training twice counts once
    assert C.claim_diversity(runs + [dict(runs[0], run_id="again")], **KW)["n"]["runs"] == 12
    assert C.claim_diversity(es_runs_with_diversity(1)[:3], **KW)["reason"].startswith("missing data")


def test_claim4_population_confound_is_removed():
    """js_succ and the gain both rise with pop (pooled rho ~ +0.9) but are unrelated within a
    cell: the partial correlation does not say yes."""
    from esopt.core.metrics import spearman

    runs = es_runs_with_diversity(1, confound=True)
    pooled = spearman([r["js_succ"] for r in runs], [r["final_pass@16"] - r["base_pass@16"] for r in runs])[0]
    assert pooled > 0.7
    assert C.claim_diversity(runs, **KW)["reproduced"] != "yes"


# --- claim 5 ---------------------------------------------------------------------------
def sparsity_json(keep_gain, seed, gain=0.3):
    base, trained = counts(0.3, 500 + seed), counts(0.3 + gain, 600 + seed)
    # keeping the whole gain reproduces the trained model's outputs; less: another draw
    pruned = trained if keep_gain == 1.0 else counts(0.3 + gain * keep_gain, 700 + seed)
    return {"samples": N, "base_counts": base, "trained_counts": trained,
            "curves": [{"mode": "global", "keep": 0.22, "correct_counts": pruned},
                       {"mode": "smallest", "keep": 0.22, "correct_counts": base}]}


@pytest.mark.parametrize("keep_gain,gain,verdict", [(1.0, 0.3, "yes"), (0.3, 0.3, "no"), (1.0, 0.0, "unclear"),
                                                    (1.0, -0.2, "unclear")])
def test_claim5_sparsity(keep_gain, gain, verdict):
    es = [rec("es", s, sparsity=sparsity_json(keep_gain, s, gain)) for s in range(3)]
    c = C.claim_sparsity(es, **KW)
    assert c["reproduced"] == verdict, c
    if verdict != "unclear":
        assert abs(c["effect"] - keep_gain) < 0.2
    else:
        assert "no gain to keep" in c["reason"]
    assert C.claim_sparsity([], **KW)["reason"].startswith("missing data: no ES run has sparsity.json")


# --- claim 6 ---------------------------------------------------------------------------
def test_claim6_sequences_both_orders():
    es = [rec("es", s, 0.05, 0.15) for s in range(3)]              # Pass@1 0.15, Pass@16 ~0.93
    grpo = [rec("grpo", s, final_p=PEAKED) for s in range(3)]      # Pass@1 0.45, Pass@K 0.5
    both = np.where(np.arange(P) % 2 == 0, 0.9, 0.4)               # Pass@1 0.65, Pass@K ~1
    good = [rec("es_grpo", s, final_p=both) for s in range(3)]
    bad = [rec("grpo_es", s, final_p=PEAKED) for s in range(3)]    # only GRPO's profile
    c = C.claim_sequence(es, grpo, bad, good, gain=learned(es), **KW)
    assert c["reproduced"] == "yes" and c["details"]["best_order"] == "es_grpo", c
    assert c["details"]["orders"]["grpo_es"]["verdict"] == "no"
    assert c["details"]["orders"]["es_grpo"]["verdict"] == "yes"
    c = C.claim_sequence(es, grpo, bad, [rec("es_grpo", s, final_p=PEAKED) for s in range(3)], gain=learned(es), **KW)
    assert c["reproduced"] == "no" and c["ci"][1] < -0.01          # neither order combines
    c = C.claim_sequence(es, grpo, [], good, gain=learned(es), **KW)   # one order run: tested alone
    assert c["reproduced"] == "yes" and list(c["details"]["orders"]) == ["es_grpo"]
    assert C.claim_sequence(es, grpo, [], [], **KW)["reason"] == \
        "missing data: no es_grpo or grpo_es runs in the comparison cell"


# --- claim 7 ---------------------------------------------------------------------------
def test_claim7_needs_five_sizes(tmp_path):
    sweep = tmp_path / "paper_three"
    write_planted_sweep(sweep, {}, models={"a": 3e4, "b": 1e5, "c": 3e5})
    c = {x["id"]: x for x in C.claims(sweep, n_boot=100)["claims"]}[7]
    assert c["reproduced"] == "unclear" and c["reason"].startswith("missing data: 3 model size(s)")


# --- all seven ---------------------------------------------------------------------------
def test_compute_picks_the_cell_and_reports_all_seven():
    recs = [rec("none", s) for s in range(3)]
    recs += [rec("es", s, 0.1, SPREAD + 0.2, h1=0.81, js_succ=0.1 + s / 10, p_pop=0.5 + s / 10, k_max=16,
                 **{"base_pass@16": 0.9, "final_pass@16": 0.9 + s / 100},
                 sparsity=sparsity_json(1.0, s)) for s in range(3)]
    recs += [rec("es", s, 0.3, 0.35, pop=4, js_succ=0.01 * s, p_pop=0.2 + s / 10, k_max=16,
                 **{"base_pass@16": 0.9, "final_pass@16": 0.88 + s / 100}) for s in range(3)]
    recs += [rec("grpo", s, 0.3, PEAKED, h1=0.4) for s in range(3)]
    recs += [rec("es", 0, model="tiny-m")]                         # another model: not the cell
    recs += [dict(rec("grpo", 9), status="failed")]                # failed runs are ignored
    out = C.compute(recs, {"slope": -0.5, "slope_ci": [-0.8, -0.2]}, n_boot=300)
    assert [c["id"] for c in out["claims"]] == list(range(1, 8))
    assert out["cell"]["model"] == "tiny-s"
    assert out["cell"]["settings"]["es"]["pop"] == "16.0"           # most seeds; ties -> the larger pop
    assert out["cell"]["seeds"]["grpo"] == [0, 1, 2]
    verdicts = {c["key"]: c["reproduced"] for c in out["claims"]}
    assert verdicts["es_raises_pass1"] == verdicts["entropy"] == verdicts["coverage"] == "yes", verdicts
    assert verdicts["sparsity"] == "yes"
    (c6,) = [c for c in out["claims"] if c["id"] == 6]
    assert c6["reason"].startswith("missing data") and c6["effect"] is None
    (c7,) = [c for c in out["claims"] if c["id"] == 7]
    assert c7["reason"].startswith("missing data") and c7["details"]["trend_json"]["slope"] == -0.5
    for c in out["claims"]:
        assert c["reproduced"] in C.VERDICTS and c["reason"] and c["measure"] and c["definition"]
        assert (c["effect"] is not None and c["ci"] is not None) or "missing data" in c["reason"] \
            or "ES did not learn" in c["reason"]
    assert sorted(sum(out["summary"].values(), [])) == list(range(1, 8))
    json.dumps(out)                                                  # JSON-serialisable


# --- the sweeper's sub-grids (hydra.sweeper.grids) --------------------------------------
def test_quick_preset_grid_union_dedupes_and_command_line_wins(tmp_path):
    r = run_cli("esopt.sweep", "-m", "+experiment=paper_cpu_quick", f"sweep.root={tmp_path}", "sweep.dry_run=true",
                env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    # grids: 2 ES (+sparsity) + 4 algos x 2 seeds + 3 models x 2 pops x 2 seeds = 22 jobs; the
    # analysis is not part of the run id, so grid 1's runs are grid 3's tiny-xs pop-8 runs: 20
    assert "dry run: 20 runs" in r.stdout
    ids = re.findall(r"^\s*\d+\s+([0-9a-f]{12})\s", r.stdout, flags=re.M)
    assert len(ids) == len(set(ids)) == 20
    # a key on the command line replaces that key in every grid: seed=0 -> 1 + 4 + 6 - 1 = 10
    r = run_cli("esopt.sweep", "-m", "+experiment=paper_cpu_quick", f"sweep.root={tmp_path}", "sweep.dry_run=true",
                "seed=0", env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "dry run: 10 runs" in r.stdout


# --- end to end ---------------------------------------------------------------------------
def test_null_control_end_to_end(tmp_path):
    """The user's own null control: the quick claims preset with step sizes ~0 (nothing trains)
    runs every stage, writes claims.json and the page's claims section, and says "yes" nowhere."""
    r = run_cli("esopt.sweep", "-m", "+experiment=paper_cpu_quick", f"sweep.root={tmp_path}",
                "++es.lr=1e-12", "++grpo.lr=1e-12", env=ENV, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    sweep = tmp_path / "paper_cpu_quick"
    out = json.loads((sweep / "claims.json").read_text())
    assert [c["id"] for c in out["claims"]] == list(range(1, 8))
    assert out["summary"]["yes"] == [], C.table_lines(out)
    for c in out["claims"]:
        assert c["reproduced"] in ("no", "unclear") and c["reason"]
    assert out["cell"]["model"] == "tiny-xs"
    assert set(out["cell"]["runs"]) == {"none", "es", "grpo", "grpo_es", "es_grpo"}
    assert all(len(v) == 2 for v in out["cell"]["runs"].values())
    assert out["claims"][0]["effect"] == 0.0                       # ES did not move at all
    page = (sweep / "report.html").read_text()
    assert page.index('id="claims"') < page.index('id="summary"')
    assert len(re.findall(r'<tr id="claim-\d">', page)) == 7


def test_claims_from_a_sweep_directory_and_the_aggregator(tmp_path):
    """The table path: a planted sweep -> esopt.aggregate (tables, trend) -> per-problem lists read
    from the run directories -> claims.json + the page's claims section (rule, effect, power)."""
    import shutil

    from helpers import write_synthetic_sweep

    from esopt.study.aggregate import aggregate

    sweep = tmp_path / "paper_syn"
    write_planted_sweep(sweep, {})
    # the same ES training twice, once without sparsity.json: the cell takes the analysed one
    src = sweep / "runs" / "es-tiny-m-p16-s0"
    dup = sweep / "runs" / "zz-es-tiny-m-p16-s0-again"
    shutil.copytree(src, dup)
    (dup / "sparsity.json").unlink()
    agg = aggregate(sweep, bootstrap=200)
    out = json.loads((sweep / "claims.json").read_text())
    assert agg.claims["claims"] == out["claims"]
    assert out["cell"]["model"] == "tiny-m" and "es-tiny-m-p16-s0" in out["cell"]["runs"]["es"]
    by = {c["id"]: c for c in out["claims"]}
    assert [by[i]["reproduced"] for i in range(1, 8)] == ["yes"] * 7, C.table_lines(out)
    for cid in (1, 3, 6):                                        # per-problem lists were read
        assert by[cid]["n"]["problems"] == 200, by[cid]
    assert by[2]["effect"] == pytest.approx(-0.4, abs=1e-6)
    page = (sweep / "report.html").read_text()
    assert page.index('id="claims"') < page.index('id="summary"')
    assert 'id="table-claim7"' in page and "power (mde)" in page
    # not a paper sweep and ES alone: no claims unless asked
    es_only = tmp_path / "es_only"
    write_synthetic_sweep(es_only, models={"a": 1e4, "b": 1e5}, pops=(4, 8), problems=10, samples=4)
    assert aggregate(es_only, bootstrap=50, html=False).claims is None
    assert not (es_only / "claims.json").exists()
    assert aggregate(es_only, bootstrap=50, html=False, claims=True).claims is not None
