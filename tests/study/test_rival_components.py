"""The rivals' simulator components (claims 8-11) estimated from runs: recovered from sweeps the
simulator drew with known ones, left assumed where the runs lack the probes or drift.json, one
probe evaluation's noise from the probes' intervals; the planner's per-model shipped components
and the pilot's ``Components(...)`` literal (``python -m esopt.design --pilot DIR --print-components``)."""

import json
import math

import numpy as np
import pytest
from helpers import cli, write_planted_sweep

from esopt.study.claims import design as D
from esopt.study.claims import simulate as sim
from esopt.study.claims.simulate import Components, Design, estimate_components, probe_eval_var, simulate

TRUTH = Components(sigma_seed=0.03, probe_base=0.45, probe_per_gain=-0.5, sigma_probe=0.01, sigma_probe_eval=0.004,
                   top_share=0.55, share_per_gain=0.8, sigma_share=0.01, log_l2=-2.0, sigma_log_l2=0.15,
                   sigma_cosine=0.03)
RIVALS = ("probe_base", "probe_per_gain", "sigma_probe", "sigma_probe_eval", "top_share", "share_per_gain",
          "sigma_share", "log_l2", "sigma_log_l2", "sigma_cosine")


def with_probe_intervals(recs, sd, n=4, P=100):
    """One generated probe ``t`` per evaluation whose bootstrap interval over P problems and n
    samples says its sampling sd is ``sd`` (mean_p x_p(1 - x_p) = sd^2 n P (n - 1) / n)."""
    m = sd * sd * n * P
    for r in recs:
        if "base_probe_pass1" in r:
            r |= {"probe_samples": n, "probe_problems": P}
            for when in ("base", "final"):
                x = r[f"{when}_probe_pass1"]
                se = math.sqrt((x * (1 - x) - m * (n - 1) / n) / P)
                r |= {f"{when}_probe_t": x, f"{when}_probe_t_lo": x - sim.Z95 * se, f"{when}_probe_t_hi": x + sim.Z95 * se}
    return recs


def test_rival_components_recovered_from_simulated_runs():
    """8 simulated sweeps of 20 seeds (ES's and GRPO's gains spread by sigma_seed 0.03, so the
    common slopes are measured): each component's mean over them within about 3 of its sampling
    sd (per sweep: slope 0.07, level 0.004, sds 0.0015-0.02; measured over 100 sweeps)."""
    est = []
    for s in range(8):
        recs = with_probe_intervals(simulate(Design(seeds=20), None, TRUTH, np.random.default_rng(s), parts=("cell",)),
                                    TRUTH.sigma_probe_eval)
        c, how = estimate_components(recs, start=Components())
        assert all(how[k] != "assumed" and not how[k].startswith("assumed") for k in RIVALS), how
        est.append(c)
    mean = {k: float(np.mean([getattr(c, k) for c in est])) for k in RIVALS}
    for k, tol in (("probe_base", 0.004), ("probe_per_gain", 0.08), ("sigma_probe", 0.0015),
                   ("sigma_probe_eval", 1e-4), ("top_share", 0.005), ("share_per_gain", 0.08),
                   ("sigma_share", 0.0015), ("log_l2", 0.04), ("sigma_log_l2", 0.02), ("sigma_cosine", 0.006)):
        assert mean[k] == pytest.approx(getattr(TRUTH, k), abs=tol), (k, mean[k])


def test_rival_components_stay_assumed_without_their_fields():
    start = Components(probe_per_gain=-0.7, top_share=0.3)
    recs = simulate(Design(seeds=4), None, TRUTH, np.random.default_rng(0), parts=("cell",))
    bare = [{k: v for k, v in r.items() if "probe" not in k and not k.startswith(("update_", "connectivity_"))}
            for r in recs]
    c, how = estimate_components(bare, start=start)
    assert all(how[k] == "assumed" for k in RIVALS) and all(getattr(c, k) == getattr(start, k) for k in RIVALS)
    assert how["sigma_barrier"] == "assumed"          # never estimated: a run keeps only its largest point
    # 2 seeds per algorithm (the pilot's): levels and spreads measured, the slopes not (1 df: assumed)
    two = [r for r in recs if r["seed"] < 2]
    c, how = estimate_components(two, start=start)
    assert how["probe_per_gain"].startswith("assumed (4 runs over 2 algorithm(s): 1 df")
    assert c.probe_per_gain == -0.7 and c.share_per_gain == start.share_per_gain
    assert how["probe_base"] != "assumed" and how["log_l2"] != "assumed" and how["sigma_probe"] != "assumed"
    grpo = [r for r in two if r["algo"] == "grpo"]   # GRPO's share at gain 0 under the assumed slope
    g = np.mean([r["final_pass@1"] - r["base_pass@1"] for r in grpo])
    assert c.top_share == pytest.approx(np.mean([r["update_top_share"] for r in grpo]) - start.share_per_gain * g)


def test_one_probe_evaluation_noise_from_the_intervals():
    """The pilot_smollm2 base evaluation's numbers: two generated probes at 100 problems x 2
    samples, one scored by likelihood (no sampling: it adds nothing but counts in the mean)."""
    r = {"probe_samples": 2, "probe_problems": 100, "base_probe_pass1": 0.676,
         "base_probe_copy": 0.885, "base_probe_copy_lo": 0.83, "base_probe_copy_hi": 0.935,
         "base_probe_first_letter": 0.75, "base_probe_first_letter_lo": 0.68, "base_probe_first_letter_hi": 0.81,
         "base_probe_passages": 0.393, "base_probe_passages_lo": 0.31, "base_probe_passages_hi": 0.477,
         "base_probe_passages_loglik": -3.2, "base_probe_passages_loglik_lo": -3.6, "base_probe_passages_loglik_hi": -2.7}

    def one(x, lo, hi, n=2, P=100):
        se = (hi - lo) / (2 * sim.Z95)
        return (x * (1 - x) - P * se * se) * n / (n - 1) / (n * P)

    var, kinds = probe_eval_var(r, "base")
    assert var == pytest.approx((one(0.885, 0.83, 0.935) + one(0.75, 0.68, 0.81)) / 9)
    assert kinds == "intervals, likelihood" and probe_eval_var(r, "final") is None
    bound = {k: v for k, v in r.items() if not k.endswith(("_lo", "_hi"))}   # no intervals: the binomial bound
    assert probe_eval_var(bound, "base")[0] == pytest.approx((0.885 * 0.115 + 0.75 * 0.25) / 200 / 9)
    assert probe_eval_var({k: v for k, v in r.items() if k != "probe_samples"}, "base") is None


def test_the_planner_uses_the_models_shipped_components(monkeypatch):
    g = D.Grid(cell_model="smollm2-135m", cell_seeds={"es": 3, "grpo": 3}, problems=100, samples=32, split_rows=500,
               iterations=30, ood=False, sparsity=(), es_temperature=1.0, es_samples=4, grpo_mid=True)
    comps, source = D.model_components("smollm2-135m")   # shipped: its pilot's (not the simulator's defaults)
    assert comps == sim.MODEL_COMPONENTS["smollm2-135m"] and source.startswith("smollm2-135m: ")
    assert comps != Components() and comps.es_gain is not None and comps.log_l2 != Components().log_l2
    assert D.model_components("tiny-s") == (sim.MEASURED, D.MEASURED_ON)
    mine = Components(sigma_seed=0.0123, probe_per_gain=-0.9)
    monkeypatch.setitem(sim.MODEL_COMPONENTS, "smollm2-135m", mine)
    report = D.assess(g, [], claims=[1], sims=2)
    assert report["components"] == mine and report["source"].startswith("smollm2-135m: ")
    line = next(ln for ln in D.lines(report) if ln.startswith("components ("))
    assert line.startswith("components (smollm2-135m: esopt/study/claims/simulate.py MODEL_COMPONENTS)")
    assert "sigma_seed 0.0123" in line
    assert D.components_for(g) == mine
    assert D.assess(D.Grid(**{**g.__dict__, "cell_model": "tiny-s"}), [], claims=[1], sims=2)["components"] == sim.MEASURED


def test_pilot_literal_carries_the_probes_and_drift_from_the_sweep(tmp_path):
    """A pilot sweep's runs with held-out probes (per-probe intervals in summary.json, the
    config's probe_samples x probe_problems) and drift.json: the runs table and attach_details
    carry them to estimate_components, and --print-components prints a literal that builds."""
    pilot = tmp_path / "pilot"
    write_planted_sweep(pilot, models={"tiny-s": 1e5}, pops=(8, 16), seeds=(0, 1, 2), problems=60, noise=0.01)
    rng = np.random.default_rng(0)
    l2, m = {}, 0.05           # every probe evaluation's mean_p x_p(1 - x_p): the interval says the rest
    for d in sorted((pilot / "runs").iterdir()):
        s = json.loads((d / "summary.json").read_text())
        if s["algo"] not in ("es", "grpo"):
            continue
        b, f = 0.7, 0.7 + rng.normal(-0.02, 0.01)
        s |= {"base_probe_pass1": b, "final_probe_pass1": f, "min_probe_pass1": min(b, f)}
        for when, x in (("base", b), ("final", f)):
            half = sim.Z95 * math.sqrt((x * (1 - x) - m) / 100)
            s[when] |= {"probe_copy": x, "probe_copy_ci": [x - half, x + half]}
        s["config"]["eval"] = {"probes": [{"name": "copy"}], "probe_samples": 4, "probe_problems": 100}
        (d / "summary.json").write_text(json.dumps(s))
        l2[d.name] = float(np.exp(rng.normal(2.0 if s["algo"] == "es" else 0.0, 0.1)))
        (d / "drift.json").write_text(json.dumps({"analysis": "drift", "update_l2": l2[d.name],
                                                  "update_top_share": 0.6 + rng.normal(0, 0.01)}))
    r = cli("esopt.design", "--pilot", str(pilot), "--print-components")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"# components of {pilot}" in out and "#   probe_base: mean base_probe_pass1 of" in out
    assert "#   sigma_probe_eval: sampling sd" in out and "#   log_l2: GRPO's mean ln update_l2" in out
    assert "# assumed (Components() defaults): " in out and "sigma_barrier" in out.split("# assumed")[1]
    c = eval(out[out.index("\nComponents("):], {"Components": Components})   # noqa: S307 - our own literal
    assert c.probe_base == pytest.approx(0.7)
    assert c.sigma_probe_eval == pytest.approx(math.sqrt(m * 4 / 3 / (4 * 100)), rel=0.005)   # 3 digits
    grpo = [v for k, v in l2.items() if k.startswith("grpo")]
    assert c.log_l2 == pytest.approx(np.mean(np.log(grpo)), abs=0.002)
    r = cli("esopt.design", "--print-components")
    assert r.returncode == 2 and "give --pilot DIR" in r.stderr
