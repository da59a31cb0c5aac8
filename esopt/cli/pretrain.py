"""Seeded supervised pretraining of the tiny family (``python -m esopt.cli.pretrain``).

Recipe (per size, see ``RECIPES``): next-token cross-entropy on completion tokens (+EOS) only,
AdamW, linear warm-up then a constant learning rate, a fixed number of steps,
``torch.manual_seed(seed)`` for the initial weights and a seeded ``random.Random`` for the data
order (so the weights after k steps do not depend on the total step count). Training mix
(``MIX``): compact Countdown problems (the bulk) whose completion is drawn uniformly from *all*
valid solution expressions of the problem (every operand order and bracketing), so that sampling
at temperature 0.6 has a spread; plus the held-out synthetic tasks (addition, compare, reverse),
which RL never trains on. All data come from the ``train`` splits of the task modules
(``DATA_TASKS``), which are disjoint from their test / held-out splits by construction.
Competence is controlled by the step budget of each size (the "partially competent, diverse"
regime of issue 2: Pass@1 5-60%, Pass@32 >= 1.5x Pass@1).

    python -m esopt.cli.pretrain --sizes tiny-xs tiny-s tiny-m tiny-l --seed 0
    # calibration: probe every 250 steps and keep checkpoints, then ship a chosen step
    python -m esopt.cli.pretrain --sizes tiny-m --steps 2000 --probe-every 250 \
        --eval-problems 0 --no-save --ckpt-dir /tmp/ckpt > m.log
    python -m esopt.cli.pretrain --sizes tiny-m --finalize 750 --ckpt-dir /tmp/ckpt --log m.log
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from pathlib import Path

import torch

from esopt.core.metrics import pass_at_k
from esopt.models.tiny import EOS_ID, TINY, TINY_DIR, char_tokenizer, tiny_config

# steps: optimizer steps; batch: sequences per step; lr: peak AdamW learning rate.
RECIPES: dict[str, dict] = {
    "tiny-xs": {"steps": 750, "batch": 256, "lr": 3e-3},
    "tiny-s": {"steps": 750, "batch": 256, "lr": 3e-3},
    "tiny-m": {"steps": 750, "batch": 256, "lr": 2.5e-3},
    "tiny-l": {"steps": 750, "batch": 256, "lr": 2e-3},
}
COMMON = {"warmup_steps": 100, "weight_decay": 0.01, "betas": (0.9, 0.98), "grad_clip": 1.0}

# ---------------------------------------------------------------- countdown solutions

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def _combine(op: str, a: tuple, b: tuple) -> tuple | None:
    """``a op b`` for (value, text, precedence) items, minimal brackets; None unless the value
    is a positive integer (the task generator's rule for every intermediate value)."""
    va, ta, pa = a
    vb, tb, pb = b
    if op == "+":
        v = va + vb
    elif op == "-":
        v = va - vb
    elif op == "*":
        v = va * vb
    else:
        if va % vb:
            return None
        v = va // vb
    if v < 1:
        return None
    p = _PREC[op]
    left = f"({ta})" if pa < p else ta
    right = f"({tb})" if pb < p or (pb == p and op in "-/") else tb
    return v, f"{left}{op}{right}", p


def _all_exprs(nums: tuple[int, ...]) -> list[tuple]:
    """Every expression over the ordered ``nums`` (all bracketings and operators) whose
    intermediate values are all positive integers, as (value, text, precedence)."""
    if len(nums) == 1:
        return [(nums[0], str(nums[0]), 3)]
    out = []
    for cut in range(1, len(nums)):
        for left in _all_exprs(nums[:cut]):
            for right in _all_exprs(nums[cut:]):
                for op in "+-*/":
                    e = _combine(op, left, right)
                    if e is not None:
                        out.append(e)
    return out


def solutions(numbers, target) -> list[str]:
    """All distinct expressions using each of ``numbers`` once, in any order and bracketing,
    with positive-integer intermediate values, equal to ``target`` (sorted)."""
    found = set()
    for perm in set(itertools.permutations(int(n) for n in numbers)):
        found.update(text for v, text, _ in _all_exprs(perm) if v == target)
    return sorted(found)


# ---------------------------------------------------------------- training data

# Task configs the training data come from (train splits only; test/heldout never seen).
# Countdown: the default task knobs with the largest train split the 1..12 / <=100 problem space
# allows (a bigger n_train only extends train; test and heldout stay the same).
DATA_TASKS = {
    "countdown": {"name": "countdown", "n_train": 3700},
    "addition": {"name": "addition", "n_train": 20000},
    "compare": {"name": "compare", "n_train": 20000},
    "reverse": {"name": "reverse", "n_train": 20000},
}
MIX = {"countdown": 0.8, "addition": 0.07, "compare": 0.07, "reverse": 0.06}


def training_data() -> dict[str, list[tuple[str, list[str]]]]:
    """Per task: the train split as ``[(prompt, [completions])]``. Countdown lists every valid
    solution of the problem (``solutions``); the synthetic tasks their one gold answer."""
    import esopt.tasks as tasks

    data = {}
    for kind, cfg in DATA_TASKS.items():
        task = tasks.get(cfg, style="compact")
        rows = task.split("train")
        if kind == "countdown":
            data[kind] = [(r["prompt"], solutions(r["numbers"], r["target"]) or [r["solution"]])
                          for r in rows]
        else:
            data[kind] = [(r["prompt"], [task.reference(r)]) for r in rows]
    return data


class Batches:
    """Deterministic stream of training batches (input ids, labels, mask) from a seeded RNG:
    each example picks a task by ``mix``, a problem uniformly, and one of its completions
    uniformly."""

    def __init__(self, data, seed: int, batch: int, mix: dict[str, float]):
        self.data, self.batch, self.rng = data, batch, random.Random(seed)
        self.kinds, self.weights = list(mix), list(mix.values())
        self.tok = char_tokenizer()

    def example(self) -> tuple[str, str]:
        kind = self.rng.choices(self.kinds, self.weights)[0]
        prompt, completions = self.data[kind][self.rng.randrange(len(self.data[kind]))]
        return prompt, self.rng.choice(completions)

    def __next__(self):
        rows = []
        for _ in range(self.batch):
            prompt, completion = self.example()
            p = self.tok(prompt, add_special_tokens=False)["input_ids"]
            c = self.tok(completion, add_special_tokens=False)["input_ids"] + [EOS_ID]
            rows.append((p + c, [-100] * len(p) + c))
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), 0, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (x, y) in enumerate(rows):  # right padding: positions start at 0 like unpadded
            ids[i, : len(x)] = torch.tensor(x)
            labels[i, : len(y)] = torch.tensor(y)
            mask[i, : len(x)] = 1
        return ids, labels, mask


# ---------------------------------------------------------------- training


def lr_at(step: int, peak: float, warmup_steps: int) -> float:
    """Linear warm-up to ``peak`` over ``warmup_steps``, then constant (so stopping at step k is
    the same recipe as ``steps=k``)."""
    return peak * min(1.0, (step + 1) / warmup_steps)


def train(name: str, data, seed: int = 0, steps: int | None = None, log_every: int = 100,
          probe=None, probe_every: int = 0):
    """Train tiny family member ``name`` from scratch; returns (model, tokenizer, info).

    ``probe(model, step)`` (optional) is called every ``probe_every`` steps (exploration only).
    """
    from transformers import Qwen2ForCausalLM

    recipe = {**RECIPES[name]}
    if steps is not None:
        recipe["steps"] = steps
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_config(name))
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": COMMON["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=recipe["lr"], betas=COMMON["betas"],
    )
    batches = Batches(data, seed, recipe["batch"], MIX)
    t0, losses, probes = time.time(), [], []
    for step in range(recipe["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, recipe["lr"], COMMON["warmup_steps"])
        ids, labels, mask = next(batches)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), COMMON["grad_clip"])
        opt.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            print(f"{name} step {step + 1}/{recipe['steps']} loss "
                  f"{sum(losses[-log_every:]) / log_every:.4f} {time.time() - t0:.0f}s", flush=True)
        if probe and probe_every and (step + 1) % probe_every == 0:
            model.eval()
            r = probe(model, step + 1)
            model.train()
            probes.append({"step": step + 1, "wall_s": round(time.time() - t0, 1), **r})
            print(f"{name} PROBE {json.dumps(probes[-1])}", flush=True)
    model.eval()
    info = {"recipe": {**recipe, **COMMON, "mix": MIX, "data": DATA_TASKS},
            "train_wall_s": round(time.time() - t0, 1),
            "final_loss": round(sum(losses[-100:]) / len(losses[-100:]), 4)}
    if probes:
        info["probes"] = probes
    return model, char_tokenizer(), info


# ---------------------------------------------------------------- quick evaluation


@torch.no_grad()
def quick_eval(model, task, rows, samples=32, temperature=0.6, max_new_tokens=24, seed=0,
               chunk=50) -> dict:
    """Pass@1 / Pass@4 / Pass@samples / greedy of ``model`` on ``rows`` of ``task`` with HF
    ``generate`` (left padding, top_p 1, EOS stops)."""
    tok = char_tokenizer()
    torch.manual_seed(seed)
    counts, greedy = [], []
    rows = list(rows)
    for i in range(0, len(rows), chunk):
        part = rows[i : i + chunk]
        enc = tok([r["prompt"] for r in part], return_tensors="pt", padding=True)
        L = enc["input_ids"].shape[1]
        out = model.generate(**enc, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                             num_return_sequences=samples, max_new_tokens=max_new_tokens,
                             pad_token_id=0, eos_token_id=EOS_ID)
        texts = tok.batch_decode(out[:, L:], skip_special_tokens=True)
        g = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                           pad_token_id=0, eos_token_id=EOS_ID)
        gtexts = tok.batch_decode(g[:, L:], skip_special_tokens=True)
        for j, r in enumerate(part):
            counts.append(sum(task.verify(t, r).correct for t in texts[j * samples:(j + 1) * samples]))
            greedy.append(int(task.verify(gtexts[j], r).correct))
    P = len(counts)
    res = {f"pass@{k}": round(sum(pass_at_k(samples, c, k) for c in counts) / P, 4)
           for k in sorted({1, 4, samples}) if k <= samples}
    res["greedy"] = round(sum(greedy) / P, 4)
    return res


def save(model, tok, name: str, card: dict, out_dir: Path = TINY_DIR) -> Path:
    """Write ``out_dir/name/`` (config, safetensors, tokenizer, generation config, card)."""
    d = Path(out_dir) / name
    d.mkdir(parents=True, exist_ok=True)
    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = 0, EOS_ID, 2
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    (d / "pretrain_card.json").write_text(json.dumps(card, indent=2) + "\n")
    return d


def evaluate_shipped(name: str, problems: int = 200, path=None) -> dict:
    """The shared evaluator (``esopt.evaluate.evaluate``) at its defaults on the Countdown test
    split and on the held-out synthetic tasks' test splits (greedy accuracy there)."""
    import esopt.models as models
    import esopt.tasks as tasks
    from esopt import engines
    from esopt.evaluator import evaluate

    model, tok = models.load(name, path=path)
    engine = engines.get({"name": "hf", "device": "cpu", "max_batch": 800}, model, tok)
    r = evaluate(engine, tasks.get({"name": "countdown"}, style="compact"), problems=problems)
    out = {"countdown_test": {k: r[k] for k in ("n_problems", "samples", "temperature", "pass@k",
                                                "pass@k_ci", "maj@k", "greedy", "entropy", "format",
                                                "wall_s")}}
    for t in ("addition", "compare", "reverse"):
        rt = evaluate(engine, tasks.get({"name": t}, style="compact"), problems=problems,
                      samples=1, entropy=False)
        out[f"{t}_test_greedy"] = rt["greedy"]
    return out


def finalize(name: str, step: int, ckpt_dir: Path, log: Path | None, seed: int = 0,
             threads: int = 1, out_dir: Path = TINY_DIR) -> dict:
    """Ship the checkpoint of ``name`` at ``step`` (from an exploration run with probes) with
    its card. Constant LR after warm-up + a deterministic data stream make it identical to a
    fresh ``--steps step`` run."""
    from transformers import Qwen2ForCausalLM

    from esopt.models.tiny import ARCH

    model = Qwen2ForCausalLM.from_pretrained(ckpt_dir / name / str(step)).eval()
    probes = []
    if log is not None and Path(log).exists():
        for line in Path(log).read_text().splitlines():
            if line.startswith(f"{name} PROBE "):
                pr = json.loads(line.split(" PROBE ", 1)[1])
                if pr["step"] <= step:
                    probes.append(pr)
    card = {"name": name, "seed": seed, "torch_threads": threads,
            "arch": dict(zip(("hidden", "layers", "heads", "kv_heads", "intermediate"), ARCH[name])),
            "params": sum(p.numel() for p in model.parameters()),
            "recipe": {**RECIPES[name], "steps": step, **COMMON, "mix": MIX, "data": DATA_TASKS,
                       "loss": "next-token cross-entropy on completion tokens (+EOS) only",
                       "optimizer": "AdamW, linear warm-up then constant lr"},
            "train_wall_s": probes[-1]["wall_s"] if probes else None,
            "probes_100x16": probes}
    d = save(model, char_tokenizer(), name, card, out_dir)
    card["eval"] = evaluate_shipped(name, path=str(d))
    (d / "pretrain_card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m esopt.cli.pretrain",
                                 description="Seeded pretraining of the tiny family.")
    ap.add_argument("--sizes", nargs="+", default=list(TINY), choices=list(TINY))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None, help="override the recipe's step count")
    ap.add_argument("--out", type=Path, default=TINY_DIR)
    ap.add_argument("--eval-problems", type=int, default=200, help="0 = skip the evaluation")
    ap.add_argument("--probe-every", type=int, default=0, help="exploration: quick eval every N steps")
    ap.add_argument("--ckpt-dir", type=Path, default=None,
                    help="exploration: also save a checkpoint at every probe to DIR/<name>/<step>")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 = the shipped weights' setting; bitwise reproducible)")
    ap.add_argument("--finalize", type=int, default=None, metavar="STEP",
                    help="ship the --ckpt-dir checkpoint of each size at STEP (see finalize)")
    ap.add_argument("--log", type=Path, default=None, help="with --finalize: the run's log (probes)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.finalize is not None:
        for name in args.sizes:
            card = finalize(name, args.finalize, args.ckpt_dir, args.log, args.seed, args.threads,
                            args.out)
            print(name, json.dumps(card["eval"]), flush=True)
        return
    import esopt.tasks as tasks

    t = time.time()
    data = training_data()
    print(f"data: { {k: len(v) for k, v in data.items()} } in {time.time() - t:.1f}s", flush=True)
    task = tasks.get({"name": "countdown"}, style="compact")
    test = task.split("test")
    probe_rows = test.select(range(100))

    def probe(model, step, name=None):
        if args.ckpt_dir is not None:
            model.save_pretrained(args.ckpt_dir / name / str(step), safe_serialization=True)
        return quick_eval(model, task, probe_rows, samples=16)

    for name in args.sizes:
        model, tok, info = train(name, data, seed=args.seed, steps=args.steps,
                                 probe=lambda m, k, name=name: probe(m, k, name),
                                 probe_every=args.probe_every)
        if args.eval_problems:
            t = time.time()
            info["eval"] = {"split": "test", "problems": args.eval_problems, "samples": 32,
                            "temperature": 0.6, "max_new_tokens": 24,
                            **quick_eval(model, task, test.select(range(args.eval_problems)))}
            info["eval_wall_s"] = round(time.time() - t, 1)
        print(name, json.dumps({k: v for k, v in info.items() if k != "recipe"}), flush=True)
        if not args.no_save:
            from esopt.models.tiny import ARCH

            card = {"name": name, "seed": args.seed, "arch": dict(zip(
                ("hidden", "layers", "heads", "kv_heads", "intermediate"), ARCH[name])),
                "params": sum(p.numel() for p in model.parameters()), **info}
            save(model, tok, name, card, args.out)


if __name__ == "__main__":
    main()
