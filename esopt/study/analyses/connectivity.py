"""Linear connectivity of one seed's ES and GRPO solutions, and the angle between their updates
(claim 11; Hoy et al. 2026, arXiv 2604.01499).

For an ES run and a GRPO run trained from the same base model theta_0 (the same seed, in a sweep):

* the path ``theta(t) = (1 - t) theta_ES + t theta_GRPO``, evaluated on the task's held-out split
  at t in {0, 0.25, 0.5, 0.75, 1} (the same problems, samples and evaluation seed at every t; the
  weights computed per entry in float32 from the two trained models and rounded to the run's
  dtype; t = 0 and t = 1 are the trained models bit for bit);
* the barrier: ``barrier_t = [(1 - t) Pass@1(0) + t Pass@1(1)] - Pass@1(t)`` (how far the path
  falls below the straight line between its end points), ``barrier = max over the interior t``;
* the cosine of the two updates, ``cos(theta_ES - theta_0, theta_GRPO - theta_0)`` (float64 sums
  over float32 deltas, streamed tensor by tensor), and their l2 norms.

    python -m esopt.analyze connectivity <es-run> <grpo-run> [eval options]
    python -m esopt.analyze connectivity --sweep <sweep-dir> [eval options]   (every ES/GRPO seed pair)

``connectivity.json`` is written into the ES run's directory (the runs table's
``connectivity_barrier`` / ``connectivity_cosine`` on the ES row: claim 11 reads them). Inside a
sweep (``analysis=[connectivity]``) the run that finishes second of a pair computes it; the first
finds no partner yet and says so (a warning: the sweep goes on).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from esopt.core.errors import ConfigError
from esopt.core.store import RunDir
from esopt.study.analyses.common import (EvalOpts, analysis_engine, analysis_task, checked, result_header,
                                         run_evaluate, scores, write_result)
from esopt.study.analyses.delta import (TrainedWeights, check_match, delta_chunks, load_model, open_pair, params,
                                        run_plan, trained_dir, trained_tensor)

INTERIOR = (0.25, 0.5, 0.75)      # the barrier's points (the end points are evaluated too)
PAIRED = ("es", "grpo")           # the algorithms a pair joins (plain ES: no anchored weight decay)


def connectivity(es_run: str | Path, grpo_run: str | Path, *, ts: Sequence[float] = INTERIOR, base: str | None = None,
                 device: str | None = None, opts: EvalOpts | None = None, write: bool = True,
                 log: Callable[[str], None] | None = None) -> dict:
    """Evaluate the line between the two trained models and the cosine of their updates; write
    ``connectivity.json`` into ``es_run`` (see the module docstring)."""
    t0 = time.time()
    ts = sorted(float(t) for t in ts)
    if not ts or any(not 0.0 < t < 1.0 for t in ts):
        raise ConfigError(f"interpolation points must lie in (0, 1), got {ts}")
    if Path(es_run).resolve() == Path(grpo_run).resolve():
        raise ConfigError(f"connectivity needs two different runs, got {es_run} twice")
    opts, log = checked(opts, log, EvalOpts())
    pair = open_pair(es_run, base, device)
    plan = pair.plan
    grpo_plan = run_plan(grpo_run)
    if grpo_plan.model.get("name") != plan.model.get("name"):
        raise ConfigError(f"runs {es_run} and {grpo_run} start from different models ({plan.model.get('name')} and "
                          f"{grpo_plan.model.get('name')}): no common base to interpolate over")
    other = TrainedWeights(trained_dir(grpo_run))
    check_match(pair.base_params, other, pair.base_name)
    dot = sq_es = sq_grpo = 0.0
    for name, b in pair.base_params:
        de = delta_chunks(b, trained_tensor(pair, name, b), name)
        dg = delta_chunks(b, other.get(name).to(device=b.device, dtype=b.dtype), name)
        for (_, _, x), (_, _, y) in zip(de, dg):
            x, y = x.double(), y.double()
            dot += float((x * y).sum())
            sq_es += float(x.square().sum())
            sq_grpo += float(y.square().sum())
    cosine = dot / math.sqrt(sq_es * sq_grpo) if sq_es > 0 and sq_grpo > 0 else None

    o = opts.resolved(plan)
    work, tok = load_model(plan, plan.model["name"], str(pair.trained.path), pair.device)
    work_params = dict(params(work))
    engine = analysis_engine(plan, work, tok, pair.device)
    task = analysis_task(plan, tok)
    points = []
    for t in (0.0, *ts, 1.0):
        set_interpolation(pair, other, work_params, t)
        ev = run_evaluate(engine, task, o)
        points.append({"t": t, **scores(ev, o.samples), "correct_counts": ev["correct_counts"]})
        log(f"connectivity t {t:<5g} pass@1 {ev['pass@k']['1']:.4f}")
    p0, p1 = points[0]["pass@1"], points[-1]["pass@1"]
    for p in points:
        p["line"] = (1 - p["t"]) * p0 + p["t"] * p1
        p["barrier"] = p["line"] - p["pass@1"]
    interior = [p for p in points if 0.0 < p["t"] < 1.0]
    worst = max(interior, key=lambda p: p["barrier"])
    result = {
        **result_header("connectivity", plan, pair.run_dir, pair.base_name, pair.base_path),
        "grpo_run": str(Path(grpo_run).resolve()), "grpo_algo": grpo_plan.algo, "grpo_seed": grpo_plan.seed,
        "split": o.split, "n_problems": len(points[0]["correct_counts"]), "samples": o.samples,
        "temperature": o.temperature, "eval_seed": o.seed, "ts": ts,
        "barrier": worst["barrier"], "barrier_t": worst["t"], "es_pass@1": p0, "grpo_pass@1": p1,
        "cosine": cosine, "es_l2": math.sqrt(sq_es), "grpo_l2": math.sqrt(sq_grpo),
        "points": points, "wall_s": round(time.time() - t0, 3),
    }
    return write_result(pair.run_dir, "connectivity", result, write)


def set_interpolation(pair, other: TrainedWeights, work_params: dict, t: float) -> None:
    """Set the working model to (1 - t) theta_ES + t theta_GRPO, tensor by tensor (float32, rounded
    to the model's dtype; t = 0 and t = 1 copy the trained tensors exactly)."""
    with torch.no_grad():
        for name, b in pair.base_params:
            w = work_params[name]
            te = trained_tensor(pair, name, w)
            if t == 0.0:
                w.copy_(te)
                continue
            tg = other.get(name).to(device=w.device, dtype=w.dtype)
            w.copy_(tg if t == 1.0 else ((1 - t) * te.float() + t * tg.float()).to(w.dtype))


def _summary(run_dir: Path) -> dict | None:
    return RunDir(run_dir).read_summary()


def _key(s: dict):
    cfg = s.get("config") or {}
    decay = ((cfg.get("es") or {}).get("anchor_decay") or 0.0) if s.get("algo") == "es" else 0.0
    model = s.get("model")
    return (model.get("name") if isinstance(model, dict) else model, s.get("seed")), s.get("algo"), decay


def partners(runs_dir: str | Path) -> list[tuple[Path, Path]]:
    """(ES run, GRPO run) per (model, seed) among a sweep's completed runs with a saved model
    (plain ES: anchored runs are another arm); sorted by the ES run's name."""
    found: dict = {}
    for d in sorted(Path(runs_dir).iterdir()) if Path(runs_dir).is_dir() else []:
        s = _summary(d)
        if not s or s.get("status") != "completed" or not (d / "model" / "config.json").is_file():
            continue
        key, algo, decay = _key(s)
        if algo in PAIRED and not decay:
            found.setdefault(key, {}).setdefault(algo, d)
    return sorted(((v["es"], v["grpo"]) for v in found.values() if set(PAIRED) <= set(v)), key=lambda p: p[0].name)


def partner_of(run_dir: str | Path) -> tuple[Path, Path]:
    """(ES run, GRPO run) with ``run_dir`` one of them and the other its seed's partner beside it
    in the sweep's runs folder; ConfigError when there is none (yet)."""
    run_dir = Path(run_dir)
    s = _summary(run_dir) or {}
    key, algo, decay = _key(s)
    if algo not in PAIRED or decay:
        raise ConfigError(f"connectivity pairs plain ES with GRPO runs; {run_dir.name} is {algo}")
    for es, grpo in partners(run_dir.parent):
        if run_dir.resolve() in (es.resolve(), grpo.resolve()):
            return es, grpo
    other = "GRPO" if algo == "es" else "ES"
    raise ConfigError(f"no finished {other} run of model {key[0]} seed {key[1]} with a saved model beside "
                      f"{run_dir.name} yet (the second of the pair computes it, or python -m esopt.analyze "
                      "connectivity --sweep <sweep-dir> after the sweep)")
