"""esopt.algorithms.es: normalisation, seeds, config checks, learning, checkpoint/resume, non-finite."""

import json

import numpy as np
import pytest
import torch

from esopt import noise
from esopt.algorithms import es
from esopt.core.errors import ConfigError
from esopt.engines.hf import HFEngine
from esopt.engines.weights import Weights
from esopt.models.tiny import char_tokenizer
from esopt.core.errors import NonFinite
from helpers import Killed, SevensTask, kill_while_recording, sevens_context, sevens_plan, tiny_model

from esopt.tasks import Verdict



def run_config(**over):
    """The plan of an ES run on the Sevens task (helpers.sevens_plan) at sigma = lr = 0.05."""
    es_over = over.pop("es", {})
    return sevens_plan(**{"sigma": 0.05, "lr": 0.05, **over, "es": {"batch_size": 4, "checkpoint_every": 2, **es_over}})


def make_ctx(tmp_path, cfg, seed=0):
    return sevens_context(tmp_path, cfg, seed)


def lines(ctx, kind="train"):
    return [json.loads(x) for x in ctx.run.metrics_path.read_text().splitlines() if json.loads(x)["kind"] == kind]


# --- pure pieces ----------------------------------------------------------------------------
def test_normalize_modes():
    r = [1.0, 3.0, 2.0, 2.0]
    z = es.normalize_rewards(r, "zscore")
    assert abs(z.mean()) < 1e-12 and abs(z.std() - 1.0) < 1e-6
    np.testing.assert_allclose(z, (np.array(r) - 2.0) / (np.std(r) + 1e-8))
    np.testing.assert_allclose(es.normalize_rewards(r, "rank"), [-0.5, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(es.normalize_rewards(r, "none"), r)
    assert np.all(es.normalize_rewards([0.3] * 5, "zscore") == 0)  # equal rewards: no step
    with pytest.raises(ValueError):
        es.normalize_rewards(r, "bogus")


def test_member_seeds_deterministic_and_antithetic():
    s1, g1 = es.member_seeds(0, 3, 8, False)
    assert s1 == es.member_seeds(0, 3, 8, False)[0] and len(set(s1)) == 8 and g1 == [1.0] * 8
    assert s1 != es.member_seeds(0, 4, 8, False)[0] and s1 != es.member_seeds(1, 3, 8, False)[0]
    s2, g2 = es.member_seeds(0, 3, 8, True)
    assert s2[0::2] == s2[1::2] and len(set(s2)) == 4 and g2 == [1.0, -1.0] * 4
    b = es.prompt_batch(0, 1, 100, 32)
    assert len(set(b)) == 32 and b == es.prompt_batch(0, 1, 100, 32) and b != es.prompt_batch(0, 2, 100, 32)


def test_antithetic_update_is_the_mirrored_sum():
    p = {"w": torch.zeros(50)}
    seeds, signs = es.member_seeds(0, 1, 4, True)
    z = np.array([1.0, 0.2, -0.5, 0.3])
    noise.update(p, seeds, (z * np.array(signs)).tolist(), lr=1.0)
    e = [noise.noise_like(p["w"], noise.tensor_seed(s, "w")) for s in seeds[::2]]
    torch.testing.assert_close(p["w"], ((1.0 - 0.2) * e[0] + (-0.5 - 0.3) * e[1]) / 4)


@pytest.mark.parametrize("over,needle", [
    ({"pop": 1}, "pop must be >= 2"), ({"sigma": 0.0}, "sigma must be > 0"),
    ({"lr": -1.0}, "lr must be > 0"), ({"iterations": 0}, "iterations must be >= 1"),
    ({"es": {"perturb_rank": 0}}, "es.perturb_rank must be an integer >= 1"), ({"es": {"normalize": "x"}}, "es.normalize"),
    ({"es": {"antithetic": True}, "pop": 5}, "even pop"), ({"es": {"bogus": 1}}, "unknown es key"),
    ({"es": {"anchor_decay": -0.1}}, "es.anchor_decay must be"),
    ({"es": {"anchor_decay": 1.0}}, "es.anchor_decay must be in [0, 1)"),
])
def test_config_errors_are_one_line(over, needle):
    with pytest.raises(ConfigError) as e:
        cfg = run_config(**over)
        es.resolve(cfg, cfg.iterations)  # its settings resolved and checked (what validate does once)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_null_sigma_lr_take_block_then_model_defaults():
    """sigma / lr: the top-level axis, else the es block, else the model's hparams (conf/model)."""
    c = es.ESRun.from_run(run_config(sigma=None, lr=None, es={"sigma": 0.03, "lr": 0.004}))
    assert (c.sigma, c.lr) == (0.03, 0.004)
    from helpers import run_config as composed

    got = {}
    for model in ("tiny-s", "qwen1.5b"):  # each model's own conf/model hparams, not another's
        cfg = composed("algo=es", f"model={model}", check_data=False)
        got[model] = es.ESRun.from_run(cfg)
        assert (cfg.sigma, cfg.lr) == (None, None)
        assert (got[model].sigma, got[model].lr) == (cfg.model["hparams"]["es_sigma"], cfg.model["hparams"]["es_lr"])
    assert got["tiny-s"].sigma != got["qwen1.5b"].sigma
    assert (got["qwen1.5b"].sigma, got["qwen1.5b"].lr) == (1.5e-3, 2.5e-4)  # the study's setting
    assert es.ESRun.from_run(composed("algo=es", "sigma=0.3")).sigma == 0.3
    assert es.ESRun.from_run(composed("algo=es", "es.lr=0.02")).lr == 0.02
    with pytest.raises(ConfigError, match="no default for es_sigma"):
        es.ESRun.from_run(run_config(sigma=None, lr=None))  # a model config without hparams


# --- the loop -------------------------------------------------------------------------------
def _mean_reward(engine, task):
    rows = list(task.split("train"))
    g = engine.generate([r["prompt"] for r in rows], max_new_tokens=8)
    return float(np.mean([task.verify(c[0], r).reward for c, r in zip(g.completions, rows)]))


@pytest.mark.parametrize("batched", [False, True])
def test_es_raises_reward(batched):
    model = tiny_model()
    engine = HFEngine(model, char_tokenizer(), device="cpu")
    task = SevensTask({})
    # model seed 0 emits some '7's (a signal to climb); both ES seeds 0, 1 gain +0.39..0.86 here
    cfg = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=8, seed=0, batched=batched, perturb_rank=2)
    before = _mean_reward(engine, task)
    rows = list(task.split("train"))
    log = [es.es_step(engine, task, rows, cfg, it) for it in range(1, 7)]
    after = _mean_reward(engine, task)
    assert after > before + 0.2, (before, after)
    assert all(len(x["rewards"]) == 6 and x["update_norm"] > 0 for x in log)


def test_train_logs_diagnostics_and_checkpoints(tmp_path):
    ctx = make_ctx(tmp_path, run_config(iterations=3, es={"checkpoint_every": 5}))
    es.train(ctx)
    train = lines(ctx)
    assert [x["iteration"] for x in train] == [1, 2, 3]
    for x in train:
        for key in ("reward_mean", "reward_std", "reward_max", "reward_min", "js_succ", "p_pop",
                    "update_norm", "drift", "tokens_generated", "wall_gen", "wall_perturb", "wall_restore", "wall_score",
                    "wall_update",
                    "tokens_total", "wall_s", "phase"):
            assert key in x, key
        assert len(x["rewards"]) == 4 and x["reward_min"] <= x["reward_mean"] <= x["reward_max"]
        assert 0.0 <= x["js_succ"] <= np.log(2) and 0.0 <= x["p_pop"] <= 1.0
        assert x["tokens_generated"] > 0 and x["update_norm"] > 0
    assert 0 < train[0]["drift"] < train[2]["drift"]  # moves away from the base
    assert train[2]["tokens_total"] == sum(x["tokens_generated"] for x in train)
    assert [x["iteration"] for x in lines(ctx, "eval")] == [3]  # eval.every=100: the end only
    state = json.loads((ctx.run.checkpoint_dir / "state.json").read_text())
    assert state["iteration"] == 3 and (ctx.run.checkpoint_dir / "model.safetensors").exists()


@pytest.mark.parametrize("es_over", [{}, {"anchor_decay": 0.2, "drift": False}], ids=["plain", "anchored"])
def test_resume_is_bitwise_equal_to_uninterrupted(tmp_path, es_over):
    """Anchored: theta_0 is the weights the run started from, not the checkpoint's, on resume
    too (and kept without the drift diagnostic)."""
    cfg = run_config(iterations=4, es=es_over)
    full = make_ctx(tmp_path / "a", cfg)
    es.train(full)

    killed = make_ctx(tmp_path / "b", cfg)
    kill_while_recording(killed, es.train, 3)
    assert json.loads((killed.run.checkpoint_dir / "state.json").read_text())["iteration"] == 2

    resumed = make_ctx(tmp_path / "b", cfg)  # a fresh process: base weights, same run dir
    es.train(resumed)
    assert [x["iteration"] for x in lines(resumed)] == [1, 2, 3, 4]
    a, b = dict(full.model.named_parameters()), dict(resumed.model.named_parameters())
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert noise.checksum(a.items()) == noise.checksum(b.items())
    assert resumed.tokens_total == full.tokens_total


def test_resume_records_the_evaluation_due_at_the_checkpoint(tmp_path):
    """Killed after the checkpoint of iteration 2 but before its evaluation: the resumed run
    evaluates iteration 2 first (on the checkpoint's weights), so the curve has every point,
    each once, equal to the uninterrupted run's."""
    cfg = run_config(iterations=4, eval={"problems": 2, "samples": 2, "every": 2})
    full = make_ctx(tmp_path / "a", cfg)
    es.train(full)

    killed = make_ctx(tmp_path / "b", cfg)
    evaluate = killed.evaluate

    def dying_evaluate(iteration):
        if iteration == 2:
            raise Killed
        return evaluate(iteration)

    killed.evaluate = dying_evaluate
    with pytest.raises(Killed):
        es.train(killed)
    assert json.loads((killed.run.checkpoint_dir / "state.json").read_text())["iteration"] == 2
    assert lines(killed, "eval") == []

    resumed = make_ctx(tmp_path / "b", cfg)
    es.train(resumed)
    got, want = lines(resumed, "eval"), lines(full, "eval")
    assert [x["iteration"] for x in got] == [2, 4]
    for g, w in zip(got, want):
        assert g["pass@1"] == w["pass@1"] and g["greedy"] == w["greedy"] and g["entropy"] == w["entropy"]

    again = make_ctx(tmp_path / "b", cfg)  # requeued after the end: the final evaluation once
    es.train(again)
    assert [x["iteration"] for x in lines(again, "eval")] == [2, 4]


def test_nonfinite_weights_fail_and_keep_last_good_checkpoint(tmp_path):
    ctx = make_ctx(tmp_path, run_config(iterations=3))
    real = noise.update
    calls = {"n": 0}

    def update_then_corrupt(params, *a, **k):  # an overflow in iteration 3's update
        out = real(params, *a, **k)
        calls["n"] += 1
        if calls["n"] == 3:
            with torch.no_grad():
                params[0][1].view(-1)[0] = float("inf")
        return out

    noise.update = update_then_corrupt
    try:
        with pytest.raises(NonFinite, match="non-finite weights"):
            es.train(ctx)
    finally:
        noise.update = real
    assert json.loads((ctx.run.checkpoint_dir / "state.json").read_text())["iteration"] == 2


def test_nonfinite_reward_fails(tmp_path):
    ctx = make_ctx(tmp_path, run_config(iterations=2))

    class NaNTask(SevensTask):
        def verify(self, completion, row):
            return Verdict(float("nan"), 0.0, 0.0, False, None)

    ctx.task = NaNTask({})
    with pytest.raises(NonFinite, match="non-finite reward"):
        es.train(ctx)


@pytest.mark.parametrize("antithetic", [False, True])
def test_swapped_and_in_place_members_give_the_same_numbers(antithetic):
    """Issue 17 / 30: members held by swapping the HF parameters (the default on the CPU) and
    members perturbed in place with sparse fix-ups give bitwise the same weights, rewards and
    update norms, for the same seed."""
    task = SevensTask({})
    rows = list(task.split("train"))
    outcomes = set()
    for swap in (False, True):
        engine = HFEngine(tiny_model(), char_tokenizer(), device="cpu")
        weights = Weights(engine.named_parameters(), swap=swap)
        assert engine.weights().swap  # the engine's own: swapped on the CPU
        cfg = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=8, seed=0, antithetic=antithetic)
        lines = [es.es_step(engine, task, rows, cfg, it, weights) for it in (1, 2, 3)]
        outcomes.add((noise.checksum(engine.model.named_parameters()),
                      tuple(tuple(x["rewards"]) for x in lines), tuple(x["update_norm"] for x in lines)))
    assert len(outcomes) == 1


# --- anchored weight decay (es.anchor_decay; Schweighofer et al. 2026) ---------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_anchor_pulls_each_entry_toward_the_start_in_fp32(dtype):
    g = torch.Generator().manual_seed(0)
    base = {"a": torch.randn(5, 7, generator=g).to(dtype), "b": torch.randn(11, generator=g).to(dtype)}
    live = {k: (v.float() + torch.randn(v.shape, generator=g)).to(dtype) for k, v in base.items()}
    before = {k: v.clone() for k, v in live.items()}
    pull = noise.anchor(live.items(), base, 0.3)
    for k in live:  # theta - 0.3 (theta - theta_0), in fp32, cast once
        w, b = before[k].float(), base[k].float()
        assert torch.equal(live[k], (w - (w - b) * 0.3).to(dtype))
    want = 0.3 * sum(float((before[k].double() - base[k].double()).pow(2).sum()) for k in live) ** 0.5
    assert pull == pytest.approx(want, rel=1e-6)
    assert noise.l2_distance(live.items(), base) < noise.l2_distance(before.items(), base)


def test_anchored_iteration_is_the_plain_one_pulled_back(tmp_path):
    """Iteration 1 starts from the same weights, so it scores the same members: the anchored
    run's weights are the plain run's pulled back by lambda, bitwise; the pull is logged."""
    plain = make_ctx(tmp_path / "plain", run_config(iterations=1))
    es.train(plain)
    anchored = make_ctx(tmp_path / "anchored", run_config(iterations=1, es={"anchor_decay": 0.4}))
    es.train(anchored)
    (p_line,), (a_line,) = lines(plain), lines(anchored)
    assert p_line["rewards"] == a_line["rewards"] and "anchor_norm" not in p_line
    start = dict(tiny_model(0).named_parameters())
    got, moved = dict(anchored.model.named_parameters()), dict(plain.model.named_parameters())
    for k, w in moved.items():
        assert torch.equal(got[k], w - (w - start[k]) * 0.4), k
    assert a_line["anchor_norm"] == pytest.approx(0.4 * noise.l2_distance(moved.items(), start), rel=1e-6)
    assert a_line["drift"] == pytest.approx(0.6 * p_line["drift"], rel=1e-5)


def test_anchor_decay_zero_keeps_the_run_id_and_a_nonzero_one_changes_it():
    from esopt.runtime.validate import identity, run_id
    from helpers import run_config as composed

    implied, stated = composed("algo=es"), composed("algo=es", "es.anchor_decay=0")
    assert run_id(implied) == run_id(stated) and "anchor_decay" not in identity(stated)["es"]
    assert run_id(composed("algo=es", "es.anchor_decay=0.01")) != run_id(implied)
