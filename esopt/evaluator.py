"""The shared evaluator: Pass@K, Maj@K, greedy accuracy and token entropy of a model on a task.

    result = evaluate(engine, task, split="test", problems=200, samples=32, temperature=0.6)
    result = evaluate_config(cfg.eval, engine, task)      # the same, from a run's eval block
    print(format_table(result))

With ``eval.ood_task`` set, ``evaluate_config`` also evaluates that out-of-domain task (built once
by ``esopt.runtime.run.load_ood_task`` from the run's plan) and adds its token entropy and
Pass@K to the result as ``ood_*`` keys. With ``eval.probes`` set, it evaluates each forgetting
probe (built once by ``esopt.runtime.run.load_probe_tasks``) and adds its Pass@1 as
``probe_<name>`` and their mean as ``probe_pass1``; ``probe_scores`` reads a run's evaluations
into the summary's base / final / min probe Pass@1 and per-probe curve.

One sampled generate() call covers problems x samples (the engine chunks it), one greedy call
covers the problems. Every headline number carries a 95% percentile-bootstrap interval over
problems (metrics.bootstrap_ci, seeded, 1000 replicates).

What the model wrote: pass ``completions=[]`` and it receives one record per problem (each
completion's text, extracted answer, reward, verdict, token count, truncation);
``write_samples`` stores them bounded (``eval.save_samples``), ``format_samples`` prints some.
"""

from __future__ import annotations

import time
import unicodedata

import numpy as np

from esopt.core import metrics, store
from esopt.core.errors import ConfigError
from esopt.core.progress import Progress
from esopt.engines.base import truncated


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
    completions: list | None = None,
    shards=None,
) -> dict:
    """Evaluate engine's model on the first `problems` rows of task.split(split) (None: all).

    pass@k: unbiased estimator per problem from c correct of `samples`, averaged over problems.
    maj@k: majority vote of the first k samples' extracted answers (metrics.maj_at_k).
    greedy: accuracy of one temperature-0 completion per problem (None if greedy=False).
    entropy: token-mean entropy (nats) over all sampled completion tokens at `temperature`
    (ratio of sums; its CI resamples problems); None if entropy=False.
    format: mean format reward of the sampled completions.
    truncated: share of the sampled completions cut at the token budget (``max_new_tokens``)
    before they ended (no EOS, no stop string): their answers were never written.
    completions: a list that receives one record per problem (:func:`problem_records`).
    shards: this process's share when several ranks evaluate together
    (``esopt.algorithms.distributed.Shards``: ``block(n) -> (lo, hi)``, ``gather(obj) -> [obj per
    rank]``): it generates for problems ``lo..hi-1`` only, seeded as in one call over all of
    them (``engine.generate(first_prompt=lo)``), and every rank gets the whole result, the same
    as one process's (``wall_s``: this rank's).
    """
    if samples < 1:
        raise ConfigError(f"eval.samples must be >= 1, got {samples}")
    if problems is not None and problems < 1:
        raise ConfigError(f"eval.problems must be >= 1, got {problems}")
    if temperature < 0:
        raise ConfigError(f"eval.temperature must be >= 0, got {temperature}")
    t0 = time.perf_counter()
    data = task.split(split)
    all_rows = data.select(range(len(data) if problems is None else min(problems, len(data)))).to_list()
    if not all_rows:
        raise ConfigError(f"task {task.name} split {split!r} is empty")
    lo, hi = shards.block(len(all_rows)) if shards is not None else (0, len(all_rows))
    with Progress(f"evaluate {task.name} {split}", (hi - lo) * (samples + int(greedy)), "completions",
                  counts_generation=True):  # a bar on a terminal, a line every few percent in a log
        part = _evaluate_rows(engine, task, all_rows[lo:hi], lo, samples=samples, temperature=temperature,
                              top_p=top_p, budget=int(max_new_tokens or task.max_new_tokens), seed=seed,
                              greedy=greedy, entropy=entropy, records=completions is not None)
    if shards is not None:
        parts = shards.gather(part)
        part = {k: [x for p in parts for x in p[k]] for k in part if k != "tokens"} | \
            {"tokens": sum(p["tokens"] for p in parts)}
    verdicts, cut = part["verdicts"], part["cut"]
    counts = np.array([[v.correct for v in vs] for vs in verdicts], dtype=bool).sum(axis=1)  # [P]

    result: dict = {
        "task": task.name, "split": split, "n_problems": len(all_rows), "samples": samples,
        "temperature": float(temperature), "max_new_tokens": int(max_new_tokens or task.max_new_tokens),
    }
    if getattr(task, "verifier", None):
        result["verifier"] = task.verifier
    result.update(_sampled_scores(samples, counts, verdicts))
    result["truncated"] = float(np.mean(cut))
    greedy_correct = part["greedy"] if greedy else None
    result["greedy"], result["greedy_ci"] = None, None
    if greedy:
        result["greedy"] = float(np.mean(greedy_correct))
        result["greedy_ci"] = _ci(np.array(greedy_correct, dtype=float))
    result["entropy"], result["entropy_ci"] = _token_entropy(np.array(part["entropy"])) if entropy else (None, None)
    result["format"] = float(np.mean([[v.format for v in vs] for vs in verdicts]))
    result["tokens_generated"] = int(part["tokens"])
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    result["correct_counts"] = [int(c) for c in counts]
    result["greedy_correct"] = greedy_correct
    if completions is not None:
        completions += part["records"]
    return result


def _evaluate_rows(engine, task, rows, first: int, *, samples, temperature, top_p, budget, seed, greedy,
                   entropy, records) -> dict:
    """The per-problem results of ``rows`` (problems ``first..`` of the evaluation), what
    :func:`evaluate` aggregates: verdicts and truncation of each sampled completion, greedy
    correctness, (entropy sum, tokens) per problem, generated tokens and, with ``records``,
    the problems' records."""
    if not rows:  # more ranks than problems
        return {"verdicts": [], "cut": [], "tokens": 0, "entropy": [], "greedy": [], "records": []}
    prompts = [r["prompt"] for r in rows]
    stop = list(task.stop)
    at = {"first_prompt": first} if first else {}  # a rank's share: sampled as in the whole call
    gen = engine.generate(prompts, n=samples, temperature=temperature, top_p=top_p, max_new_tokens=budget,
                          seed=seed, stop=stop, return_entropy=entropy, **at)
    verdicts = _verdicts(task, gen.completions, rows)
    cut = truncated(gen, budget, stop)
    out = {"verdicts": verdicts, "cut": [list(c) for c in cut], "tokens": gen.n_tokens,
           "entropy": [[sum(h * n for h, n in zip(hs, ns)), sum(ns)] for hs, ns in zip(gen.entropy, gen.lengths)]
           if entropy else [], "greedy": [], "records": []}
    g, g_verdicts = None, None
    if greedy:
        g = engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=budget, seed=seed, stop=stop, **at)
        g_verdicts = task.verdicts([comps[0] for comps in g.completions], rows)
        out["greedy"] = [int(v.correct) for v in g_verdicts]
        out["tokens"] += g.n_tokens
    if records:
        out["records"] = problem_records(rows, gen, verdicts, cut, g, g_verdicts,
                                         truncated(g, budget, stop) if g is not None else None, first=first)
    return out


def problem_records(rows, gen, verdicts, cut, g=None, g_verdicts=None, g_cut=None, first: int = 0) -> list[dict]:
    """One record per problem: its id, prompt and gold answer (``gold``, else ``answer`` /
    ``target``, as the task's rows hold it), then per sampled completion (and the greedy one)
    its text, extracted answer, reward, verdict, token count (EOS included) and whether it was
    cut at the budget."""
    def one(text, v, n, was_cut) -> dict:
        return {"text": text, "extracted": v.extracted, "reward": float(v.reward), "correct": bool(v.correct),
                "tokens": int(n), "truncated": bool(was_cut)}

    out = []
    for p, row in enumerate(rows):
        gold = next((row[k] for k in ("gold", "answer", "target") if row.get(k) is not None), None)
        rec = {"id": row.get("id", str(first + p)), "prompt": row["prompt"], "gold": gold,
               "completions": [one(t, v, n, c) for t, v, n, c in
                               zip(gen.completions[p], verdicts[p], gen.lengths[p], cut[p])]}
        if g is not None:
            rec["greedy"] = one(g.completions[p][0], g_verdicts[p], g.lengths[p][0], g_cut[p][0])
        out.append(rec)
    return out


SAVE_SAMPLES_ALL = "all"


SAMPLES_META = ("task", "split", "n_problems", "samples", "temperature", "max_new_tokens", "verifier", "truncated")


def write_samples(path, records: list[dict], limit, result: dict | None = None, **meta) -> None:
    """Write ``records`` (``problem_records``) to ``path`` as one JSON object, atomically
    (``esopt.core.store.atomic_write_json``): the evaluation's settings (``SAMPLES_META`` of its
    ``result``) and ``meta``, then ``problems``: the first ``limit`` problems in full
    (``"all"``: every one; 0 writes nothing), then ``counts``: for the other problems only
    their id, correct and truncated counts and generated tokens."""
    if not limit:
        return
    n = len(records) if limit == SAVE_SAMPLES_ALL else int(limit)
    counts = [{"id": r["id"], "correct": sum(c["correct"] for c in r["completions"]),
               "truncated": sum(c["truncated"] for c in r["completions"]),
               "tokens": sum(c["tokens"] for c in r["completions"])} for r in records[n:]]
    head = {k: (result or {}).get(k) for k in SAMPLES_META if k in (result or {})}
    store.atomic_write_json(path, {**head, **meta, "problems": records[:n], "counts": counts})


SAMPLE_CHARS = 2000  # format_samples: a printed completion's first this many characters


def terminal_safe(text: str) -> str:
    """Model text as it may reach a terminal: every control character but newline and tab (C0,
    DEL, C1: ANSI colour and cursor codes, OSC title and hyperlink sequences) written as its
    escape (``\\x1b``), so printing it shows the text and never drives the terminal."""
    return "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) == "Cc" and c not in "\n\t"
                   else c for c in text)


def format_samples(records: list[dict], problems: int, per_problem: int = 2) -> str:
    """The first ``problems`` records as text: the prompt's last line, the gold answer, then
    ``per_problem`` sampled completions (and the greedy one) with their extracted answer,
    verdict, tokens and truncation (``esopt.evaluate eval.print_samples=N``)."""
    lines = []
    for r in records[:problems]:
        tail = (r["prompt"].rstrip().splitlines() or [""])[-1]
        lines += [f"--- {r['id']} (gold {r['gold']!r}); prompt ends: {tail[-200:]!r}"]
        shown = [(f"sample {i}", c) for i, c in enumerate(r["completions"][:per_problem])]
        shown += [("greedy", r["greedy"])] if r.get("greedy") else []
        for name, c in shown:
            verdict = "correct" if c["correct"] else "wrong"
            cut = ", truncated" if c["truncated"] else ""
            text = c["text"] if len(c["text"]) <= SAMPLE_CHARS else c["text"][:SAMPLE_CHARS] + " [...]"
            lines += [f"[{name}] {verdict}, answer {c['extracted']!r}, reward {c['reward']:g}, "
                      f"{c['tokens']} tokens{cut}:", terminal_safe(text)]
    return "\n".join(lines)


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


def _token_entropy(ent_tok: np.ndarray) -> tuple:
    """Token-mean entropy (nats) of the sampled completions from, per problem, (sum of token
    entropies, token count): the ratio of the sums; its interval resamples problems."""
    ratio = lambda a: a[:, 0].sum() / max(a[:, 1].sum(), 1)  # noqa: E731
    return float(ratio(ent_tok)), _ci(ent_tok, stat=ratio)


def format_table(result: dict) -> str:
    """A small aligned text table of an evaluate() result. ``truncated``: the share of sampled
    completions cut at the token budget. Maj@K is shown from k = 2: maj@1 (a vote over the first
    sample alone) is that one sample's accuracy, a noisier Pass@1; it stays in the result."""

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
    if result.get("truncated") is not None:
        lines.append(row("truncated", result["truncated"]))
    for k, v in result["maj@k"].items():
        if k != "1":  # maj@1 only asks whether the first sample is right: pass@1 says it better
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
    if result.get("probe_names"):
        lines.append("forgetting probes (Pass@1):")
        for name in result["probe_names"]:
            ll = result.get(f"probe_{name}_loglik")
            lines.append(row(name[:10], result[f"probe_{name}"], result[f"probe_{name}_ci"])
                         + ("" if ll is None else f"  top-1 tokens; log-lik {ll:.3f} nats/token"))
    lines.append(f"{result['tokens_generated']} tokens in {result['wall_s']:.1f} s")
    return "\n".join(lines)


OOD_KEYS = ("n_problems", "entropy", "entropy_ci", "pass@k", "pass@k_ci", "format")


PROBE_FLOOR = 0.3  # a probe whose base Pass@1 is below this cannot show forgetting well (issue 41's bar)
PROBE_MEAN = "probe_pass1"  # the evaluation's mean Pass@1 over its probes


def probe_floor_warnings(result: dict, floor: float = PROBE_FLOOR) -> list[str]:
    """One line per probe whose Pass@1 in ``result`` (the base model's evaluation) is below
    ``floor``: its held-out curve has little room to fall."""
    return [f"eval.probes: {name}: the base model's Pass@1 is {result['probe_' + name]:.3f}, at the floor "
            f"(< {floor:g}); its curve can hardly show forgetting (pick a probe it does well)"
            for name in result.get("probe_names") or () if result["probe_" + name] < floor]


def probe_scores(evals: list[tuple[int, dict]]) -> dict:
    """The summary's probe record from a run's evaluations ``[(iteration, result), ...]`` in
    order (the base model's at iteration 0 first): ``base_probe_pass1``, ``final_probe_pass1``
    and ``min_probe_pass1`` (the mean over the probes, ``probe_pass1``, at the base model, at the
    last evaluation, and its minimum over all of them, base included) and ``probe_curve``
    (per probe and for the mean, ``{iteration: Pass@1}``). {} when the evaluations hold no probes."""
    evals = [(int(i), r) for i, r in evals if r.get(PROBE_MEAN) is not None]
    if not evals:
        return {}
    names = list(evals[0][1].get("probe_names") or ())
    curve = {name: {str(i): r.get("probe_" + name) for i, r in evals} for name in names}
    curve["mean"] = {str(i): r[PROBE_MEAN] for i, r in evals}
    means = [r[PROBE_MEAN] for _, r in evals]
    return {"base_probe_pass1": means[0], "final_probe_pass1": means[-1], "min_probe_pass1": min(means),
            "probe_curve": curve}


def evaluate_likelihood(engine, task, *, split: str = "test", problems: int | None = None) -> dict:
    """Score the first ``problems`` rows of a text task (``scored_by = "likelihood"``) teacher-forced
    (``engine.score_text``): ``pass@k["1"]`` = the share of scored tokens that are the model's
    top-1 prediction (ratio of sums over passages), ``loglik`` = mean log probability per token
    (nats); both with 95% intervals resampling passages. Nothing is generated."""
    t0 = time.perf_counter()
    data = task.split(split)
    rows = data.select(range(len(data) if problems is None else min(problems, len(data)))).to_list()
    if not rows:
        raise ConfigError(f"task {task.name} split {split!r} is empty")
    scored = np.array(engine.score_text([r["prompt"] for r in rows]), dtype=float)  # [P, (n, sum logp, hits)]
    ratio = lambda col: lambda a: a[:, col].sum() / max(a[:, 0].sum(), 1)  # noqa: E731
    return {"task": task.name, "split": split, "n_problems": len(rows), "tokens_scored": int(scored[:, 0].sum()),
            "pass@k": {"1": float(ratio(2)(scored))}, "pass@k_ci": {"1": _ci(scored, stat=ratio(2))},
            "loglik": float(ratio(1)(scored)), "loglik_ci": _ci(scored, stat=ratio(1)),
            "tokens_generated": 0, "wall_s": round(time.perf_counter() - t0, 3)}


def scored_by_likelihood(task) -> bool:
    """Whether a task (or its class) is scored by likelihood (``Task.scored_by``), not by generation."""
    return task.scored_by == "likelihood"


def _side(engine, task, ev, split, problems, samples, entropy=True, shards=None) -> dict:
    """A side evaluation beside the run's task (out-of-domain set, probe): the eval block's
    temperature, top_p and seed, the task's own completion budget, no greedy pass; a text
    task scored by likelihood is scored instead (``evaluate_likelihood``, by every rank: one
    teacher-forced pass)."""
    if scored_by_likelihood(task):
        return evaluate_likelihood(engine, task, split=split, problems=problems)
    return evaluate(engine, task, split=split, problems=problems, samples=samples, temperature=ev.temperature,
                    top_p=ev.top_p, seed=ev.seed, greedy=False, entropy=entropy, shards=shards)


def _add_cost(result: dict, other: dict) -> None:
    result["tokens_generated"] += other["tokens_generated"]
    result["wall_s"] = round(result["wall_s"] + other["wall_s"], 3)


def evaluate_config(ev, engine, task, ood=None, completions: list | None = None, probes: dict | None = None,
                    shards=None) -> dict:
    """``evaluate`` with the settings of an ``eval:`` block (``esopt.core.config.EvalConfig``):
    how every run, sweep and ``esopt.evaluate`` call evaluates.

    With ``ev.ood_task`` set, ``ood`` (its task, from ``esopt.runtime.run.load_ood_task``) is evaluated too, on the
    first ``ev.ood_problems`` rows of ``ev.ood_split`` with the same samples, temperature, top_p
    and seed, its own completion budget and no greedy pass; the result gains ``ood_task``,
    ``ood_split`` and ``ood_<key>`` for ``OOD_KEYS`` (``ood_entropy``: token-mean entropy in nats
    of the sampled completions, with ``ood_entropy_ci``; ``ood_pass@k``), and its tokens and
    time are added to ``tokens_generated`` and ``wall_s``. ``completions``: as in ``evaluate``
    (the in-domain task's records).

    With ``ev.probes`` set, ``probes`` (name -> task, from ``esopt.runtime.run.load_probe_tasks``)
    are evaluated the same way on the first ``ev.probe_problems`` rows of ``ev.probe_split`` with
    ``ev.probe_samples`` samples and no entropy; the result gains ``probe_<name>`` (Pass@1, with
    ``probe_<name>_ci``), ``probe_pass1`` (their mean), ``probe_names``, and their cost. A text
    probe (``passages``) is scored by likelihood: its Pass@1 is the top-1 next-token accuracy,
    and ``probe_<name>_loglik`` its mean log-likelihood per token.

    ``shards``: several ranks evaluate together, each its share of every generated evaluation
    (``evaluate``); each gets the whole result.
    """
    result = evaluate(
        engine, task, split=ev.split, problems=ev.problems, samples=ev.samples,
        temperature=ev.temperature, top_p=ev.top_p, max_new_tokens=ev.max_new_tokens,
        seed=ev.seed, greedy=ev.greedy, completions=completions, shards=shards,
    )
    if getattr(ev, "ood_task", None):
        if ood is None:
            raise ValueError("eval.ood_task is set but no out-of-domain task was given "
                             "(build it with esopt.runtime.run.load_ood_task)")
        o = _side(engine, ood, ev, ev.ood_split, ev.ood_problems, ev.samples, shards=shards)
        result["ood_task"], result["ood_split"] = ood.name, ev.ood_split
        result.update({f"ood_{k}": o[k] for k in OOD_KEYS})
        _add_cost(result, o)
    wanted = [p["name"] for p in getattr(ev, "probes", ()) or ()]
    if wanted:
        if sorted(probes or {}) != sorted(wanted):
            raise ValueError("eval.probes is set but its tasks were not given (build them with "
                             "esopt.runtime.run.load_probe_tasks)")
        for name in wanted:
            o = _side(engine, probes[name], ev, ev.probe_split, ev.probe_problems, ev.probe_samples, entropy=False,
                      shards=shards)
            result[f"probe_{name}"], result[f"probe_{name}_ci"] = o["pass@k"]["1"], o["pass@k_ci"]["1"]
            if "loglik" in o:
                result[f"probe_{name}_loglik"], result[f"probe_{name}_loglik_ci"] = o["loglik"], o["loglik_ci"]
            _add_cost(result, o)
        result["probe_names"] = wanted
        result[PROBE_MEAN] = float(np.mean([result[f"probe_{name}"] for name in wanted]))
    return result
