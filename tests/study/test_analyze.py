"""Mechanism analyses (esopt.study.analyses) on tiny-xs run directories with a planted update."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import run_cli, run_config, write_synthetic_sweep

from esopt import models
from esopt.cli.analyze import main as analyze_main
from esopt.core import store
from esopt.evaluator import evaluate
from esopt.study import analyses

PROBLEMS, SAMPLES = 16, 4
OPTS = dict(problems=PROBLEMS, samples=SAMPLES)


def scale_of(name: str) -> float:
    """Planted update: q_proj weights move 10x more than the rest; the final norm not at all."""
    if name == "model.norm.weight":
        return 0.0
    return 1.0 if "q_proj.weight" in name else 0.1


def make_run(root: Path, model: str = "tiny-xs", plant=scale_of, seed: int = 0, save: bool = True):
    """A real run directory (config.yaml through the config and the store) whose model/ is the
    base plus a planted random update (scale * mean|w| * N(0,1) per tensor)."""
    rc = run_config(f"model={model}", "algo=none", f"sweep.root={root}", f"eval.problems={PROBLEMS}",
                    f"eval.samples={SAMPLES}", check_data=False)
    rd = store.RunDir(root / "run")
    rd.create(rc.to_dict())
    if save:
        m, tok = models.load(model)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n, p in m.named_parameters():
                if plant(n):
                    p.add_(plant(n) * p.abs().mean() * torch.randn(p.shape, generator=g))
        models.save(m, tok, rd.model_dir)
    return rc, rd


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    torch.set_num_threads(1)
    return make_run(tmp_path_factory.mktemp("planted"))


def deltas(rd):
    """Full-tensor deltas (reference computation, tiny models only)."""
    base, _ = models.load("tiny-xs")
    trained, _ = models.load("tiny-xs", path=str(rd.model_dir))
    tp = dict(trained.named_parameters())
    return {n: (tp[n].detach() - b.detach()).float() for n, b in base.named_parameters()}, base, trained


def eval_counts(model, tok, rc, **kw):
    from esopt import engines, tasks

    task = tasks.get(rc.task, tokenizer=tok, style="compact")
    eng = engines.get({"name": "hf", "device": "cpu"}, model, tok)
    return evaluate(eng, task, split="heldout", problems=PROBLEMS, samples=SAMPLES,
                    temperature=rc.eval.temperature, seed=rc.eval.seed, greedy=False, entropy=False, **kw)


# ------------------------------------------------------------------------------------------
def test_rank_thresholds_exact_with_ties():
    """Histogram selection equals a full sort; ties are broken in stream order to keep exactly k."""
    g = torch.Generator().manual_seed(0)
    chunks = [torch.randn(1000, generator=g) * s for s in (1e-6, 1.0, 30.0)]
    chunks[1][:50] = 0.0                                       # zeros are not entries of the update
    chunks[2][10:20] = 0.5                                      # ten ties
    chunks[0][5:8] = 0.5                                        # three more ties, earlier in the stream
    allv = torch.cat(chunks).abs()
    nnz = int((allv != 0).sum())
    stream = lambda: (analyses.magnitude_bits(c) for c in chunks)  # noqa: E731
    for largest in (True, False):
        for f in (1.0, 0.5, 0.22, 0.01, 0.0):
            rule = analyses.make_rules(stream, nnz, [f], largest)[f]
            masks = [rule.mask(analyses.magnitude_bits(c)) for c in chunks]
            kept = torch.cat(masks)
            k = analyses.keep_count(f, nnz)
            assert int(kept.sum()) == k
            assert not kept[allv == 0].any()
            if 0 < k:
                nz = allv[allv != 0]
                ref = nz.sort(descending=largest).values[k - 1]    # the k-th largest / smallest
                if largest:
                    assert (allv[kept] >= ref).all() and (allv[~kept & (allv != 0)] <= ref).all()
                else:
                    assert (allv[kept] <= ref).all() and (allv[~kept & (allv != 0)] >= ref).all()
    # a threshold that falls on the tie value: the earlier ties (chunk 0) are kept first
    above = int((allv > 0.5).sum())
    rule = analyses.make_rules(stream, nnz, [(above + 4) / nnz], True)[(above + 4) / nnz]
    assert rule.thr == int(analyses.magnitude_bits(torch.tensor([0.5]))[0]) and rule.ties == 4
    masks = [rule.mask(analyses.magnitude_bits(c)) for c in chunks]
    assert masks[0][5:8].all() and masks[2][10:11].all() and not masks[2][11:20].any()


def test_keep_fractions_global_vs_per_tensor(planted):
    """On the planted update: global keeps the largest |delta| model-wide (mostly q_proj);
    per-tensor keeps round(f * nnz_t) of each tensor; smallest keeps the complement's end."""
    rc, rd = planted
    d, base, _ = deltas(rd)
    pair = analyses.open_pair(rd.path, device="cpu")
    nnz_t = analyses.count_nonzero(pair)
    assert nnz_t == {n: int((x != 0).sum()) for n, x in d.items()}
    assert nnz_t["model.norm.weight"] == 0
    nnz = sum(nnz_t.values())
    work, _ = models.load("tiny-xs", path=str(rd.model_dir))
    wp = dict(work.named_parameters())
    bp = dict(base.named_parameters())
    whole = lambda: (b for _, b in analyses.stream_bits(pair))  # noqa: E731
    f = 0.05                                               # 1,400 entries; q_proj weights hold 2,048
    k = analyses.keep_count(f, nnz)
    allabs = torch.cat([x.reshape(-1).abs() for x in d.values()])
    thr = allabs.sort(descending=True).values[k - 1]

    def kept_mask():
        return {n: (wp[n].detach() != bp[n].detach()) for n in d}

    # global
    rule = analyses.make_rules(whole, nnz, [f], True)[f]
    assert analyses.apply_rule(pair, wp, lambda n: rule) == k
    km = kept_mask()
    assert sum(int(m.sum()) for m in km.values()) == k
    for n, m in km.items():                               # exactly the entries with |delta| >= thr
        assert torch.equal(m, d[n].abs() >= thr), n
    q = sum(int(m.sum()) for n, m in km.items() if "q_proj.weight" in n)
    assert q / k > 0.5                                     # planted: q_proj holds most of the top 5%
    # per tensor
    per = {n: analyses.make_rules(lambda n=n: (b for _, b in analyses.stream_bits(pair, [n])), nnz_t[n], [f], True)[f]
           for n in d}
    analyses.apply_rule(pair, wp, lambda n: per[n])
    km = kept_mask()
    for n, m in km.items():
        kt = analyses.keep_count(f, nnz_t[n])
        assert int(m.sum()) == kt, n
        if kt:
            ref = d[n].abs().reshape(-1).sort(descending=True).values[kt - 1]
            assert torch.equal(m, d[n].abs() >= ref), n
    # smallest control: the k smallest nonzero entries
    rule = analyses.make_rules(whole, nnz, [f], False)[f]
    analyses.apply_rule(pair, wp, lambda n: rule)
    km = kept_mask()
    small = allabs[allabs != 0].sort().values[k - 1]
    for n, m in km.items():
        assert torch.equal(m, (d[n].abs() <= small) & (d[n] != 0)), n
    assert sum(int(m.sum()) for n, m in km.items() if "q_proj.weight" in n) / k < 0.05
    # weights are exactly trained where kept and exactly base elsewhere
    trained, _ = models.load("tiny-xs", path=str(rd.model_dir))
    tp = dict(trained.named_parameters())
    for n, m in km.items():
        assert torch.equal(wp[n].detach(), torch.where(m, tp[n].detach(), bp[n].detach()))


@pytest.fixture(scope="module")
def sparsity_result(planted):
    _, rd = planted
    return analyses.sparsity(rd.path, fractions=[1.0, 0.22, 0.0], control_fractions=[1.0, 0.22, 0.0],
                            opts=analyses.EvalOpts(**OPTS), device="cpu")


def test_sparsity_keep_all_is_trained_keep_nothing_is_base(planted, sparsity_result):
    rc, rd = planted
    r = sparsity_result
    assert json.loads((rd.path / "sparsity.json").read_text())["nnz"] == r["nnz"]
    base, btok = models.load("tiny-xs")
    trained, ttok = models.load("tiny-xs", path=str(rd.model_dir))
    b_ev, t_ev = eval_counts(base, btok, rc), eval_counts(trained, ttok, rc)
    assert b_ev["correct_counts"] != t_ev["correct_counts"]       # the planted update changes behaviour
    assert r["trained_counts"] == t_ev["correct_counts"] and r["base_counts"] == b_ev["correct_counts"]
    by = {(c["mode"], c["keep"]): c for c in r["curves"]}
    assert set(by) == {(m, f) for m in analyses.MODES for f in (1.0, 0.22, 0.0)}
    for mode in analyses.MODES:
        assert by[(mode, 1.0)]["correct_counts"] == t_ev["correct_counts"], mode
        assert by[(mode, 1.0)]["kept"] == r["nnz"]
        assert by[(mode, 0.0)]["correct_counts"] == b_ev["correct_counts"], mode
        assert by[(mode, 0.0)]["kept"] == 0
        assert by[(mode, 1.0)]["share_pass@1"] == pytest.approx(1.0)
        assert by[(mode, 0.0)]["share_pass@1"] == pytest.approx(0.0)
    assert by[("global", 0.22)]["kept"] == analyses.keep_count(0.22, r["nnz"])
    assert r["nnz"] == r["n_params"] - 32                          # the final norm did not move
    # share = (pruned - base) / (trained - base) on Pass@1, with an interval around it
    c = by[("global", 0.22)]
    gain = t_ev["pass@k"]["1"] - b_ev["pass@k"]["1"]
    assert c["share_pass@1"] == pytest.approx((c["pass@1"] - b_ev["pass@k"]["1"]) / gain)
    lo, hi = c["share_pass@1_ci"]
    assert lo <= hi and r["headline"]["keep"] == 0.22 and r["headline"]["share_pass@1"] == c["share_pass@1"]
    assert r["headline"]["smallest_share_pass@1"] == by[("smallest", 0.22)]["share_pass@1"]
    assert r["gain"]["pass@1"] == pytest.approx(gain)
    # the controls: a random mask of the same size (seed = the run's), as is and at the top-k norm
    assert r["mask_seed"] == rc.seed and r["control_fractions"] == [1.0, 0.22, 0.0]
    for mode in analyses.CONTROL_MODES:
        c = by[(mode, 0.22)]
        assert c["kept"] == analyses.keep_count(0.22, r["nnz"]) and c["mask_seed"] == rc.seed
        assert r["headline"][f"{mode}_share_pass@1"] == c["share_pass@1"]
        assert by[(mode, 1.0)]["scale"] == 1.0 and by[(mode, 1.0)]["topk_norm"] == by[(mode, 1.0)]["random_norm"]
    assert by[("random", 0.22)]["scale"] == 1.0
    c = by[("equal_norm", 0.22)]
    assert c["scale"] == pytest.approx(c["topk_norm"] / c["random_norm"]) and c["scale"] > 1.5


def mask_of(pair, rule, key=analyses.magnitude_key):
    """The rule's keep mask over the whole model, in stream order (a fresh copy of the rule)."""
    rule = rule.copy()
    return torch.cat([rule.mask(bits).reshape(-1) for _, bits in analyses.stream_bits(pair, key=key)])


def random_rule(pair, nnz, f, seed):
    key = analyses.random_key(seed)
    return analyses.make_rules(lambda: (b for _, b in analyses.stream_bits(pair, key=key)), nnz, [f], True)[f], key


def test_random_mask_exact_k_seeded_and_blind_to_delta(planted):
    """random: exactly k = round(f * nnz) nonzero entries; the same seed gives the same mask bit
    for bit, another seed another (overlap ~ f k, as for independent draws); it ignores |delta|:
    the planted q_proj (10x the update) gets its share of the entries, where global takes most."""
    _, rd = planted
    d, _, _ = deltas(rd)
    pair = analyses.open_pair(rd.path, device="cpu")
    nnz = sum(analyses.count_nonzero(pair).values())
    flat = torch.cat([d[n].reshape(-1) for n, _ in pair.base_params])
    is_q = torch.cat([torch.full((d[n].numel(),), "q_proj.weight" in n) for n, _ in pair.base_params])
    for f in (1.0, 0.5, 0.22, 0.01, 0.0):
        rule, key = random_rule(pair, nnz, f, seed=3)
        m = mask_of(pair, rule, key)
        assert int(m.sum()) == analyses.keep_count(f, nnz) and not m[flat == 0].any(), f
    f = 0.22
    k = analyses.keep_count(f, nnz)
    m3, m3b, m4 = (mask_of(pair, *random_rule(pair, nnz, f, seed)) for seed in (3, 3, 4))
    assert torch.equal(m3, m3b) and not torch.equal(m3, m4)
    assert abs(int((m3 & m4).sum()) / k - f) < 0.03
    p_q = float(is_q[flat != 0].float().mean())
    assert abs(float(is_q[m3].float().mean()) - p_q) < 4 * math.sqrt(p_q * (1 - p_q) / k)
    top = mask_of(pair, analyses.make_rules(lambda: (b for _, b in analyses.stream_bits(pair)), nnz, [f], True)[f])
    assert float(is_q[top].float().mean()) > 2 * p_q


def test_every_mode_keeps_all_or_nothing_bitwise_and_equal_norm_norm(planted):
    """f = 1 is the trained model and f = 0 the base, bit for bit, in every mode (equal_norm
    included: c = 1 there, no arithmetic); at 0.22 random is where(R, trained, base) and
    equal_norm moves the same entries by c * delta, its update's norm the top-k update's."""
    from esopt.study.analyses.sparsity import apply_mode, mode_rules

    _, rd = planted
    d, base, trained = deltas(rd)
    pair = analyses.open_pair(rd.path, device="cpu")
    nnz_t = analyses.count_nonzero(pair)
    nnz = sum(nnz_t.values())
    fr = [1.0, 0.22, 0.0]
    rules = mode_rules(pair, analyses.MODES, fr, nnz_t, fr, seed=5)
    work, _ = models.load("tiny-xs")
    wp = dict(work.named_parameters())
    bp, tp = ({n: p.detach() for n, p in m.named_parameters()} for m in (base, trained))
    for mode in analyses.MODES:
        for f, ref in ((1.0, tp), (0.0, bp)):
            with torch.no_grad():
                for p in wp.values():
                    p.fill_(float("nan"))                  # every entry must be written
            kept, _ = apply_mode(pair, wp, rules, mode, f, 5, nnz)
            assert kept == (nnz if f else 0), (mode, f)
            for n in d:
                assert torch.equal(wp[n].detach(), ref[n]), (mode, f, n)
    k = analyses.keep_count(0.22, nnz)
    kept, info = apply_mode(pair, wp, rules, "random", 0.22, 5, nnz)
    r_mask = {n: wp[n].detach() != bp[n] for n in d}
    assert kept == k and sum(int(m.sum()) for m in r_mask.values()) == k and info["scale"] == 1.0
    for n in d:
        assert torch.equal(wp[n].detach(), torch.where(r_mask[n], tp[n], bp[n])), n
    kept, info = apply_mode(pair, wp, rules, "equal_norm", 0.22, 5, nnz)
    upd = {n: (wp[n].detach() - bp[n]).double() for n in d}
    assert kept == k and all(torch.equal(upd[n] != 0, r_mask[n]) for n in d)
    allabs = torch.cat([x.reshape(-1).abs() for x in d.values()]).double()
    top = allabs.sort(descending=True).values[:k]
    top_norm = float(top.square().sum().sqrt())
    rnd_norm = math.sqrt(sum(float(d[n][r_mask[n]].double().square().sum()) for n in d))
    assert info["topk_norm"] == pytest.approx(top_norm, rel=1e-9)
    assert info["random_norm"] == pytest.approx(rnd_norm, rel=1e-9)
    assert info["scale"] == pytest.approx(top_norm / rnd_norm, rel=1e-9) and info["scale"] > 1.5
    new_norm = math.sqrt(sum(float(u.square().sum()) for u in upd.values()))
    assert new_norm == pytest.approx(top_norm, rel=1e-5)    # float32 rounding of base + c * delta
    assert new_norm != pytest.approx(rnd_norm, rel=0.1)


def test_gain_share_and_paired_change_math():
    base = np.array([0.0, 0.0, 0.5, 1.0])
    trained = np.array([1.0, 0.5, 0.5, 1.0])
    pruned = np.array([0.5, 0.5, 0.5, 1.0])
    share, ci = analyses.gain_share(base, trained, pruned, n_boot=500)
    assert share == pytest.approx(2 / 3)
    assert 0.0 <= ci[0] <= share <= ci[1] <= 1.0
    assert analyses.gain_share(base, base, pruned) == (None, None)
    v, (lo, hi) = analyses.paired_change(base, trained)
    assert v == pytest.approx(0.375) and lo <= v <= hi
    v, (lo, hi) = analyses.paired_change(base, base)
    assert v == lo == hi == 0.0


def test_drift_module_decomposition(planted):
    rc, rd = planted
    r = analyses.drift(rd.path, device="cpu")
    d, base, _ = deltas(rd)
    bp = dict(base.named_parameters())
    dsq = sum(float(x.double().pow(2).sum()) for x in d.values())
    bsq = sum(float(p.detach().double().pow(2).sum()) for p in bp.values())
    assert r["delta_sq"] == pytest.approx(dsq, rel=1e-9) and r["base_sq"] == pytest.approx(bsq, rel=1e-9)
    assert r["relative"] == pytest.approx(math.sqrt(dsq / bsq), rel=1e-9)
    mods = r["modules"]
    assert sum(m["delta_sq"] for m in mods.values()) == pytest.approx(r["delta_sq"], rel=1e-12)
    assert sum(m["base_sq"] for m in mods.values()) == pytest.approx(r["base_sq"], rel=1e-12)
    assert sum(m["contrib"] for m in mods.values()) == pytest.approx(r["relative"] ** 2, rel=1e-9)
    assert sum(m["n"] for m in mods.values()) == r["n_params"] == sum(p.numel() for p in bp.values())
    assert sum(x["delta_sq"] for x in r["layers"]) == pytest.approx(r["delta_sq"], rel=1e-12)
    q = d["model.layers.0.self_attn.q_proj.weight"].double().pow(2).sum() + \
        d["model.layers.1.self_attn.q_proj.weight"].double().pow(2).sum() + \
        d["model.layers.0.self_attn.q_proj.bias"].double().pow(2).sum() + \
        d["model.layers.1.self_attn.q_proj.bias"].double().pow(2).sum()
    assert mods["attn_q"]["delta_sq"] == pytest.approx(float(q), rel=1e-9)
    assert set(mods) == {"embeddings", "attn_q", "attn_k", "attn_v", "attn_o", "mlp", "norm"}
    assert r["tied_embeddings"] is True and "lm_head" not in mods
    # the largest 1% of updates: exactly k entries, mostly in the planted q_proj
    assert sum(m["top"] for m in mods.values()) == r["top_k"] == analyses.keep_count(0.01, r["nnz"])
    assert r["top_module"] == "attn_q" and mods["attn_q"]["top_enrichment"] > 3
    layers = {x["layer"] for x in r["layers"]}
    assert layers == {"0", "1", "none"}
    assert json.loads((rd.path / "drift.json").read_text())["relative"] == pytest.approx(r["relative"])
    # claim 9's measures: the update's l2 norm and its top-22% share of the squared norm (a full sort)
    flat = torch.cat([x.reshape(-1) for x in d.values()]).double()
    mags = flat[flat != 0].abs().sort(descending=True).values
    k22 = analyses.keep_count(0.22, r["nnz"])
    assert r["update_l2"] == pytest.approx(math.sqrt(dsq), rel=1e-9)
    assert r["update_top_share"] == pytest.approx(float(mags[:k22].square().sum()) / dsq, rel=1e-6)
    assert 0.22 < r["update_top_share"] < 1


def test_module_type_and_layer_names():
    mt, lay = analyses.module_type, analyses.layer_of
    assert mt("model.embed_tokens.weight") == "embeddings" and lay("model.embed_tokens.weight") == "none"
    assert mt("lm_head.weight") == "lm_head"
    assert mt("model.layers.3.self_attn.q_proj.bias") == "attn_q" and lay("model.layers.3.self_attn.q_proj.bias") == "3"
    assert mt("model.layers.3.self_attn.o_proj.weight") == "attn_o"
    assert mt("model.layers.12.mlp.down_proj.weight") == "mlp" and lay("model.layers.12.mlp.down_proj.weight") == "12"
    assert mt("model.layers.0.post_attention_layernorm.weight") == "norm"
    assert mt("model.norm.weight") == "norm"
    assert mt("transformer.h.2.attn.c_attn.weight") == "attn_qkv" and lay("transformer.h.2.attn.c_attn.weight") == "2"


def test_drift_side_by_side(planted, tmp_path, capsys):
    """Two runs: drift.json in each, a comparison with the ratio of their relative drifts."""
    _, rd = planted
    _, rd2 = make_run(tmp_path, plant=lambda n: 0.02 if n != "model.norm.weight" else 0.0, seed=1)
    out = tmp_path / "cmp.json"
    assert analyze_main(["drift", str(rd.path), str(rd2.path), "--out", str(out)]) == 0
    cmp = json.loads(out.read_text())
    r1 = json.loads((rd.path / "drift.json").read_text())
    r2 = json.loads((rd2.path / "drift.json").read_text())
    assert [x["label"] for x in cmp["runs"]] == ["none", "none#2"]
    assert cmp["ratio_to_first"]["none#2"] == pytest.approx(r2["relative"] / r1["relative"])
    assert cmp["ratio_to_first"]["none#2"] < 0.5
    assert cmp["modules"]["attn_q"]["none"] == pytest.approx(r1["modules"]["attn_q"]["relative"])
    text = capsys.readouterr().out
    assert "attn_q" in text and "ratio to none" in text and "tied" in text


def test_forgetting_on_synthetic_tasks(planted):
    rc, rd = planted
    assert analyses.default_tasks(rc) == ["addition", "compare", "reverse"]
    r = analyses.forgetting(rd.path, opts=analyses.EvalOpts(problems=8, samples=2, greedy=True), device="cpu")
    saved = json.loads((rd.path / "forgetting.json").read_text())
    assert set(saved["tasks"]) == {"addition", "compare", "reverse"} and saved["trained_task"] == "countdown"
    for name, t in r["tasks"].items():
        assert t["n_problems"] == 8 and len(t["base_counts"]) == len(t["trained_counts"]) == 8
        diff = (np.array(t["trained_counts"]) - np.array(t["base_counts"])) / 2
        assert t["change"]["pass@1"] == pytest.approx(diff.mean())
        assert t["change"]["pass@1"] == pytest.approx(t["trained"]["pass@1"] - t["base"]["pass@1"])
        lo, hi = t["change"]["pass@1_ci"]
        assert lo <= t["change"]["pass@1"] <= hi
        g = np.array(t["trained_greedy"]) - np.array(t["base_greedy"])
        assert t["change"]["greedy"] == pytest.approx(g.mean())
    assert r["mean_change"]["pass@1"] == pytest.approx(np.mean([t["change"]["pass@1"] for t in r["tasks"].values()]))
    # the base evaluated here is the shipped model: same counts as evaluating it directly
    from esopt import engines, tasks

    base, tok = models.load("tiny-xs")
    task = tasks.get(analyses.task_config("reverse"), tokenizer=tok, style="compact")
    ev = evaluate(engines.get({"name": "hf", "device": "cpu"}, base, tok), task, split="heldout", problems=8,
                  samples=2, temperature=rc.eval.temperature, seed=rc.eval.seed, greedy=True, entropy=False)
    assert ev["correct_counts"] == r["tasks"]["reverse"]["base_counts"]


def test_bad_input_is_one_line(tmp_path, planted, capsys):
    _, empty = make_run(tmp_path / "nomodel", save=False)
    assert analyze_main(["sparsity", str(empty.path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("esopt: error: ") and "no trained model" in err[0]
    assert analyze_main(["drift", str(tmp_path / "nowhere")]) == 2
    assert "not a run directory" in capsys.readouterr().err
    _, rd = planted
    assert analyze_main(["forgetting", str(rd.path), "--base", "tiny-s"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not match base tiny-s" in err[0] and "model.embed_tokens.weight" in err[0]
    assert analyze_main(["sparsity", str(rd.path), "--modes", "global,bogus"]) == 2
    assert "unknown sparsity mode" in capsys.readouterr().err
    assert analyze_main(["sparsity", str(rd.path), "--mask-seed", "-1"]) == 2
    assert "--mask-seed must be an integer >= 0" in capsys.readouterr().err
    assert analyze_main(["sparsity", str(rd.path), "--control-fractions", "1.5"]) == 2
    assert "--control-fractions must be in [0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        analyze_main(["sparsity", str(rd.path), "--fractions", "a,b"])
    assert e.value.code == 2


def test_cli_mismatch_exit_2(planted):
    _, rd = planted
    p = run_cli("esopt.analyze", "drift", str(rd.path), "--base", "tiny-s")
    assert p.returncode == 2
    lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("esopt: error: ") and "does not match" in lines[0], p.stderr


def test_run_analyses_hook(planted, tmp_path):
    rc, rd = planted
    out = analyses.run_analyses(rc, rd.path, ["drift"])
    assert out == {"drift": str(rd.path / "drift.json")}
    _, empty = make_run(tmp_path / "nomodel", save=False)
    out = analyses.run_analyses(rc, empty.path, ["drift"])
    assert "no trained model" in out["drift"]["error"]
    with pytest.raises(analyses.ConfigError, match="unknown analysis"):
        analyses.run_analyses(rc, rd.path, ["bogus"])


def test_aggregator_columns_and_page_figures(planted, sparsity_result, tmp_path):
    """sparsity.json / drift.json beside runs become columns and the page's sparsity and drift
    figures (mean over runs per algorithm)."""
    from esopt.study.report import page as report
    from esopt.study.report.aggregate import aggregate

    _, rd = planted
    drift = json.loads((rd.path / "drift.json").read_text()) if (rd.path / "drift.json").exists() \
        else analyses.drift(rd.path, device="cpu")
    root = tmp_path / "sweep"
    write_synthetic_sweep(root, models={"tiny-xs": 3e4, "tiny-s": 1e5}, pops=(8,), seeds=(0, 1),
                                    algos=("es", "grpo"), iterations=2, eval_every=2, problems=10, samples=4)
    scale = {"es": 1.0, "grpo": 0.5}
    written = {}
    for d in sorted((root / "runs").iterdir()):
        s = json.loads((d / "summary.json").read_text())
        if s["model"]["name"] != "tiny-xs" or s["algo"] not in scale:
            continue
        sp = json.loads(json.dumps(sparsity_result))
        for c in sp["curves"]:
            c["share_pass@1"] = c["keep"] * scale[s["algo"]] * (1 + s["seed"])
        (d / "sparsity.json").write_text(json.dumps(sp))
        dr = dict(drift, relative=drift["relative"] * scale[s["algo"]] * (1 + s["seed"]))
        (d / "drift.json").write_text(json.dumps(dr))
        written.setdefault(s["algo"], []).append(d.name)
    agg = aggregate(root, bootstrap=50)
    runs = agg.runs.set_index("run_id")
    rid = written["es"][0]
    assert runs.loc[rid, "sparsity_nnz"] == sparsity_result["nnz"]
    assert runs.loc[rid, "sparsity_headline.keep"] == 0.22
    assert runs.loc[rid, "drift_modules.attn_q.relative"] == pytest.approx(drift["modules"]["attn_q"]["relative"])
    assert runs["sparsity_nnz"].notna().sum() == 4
    grpo = written["grpo"][0]                                   # claim 9's columns, GRPO's too
    assert runs.loc[grpo, "update_l2"] == pytest.approx(drift["update_l2"])
    assert runs.loc[grpo, "update_top_share"] == pytest.approx(drift["update_top_share"])
    assert runs["update_top_share"].notna().sum() == 4
    html = (root / "report.html").read_text()
    assert {"fig-sparsity", "fig-drift", "fig-drift-top"} <= set(report.figure_ids(html))
    fig = report.figure_data(html, "fig-sparsity")
    means = {(t["meta"]["algo"], t["meta"]["mode"]): t for t in fig["data"] if t["meta"]["kind"] == "mean"}
    assert set(means) == {(a, m) for a in ("es", "grpo") for m in analyses.MODES}
    t = means[("grpo", "global")]
    assert list(t["x"]) == [0.22, 1.0]                       # keep 0 is off the log axis
    assert list(t["y"]) == pytest.approx([0.22 * 0.5 * 1.5, 1.0 * 0.5 * 1.5])   # mean over seeds 0, 1
    bars = {t["name"]: t for t in report.figure_data(html, "fig-drift")["data"]}
    assert list(bars["es"]["x"])[:2] == ["overall", "embeddings"]
    assert bars["es"]["y"][0] == pytest.approx(drift["relative"] * 1.5)
    assert bars["es"]["y"][0] / bars["grpo"]["y"][0] == pytest.approx(2.0)
    import plotly.graph_objects as go

    for fid in ("fig-sparsity", "fig-drift", "fig-drift-top"):     # Plotly's schema accepts them
        raw = re.search(rf'data-figure="{fid}">(.*?)</script>', html, re.S).group(1)
        go.Figure(json.loads(raw))


def test_claim5_is_decided_with_the_default_sparsity_controls(tmp_path):
    """The analysis a run's analysis=[sparsity] runs (its default modes) writes the controls at
    the headline keep 0.22 (claim 5's test needs the equal-norm one), so claim 5 on ES runs with
    those sparsity.json files is measured, not "unclear: data"; without the control curves it is
    "unclear: data", naming the equal-norm control it needs."""
    from esopt.study import claims as C

    assert "random" in analyses.MODES and analyses.CONTROL_FRACTIONS == (analyses.HEADLINE_KEEP,)
    real = []
    for seed in range(3):                                  # three planted updates, one per ES seed
        rc, rd = make_run(tmp_path / f"planted{seed}", seed=seed)
        out = analyses.run_analyses(rc, rd.path, ["sparsity"], {"fractions": [0.22], "bootstrap": 50})
        real.append(json.loads(Path(out["sparsity"]).read_text()))
        assert {(c["mode"], c["keep"]) for c in real[-1]["curves"]} == {(m, 0.22) for m in analyses.MODES}
    root = tmp_path / "sweep"
    write_synthetic_sweep(root, models={"tiny-xs": 3e4}, pops=(8,), seeds=(0, 1, 2), algos=("es", "grpo"),
                          iterations=2, eval_every=2, problems=10, samples=4)

    def claim5(strip: bool) -> dict:
        es = sorted(d for d in (root / "runs").iterdir() if d.name.startswith("es-"))
        assert len(es) == 3
        for d, sp in zip(es, real):
            sp = dict(sp, curves=[c for c in sp["curves"] if not (strip and c["mode"] in analyses.CONTROL_MODES)])
            (d / "sparsity.json").write_text(json.dumps(sp))
        return next(c for c in C.claims(root, n_boot=50)["claims"] if c["id"] == 5)

    row = claim5(strip=False)
    assert row["unclear"] != "data" and row["effect"] is not None, row
    assert row["details"]["control"]["effect"] is not None
    row = claim5(strip=True)
    assert row["unclear"] == "data" and "an equal-norm control at keep 0.22" in row["reason"], row


def test_compare_drift_ratio_reads_the_registry_family():
    """ES / GRPO drift: the first run of each claims family (registry ``family``), whatever the
    labels; a sequence (family "sequence") and a second ES run do not change it."""
    def res(algo, rel):
        return {"algo": algo, "run_dir": f"/r/{algo}", "relative": rel, "top_module": None, "modules": {}}

    cmp = analyses.compare_drift([res("es_grpo", 9.0), res("es", 4.0), res("grpo", 0.1), res("es", 8.0)])
    assert cmp["es_over_grpo"] == pytest.approx(40.0)
    assert [r["label"] for r in cmp["runs"]] == ["es_grpo", "es", "grpo", "es#2"]
    assert "es_over_grpo" not in analyses.compare_drift([res("es", 4.0), res("none", 0.0)])


def test_connectivity_between_two_runs_of_one_base(planted, tmp_path, capsys):
    """Claim 11's analysis. It needs a model: it evaluates interpolated weights, and t = 0 / 1 must
    be the two trained models exactly (so their Pass@1 equals a plain evaluation of each). Two tiny-xs
    runs from the same base with different planted updates stand for a seed's ES and GRPO runs;
    the cosine is checked against full-tensor deltas, the barrier against the straight line."""
    rc, es = planted
    _, grpo = make_run(tmp_path / "other", seed=1, plant=lambda n: 0.0 if n == "model.norm.weight" else 0.1)
    opts = analyses.EvalOpts(problems=PROBLEMS, samples=SAMPLES)
    r = analyses.connectivity(es.path, grpo.path, device="cpu", opts=opts)
    assert [p["t"] for p in r["points"]] == [0.0, 0.25, 0.5, 0.75, 1.0]
    d_es, base, _ = deltas(es)
    d_gr, _, _ = deltas(grpo)
    dot = sum(float((d_es[n].double() * d_gr[n].double()).sum()) for n in d_es)
    n_es = math.sqrt(sum(float(x.double().square().sum()) for x in d_es.values()))
    n_gr = math.sqrt(sum(float(x.double().square().sum()) for x in d_gr.values()))
    assert r["cosine"] == pytest.approx(dot / (n_es * n_gr), rel=1e-9) and abs(r["cosine"]) < 0.05  # independent noise
    assert r["es_l2"] == pytest.approx(n_es, rel=1e-9)
    for path, p in ((es.model_dir, r["points"][0]), (grpo.model_dir, r["points"][-1])):
        m, tok = models.load("tiny-xs", path=str(path))
        assert p["correct_counts"] == eval_counts(m, tok, rc)["correct_counts"]       # the end points, exactly
    inner = [p for p in r["points"] if 0 < p["t"] < 1]
    assert r["barrier"] == pytest.approx(max(p["line"] - p["pass@1"] for p in inner))
    saved = json.loads((es.path / "connectivity.json").read_text())
    assert saved["barrier"] == pytest.approx(r["barrier"]) and saved["grpo_run"] == str(grpo.path.resolve())
    assert analyze_main(["connectivity", str(es.path), str(es.path)]) == 2              # the same run twice
    assert "two different runs" in capsys.readouterr().err
    assert analyze_main(["connectivity", str(es.path)]) == 2
    assert "an ES run and a GRPO run" in capsys.readouterr().err
    # in a sweep (analysis=[connectivity]): the second of the pair computes it, into both folders
    import shutil

    runs = tmp_path / "sweep" / "runs"
    for name, src, algo in (("es-0", es.path, "es"), ("grpo-0", grpo.path, "grpo")):
        shutil.copytree(src, runs / name, ignore=shutil.ignore_patterns("connectivity.json"))
        (runs / name / "summary.json").write_text(json.dumps({"status": "completed", "algo": algo, "seed": 0,
                                                              "model": {"name": "tiny-xs"}}))
    out = analyses.run_analyses(rc, runs / "grpo-0", ["connectivity"], opts={"device": "cpu"})
    assert out == {"connectivity": str(runs / "grpo-0" / "connectivity.json")}
    again = json.loads((runs / "es-0" / "connectivity.json").read_text())
    assert again["cosine"] == pytest.approx(r["cosine"]) and (runs / "grpo-0" / "connectivity.json").exists()
    capsys.readouterr()
    assert analyze_main(["connectivity", "--sweep", str(tmp_path / "sweep"), "--ts", "0.5", "--no-write",
                         "--problems", str(PROBLEMS), "--samples", str(SAMPLES), "--device", "cpu"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[0].endswith("es-0") and row[1].endswith("grpo-0") and float(row[6]) == pytest.approx(r["cosine"], abs=1e-3)
    assert float(row[2]) == pytest.approx(r["es_pass@1"], abs=1e-3)  # same seeds: the pair evaluated again


def test_connectivity_pairs_a_sweeps_es_and_grpo_runs_by_seed(tmp_path):
    """partners / partner_of read only summary.json (no model): plain ES with GRPO of the same model
    and seed, anchored ES left out (another arm), a run without its partner yet a one-line error."""
    runs = tmp_path / "runs"

    def fake(name, algo, seed, decay=0.0, saved=True, status="completed"):
        d = runs / name
        (d / "model").mkdir(parents=True)
        if saved:
            (d / "model" / "config.json").write_text("{}")
        (d / "summary.json").write_text(json.dumps({
            "status": status, "algo": algo, "seed": seed, "model": {"name": "tiny-xs"},
            "config": {"es": {"anchor_decay": decay}}}))
        return d

    es0, grpo0 = fake("a-es-0", "es", 0), fake("b-grpo-0", "grpo", 0)
    fake("c-es-anchor-0", "es", 0, decay=0.01)
    es1 = fake("d-es-1", "es", 1)
    fake("e-grpo-1", "grpo", 1, status="running")
    fake("f-none-0", "none", 0)
    assert analyses.partners(runs) == [(es0, grpo0)]
    assert analyses.partner_of(grpo0) == (es0, grpo0)
    with pytest.raises(analyses.ConfigError, match="no finished GRPO run of model tiny-xs seed 1"):
        analyses.partner_of(es1)
    with pytest.raises(analyses.ConfigError, match="pairs plain ES with GRPO"):
        analyses.partner_of(runs / "c-es-anchor-0")


def test_connectivity_sweep_option_reads_a_folder_given_as_text(tmp_path, capsys):
    """``--sweep DIR`` arrives as a string; a sweep without a pair, or no folder, is one line and exit 2
    (it was an AttributeError, exit 1, on any folder)."""
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "summary.json").write_text(json.dumps({"status": "completed", "algo": "es"}))
    assert analyze_main(["connectivity", "--sweep", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"esopt: error: no ES/GRPO seed pair with saved models in {tmp_path}"
    assert analyze_main(["connectivity", "--sweep", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("esopt: error: no such directory")
