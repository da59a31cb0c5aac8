"""SmolLM2-135M-Instruct on both engines: speed and memory ratios side by side (issue 26, item 6).

    ESOPT_CACHE=... /work/venv-vllm/bin/python benchmarks/bench_smollm2.py              # about 30 min
    ... benchmarks/bench_smollm2.py --reps 1 --gen-reps 1 --grid 2x4 --goal-point 2x4 --batch-sizes 1,4 --mem-prompts 4
    ... benchmarks/bench_smollm2.py --write-docs    # also write the tables to docs/results/smollm2.md

Needs vLLM (``bash scripts/install_vllm.sh``; run with the vLLM venv's python) and the model
(``bash scripts/install_smollm2.sh``). The real model (``model=smollm2-135m``, fp32) on task arith
(``ops=+``, chat style, greedy, the task's 32 new tokens), measured with bench_vllm.py's children:
every measurement in a fresh process, best of ``reps``, compared measurements interleaved in one
process so that load changes hit both alike, peak memory as the process's ``ru_maxrss``.

  generation          hf and vllm tokens/s at batch sizes 1, 16, 64 (held-out prompts in calls of
                      b each; batch 1: 4 calls), engines and sizes interleaved.
  es_over_gen         an ES iteration in vLLM (per member: perturb in the worker, generate,
                      restore, score; then the update) / the same pop generate calls of that
                      iteration's prompts with the unperturbed model.            goal <= 1.15
                      At each (pop, prompts per member) of ``--grid``: how an ES iteration's
                      time grows with pop and with prompts; the goal is read at ``--goal-point``
                      (the item-3 ES run's pop 8 x es.batch_size 16).
  es_memory           peak RSS of a process running one ES iteration / of one running only the
                      same generate calls (es.drift=false), on hf and on vllm.  goal <= 1.10
                      hf swaps each member in (one weight-sized buffer, esopt.engines.weights);
                      the in-place member path is measured beside it.
  weight work         (``--weights-only``: main venv, no vLLM, a few minutes) one member's in-place
                      weight work (perturb, exact restore, its share of a pop-8 update), each with
                      torch's generator and with the noise given (pre-drawn: the arithmetic
                      alone), against hf generation of the goal point's prompts in the same
                      process: the lowest ES / generation any noise source could reach there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_vllm, _results
import bench_vllm as bv  # noqa: E402

SPEC = {"name": "smollm2-135m", "path": None, "task": {"name": "arith", "ops": "+"}, "style": "chat"}
GOALS = {"es_over_gen": 1.15, "es_memory": 1.10}
TOPIC = "smollm2"
LOADS: list[float] = []  # 1-minute load averages seen before and after every child


def child(kind: str, **kw) -> dict:
    LOADS.append(os.getloadavg()[0])
    out = bv.run_child(kind, SPEC, **kw)
    LOADS.append(os.getloadavg()[0])
    return out


def measure(a) -> dict:
    common = dict(dtype="float32", threads=a.threads, max_len=128, max_new=32)
    gen = child("batches", **common, batch_sizes=a.batch_sizes, prompts=4, reps=a.gen_reps)
    grid = child("es", **common, engine="vllm", mode="both", grid=a.grid, max_batch=64, sigma=a.sigma,
                 reps=a.reps)["grid"]
    mem: dict = {}
    for _ in range(a.mem_reps):  # peak RSS varies from process to process (allocator): reps, medians
        for name, engine, extra in (("hf", "hf", {}), ("hf in place", "hf", {"inplace": True}),
                                    ("vllm", "vllm", {})):
            kw = dict(common, engine=engine, pop=2, prompts=a.mem_prompts, max_batch=64, sigma=a.sigma, **extra)
            m = mem.setdefault(name, {"es": [], "gen": []})
            m["es"].append(child("es", mode="es", **kw)["maxrss_mb"])
            m["gen"].append(mem["hf"]["gen"][-1] if name == "hf in place" else
                            child("es", mode="gen", **kw)["maxrss_mb"])
    return {"gen": gen, "grid": grid, "mem": mem, "draw_s": noise_draw_seconds(a.threads)}


def noise_draw_seconds(threads: int) -> float:
    """Seconds torch's CPU generator takes to draw one member's noise for every tensor of the
    model (esopt.noise's chunked stream, best of 3): ES in vLLM draws it three times per member
    (perturb, restore, its share of the update), hf twice (the member, the update)."""
    import torch

    from esopt import models, noise

    torch.set_num_threads(threads)
    model = models.load("smollm2-135m")[0]
    params = list(model.named_parameters())
    del model
    best = float("inf")
    for rep in range(3):
        t = time.perf_counter()
        for name, w in params:
            for _ in noise._chunks(w, noise.tensor_seed(rep, name)):
                pass
        best = min(best, time.perf_counter() - t)
    return best


def weight_work(a) -> dict:
    """One member's in-place weight work on the real model, split (best of ``reps``, interleaved):
    the draw alone, perturb, restore and a pop-8 update / 8, each with esopt.noise's generator
    and with the noise given (``noise._chunks`` replaced by copies of one pre-drawn chunk: the
    arithmetic without any drawing), and hf generation of the goal point's prompts (one member's
    generate call) in the same process."""
    import torch

    from esopt import noise
    from esopt.algorithms import es

    torch.set_num_threads(a.threads)
    model, tok, task = bv._load(SPEC, "float32")
    engine = bv._engine("hf", model, tok, 128, 64)
    params = list(model.named_parameters())
    rows = list(task.split("train"))
    n_prompts = int(a.goal_point.split("x")[1])
    prompts = [rows[i]["prompt"] for i in es.prompt_batch(0, 1, len(rows), n_prompts)]
    kw = dict(max_new_tokens=32, stop=tuple(task.stop))
    engine.generate(prompts[:2], **kw)  # warm-up
    drawn = noise._chunks
    given = torch.randn(noise.CHUNK)

    def given_chunks(tensor, seed, rank=None):
        for start, end in noise._bounds(tensor, rank):
            yield start, end, given[:end - start].clone()  # fresh: perturb/restore scale it in place

    def work() -> dict:
        t = {}
        t0 = time.perf_counter()
        for name, w in params:
            for _ in noise._chunks(w, noise.tensor_seed(1, name)):
                pass
        t["draw"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        state = noise.perturb(params, 1, a.sigma)
        t["perturb"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        noise.restore(params, state)
        t["restore"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        noise.update(params, list(range(8)), [1.0] * 8, 0.0)  # lr 0: every member drawn, the weights kept
        t["update"] = (time.perf_counter() - t0) / 8
        return t

    best: dict = {}
    with torch.no_grad():
        for _ in range(a.reps):
            t0 = time.perf_counter()
            engine.generate(prompts, **kw)
            best["gen"] = min(best.get("gen", float("inf")), time.perf_counter() - t0)
            for source, chunks in (("torch", drawn), ("given", given_chunks)):
                noise._chunks = chunks
                try:
                    for k, v in work().items():
                        best[(source, k)] = min(best.get((source, k), float("inf")), v)
                finally:
                    noise._chunks = drawn
    return {"gen": best["gen"], "prompts": n_prompts,
            "work": {src: {k: best[(src, k)] for k in ("draw", "perturb", "restore", "update")}
                     for src in ("torch", "given")}}


WORK_HEADER = ["one member, in place (as vLLM's workers)", "torch's generator, s", "noise given, s"]


def work_rows(r: dict) -> list[list[str]]:
    w = r["work"]
    rows = [[name, f"{w['torch'][k]:.2f}", f"{w['given'][k]:.2f}"] for k, name in (
        ("draw", "draw all 134.5M normals (no arithmetic)"), ("perturb", "perturb (w + sigma eps, restore check)"),
        ("restore", "exact restore"), ("update", "its share of a pop-8 update"))]
    tot = {src: sum(w[src][k] for k in ("perturb", "restore", "update")) for src in w}
    rows.append(["weight work per member (perturb + restore + update share)", f"{tot['torch']:.2f}",
                 f"{tot['given']:.2f}"])
    rows.append([f"hf generation of {r['prompts']} prompts (one member's generate call), s",
                 f"{r['gen']:.2f}", f"{r['gen']:.2f}"])
    rows.append([f"lowest ES / generation at {r['prompts']} prompts: 1 + weight work / generation (goal <= 1.15)",
                 f"{1 + tot['torch'] / r['gen']:.2f}", f"{1 + tot['given'] / r['gen']:.2f}"])
    return rows


def verdict(value: float, goal: str) -> str:
    return f"{value:.2f} {'met' if value <= GOALS[goal] else 'missed'}"


def generation_rows(r: dict) -> list[list[str]]:
    tok = r["gen"]["tok_s"]
    return [[b, f"{tok['hf'][b]:.1f}", f"{tok['vllm'][b]:.1f}", f"{tok['vllm'][b] / tok['hf'][b]:.2f}"]
            for b in tok["hf"]]


def ratio_rows(r: dict, goal_point: str) -> list[list[str]]:
    pop, prompts = (int(x) for x in goal_point.split("x"))
    point = next((p for p in r["grid"] if (p["pop"], p["prompts"]) == (pop, prompts)), r["grid"][0])
    big = max(r["grid"], key=lambda p: (p["prompts"], -p["pop"]))
    mem = {name: {k: float(np.median(v)) for k, v in m.items()} for name, m in r["mem"].items()}

    def spread(name):  # the ratio's range over reps (es and gen of one rep paired)
        rs = [e / g for e, g in zip(r["mem"][name]["es"], r["mem"][name]["gen"])]
        return f" (reps {min(rs):.2f}-{max(rs):.2f})" if len(rs) > 1 else ""

    rows = [[f"ES iteration in vLLM / plain vLLM generation, pop {point['pop']} x {point['prompts']} prompts "
             "(<= 1.15)", "-", verdict(point["es_wall"] / point["gen_wall"], "es_over_gen")]]
    if big is not point:
        rows.append([f"the same, pop {big['pop']} x {big['prompts']} prompts (<= 1.15)", "-",
                     verdict(big["es_wall"] / big["gen_wall"], "es_over_gen")])
    rows += [["ES peak memory / inference peak memory, medians (<= 1.10)",
              verdict(mem["hf"]["es"] / mem["hf"]["gen"], "es_memory") + spread("hf"),
              verdict(mem["vllm"]["es"] / mem["vllm"]["gen"], "es_memory") + spread("vllm")],
             ["the same, hf members in place instead of swapped in (<= 1.10)",
              verdict(mem["hf in place"]["es"] / mem["hf in place"]["gen"], "es_memory") + spread("hf in place"),
              "-"],
             ["one member's noise, all 134.5M entries drawn once by torch's CPU generator, s",
              f"{r['draw_s']:.2f} (drawn 2x per member)", f"{r['draw_s']:.2f} (drawn 3x per member)"],
             ["peak RSS MB of the ES process (hf: members swapped in / in place)",
              f"{mem['hf']['es']:.0f} / {mem['hf in place']['es']:.0f}", f"{mem['vllm']['es']:.0f}"],
             ["peak RSS MB of the inference process", f"{mem['hf']['gen']:.0f}", f"{mem['vllm']['gen']:.0f}"]]
    return rows


def grid_rows(r: dict) -> list[list[str]]:
    rows = []
    for p in r["grid"]:
        split = p["es_split"]
        noise = sum(split.get(f"wall_{k}", 0.0) for k in ("perturb", "restore", "update"))
        rows.append([p["pop"], p["prompts"], f"{p['es_wall']:.1f}", f"{p['gen_wall']:.1f}",
                     f"{p['es_wall'] / p['gen_wall']:.2f}", f"{p['es_wall'] / p['pop']:.1f}",
                     f"{noise / p['pop']:.2f}", p["es_tokens"]])
    return rows


GEN_HEADER = ["batch size", "hf tokens/s", "vllm tokens/s", "vllm / hf"]
RATIO_HEADER = ["ratio (goal)", "hf", "vllm"]
GRID_HEADER = ["pop", "prompts per member", "ES iteration s", "plain vLLM generation s", "ES / generation",
               "ES s per member", "noise s per member (perturb + restore + update)", "tokens generated"]


def notes(r: dict, a) -> str:
    lo, hi = min(LOADS), max(LOADS)
    tok = r["gen"]["tokens"]
    return (f"Model smollm2-135m (fp32), task arith ops=+ (chat, greedy, <= 32 new tokens); {a.threads} torch "
            f"thread(s) per process; best of {a.gen_reps} reps (generation), {a.reps} (ES grid). Generation: the first max(b, 4) held-out prompts in "
            f"calls of b (tokens generated per batch size, hf: {json.dumps(tok['hf'])}, vllm: "
            f"{json.dumps(tok['vllm'])}). ES: train prompts, sigma {a.sigma}, es.drift=false; memory at pop 2 x "
            f"{a.mem_prompts} prompts, each peak the median of {a.mem_reps} processes. 1-minute load average before/after each child process: {lo:.2f} to "
            f"{hi:.2f} (this benchmark's own process counts for about {a.threads}). {a.note}").strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per process (1: robust on a shared machine, as bench_vllm)")
    ap.add_argument("--reps", type=int, default=2, help="reps of the ES grid")
    ap.add_argument("--gen-reps", type=int, default=3, help="reps of the generation speed")
    ap.add_argument("--batch-sizes", default="1,16,64")
    ap.add_argument("--grid", default="2x4,2x16,2x64,2x128,4x16,8x16", help="POPxPROMPTS points of the ES timing")
    ap.add_argument("--goal-point", default="8x16", help="the grid point the ES/generation goal is read at")
    ap.add_argument("--mem-prompts", type=int, default=16)
    ap.add_argument("--mem-reps", type=int, default=2, help="reps of each peak-memory measurement")
    ap.add_argument("--sigma", type=float, default=1e-3)
    ap.add_argument("--note", default="", help="appended to the tables' notes (e.g. what else ran)")
    ap.add_argument("--write-docs", action="store_true", help="write the tables to docs/results/smollm2.md")
    ap.add_argument("--weights-only", action="store_true",
                    help="only the weight-work split (main venv, no vLLM; module docstring)")
    a = ap.parse_args()
    if a.weights_only:
        t = time.time()
        r = weight_work(a)
        title = "SmolLM2-135M one member's weight work against its generation"
        text = (f"Model smollm2-135m (fp32), {a.threads} torch thread(s), sigma {a.sigma}, best of {a.reps} reps "
                f"(interleaved); generation: task arith ops=+ (chat, greedy, <= 32 new tokens), hf engine (vLLM "
                f"generates at its speed, table above). Noise given: esopt.noise's chunks replaced by copies of "
                f"one pre-drawn chunk, i.e. a noise source that costs only a copy. 1-minute load average "
                f"{os.getloadavg()[0]:.2f} at the end. {a.note} Whole benchmark: {(time.time() - t) / 60:.1f} min.")
        rows = work_rows(r)
        print(f"\n## {title}\n\n| " + " | ".join(WORK_HEADER) + " |\n|" + "---|" * len(WORK_HEADER))
        print("\n".join("| " + " | ".join(str(c) for c in row) + " |" for row in rows) + "\n\n" + text)
        if a.write_docs:
            import shlex

            from _results import write_table

            write_table(TOPIC, title, "python " + shlex.join(sys.argv), WORK_HEADER, rows, notes=text)
        return
    from esopt.engines.vllm import available

    if not available():
        sys.exit("bench_smollm2: vLLM is not installed (bash scripts/install_vllm.sh; run with its python)")
    t = time.time()
    r = measure(a)
    text = notes(r, a) + f" Whole benchmark: {(time.time() - t) / 60:.0f} min."
    tables = [("SmolLM2-135M generation speed, hf and vLLM", GEN_HEADER, generation_rows(r)),
              ("SmolLM2-135M ES against inference, both engines", RATIO_HEADER, ratio_rows(r, a.goal_point)),
              ("SmolLM2-135M ES iteration time against pop and prompts (vLLM)", GRID_HEADER, grid_rows(r))]
    for title, header, rows in tables:
        print(f"\n## {title}\n\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        print("\n".join("| " + " | ".join(str(c) for c in row) + " |" for row in rows))
    print("\n" + text)
    print(json.dumps(r), file=sys.stderr)
    if a.write_docs:  # one stamp for all three: the first write must not mark the others "-dirty"
        import shlex

        from _results import commit, write_table

        command, stamp = "python " + shlex.join(sys.argv), commit()
        for title, header, rows in tables:
            write_table(TOPIC, title, command, header, rows, notes=text, commit_id=stamp)


if __name__ == "__main__":
    main()
