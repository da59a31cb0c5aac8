"""ES speed and memory ratios, side by side on tiny models, with where the time goes.

    python benchmarks/bench_es.py                       # tiny-s and the largest tiny model, N=16, 32 prompts
    python benchmarks/bench_es.py --models tiny-s --reps 2 --seconds 0 --no-ranks --no-slurm

Rows per model (hf engine, Countdown train prompts, greedy, the task's token budget):

  es_over_inference   ES iteration wall, member by member as a run does it (on the CPU each
                      member's perturbed weights are computed into one reused buffer and swapped
                      in and out of the HF parameters: esopt/engines/weights.py) / wall of the same N
                      generate calls of the same prompts with the unperturbed model in the same
                      engine, every row generating the whole token budget on both sides (EOS
                      ignored), so that members whose completions end later than the base
                      model's do not count as machinery cost. The ratio with natural lengths
                      is printed as natural_es_over_inference.                 goal <= 1.05
  inplace_over_swap   ES iteration wall with members perturbed in place and restored with sparse
                      fix-ups (what vLLM and GPUs do) / with the swap, side by side: the swap's
                      gain, which must be >= 1.10 for it to stay. Printed beside: the same ratio
                      of the iterations' CPU time (inplace_over_swap_cpu: the swap saves
                      arithmetic, so it shows in CPU time too, with less of the machine's noise).
  batched_tok_s       tokens/s of one population-batched generate (N members x P prompts,
                      EGGROLL rank 1) / tokens/s of plain batched generate of the same N x P
                      rows with the base model, both generating the full token budget on
                      every row (EOS ignored: the same rows x steps on both sides), so that
                      members whose completions end later than the base model's (a batch
                      runs until its last row ends: up to +11% steps seen) do not count as
                      machinery cost. The ratio with natural lengths is printed as
                      natural_batched_tok_s.                                   goal >= 0.95
                      Printed beside: pop_setup_s (the population's setup alone: each member's
                      factors drawn per tensor) within pop_call_s (one whole call).
  batched_full_tok_s  the same with full-rank members (N weight copies, one bmm per layer).
  memory              ES peak RSS / inference peak RSS, each in a fresh process doing only that
                      (ru_maxrss: the Python + torch runtime is in both; the ES extra bytes and
                      what the swap holds, one copy of the weights, are printed).  goal <= 1.10
  ranks_speedup       1-rank / 2-rank wall of the same ES iterations (torchrun, gloo, one thread
                      per rank).
  ranks_slurm         the same through the real local Slurm: one ES run as 1 Slurm task vs 2
                      tasks (model.resources.ranks), mean iteration wall from metrics.jsonl.

Each ratio is the median over the repetitions of the ratio within one repetition (both sides
measured back to back, first one then the other side first in turn; the batched rows in a loop
of their own), printed with the repetitions' quartiles [q1-q3] (min-max below 4); a verdict
whose quartiles fall on both sides of the goal says so ("not across the quartiles"). Each loop
runs at least --reps repetitions (the batched loop 2 x --reps) and goes on while it has run
under --seconds: on a small shared machine the same work moves by 10-25% from one call to the
next, and a short row's few ratios can put its median anywhere in that band. Each ES row also
prints its breakdown (median seconds per iteration): gen, perturb, restore, score, update
and the plain generation it is compared with. Read the ratios and their quartiles, not the seconds.
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
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's esopt, also when another one is installed
GOALS = {"es_over_inference": ("<=", 1.05), "inplace_over_swap": (">=", 1.10), "batched_tok_s": (">=", 0.95),
         "batched_full_tok_s": (">=", 0.95), "memory": ("<=", 1.10), "ranks_speedup": (">=", 1.8),
         "ranks_slurm": (">=", 1.8)}
PARTS = ("gen", "perturb", "restore", "score", "update")


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


def es_cfg(pop, prompts, batched=False, seed=0, full_rank=False):
    from esopt.algorithms import es

    return es.ESRun(pop=pop, sigma=0.01, lr=0.005, batch_size=prompts, seed=seed, batched=batched, perturb_rank=1,
                    full_rank=full_rank)


@contextmanager
def _ignore_eos(engine, on: bool):
    """Every row generates the whole budget (the hf engine without end-of-sequence ids)."""
    saved = engine.eos_ids
    engine.eos_ids = [] if on else saved
    try:
        yield
    finally:
        engine.eos_ids = saved


def back_to_back(rep: int, *fns):
    """Call ``fns`` one after another, in reverse order on odd repetitions (an order effect, such
    as the allocator state one side leaves the other, cancels in the medians); their results in
    the order given."""
    out = [None] * len(fns)
    for i in (reversed(range(len(fns))) if rep % 2 else range(len(fns))):
        out[i] = fns[i]()
    return out


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def repetitions(least: int, seconds: float):
    """0, 1, 2, ...: at least ``least`` repetitions, more while the loop has run under
    ``seconds`` (a short row's per-repetition ratios spread more: it gets more of them)."""
    t0 = time.perf_counter()
    rep = 0
    while rep < least or time.perf_counter() - t0 < seconds:
        yield rep
        rep += 1


def bench_batched(engine, rows, pop: int, prompts: int, budget: int, reps: int, seconds: float):
    """The batched rows, in a loop of their own, twice as many repetitions (each call is short),
    each ratio from two calls made one right after the other. Returns ``{row: [(population
    tok/s, plain batched tok/s), ...]}`` and the rank-1 population's setup seconds (outside the
    timed pairs)."""
    from esopt.algorithms import es
    from esopt.engines import population

    batched = {"pop": [], "full": [], "natural": []}
    setups = []

    def pop_run(rank, texts, members):  # tokens/s of one population-batched generate
        t, gens = timed(lambda: population.generate(engine, texts, members, 0.01, rank=rank,
                                                    max_new_tokens=budget, max_rows=pop * prompts))
        return sum(g.n_tokens for g in gens) / t

    def big_run(texts):  # tokens/s of plain batched generate of the same N x P rows
        t, g = timed(lambda: engine.generate(texts * pop, max_new_tokens=budget))
        return g.n_tokens / t

    for rep in repetitions(2 * reps, seconds):
        texts = [rows[i]["prompt"] for i in es.prompt_batch(0, rep + 1, len(rows), prompts)]
        members = [(1000 * (rep + 1) + i, 1.0) for i in range(pop)]
        setups.append(timed(lambda: population.PopulationForward(engine.model, members, 0.01, 1, prompts))[0])
        for key, rank, fixed in (("pop", 1, True), ("full", None, True), ("natural", 1, False)):
            with _ignore_eos(engine, fixed):
                batched[key].append(back_to_back(rep, lambda: pop_run(rank, texts, members),
                                                 lambda: big_run(texts)))
    return batched, setups


def bench_model(name: str, pop: int, prompts: int, reps: int, seconds: float = 0.0) -> dict:
    from esopt import noise
    from esopt.algorithms import es
    from esopt.engines.weights import Weights

    engine, task, rows = setup(name, prompts)
    prompt_rows = [rows[i] for i in es.prompt_batch(0, 1, len(rows), prompts)]
    texts = [r["prompt"] for r in prompt_rows]
    budget = task.max_new_tokens
    cfg = es_cfg(pop, prompts)
    modes = (("default", engine.weights()), ("inplace", Weights(engine.named_parameters(), swap=False)))
    walls = {m: [] for m, _ in modes}
    cpus = {m: [] for m, _ in modes}
    parts = {m: [] for m, _ in modes}
    walls_plain, es_natural, plain_natural = [], [], []  # ES rows: the plain side; natural lengths

    def es_run(weights, it):  # (wall, CPU seconds, diagnostics line) of one ES iteration
        c = time.process_time()
        t, line = timed(lambda: es.es_step(engine, task, rows, cfg, it, weights))
        return t, time.process_time() - c, line

    def plain_run(texts):  # wall of the same N generate calls with the base model
        return timed(lambda: [engine.generate(texts, max_new_tokens=budget) for _ in range(pop)])[0]

    for _, weights in modes:   # warm-up (first-call costs)
        es.es_step(engine, task, rows, cfg, 0, weights)
    engine.generate(texts * pop, max_new_tokens=budget)
    params = list(engine.named_parameters())
    state = noise.perturb(params, 1, es_cfg(pop, prompts).sigma)  # exact-restore fix-up memory
    weight_bytes = sum(w.numel() * w.element_size() for _, w in params)
    fixup_share = state.nbytes / weight_bytes
    noise.restore(params, state)
    for rep in repetitions(reps, seconds):
        it = rep + 1
        # iteration it's prompt batch: the plain generation is timed on the prompts ES just used
        texts = [rows[i]["prompt"] for i in es.prompt_batch(0, it, len(rows), prompts)]
        with _ignore_eos(engine, True):  # equal work: every row to the budget on both sides
            *lines, p = back_to_back(rep, *[lambda w=weights: es_run(w, it) for _, weights in modes],
                                     lambda: plain_run(texts))
            walls_plain.append(p)
            for (mode, _), (t, c, line) in zip(modes, lines):
                walls[mode].append(t)
                cpus[mode].append(c)
                parts[mode].append({k: line.get(f"wall_{k}", 0.0) for k in PARTS})
        t, p = back_to_back(rep, lambda: es_run(modes[0][1], it)[0], lambda: plain_run(texts))
        es_natural.append(t)
        plain_natural.append(p)
    batched, setups = bench_batched(engine, rows, pop, prompts, budget, reps, seconds)
    med = statistics.median

    def ratios(num, den):  # per-repetition ratios: a slow drift of the machine cancels in each
        return [a / b for a, b in zip(num, den)]

    def batched_ratios(key):  # a batched row: its (population, plain) pairs
        return ratios(*zip(*batched[key]))

    per_rep = {"es_over_inference": ratios(walls["default"], walls_plain),
               "inplace_over_swap": ratios(walls["inplace"], walls["default"]),
               "batched_tok_s": batched_ratios("pop"), "batched_full_tok_s": batched_ratios("full")}
    pop_tok_s = med(x for x, _ in batched["pop"])
    out = {**{key: med(q) for key, q in per_rep.items()},  # each row: the median of its ratios,
           "_spread": {key: quartiles(q) for key, q in per_rep.items()},  # and their quartiles
           "_mode": "swap" if engine.weights().swap else "in place",
           "_walls": {"plain_gen_s": med(walls_plain), "pop_tok_s": pop_tok_s,
                      "reps_es": len(walls_plain), "reps_batched": len(batched["pop"]),
                      "pop_setup_s": med(setups),
                      "pop_call_s": pop * prompts * budget / pop_tok_s,  # EOS ignored: every row the budget
                      "plain_batched_tok_s": med(y for _, y in batched["pop"]),
                      "natural_es_over_inference": med(ratios(es_natural, plain_natural)),
                      "inplace_over_swap_cpu": med(ratios(cpus["inplace"], cpus["default"])),
                      "natural_batched_tok_s": med(batched_ratios("natural")),
                      "weights_mb": weight_bytes / 2**20, "fixup_bytes_over_weight_bytes": fixup_share},
           "_parts": {mode: {"iteration": med(walls[mode]),
                             **{k: med(p[k] for p in parts[mode]) for k in PARTS}} for mode in walls}}
    return out


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
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **(env or {}))
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


def bench_slurm(name, pop, prompts, iters) -> float | None:
    """Mean ES iteration wall of one run as 1 Slurm task / as 2 tasks (gloo ranks), through the
    real Slurm (hydra/launcher=slurm); None when Slurm is not up."""
    import shutil

    if shutil.which("sinfo") is None or subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        return None
    walls = {}
    with tempfile.TemporaryDirectory(dir=REPO / "results") as root:
        for ranks in (1, 2):
            _run(["-m", "esopt.sweep", "-m", "hydra/launcher=slurm", f"model={name}", "algo=es", f"pop={pop}",
                  f"iterations={iters + 1}", f"es.batch_size={prompts}", "eval.problems=4", "eval.samples=2",
                  f"eval.every={iters + 1}", f"model.resources.ranks={ranks}", "hydra.launcher.timeout_min=30",
                  "sweep.aggregate=false", f"sweep.root={root}", f"sweep.name=r{ranks}"])
            (run,) = (Path(root) / f"r{ranks}" / "runs").iterdir()
            lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            t = [x["wall_s"] for x in lines if x["kind"] == "train"]
            walls[ranks] = (t[-1] - t[0]) / (len(t) - 1)        # iterations 2..n (1 warms up)
    return walls[1] / walls[2]


def quartiles(xs) -> tuple[float, float]:
    """First and third quartiles of the per-repetition ratios (min and max below 4 of them)."""
    xs = sorted(xs)
    if len(xs) < 4:
        return xs[0], xs[-1]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def verdict(key, value, spread=None):
    """``value`` against its goal; with the repetitions' quartiles, also whether the verdict
    holds across them (a median on the goal's side with a quartile on the other is not robust)."""
    op, goal = GOALS[key]

    def ok(v):
        return v <= goal if op == "<=" else v >= goal

    text, robust = f"{value:6.2f}", ""
    if spread is not None:
        lo, hi = spread
        text += f"  [{lo:.2f}-{hi:.2f}]"
        if not ok(lo) == ok(hi) == ok(value):
            robust = ", not across the quartiles"
    return f"{text}  (goal {op} {goal:g}: {'met' if ok(value) else 'MISSED'}{robust})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from esopt.models import TINY

    ap.add_argument("--models", nargs="+", default=["tiny-s", TINY[-1]])
    ap.add_argument("--pop", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5, help="repetitions per row, at least")
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="more repetitions while a row's loop has run under this long")
    ap.add_argument("--rank-iters", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-ranks", action="store_true")
    ap.add_argument("--no-slurm", action="store_true", help="skip the 1-vs-2 Slurm task row")
    ap.add_argument("--worker-memory", nargs=4, metavar=("MODEL", "MODE", "POP", "PROMPTS"))
    ap.add_argument("--worker-ranks", nargs=5, metavar=("MODEL", "POP", "PROMPTS", "ITERS", "OUT"))
    ap.add_argument("--write-docs", action="store_true", help="write the table to docs/results/es_speed.md")
    a = ap.parse_args()
    if a.worker_memory:
        m, mode, pop, prompts = a.worker_memory
        return _worker_memory(m, mode, int(pop), int(prompts))
    if a.worker_ranks:
        m, pop, prompts, iters, out = a.worker_ranks
        return _worker_ranks(m, int(pop), int(prompts), int(iters), out)
    import torch

    torch.set_num_threads(1)  # one thread: robust on a shared machine (no OpenMP spin contention)
    print(f"ES benchmark: N={a.pop}, {a.prompts} prompts, reps>={a.reps} (more within {a.seconds:g} s a row), "
          f"threads={torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    results = {}  # model -> its row values, for --write-docs
    for name in a.models:
        r = results[name] = bench_model(name, a.pop, a.prompts, a.reps, a.seconds)
        if not a.no_memory:
            r["memory"], extra = bench_memory(name, a.pop, a.prompts)
            r["_walls"]["es_extra_rss_mb"] = extra / 2**20
            r["_walls"]["swap_holds_mb"] = r["_walls"]["weights_mb"]
        if not a.no_ranks:
            r["ranks_speedup"] = bench_ranks(name, a.pop, a.prompts, a.rank_iters)
        if not a.no_slurm:
            slurm = bench_slurm(name, a.pop, a.prompts, a.rank_iters + 1)
            if slurm is not None:
                r["ranks_slurm"] = slurm
        print(f"\n{name} (default member mode: {r['_mode']})")
        for key in GOALS:
            if key in r:
                print(f"  {key:20s} {verdict(key, r[key], r['_spread'].get(key))}")
        print("  " + ", ".join(f"{k}={v:.3g}" for k, v in r["_walls"].items()))
        for mode, p in r["_parts"].items():
            other = p["iteration"] - sum(p[k] for k in PARTS)
            print(f"  {mode:8s} per iteration: " + ", ".join(f"{k} {v:.3f}s" for k, v in p.items())
                  + f", other {other:.3f}s; plain generation {r['_walls']['plain_gen_s']:.3f}s")
    if a.write_docs:
        write_docs(a, results)


def write_docs(a, results: dict) -> None:
    """The ratios of this run as one table (a row per goal, a column per model) in
    docs/results/es_speed.md (benchmarks/_results.py)."""
    from _results import write_table

    rows = [[key,
             *(verdict(key, r[key], r["_spread"].get(key)).replace("  ", " ").strip() if key in r else "-"
               for r in results.values())]
            for key in GOALS if any(key in r for r in results.values())]
    reps = "; ".join(f"{m}: {r['_walls']['reps_es']} ES / {r['_walls']['reps_batched']} batched repetitions"
                     for m, r in results.items())
    write_table("es_speed", "ES speed and memory ratios", None, ["ratio (goal)", *results], rows,
                notes=f"N={a.pop}, {a.prompts} prompts, hf engine, one thread; {reps}. "
                      "Each cell: the median of per-repetition ratios [first-third quartile] and its verdict.")


if __name__ == "__main__":
    main()
