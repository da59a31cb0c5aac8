"""esopt's speed and memory on one GPU: generation, an ES iteration, a GRPO step, at 0.5B and 1.5B.

    python benchmarks/bench_gpu.py --out DIR          # on a GPU: DIR/gpu.md (scripts/gpu_check.sh)
    python benchmarks/bench_gpu.py --write-docs       # on a GPU: docs/results/gpu.md
    python benchmarks/bench_gpu.py --cpu --out DIR    # the CPU smoke run: tiny sizes, DIR/gpu.md only

Models: Qwen2-architecture models built from their config (Qwen2.5-0.5B's and -1.5B's shapes:
vocabulary 151,936, tied embeddings) with random weights, in bf16, over a synthetic word-level
tokenizer of the same vocabulary, so nothing is downloaded; the numbers are speed and memory,
not accuracy. Rows per model (hf engine, sampling at temperature 1, EOS rarely drawn by a random
model, so nearly every row generates its whole budget):

  generate        HFEngine.generate of 64 prompts (32 tokens each), 128 new tokens: tokens/s
  es_members      one ES iteration (esopt.algorithms.es.es_step), pop 8 x 16 prompts, 64 new
                  tokens, members one after another: perturbed in place, generated, restored
  es_batched      the same iteration with es.batched (EGGROLL rank 1: every member in one
                  batched generate, esopt/engines/population.py)
  grpo_step       one GRPO optimizer step through esopt's TRL path (8 prompts x 8 completions
                  of 64 tokens, fwd+bwd, AdamW) from bf16-loaded weights, which GRPO holds as
                  fp32 masters with fp32 AdamW state and computes on in bf16 autocast; the
                  second step's wall (the first warms up; the checkpoint the trainer writes
                  after the last step, weights and AdamW state, is outside it)

Each row: wall seconds, generated tokens/s, and the GPU's peak allocated memory during that row
(torch.cuda.max_memory_allocated, reset before it; the weights it holds included). One run per
row after a warm-up generate: the table is a first measurement, not a distribution. With --cpu
the same code runs on a 2-layer model of a 1,000-word vocabulary with budgets of a few tokens, to
check that the script works (CI), and the table goes to --out only, never to docs/results.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's esopt, also when another one is installed
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _results

# name -> (hidden, layers, heads, kv_heads, intermediate, vocab): Qwen2.5's published shapes
SIZES = {
    "qwen2-0.5b": (896, 24, 14, 2, 4864, 151936),
    "qwen2-1.5b": (1536, 28, 12, 2, 8960, 151936),
    "cpu-smoke": (64, 2, 4, 2, 128, 1000),
}
GPU = dict(models=["qwen2-0.5b", "qwen2-1.5b"], batch=64, prompt_len=32, gen_tokens=128, pop=8, prompts=16,
           es_tokens=64, grpo_prompts=8, grpo_group=8, grpo_tokens=64)
CPU = dict(models=["cpu-smoke"], batch=8, prompt_len=8, gen_tokens=8, pop=4, prompts=4, es_tokens=4,
           grpo_prompts=2, grpo_group=2, grpo_tokens=4)


def tokenizer(vocab: int):
    """A word-level tokenizer over ``vocab`` ids: 4 specials, then the words t4, t5, ... (every
    id decodes, so a random model's samples are text the task can score)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>"])}
    words.update({f"t{i}": i for i in range(4, vocab)})
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
                                   unk_token="<unk>", padding_side="left")


def build(name: str, device: str, dtype):
    """The random-weight Qwen2 of ``name``, made on ``device`` in ``dtype`` (seeded)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, layers, heads, kv, inter, vocab = SIZES[name]
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, intermediate_size=inter, max_position_embeddings=4096,
                      tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    return model.to(dtype).eval()


def bench_task(n_rows: int, prompt_len: int, vocab: int, budget: int):
    """Prompts of ``prompt_len`` random words; reward = the share of '7' among the completion's
    digits (a random model's completions score between 0 and 1, so ES and GRPO updates are not 0)."""
    import datasets
    import numpy as np

    from esopt.tasks import Task, Verdict, register

    @register  # planned like any task (grpo_step's plan)
    class Sevens(Task):
        name = "gpu_bench"
        budgets = {"compact": budget}

        def _build(self):
            rng = np.random.default_rng(0)
            rows = [{"prompt": " ".join(f"t{w}" for w in rng.integers(4, vocab, prompt_len)), "id": str(i)}
                    for i in range(n_rows)]
            ds = datasets.Dataset.from_list(rows)
            return {"train": ds, "test": ds, "heldout": ds}

        def verify(self, completion, row):
            digits = [c for c in completion if c.isdigit()]
            r = digits.count("7") / len(digits) if digits else 0.0
            return Verdict(r, 0.0, r, r > 0.2, None)

    return Sevens({})


class Meter:
    """Wall time and peak GPU memory of one row (``with Meter(dev) as m: ...``)."""

    def __init__(self, device: str):
        self.device = device

    def __enter__(self):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
        self.wall = time.perf_counter() - self.t
        self.peak_gib = torch.cuda.max_memory_allocated() / 2**30 if self.device == "cuda" else None


def measure(name: str, device: str, s: dict, workdir: Path) -> list[dict]:
    """The four rows of one model size."""
    import torch

    from esopt.algorithms import es
    from esopt.engines.hf import HFEngine

    vocab = SIZES[name][-1]
    tok = tokenizer(vocab)
    rows = []
    model = build(name, device, torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    engine = HFEngine(model, tok, device=device, max_batch=max(s["batch"], s["pop"] * s["prompts"]))
    task = bench_task(max(s["batch"], s["prompts"]), s["prompt_len"], vocab, s["es_tokens"])
    prompts = [r["prompt"] for r in task.split("train")][:s["batch"]]
    engine.generate(prompts, temperature=1.0, max_new_tokens=4, seed=1)  # warm-up: kernels, allocator
    with Meter(device) as m:
        g = engine.generate(prompts, temperature=1.0, max_new_tokens=s["gen_tokens"], seed=0)
    rows.append(dict(model=name, params=params, row="generate", setting=f"batch {s['batch']} x {s['gen_tokens']} new",
                     wall=m.wall, tokens=g.n_tokens, peak_gib=m.peak_gib))
    train = list(task.split("train"))[:s["prompts"]]
    for batched in (False, True):
        cfg = es.ESRun(pop=s["pop"], sigma=1e-3, lr=1e-4, batch_size=s["prompts"], seed=0, temperature=1.0,
                       max_new_tokens=s["es_tokens"], batched=batched, perturb_rank=1)
        with Meter(device) as m:
            line = es.es_step(engine, task, train, cfg, 1)
        rows.append(dict(model=name, params=params, row="es_batched" if batched else "es_members",
                         setting=f"pop {s['pop']} x {s['prompts']} prompts x {s['es_tokens']} new",
                         wall=m.wall, tokens=line["tokens_generated"], peak_gib=m.peak_gib,
                         detail={k: v for k, v in line.items() if k.startswith("wall_")}))
    del engine, model, g
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    rows.append(grpo_step(name, device, s, tok, vocab, workdir / name))
    rows[-1]["params"] = params
    return rows


def grpo_step(name: str, device: str, s: dict, tok, vocab: int, path: Path) -> dict:
    """Two GRPO steps (esopt.algorithms.grpo.train, TRL) on fp32 master weights with bf16 autocast
    on the GPU; the second step's wall and tokens, the peak over both."""
    import torch

    from esopt.algorithms import grpo
    from esopt.core.store import RunDir
    from esopt.engines.hf import HFEngine
    from esopt.runtime.context import RunContext
    from esopt.runtime.validate import plan_in_memory

    task = bench_task(s["grpo_prompts"], s["prompt_len"], vocab, s["grpo_tokens"])
    plan = plan_in_memory({"model": {"name": name, "dtype": "bfloat16"}, "task": {"name": "gpu_bench"}, "algo": "grpo",
                           "engine": {"name": "hf"}, "pop": 2, "sigma": None, "lr": 1e-6, "seed": 0,
                           "iterations": 2, "eval": {"problems": 1, "samples": 1, "every": 100},
                           "grpo": {"num_generations": s["grpo_group"], "prompts_per_step": s["grpo_prompts"],
                                    "max_completion_length": s["grpo_tokens"]}})
    model = build(name, device, torch.bfloat16)  # loaded in bf16; GRPO holds it as fp32 masters
    rd = RunDir(path)
    rd.create(plan.to_dict())
    ctx = RunContext(plan, model, tok, HFEngine(model, tok, device=device), task, rd, phase="grpo", iterations=2)
    with Meter(device) as m:
        grpo.train(ctx)
    lines = [json.loads(x) for x in rd.metrics_path.read_text().splitlines()]
    step = [x for x in lines if x["kind"] == "train"][-1]
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # grpo.keep_masters
    del ctx, model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return dict(model=name, row="grpo_step",
                setting=f"{s['grpo_prompts']} prompts x {s['grpo_group']} x {s['grpo_tokens']} new, fp32 masters",
                wall=step["wall_step"], tokens=step["tokens_generated"], peak_gib=m.peak_gib,
                detail={"tokens_fwd_bwd": step["tokens_fwd_bwd"]})


def table(results: list[dict]) -> tuple[list[str], list[list]]:
    header = ["model", "params", "row", "setting", "wall s", "generated tok/s", "peak GiB"]
    body = [[r["model"], (f"{r['params'] / 1e9:.3g}B" if r["params"] >= 1e9 else f"{r['params'] / 1e6:.3g}M"), r["row"], r["setting"], f"{r['wall']:.2f}",
             f"{r['tokens'] / r['wall']:.0f}", "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"]
            for r in results]
    return header, body


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU: check that the script runs")
    ap.add_argument("--out", type=Path, help="write gpu.md (and gpu.json) into this folder")
    ap.add_argument("--write-docs", action="store_true", help="write docs/results/gpu.md (GPU only)")
    ap.add_argument("--models", nargs="+", choices=sorted(SIZES), help="model sizes (default: both GPU sizes)")
    ap.add_argument("--commit", help="the commit to stamp (where the checkout has no git, e.g. a copied tree)")
    args = ap.parse_args(argv)
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    if args.cpu and args.write_docs:
        ap.error("--write-docs records GPU numbers: not with --cpu (use --out)")
    if not args.cpu and not torch.cuda.is_available():
        ap.error("no CUDA GPU here: --cpu runs the tiny CPU check")
    device, s = ("cpu", CPU) if args.cpu else ("cuda", GPU)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models or s["models"]:
            t0 = time.perf_counter()
            results += measure(name, device, s, Path(tmp))
            print(f"bench_gpu: {name} measured in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            record(results, args)  # after each size: a run stopped by its time limit keeps the sizes done
    header, body = table(results)
    print(" | ".join(header))
    for row in body:
        print(" | ".join(map(str, row)))
    return 0


def record(results: list[dict], args) -> None:
    """The table so far into --out (gpu.md, gpu.json) and, with --write-docs, docs/results/gpu.md."""
    if not (args.out or args.write_docs):
        return
    from _results import write_table

    header, body = table(results)
    stamp = {"commit_id": args.commit} if args.commit else {}
    notes = ("Random weights, synthetic tokenizer (benchmarks/bench_gpu.py's docstring); tok/s counts "
             "generated tokens only; one run per row." + (" CPU smoke run: tiny sizes, not GPU numbers."
                                                          if args.cpu else ""))
    title = "esopt on one GPU" if not args.cpu else "esopt on one GPU (CPU smoke run)"
    for where in ([args.out] if args.out else []) + ([None] if args.write_docs else []):
        write_table("gpu", title, None, header, body, notes, results_dir=where, **stamp)
    if args.out:
        (args.out / "gpu.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
