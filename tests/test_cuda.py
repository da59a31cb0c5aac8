"""esopt on a CUDA GPU in bf16 (``python -m pytest -m cuda tests/test_cuda.py``, or
``bash scripts/gpu_check.sh``): ES's in-place noise and bitwise restore, its update against the
formula, the batched population against members alone, GRPO's fp32 masters, two ranks.

Skipped with a reason without a GPU (``ESOPT_REQUIRE_CUDA=1``, set by scripts/gpu_check.sh, makes a
skip fail). ``ESOPT_GPU_CHECK_CPU=1`` (scripts/gpu_check.sh --cpu, CI's smoke run) runs the same
tests on the CPU, so that they cannot rot between GPU runs; there they check the CPU's own path.
"""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from esopt import noise
from esopt.algorithms import es
from esopt.engines import population
from esopt.engines.hf import HFEngine
from esopt.engines.weights import Weights
from esopt.models.tiny import char_tokenizer
from helpers import REPO, SevensTask, require, tiny_model

pytestmark = pytest.mark.cuda

BF16 = torch.bfloat16
PROMPTS = ["3 7 2=23:", "1 2 3=6:", "12 4 5=9:"]
MEMBERS = [(11, 1.0), (11, -1.0), (12, 1.0), (13, 1.0)]


def on_cpu() -> bool:
    return os.environ.get("ESOPT_GPU_CHECK_CPU", "") not in ("", "0")


@pytest.fixture(scope="module")
def device() -> str:
    if on_cpu():
        return "cpu"
    require("cuda", None if torch.cuda.is_available() else
            "no CUDA GPU (bash scripts/gpu_check.sh on a GPU machine: docs/gpu_check.md)")
    return "cuda"


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().view(torch.int16 if t.element_size() == 2 else torch.int32).to("cpu", copy=True)


def big_tensor(device) -> torch.Tensor:
    """A bf16 tensor of more than one noise chunk (noise.CHUNK elements), weights ~ N(0, 0.02)."""
    g = torch.Generator().manual_seed(1)
    return (torch.randn(noise.CHUNK + 12345, generator=g) * 0.02).to(device=device, dtype=BF16)


def test_es_members_restore_bitwise_in_bf16(device):
    """Members perturbed in place in bf16 (the GPU's mode: no swapped copy of the weights) and
    restored leave every bit as it was, for two members, on the tiny
    model's tensors and one of more than one noise chunk. Each member moved most weights, and the
    sparse fix-ups (noise.py: fl(w' - d) misses w by an ulp for some entries) were needed."""
    engine = HFEngine(tiny_model(), char_tokenizer(), device=device, dtype="bfloat16")
    assert engine.weights().swap == (device == "cpu")  # on the GPU: in place, sparse fix-ups
    params = list(engine.named_parameters()) + [("big", big_tensor(device))]
    ops = Weights(params, swap=False)
    before = [bits(w) for _, w in params]
    held = []
    for seed, sign in [(5, 1.0), (6, -1.0)]:
        held.append(ops.perturb(seed, 1e-3, sign))
        moved = sum(int((bits(w) != b).sum()) for (_, w), b in zip(params, before))
        assert moved > 0.5 * sum(b.numel() for b in before)
        ops.restore()
        assert all(torch.equal(bits(w), b) for (_, w), b in zip(params, before))
    assert min(held) > 0  # fix-ups were recorded (and applied) for every member


def test_es_iteration_is_reproducible_bit_for_bit(device):
    """Two ES iterations from the same bf16 weights with the same seeds give the same rewards and
    the same weights, bit for bit: what lets every rank apply one update without sending weights
    (esopt/algorithms/distributed.py). The iterations do move the weights."""
    task = SevensTask({})
    rows = list(task.split("train"))
    cfg = es.ESRun(pop=4, sigma=0.05, lr=0.08, batch_size=8, seed=0)
    outcomes = []
    for _ in range(2):
        engine = HFEngine(tiny_model(), char_tokenizer(), device=device, dtype="bfloat16")
        start = noise.checksum(engine.named_parameters())
        log = [es.es_step(engine, task, rows, cfg, it) for it in (1, 2)]
        outcomes.append((noise.checksum(engine.named_parameters()), [x["rewards"] for x in log]))
        assert outcomes[-1][0] != start and all(x["update_norm"] > 0 for x in log)
    assert outcomes[0] == outcomes[1]


def test_es_update_is_the_formula_to_bf16_rounding(device):
    """``theta += lr/N sum_i w_i eps_i`` on the device in bf16 equals the formula evaluated in
    fp64 on the CPU from the device's own noise (noise.noise_like there, moved over) and cast once
    to bf16: every entry within one bf16 step of it (plus fp32's rounding of the sum where its terms
    cancel), all but a few equal. The noise stream is per
    device type (esopt/noise.py: a CUDA generator does not draw a CPU generator's numbers), so
    "the same update as on the CPU" is this arithmetic on the same seeds, not the same draws."""
    params = dict(tiny_model().to(device=device, dtype=BF16).named_parameters())
    params["big"] = big_tensor(device)
    base = {k: w.detach().clone() for k, w in params.items()}
    seeds, weights, lr = [3, 3, 5, 8], [0.7, -0.2, 1.1, -0.4], 0.05
    norm = Weights(params.items(), swap=False).update(seeds, weights, lr)
    coef = noise.member_coefficients(seeds, weights)
    moved = differ = total = 0
    for name, w0 in base.items():
        step = sum(c * noise.noise_like(w0, noise.tensor_seed(s, name)).cpu().double() for s, c in coef.items())
        ref = (w0.cpu().double() + lr / len(seeds) * step).to(BF16).float()
        got = params[name].detach().cpu().float()
        # one bf16 step of the result, plus fp32's error on the sum's terms where they cancel
        ulp = torch.ldexp(torch.ones_like(ref), torch.frexp(ref)[1] - 8)
        fp32 = 2.0 ** -20 * (w0.cpu().double().abs() + lr / len(seeds) * step.abs()).float()
        assert bool(((got - ref).abs() <= ulp + fp32).all()), name
        differ += int((got != ref).sum())
        moved += int((got != w0.cpu().float()).sum())
        total += got.numel()
    assert differ <= 1e-3 * total, (differ, total)
    assert moved > 0.5 * total and norm > 0


@pytest.mark.parametrize("rank", [1, None], ids=["lowrank", "fullrank"])
def test_batched_population_equals_members_alone(device, rank):
    """fp32: the population's batched forward passes (esopt/engines/population.py) give every
    member the greedy tokens of that member perturbed alone, and the members differ. bf16: the
    batched logits are as close to the member's exact logits (its bf16 weights perturbed and run
    in fp32) as the member perturbed alone in bf16 is (relative L2 error in bf16's range, far under
    the members' distance from each other), with the same greedy tokens at almost every position."""
    torch.manual_seed(0)
    from esopt.models.tiny import tiny_config
    from transformers import Qwen2ForCausalLM

    cfg = tiny_config("tiny-xs")
    cfg.initializer_range = 0.3  # random weights whose greedy outputs react to perturbations
    base = Qwen2ForCausalLM(cfg).eval()
    sigma = 0.05

    engine = HFEngine(base, char_tokenizer(), device=device)  # fp32
    gens = population.generate(engine, PROMPTS, MEMBERS, sigma, rank=rank, max_new_tokens=12)
    params = list(engine.named_parameters())
    for (seed, sign), g in zip(MEMBERS, gens):
        state = noise.perturb(params, seed, sigma, sign, rank=rank)
        alone = engine.generate(PROMPTS, max_new_tokens=12)
        noise.restore(params, state)
        assert g.token_ids == alone.token_ids
    assert len({str(g.token_ids) for g in gens}) == len(MEMBERS)

    model = engine.model.to(BF16)
    exact = copy.deepcopy(model).float()  # the bf16 weights, perturbed and run in fp32: the reference
    ids = engine.tokenizer(PROMPTS[:2] * len(MEMBERS), padding=True, return_tensors="pt").to(device)
    with torch.no_grad(), population.PopulationForward(model, MEMBERS, sigma, rank, rows_per_member=2):
        batched = model(**ids).logits.float()
    alone, ref = [], []
    for k, (seed, sign) in enumerate(MEMBERS):
        rows = {n: v[2 * k:2 * k + 2] for n, v in ids.items()}
        for m, out in ((model, alone), (exact, ref)):
            params = list(m.named_parameters())
            state = noise.perturb(params, seed, sigma, sign, rank=rank)
            with torch.no_grad():
                out.append(m(**rows).logits.float())
            noise.restore(params, state)
    alone, ref = torch.cat(alone), torch.cat(ref)
    # real tokens only: a left-padded position attends to nothing, and what comes out there is
    # the attention kernel's choice (on an H200, bf16 SDPA's pad rows made the error 0.35 where
    # the real tokens' was 0.02)
    keep = ids["attention_mask"].bool()
    batched, alone, ref = batched[keep], alone[keep], ref[keep]
    err_batched, err_alone = (float((x - ref).norm() / ref.norm()) for x in (batched, alone))
    half = int(keep[:2].sum())  # member 0's rows, then its mirror's
    spread = float((ref[:half] - ref[half:2 * half]).norm() / ref.norm())
    assert err_alone < 5e-2 and err_batched < 2 * err_alone + 1e-3, (err_batched, err_alone)
    assert spread > 10 * err_batched, (spread, err_batched)
    agree = (batched.argmax(-1) == ref.argmax(-1)).float().mean()
    assert agree >= 0.95, float(agree)


def test_grpo_from_bf16_weights_keeps_fp32_masters_and_moves_them(device, tmp_path):
    """``algo=grpo model.dtype=bfloat16``: the optimizer trains fp32 masters with bf16 autocast
    (esopt/algorithms/grpo.py, "Precision"), so three steps at lr 1e-6, which cannot move a bf16
    copy, move the masters saved in model/: fp32 tensors that differ from the bf16-rounded base in
    at least 90% of the entries. A whole run (load, GRPO through TRL, save), as a cluster job."""
    from safetensors.torch import load_file

    from esopt.models.tiny import TINY_DIR
    from esopt.runtime.run import run
    from helpers import run_config

    rc = run_config("model=tiny-xs", "task=countdown", "algo=grpo", f"engine.device={device}",
                    "model.dtype=bfloat16", "grpo.lr=1e-6", "iterations=3", "grpo.num_generations=4",
                    "grpo.prompts_per_step=4", "eval.problems=2", "eval.samples=1", "eval.every=100",
                    f"sweep.root={tmp_path}")
    summary = run(rc)
    assert summary["status"] == "completed", summary.get("error")
    saved = load_file(next(tmp_path.rglob("model/model.safetensors")))
    start = {k: v.to(BF16).float() for k, v in load_file(TINY_DIR / "tiny-xs" / "model.safetensors").items()}
    assert {v.dtype for v in saved.values()} == {torch.float32}
    moved = sum(int((saved[k] != start[k]).sum()) for k in start)
    assert moved >= 0.9 * sum(v.numel() for v in start.values())


TWO_RANKS = textwrap.dedent("""
    import json, os, sys, torch
    sys.path.insert(0, {tests!r})
    from helpers import SevensTask, tiny_model
    from esopt import noise
    from esopt.algorithms import distributed, es
    from esopt.engines.hf import HFEngine
    from esopt.models.tiny import char_tokenizer
    world = distributed.init("cuda") and distributed.world_size()
    device = f"cuda:{{torch.cuda.current_device()}}" if world else "cuda"
    engine = HFEngine(tiny_model(0), char_tokenizer(), device=device, dtype="bfloat16")
    task = SevensTask({{}})
    rows = list(task.split("train"))
    cfg = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=6, seed=3)
    log = [es.es_step(engine, task, rows, cfg, it) for it in (1, 2)]
    if distributed.rank() == 0:
        json.dump({{"checksum": noise.checksum(engine.named_parameters()), "rewards": [x["rewards"] for x in log]}},
                  open({out!r} + str(world or 1), "w"))
    distributed.shutdown()
""")


def test_two_es_ranks_equal_one(device, tmp_path):
    """Two ES ranks (torchrun, NCCL) on two GPUs end with the weights and rewards of one rank,
    bit for bit. NCCL gives each rank its own GPU, as esopt's layout does (a run's ranks x GPUs
    per rank is the GPUs it asks for, esopt/runtime/layout.py): two ranks on one GPU are not a
    layout esopt makes, so this needs two GPUs. Starts processes: ranks are processes."""
    if device == "cpu":
        pytest.skip("two ranks on the CPU (gloo) are tests/algorithms/test_es_distributed.py")
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs (one per rank), {torch.cuda.device_count()} here")
    out = str(tmp_path / "rank0.json")
    script = tmp_path / "worker.py"
    script.write_text(TWO_RANKS.format(tests=str(REPO / "tests"), out=out))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    for cmd in (["--nproc-per-node", "2", "--standalone"], None):
        argv = [sys.executable, *(["-m", "torch.distributed.run", *cmd] if cmd else []), str(script)]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    two, one = json.load(open(out + "2")), json.load(open(out + "1"))
    assert two == one and any(len(set(r)) > 1 for r in one["rewards"])
