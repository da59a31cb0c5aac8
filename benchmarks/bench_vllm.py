"""vLLM engine speed and memory ratios, side by side (issue 12's table).

    python benchmarks/bench_vllm.py                 # tiny-s and a random Qwen2.5-0.5B-shaped model
    python benchmarks/bench_vllm.py --skip-05b      # tiny-s only (about a minute)
    python benchmarks/bench_vllm.py --write-docs    # also write the table to docs/results/vllm.md

Needs vLLM (``bash scripts/install_vllm.sh``). Every measurement runs in a fresh process (one
vLLM engine per process; peak memory is that process's high-water mark, ``ru_maxrss``; on a
CPU esopt runs vLLM's engine and worker inside its process, so that mark covers them). Rows:

  gen_vllm_over_hf    tokens/s of the vllm engine / tokens/s of the hf engine, same model, same
                      prompts and settings, measured one after the other in one process.
  gen_prepack_over_hf the same with vLLM's CPU weight repacking left on (ESOPT_VLLM_CPU_PREPACK=1:
                      oneDNN-packed linear weights; evaluation only, ES and weight sync refuse):
                      what keeping the weights live for ES costs on a CPU. (GPU vLLM never repacks.)
  es_over_gen         ES iteration inside vLLM (member by member: perturb in the worker, generate,
                      restore, score; then the update) / wall of the same N generate calls of the
                      same prompts with the unperturbed model.                   goal <= 1.10
  es_memory           peak RSS of a process running that ES iteration / of one running only the
                      N generate calls (es.drift=false: no host copy of the base).  goal <= 1.10

Each timing is the best of ``reps`` runs (the least disturbed by other load); ES and plain
generation alternate. Models: tiny-s (head size 32, fp32), and a model with Qwen2.5-0.5B-Instruct's exact config
(494M parameters, bf16, its dtype in conf/model/qwen0.5b.yaml) with random weights and the char
tokenizer, built locally (nothing is downloaded). Timings on a shared machine are noisy: read
the ratios, not the seconds.

The children (``--child``) also measure the real SmolLM2-135M for benchmarks/bench_smollm2.py:
a spec may name its task and prompt style, ``batches`` times both engines per batch size, and
``es`` runs ES on either engine (``--engine``) at several (pop, prompts) points (``--grid``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's esopt, also when run as a script
GOALS = {"es_over_gen": 1.10, "es_memory": 1.10}


def tiny_source() -> dict:
    from esopt import models
    from esopt.engines.vllm import CPU_HEAD_SIZES, head_size

    if head_size(models.local_config("tiny-s")) not in CPU_HEAD_SIZES:
        sys.exit("bench_vllm: the shipped tiny-s has a head size vLLM's CPU build does not serve")
    return {"name": "tiny-s", "path": None}


def build_05b(directory: Path) -> dict:
    """Qwen2.5-0.5B-Instruct's config (494M params), random weights (seed 0), bf16, char tokenizer."""
    if not (directory / "config.json").is_file():
        import torch
        from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

        from esopt.models import char_tokenizer

        torch.manual_seed(0)
        cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                          num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                          rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                          pad_token_id=0, eos_token_id=1, bos_token_id=2)
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
        model.generation_config = GenerationConfig(eos_token_id=1, pad_token_id=0, bos_token_id=2)
        model.save_pretrained(directory)
        char_tokenizer().save_pretrained(directory)
    return {"name": "local", "path": str(directory)}


# --------------------------------------------------------------------------------------------
# children (one measurement setup per fresh process)
# --------------------------------------------------------------------------------------------
def _load(spec: dict, dtype: str):
    """Model, tokenizer and the spec's task (``task``, ``style``; default: countdown, compact)."""
    from esopt import models, tasks

    model, tok = models.load(spec["name"], path=spec["path"], dtype=dtype)
    task = tasks.get(spec.get("task", {"name": "countdown"}), tokenizer=tok, style=spec.get("style", "compact"))
    return model, tok, task


def _vllm(model, tok, max_len: int, max_batch: int):
    from esopt import engines

    return engines.get({"name": "vllm", "max_model_len": max_len, "max_batch": max_batch}, model, tok)


def _engine(name: str, model, tok, max_len: int, max_batch: int):
    """The hf engine (generating with ``model`` itself) or the process's vLLM engine."""
    from esopt.engines.hf import HFEngine

    return HFEngine(model, tok, device="cpu", max_batch=max_batch) if name == "hf" else \
        _vllm(model, tok, max_len, max_batch)


def _tok_s(engine, prompts, reps: int, **kw) -> tuple[float, int]:
    engine.generate(prompts[:2], **{**kw, "n": 1})  # warm-up
    walls, tokens = [], 0
    for _ in range(reps):
        t = time.perf_counter()
        g = engine.generate(prompts, **kw)
        walls.append(time.perf_counter() - t)
        tokens = g.n_tokens
    return tokens / min(walls), tokens  # best of reps: the least disturbed by other load


def child_gen(a) -> dict:
    """hf then vllm (or vllm only) generation tokens/s on the same prompts."""
    from esopt.engines.hf import HFEngine

    model, tok, task = _load(a.spec, a.dtype)
    prompts = [r["prompt"] for r in task.split("test")][: a.prompts]
    kw = dict(n=a.samples, temperature=a.temperature, max_new_tokens=a.max_new, seed=0)
    out = {}
    if not a.vllm_only:
        out["hf_tok_s"], out["hf_tokens"] = _tok_s(HFEngine(model, tok, device="cpu", max_batch=a.max_batch), prompts,
                                                   a.reps, **kw)
    engine = _vllm(model, tok, a.max_len, a.max_batch)
    out["vllm_tok_s"], out["vllm_tokens"] = _tok_s(engine, prompts, a.reps, **kw)
    return out


def child_batches(a) -> dict:
    """hf and vllm generation tokens/s per batch size b (the first max(b, prompts) held-out
    prompts in calls of b each, greedy, the task's stop strings); engines and batch sizes
    interleaved within each rep, best of reps."""
    model, tok, task = _load(a.spec, a.dtype)
    sizes = [int(b) for b in a.batch_sizes.split(",")]
    prompts = [r["prompt"] for r in task.split("heldout")]
    both = {name: _engine(name, model, tok, a.max_len, max(sizes)) for name in ("hf", "vllm")}
    kw = dict(max_new_tokens=a.max_new, stop=tuple(task.stop))
    for engine in both.values():
        engine.generate(prompts[:2], **kw)  # warm-up
    walls = {(name, b): [] for name in both for b in sizes}
    tokens = {}
    for _ in range(a.reps):
        for b in sizes:
            for name, engine in both.items():
                batch = prompts[:max(b, a.prompts)]
                t, n = time.perf_counter(), 0
                for i in range(0, len(batch), b):
                    n += engine.generate(batch[i:i + b], **kw).n_tokens
                walls[(name, b)].append(time.perf_counter() - t)
                tokens[(name, b)] = n
    return {"tok_s": {name: {str(b): tokens[(name, b)] / min(walls[(name, b)]) for b in sizes} for name in both},
            "tokens": {name: {str(b): tokens[(name, b)] for b in sizes} for name in both},
            "walls": {name: {str(b): walls[(name, b)] for b in sizes} for name in both}}


def child_es(a) -> dict:
    """ES iterations (``--engine``; vLLM: in its worker) and/or plain generate calls of the same
    prompts: for each (pop, prompts) of ``--grid`` (default: the one ``--pop`` x ``--prompts``),
    one ES iteration against pop generate calls of that iteration's prompt batch."""
    from esopt.algorithms import es

    model, tok, task = _load(a.spec, a.dtype)
    engine = _engine(a.engine, model, tok, a.max_len, a.max_batch)
    weights = None
    if a.inplace:  # hf: members perturbed in place and restored, not swapped in (no weight-sized buffer)
        from esopt.engines.weights import Weights

        weights = Weights(engine.named_parameters(), swap=False)
    rows = list(task.split("train"))
    grid = [tuple(int(x) for x in g.split("x")) for g in a.grid.split(",")] if a.grid else [(a.pop, a.prompts)]
    kw = dict(max_new_tokens=a.max_new, stop=tuple(task.stop))

    def prompts_of(it, n):  # the prompt batch ES draws at iteration it
        return [rows[i]["prompt"] for i in es.prompt_batch(0, it, len(rows), n)]

    def plain(pop, n, it):
        prompts = prompts_of(it, n)
        t = time.perf_counter()
        for _ in range(pop):
            engine.generate(prompts, **kw)
        return time.perf_counter() - t

    def es_iteration(pop, n, it):
        cfg = es.ESRun(pop=pop, sigma=a.sigma, lr=a.sigma / 6, batch_size=n, seed=0, max_new_tokens=a.max_new,
                       drift=False)
        t = time.perf_counter()
        line = es.es_step(engine, task, rows, cfg, it, weights)
        return time.perf_counter() - t, {k: v for k, v in line.items() if k.startswith("wall_")}, \
            line["tokens_generated"]

    engine.generate(prompts_of(1, grid[0][1]), **kw)  # warm-up
    out = {}
    if a.mode == "both":  # interleaved, so that load changes hit both alike; best of reps each
        runs = {g: {"gen": [], "es": [], "split": [], "tokens": 0} for g in grid}
        it = 0
        for _ in range(a.reps):
            for g in grid:
                it += 1
                runs[g]["gen"].append(plain(*g, it))
                wall, split, runs[g]["tokens"] = es_iteration(*g, it)
                runs[g]["es"].append(wall)
                runs[g]["split"].append(split)
        points = [{"pop": g[0], "prompts": g[1], "gen_wall": min(r["gen"]), "es_wall": min(r["es"]),
                   "gen_walls": r["gen"], "es_walls": r["es"], "es_split": r["split"][r["es"].index(min(r["es"]))],
                   "es_tokens": r["tokens"]} for g, r in runs.items()]
        if a.grid:
            out["grid"] = points
        else:
            out.update({k: v for k, v in points[0].items() if k not in ("pop", "prompts", "es_tokens")})
    elif a.mode == "gen":
        out["gen_wall"] = plain(*grid[0], 1)
    else:
        out["es_wall"], out["es_split"], _ = es_iteration(*grid[0], 1)
    return out


def child_main(a) -> None:
    import torch

    a.spec = json.loads(a.spec)
    if a.threads:
        torch.set_num_threads(a.threads)
    out = {"gen": child_gen, "batches": child_batches, "es": child_es}[a.child](a)
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out), flush=True)
    from esopt.engines import vllm

    vllm.shutdown()


def run_child(kind: str, spec: dict, env: dict | None = None, **kw) -> dict:
    args = [sys.executable, __file__, "--child", kind, "--spec", json.dumps(spec)]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            args += [flag] if v else []
        else:
            args += [flag, str(v)]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    t = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, env=full_env, timeout=3600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        sys.exit(f"bench_vllm: child {kind} {kw} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(line[len("RESULT "):])
    print(f"  {kind} {spec['name']} {kw.get('mode', '')} {'prepack' if env else ''}: "
          f"{time.perf_counter() - t:.0f} s, {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def bench(label: str, spec: dict, dtype: str, gen: dict, es_kw: dict, threads: int) -> dict:
    common = dict(dtype=dtype, threads=threads, max_len=gen["max_len"], max_batch=gen["max_batch"])
    g = run_child("gen", spec, **common, prompts=gen["prompts"], samples=gen["samples"],
                  temperature=gen["temperature"], max_new=gen["max_new"], reps=gen["reps"])
    p = run_child("gen", spec, env={"ESOPT_VLLM_CPU_PREPACK": "1"}, **common, prompts=gen["prompts"],
                  samples=gen["samples"], temperature=gen["temperature"], max_new=gen["max_new"],
                  reps=gen["reps"], vllm_only=True)
    both = run_child("es", spec, **common, mode="both", reps=gen["reps"], **es_kw)
    es_only = run_child("es", spec, **common, mode="es", **es_kw)
    gen_only = run_child("es", spec, **common, mode="gen", **es_kw)
    return {
        "model": label,
        "hf_tok_s": g["hf_tok_s"], "vllm_tok_s": g["vllm_tok_s"], "prepack_tok_s": p["vllm_tok_s"],
        "gen_vllm_over_hf": g["vllm_tok_s"] / g["hf_tok_s"],
        "gen_prepack_over_hf": p["vllm_tok_s"] / g["hf_tok_s"],
        "es_over_gen": both["es_wall"] / both["gen_wall"], "es_wall": both["es_wall"],
        "gen_wall": both["gen_wall"], "es_split": both["es_split"],
        "es_memory": es_only["maxrss_mb"] / gen_only["maxrss_mb"],
        "es_peak_mb": es_only["maxrss_mb"], "gen_peak_mb": gen_only["maxrss_mb"],
    }


ROWS = [("vllm / hf generation tokens/s", "gen_vllm_over_hf", None),
        ("vllm with CPU repacking (eval only) / hf tokens/s", "gen_prepack_over_hf", None),
        ("ES iteration in vLLM / plain vLLM generation (<= 1.10)", "es_over_gen", "es_over_gen"),
        ("ES peak memory / vLLM inference peak memory (<= 1.10)", "es_memory", "es_memory")]


def table_rows(results: list[dict]) -> list[list[str]]:
    """One row per ratio: its title, then each model's value with its verdict."""
    rows = []
    for title, key, goal in ROWS:
        cells = []
        for r in results:
            v = r[key]
            mark = "" if goal is None else (" met" if v <= GOALS[goal] else " missed")
            cells.append(f"{v:.2f}{mark}")
        rows.append([title, *cells])
    return rows


def details(results: list[dict]) -> list[str]:
    return [f"{r['model']}: hf {r['hf_tok_s']:.0f} tok/s, vllm {r['vllm_tok_s']:.0f}, vllm repacked "
            f"{r['prepack_tok_s']:.0f}; ES iteration {r['es_wall']:.1f} s vs {r['gen_wall']:.1f} s of "
            f"generation (split {json.dumps({k: round(v, 2) for k, v in r['es_split'].items()})}); "
            f"peak RSS ES {r['es_peak_mb']:.0f} MB vs inference {r['gen_peak_mb']:.0f} MB" for r in results]


def table(results: list[dict]) -> str:
    head = "| ratio (goal) | " + " | ".join(r["model"] for r in results) + " |"
    lines = [head, "|---|" + "---|" * len(results)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(results)]
    lines.append("")
    lines += details(results)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", choices=("gen", "batches", "es"))
    ap.add_argument("--spec")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per process (0 = torch's default; 1: robust on a shared machine)")
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-new", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--vllm-only", action="store_true")
    ap.add_argument("--mode", default="both")
    ap.add_argument("--pop", type=int, default=4)
    ap.add_argument("--sigma", type=float, default=0.01)
    ap.add_argument("--engine", choices=("hf", "vllm"), default="vllm", help="es child: the engine ES runs on")
    ap.add_argument("--inplace", action="store_true", help="es child, hf: members in place, not swapped in")
    ap.add_argument("--grid", help="es child: POPxPROMPTS,... points (default: --pop x --prompts)")
    ap.add_argument("--batch-sizes", default="1,16,64", help="batches child: prompts per generate call")
    ap.add_argument("--skip-05b", action="store_true", help="tiny-s only")
    ap.add_argument("--workdir", default="/tmp/esopt-bench-vllm", help="where the 0.5B-shaped model is built")
    ap.add_argument("--write-docs", action="store_true", help="write the table to docs/results/vllm.md")
    a = ap.parse_args()
    if a.child:
        child_main(a)
        return
    from esopt.engines.vllm import available

    if not available():
        sys.exit("bench_vllm: vLLM is not installed (bash scripts/install_vllm.sh)")
    threads = a.threads
    results = [bench("tiny-s (fp32)", tiny_source(), "float32",
                     dict(prompts=64, samples=8, temperature=0.6, max_new=16, reps=5, max_len=128, max_batch=512),
                     dict(pop=16, prompts=32, max_new=16, sigma=0.01), threads)]
    if not a.skip_05b:
        spec = build_05b(Path(a.workdir) / "qwen2.5-0.5b-shaped")
        results.append(bench("Qwen2.5-0.5B-shaped (bf16)", spec, "bfloat16",
                             dict(prompts=8, samples=1, temperature=0.0, max_new=32, reps=2, max_len=256, max_batch=16),
                             dict(pop=4, prompts=8, max_new=32, sigma=1.5e-3), threads))
    print(table(results))
    if a.write_docs:
        from _results import write_table

        write_table("vllm", "vLLM engine against hf", None, ["ratio (goal)", *(r["model"] for r in results)],
                    table_rows(results), notes="\n\n".join(details(results)))


if __name__ == "__main__":
    main()
