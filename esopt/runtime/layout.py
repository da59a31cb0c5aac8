"""How a run uses the machines it asks Slurm for: ranks (processes) x GPUs per rank.

    lay = layout(rc, engine_config)   # Layout(ranks, gpus_per_rank, gpus_requested, note)

A multi-rank algorithm splits its work across ranks: ES its population (esopt.algorithms.distributed:
each rank drives its own engine -- one vLLM engine per GPU, as in the study -- scores its members
and only rewards cross ranks), GRPO its batch (esopt.algorithms.grpo: one process per GPU under
accelerate, FSDP2 sharding the model on GPUs, each process sampling its rows of the step's batch).
By default such a run has one rank per engine of the GPUs it asks for:

    ranks = model.resources.ranks, or model.resources.gpus / gpus_per_rank (1 without GPUs)
    gpus_per_rank = the engine's gpus_per_engine (its config's: vllm's tensor_parallel_size,
                    1 for hf), 0 on a CPU-only request

The sequences and base evaluations run as one process: they ask for the GPUs of one engine, and
the layout's note says why when the model's request was larger. Each rank is a Slurm task (the
job's ``srun``), translated to torch.distributed's env:// variables by
``esopt.algorithms.distributed``; accelerate reads the same variables, so GRPO needs no torchrun
or ``accelerate launch`` inside the job. A
request that no layout fills exactly (4 GPUs for 3 ranks) is a ConfigError before submission,
so no job holds idle GPUs. The esopt sweeper turns the layout into the launcher request
(tasks_per_node = ranks, gpus_per_task = gpus_per_rank) and shows it in the dry run.
"""

from __future__ import annotations

from dataclasses import dataclass

from esopt import algorithms, engines
from esopt.core.config import RunConfig
from esopt.core.errors import ConfigError


@dataclass(frozen=True)
class Layout:
    ranks: int              # processes (Slurm tasks) of the run; rank 0 alone writes the run dir
    gpus_per_rank: int      # GPUs each rank's engine uses (0 on CPU)
    gpus_requested: int     # the model's resources.gpus
    note: str | None = None  # why fewer GPUs are used than the model's request, when so

    @property
    def gpus_used(self) -> int:
        return self.ranks * self.gpus_per_rank


def layout(rc: RunConfig, engine_config=None) -> Layout:
    """The run's ranks and GPUs (see the module docstring); ConfigError on a request no layout
    fills. ``engine_config``: the run's typed engine block (None: parsed from ``rc.engine``)."""
    res = dict(rc.model.get("resources") or {})
    gpus = int(res.get("gpus") or 0)
    ranks_set = res.get("ranks")
    if gpus < 0:
        raise ConfigError(f"model.resources.gpus must be >= 0, got {gpus}")
    if ranks_set is not None and (isinstance(ranks_set, bool) or not isinstance(ranks_set, int) or ranks_set < 1):
        raise ConfigError(f"model.resources.ranks must be null or an integer >= 1, got {ranks_set!r}")
    limit = res.get("collective_timeout_min")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0):
        raise ConfigError(f"model.resources.collective_timeout_min must be null or a number of minutes > 0, "
                          f"got {limit!r}")
    if engine_config is None:
        engine_config = engines.parse(engines.resolve(rc.engine))
    tp = engine_config.gpus_per_engine
    per_rank = tp if gpus else 0
    if gpus and gpus % per_rank:
        raise ConfigError(f"model.resources.gpus={gpus} is not a multiple of the GPUs one {engine_config.name} "
                          f"engine spans ({tp})")
    if algorithms.get(rc.algo).multi_rank:
        ranks = int(ranks_set) if ranks_set is not None else max(1, gpus // per_rank if gpus else 1)
        if gpus and ranks * per_rank != gpus:
            raise ConfigError(
                f"model.resources.gpus={gpus} but {ranks} ranks x {per_rank} GPU(s) per engine would use "
                f"{ranks * per_rank}: set model.resources.ranks={gpus // per_rank} or model.resources.gpus="
                f"{ranks * per_rank}")
        return Layout(ranks, per_rank, gpus)
    note = None
    if gpus > per_rank:
        ranked = ", ".join(a.name for a in algorithms.ALGORITHMS.values() if a.multi_rank)
        note = (f"algo={rc.algo} runs as one process (only a multi-rank algorithm, {ranked}, splits its work): "
                f"it asks for {per_rank} GPU(s), not model.resources.gpus={gpus}")
    if ranks_set not in (None, 1):
        note = (note + "; " if note else "") + f"algo={rc.algo} ignores model.resources.ranks={ranks_set}"
    return Layout(1, per_rank, gpus, note)


def launcher_request(plan, launcher: dict) -> dict:
    """The launcher settings that make Slurm (or submitit's local executor) start the run's
    layout (its plan's, ``plan.layout``): tasks_per_node = ranks; GPUs per task when several
    ranks share a node (each rank then sees its own GPUs), else GPUs per node = the GPUs used.
    Hydra's in-process launcher has no such settings and is returned as it is."""
    lay = plan.layout
    out = dict(launcher)
    if "tasks_per_node" not in out:
        return out
    out["tasks_per_node"] = lay.ranks
    if out.get("cpus_per_task"):  # model.resources.cpus is per run: split over its ranks
        out["cpus_per_task"] = max(1, int(out["cpus_per_task"]) // lay.ranks)
    per_task = lay.ranks > 1 and lay.gpus_per_rank > 0 and "gpus_per_task" in out
    if "gpus_per_task" in out:
        out["gpus_per_task"] = lay.gpus_per_rank if per_task else None
    if "gpus_per_node" in out:
        out["gpus_per_node"] = None if per_task else lay.gpus_used
    return out


def slurm_job_state(job: str) -> str | None:
    """Slurm's state of ``job`` (lower case, "" when Slurm no longer lists it), None when squeue
    cannot be asked: how the run store tells a live Slurm owner of a run from a dead one
    (``esopt.core.store.lock_run(..., job_state=slurm_job_state)``)."""
    import subprocess

    try:
        r = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0 and "Invalid job id" not in r.stderr:
        return None
    return r.stdout.strip().splitlines()[0].lower() if r.stdout.strip() else ""


def slurm_minutes(text: str) -> int | None:
    """A Slurm time limit as minutes: ``infinite`` / ``UNLIMITED`` / ``n/a`` -> None,
    ``[days-]hours:minutes:seconds``, ``minutes:seconds``, ``minutes`` (sinfo's ``%l``; seconds
    round down)."""
    text = str(text).strip()
    if not text or text.lower() in ("infinite", "unlimited", "n/a", "none"):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(x) for x in clock.split(":")]
    if len(parts) == 3:
        h, m, _s = parts
    elif len(parts) == 2:
        h, (m, _s) = 0, parts
    else:
        h, m = 0, parts[0]
    return (int(days) if days else 0) * 1440 + h * 60 + m


def partition_limit_min(partition: str | None) -> int | None:
    """The time limit (minutes) Slurm states for ``partition`` (None: the default partition,
    marked ``*`` by sinfo); None when it is infinite or Slurm cannot be asked."""
    import subprocess

    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%P %l"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines() if r.returncode == 0 else ():
        name, _, limit = line.strip().partition(" ")
        if (partition and name.rstrip("*") == partition) or (not partition and name.endswith("*")):
            try:
                return slurm_minutes(limit)
            except ValueError:
                return None
    return None
