"""The shared evaluator: Pass@K, Maj@K, greedy accuracy and token entropy of a model on a task.

    result = evaluate(engine, task, split="test", problems=200, samples=32, temperature=0.6)
    result = evaluate_config(cfg.eval, engine, task)      # the same, from a run's eval block
    print(format_table(result))

With ``eval.ood_task`` set, ``evaluate_config`` also evaluates that out-of-domain task (built once
by ``ood_task``) and adds its token entropy and Pass@K to the result as ``ood_*`` keys.

One sampled generate() call covers problems x samples (the engine chunks it), one greedy call
covers the problems. Every headline number carries a 95% percentile-bootstrap interval over
problems (metrics.bootstrap_ci, seeded, 1000 replicates).
"""

from __future__ import annotations

import time

import numpy as np

from esopt import tasks
from esopt.core import metrics
from esopt.core.errors import ConfigError


def k_values(samples: int) -> list[int]:
    """k = 1, 2, 4, ... up to samples, plus samples itself when it is not a power of two."""
    ks = [1 << i for i in range(samples.bit_length()) if (1 << i) <= samples]
    return ks if ks[-1] == samples else ks + [samples]


def _ci(values, stat=np.mean) -> list[float]:
    return list(metrics.bootstrap_ci(values, stat=stat))


def evaluate(
    engine,
    task,
    *,
    split: str = "test",
    problems: int | None = 200,
    samples: int = 32,
    temperature: float = 0.6,
    top_p: float = 1.0,
    max_new_tokens: int | None = None,
    seed: int = 0,
    greedy: bool = True,
    entropy: bool = True,
) -> dict:
    """Evaluate engine's model on the first `problems` rows of task.split(split) (None: all).

    pass@k: unbiased estimator per problem from c correct of `samples`, averaged over problems.
    maj@k: majority vote of the first k samples' extracted answers (metrics.maj_at_k).
    greedy: accuracy of one temperature-0 completion per problem (None if greedy=False).
    entropy: token-mean entropy (nats) over all sampled completion tokens at `temperature`
    (ratio of sums; its CI resamples problems); None if entropy=False.
    format: mean format reward of the sampled completions.
    """
    if samples < 1:
        raise ConfigError(f"eval.samples must be >= 1, got {samples}")
    if problems is not None and problems < 1:
        raise ConfigError(f"eval.problems must be >= 1, got {problems}")
    if temperature < 0:
        raise ConfigError(f"eval.temperature must be >= 0, got {temperature}")
    t0 = time.perf_counter()
    data = task.split(split)
    rows = data.select(range(len(data) if problems is None else min(problems, len(data)))).to_list()
    if not rows:
        raise ConfigError(f"task {task.name} split {split!r} is empty")
    prompts = [r["prompt"] for r in rows]
    budget = int(max_new_tokens or task.max_new_tokens)
    stop = list(task.stop)

    gen = engine.generate(
        prompts, n=samples, temperature=temperature, top_p=top_p, max_new_tokens=budget,
        seed=seed, stop=stop, return_entropy=entropy,
    )
    verdicts = _verdicts(task, gen.completions, rows)
    counts = np.array([[v.correct for v in vs] for vs in verdicts], dtype=bool).sum(axis=1)  # [P]
    tokens = gen.n_tokens

    result: dict = {
        "task": task.name, "split": split, "n_problems": len(rows), "samples": samples,
        "temperature": float(temperature),
    }
    if getattr(task, "verifier", None):
        result["verifier"] = task.verifier
    result.update(_sampled_scores(samples, counts, verdicts))

    greedy_correct = None
    result["greedy"], result["greedy_ci"] = None, None
    if greedy:
        g = engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=budget, seed=seed, stop=stop)
        greedy_correct = [int(v.correct) for v in task.verdicts([comps[0] for comps in g.completions], rows)]
        tokens += g.n_tokens
        result["greedy"] = float(np.mean(greedy_correct))
        result["greedy_ci"] = _ci(np.array(greedy_correct, dtype=float))

    result["entropy"], result["entropy_ci"] = _token_entropy(gen) if entropy else (None, None)
    result["format"] = float(np.mean([[v.format for v in vs] for vs in verdicts]))
    result["tokens_generated"] = int(tokens)
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    result["correct_counts"] = [int(c) for c in counts]
    result["greedy_correct"] = greedy_correct
    return result


def _verdicts(task, completions, rows) -> list:
    """The task's verdict on every sampled completion, scored in one call, grouped per problem."""
    flat = task.verdicts([c for comps in completions for c in comps],
                         [row for comps, row in zip(completions, rows) for _ in comps])
    verdicts, i = [], 0
    for comps in completions:
        verdicts.append(flat[i:i + len(comps)])
        i += len(comps)
    return verdicts


def _sampled_scores(samples: int, counts: np.ndarray, verdicts: list) -> dict:
    """Pass@k (unbiased, per problem from c correct of n) and Maj@k for every reported k, with
    intervals over problems."""
    out: dict = {"pass@k": {}, "pass@k_ci": {}, "maj@k": {}, "maj@k_ci": {}}
    for k in k_values(samples):
        per = metrics.pass_at_k(samples, counts, k)
        out["pass@k"][str(k)] = float(per.mean())
        out["pass@k_ci"][str(k)] = _ci(per)
        maj = np.array([
            metrics.maj_at_k([v.extracted for v in vs], [v.correct for v in vs], k) for vs in verdicts
        ])
        out["maj@k"][str(k)] = float(maj.mean())
        out["maj@k_ci"][str(k)] = _ci(maj)
    return out


def _token_entropy(gen) -> tuple:
    """Token-mean entropy (nats) of the sampled completions: per problem (sum of token entropies,
    token count), the ratio of the sums; its interval resamples problems."""
    ent_tok = np.array([
        [sum(h * n for h, n in zip(hs, ns)), sum(ns)] for hs, ns in zip(gen.entropy, gen.lengths)
    ])
    ratio = lambda a: a[:, 0].sum() / max(a[:, 1].sum(), 1)  # noqa: E731
    return float(ratio(ent_tok)), _ci(ent_tok, stat=ratio)


def format_table(result: dict) -> str:
    """A small aligned text table of an evaluate() result."""

    def row(name, value, ci=None):
        v = "-" if value is None else f"{value:.4f}"
        c = "" if not ci else f"[{ci[0]:.4f}, {ci[1]:.4f}]"
        return f"{name:<10} {v:>8}  {c}"

    lines = [
        f"{result['task']} / {result['split']}: {result['n_problems']} problems x {result['samples']} samples, "
        f"T={result['temperature']}",
        f"{'metric':<10} {'value':>8}  95% CI",
    ]
    for k, v in result["pass@k"].items():
        lines.append(row(f"pass@{k}", v, result["pass@k_ci"][k]))
    for k, v in result["maj@k"].items():
        lines.append(row(f"maj@{k}", v, result["maj@k_ci"][k]))
    lines.append(row("greedy", result["greedy"], result["greedy_ci"]))
    lines.append(row("entropy", result["entropy"], result["entropy_ci"]))
    lines.append(row("format", result["format"]))
    if result.get("ood_task"):
        lines.append(f"out of domain: {result['ood_task']} / {result['ood_split']}, "
                     f"{result['ood_n_problems']} problems")
        for k, v in result["ood_pass@k"].items():
            lines.append(row(f"pass@{k}", v, result["ood_pass@k_ci"][k]))
        lines.append(row("entropy", result["ood_entropy"], result["ood_entropy_ci"]))
    lines.append(f"{result['tokens_generated']} tokens in {result['wall_s']:.1f} s")
    return "\n".join(lines)


OOD_KEYS = ("n_problems", "entropy", "entropy_ci", "pass@k", "pass@k_ci", "format")


def ood_task(ev, tokenizer=None, style: str | None = None):
    """The out-of-domain task of an ``eval:`` block (``ev.ood_task``), or None when unset.
    ``style``: the model's prompt style (the task config's own ``style`` wins)."""
    if not ev.ood_task:
        return None
    return tasks.get(ev.ood_task, tokenizer=tokenizer, style=ev.ood_task.get("style") or style)


def evaluate_config(ev, engine, task, ood=None) -> dict:
    """``evaluate`` with the settings of an ``eval:`` block (``esopt.core.config.EvalConfig``):
    how every run, sweep and ``esopt.evaluate`` call evaluates.

    With ``ev.ood_task`` set, ``ood`` (its task, from ``ood_task``) is evaluated too, on the
    first ``ev.ood_problems`` rows of ``ev.ood_split`` with the same samples, temperature, top_p
    and seed, its own completion budget and no greedy pass; the result gains ``ood_task``,
    ``ood_split`` and ``ood_<key>`` for ``OOD_KEYS`` (``ood_entropy``: token-mean entropy in nats
    of the sampled completions, with ``ood_entropy_ci``; ``ood_pass@k``), and its tokens and
    time are added to ``tokens_generated`` and ``wall_s``.
    """
    result = evaluate(
        engine, task, split=ev.split, problems=ev.problems, samples=ev.samples,
        temperature=ev.temperature, top_p=ev.top_p, max_new_tokens=ev.max_new_tokens,
        seed=ev.seed, greedy=ev.greedy,
    )
    if getattr(ev, "ood_task", None):
        if ood is None:
            raise ValueError("eval.ood_task is set but no out-of-domain task was given "
                             "(build it with esopt.evaluator.ood_task)")
        o = evaluate(engine, ood, split=ev.ood_split, problems=ev.ood_problems, samples=ev.samples,
                     temperature=ev.temperature, top_p=ev.top_p, seed=ev.seed, greedy=False)
        result["ood_task"], result["ood_split"] = ood.name, ev.ood_split
        result.update({f"ood_{k}": o[k] for k in OOD_KEYS})
        result["tokens_generated"] += o["tokens_generated"]
        result["wall_s"] = round(result["wall_s"] + o["wall_s"], 3)
    return result
