"""engine=vllm es.batched=true: the ES population in one vLLM ``generate`` call, each member a
LoRA adapter (esopt/engines/lora.py, issue 43). These need vLLM and a model it serves (the
tiny model, fp32, on vLLM's CPU build): what is checked is vLLM's own multi-LoRA batching and
adapter loading, which nothing but a real engine runs. One engine (LoRA on, room for POP
members of rank RANK) serves the module; a few members, short prompts and completions.
"""

import pytest
import torch
from helpers import require_vllm, run_config, vllm_tiny

from esopt import models
from esopt.algorithms.es import ESRun, es_step
from esopt.engines import lora
from esopt.engines.hf import HFEngine
from esopt.runtime.run import load_components

pytestmark = pytest.mark.vllm

POP, RANK, PROMPTS = 4, 2, 4
ARGS = ("engine=vllm", "algo=es", "es.batched=true", f"es.perturb_rank={RANK}", f"pop={POP}",
        f"es.batch_size={PROMPTS}", "es.max_new_tokens=12", "sigma=0.05", "lr=0.02")


@pytest.fixture(scope="module")
def setup():
    require_vllm()
    tiny = vllm_tiny()
    rc = run_config(*tiny, *ARGS)
    model, tok, engine, task = load_components(rc)
    return tiny, rc, tok, engine, task


def fresh_model(tiny):
    m = dict(o.split("=", 1) for o in tiny)
    return models.load(m["model"], path=m.get("model.path"))[0]


def test_batched_iteration_equals_the_hf_engines_batched_lowrank_iteration(setup):
    """The same ES: one iteration's greedy member rewards and its update equal the hf engine's
    batched low-rank iteration over the same scope (es.targets=linear); embeddings, norms and
    the lm_head are neither perturbed nor updated."""
    tiny, rc, tok, engine, task = setup
    engine.sync_from(fresh_model(tiny))
    es = ESRun.from_run(rc).validate()
    assert (es.noise_rank, es.noise_targets, es.label) == (RANK, "linear", "EGGROLL r=2, linear layers")
    rows = task.split("train")
    got = es_step(engine, task, rows, es, 3)

    hf_model = fresh_model(tiny)
    want = es_step(HFEngine(hf_model, tok, device="cpu"), task, rows, es, 3)
    assert got["rewards"] == want["rewards"]
    assert len(set(got["rewards"])) > 1, "members must differ for the update to mean anything"

    base = dict(fresh_model(tiny).named_parameters())
    vllm_model = fresh_model(tiny)
    engine.sync_to(vllm_model)
    moved = 0
    for name, p in vllm_model.named_parameters():
        q = dict(hf_model.named_parameters())[name]
        torch.testing.assert_close(p, q, atol=1e-7, rtol=1e-6)  # fp32 round-off (in fact bitwise here)
        if lora.is_linear_target(name, p.shape):
            moved += not torch.equal(p, base[name])
        else:
            assert torch.equal(p, base[name]), f"{name} is not a LoRA target and must not move"
    assert moved == len(lora.select(base, "linear"))


def test_batched_member_equals_member_applied_alone(setup):
    """A batched member's greedy completions equal those of its weights written into the
    engine (the same low-rank edit of the linear layers, in place) and generated alone; the
    members differ from each other and from the base."""
    tiny, rc, tok, engine, task = setup
    engine.sync_from(fresh_model(tiny))
    prompts = [r["prompt"] for r in task.split("train")][:PROMPTS]
    members = [(101, 1.0), (101, -1.0), (202, 1.0)]
    kw = dict(max_new_tokens=12)
    gens = engine.generate_population(prompts, members, 0.05, rank=RANK, **kw)
    ops = engine.weights()
    before = ops.checksum()
    for (seed, sign), g in zip(members, gens):
        ops.perturb(seed, 0.05, sign, RANK, targets="linear")
        try:
            alone = engine.generate(prompts, **kw)
        finally:
            ops.restore()
        assert g.completions == alone.completions and g.token_ids == alone.token_ids
    assert ops.checksum() == before
    texts = [str(g.completions) for g in gens]
    assert len(set(texts)) == len(members)
    assert str(engine.generate(prompts, **kw).completions) not in texts


def test_adapters_do_not_accumulate(setup):
    """Adapters are unloaded and their folder removed after each call."""
    from esopt.engines import vllm as vllm_engine

    tiny, rc, tok, engine, task = setup
    prompts = [r["prompt"] for r in task.split("train")][:2]
    for it in range(3):
        engine.generate_population(prompts, [(it, 1.0), (it + 7, 1.0)], 0.05, rank=RANK, max_new_tokens=4)
    assert engine.llm.llm_engine.list_loras() == set()
    assert not list(vllm_engine._scratch_dir().glob("lora-*"))


def test_model_without_lora_in_vllm_is_refused_before_running(tmp_path):
    """An architecture vLLM has no LoRA for (Bloom in vLLM 0.32): one ConfigError line before
    any run. Needs vLLM: the answer is vLLM's model registry's."""
    import json

    from esopt.core.errors import ConfigError
    from esopt.engines import parse
    from esopt.engines.vllm import VLLMEngine

    require_vllm()
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BloomForCausalLM"], "model_type": "bloom",
                                                      "hidden_size": 64, "n_head": 2, "n_layer": 1}))
    with pytest.raises(ConfigError, match="vLLM has no LoRA for BloomForCausalLM"):
        VLLMEngine.check_population(parse({"name": "vllm"}), {"name": "tiny-s", "path": str(tmp_path)}, 2)


def test_cpu_lora_ops_equal_vllms_own():
    """The worker's GEMM forms of vLLM's CPU LoRA ops (esopt.engines.vllm_worker) compute what
    vLLM's own torch ops do, up to summation order. Needs vLLM (its ops are the reference); no model."""
    require_vllm()
    import importlib

    import vllm.lora.ops.torch_ops.lora_ops as patched

    from esopt.engines import vllm_worker as w

    assert w.FAST_CPU_LORA and patched.bgmv_expand is w.bgmv_expand
    ref = importlib.reload(importlib.import_module("vllm.lora.ops.torch_ops.lora_ops"))  # vLLM's originals
    try:
        g = torch.Generator().manual_seed(0)
        T, n, out, L, r = 13, 24, 40, 5, 8
        x = torch.randn(T, n, generator=g)
        a = torch.randn(L, 1, r, n, generator=g)
        b = torch.randn(L, 1, out, r, generator=g)
        idx = torch.randint(-1, L, (T,), generator=g)
        ys = [torch.zeros(T, r), torch.zeros(T, r)]
        ref.bgmv_shrink(x, a, ys[0], idx, 0.5)
        w.bgmv_shrink(x, a, ys[1], idx, 0.5)
        torch.testing.assert_close(ys[1], ys[0])
        h = ys[0]
        for add in (False, True):
            o = [torch.randn(T, 3 * out, generator=g)] * 2
            o = [o[0].clone(), o[0].clone()]
            ref.bgmv_expand_slice(h, b, o[0], idx, out, out, add)
            w.bgmv_expand_slice(h, b, o[1], idx, out, out, add)
            torch.testing.assert_close(o[1], o[0])
            o = [torch.randn(T, out, generator=g)] * 2
            o = [o[0].clone(), o[0].clone()]
            ref.bgmv_expand(h, b, o[0], idx, add)
            w.bgmv_expand(h, b, o[1], idx, add)
            torch.testing.assert_close(o[1], o[0])
    finally:
        w._fast_cpu_lora()  # the reload put vLLM's ops back: the worker's again
