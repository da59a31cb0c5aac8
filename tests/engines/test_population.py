"""esopt.engines.population: a batched member generates what the same member perturbed alone does."""

import pytest
import torch
from torch import nn
from transformers import Qwen2ForCausalLM

from esopt import noise
from esopt.engines import population
from esopt.engines.hf import HFEngine
from esopt.models.tiny import char_tokenizer, tiny_config



PROMPTS = ["3 7 2=23:", "1 2 3=6:", "12 4 5=9:"]
MEMBERS = [(11, 1.0), (11, -1.0), (12, 1.0), (13, 1.0)]
SIGMA = 0.05


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    cfg = tiny_config("tiny-xs")
    cfg.initializer_range = 0.3  # random weights whose greedy outputs react to perturbations
    return HFEngine(Qwen2ForCausalLM(cfg).eval(), char_tokenizer(), device="cpu", max_batch=256)


def _alone(engine, seed, sign, rank, **kw):
    params = list(engine.named_parameters())
    before = noise.checksum(params)
    state = noise.perturb(params, seed, SIGMA, sign, rank=rank)
    try:
        return engine.generate(PROMPTS, **kw)
    finally:
        noise.restore(params, state)
        assert noise.checksum(params) == before


@pytest.mark.parametrize("rank", [1, 2, None], ids=["rank1", "lowrank", "fullrank"])
def test_batched_members_equal_alone(engine, rank):
    before = noise.checksum(engine.named_parameters())
    # max_rows=6 packs two members per generate call (3 prompts each): chunking is exercised
    gens = population.generate(engine, PROMPTS, MEMBERS, SIGMA, rank=rank, max_new_tokens=12, max_rows=6)
    assert noise.checksum(engine.named_parameters()) == before  # base weights untouched
    assert len(gens) == len(MEMBERS)
    for (seed, sign), g in zip(MEMBERS, gens):
        alone = _alone(engine, seed, sign, rank, max_new_tokens=12)
        assert g.completions == alone.completions
        assert g.token_ids == alone.token_ids and g.n_tokens == alone.n_tokens
    # non-trivial: members differ from each other and from the base model
    texts = [g.completions for g in gens]
    assert len({str(t) for t in texts}) == len(MEMBERS)
    assert engine.generate(PROMPTS, max_new_tokens=12).completions not in texts


@pytest.mark.parametrize("rank", [1, None], ids=["lowrank", "fullrank"])
def test_batched_logits_match_weight_edit(engine, rank):
    model, tok = engine.model, engine.tokenizer
    ids = tok(PROMPTS[:2] * len(MEMBERS), padding=True, return_tensors="pt")
    with torch.no_grad(), population.PopulationForward(model, MEMBERS, SIGMA, rank, rows_per_member=2):
        batched = model(**ids).logits
    params = list(model.named_parameters())
    for k, (seed, sign) in enumerate(MEMBERS):
        st = noise.perturb(params, seed, SIGMA, sign, rank=rank)
        with torch.no_grad():
            alone = model(**{n: v[2 * k:2 * k + 2] for n, v in ids.items()}).logits
        noise.restore(params, st)
        torch.testing.assert_close(batched[2 * k:2 * k + 2], alone, atol=2e-5, rtol=1e-4)
    # forwards are back to normal after the context
    with torch.no_grad():
        torch.testing.assert_close(model(**ids).logits[:2], model(**{n: v[:2] for n, v in ids.items()}).logits)


@pytest.mark.parametrize("chunk", [None, 100], ids=["one-chunk", "chunked"])
@pytest.mark.parametrize("rank", [2, None], ids=["lowrank", "fullrank"])
def test_member_stacks_are_the_perturbed_tensors(engine, rank, chunk, monkeypatch):
    """Every full-rank per-member tensor (all of them at rank None; biases and norm scales at
    low rank) is bitwise the one ``noise.perturbed`` writes for that member (one generator reused
    across members and one op per stack give the same draws and arithmetic), also when tensors
    span several noise chunks; a low-rank layer's bias delta restores it: ``b + (b_i - b)`` is
    ``b_i``'s perturbation."""
    if chunk:
        monkeypatch.setattr(noise, "CHUNK", chunk)
    params = list(engine.named_parameters())
    pf = population.PopulationForward(engine.model, MEMBERS, SIGMA, rank, 1)
    checked = 0
    for k, (seed, sign) in enumerate(MEMBERS):
        want = dict(zip([n for n, _ in params], noise.perturbed(params, seed, SIGMA, sign)))
        for name, st in pf.stacks.items():
            if not isinstance(st, tuple):
                assert torch.equal(st[k], want[name]), name
                checked += 1
    assert checked >= len(MEMBERS) * (len(params) if rank is None else 3)
    assert all(d.shape[0] == len(MEMBERS) for d in pf.bias_delta.values())
    assert bool(pf.bias_delta) == (rank is not None)


def test_stack_memory_and_unsupported_modules():
    lin = nn.Sequential(nn.Linear(8, 6), nn.LayerNorm(6))
    with pytest.raises(NotImplementedError, match="LayerNorm"):
        population.PopulationForward(lin, MEMBERS, SIGMA, 1, rows_per_member=1)
    m = nn.Sequential(nn.Linear(8, 6))
    assert population.stack_bytes(m, 4, 2) == 4 * ((8 + 6) * 2 + 6) * 4
    assert population.stack_bytes(m, 4, None) == 4 * (48 + 6) * 4


def test_linear_targets_perturb_the_linear_weights_only(engine):
    """es.targets=linear (what a LoRA member reaches, engine=vllm's batched path): the batched
    members' logits are those of the same low-rank edit of the linear layers' weights alone;
    embeddings, norms and biases are left as they are."""
    from esopt.engines import lora

    model, tok = engine.model, engine.tokenizer
    ids = tok(PROMPTS[:2] * len(MEMBERS), padding=True, return_tensors="pt")
    with torch.no_grad(), population.PopulationForward(model, MEMBERS, SIGMA, 2, rows_per_member=2,
                                                       targets="linear"):
        batched = model(**ids).logits
    linear = lora.select(model.named_parameters(), "linear")
    names = {n for n, _ in linear}
    assert names and all(w.dim() == 2 for _, w in linear)
    assert not any("embed" in n or "norm" in n or n.endswith("bias") for n in names)
    for k, (seed, sign) in enumerate(MEMBERS):
        st = noise.perturb(linear, seed, SIGMA, sign, rank=2)
        with torch.no_grad():
            alone = model(**{n: v[2 * k:2 * k + 2] for n, v in ids.items()}).logits
        noise.restore(linear, st)
        torch.testing.assert_close(batched[2 * k:2 * k + 2], alone, atol=2e-5, rtol=1e-4)
