"""Slurm launcher that can pack several runs into one Slurm array task (``runs_per_job``), and
that notices a job cancelled or lost (``poll_s``).

hydra-submitit-launcher's SlurmLauncher gives every run its own array task: a fresh Python
process that imports torch and transformers before the run starts (several seconds), which
dominates short runs. ``runs_per_job: k`` hands k runs to each task, run one after another in
one process, and multiplies ``timeout_min`` by k. Requeue (time-out / preemption) resubmits the
whole pack; its finished runs are skipped by the store and the interrupted one resumes.
``runs_per_job: 1`` submits one run per array task, as SlurmLauncher does.

Job states: submitit reads them with ``sacct`` only; where accounting is off (``sacct`` fails)
it never learns that a job was cancelled, and a job killed after KillWait writes no result
file, so the sweep waited forever. Here the jobs' watcher (:class:`SqueueWatcher`) falls back
to ``squeue --states=all`` (a job squeue no longer knows is LOST), polling at least every
``poll_s`` seconds; a job that ended without a result is returned as a failed JobReturn whose
error names the job id and its state (:class:`SlurmJobEnded`), and the sweeper records the run
as failed (``esopt.runtime.run.record_ended``; ``sweep.retry_failed=true`` reruns it).
"""

import subprocess
import time
from typing import Any, Dict, List, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher, SlurmLauncher
from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

LOST = "LOST"  # the state of a job that squeue no longer knows and that left no result


class SlurmJobEnded(RuntimeError):
    """A Slurm job that ended (cancelled, lost, failed outside Python) without a result."""


def squeue_states(job_ids: Sequence[str]) -> Dict[str, Dict[str, str]]:
    """``{job_id: {"State": ...}}`` from ``squeue -h -r --states=all`` for submitit job ids
    (``123`` or ``123_4``): a job squeue does not list (it ended longer than MinJobAge ago, or
    was never known) is ``LOST``; when squeue itself fails (no controller) nothing is said."""
    out: Dict[str, Dict[str, str]] = {}
    bases: Dict[str, List[str]] = {}
    for jid in job_ids:
        bases.setdefault(jid.split("_")[0], []).append(jid)
    for base, ids in bases.items():
        try:
            r = subprocess.run(["squeue", "-h", "-r", "--states=all", "-o", "%i|%T", "-j", base],
                               capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode != 0:
            if "invalid job id" in (r.stderr or "").lower():
                out.update({jid: {"State": LOST} for jid in ids})
            continue
        listed = dict(line.split("|", 1) for line in r.stdout.split() if "|" in line)
        pending_range = any("[" in k for k in listed)  # an unexpanded pending array: still waiting
        for jid in ids:
            state = listed.get(jid) or ("PENDING" if pending_range else LOST)
            out[jid] = {"State": state.strip()}
    return out


class SqueueWatcher(SlurmInfoWatcher):
    """submitit's sacct watcher, with ``squeue`` for the jobs sacct says nothing about."""

    def update(self) -> None:
        to_check = sorted(self._registered - self._finished)
        if not to_check:
            return
        self._num_calls += 1
        info: Dict[str, Dict[str, str]] = {}
        command = self._make_command()
        try:
            r = subprocess.run(command, capture_output=True, timeout=60, check=True)
            info = self.read_info(r.stdout)
        except (OSError, subprocess.SubprocessError):
            info = {}
        missing = [jid for jid in to_check if not info.get(jid)]
        if missing:
            info.update(squeue_states(missing))
        self._info_dict.update(info)
        self._last_status_check = time.time()
        for jid in to_check:
            if self.is_done(jid, mode="cache"):
                self._finished.add(jid)


class EsoptSlurmJob(SlurmJob):
    watcher = SqueueWatcher(delay_s=10)


class _Pack:
    """The callable of one array task: several launcher calls; checkpointable for requeue."""

    def __init__(self, launcher: BaseSubmititLauncher):
        self.launcher = launcher

    def __call__(self, pack: List[tuple]) -> List[JobReturn]:
        """The runs one after another. The scheduler's warning before the time limit
        (``SIGUSR2``) is held until a run's training saves at an iteration boundary, or until the
        run ends, or half of ``signal_delay_s`` (``esopt.core.preempt``); then submitit requeues."""
        from esopt.core import preempt

        preempt.install(grace_s=float(self.launcher.params.get("signal_delay_s") or 120) / 2)
        out = []
        for args in pack:
            out.append(self.launcher(*args))
            if preempt.requested() and args is not pack[-1]:  # a finished run is skipped after the requeue
                preempt.release()
        return out

    def checkpoint(self, pack: List[tuple]) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self, pack)


def _ended(job, pack: List[tuple], error: BaseException) -> List[JobReturn]:
    """Failed JobReturns for the runs of a job that ended without a result."""
    state = (job.watcher.get_state(job.job_id, mode="force") or "UNKNOWN").split()[0].upper()
    how = "was cancelled" if state.startswith("CANCEL") else (
        "was lost (Slurm no longer knows it)" if state == LOST else f"ended ({state})")
    err = SlurmJobEnded(f"Slurm job {job.job_id} {how} before its runs wrote a result "
                        f"({type(error).__name__}; log: {job.paths.stdout})")
    return [JobReturn(overrides=list(args[0]), status=JobStatus.FAILED, _return_value=err) for args in pack]


ESOPT_OPTIONS = ("runs_per_job", "poll_s", "max_timeout_min")  # read by EsoptSlurmLauncher itself
MOVED = ("reservation",)  # sbatch options submitit has no parameter for: sent as additional_parameters


def known_options() -> set:
    """The ``hydra.launcher`` keys the Slurm launcher takes: hydra-submitit's, every parameter of
    submitit's sbatch writer (``wckey``, ``exclusive``, ``mail_type``, ``srun_args``, ...), esopt's."""
    import inspect

    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
    from omegaconf import OmegaConf
    from submitit.slurm.slurm import _make_sbatch_string

    internal = {"command", "folder", "map_count", "job_name", "time", "num_gpus", "mem", "ntasks_per_node"}
    return (set(OmegaConf.structured(SlurmQueueConf).keys()) | set(ESOPT_OPTIONS) | set(MOVED)
            | set(inspect.signature(_make_sbatch_string).parameters) - internal)


def check_options(request: dict) -> None:
    """A Slurm launcher request with a key submitit and esopt do not know raises ConfigError
    (the sweeper turns it into one line, exit 2, before anything is submitted); so do ``nodes``
    and ``additional_parameters`` of the wrong kind."""
    from esopt.core.errors import ConfigError

    unknown = sorted(set(request) - known_options())
    if unknown:
        raise ConfigError(f"unknown Slurm option(s) hydra.launcher.{', hydra.launcher.'.join(unknown)} (submitit "
                          "takes: " + ", ".join(sorted(known_options() - {"_target_"})) + "; any other sbatch option: "
                          "hydra.launcher.additional_parameters={name: value})")
    extra = request.get("additional_parameters")
    if extra is not None and not isinstance(extra, dict):
        raise ConfigError(f"hydra.launcher.additional_parameters must be a mapping of sbatch options, got {extra!r}")
    nodes = request.get("nodes")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1):
        raise ConfigError(f"hydra.launcher.nodes must be an integer >= 1, got {nodes!r}")


def slurm_executor(params: dict, runs_per_job: int = 1, max_timeout_min: Any = None):
    """submitit's Slurm executor for a launcher's settings (``hydra.launcher`` less esopt's own
    keys): ``timeout_min`` x ``runs_per_job``, capped at ``max_timeout_min``; ``reservation`` as an
    sbatch option; ``wckey`` as given, none when null (submitit's default is ``--wckey=submitit``,
    which fails where a site enforces its wckeys)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    params = {k: v for k, v in params.items() if k not in ESOPT_OPTIONS and k != "_target_"}
    executor = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder"),
                                     slurm_max_num_timeout=params.pop("max_num_timeout", 0))
    extra = dict(params.pop("additional_parameters", None) or {})
    for key in MOVED:
        if params.get(key) is not None:
            extra[key] = params[key]
        params.pop(key, None)
    if extra:
        params["additional_parameters"] = extra
    wckey = params.pop("wckey", None)
    if params.get("timeout_min") and runs_per_job > 1:
        params["timeout_min"] = int(params["timeout_min"]) * runs_per_job
    if params.get("timeout_min") and max_timeout_min:
        params["timeout_min"] = min(int(params["timeout_min"]), int(max_timeout_min))
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{x if x in base else f"slurm_{x}": y for x, y in params.items() if y is not None})
    executor._executor.parameters["wckey"] = wckey or None  # None: no --wckey line at all
    return executor


class EsoptSlurmLauncher(SlurmLauncher):
    def __init__(self, runs_per_job: int = 1, poll_s: float = 10, max_timeout_min: Any = None,
                 **params: Any) -> None:
        super().__init__(**params)
        self.runs_per_job = max(1, int(runs_per_job or 1))
        self.poll_s = max(1.0, float(poll_s or 10))
        # the site's job time limit (sweep.max_job_hours, else the partition's; set by the sweeper)
        self.max_timeout_min = int(max_timeout_min) if max_timeout_min else None

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit the runs as one job array and wait for all of them (Hydra's launcher API)."""
        return self.submit(job_overrides, initial_job_idx).results()

    def submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> "Submitted":
        """Submit the runs as one job array (``sbatch``) and return at once: the esopt sweeper
        submits every resource group's array before it waits on any (:class:`Submitted`)."""
        import logging
        from pathlib import Path

        k = self.runs_per_job
        log = logging.getLogger(__name__)
        executor = slurm_executor(self.params, k, self.max_timeout_min)
        executor._executor.job_class = EsoptSlurmJob  # its watcher falls back to squeue
        EsoptSlurmJob.watcher._delay_s = self.poll_s
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)

        args = []
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            args.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        packs = [args[i:i + k] for i in range(0, len(args), k)]
        log.info(f"{len(args)} runs in {len(packs)} Slurm tasks of up to {k} runs")
        return Submitted(executor.map_array(_Pack(self), packs), packs)


class Submitted:
    """One submitted job array: ``done()`` without blocking, then ``results()``."""

    def __init__(self, jobs: list, packs: List[List[tuple]]):
        self.jobs, self.packs = jobs, packs

    def done(self) -> bool:
        """Whether every task of the array has ended (a result file, else the watcher's state,
        read at most every ``poll_s``)."""
        return all(job.done() for job in self.jobs)

    def results(self) -> List[JobReturn]:
        """Every task waited for, even after one has ended badly: one JobReturn per run."""
        import submitit

        out: List[JobReturn] = []
        for job, pack in zip(self.jobs, self.packs):
            try:
                out += job.results()[0]
            except submitit.core.utils.UncompletedJobError as e:  # no result file: cancelled, lost, ...
                out += _ended(job, pack, e)
            except Exception as e:  # noqa: BLE001 - the task itself raised (FailedJobError)
                out += [JobReturn(overrides=list(a[0]), status=JobStatus.FAILED, _return_value=e) for a in pack]
        return out
