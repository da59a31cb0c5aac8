"""esopt.noise: seeds, exact restore, update formula, checksum."""

import pytest
import torch

from esopt import noise
from esopt.engines.weights import Weights


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = {
        "layer.0.weight": torch.randn(64, 48, generator=g) * 0.02,
        "layer.1.weight": torch.randn(64, 48, generator=g) * 0.02,  # same shape as layer.0
        "norm.weight": 1.0 + 0.1 * torch.randn(48, generator=g),
        "bias": torch.randn(64, generator=g) * 0.5,
    }
    p["bias"][:4] = torch.tensor([0.0, -0.0, 2.0 ** -20, -1.0])  # signed zero, power-of-two edges
    return {k: v.to(dtype) for k, v in p.items()}


def test_tensor_seed_stable_and_name_dependent():
    assert noise.tensor_seed(7, "a.weight") == noise.tensor_seed(7, "a.weight")
    # a fixed value: the seed must not depend on Python's per-process hash randomisation
    assert noise.tensor_seed(0, "x") == int.from_bytes(
        __import__("hashlib").sha256(b"0/x").digest()[:8], "little") & (2**63 - 1)
    assert noise.tensor_seed(7, "a.weight") != noise.tensor_seed(7, "b.weight")
    assert noise.tensor_seed(7, "a.weight") != noise.tensor_seed(8, "a.weight")


def test_same_shaped_tensors_get_independent_noise():
    p = _params(torch.float32)
    e0 = noise.noise_like(p["layer.0.weight"], noise.tensor_seed(3, "layer.0.weight"))
    e1 = noise.noise_like(p["layer.1.weight"], noise.tensor_seed(3, "layer.1.weight"))
    assert e0.dtype == torch.float32 and e0.shape == (64, 48)
    corr = torch.corrcoef(torch.stack([e0.view(-1), e1.view(-1)]))[0, 1]
    assert abs(float(corr)) < 0.1
    assert abs(float(e0.std()) - 1.0) < 0.05
    # regenerating gives the same noise
    assert torch.equal(e0, noise.noise_like(p["layer.0.weight"], noise.tensor_seed(3, "layer.0.weight")))


def test_lowrank_noise_is_factor_product_with_unit_variance():
    w = torch.zeros(200, 150)
    eps = noise.noise_like(w, 11, rank=4)
    a, b = noise.lowrank_factors(w, 11, 4)
    torch.testing.assert_close(eps, a @ b.T / 2.0)
    assert torch.linalg.matrix_rank(eps) == 4
    assert abs(float(eps.std()) - 1.0) < 0.1
    v = torch.zeros(10)
    assert noise.noise_like(v, 11, rank=4).shape == (10,)  # 1-D stays full rank


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_exact_restore_200_cycles(dtype):
    p = _params(dtype)
    before = {k: v.clone() for k, v in p.items()}
    naive = {k: v.clone() for k, v in p.items()}
    misses = 0
    for cycle in range(200):
        sigma = 1e-2 if cycle % 2 else 1e-3
        sign = -1.0 if cycle % 3 == 0 else 1.0
        st = noise.perturb(p, member_seed=1000 + cycle, sigma=sigma, sign=sign)
        assert any(not torch.equal(p[k], before[k]) for k in p)  # perturbation happened
        misses += st.n_fixups
        noise.restore(p, st)
        # plain add-then-subtract, for contrast
        for k, w in naive.items():
            d = noise.noise_like(w, noise.tensor_seed(1000 + cycle, k)) * (sign * sigma)
            w.copy_(((w.float() + d).to(dtype).float() - d).to(dtype))
    for k in p:
        assert torch.equal(_bits(p[k]), _bits(before[k])), k
    assert misses > 0  # the fix-ups were needed ...
    assert any(not torch.equal(_bits(naive[k]), _bits(before[k])) for k in p)  # ... naive drifts


def test_lowrank_perturb_restore_exact():
    p = _params(torch.bfloat16)
    before = {k: v.clone() for k, v in p.items()}
    st = noise.perturb(p, 5, 0.02, rank=2)
    delta = (p["layer.0.weight"].float() - before["layer.0.weight"].float())
    eps = noise.noise_like(p["layer.0.weight"], noise.tensor_seed(5, "layer.0.weight"), rank=2)
    torch.testing.assert_close(delta, 0.02 * eps, atol=2e-3, rtol=0.02)
    noise.restore(p, st)
    for k in p:
        assert torch.equal(_bits(p[k]), _bits(before[k]))


def test_fixup_memory_is_sparse():
    p = _params(torch.bfloat16)
    st = noise.perturb(p, 1, 1e-3)
    total = sum(v.numel() for v in p.values())
    assert 0 < st.n_fixups < 0.15 * total
    assert st.nbytes == st.n_fixups * (4 + 2)
    noise.restore(p, st)


def test_update_matches_direct_formula():
    p = _params(torch.float32)
    before = {k: v.clone() for k, v in p.items()}
    seeds = [10, 10, 11, 11, 12, 12]  # antithetic pairs share a seed
    signs = [1, -1, 1, -1, 1, -1]
    rewards = [0.5, -0.2, 1.0, 0.3, -1.1, 0.0]
    weights = [r * s for r, s in zip(rewards, signs)]
    lr = 0.01
    norm = noise.update(p, seeds, weights, lr)
    sq = 0.0
    for k, w0 in before.items():
        step = sum(wt * noise.noise_like(w0, noise.tensor_seed(s, k)).double()
                   for s, wt in zip(seeds, weights)) * lr / len(seeds)
        torch.testing.assert_close(p[k].double(), w0.double() + step, atol=1e-7, rtol=0)
        sq += float(step.pow(2).sum())
    assert abs(norm - sq ** 0.5) < 1e-6 * max(1.0, sq ** 0.5)


def test_update_accumulates_in_fp32_then_casts_once():
    # a tiny step that would vanish if added member by member in bf16 must still be applied
    w = {"w": torch.ones(4096, dtype=torch.bfloat16)}
    seeds = list(range(32))
    weights = [1.0] * 32
    lr = 0.02  # per-member contribution ~ 6e-4 * eps << bf16 ulp(1) / 2 = 3.9e-3
    ref = torch.ones(4096, dtype=torch.float32)
    ref += sum(noise.noise_like(ref, noise.tensor_seed(s, "w")) for s in seeds) * (lr / 32)
    noise.update(w, seeds, weights, lr)
    assert torch.equal(w["w"], ref.to(torch.bfloat16))
    assert (w["w"] != 1).float().mean() > 0.3
    naive = torch.ones(4096, dtype=torch.bfloat16)  # member by member in bf16: mostly lost
    for s in seeds:
        naive += (noise.noise_like(naive, noise.tensor_seed(s, "w")) * (lr / 32)).to(torch.bfloat16)
    assert (naive != 1).float().mean() < 0.1


def test_lowrank_update_uses_the_same_factors():
    p = {"m": torch.zeros(30, 20)}
    noise.update(p, [1, 2], [1.0, -0.5], lr=2.0, rank=3)
    e1 = noise.noise_like(p["m"], noise.tensor_seed(1, "m"), rank=3)
    e2 = noise.noise_like(p["m"], noise.tensor_seed(2, "m"), rank=3)
    torch.testing.assert_close(p["m"], (e1 - 0.5 * e2), atol=1e-6, rtol=1e-6)
    assert torch.linalg.matrix_rank(p["m"]) == 6


def test_checksum_detects_one_ulp():
    p = _params(torch.bfloat16)
    c0 = noise.checksum(p)
    assert noise.checksum({k: v.clone() for k, v in p.items()}) == c0
    q = {k: v.clone() for k, v in p.items()}
    _bits(q["norm.weight"])[7] += 1  # one ulp
    assert noise.checksum(q) != c0


@pytest.mark.parametrize("rank", [None, 3])
def test_chunked_noise_is_consistent_and_exact(monkeypatch, rank):
    monkeypatch.setattr(noise, "CHUNK", 500)  # 64 x 48 = 3072 entries: 7 chunks (or row blocks)
    p = _params(torch.bfloat16)
    p["empty"] = torch.zeros(0, dtype=torch.bfloat16)
    before = {k: v.clone() for k, v in p.items()}
    name = "layer.0.weight"
    eps = noise.noise_like(p[name], noise.tensor_seed(4, name), rank)
    assert abs(float(eps.std()) - 1.0) < 0.1
    if rank is None:  # the chunked stream is not one long randn: it is its own definition
        pieces = list(noise._chunks(p[name], noise.tensor_seed(4, name)))
        assert len(pieces) == 7 and pieces[-1][1] == 3072
    else:
        a, b = noise.lowrank_factors(p[name], noise.tensor_seed(4, name), rank)
        torch.testing.assert_close(eps, a @ b.T / rank ** 0.5)
    for cycle in range(20):
        st = noise.perturb(p, 4 + cycle, 1e-2, rank=rank)
        noise.restore(p, st)
    assert all(torch.equal(_bits(p[k]), _bits(before[k])) for k in p)
    q = {k: v.float() for k, v in before.items()}
    noise.update(q, [1, 2, 3], [0.3, -0.7, 0.1], 0.5, rank=rank)
    for k, w0 in before.items():
        step = sum(c * noise.noise_like(w0, noise.tensor_seed(s, k), rank) for s, c in [(1, 0.3), (2, -0.7), (3, 0.1)])
        torch.testing.assert_close(q[k], w0.float() + step * 0.5 / 3, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("chunk", [None, 1000], ids=["one-chunk", "chunked"])
@pytest.mark.parametrize("whole", [False, True], ids=["tensors-perturbed", "parameters-swapped"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_perturbed_member_equals_in_place_perturb_and_restores_bitwise(monkeypatch, dtype, whole, chunk):
    """``noise.perturbed`` writes the bits the in-place ``perturb`` writes, over many cycles,
    and the swap that holds it (``Weights`` over whole nn.Parameters: each parameter pointed at
    the member's tensors, then back) restores exactly, to the original storage, as the sparse
    fix-ups do in place."""
    if chunk:
        monkeypatch.setattr(noise, "CHUNK", chunk)  # 64 x 48 = 3072 entries: several chunks
    g = torch.Generator().manual_seed(0)
    params = {n: (torch.randn(shape, generator=g) * 0.02).to(dtype)
              for n, shape in (("a.weight", (64, 48)), ("b.weight", (48,)), ("c.weight", (7, 5)))}
    if whole:
        params = {n: torch.nn.Parameter(w, requires_grad=False) for n, w in params.items()}
    twin = {n: w.detach().clone() for n, w in params.items()}
    original = {n: w.detach().clone() for n, w in params.items()}
    ptrs = {n: w.data_ptr() for n, w in params.items()}
    fast, slow = Weights(params), Weights(twin)
    assert fast.swap == whole and not slow.swap
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    for seed in range(200):
        sign = 1.0 if seed % 2 else -1.0
        ready = noise.perturbed(params, seed, 1e-2, sign)      # pure: params untouched
        fast.perturb(seed, 1e-2, sign)
        slow.perturb(seed, 1e-2, sign)
        # swapped: the live parameter now is other storage; in place: the same storage as before
        assert all((params[n].data_ptr() != ptrs[n]) == whole for n in params)
        assert all(torch.equal(params[n].view(bits), twin[n].view(bits)) for n in params)
        assert all(torch.equal(r.view(bits), twin[n].view(bits)) for r, n in zip(ready, params))
        fast.restore()
        slow.restore()
    assert all(torch.equal(params[n], original[n]) and torch.equal(twin[n], original[n]) for n in params)
    assert all(params[n].data_ptr() == ptrs[n] for n in params)   # the original storage is back


def test_weights_refuse_out_of_order_calls_and_swap_only_whole_host_parameters():
    w = {"a": torch.nn.Parameter(torch.zeros(5)), "b": torch.nn.Parameter(torch.zeros(3))}
    ops = Weights(w)
    with pytest.raises(RuntimeError, match="without a pending"):
        ops.restore()
    ops.perturb(1, 0.1)
    with pytest.raises(RuntimeError, match="twice"):
        ops.perturb(2, 0.1)
    with pytest.raises(RuntimeError, match="pending"):
        ops.update([1], [1.0], 0.1)
    ops.discard()                                   # a swapped member is undone
    assert not ops.pending and all(torch.equal(p, torch.zeros_like(p)) for p in w.values())
    views = torch.zeros(8)
    assert not Weights({"a": views[:5], "b": views[5:]}).swap                   # row views: in place
    mixed = {"a": torch.nn.Parameter(torch.zeros(2)), "b": torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))}
    assert not Weights(mixed).swap
    with pytest.raises(ValueError, match="swap needs"):
        Weights(mixed, swap=True)
