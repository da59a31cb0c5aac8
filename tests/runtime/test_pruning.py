"""The noise-aware ``auto`` pruner (esopt.runtime.pruning) on a real Optuna study.

Synthetic trials report per-problem correct counts drawn from one set of problem difficulties
(null control: every trial equally good) or from a planted poor configuration; the same
harness run with Optuna's median pruner shows it can see false prunes. Then real tiny runs,
and the validation of the tuning block before dispatch."""

import json

import numpy as np
import optuna
import pytest

from esopt.core import metrics
from esopt.core.errors import ConfigError
from esopt.runtime import pruning, tuning

P, S, STEPS = 40, 8, (3, 6, 9, 12)
DIFFICULTY = np.random.default_rng(123).beta(0.6, 2.4, P)  # per-problem success rates, mean ~0.2


def study(**knobs):
    t = tuning.settings({"metric": "pass@1", **knobs})
    return optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction=t["direction"],
                               pruner=tuning.make_pruner(t)), t


def result(counts):
    return {"pass@k": {"1": float(np.mean(counts) / S)}, "samples": S, "correct_counts": [int(c) for c in counts],
            "greedy_correct": None}


def play(st, t, trials, rng, total=12, base=False):
    """Run synthetic trials one after another: (run id, config id, rate scale) each; returns
    {run id: pruned step or None} and the RunTrials. ``base``: each run first records an
    evaluation of the untrained model (rate scale 1), as esopt.runtime.run does."""
    out, handles = {}, {}
    for rid, cid, scale in trials:
        rt = tuning.RunTrial(st, tuning.start_trial(st, rid, {"config_id": cid, "lr": scale}), "pass@1", True,
                             t["pruner"])
        if base:
            rt.record_base(result(rng.binomial(S, DIFFICULTY)))
        handles[rid] = rt
        out[rid] = None
        for step in STEPS:
            rt.report(result(rng.binomial(S, np.clip(DIFFICULTY * scale, 0, 1))), step)
            if step < total and rt.should_prune():
                out[rid] = step
                rt.finish("pruned")
                break
        else:
            rt.finish({"status": "completed", "final": {"pass@1": 0.2 * scale}})
    return out, handles


def test_config_bounds_and_seed_variance_formulas():
    x = np.array([[0.0, 0.5, 1.0, 0.5], [0.5, 0.5, 1.0, 0.0]])  # 2 runs x 4 problems
    xbar = x.mean(0)
    m, lo, hi = metrics.config_bounds(x, tau2=0.01, level=0.95)
    se = np.sqrt(xbar.var(ddof=1) / 4 + 0.01 / 2)
    assert m == pytest.approx(xbar.mean())
    assert (lo, hi) == pytest.approx((m - 1.959964 * se, m + 1.959964 * se), rel=1e-5)
    # run means 0.5 and 0.5 -> no spread; a second config with means 0.25, 0.75 -> 0.125 / 1
    assert metrics.seed_variance([x, np.array([[0.25] * 4, [0.75] * 4]), np.ones((1, 4))]) == pytest.approx(0.0625)
    assert metrics.seed_variance([np.ones((1, 4))]) == 0.0


def test_null_control_equal_trials_are_not_pruned_but_median_prunes_them():
    """16 equally good single runs (each its own configuration, pool_seeds=false): auto prunes
    none; Optuna's median pruner, on the same draws, prunes several (the harness sees it)."""
    trials = [(f"r{i}", f"c{i}", 1.0) for i in range(16)]
    st, t = study(pruner="auto", pool_seeds=False)
    auto, _ = play(st, t, trials, np.random.default_rng(0))
    st, t = study(pruner="median")
    median, _ = play(st, t, trials, np.random.default_rng(0))
    assert sum(v is not None for v in auto.values()) == 0, auto
    assert sum(v is not None for v in median.values()) >= 4, median


def test_planted_poor_config_is_pruned_at_its_first_report_with_the_reason():
    trials = [("g0", "good", 1.0), ("p0", "poor", 0.05), ("g1", "good", 1.0), ("p1", "poor", 0.05)]
    st, t = study(pruner="auto")
    out, handles = play(st, t, trials, np.random.default_rng(1))
    assert out == {"g0": None, "p0": 3, "g1": None, "p1": 3}
    why = handles["p0"].reason
    assert why["pruner"] == "auto" and why["step"] == 3 and why["pruned"]
    assert why["value"] < why["threshold"] and why["rule"] == "value < threshold"
    assert "upper 95% bound of pass@1 of this configuration" in why["statistic"] and "lr=1" in why["reference"]
    assert why["reference_runs"] == ["g0"]
    frozen = next(x for x in st.get_trials() if x.user_attrs["run_id"] == "p0")
    assert frozen.user_attrs["pruned_because"] == json.loads(json.dumps(why))
    assert frozen.state == optuna.trial.TrialState.PRUNED


def test_base_model_reference_cuts_a_collapse_launched_first_and_spares_unchanged_runs():
    """The base-model rule (tuning.baseline): a collapsing configuration launched alone has no
    other configuration to lose against, but is worse than the model it started from: pruned
    at its first report, 20 of 20 (power), with the base as the recorded reference; without
    the rule, or without a recorded base, it runs to the end. Null control: 40 single runs whose
    model never changes (same rates as the base) -- at most 10% pruned (the issue's goal).
    Measured with this harness over 200 single runs (3 prunable reports each): unchanged 3.5%
    pruned, rates x0.7 59%, x0.5 97%, x0.05 100%."""
    for i in range(20):
        st, t = study(pruner="auto")
        out, handles = play(st, t, [(f"p{i}", "poor", 0.05)], np.random.default_rng(100 + i), base=True)
        assert out == {f"p{i}": 3}
    why = handles[f"p{i}"].reason
    assert why["threshold"] == 0.0 and why["value"] < 0 and "base model" in why["reference"]
    assert "change in pass@1 from the base model" in why["statistic"]
    st, t = study(pruner="auto", baseline=False)
    assert play(st, t, [("p", "poor", 0.05)], np.random.default_rng(100), base=True)[0] == {"p": None}
    st, t = study(pruner="auto")
    assert play(st, t, [("p", "poor", 0.05)], np.random.default_rng(100))[0] == {"p": None}
    st, t = study(pruner="auto", pool_seeds=False)
    null, _ = play(st, t, [(f"r{i}", f"c{i}", 1.0) for i in range(40)], np.random.default_rng(7), base=True)
    assert sum(v is not None for v in null.values()) <= 4, null


def test_warmup_delays_pruning():
    trials = [("g0", "good", 1.0), ("p0", "poor", 0.05)]
    st, t = study(pruner="auto", n_warmup_steps=6)
    out, _ = play(st, t, trials, np.random.default_rng(1))
    assert out == {"g0": None, "p0": 6}


def test_configs_not_seeds_are_compared():
    """One planted-poor seed among three of a configuration: with seeds pooled the
    configuration is never compared with itself; as single runs the poor one is pruned."""
    trials = [("a0", "A", 1.0), ("a1", "A", 1.0), ("a2", "A", 0.05)]
    st, t = study(pruner="auto")
    assert play(st, t, trials, np.random.default_rng(2))[0] == {"a0": None, "a1": None, "a2": None}
    st, t = study(pruner="auto", pool_seeds=False)
    assert play(st, t, trials, np.random.default_rng(2))[0]["a2"] == 3


def test_minimize_is_mirrored():
    """direction=minimize on greedy correctness: the configuration that gets more right is
    the 'worse' one and is pruned; its lower bound is above the other's upper bound."""
    st, t = study(pruner="auto", direction="minimize", metric="greedy")
    rng = np.random.default_rng(3)
    for rid, cid, p in (("lo", "A", 0.05), ("hi", "B", 0.8)):
        rt = tuning.RunTrial(st, tuning.start_trial(st, rid, {"config_id": cid}), "greedy", True, "auto")
        g = (rng.random(P) < p).astype(int).tolist()
        rt.report({"greedy": float(np.mean(g)), "samples": S, "correct_counts": [0] * P, "greedy_correct": g}, 3)
        pruned = rt.should_prune()
        assert pruned == (rid == "hi")
    assert rt.reason["value"] > rt.reason["threshold"] and rt.reason["rule"] == "value > threshold"


def test_per_problem_scores_from_evidence():
    ev = pruning.evidence({"samples": 4, "correct_counts": [0, 2, 4], "greedy_correct": [0, 1, 1]})
    assert pruning.per_problem(ev, "pass@1").tolist() == [0.0, 0.5, 1.0]
    assert pruning.per_problem(ev, "pass@2").tolist() == pytest.approx([0.0, 1 - 1 / 6, 1.0])
    assert pruning.per_problem(ev, "greedy").tolist() == [0.0, 1.0, 1.0]
    assert pruning.per_problem(ev, "pass@8") is None and pruning.per_problem(ev, "entropy") is None


# --- validation before dispatch ----------------------------------------------------------

BASE = ["model=tiny-xs", "algo=es", "iterations=6", "eval.every=3", "eval.samples=8"]


@pytest.mark.parametrize("extra,match", [
    (["tuning.pruner=asha"], "unknown tuning.pruner 'asha'"),
    (["tuning.pruner=auto", "tuning.n_warmup_steps=6"], "n_warmup_steps=6 is not shorter than the run"),
    (["tuning.pruner=median", "tuning.n_warmup_steps=4"], "could prune nothing"),
    (["tuning.pruner=auto", "eval.every=6"], "could prune nothing"),
    (["tuning.metric=pass@16"], "'pass@16' is not produced by the evaluator with eval.samples=8"),
    (["tuning.metric=greedy", "eval.greedy=false"], "'greedy' is not produced"),
    (["tuning.metric=accuracy"], "is not produced"),
    (["tuning.pruner=auto", "tuning.metric=maj@4"], "needs a metric with per-problem scores"),
    (["tuning.pruner=auto", "tuning.confidence=1.0"], "tuning.confidence must be in"),
    (["tuning.pruner=auto", "tuning.baseline_confidence=0"], "tuning.baseline_confidence must be in"),
    (["tuning.pruner=auto", "tuning.baseline=maybe"], "tuning.baseline must be true or false"),
    (["tuning.pruner=auto", "tuning.pool_seeds=1"], "tuning.pool_seeds must be true or false"),
])
def test_bad_tuning_is_one_line_config_error(extra, match):
    from helpers import run_config

    with pytest.raises(ConfigError, match=match) as e:
        run_config(*BASE, *extra, check_data=False)
    assert "\n" not in str(e.value)


def test_good_tuning_passes():
    from helpers import run_config

    rc = run_config(*BASE, "tuning.pruner=auto", "tuning.n_warmup_steps=3", "tuning.metric=pass@8",
                    check_data=False)
    assert tuning.check(rc).pruner == "auto" and rc.tuning_settings == tuning.check(rc)
    # a base-model run in the same grid has nothing to prune: no warmup check
    run_config("model=tiny-xs", "algo=none", "iterations=1", "tuning.pruner=auto", check_data=False)


def test_bad_tuning_exits_2_before_dispatch(tmp_path):
    from helpers import REPO, cli

    r = cli("esopt.sweep", "-m", *BASE, "seed=0,1", "tuning.pruner=auto", "tuning.n_warmup_steps=6",
                f"sweep.root={tmp_path}", "sweep.name=bad", env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("esopt: error:")]
    assert len(errors) == 1 and "n_warmup_steps=6 is not shorter than the run" in errors[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr and not (tmp_path / "bad" / "runs").exists()


# --- real runs: the command line, a cheaper equivalent of the check ---------------

def test_sweep_prunes_planted_lr_not_equal_seeds_and_records_why(tmp_path):
    """tiny-s ES, 3 seeds of the default lr and 3 of lr 1.0 (interleaved, one after another),
    tuning.pruner=auto compared run by run (pool_seeds=false, so the default-lr seeds are
    really compared with each other): no default-lr run is pruned (null control), every
    lr 1.0 run is, at its first evaluation (planted effect); each pruned summary says why and
    the report's pruning figure shows the statistic below its threshold."""
    from helpers import REPO, cli

    from esopt.study.report import page as report

    r = cli("esopt.sweep", "-m", "model=tiny-s", "algo=es", "pop=4", "iterations=4", "eval.every=2",
                "es.batch_size=16", "eval.problems=40", "eval.samples=4", "seed=0,1,2", "lr=0.005,1.0",
                "tuning.pruner=auto", "tuning.pool_seeds=false", f"sweep.root={tmp_path}", "sweep.name=p",
                env={"PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    runs = [json.loads(f.read_text()) for f in sorted((tmp_path / "p" / "runs").glob("*/summary.json"))]
    assert len(runs) == 6
    good = [s for s in runs if s["lr"] == 0.005]
    poor = [s for s in runs if s["lr"] == 1.0]
    assert [s["status"] for s in good] == ["completed"] * 3
    assert [s["status"] for s in poor] == ["pruned"] * 3
    good_ids = {s["run_id"] for s in good}
    for s in poor:
        why = s["pruning"]
        assert why["step"] == 2 and why["value"] < why["threshold"], why
        assert set(why["reference_runs"]) <= good_ids and "lr=0.005" in why["reference"]
        assert s["error"].startswith("pruned at iteration 2 by auto: upper 95% bound of pass@1")
    page = (tmp_path / "p" / "report.html").read_text()
    fig = report.figure_data(page, "fig-pruning")
    value, threshold = ({tuple(tr["x"]): list(tr["y"]) for tr in fig["data"] if tr["name"] == n} for n in
                        ("statistic", "threshold"))
    (labels, vs), (_, ts) = next(iter(value.items())), next(iter(threshold.items()))
    assert len(labels) == 3 and all(v < t for v, t in zip(vs, ts))
    assert all("lr=1" in lab for lab in labels)
