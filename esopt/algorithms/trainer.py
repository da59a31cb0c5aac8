"""The loop around a population strategy over weight perturbations (``es.ES``,
``random_search.RandomSearch``): each iteration asks the strategy for its members (seeds,
signs) and prompt batch, scores them on the engine (perturb, generate, restore: or all at once
with ``es.batched``; split across ranks), tells it the rewards (it moves the weights), and around
that logs, checkpoints, resumes and evaluates on the run's schedule.

A strategy (``esopt.algorithms.strategy.Strategy``) has ``name`` (its checkpoints' ``algo``),
``cfg`` (its settings: the members' count, sigma, decoding and checkpoint knobs of ``es.ESRun``),
``ask(iteration, n_rows) -> (seeds, signs, prompt indices)`` (pure functions of the run seed and
the iteration, so a resumed run asks what an uninterrupted one would), ``tell(seeds, signs,
rewards, weights) -> step norm`` and ``state_dict`` / ``load_state_dict`` (what it carries
between iterations: saved in each checkpoint as ``strategy.pt``, restored on resume). It lives
in the algorithms layer, beside the sequences that run a strategy as one of their phases.
"""

from __future__ import annotations

import io
import json
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from esopt import models
from esopt.algorithms import distributed
from esopt.core import metrics, preempt, store
from esopt.core.errors import NonFinite
from esopt.core.files import link_tree
from esopt.core.progress import Progress

GEN_SEED_STRIDE = 1_000_003  # the iteration's sampling seed: run seed * GEN_SEED_STRIDE + iteration


# --------------------------------------------------------------------------------------------
# Scoring a population: perturb, generate, restore (or all at once), verify.
# --------------------------------------------------------------------------------------------
def _gen_kwargs(es: "ESRun", task, seed: int) -> dict:
    """Training decoding. Every member of an iteration uses the same sampling seed: with the hf
    engine's row-keyed sampling noise these are common random numbers, so members differ by
    their weights, not by sampling luck (irrelevant when greedy)."""
    greedy = es.temperature <= 0
    return dict(n=1 if greedy else es.samples, temperature=es.temperature,
                max_new_tokens=es.max_new_tokens or task.max_new_tokens, seed=seed,
                stop=tuple(task.stop))


def score(task, gen, rows: Sequence[Mapping], memo: dict | None = None) -> tuple[float, list[float]]:
    """Member reward = mean verifier reward over prompts and samples; also the per-prompt
    success probability estimated from the samples (greedy: one sample, p in {0, 1}).
    ``memo`` caches verdicts by (prompt index, completion) within an iteration: members often
    write the same completion, and the verifier is a pure function of the two."""
    rewards, success = [], []
    memo = {} if memo is None else memo
    for p, (comps, row) in enumerate(zip(gen.completions, rows)):
        verdicts = []
        for c in comps:
            v = memo.get((p, c))
            if v is None:
                v = memo[(p, c)] = task.verify(c, row)
            verdicts.append(v)
        rewards += [v.reward for v in verdicts]
        success.append(sum(bool(v.correct) for v in verdicts) / len(verdicts))  # exact: a count / n
    return float(np.mean(rewards)), success


class Clock(dict):
    """Seconds spent per phase of an iteration (``with clock("gen"): ...``), for diagnostics."""

    @contextmanager
    def __call__(self, phase: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self[phase] = self.get(phase, 0.0) + time.perf_counter() - t


def score_members(engine, weights, task, rows, members: Sequence[int], seeds, signs, es: "ESRun",
                  gen_seed: int, clock: Clock) -> tuple[np.ndarray, np.ndarray, int]:
    """Rewards [len(members)], per-prompt success [len(members), P] and generated tokens of
    the given members: perturb the engine's weights, generate, restore them bitwise (or, with
    ``es.batched``, all members in the engine's batched forward passes without touching the
    shared weights)."""
    prompts = [r["prompt"] for r in rows]
    kw = _gen_kwargs(es, task, gen_seed)
    if es.batched:
        with clock("gen"):
            targets = {"targets": es.noise_targets} if es.noise_targets != "all" else {}
            gens = engine.generate_population(prompts, [(seeds[i], signs[i]) for i in members], es.sigma,
                                              rank=es.noise_rank, **targets, **kw) if members else []
    else:
        gens = []
        for i in members:
            with clock("perturb"):
                weights.perturb(seeds[i], es.sigma, signs[i])          # theta_i = theta + sign_i sigma eps_i
            try:
                with clock("gen"):
                    gens.append(engine.generate(prompts, **kw))
            finally:
                with clock("restore"):
                    weights.restore()                                  # back to theta, bitwise
    with clock("score"):
        memo: dict = {}
        scored = [score(task, g, rows, memo) for g in gens]
    rewards = np.asarray([r for r, _ in scored], dtype=np.float64)
    success = np.asarray([s for _, s in scored], dtype=np.float64).reshape(len(members), len(rows))
    return rewards, success, int(sum(g.n_tokens for g in gens))


def step(strategy, engine, task, train_rows, iteration: int, weights=None) -> dict:
    """One iteration of ``strategy`` on the engine's weights (ask -> score -> tell, then the
    anchored weight decay of ``es.anchor_decay`` when set); returns its diagnostics line (no drift).

    Every rank calls it: each scores its share of the members, rewards are all-gathered, and
    every rank tells the strategy the same rewards, so it applies the same update.
    """
    es = strategy.cfg
    weights = weights if weights is not None else engine.weights()
    clock = Clock()
    seeds, signs, batch = strategy.ask(iteration, len(train_rows))                # s_1..s_N, prompts
    rows = [train_rows[i] for i in batch]
    mine = distributed.my_members(es.pop, distributed.world_size(), distributed.rank(), es.antithetic)
    r_mine, s_mine, tokens = score_members(engine, weights, task, rows, mine, seeds, signs, es,
                                           es.seed * GEN_SEED_STRIDE + iteration, clock)  # R_i
    rewards, success, tokens = distributed.gather_members(mine, r_mine, s_mine, tokens, es.pop, len(rows))
    if not np.all(np.isfinite(rewards)):
        raise NonFinite(f"non-finite reward at iteration {iteration}: {rewards.tolist()}")
    with clock("update"):
        step_norm = strategy.tell(seeds, signs, rewards, weights)                 # the strategy's move
        pull = weights.anchor(es.anchor_decay) if es.anchor_decay else None        # theta -= lambda (theta - theta_0)
    bad = weights.nonfinite()
    if bad is not None:
        raise NonFinite(f"non-finite weights in {bad} after the update of iteration {iteration}")
    world = distributed.world_size()
    return {
        "world_size": world,
        **({"members_by_rank": [distributed.my_members(es.pop, world, r, es.antithetic) for r in range(world)]}
           if world > 1 else {}),
        "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
        "reward_max": float(rewards.max()), "reward_min": float(rewards.min()),
        "rewards": [round(float(x), 6) for x in rewards],
        "js_succ": float(np.mean([metrics.js_succ(success[:, p]) for p in range(success.shape[1])])),
        "p_pop": float(np.mean([metrics.p_pop(success[:, p]) for p in range(success.shape[1])])),
        "update_norm": step_norm, **({"anchor_norm": pull} if pull is not None else {}),
        "tokens_generated": int(tokens),
        **{f"wall_{k}": round(v, 4) for k, v in clock.items()},
    }




# --------------------------------------------------------------------------------------------
# Checkpoints: the engine's weights as an HF folder (esopt.models.save) + state.json.
# --------------------------------------------------------------------------------------------
STRATEGY_STATE = "strategy.pt"  # a checkpoint's strategy state (torch.save), when it has one


def save_checkpoint(ctx, state: dict, strategy_state: dict | None = None) -> None:
    """Write ``<run>/checkpoint/`` as a whole or not at all: the weights the engine generates
    with (copied into the HF model first when the engine holds its own copy), state.json, the
    strategy's state (``strategy.pt``, when it keeps one) and, last, the sha256 manifest that
    :func:`load_checkpoint` checks. The next one replaces it, unless ``sweep.keep_checkpoints``:
    then each also stays as :func:`kept_checkpoint` (hard links to its files)."""
    ctx.engine.sync_to(ctx.model)
    extra: dict = {"state.json": json.dumps(state, indent=2)}
    if strategy_state:
        buf = io.BytesIO()
        torch.save(strategy_state, buf)
        extra[STRATEGY_STATE] = buf.getvalue()
    models.save(ctx.model, ctx.tokenizer, ctx.run.checkpoint_dir, extra=extra, manifest=True)
    if ctx.cfg.sweep.keep_checkpoints:  # every checkpoint stays: this one also as <checkpoint>-<iteration>
        link_tree(ctx.run.checkpoint_dir, kept_checkpoint(ctx.run.checkpoint_dir, int(state["iteration"])))


def kept_checkpoint(directory, iteration: int) -> Path:
    """Where ``sweep.keep_checkpoints`` keeps the checkpoint of ``iteration`` (``<run>/checkpoint``
    -> ``<run>/checkpoint-<iteration>``; a sequence phase's beside its own directory)."""
    directory = Path(directory)
    return directory.with_name(f"{directory.name}-{iteration}")


def load_checkpoint(ctx, phase: str, algo: str) -> dict | None:
    """Copy a checkpoint's weights into the model and the engine (bitwise); return its state
    (with the strategy's under ``"strategy"``: {} when it saved none).
    A checkpoint whose files do not match its manifest (a flipped byte, a truncated file, no
    manifest) is not used: the previous one (``checkpoint.old``, left by a kill mid-swap) if it
    is sound, else None (the run restarts), with one warning line naming the file."""
    current = Path(ctx.run.checkpoint_dir)
    bad = None
    for directory in (current, current.with_name(current.name + ".old")):
        if not directory.exists():
            continue
        reason = store.verify_manifest(directory)
        if reason is None:
            try:
                state = json.loads((directory / "state.json").read_text())
            except (OSError, ValueError) as e:  # pragma: no cover - the manifest covers it
                reason = f"{directory / 'state.json'}: unreadable ({e})"
        if reason is not None:
            bad = bad or reason
            continue
        if state.get("algo") != algo or state.get("phase") != phase:
            return None
        if bad:
            store.checkpoint_warning(bad, directory.name)
        saved = directory / STRATEGY_STATE
        state["strategy"] = torch.load(saved, weights_only=True) if saved.exists() else {}
        models.load_weights(ctx.model, directory)
        ctx.engine.sync_from(ctx.model)
        return state
    if bad:
        store.checkpoint_warning(bad, None)
    return None


# --------------------------------------------------------------------------------------------
# The loop: iterations, plus recording, checkpoints and evaluations around them.
# --------------------------------------------------------------------------------------------
def train(ctx, strategy) -> None:
    """``strategy`` on the engine's weights for ``strategy.cfg.iterations`` iterations.

    Logs one train line per iteration (rank 0), evaluates on the run's schedule
    (``ctx.eval_due``), checkpoints every ``es.checkpoint_every``, resumes from the run's
    checkpoint. Drift is measured from the weights this phase started from.
    """
    es = strategy.cfg
    distributed.init()
    lead = distributed.rank() == 0
    train_rows = list(ctx.task.split("train"))
    weights = ctx.engine.weights()
    if es.drift or es.anchor_decay:  # a host copy of the starting weights (7B bf16: 14 GB; es.drift=false
        weights.snapshot_base()      # there): drift's reference and anchored weight decay's theta_0

    start = 0
    state = load_checkpoint(ctx, ctx.phase, strategy.name) if ctx.run is not None else None
    if state is not None:
        start = int(state["iteration"])
        strategy.load_state_dict(state["strategy"])
        ctx.add_tokens(int(state["tokens_total"]) - ctx.tokens_total)
        if lead:
            print(f"esopt: note: {strategy.name} ({ctx.phase}) resumes from its checkpoint at iteration {start}",
                  file=sys.stderr, flush=True)
    distributed.check_same(weights.checksum(), where=f"start (iteration {start})")
    if lead and ctx.run is not None:  # lines an interrupted attempt wrote after its checkpoint
        last = ctx.iteration_offset + start

        def keep(line) -> bool:  # the evaluation at the checkpoint is redone below (same weights)
            it = int(line.get("iteration", 0))
            return line.get("phase") != ctx.phase or it < last or (it == last and line.get("kind") != "eval")

        ctx.run.truncate_metrics(keep)
    # A kill between the checkpoint and the evaluation due at that iteration would lose that
    # curve point (and its Optuna report): evaluate it now, on the checkpoint's weights.
    if start > 0 and ctx.eval_due(start):  # every rank: each evaluates its share (ctx.evaluate)
        ctx.evaluate(start)

    # progress per run: a bar on a terminal (iterations, tok/s, ETA), a line every few percent or
    # minutes in a log (esopt.core.progress); silent on ranks > 0
    bar = Progress(f"{strategy.name} {ctx.phase}".strip(), es.iterations - start, "iterations")
    bar.on = bar.on and lead
    with bar:
        _iterations(strategy, ctx, es, train_rows, weights, start, lead, bar)


def _iterations(strategy, ctx, es, train_rows, weights, start: int, lead: bool, bar: Progress) -> None:
    """The iterations after ``start``: step, record, checkpoint, evaluate when due, honour a
    preemption (save and exit for the requeue)."""
    for it in range(start + 1, es.iterations + 1):
        line = step(strategy, ctx.engine, ctx.task, train_rows, it, weights)
        ctx.add_tokens(line["tokens_generated"])
        bar.advance(1, line["tokens_generated"])
        if es.drift:
            line["drift"] = weights.drift()
        if es.checksum_every and it % es.checksum_every == 0:
            distributed.check_same(weights.checksum(), where=f"iteration {it}")
        if lead:
            ctx.log(kind="train", iteration=it, **line)
        saved = bool(es.checkpoint_every) and (it % es.checkpoint_every == 0 or it == es.iterations)
        if saved and lead and ctx.run is not None:
            save_checkpoint(ctx, {"algo": strategy.name, "phase": ctx.phase, "iteration": it,
                                  "tokens_total": ctx.tokens_total, "config": asdict(es)}, strategy.state_dict())
        if ctx.eval_due(it):  # every rank evaluates its share; rank 0 records
            ctx.evaluate(it)
        distributed.barrier()
        if distributed.any_rank(preempt.requested()):  # the job's time is nearly up: save here, requeue
            if not saved and lead and ctx.run is not None:
                save_checkpoint(ctx, {"algo": strategy.name, "phase": ctx.phase, "iteration": it,
                                      "tokens_total": ctx.tokens_total, "config": asdict(es)}, strategy.state_dict())
            distributed.barrier()
            preempt.release()  # rank 0: requeued, exits; the other ranks end here
            raise SystemExit(-1)
