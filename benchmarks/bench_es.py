"""ES speed and memory ratios, side by side on tiny models (issue 3's table).

    python benchmarks/bench_es.py                       # tiny-s and tiny-l, N=16, 32 prompts
    python benchmarks/bench_es.py --models tiny-s --reps 2 --no-ranks

Rows per model (hf engine, Countdown train prompts, greedy, the task's token budget):

  es_over_inference  ES iteration wall (member by member: perturb, generate, restore, score,
                     update) / wall of the same N generate calls of the same prompts with the
                     unperturbed model in the same engine.                      goal <= 1.05
  batched_tok_s      tokens/s of one population-batched generate (N members x P prompts,
                     EGGROLL rank 1) / tokens/s of plain batched generate of the same N x P
                     rows with the base model.                                  goal >= 0.90
  batched_speedup    member-by-member ES iteration wall / batched ES iteration wall.  goal >= 4
  memory             ES peak RSS / inference peak RSS, each in a fresh process doing only that
                     (ru_maxrss: the process's high-water mark, so the Python + torch runtime
                     is in both; also printed: the ES extra bytes it implies, and the exact-restore
                     fix-ups of one member as a share of the weights' bytes).  goal <= 1.10
  ranks_speedup      1-rank / 2-rank wall of the same ES iterations (torchrun, gloo, one thread
                     per rank; on a 2-core machine shared with others this is an upper bound
                     on contention, not on the method).                         goal >= 1.8

Medians over --reps. Timings on a shared machine are noisy: read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOALS = {"es_over_inference": ("<=", 1.05), "batched_tok_s": (">=", 0.90), "batched_speedup": (">=", 4.0),
         "memory": ("<=", 1.10), "ranks_speedup": (">=", 1.8)}


def setup(model_name: str, prompts: int):
    import torch

    from esopt import engines, models, tasks
    from esopt.core.errors import ConfigError

    torch.set_num_threads(1)  # one thread per process: robust on a shared machine
    torch.manual_seed(0)
    try:
        model, tok = models.load(model_name)
    except ConfigError:  # weights not built yet: speed and memory do not depend on training
        from transformers import Qwen2ForCausalLM

        from esopt.models.tiny import char_tokenizer, tiny_config

        print(f"note: {model_name} weights missing; benchmarking a randomly initialised {model_name}",
              file=sys.stderr)
        model, tok = Qwen2ForCausalLM(tiny_config(model_name)).eval(), char_tokenizer()
    engine = engines.get({"name": "hf", "device": "cpu", "max_batch": 1024}, model, tok)
    task = tasks.get({"name": "countdown"}, tokenizer=tok, style="compact")
    rows = list(task.split("train"))[:max(prompts, 64)]
    return engine, task, rows


def es_cfg(pop, prompts, batched=False, seed=0):
    from esopt.algorithms import es

    return es.ESRun(pop=pop, sigma=0.01, lr=0.005, batch_size=prompts, seed=seed, batched=batched, rank=1)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def bench_model(name: str, pop: int, prompts: int, reps: int) -> dict:
    from esopt import noise
    from esopt.algorithms import es
    from esopt.engines import population

    engine, task, rows = setup(name, prompts)
    prompt_rows = [rows[i] for i in es.prompt_batch(0, 1, len(rows), prompts)]
    texts = [r["prompt"] for r in prompt_rows]
    budget = task.max_new_tokens
    seq, plain, bat, pop_gen, big, parts = [], [], [], [], [], []
    es.es_step(engine, task, rows, es_cfg(pop, prompts), 0)  # warm-up (first-call costs)
    es.es_step(engine, task, rows, es_cfg(pop, prompts, batched=True), 0)
    engine.generate(texts * pop, max_new_tokens=budget)
    params = list(engine.named_parameters())
    state = noise.perturb(params, 1, es_cfg(pop, prompts).sigma)  # exact-restore fix-up memory
    fixup_share = state.nbytes / sum(w.numel() * w.element_size() for _, w in params)
    noise.restore(params, state)
    for rep in range(reps):
        it = rep + 1
        t, line = timed(lambda: es.es_step(engine, task, rows, es_cfg(pop, prompts), it))
        seq.append(t)
        parts.append((line["wall_gen"], line["wall_noise"], line["wall_update"]))
        plain.append(timed(lambda: [engine.generate(texts, max_new_tokens=budget) for _ in range(pop)])[0])
        bat.append(timed(lambda: es.es_step(engine, task, rows, es_cfg(pop, prompts, batched=True), it))[0])
        members = [(1000 * it + i, 1.0) for i in range(pop)]
        t, gens = timed(lambda: population.generate(engine, texts, members, 0.01, rank=1, max_new_tokens=budget,
                                                    max_rows=pop * prompts))
        pop_gen.append(sum(g.n_tokens for g in gens) / t)
        t, g = timed(lambda: engine.generate(texts * pop, max_new_tokens=budget))
        big.append(g.n_tokens / t)
    med = statistics.median
    return {"es_over_inference": med(seq) / med(plain), "batched_tok_s": med(pop_gen) / med(big),
            "batched_speedup": med(seq) / med(bat),
            "_walls": {"es_iter_s": med(seq), "of_which_gen_s": med(p[0] for p in parts),
                       "of_which_noise_s": med(p[1] for p in parts), "of_which_update_s": med(p[2] for p in parts),
                       "plain_gen_s": med(plain), "batched_iter_s": med(bat),
                       "pop_tok_s": med(pop_gen), "plain_batched_tok_s": med(big),
                       "fixup_bytes_over_weight_bytes": fixup_share}}


def _worker_memory(name: str, mode: str, pop: int, prompts: int) -> None:
    """In a fresh process: one ES iteration, or the same generation without ES; print peak RSS."""
    from esopt.algorithms import es

    engine, task, rows = setup(name, prompts)
    if mode == "es":
        for it in (1, 2):
            es.es_step(engine, task, rows, es_cfg(pop, prompts), it)
    else:
        texts = [rows[i]["prompt"] for i in es.prompt_batch(0, 1, len(rows), prompts)]
        for _ in range(2 * pop):
            engine.generate(texts, max_new_tokens=task.max_new_tokens)
    print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def _worker_ranks(name: str, pop: int, prompts: int, iters: int, out: str) -> None:
    import torch

    from esopt.algorithms import distributed, es

    torch.set_num_threads(1)
    distributed.init()
    engine, task, rows = setup(name, prompts)
    es.es_step(engine, task, rows, es_cfg(pop, prompts), 0)  # warm-up
    distributed.barrier()
    t = time.perf_counter()
    for it in range(1, iters + 1):
        es.es_step(engine, task, rows, es_cfg(pop, prompts), it)
    distributed.barrier()
    if distributed.rank() == 0:
        Path(out).write_text(json.dumps({"wall": time.perf_counter() - t}))


def _run(args: list[str], env: dict | None = None) -> str:
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=e, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return p.stdout


def bench_memory(name, pop, prompts) -> tuple[float, int]:
    rss = {}
    for mode in ("inference", "es"):
        out = _run([__file__, "--worker-memory", name, mode, str(pop), str(prompts)])
        rss[mode] = json.loads(out.strip().splitlines()[-1])["maxrss_kb"]
    return rss["es"] / rss["inference"], (rss["es"] - rss["inference"]) * 1024


def bench_ranks(name, pop, prompts, iters) -> float:
    walls = {}
    with tempfile.TemporaryDirectory() as d:
        for n in (1, 2):
            out = f"{d}/r{n}.json"
            _run(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), __file__,
                  "--worker-ranks", name, str(pop), str(prompts), str(iters), out])
            walls[n] = json.loads(Path(out).read_text())["wall"]
    return walls[1] / walls[2]


def verdict(key, value):
    op, goal = GOALS[key]
    ok = value <= goal if op == "<=" else value >= goal
    return f"{value:6.2f}  (goal {op} {goal:g}: {'met' if ok else 'MISSED'})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["tiny-s", "tiny-l"])
    ap.add_argument("--pop", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rank-iters", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-ranks", action="store_true")
    ap.add_argument("--worker-memory", nargs=4, metavar=("MODEL", "MODE", "POP", "PROMPTS"))
    ap.add_argument("--worker-ranks", nargs=5, metavar=("MODEL", "POP", "PROMPTS", "ITERS", "OUT"))
    a = ap.parse_args()
    if a.worker_memory:
        m, mode, pop, prompts = a.worker_memory
        return _worker_memory(m, mode, int(pop), int(prompts))
    if a.worker_ranks:
        m, pop, prompts, iters, out = a.worker_ranks
        return _worker_ranks(m, int(pop), int(prompts), int(iters), out)
    import torch

    torch.set_num_threads(1)  # one thread: robust on a shared machine (no OpenMP spin contention)
    print(f"ES benchmark: N={a.pop}, {a.prompts} prompts, reps={a.reps}, threads={torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name in a.models:
        r = bench_model(name, a.pop, a.prompts, a.reps)
        if not a.no_memory:
            r["memory"], extra = bench_memory(name, a.pop, a.prompts)
            r["_walls"]["es_extra_rss_mb"] = extra / 2**20
        if not a.no_ranks:
            r["ranks_speedup"] = bench_ranks(name, a.pop, a.prompts, a.rank_iters)
        print(f"\n{name}")
        for key in GOALS:
            if key in r:
                print(f"  {key:18s} {verdict(key, r[key])}")
        print("  " + ", ".join(f"{k}={v:.3g}" for k, v in r["_walls"].items()))


if __name__ == "__main__":
    main()
