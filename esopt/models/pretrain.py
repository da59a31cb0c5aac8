"""Seeded supervised pretraining of the tiny family: its data, recipe, stopping rule and
shipping (the command is ``python -m esopt.cli.pretrain``, which also evaluates what it ships).

Data. Countdown problems from the generator's ``pretrain`` pool (``countdown.pool_of``: half
of the problem space, chosen by a hash of the problem key), so no pretraining problem is ever
an RL train / test / held-out problem, whatever the task knobs. Numbers 1..12, targets <= 100,
3 and 4 numbers (``COUNTDOWN``); the completion of each example is drawn uniformly from *all*
valid solution expressions of its problem (every operand order and bracketing:
``esopt.tasks.countdown_generator.solutions``, the generator's own rule), so that sampling has
a spread. The first ``VALIDATION`` problems of each count are the validation split; the rest
are trained on. Plus the synthetic tasks (addition, compare, reverse; their
``train`` splits), which RL never trains on and forgetting is measured on (``MIX``).

Recipe (``RECIPES`` per size, ``COMMON`` for all): next-token cross-entropy on completion
tokens (+EOS) only, AdamW, linear warm-up then a constant learning rate (so the weights after
k steps do not depend on when training stops), ``torch.manual_seed(seed)`` for the initial
weights and a seeded ``random.Random`` for the data order.

Stopping rule (``STOP``). Every ``eval_every`` steps the Countdown validation loss (mean
token cross-entropy of one seeded solution per validation problem) is measured. Training
stops when the best validation loss has not improved by at least ``min_rel_improvement``
(relative) for ``patience`` consecutive evaluations (a plateau), or at ``max_steps``; the
checkpoint with the lowest validation loss is shipped. The card (``pretrain_card.json``)
keeps the whole curve (validation loss and Pass@1 probes on the validation problems), the
stopping reason and the evaluator's numbers on the RL test split.

    python -m esopt.cli.pretrain --sizes tiny-xs tiny-s --out /tmp/tiny --ckpt-dir /tmp/ckpt
    python -m esopt.cli.pretrain --sizes tiny-2xl --resume --ckpt-dir /tmp/ckpt
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch

from esopt.core.files import atomic_path
from esopt.models.tiny import EOS_ID, TINY_DIR, char_tokenizer, tiny_config
from esopt.tasks.countdown_generator import solutions

# batch: sequences per step; lr: peak AdamW learning rate (smaller for wider models).
RECIPES: dict[str, dict] = {
    "tiny-xs": {"batch": 256, "lr": 3e-3},
    "tiny-s": {"batch": 256, "lr": 3e-3},
    "tiny-m": {"batch": 256, "lr": 2.5e-3},
    "tiny-l": {"batch": 256, "lr": 2e-3},
    "tiny-xl": {"batch": 256, "lr": 1.5e-3},
    "tiny-2xl": {"batch": 256, "lr": 1.2e-3},
}
COMMON = {"warmup_steps": 100, "weight_decay": 0.01, "betas": (0.9, 0.98), "grad_clip": 1.0}
STOP = {"eval_every": 250, "patience": 4, "min_rel_improvement": 0.005, "max_steps": 8000}

# ---------------------------------------------------------------- training data

# Countdown problems per count from the generator's pretrain pool (3 numbers: the pool holds
# about 2,400 problems in all; 4 numbers: about 33,000), the first VALIDATION of each held out.
COUNTDOWN = {"min_number": 1, "max_number": 12, "max_target": 100, "seed": 1,
             "problems": {3: 2200, 4: 24000}}
VALIDATION = 300
SYNTHETIC = {
    "addition": {"name": "addition", "n_train": 20000},
    "compare": {"name": "compare", "n_train": 20000},
    "reverse": {"name": "reverse", "n_train": 20000},
}
MIX = {"countdown3": 0.4, "countdown4": 0.4, "addition": 0.07, "compare": 0.07, "reverse": 0.06}


def countdown_problems(count: int) -> list[dict]:
    """The pretraining pool's Countdown problems with ``count`` numbers (validation first)."""
    from esopt.tasks.countdown import compact_prompt, generate

    c = COUNTDOWN
    probs = generate(c["problems"][count], count=count, min_number=c["min_number"],
                     max_number=c["max_number"], max_target=c["max_target"],
                     seed=c["seed"] + count, pool="pretrain")
    return [{**p, "prompt": compact_prompt(p["numbers"], p["target"])} for p in probs]


def training_data() -> tuple[dict, dict]:
    """``(train, validation)``: per source, ``[(prompt, [completions])]``. Countdown lists every
    valid solution of a problem (``solutions``); the synthetic tasks their one gold answer."""
    import esopt.tasks as tasks

    train, val = {}, {}
    for count in (3, 4):
        rows = [(p["prompt"], solutions(p["numbers"], p["target"]) or [p["solution"]])
                for p in countdown_problems(count)]
        val[f"countdown{count}"], train[f"countdown{count}"] = rows[:VALIDATION], rows[VALIDATION:]
    for kind, cfg in SYNTHETIC.items():
        task = tasks.get(cfg, style="compact")
        train[kind] = [(r["prompt"], [task.reference(r)]) for r in task.split("train")]
    return train, val


def _encode(tok, pairs: list[tuple[str, str]]):
    """Right-padded ``(input ids, labels, mask)``; labels only on completion tokens + EOS."""
    rows = []
    for prompt, completion in pairs:
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        c = tok(completion, add_special_tokens=False)["input_ids"] + [EOS_ID]
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


class Batches:
    """Deterministic stream of training batches from a seeded RNG: each example picks a source
    by ``mix``, a problem uniformly, and one of its completions uniformly."""

    def __init__(self, data, seed: int, batch: int, mix: dict[str, float]):
        self.data, self.batch, self.rng = data, batch, random.Random(seed)
        self.kinds, self.weights = list(mix), list(mix.values())
        self.tok = char_tokenizer()

    def example(self) -> tuple[str, str]:
        kind = self.rng.choices(self.kinds, self.weights)[0]
        prompt, completions = self.data[kind][self.rng.randrange(len(self.data[kind]))]
        return prompt, self.rng.choice(completions)

    def __next__(self):
        return _encode(self.tok, [self.example() for _ in range(self.batch)])


def validation_batch(val: dict, seed: int = 0):
    """One seeded solution per Countdown validation problem, encoded once."""
    rng = random.Random(seed)
    pairs = [(p, rng.choice(cs)) for kind in sorted(val) for p, cs in val[kind]]
    return _encode(char_tokenizer(), pairs)


@torch.no_grad()
def validation_loss(model, batch, chunk: int = 200) -> float:
    """Mean token cross-entropy (nats) of the validation completions (+EOS)."""
    ids, labels, mask = batch
    total, count = 0.0, 0
    for i in range(0, ids.shape[0], chunk):
        x, y, m = ids[i:i + chunk], labels[i:i + chunk], mask[i:i + chunk]
        logits = model(input_ids=x, attention_mask=m).logits[:, :-1].float()
        target = y[:, 1:]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100,
            reduction="sum")
        total += float(loss)
        count += int((target != -100).sum())
    return total / max(count, 1)


def lr_at(step: int, peak: float, warmup_steps: int) -> float:
    """Linear warm-up to ``peak`` over ``warmup_steps``, then constant."""
    return peak * min(1.0, (step + 1) / warmup_steps)


def plateaued(history: list[dict], patience: int, min_rel: float) -> bool:
    """True when none of the last ``patience`` evaluations improved the best validation loss
    before them by at least ``min_rel`` (relative)."""
    if len(history) <= patience:
        return False
    best_before = min(h["val_loss"] for h in history[:-patience])
    best_recent = min(h["val_loss"] for h in history[-patience:])
    return best_recent > best_before * (1.0 - min_rel)


# ---------------------------------------------------------------- probes


@torch.no_grad()
def probe_pass(model, rows: list[tuple[str, list[str]]], samples: int = 16,
               temperature: float = 0.6, max_new_tokens: int = 24, seed: int = 0) -> dict:
    """Pass@1 / Pass@samples (unbiased estimator) and greedy accuracy of ``model`` on
    validation problems ``rows`` (a completion is right iff it is one of the listed solutions
    after canonicalisation), by HF ``generate``. Exploration only; the shipped numbers come
    from the shared evaluator (``evaluate_shipped``)."""
    from esopt.core.metrics import pass_at_k
    from esopt.tasks.countdown import canonical

    tok = char_tokenizer()
    torch.manual_seed(seed)
    counts, greedy = [], []
    for i in range(0, len(rows), 50):
        part = rows[i:i + 50]
        enc = tok([p for p, _ in part], return_tensors="pt", padding=True)
        width = enc["input_ids"].shape[1]
        out = model.generate(**enc, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                             num_return_sequences=samples, max_new_tokens=max_new_tokens,
                             pad_token_id=0, eos_token_id=EOS_ID)
        texts = tok.batch_decode(out[:, width:], skip_special_tokens=True)
        g = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                           pad_token_id=0, eos_token_id=EOS_ID)
        gtexts = tok.batch_decode(g[:, width:], skip_special_tokens=True)
        for j, (_, sols) in enumerate(part):
            ok = {canonical(s) for s in sols}
            counts.append(sum(canonical(t) in ok for t in texts[j * samples:(j + 1) * samples]))
            greedy.append(canonical(gtexts[j]) in ok)
    n = len(counts)
    return {"pass@1": round(sum(pass_at_k(samples, c, 1) for c in counts) / n, 4),
            f"pass@{samples}": round(sum(pass_at_k(samples, c, samples) for c in counts) / n, 4),
            "greedy": round(sum(greedy) / n, 4)}


# ---------------------------------------------------------------- training


def _new_model(name: str, seed: int):
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(tiny_config(name))


PROBE_PROBLEMS = 100  # Pass@1 probes of the curve: the first this many validation problems of each kind


def _optimizer(model, recipe: dict):
    """AdamW with weight decay on the matrices only (not on norms and biases)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": COMMON["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=recipe["lr"], betas=COMMON["betas"],
    )


def _resume(d: Path, model, opt, batches) -> dict:
    """The state saved at the last evaluation (``last.pt``), loaded into model, optimizer and
    data order: ``{"history", "step", "wall_s", "best", "best_loss"}``."""
    saved = torch.load(d / "last.pt", weights_only=True)  # plain types only: a pickle runs no code
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    batches.rng.setstate(saved["rng"])
    return {"history": saved["history"], "step": saved["step"], "wall_s": saved["wall_s"],
            "best": saved["best"], "best_loss": min(h["val_loss"] for h in saved["history"])}


def _save_state(d: Path, model, opt, batches, history: list, step: int, wall_s: float, best) -> None:
    """``last.pt`` (atomically): everything :func:`_resume` needs to continue bitwise."""
    with atomic_path(d / "last.pt") as tmp:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": batches.rng.getstate(),
                    "history": history, "step": step, "wall_s": wall_s, "best": best}, tmp)


def _curve_point(model, step: int, wall_s: float, losses: list[float], vbatch, probe_rows: dict | None) -> dict:
    """One evaluation of the curve: mean train loss since the last one, validation loss, and
    (``probe_rows``) Pass@1 probes per kind."""
    model.eval()
    point = {"step": step, "wall_s": round(wall_s, 1), "train_loss": round(sum(losses) / len(losses), 5),
             "val_loss": round(validation_loss(model, vbatch), 5)}
    for kind, rows in (probe_rows or {}).items():
        point[kind] = probe_pass(model, rows)
    model.train()
    return point


def _card_info(name: str, stop: dict, step: int, reason: str, history: list, wall_s: float) -> dict:
    """The recipe and the curve, for the model's ``pretrain_card.json``."""
    best = min(history, key=lambda h: h["val_loss"])
    return {"recipe": {**RECIPES[name], **COMMON, "stop": stop, "mix": MIX,
                       "countdown": {**{k: v for k, v in COUNTDOWN.items() if k != "problems"},
                                     "pool": "pretrain", "validation_per_count": VALIDATION,
                                     "problems": {str(k): v for k, v in COUNTDOWN["problems"].items()}},
                       "synthetic": SYNTHETIC,
                       "loss": "next-token cross-entropy on completion tokens (+EOS) only",
                       "optimizer": "AdamW, linear warm-up then constant lr"},
            "stopped_at": step, "stop_reason": reason, "shipped_step": best["step"],
            "shipped_val_loss": best["val_loss"], "train_wall_s": round(wall_s, 1), "curve": history}


def train(name: str, train_data, val_data, seed: int = 0, ckpt_dir: Path | None = None,
          resume: bool = False, log=print, probe_every: int = 2, max_steps: int | None = None):
    """Train tiny family member ``name`` from scratch until its validation loss plateaus
    (``STOP``); returns ``(best model, tokenizer, info)`` with the curve in ``info``.

    With ``ckpt_dir`` the state (model, optimizer, data RNG, curve) is saved at every
    evaluation to ``ckpt_dir/<name>/last.pt`` and the best model to ``ckpt_dir/<name>/best``;
    ``resume`` continues from ``last.pt`` bitwise as if never stopped.
    """
    recipe = {**RECIPES[name], **COMMON}
    stop = {**STOP, **({"max_steps": max_steps} if max_steps else {})}
    model = _new_model(name, seed)
    opt = _optimizer(model, recipe)
    batches = Batches(train_data, seed, recipe["batch"], MIX)
    vbatch = validation_batch(val_data, seed)
    probe_rows = {k: v[:PROBE_PROBLEMS] for k, v in val_data.items()}
    history: list[dict] = []
    best_state, best_loss, step, wall0 = None, float("inf"), 0, 0.0
    d = Path(ckpt_dir) / name if ckpt_dir is not None else None
    if resume and d is not None and (d / "last.pt").exists():
        saved = _resume(d, model, opt, batches)
        history, step, wall0, best_state, best_loss = (saved[k] for k in ("history", "step", "wall_s", "best",
                                                                          "best_loss"))
        log(f"{name} resumed at step {step}")
    t0 = time.time() - wall0
    reason = f"max_steps ({stop['max_steps']})"
    losses: list[float] = []
    model.train()
    while step < stop["max_steps"]:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, recipe["lr"], COMMON["warmup_steps"])
        ids, labels, mask = next(batches)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), COMMON["grad_clip"])
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % stop["eval_every"]:
            continue
        probe = probe_every and (step // stop["eval_every"]) % probe_every == 0
        point = _curve_point(model, step, time.time() - t0, losses, vbatch, probe_rows if probe else None)
        losses = []
        history.append(point)
        log(f"{name} {json.dumps(point)}")
        if point["val_loss"] < best_loss:
            best_loss = point["val_loss"]
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if d is not None:
            _save_state(d, model, opt, batches, history, step, time.time() - t0, best_state)
        if plateaued(history, stop["patience"], stop["min_rel_improvement"]):
            reason = (f"plateau: no {stop['min_rel_improvement']:.1%} improvement of the best "
                      f"validation loss in {stop['patience']} evaluations")
            break
    model.load_state_dict(best_state)
    model.eval()
    return model, char_tokenizer(), _card_info(name, stop, step, reason, history, time.time() - t0)


# ---------------------------------------------------------------- shipping


CARD = "pretrain_card.json"  # the recipe, the curve and (after the evaluation) the shipped numbers


def save(model, tok, name: str, card: dict, out_dir: Path = TINY_DIR) -> Path:
    """Write ``out_dir/name/`` whole or not at all (``esopt.models.save``): config,
    safetensors, tokenizer, generation config and the card."""
    from esopt import models

    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = 0, EOS_ID, 2
    return models.save(model, tok, Path(out_dir) / name, extra={CARD: json.dumps(card, indent=2) + "\n"})
