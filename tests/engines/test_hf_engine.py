"""HF engine: seeded sampling, greedy vs Hugging Face, chunking, EOS / stop strings, entropy."""

import math

import numpy as np

import pytest
import torch

from helpers import random_model

from esopt import engines
from esopt.core.errors import ConfigError
from esopt.engines.hf import _mix32, gumbel_noise, top_p_filter
from esopt.engines.base import entropy_per_token
from esopt.models import char_tokenizer

torch.set_num_threads(1)

PROMPTS = ["3 7 2=23:", "1 2=3:", "10 4 6 8=7:", "5 5=25:"]


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer()


@pytest.fixture(scope="module")
def engine(tok):
    return engines.get({"name": "hf", "device": "cpu", "max_batch": 64}, random_model(tok), tok)


def hf_greedy(model, tok, prompt, max_new_tokens):
    ids = tok(prompt, return_tensors="pt")
    out = model.generate(
        **ids, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return out[0, ids["input_ids"].shape[1]:].tolist()


def test_get_unknown_engine(tok):
    with pytest.raises(ConfigError, match="unknown engine 'nope'"):
        engines.get({"name": "nope"}, None, tok)


def test_shared_engine_keys_are_spelled_and_checked_alike(tok):
    """dtype, device, threads and max_batch mean the same on every engine: one spelling, one
    check; engine.dtype casts the weights the hf engine generates (and ES perturbs) with."""
    from dataclasses import fields

    shared = {"name", "dtype", "device", "threads", "max_batch"}
    for cls in engines.ENGINES.values():
        assert shared <= {f.name for f in fields(cls)}, cls
    for name in ("hf", "vllm"):
        assert engines.parse({"name": name, "dtype": "bfloat16", "device": "cpu", "threads": 2}).dtype == "bfloat16"
        with pytest.raises(ConfigError, match="engine.dtype must be one of"):
            engines.parse({"name": name, "dtype": "fp8"})
        with pytest.raises(ConfigError, match="engine.threads"):
            engines.parse({"name": name, "threads": 0})
    eng = engines.get({"name": "hf", "device": "cpu", "dtype": "bfloat16"}, random_model(tok), tok)
    assert {p.dtype for p in eng.model.parameters()} == {torch.bfloat16}
    assert len(eng.generate(PROMPTS, max_new_tokens=3).completions) == len(PROMPTS)
    assert engines.engine_class({"name": "hf"}).batches_population
    vllm_cls = engines.engine_class({"name": "vllm"})  # no vLLM import needed
    assert vllm_cls.batches_population and not vllm_cls.population_full_rank  # LoRA members: low rank
    assert vllm_cls.population_targets == ("linear",)
    assert engines.engine_class({"name": "vllm"}).serves_rollouts and engines.engine_class({"name": "hf"}).serves_rollouts


def test_rollouts_are_keyed_by_global_row(engine, tok):
    """GRPO's rollouts (grpo.rollouts=engine): two processes' halves (first_row 0 and 2) are
    the whole batch's rows, and each row is generate's sample plus the EOS that ended it."""
    ids = [engine._encode([p])[0] for p in PROMPTS]
    kw = dict(temperature=1.0, max_new_tokens=6, seed=11)
    whole = engine.rollouts(ids, **kw)
    assert engine.rollouts(ids[:2], **kw) + engine.rollouts(ids[2:], first_row=2, **kw) == whole
    assert engine.rollouts(ids[2:], **kw) != whole[2:]  # keyed by the row, not by the position in the call
    gen = engine.generate(PROMPTS, n=1, **kw)
    for row, sample, length in zip(whole, gen.token_ids, gen.lengths):
        assert len(row) == length[0] and row[:len(sample[0])] == sample[0]
        assert len(row) == len(sample[0]) or row[-1] in engine.eos_ids


def test_shapes_and_counts(engine):
    g = engine.generate(PROMPTS, n=3, temperature=1.0, max_new_tokens=7, seed=0, return_entropy=True)
    assert len(g.completions) == len(PROMPTS) and all(len(c) == 3 for c in g.completions)
    assert [len(x) for x in g.token_ids] == [3] * 4 and [len(x) for x in g.lengths] == [3] * 4
    assert [len(x) for x in g.entropy] == [3] * 4
    assert g.n_tokens == sum(sum(x) for x in g.lengths)
    for ids_p, lens_p, texts_p in zip(g.token_ids, g.lengths, g.completions):
        for ids, n, text in zip(ids_p, lens_p, texts_p):
            assert 1 <= n <= 7 and len(ids) in (n, n - 1)
            assert 1 not in ids  # EOS excluded
            assert text == engine.tokenizer.decode(ids, skip_special_tokens=True)


def test_seeded_sampling_is_deterministic_and_chunk_invariant(tok, engine):
    kw = dict(n=5, temperature=1.0, max_new_tokens=8)
    a = engine.generate(PROMPTS, seed=7, **kw)
    b = engine.generate(PROMPTS, seed=7, **kw)
    c = engine.generate(PROMPTS, seed=8, **kw)
    assert a.completions == b.completions and a.token_ids == b.token_ids
    assert a.completions != c.completions
    flat = [s for p in a.completions for s in p]
    assert len(set(flat)) > len(flat) // 2  # samples of one prompt differ
    small = engines.get({"name": "hf", "device": "cpu", "max_batch": 3}, engine.model, tok)
    assert small.generate(PROMPTS, seed=7, **kw).token_ids == a.token_ids
    # The torch global RNG is neither used nor disturbed.
    torch.manual_seed(123)
    r0 = torch.rand(3)
    torch.manual_seed(123)
    engine.generate(PROMPTS, seed=7, **kw)
    assert torch.equal(torch.rand(3), r0)


def test_greedy_matches_hf_and_chunking(tok, engine):
    g = engine.generate(PROMPTS, n=2, temperature=0.0, max_new_tokens=10)
    for p, ids in zip(PROMPTS, g.token_ids):
        ref = hf_greedy(engine.model, tok, p, 10)
        ref = ref[: ref.index(1)] if 1 in ref else ref
        assert ids[0] == ids[1] == ref
    small = engines.get({"name": "hf", "device": "cpu", "max_batch": 1}, engine.model, tok)
    assert small.generate(PROMPTS, n=2, temperature=0.0, max_new_tokens=10).token_ids == g.token_ids


def test_eos_stops_generation(tok):
    model = random_model(tok, seed=1)
    ref = hf_greedy(model, tok, PROMPTS[0], 12)
    assert 1 not in ref
    j = 4  # make EOS win wherever ref[j]'s token wins: tied embeddings, EOS never an input
    with torch.no_grad():
        w = model.model.embed_tokens.weight
        w[1] = 1.05 * w[ref[j]]
    stop_at = ref.index(ref[j])
    eng = engines.get({"name": "hf", "device": "cpu"}, model, tok)
    g = eng.generate(PROMPTS[:1], n=1, temperature=0.0, max_new_tokens=12)
    assert g.token_ids[0][0] == ref[:stop_at]
    assert g.lengths[0][0] == stop_at + 1  # EOS counted
    assert g.completions[0][0] == tok.decode(ref[:stop_at])
    assert g.n_tokens == stop_at + 1


def test_stop_strings(tok, engine):
    refs = [c[0] for c in engine.generate(PROMPTS, n=1, temperature=0.0, max_new_tokens=12).completions]
    prompt, ref = max(zip(PROMPTS, refs), key=lambda pr: len(pr[1]))
    assert len(ref) >= 8
    stop = ref[5:7]
    cut = ref.find(stop) + len(stop)
    g = engine.generate([prompt], n=2, temperature=0.0, max_new_tokens=12, stop=[stop, "never"])
    assert g.completions[0] == [ref[:cut]] * 2  # stop string kept
    assert g.lengths[0] == [cut] * 2  # generation stopped there (one char per token)


def test_entropy_matches_forward_pass(tok, engine):
    T = 0.7
    g = engine.generate(PROMPTS[:2], n=2, temperature=T, max_new_tokens=6, seed=3, return_entropy=True)
    for p, ids_p, lens_p, ents_p in zip(PROMPTS[:2], g.token_ids, g.lengths, g.entropy):
        prompt_ids = tok(p)["input_ids"]
        for ids, n, ent in zip(ids_p, lens_p, ents_p):
            full = torch.tensor([prompt_ids + ids])
            with torch.no_grad():
                logits = engine.model(full).logits[0]
            # positions predicting each generated token (the EOS step included when present)
            pos = logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + n]
            assert len(pos) == n
            assert ent == pytest.approx(entropy_per_token(pos, T).mean().item(), abs=1e-4)
            assert 0 < ent < math.log(len(tok))


def test_gumbel_sampling_matches_softmax_and_top_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    z = torch.log(probs).repeat(20000, 1)
    rows = torch.arange(20000)
    picks = (z + gumbel_noise(0, rows, 0, 4)).argmax(-1)
    freq = torch.bincount(picks, minlength=4).float() / 20000
    assert torch.allclose(freq, probs, atol=4 * math.sqrt(0.25 / 20000))
    # independent across steps: two steps' picks agree with probability sum p^2
    picks1 = (z + gumbel_noise(0, rows, 1, 4)).argmax(-1)
    agree = (picks == picks1).float().mean().item()
    assert agree == pytest.approx((probs**2).sum().item(), abs=0.02)
    # the hash is exact 32-bit arithmetic (split multiplies do not overflow int64)
    x = torch.tensor([0, 1, 12345, 0xFFFFFFFF, 0x80000000])
    ref = []
    for v in x.tolist():
        v ^= v >> 16
        v = (v * 0x7FEB352D) & 0xFFFFFFFF
        v ^= v >> 15
        v = (v * 0x846CA68B) & 0xFFFFFFFF
        ref.append(v ^ (v >> 16))
    assert _mix32(x).tolist() == ref
    # different step / seed -> different noise; same arguments -> same noise
    assert torch.equal(gumbel_noise(5, rows[:8], 2, 4), gumbel_noise(5, rows[:8], 2, 4))
    assert not torch.equal(gumbel_noise(5, rows[:8], 2, 4), gumbel_noise(5, rows[:8], 3, 4))
    assert not torch.equal(gumbel_noise(5, rows[:8], 2, 4), gumbel_noise(6, rows[:8], 2, 4))
    # top_p 0.7 keeps {0.5, 0.3} (mass before the third token is 0.8 >= 0.7)
    f = top_p_filter(torch.log(probs)[None], 0.7)
    assert torch.isfinite(f[0, :2]).all() and torch.isinf(f[0, 2:]).all()
    picks = (top_p_filter(z, 0.7) + gumbel_noise(1, rows, 0, 4)).argmax(-1)
    freq = torch.bincount(picks, minlength=4).float() / 20000
    assert torch.allclose(freq, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=0.015)


def test_named_parameters_are_live(engine):
    name, p = next(iter(engine.named_parameters()))
    assert p is dict(engine.model.named_parameters())[name]
    assert engine.max_batch == 64 and engine.device == torch.device("cpu")


def test_model_generation_config_is_ignored(tok, engine):
    """An instruct checkpoint's generation_config (sampling, repetition penalty) must not leak in."""
    ref = engine.generate(PROMPTS, n=1, temperature=0.0, max_new_tokens=10).token_ids
    gc = engine.model.generation_config
    saved = gc.to_dict()
    try:
        gc.do_sample, gc.temperature, gc.top_k, gc.repetition_penalty, gc.min_new_tokens = True, 0.3, 2, 3.0, 9
        assert engine.generate(PROMPTS, n=1, temperature=0.0, max_new_tokens=10).token_ids == ref
    finally:
        for k, v in saved.items():
            setattr(gc, k, v)
    assert engine.model.generation_config.repetition_penalty == saved["repetition_penalty"]


def test_entropy_per_token_hand_computed():
    z = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    h = -(0.5 * math.log(0.5) + 0.5 * math.log(0.25))  # 1.0397 nats
    assert h == pytest.approx(1.0397, abs=1e-4)
    assert entropy_per_token(z).item() == pytest.approx(h, abs=1e-6)
    # Temperature 2: softmax(log p / 2) is proportional to sqrt(p).
    q = np.sqrt([0.5, 0.25, 0.25])
    q /= q.sum()
    assert entropy_per_token(z, temperature=2.0).item() == pytest.approx(-(q * np.log(q)).sum(), abs=1e-6)
    # any leading shape: one entropy per position
    logits = torch.stack([z, torch.zeros(3)]).reshape(1, 2, 3)
    assert entropy_per_token(logits).tolist()[0] == pytest.approx([h, math.log(3)], abs=1e-6)
    # -inf logits (filtered tokens) contribute nothing instead of nan.
    assert entropy_per_token(torch.tensor([0.0, 0.0, float("-inf")])).item() == pytest.approx(math.log(2), abs=1e-6)
