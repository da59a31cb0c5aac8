"""The ES population in one vLLM batch (LoRA members, issue 43), side by side.

    python benchmarks/bench_vllm_population.py                      # SmolLM2-135M, 8 members x 16 prompts
    python benchmarks/bench_vllm_population.py --members 8 32 64    # how it grows with the population
    python benchmarks/bench_vllm_population.py --write-docs         # also write docs/results/vllm.md's table

Needs vLLM (``bash scripts/install_vllm.sh``) and, for the default model, SmolLM2
(``bash scripts/install_smollm2.sh``). Run it with the vLLM venv's python. For each population
size G (P prompts of the task's train split, greedy, ``--max-new-tokens`` each), every row is a
wall time over the same denominator, **plain**: one vLLM ``generate`` call of the P prompts x G
members with the unperturbed model and LoRA off (pure batch inference):

  batched_lowrank   one ES iteration with ``engine=vllm es.batched=true es.perturb_rank=r`` (members as
                    LoRA adapters in one generate call: adapters written, loaded, generated,
                    unloaded; scoring; the update). goal <= 1.15
  sequential_full   today's member-by-member full-rank ES iteration inside vLLM (perturb in the
                    worker, generate the P prompts, restore; scoring; the update), LoRA off.
  hf_batched        the hf engine's batched low-rank iteration (``esopt.engines.population``,
                    es.targets=all), for scale.

Also the generated tokens per second of each, over plain's. Each timing is the best of
``--reps`` (least disturbed by other load); the engine's weights are put back to the base
model before every timed call (untimed), so every repetition runs the same iteration.
Timings on a shared machine are noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
GOAL = 1.15


def _rc(model: str, *extra: str):
    """The validated RunPlan of ``python -m esopt.sweep model=<model> algo=es <extra>``."""
    from hydra import compose, initialize_config_dir

    from esopt.cli import configs
    from esopt.runtime.validate import validate

    configs.register()
    with initialize_config_dir(config_dir=str(REPO / "esopt" / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"model={model}", "algo=es", *extra])
    return validate(cfg, check_data=False)


def _reps(G: int, reps: int, reps_large: int) -> int:
    return reps if G <= 8 else reps_large


def _timed(fn, reset, reps: int):
    best, out = float("inf"), None
    for _ in range(reps):
        reset()
        t = time.perf_counter()
        got = fn()
        wall = time.perf_counter() - t
        if wall < best:
            best, out = wall, got  # the best repetition's record (its time split)
    return best, out


def measure(model: str, members: list[int], prompts: int, rank: int, reps: int, max_new: int,
            task: str | None = None, reps_large: int = 1) -> list[dict]:
    from esopt import models
    from esopt.algorithms.es import ESRun, es_step
    from esopt.engines import vllm as vllm_engine
    from esopt.engines.hf import HFEngine
    from esopt.runtime.run import load_components

    common = (*((f"task={task}",) if task else ()), f"es.batch_size={prompts}", f"es.max_new_tokens={max_new}", "iterations=1")
    out = {G: {"members": G, "prompts": prompts} for G in members}

    # LoRA off: plain generation and the member-by-member full-rank iteration
    rc = _rc(model, "engine=vllm", f"pop={max(members)}", *common)
    base, tok, engine, task = load_components(rc)
    rows = task.split("train")
    texts = [r["prompt"] for r in rows][:prompts]
    reset = lambda: engine.sync_from(base)  # noqa: E731
    for G in members:
        wall, g = _timed(lambda: engine.generate(texts * G, max_new_tokens=max_new), reset, _reps(G, reps, reps_large))
        out[G]["plain"] = (wall, g.n_tokens)
        es = ESRun.from_run(_rc(model, "engine=vllm", f"pop={G}", *common)).validate()
        wall, rec = _timed(lambda: es_step(engine, task, rows, es, 0), reset, _reps(G, reps, reps_large))
        out[G]["sequential_full"] = (wall, rec["tokens_generated"])
        print(f"G={G}: plain {out[G]['plain'][0]:.2f}s, sequential {wall:.2f}s", flush=True)
    vllm_engine.shutdown()

    # LoRA on, room for the largest population: the batched low-rank iteration
    batched = ("es.batched=true", f"es.perturb_rank={rank}")
    rc = _rc(model, "engine=vllm", f"pop={max(members)}", *batched, *common)
    base, tok, engine, task = load_components(rc)
    reset = lambda: engine.sync_from(base)  # noqa: E731
    for G in members:
        es = ESRun.from_run(_rc(model, "engine=vllm", f"pop={G}", *batched, *common)).validate()
        wall, rec = _timed(lambda: es_step(engine, task, rows, es, 0), reset, _reps(G, reps, reps_large))
        out[G]["batched_lowrank"] = (wall, rec["tokens_generated"])
        out[G]["batched_parts"] = (rec.get("wall_gen", 0.0), rec.get("wall_update", 0.0))
        print(f"G={G}: batched vLLM {wall:.2f}s", flush=True)
    vllm_engine.shutdown()

    # the hf engine's batched low-rank iteration
    hf_model = models.load(rc.model["name"], path=rc.model.get("path"))[0]
    hf = HFEngine(hf_model, tok, device="cpu")
    state = {n: p.detach().clone() for n, p in hf_model.named_parameters()}

    def reset_hf():
        import torch

        with torch.no_grad():
            for n, p in hf_model.named_parameters():
                p.copy_(state[n])

    for G in members:
        es = ESRun.from_run(_rc(model, "engine=hf", f"pop={G}", *batched, *common)).validate()
        wall, rec = _timed(lambda: es_step(hf, task, rows, es, 0), reset_hf, _reps(G, reps, reps_large))
        out[G]["hf_batched"] = (wall, rec["tokens_generated"])
        print(f"G={G}: batched hf {wall:.2f}s", flush=True)
    return [out[G] for G in members]


def table(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["members x prompts", "plain vLLM gen s", "batched low-rank (LoRA) / plain",
              "of which generate / plain", "of which update s",
              "member-by-member full-rank / plain", "hf batched low-rank / plain", "tokens: batched / plain"]
    rows = []
    for r in results:
        p = r["plain"][0]
        tok = r["batched_lowrank"][1]
        rows.append([f"{r['members']} x {r['prompts']}", f"{p:.2f}",
                     f"{r['batched_lowrank'][0] / p:.2f}", f"{r['batched_parts'][0] / p:.2f}",
                     f"{r['batched_parts'][1]:.2f}", f"{r['sequential_full'][0] / p:.2f}",
                     f"{r['hf_batched'][0] / p:.2f}",
                     f"{tok / r['plain'][1]:.2f}" if tok and r["plain"][1] else "-"])
    return header, rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--members", type=int, nargs="+", default=[8])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--task", default=None, help="task name (default: the config's)")
    ap.add_argument("--rank", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--reps-large", type=int, default=1, help="repetitions above 8 members")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args(argv)
    results = measure(a.model, a.members, a.prompts, a.rank, a.reps, a.max_new_tokens, a.task, a.reps_large)
    header, rows = table(results)
    print(" | ".join(header))
    for r in rows:
        print(" | ".join(r))
    if a.write_docs:
        from _results import write_table

        notes = (f"Model {a.model}, task {a.task or 'the default'} (train prompts), greedy, {a.max_new_tokens} new tokens at most, "
                 f"es.perturb_rank={a.rank} (EGGROLL; batched vLLM members perturb the linear layers only, "
                 "es.targets=linear), best of "
                 f"{a.reps} (above 8 members: {a.reps_large}). Every ratio is over one plain vLLM generate call of the same prompts x members "
                 f"(LoRA off). Goal for batched low-rank / plain: <= {GOAL}. An ES iteration includes "
                 "scoring and the update; its completions differ from plain ones (perturbed weights), so "
                 "the last column says how many tokens it generated relative to plain; \"of which\" columns: the "
                 "iteration's generate call (adapters written, loaded, generated, unloaded) and its update. "
                 f"{platform.processor() or platform.machine()}, shared machine: read the ratios.")
        print(write_table("vllm", "ES population in one vLLM batch (LoRA members)", None, header, rows, notes=notes))


if __name__ == "__main__":
    main()
