"""``python -m esopt.cli.pretrain``: seeded pretraining of the tiny family, then the shared
evaluator on what it ships (the data, recipe, stopping rule and shipping:
``esopt.models.pretrain``).

    python -m esopt.cli.pretrain --sizes tiny-xs tiny-s --out /tmp/tiny --ckpt-dir /tmp/ckpt
    python -m esopt.cli.pretrain --sizes tiny-2xl --resume --ckpt-dir /tmp/ckpt
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from esopt.cli.common import Parser
from esopt.core.files import atomic_write_text
from esopt.models import pretrain
from esopt.models.tiny import ARCH, TINY, TINY_DIR


def evaluate_shipped(name: str, problems: int = 200, path=None, task_cfg: dict | None = None) -> dict:
    """The shared evaluator at its defaults on the Countdown test split (the task's defaults
    unless ``task_cfg``) and greedy accuracy on the synthetic tasks' test splits."""
    from esopt import engines, models, tasks
    from esopt.evaluator import evaluate

    model, tok = models.load(name, path=path)
    engine = engines.get({"name": "hf", "device": "cpu", "max_batch": 800}, model, tok)
    r = evaluate(engine, tasks.get(task_cfg or {"name": "countdown"}, style="compact"),
                 problems=problems)
    out = {"countdown_test": {k: r[k] for k in ("n_problems", "samples", "temperature", "pass@k",
                                                "pass@k_ci", "maj@k", "greedy", "entropy", "format",
                                                "wall_s")}}
    for t in ("addition", "compare", "reverse"):
        rt = evaluate(engine, tasks.get({"name": t}, style="compact"), problems=problems,
                      samples=1, entropy=False)
        out[f"{t}_test_greedy"] = rt["greedy"]
    return out


def main(argv=None):
    ap = Parser(prog="python -m esopt.cli.pretrain",
                description="Seeded pretraining of the tiny family.")
    ap.add_argument("--sizes", nargs="+", default=list(TINY), choices=list(TINY))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=TINY_DIR)
    ap.add_argument("--ckpt-dir", type=Path, default=None, help="state for --resume")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--max-steps", type=int, default=None, help="override STOP['max_steps']")
    ap.add_argument("--eval-problems", type=int, default=200, help="0 = skip the evaluation")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 = the shipped weights' setting; bitwise reproducible)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t = time.time()
    train_data, val_data = pretrain.training_data()
    print(f"data: { {k: len(v) for k, v in train_data.items()} } validation "
          f"{ {k: len(v) for k, v in val_data.items()} } in {time.time() - t:.1f}s", flush=True)
    for name in args.sizes:
        model, tok, info = pretrain.train(name, train_data, val_data, seed=args.seed,
                                          ckpt_dir=args.ckpt_dir, resume=args.resume,
                                          log=lambda s: print(s, flush=True), max_steps=args.max_steps)
        card = {"name": name, "seed": args.seed, "torch_threads": args.threads,
                "arch": dict(zip(("hidden", "layers", "heads", "kv_heads", "intermediate"),
                                 ARCH[name])),
                "params": sum(p.numel() for p in model.parameters()), **info}
        d = pretrain.save(model, tok, name, card, args.out)
        if args.eval_problems:
            card["eval"] = evaluate_shipped(name, problems=args.eval_problems, path=str(d))
            atomic_write_text(d / pretrain.CARD, json.dumps(card, indent=2) + "\n")
        print(name, "shipped step", info["shipped_step"], info["stop_reason"],
              json.dumps(card.get("eval", {}).get("countdown_test", {}).get("pass@k")), flush=True)


if __name__ == "__main__":
    main()
