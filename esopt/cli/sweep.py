"""``python -m esopt.sweep [-m] key=value ...``: one run, or a grid of runs (Hydra multirun).

    python -m esopt.sweep model=tiny-s algo=es pop=16 iterations=30
    python -m esopt.sweep -m model=tiny-s,tiny-m pop=8,16,32 seed=0,1,2

Each run: validate (one line, exit 2 on bad input), run (``esopt.runtime.run``), then the
analyses it asks for (``analysis=[...]``, ``esopt.study.analyses``). In a multirun the esopt
sweeper validates the whole grid first, skips recorded runs and aggregates at the end.
Exit codes: 0 ok, 1 a run failed, 2 bad input.
"""

from __future__ import annotations

import dataclasses
import sys

from esopt.cli.common import fail, hydra_app, quiet, validated
from esopt.core import store
from esopt.core.errors import ConfigError
from esopt.runtime.run import print_summary, run, run_worker
from esopt.runtime.runplan import RunPlan
from esopt.runtime.validate import run_id, uses, verify_shipped


def missing_analyses(plan: RunPlan, rid: str) -> list[str]:
    """The analyses of ``analysis=[...]`` a run asks for and has no ``<analysis>.json`` of."""
    rd = store.RunDir.for_run(plan.sweep.root, plan.sweep.name, rid)
    return [a for a in plan.analysis if not (rd.path / f"{a}.json").exists()] if uses(plan, "analysis") else []


def no_model_warning(rid: str, missing: list[str], where) -> str:
    return (f"esopt: warning: run {rid}: analysis=[{','.join(missing)}] not computed: {where} is missing "
            "(deleted, or the run had sweep.save_model=false)")


def analyses(plan: RunPlan, summary: dict) -> dict:
    """Run the analyses of ``analysis=[...]`` still missing for a completed run (never raises);
    they read ``<run>/model/`` and write ``<analysis>.json`` beside it; sparsity evaluates the
    points of the run's ``sparsity:`` block (fractions, modes, control_fractions). Without
    ``<run>/model/`` they are not computed, and one warning says so."""
    rid = summary.get("run_id") or run_id(plan)
    rd = store.RunDir.for_run(plan.sweep.root, plan.sweep.name, rid)
    missing = missing_analyses(plan, rid) if summary.get("status") == "completed" else []
    if missing and not rd.model_dir.is_dir():
        print(no_model_warning(rid, missing, rd.model_dir), file=sys.stderr)
        return summary
    if missing:
        from esopt.study.analyses import run_analyses

        opts = {k: list(v) for k, v in dataclasses.asdict(plan.sparsity).items()}  # the sparsity: block
        summary["analyses"] = {**(summary.get("analyses") or {}),
                               **run_analyses(plan, rd.path, missing, opts=opts)}
        rd.write_summary(summary)
    return summary


def main_run(cfg, single: bool = False) -> dict:
    """The Hydra task function: validate, run, analyse, report. ``single``: a run started on
    its own (not a multirun's job, whose sweeper has already said this): first one warning
    when it would not fit the disk or would take over an hour on this CPU (:func:`budget_notes`)."""
    from esopt.algorithms import distributed

    quiet()  # also in launcher workers (submitit, Slurm), which start from this function
    # a multirun's job: an unreadable plan raises, its launcher returns the error and the sweeper
    # records that run failed; a run of its own is validated here, bad input one line and exit 2
    plan = shipped_plan(cfg)
    if plan is None:
        try:
            plan = validated(cfg)  # the plan the command line's check made, else validated now
        except ConfigError as e:
            fail(str(e))
    if distributed.launched_rank() > 0:  # torchrun / srun rank > 0: a silent ES worker
        return run_worker(plan)
    if plan.sweep.dry_run:  # one run (no -m; a multirun's dry run is the sweeper's table)
        return dry_run(plan)
    if single:
        budget_notes(plan)
    summary = analyses(plan, run(plan))
    print_summary(summary, store.RunDir.for_run(plan.sweep.root, plan.sweep.name, summary.get("run_id", "")).path)
    return summary


SHIPPED = "run_plan"  # +run_plan='<run id>': the sweeper wrote that run's plan.json; the worker reads it


def ship(rid: str) -> str:
    """The override that hands a job its plan. Quoted: Hydra reads an unquoted value as a number
    where it can, and a run id is hex (621e01573466 would become inf, 012345678901 lose its 0)."""
    return f"+{SHIPPED}='{rid}'"


def shipped_plan(cfg):
    """The plan the sweeper validated and shipped for this job (``+run_plan=<run id>``: its
    ``<run>/plan.json``, ``esopt.runtime.runplan``), so a multirun's worker neither re-validates
    nor re-resolves (engine=auto's pick included); None when the job has none (a single run).
    Its ids are recomputed from its content (``validate.verify_shipped``): an edited file fails
    the run, on every attempt (a Slurm requeue reads it again)."""
    from omegaconf import open_dict

    from esopt.runtime import runplan

    rid = cfg.get(SHIPPED) if hasattr(cfg, "get") else None
    if rid is None:
        return None
    with open_dict(cfg):
        del cfg[SHIPPED]
    where = store.RunDir.for_run(cfg.sweep.root, cfg.sweep.name, str(rid)).path
    plan = runplan.load(where)
    if plan is None:
        raise ConfigError(f"run {rid}: its plan.json is missing (the sweep writes it before launching)")
    return verify_shipped(plan, str(rid), where / runplan.PLAN_FILE)  # its ids recomputed from its content


def dry_run(plan: RunPlan) -> dict:
    """``sweep.dry_run=true`` without ``-m``: say which run it would be and whether it is done;
    launch nothing."""
    rid = plan.run_id
    rd = store.RunDir.for_run(plan.sweep.root, plan.sweep.name, rid)
    status = (rd.read_summary() or {}).get("status") or "not started"
    from esopt.algorithms.es import noise_label

    label = noise_label(plan)
    print(f"esopt: dry run: run {rid} (algo={plan.algo} model={plan.model['name']} "
          f"engine={plan.engine_config.name}{f' es={label}' if label else ''}): {status}; "
          f"nothing launched\n  {rd.path}")
    from esopt.engines.base import resolve_device

    print(f"  engine: {plan.engine_config.name} on {resolve_device(plan.engine_config.device)}, "
          f"{type(plan.engine_config).where(False)} (this host runs it)")
    budget_notes(plan, dry=True)
    return {"status": "dry_run", "run_id": rid}


def budget_notes(plan: RunPlan, dry: bool = False) -> None:
    """What the run will cost (``esopt.runtime.budget``): in a dry run its token bound and disk;
    always a warning when its disk estimate exceeds the free space or, on a CPU, its tokens
    would take over an hour."""
    from esopt.runtime import budget

    tokens = budget.estimate_tokens(plan)
    need = budget.sweep_disk([plan])
    where = store.sweep_dir(plan.sweep.root, plan.sweep.name)
    if dry:
        print(f"  max generated tokens (upper bound): {tokens:,}")
        print("  " + (budget.disk_line(need, where) if need else "disk (estimate): unknown (the model's size is not known here)"))
    for line in (budget.disk_warning(need, where), budget.cpu_time_warning(plan, tokens)):
        if line:
            print(f"esopt: warning: {line}", file=sys.stderr)
    refusal = budget.local_refusal({plan.run_id: budget.cpu_seconds(plan, tokens)}, 1, plan.sweep.max_local_hours)
    if refusal and dry:
        print(f"esopt: note: a launch would be refused: {refusal}", file=sys.stderr)
    elif refusal and not plan.sweep.force:
        fail(refusal.replace("this sweep", "this run", 1))


def _task(cfg):
    from hydra.core.hydra_config import HydraConfig

    multirun = HydraConfig.get().mode.name == "MULTIRUN"
    summary = main_run(cfg, single=not multirun)
    if not multirun and summary.get("status") == "failed":
        if summary.get("error_type") == "ConfigError":  # bad input found while loading
            fail(summary["error"].removeprefix("ConfigError: "))
        sys.exit(1)
    return summary


def main() -> None:
    hydra_app(_task)


if __name__ == "__main__":
    main()
