"""Forgetting: the base and the trained model on tasks the run did not train on.

Forgetting. Base and trained model evaluated on tasks not trained on (tiny family:
addition, compare, reverse; others: gsm8k), change = trained - base per problem, mean and
95% paired bootstrap interval over problems.

    python -m esopt.analyze forgetting <run-dir> [--tasks addition,compare,reverse]   (writes forgetting.json)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from esopt import models, tasks as task_registry
from esopt.core.errors import ConfigError
from esopt.study.analyses.common import (EvalOpts, analysis_engine, analysis_task, checked, paired_change,
                                         per_problem, result_header, run_evaluate, scores, write_result)
from esopt.study.analyses.delta import (TrainedWeights, analysis_device, base_source, check_match, load_model, params,
                               run_plan, trained_dir)

TINY_HELDOUT_TASKS = ("addition", "compare", "reverse")
REAL_HELDOUT_TASKS = ("gsm8k",)


def default_tasks(plan) -> list[str]:
    pool = TINY_HELDOUT_TASKS if models.is_tiny(plan.model) else REAL_HELDOUT_TASKS
    return [t for t in pool if t != plan.task.get("name")]


def task_config(name: str) -> dict:
    """The config of task ``name`` at its defaults (the task class holds them)."""
    if name not in task_registry.TASK_NAMES:
        raise ConfigError(f"unknown task {name!r} (known: {', '.join(task_registry.TASK_NAMES)})")
    return {"name": name}


def forgetting(run_dir: str | Path, *, tasks: Sequence[str] | None = None, base: str | None = None,
               device: str | None = None, opts: EvalOpts | None = None, write: bool = True,
               log: Callable[[str], None] | None = None) -> dict:
    """Base vs trained on tasks the run did not train on; write ``forgetting.json``.

    One model in memory at a time (base first, then trained)."""
    t0 = time.time()
    opts, log = checked(opts, log, EvalOpts(greedy=True))
    run_dir = Path(run_dir)
    plan = run_plan(run_dir)
    tdir = trained_dir(run_dir)
    names = list(tasks) if tasks else default_tasks(plan)
    if not names:
        raise ConfigError("no held-out tasks to evaluate (give --tasks)")
    cfgs = {n: task_config(n) for n in names}
    o = opts.resolved(plan)
    k = o.samples
    dev = analysis_device(plan, device)
    bname, bpath = base_source(plan, base)
    evals: dict[str, dict] = {}
    for which, (name, path) in (("base", (bname, bpath)), ("trained", (plan.model["name"], str(tdir)))):
        model, tok = load_model(plan, name, path, dev)
        if which == "base":
            check_match(params(model), TrainedWeights(tdir), bname if bpath is None else f"{bname} ({bpath})")
        engine = analysis_engine(plan, model, tok, dev)
        for tname, cfg in cfgs.items():
            ev = run_evaluate(engine, analysis_task(plan, tok, cfg), o)
            evals[f"{which}/{tname}"] = ev
            log(f"forgetting {which:<7} {tname:<10} pass@1 {ev['pass@k']['1']:.4f}")
        del model, engine
    out_tasks = {}
    for tname in names:
        b, t = evals[f"base/{tname}"], evals[f"trained/{tname}"]
        change = {}
        for metric, kk in (("pass@1", 1), ("pass@K", k)):
            v, ci = paired_change(per_problem(b["correct_counts"], k, kk), per_problem(t["correct_counts"], k, kk),
                                  n_boot=o.bootstrap, seed=o.seed)
            change[metric], change[f"{metric}_ci"] = v, ci
        if b.get("greedy_correct") is not None:
            change["greedy"], change["greedy_ci"] = paired_change(b["greedy_correct"], t["greedy_correct"],
                                                                  n_boot=o.bootstrap, seed=o.seed)
        out_tasks[tname] = {"n_problems": b["n_problems"], "base": scores(b, k), "trained": scores(t, k),
                            "change": change, "base_counts": b["correct_counts"], "trained_counts": t["correct_counts"],
                            "base_greedy": b.get("greedy_correct"), "trained_greedy": t.get("greedy_correct")}
    metrics_ = [m for m in ("pass@1", "pass@K", "greedy") if all(m in v["change"] for v in out_tasks.values())]
    result = {
        **result_header("forgetting", plan, run_dir, bname, bpath),
        "trained_task": plan.task.get("name"), "tasks_evaluated": names, "split": o.split,
        "samples": o.samples, "k": k, "temperature": o.temperature, "eval_seed": o.seed,
        "tasks": out_tasks,
        "mean_change": {m: float(np.mean([v["change"][m] for v in out_tasks.values()])) for m in metrics_},
        "wall_s": round(time.time() - t0, 3),
    }
    return write_result(run_dir, "forgetting", result, write)
