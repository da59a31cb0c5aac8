"""GRPO and ES at the study's GPU scale, measured on the CPU: what a low-precision update keeps.

    python benchmarks/bench_gpu_scale.py --write-docs                 # every table -> docs/results/gpu_scale.md
    python benchmarks/bench_gpu_scale.py --only fractions --models tiny-s

Tables:

  fractions   Share of parameters that 3 updates change, per algorithm and precision, from the
              model loaded in fp32 or bf16 (Countdown, hf engine, CPU, one thread). GRPO at the
              study's lr 1e-6 (group 4, 4 prompts per step): loaded in fp32; loaded in bf16 and
              trained as fp32 master weights with bf16 autocast (esopt's GRPO); loaded in bf16
              and updated in place in bf16 (what GRPO did before masters: reproduced here by
              skipping ``grpo.keep_masters``). ES in bf16 in place (what the study and esopt do)
              at the model's sigma / lr and at the study's hub setting (sigma 1.5e-3,
              lr 2.5e-4), N = 8, 4 prompts. "changed": parameters of model/ that differ from
              the base as loaded; "cos": cosine of the update with the fp32-loaded GRPO run's.
  smollm2     The GRPO rows of ``fractions`` on SmolLM2-135M (arith, 32 new tokens: Countdown's
              1,024-token chat budget takes hours per run on one CPU thread).
  processes   GRPO on 2 CPU processes (torchrun, gloo) against 1, tiny-xs: per-step loss, gradient
              norm, rewards and tokens, and the final weights' difference.
  estimator   esopt/runtime/memory.py's GB per 80 GB GPU for Qwen2.5 0.5B-7B on GSM8K (2,048
              new tokens): GRPO at the GPU presets' settings (group 8 x 8 prompts, gradient
              checkpointing, micro-batches of 2, colocated vLLM at 0.2) on 1 GPU, and sharded
              (FSDP2) where one GPU cannot hold it; ES with vLLM (0.85 of the GPU). Beside them
              the published figures (REFERENCE.md section 15): 16-18 B per parameter of training
              state with fp32 masters and AdamW; verl's tuning table: 7B GRPO on 2 x 80 GB only
              with FSDP and offload.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _results import write_table  # noqa: E402

COMMAND = "python benchmarks/bench_gpu_scale.py --write-docs"
GRPO = ["algo=grpo", "grpo.lr=1e-6", "grpo.num_generations=4", "grpo.prompts_per_step=4"]
ES = ["algo=es", "pop=8", "es.batch_size=4"]
COMMON = ["task=countdown", "engine=hf", "engine.device=cpu", "iterations=3", "eval.problems=4", "eval.samples=2"]


def delta(model: str, dtype: str, overrides: list[str], root: Path, inplace: bool = False, common=COMMON):
    """(update of the run's model/ over the base loaded at ``dtype``, model/'s dtype, seconds)."""
    from helpers import run_config
    from safetensors.torch import load_file

    from esopt import models
    from esopt.algorithms import grpo
    from esopt.core import store
    from esopt.runtime.run import run
    from esopt.runtime.validate import run_id

    rc = run_config(f"model={model}", f"model.dtype={dtype}", *common, *overrides, f"sweep.root={root}",
                    f"sweep.name={'inplace' if inplace else 'masters'}")
    keep = grpo.keep_masters
    if inplace:  # the update before masters: the optimizer on the loaded bf16 weights
        grpo.keep_masters = lambda m: str(next(m.parameters()).dtype).removeprefix("torch.")
    t0 = time.perf_counter()
    try:
        summary = run(rc)
    finally:
        grpo.keep_masters = keep
    assert summary["status"] == "completed", summary["error"]
    folder = store.RunDir.for_run(rc.sweep.root, rc.sweep.name, run_id(rc)).path / "model"
    trained = {}
    for f in sorted(folder.glob("*.safetensors")):
        trained.update(load_file(str(f)))
    base, _ = models.load(model, dtype=dtype)
    d = torch.cat([(trained[k].float() - p.detach().float()).flatten()
                   for k, p in base.named_parameters() if k in trained])
    return d, str(next(iter(trained.values())).dtype).removeprefix("torch."), time.perf_counter() - t0


def fractions(models_: list[str], root: Path, grpo_only: bool = False, common=COMMON) -> list[list]:
    rows = []
    for model in models_:
        ref = None
        cases = [
            ("GRPO lr 1e-6", "float32", "fp32 weights", GRPO, False),  # first: the reference of "cos"
            ("GRPO lr 1e-6", "bfloat16", "fp32 masters, bf16 autocast", GRPO, False),
            ("GRPO lr 1e-6", "bfloat16", "fp32 masters, fp32 compute", GRPO + ["grpo.bf16=false"], False),
            ("GRPO lr 1e-6", "bfloat16", "bf16 in place (before masters)", GRPO, True),
            ("ES, the model's sigma/lr", "bfloat16", "bf16 in place", ES, False),
            ("ES sigma 1.5e-3 lr 2.5e-4", "bfloat16", "bf16 in place", ES + ["sigma=1.5e-3", "lr=2.5e-4"], False),
        ]
        if grpo_only:
            cases = [c for c in cases if c[0].startswith("GRPO") and "fp32 compute" not in c[2]]
        for name, dtype, how, overrides, inplace in cases:
            d, saved, wall = delta(model, dtype, overrides, root, inplace, common)
            ref = d if ref is None else ref
            grpo_row = name.startswith("GRPO")
            r64, d64 = ref.double(), d.double()  # float32's cosine over 135M entries read 1.126 for a vector with itself
            cos = float(r64 @ d64 / (r64.norm() * d64.norm())) if grpo_row and d.norm() > 0 else None
            rows.append([model, name, dtype, how, f"{float((d != 0).float().mean()):.2%}",
                         f"{float(d.norm()):.2e}", "-" if cos is None else f"{cos:.3f}", saved, f"{wall:.0f}"])
            print(rows[-1], flush=True)
    return rows


SMOLLM2 = ["task=arith", "engine=hf", "engine.device=cpu", "iterations=3", "eval.problems=1", "eval.samples=1",
           "eval.max_new_tokens=8", "grpo.max_completion_length=32"]
PROCESSES = ["model=tiny-xs", "task=countdown", "task.n_train=8", "algo=grpo", "engine.device=cpu", "engine.threads=1",
             "eval.problems=2", "eval.samples=1", "grpo.num_generations=8", "grpo.prompts_per_step=4", "iterations=2",
             "lr=1e-3"]


def processes(root: Path) -> list[list]:
    """tests/algorithms/test_grpo_processes.py's comparison, as a table: one process
    (grpo.rollouts=engine) against two (torchrun, gloo, model.resources.ranks=2); the last row is
    the notes (the final weights' difference)."""
    import json
    import os
    import subprocess

    from helpers import run_config
    from safetensors.torch import load_file

    from esopt import models
    from esopt.runtime.run import run

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1", PYTHONPATH=str(HERE.parent))
    t0 = time.perf_counter()
    run(run_config(*PROCESSES, "grpo.rollouts=engine", f"sweep.root={root / 'one'}"))
    t1 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", "-m",
                    "esopt.sweep", *PROCESSES, "model.resources.ranks=2", f"sweep.root={root / 'two'}"],
                   env=env, check=True, capture_output=True)
    t2 = time.perf_counter()

    def read(where):
        (path,) = (root / where / "default" / "runs").iterdir()
        lines = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
        w = {}
        for f in (path / "model").glob("*.safetensors"):
            w.update(load_file(str(f)))
        return [x for x in lines if x["kind"] == "train"], w

    (a, w1), (b, w2) = read("one"), read("two")
    rows = [[x["iteration"], f"{x['loss']:.8f}", f"{y['loss']:.8f}", f"{x['grad_norm']:.7f}", f"{y['grad_norm']:.7f}",
             f"{x['reward_mean']:.4f} / {y['reward_mean']:.4f}", f"{x['tokens_generated']} / {y['tokens_generated']}"]
            for x, y in zip(a, b)]
    base = dict(models.load("tiny-xs")[0].named_parameters())
    upd = torch.cat([(w1[k] - base[k]).detach().flatten() for k in w1])
    diff = torch.cat([(w1[k] - w2[k]).flatten() for k in w1])
    rows.append([f"tiny-xs, Countdown, 2 steps of 4 prompts x 8 completions (lr 1e-3), CPU: the same global batch, "
                 f"2 processes taking 16 completions each. Final weights: |w1 - w2| / |update| = "
                 f"{float(diff.norm() / upd.norm()):.1e}, max per weight {float(diff.abs().max()):.1e} (updates up to "
                 f"{float(upd.abs().max()):.1e}). Wall: 1 process {t1 - t0:.0f} s, 2 processes {t2 - t1:.0f} s "
                 "(launch included)."])
    return rows


SIZES = ("qwen0.5b", "qwen1.5b", "qwen3b", "qwen7b")
PRESET_GRPO = ["grpo.gradient_checkpointing=true", "grpo.grad_accum=32", "engine.colocated_gpu_share=0.2",
               "grpo.rollouts=engine"]


def estimator() -> list[list]:
    from helpers import GSM8K_SAMPLE, compose

    from esopt import models
    from esopt.runtime import memory

    rows = []
    for model in SIZES:
        params = models.REGISTRY_PARAMS[model]
        for algo in ("grpo", "es"):
            cfg = compose(f"model={model}", f"algo={algo}", "task=gsm8k", f"task.source={GSM8K_SAMPLE}",
                          "task.n_heldout=10", "engine=vllm", "hydra/launcher=slurm", "model.resources.gpus=1",
                          *(PRESET_GRPO if algo == "grpo" else []))
            from esopt.runtime import validate as v

            keep = memory.check
            memory.check = lambda plan: None  # the figures of plans validate refuses, too
            try:
                plan = v.validate(cfg, check_data=False, cuda=True)
            finally:
                memory.check = keep
            for gpus in (1, 2, 4, 8) if algo == "grpo" else (1,):
                est = memory.estimate(plan, gpus)
                if gpus > 1 and memory.estimate(plan, gpus // 2).fits:
                    break
                p = est.parts
                state = sum(p.get(k, 0) for k in ("masters", "gradients", "optimizer"))
                published = (f"{16 * params / gpus / 1e9:.1f}-{18 * params / gpus / 1e9:.1f} (16-18 B/param"
                             + (f" / {gpus})" if gpus > 1 else ")") if algo == "grpo"
                             else f"{2 * params / 1e9:.1f} (bf16 weights)")
                rows.append([model, algo, gpus, f"{state / 1e9:.1f}" if algo == "grpo" else f"{p['weights'] / 1e9:.1f}",
                             published, f"{p.get('activations', 0) / 1e9:.1f}", f"{p.get('logits', 0) / 1e9:.1f}",
                             f"{(p.get('vllm', 0) or p.get('kv cache', 0)) / 1e9:.1f}", f"{est.total / 1e9:.1f}",
                             "yes" if est.fits else "no (refused)"])
                print(rows[-1], flush=True)
    return rows


FRACTIONS_HEADER = ["model", "update", "loaded", "trained as", "changed", "update l2", "cos vs fp32 GRPO",
                    "model/ dtype", "wall s"]  # the precision tables' columns (tiny-s, SmolLM2)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["fractions", "smollm2", "estimator", "processes"], action="append")
    p.add_argument("--models", default="tiny-s", help="comma-separated (smollm2-135m after scripts/install_smollm2.sh)")
    p.add_argument("--root", default=None, help="results folder for the runs (default: a temporary one)")
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    import tempfile

    torch.set_num_threads(1)
    only = set(args.only or ["fractions", "smollm2", "estimator", "processes"])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root or tmp)
        if "fractions" in only:
            rows = fractions(args.models.split(","), root)
            header = FRACTIONS_HEADER
            notes = ("3 updates each on Countdown (hf engine, CPU). A bf16 step at |w| is |w|/128: an AdamW "
                     "step of lr 1e-6 is below half of it for every |w| > 2.6e-4, so in place it rounds away; "
                     "ES's update (lr x the reward-weighted noise) is of the order of lr itself.")
            if args.write_docs:
                write_table("gpu_scale", "Parameters changed by 3 updates, by precision", COMMAND + " --only fractions"
                            + (f" --models {args.models}" if args.models != "tiny-s" else ""), header, rows, notes=notes)
            else:
                print(header)
        if "smollm2" in only:
            rows = fractions(["smollm2-135m"], root, grpo_only=True, common=SMOLLM2)
            header = FRACTIONS_HEADER
            notes = ("3 GRPO updates each on arith (chat prompts, 32 new tokens, 4 prompts x 4; hf engine, CPU, "
                     "one thread), as the tiny-s table above but on the real 135M model; its own lr "
                     "(1e-5) replaced by the study's 1e-6.")
            if args.write_docs:
                write_table("gpu_scale", "SmolLM2-135M: parameters changed by 3 GRPO updates",
                            COMMAND + " --only smollm2", header, rows, notes=notes)
        if "processes" in only:
            rows = processes(root)
            header = ["step", "loss, 1 process", "loss, 2 processes", "grad norm, 1", "grad norm, 2", "reward mean 1 / 2",
                      "tokens 1 / 2"]
            if args.write_docs:
                write_table("gpu_scale", "GRPO on 2 processes against 1", COMMAND + " --only processes", header,
                            rows[:-1], notes=rows[-1][0])
        if "estimator" in only:
            rows = estimator()
            header = ["model", "algo", "GPUs", "state / weights GB", "published GB per GPU", "activations GB", "logits GB",
                      "vLLM / KV GB", "total GB per GPU", "fits 80 GB"]
            notes = ("GRPO: group 8 x 8 prompts, 2,048 new tokens + a 256-token prompt allowance, micro-batches of "
                     "2, gradient checkpointing, vLLM colocated at 0.2; GPUs > 1: one process per GPU, FSDP2 full_shard "
                     "(each process 2-completion micro-batches, grad_accum / GPUs of them). Published: REFERENCE.md section 15 "
                     "(16-18 B per parameter with fp32 masters and AdamW; verl: 7B GRPO on 2 x 80 GB only with FSDP "
                     "and offload, which this estimate does not model).")
            if args.write_docs:
                write_table("gpu_scale", "GPU memory estimate, Qwen2.5 0.5B-7B", COMMAND + " --only estimator",
                            header, rows, notes=notes)


if __name__ == "__main__":
    main()
