"""esopt.claims: each claim's verdict on synthetic run records with planted effects (yes, no,
unclear / missing data), the paired bootstrap, the sweeper's sub-grids, and one end-to-end run
of the paper_cpu_quick preset (claims.json with all seven, claims section on the page)."""

import json
import re

import numpy as np
import pytest

from helpers import run_cli
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
            "final_counts": counts(final_p, 100 * seed + hash(algo) % 97), "base_entropy": h0,
            "final_entropy": h1, "tokens_generated": 1000, **extra}


# --- statistics ----------------------------------------------------------------------
def test_boot_means_pairs_problems_and_runs():
    rng = np.random.default_rng(0)
    base = rng.random((3, 50))
    b = C.boot_means({"base": base, "final": base + 0.1}, n_boot=200, seed=1, pair_rows=[("base", "final")])
    # paired over problems and runs: the difference is exactly the planted shift in every replicate
    assert np.allclose(b["final"] - b["base"], 0.1)
    unpaired = C.boot_means({"base": base, "final": base + 0.1}, n_boot=200, seed=1)
    assert np.ptp(unpaired["final"] - unpaired["base"]) > 0.01
    assert b["base"][0] == pytest.approx(base.mean())
    with pytest.raises(ValueError, match="share the problem axis"):
        C.boot_means({"a": np.zeros((2, 3)), "b": np.zeros((2, 4))}, n_boot=5, seed=0)


def test_spearman_matches_scipy_and_handles_constant():
    from scipy.stats import spearmanr

    x, y = np.array([1.0, 3, 2, 5, 4, 4]), np.array([2.0, 1, 4, 6, 5, 7])
    assert C.spearman(x, y)[0] == pytest.approx(spearmanr(x, y).statistic)
    assert np.isnan(C.spearman(np.ones(5), np.arange(5.0))[0])


# --- claim 1 ---------------------------------------------------------------------------
@pytest.mark.parametrize("final_p,verdict", [(0.5, "yes"), (0.1, "no"), (0.3, "unclear")])
def test_claim1_es_raises_pass1(final_p, verdict):
    es = [rec("es", s, 0.3, final_p) for s in range(3)]
    c = C.claim_es_pass1(es, **KW)
    assert c["reproduced"] == verdict, c
    assert c["effect"] == pytest.approx(c["details"]["final"] - c["details"]["base"])
    assert c["n"] == {"runs": 3, "problems": P}
    if verdict == "yes":
        assert c["ci"][0] > 0 and abs(c["effect"] - 0.2) < 0.06
    assert C.claim_es_pass1([], **KW)["reason"].startswith("missing data")


# --- claim 2 ---------------------------------------------------------------------------
@pytest.mark.parametrize("g1,e1,verdict", [
    ([0.5, 0.55, 0.52], [0.8, 0.82, 0.79], "yes"),        # GRPO -35%, ES ~0%
    ([0.85, 0.9, 0.88], [0.8, 0.82, 0.79], "no"),         # GRPO rises
    ([0.5, 0.55, 0.52], [1.2, 1.25, 1.3], "no"),          # ES leaves the +-10% band
    ([0.5, 0.9, 0.7], [0.8, 0.82, 0.79], "unclear"),      # GRPO's interval straddles 0
])
def test_claim2_entropy(g1, e1, verdict):
    grpo = [rec("grpo", s, h0=0.8, h1=h) for s, h in enumerate(g1)]
    es = [rec("es", s, h0=0.8, h1=h) for s, h in enumerate(e1)]
    c = C.claim_entropy(es, grpo, **KW)
    assert c["reproduced"] == verdict, c
    assert c["effect"] == pytest.approx(np.mean([(h - 0.8) / 0.8 for h in g1]))
    assert C.claim_entropy(es, [], **KW)["reason"] == "missing data: no GRPO runs with base and final entropy"
    two = C.claim_entropy(es[:2], grpo[:2], **KW)              # two seeds: no verdict from a bootstrap of 2
    assert two["reproduced"] == "unclear" and two["reason"].startswith("fewer than 3 runs")


# --- claim 3 ---------------------------------------------------------------------------
SPREAD = 0.3                                                    # every problem p = 0.3: high Pass@K
PEAKED = np.where(np.arange(P) % 2 == 0, 0.9, 0.0)             # half the problems: Pass@K ~ 0.5


def test_claim3_coverage_yes_no_missing():
    es = [rec("es", s, final_p=SPREAD) for s in range(3)]
    grpo = [rec("grpo", s, final_p=PEAKED) for s in range(3)]
    c = C.claim_coverage(es, grpo, **KW)
    assert c["reproduced"] == "yes" and c["effect"] > 0.4 and c["details"]["k"] == N
    assert c["details"]["grpo_minus_es_pass1"] > 0.1         # GRPO leads at Pass@1
    c = C.claim_coverage(grpo, es, **KW)                      # roles swapped: ES's coverage is lower
    assert c["reproduced"] == "no" and c["ci"][1] < 0
    c = C.claim_coverage([rec("es", s, final_p=SPREAD) for s in range(3)],
                         [rec("grpo", s, final_p=SPREAD) for s in range(3)], **KW)
    assert c["reproduced"] in ("yes", "unclear") and abs(c["effect"]) < 0.05
    assert C.claim_coverage(es, [], **KW)["reason"] == "missing data: no GRPO runs in the comparison cell"


# --- claim 4 ---------------------------------------------------------------------------
def es_runs_with_diversity(sign, n=12, noise=0.0):
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        js = 0.01 * (i + 1)
        out.append({"run_id": f"es{i}", "status": "completed", "algo": "es", "model": "tiny-s", "seed": i, "k_max": 16,
                    "js_succ": js, "p_pop": 0.5 + js, "base_pass@16": 0.6,
                    "final_pass@16": 0.6 + sign * js + noise * rng.normal()})
    return out


@pytest.mark.parametrize("sign,noise,verdict", [(1, 0.0, "yes"), (-1, 0.0, "no"), (1, 1.0, "unclear")])
def test_claim4_diversity_correlation(sign, noise, verdict):
    c = C.claim_diversity(es_runs_with_diversity(sign, noise=noise), **KW)
    assert c["reproduced"] == verdict, c
    if noise == 0:
        assert c["effect"] == pytest.approx(sign) and c["details"]["rho_p_pop"] == pytest.approx(sign)
    assert c["n"] == {"runs": 12}
    runs = es_runs_with_diversity(sign, noise=noise)      # the same training twice counts once
    assert C.claim_diversity(runs + [dict(runs[0], run_id="again")], **KW)["n"] == {"runs": 12}
    assert C.claim_diversity(es_runs_with_diversity(1)[:3], **KW)["reason"].startswith("missing data")


# --- claim 5 ---------------------------------------------------------------------------
def sparsity_json(keep_gain, seed, gain=0.3):
    base, trained = counts(0.3, 500 + seed), counts(0.3 + gain, 600 + seed)
    pruned = counts(0.3 + gain * keep_gain, 700 + seed)
    return {"samples": N, "base_counts": base, "trained_counts": trained,
            "curves": [{"mode": "global", "keep": 0.22, "correct_counts": pruned},
                       {"mode": "smallest", "keep": 0.22, "correct_counts": base}]}


@pytest.mark.parametrize("keep_gain,gain,verdict", [(1.0, 0.3, "yes"), (0.3, 0.3, "no"), (1.0, 0.0, "unclear")])
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
def test_claim6_grpo_es_combines():
    es = [rec("es", s, final_p=SPREAD) for s in range(3)]          # Pass@1 0.3, Pass@K ~1
    grpo = [rec("grpo", s, final_p=PEAKED) for s in range(3)]      # Pass@1 0.45, Pass@K 0.5
    both = np.where(np.arange(P) % 2 == 0, 0.9, 0.4)               # Pass@1 0.65, Pass@K ~1
    good = [rec("grpo_es", s, final_p=both) for s in range(3)]
    c = C.claim_grpo_es(es, grpo, good, [], **KW)
    assert c["reproduced"] == "yes" and c["details"]["d1"] > 0, c
    bad = [rec("grpo_es", s, final_p=PEAKED) for s in range(3)]    # only GRPO's profile
    c = C.claim_grpo_es(es, grpo, bad, [rec("es_grpo", s, final_p=both) for s in range(3)], **KW)
    assert c["reproduced"] == "no" and c["ci"][1] < -0.01
    assert c["details"]["es_grpo_min_margin"] > -0.05            # the other order is reported too
    assert C.claim_grpo_es(es, grpo, [], [], **KW)["reason"] == \
        "missing data: no grpo_es runs in the comparison cell"


# --- claim 7 ---------------------------------------------------------------------------
@pytest.mark.parametrize("trend,verdict,why", [
    ({"n_model_sizes": 3, "slope": -0.5, "slope_ci": [-0.8, -0.2], "verdict": "supported"}, "yes", "slope"),
    ({"n_model_sizes": 3, "slope": 0.5, "slope_ci": [0.2, 0.8], "verdict": "contradicted"}, "no", "slope"),
    ({"n_model_sizes": 3, "slope": -0.1, "slope_ci": [-0.5, 0.3], "verdict": "inconclusive"}, "unclear", "slope"),
    ({"n_model_sizes": 2, "slope": -0.5, "slope_ci": [-0.8, -0.2]}, "unclear", "missing data"),
    (None, "unclear", "missing data"),
])
def test_claim7_pop_vs_size(trend, verdict, why):
    c = C.claim_pop_vs_size(trend)
    assert c["reproduced"] == verdict and c["reason"].startswith(why)


# --- all seven ---------------------------------------------------------------------------
def test_compute_picks_the_cell_and_reports_all_seven():
    recs = [rec("none", s) for s in range(3)]
    recs += [rec("es", s, 0.3, SPREAD + 0.2, h1=0.81, js_succ=0.1 + s / 10, p_pop=0.5 + s / 10, k_max=16,
                 **{"base_pass@16": 0.9, "final_pass@16": 0.9 + s / 100},
                 sparsity=sparsity_json(1.0, s)) for s in range(3)]
    recs += [rec("es", s, 0.3, 0.35, pop=4, js_succ=0.01 * s, p_pop=0.2 + s / 10, k_max=16,
                 **{"base_pass@16": 0.9, "final_pass@16": 0.88 + s / 100}) for s in range(3)]
    recs += [rec("grpo", s, 0.3, PEAKED, h1=0.4) for s in range(3)]
    recs += [rec("es", 0, model="tiny-m")]                         # another model: not the cell
    recs += [dict(rec("grpo", 9), status="failed")]                # failed runs are ignored
    out = C.compute(recs, {"n_model_sizes": 3, "slope": -0.5, "slope_ci": [-0.8, -0.2]}, n_boot=300)
    assert [c["id"] for c in out["claims"]] == list(range(1, 8))
    assert out["cell"]["model"] == "tiny-s"
    assert out["cell"]["settings"]["es"]["pop"] == "16.0"           # most seeds; ties -> the larger pop
    assert out["cell"]["seeds"]["grpo"] == [0, 1, 2]
    verdicts = {c["key"]: c["reproduced"] for c in out["claims"]}
    assert verdicts == {"es_raises_pass1": "yes", "entropy": "yes", "coverage": "yes", "diversity": verdicts["diversity"],
                        "sparsity": "yes", "grpo_es_combines": "unclear", "pop_vs_size": "yes"}
    (c6,) = [c for c in out["claims"] if c["id"] == 6]
    assert c6["reason"].startswith("missing data") and c6["effect"] is None
    for c in out["claims"]:
        assert c["reproduced"] in C.VERDICTS and c["reason"] and c["measure"] and c["definition"]
        assert (c["effect"] is not None and c["ci"] is not None) or "missing data" in c["reason"]
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
def test_paper_cpu_quick_end_to_end(tmp_path):
    r = run_cli("esopt.sweep", "-m", "+experiment=paper_cpu_quick", f"sweep.root={tmp_path}", env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    sweep = tmp_path / "paper_cpu_quick"
    assert (sweep / "claims.json").exists(), (r.stdout[-3000:], r.stderr[-3000:])
    out = json.loads((sweep / "claims.json").read_text())
    assert [c["id"] for c in out["claims"]] == list(range(1, 8))
    for c in out["claims"]:
        assert c["reproduced"] in ("yes", "no", "unclear")
        has_numbers = isinstance(c["effect"], float) and c["ci"] is not None and all(map(np.isfinite, c["ci"]))
        # no number only when it is undefined (missing data, no gain to keep), said in the reason
        assert has_numbers or (c["reproduced"] == "unclear" and len(c["reason"]) > 10), c
    assert out["cell"]["model"] == "tiny-xs"
    assert set(out["cell"]["runs"]) == {"none", "es", "grpo", "grpo_es", "es_grpo"}
    assert all(len(v) == 2 for v in out["cell"]["runs"].values())
    assert isinstance(out["claims"][0]["effect"], float)            # ES vs base: always computable
    assert out["claims"][6]["n"]["model_sizes"] == 3
    page = (sweep / "report.html").read_text()
    assert page.index('id="claims"') < page.index('id="summary"')
    assert len(re.findall(r'<tr id="claim-\d">', page)) == 7


def test_claims_from_a_sweep_directory_and_the_aggregator(tmp_path):
    """The table path: esopt.aggregate's synthetic sweep (planted: GRPO entropy -40%, ES flat,
    pop* slope -0.5) -> per-problem lists read from the run directories -> claims.json + page."""
    import shutil

    from helpers import write_synthetic_sweep

    from esopt.study.aggregate import aggregate

    sweep = tmp_path / "paper_syn"
    write_synthetic_sweep(sweep, models={"tiny-xs": 3e4, "tiny-s": 1e5, "tiny-m": 3.4e5},
                                    pops=(4, 8, 16, 32), algos=("none", "es", "grpo", "grpo_es", "es_grpo"),
                                    problems=40, samples=8, noise=0.002)
    # the same ES training twice, once with sparsity.json: the cell takes that one, with its lists
    src = sweep / "runs" / "es-tiny-m-p32-s0"
    dup = sweep / "runs" / "zz-es-tiny-m-p32-s0-analysed"
    shutil.copytree(src, dup)
    summ = json.loads((dup / "summary.json").read_text())
    base, final = summ["base"]["correct_counts"], summ["final"]["correct_counts"]
    (dup / "sparsity.json").write_text(json.dumps({
        "samples": 8, "base_counts": base, "trained_counts": final,
        "curves": [{"mode": "global", "keep": 0.22, "correct_counts": final}]}))
    agg = aggregate(sweep, bootstrap=200)
    out = json.loads((sweep / "claims.json").read_text())
    assert agg.claims["claims"] == out["claims"]
    assert out["cell"]["model"] == "tiny-m" and "zz-es-tiny-m-p32-s0-analysed" in out["cell"]["runs"]["es"]
    by = {c["id"]: c for c in out["claims"]}
    for cid in (1, 3, 6):                                        # per-problem lists were read
        assert isinstance(by[cid]["effect"], float) and by[cid]["n"]["problems"] == 40, by[cid]
    assert by[2]["reproduced"] == "yes" and by[2]["effect"] == pytest.approx(-0.4, abs=1e-6)
    assert by[5]["effect"] is not None and by[5]["n"]["runs"] == 1
    assert by[7]["reproduced"] == "yes" and by[7]["effect"] < 0
    page = (sweep / "report.html").read_text()
    assert page.index('id="claims"') < page.index('id="summary"')
    # not a paper sweep and ES alone: no claims unless asked
    es_only = tmp_path / "es_only"
    write_synthetic_sweep(es_only, models={"a": 1e4, "b": 1e5}, pops=(4, 8), problems=10, samples=4)
    assert aggregate(es_only, bootstrap=50, html=False).claims is None
    assert not (es_only / "claims.json").exists()
    assert aggregate(es_only, bootstrap=50, html=False, claims=True).claims is not None
