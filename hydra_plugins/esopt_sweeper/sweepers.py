"""The ``esopt`` (grid) Hydra sweeper, and what the ``optuna`` one (``search.py``) shares with it.
See the package docstring.

Both share one path: compose + validate every job -> skip runs already recorded in the store ->
group the rest by the launcher request they resolve to (``hydra.launcher`` interpolates the
model's ``resources``) -> submit every group's first batch (Slurm: one job array per resource
shape, all queued at once), then wait on all, a group's next batch going when its last ends ->
read every run's summary.json ->
print a table (what is printed around the runs: ``output.py``). esopt, optuna and pandas are
imported lazily (plugin discovery stays fast).
"""


import copy
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from esopt.runtime.budget import _rows, estimate_tokens  # noqa: F401 (their home; light imports)
from hydra_plugins.esopt_sweeper.output import (SweepProgress, aggregate_sweep, first_line, layout_notes,
                                                quiet_sacct, unread_notes, varying_keys, wide)

log = logging.getLogger(__name__)
WARNING_CHARS = 500  # a launcher's error for a run, as printed: at most this long
ERROR_COLUMN = 60    # the final table's error column: its first this many characters
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline"}  # sweep.offline
LAUNCH_POLL_S = 1.0  # how often the sweeper looks whether a submitted job array has ended

@dataclass
class EsoptSweeperConf:
    _target_: str = "hydra_plugins.esopt_sweeper.sweepers.EsoptSweeper"
    # runs per launch call (for Slurm: per job array); null = all runs of a resource group at once
    max_batch_size: Optional[int] = None
    # the grid, as Hydra sweep strings, e.g. {pop: "8,16,32", seed: "range(3)"} (presets use this)
    params: Optional[Dict[str, str]] = None
    # several grids in one sweep (the claims presets): each entry's keys override `params`;
    # the jobs are the union of the grids, one per run id (duplicates run once)
    grids: Optional[List[Dict[str, Any]]] = None


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.esopt_sweeper.search.OptunaSweeper"
    sampler: str = "tpe"  # tpe | random
    seed: int = 0  # sampler seed (the search is reproducible for a given history)
    n_trials: int = 8  # trials run by this invocation
    n_jobs: int = 2  # trials asked per batch and run in parallel by the launcher
    n_startup_trials: int = 4  # TPE: random trials before the model kicks in
    study: Optional[str] = None  # null = esopt:<sweep.name>:search
    # search space: choice(8,16,32) | range(1,5) | interval(0.1,0.9) | tag(log,interval(1e-4,1e-2));
    # a plain value fixes the key
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="esopt", node=EsoptSweeperConf, provider="esopt")
ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="esopt")

@dataclass
class Job:
    """One run of the sweep: its overrides, typed config, run id and launcher request."""

    overrides: List[str]
    plan: Any
    rid: str
    launcher: dict
    before: Optional[str] = None  # status recorded before this sweep launched anything
    before_error: Optional[str] = None  # its error type (a run failed on its input is retried)
    summary: Optional[dict] = None
    dispatched: bool = False
    trial: Any = None  # optuna sweeper: the study trial number


def by_model(jobs: Sequence[Job]) -> List[Job]:
    """The jobs with each model's runs next to each other, models in the order they first appear,
    the grid's order kept within a model. An in-process launcher runs them one after another in
    one process, where consecutive runs of a model share its vLLM engine (esopt.engines.vllm) and
    a change of model starts a new one; a grid whose model axis varies fastest (a ``model=a,b``
    on the command line goes after the preset's axes) would otherwise start one per run."""
    first: Dict[str, int] = {}
    key = [json.dumps(j.plan.model, sort_keys=True, default=str) for j in jobs]
    for k in key:
        first.setdefault(k, len(first))
    order = sorted(range(len(jobs)), key=lambda i: first[key[i]])  # stable: the grid's order within a model
    return [jobs[i] for i in order]


def fail(message: str, code: int = 2) -> None:
    print(f"esopt: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)

class EsoptSweeper(Sweeper):
    """Grid sweeper: BasicSweeper's expansion with validation, dry run, skip, grouping, table."""

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None,
                 grids: Optional[List[Dict[str, Any]]] = None):
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.grids = [{k: str(v) for k, v in (g or {}).items()} for g in (grids or [])]
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None
        self.config: Optional[DictConfig] = None
        self._launchers: Dict[str, Any] = {}
        self._job_idx = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    # --- composition and validation ---------------------------------------------------------
    def _arguments(self, arguments: List[str]) -> list:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        lines = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        return OverridesParser.create(config_loader=self.hydra_context.config_loader).parse_overrides(lines)

    def _grid(self, arguments: List[str]) -> List[List[str]]:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        if not self.grids:
            return BasicSweeper.split_arguments(self._arguments(arguments), None)[0]
        # sub-grids (hydra.sweeper.grids): params < grid entry < command line, per key
        given = {a.split("=", 1)[0].lstrip("+~") for a in arguments if "=" in a}
        saved, out = self.params, []
        try:
            for grid in self.grids:
                self.params = {k: v for k, v in {**saved, **grid}.items() if k.lstrip("+~") not in given}
                out += BasicSweeper.split_arguments(self._arguments(arguments), None)[0]
        finally:
            self.params = saved
        return out

    def compose(self, overrides: Sequence[str]) -> Job:
        """Compose one job's config exactly as its worker will and validate it.

        Raises ConfigError (esopt's validation) or Hydra's composition errors.
        """
        from esopt.core import store
        from esopt.runtime.layout import launcher_request
        from esopt.runtime.validate import validate

        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
        with open_dict(cfg):
            del cfg["hydra"]
        plan = validate(cfg, cuda=remote_cuda(launcher, cfg))
        if cfg.engine.name != plan.engine_config.name:  # engine=auto: the worker runs what was picked here
            overrides = [o for o in overrides if not o.startswith("engine=")] + [f"engine={plan.engine_config.name}"]
        if str(launcher.get("_target_", "")).endswith("EsoptSlurmLauncher"):
            from esopt.algorithms import ALGORITHMS
            from esopt.core.errors import ConfigError
            from hydra_plugins.esopt_sweeper.launchers import check_options

            check_options(launcher)
            if int(launcher.get("nodes") or 1) > 1 and not ALGORITHMS[plan.algo].multi_rank:
                ranked = ", ".join(a.name for a in ALGORITHMS.values() if a.multi_rank)
                raise ConfigError(f"hydra.launcher.nodes={launcher['nodes']}: algo={plan.algo} runs as one process "
                                  f"(only an algorithm that splits its work over ranks spans nodes: {ranked})")
        if plan.sweep.offline:
            launcher = self.offline_request(plan, launcher)
        launcher = launcher_request(plan, launcher)  # ranks x GPUs per rank: what the run will use
        limit = self.job_limit_min(plan, launcher)
        if limit:
            launcher["max_timeout_min"] = limit
        rid = plan.run_id
        rd = store.RunDir.for_run(plan.sweep.root, plan.sweep.name, rid)
        before = rd.status  # "unreadable" for a summary.json that cannot be parsed: kept, listed
        return Job(list(overrides), plan, rid, launcher, before, (rd.read_summary() or {}).get("error_type"))

    @staticmethod
    def offline_request(plan, launcher: dict) -> dict:
        """``sweep.offline``: a hub model must be in the cache already (ConfigError naming
        ``esopt.fetch`` otherwise; not for ``esopt.design``, which prices a grid without the weights),
        wandb must not be asked to go online, and a Slurm job exports the offline variables
        in its setup (where a site does not pass the submitting shell's environment on)."""
        from esopt import models
        from esopt.cli.common import SWEEP_CONSUMER
        from esopt.core.errors import ConfigError

        missing = None if SWEEP_CONSUMER else models.hub_missing(plan.model)
        if missing:
            raise ConfigError(f"{missing} and sweep.offline=true: fetch it on a machine with internet "
                              "(python -m esopt.fetch <these overrides>) or give a local folder "
                              "(models.paths={name: folder} or model.path=folder)")
        if "wandb" in plan.logger and ((plan.logger_opts.get("wandb") or {}).get("mode") == "online"):
            raise ConfigError("logger_opts.wandb.mode=online with sweep.offline=true: compute nodes without "
                              "internet log offline (wandb sync uploads the runs later)")
        if "setup" not in launcher:
            return launcher
        exports = [f"export {k}={v}" for k, v in OFFLINE_ENV.items()]
        return {**launcher, "setup": [*(launcher.get("setup") or []), *exports]}

    def job_limit_min(self, plan, launcher: dict) -> Optional[int]:
        """A Slurm job's time limit in minutes: ``sweep.max_job_hours``, else the partition's limit
        as Slurm states it (asked once per partition); None for other launchers or no limit."""
        if not str(launcher.get("_target_", "")).endswith("EsoptSlurmLauncher"):
            return None
        if plan.sweep.max_job_hours:
            return max(1, int(plan.sweep.max_job_hours * 60))
        from esopt.runtime.layout import partition_limit_min

        cache = self.__dict__.setdefault("_partition_limits", {})
        part = launcher.get("partition")
        if part not in cache:
            cache[part] = partition_limit_min(part)
        return cache[part]

    def time_notes(self, jobs: List[Job]) -> List[str]:
        """Runs whose estimated hours (``esopt.runtime.budget.wall_hours``: the token bound at the
        throughput table's rate, as ``esopt.design`` prices it) exceed their Slurm job's time
        limit: one that cannot checkpoint (it trains nothing: an evaluation cannot be resumed) is
        refused here, exit 2, before anything is submitted; one that would need more than
        ``1 + sweep.max_requeues`` jobs is listed (returned lines)."""
        from esopt.algorithms import get as algorithm
        from esopt.runtime.budget import wall_hours

        notes = []
        for job in {j.rid: j for j in jobs if j.launcher.get("max_timeout_min") and not self.skipped(j)}.values():
            limit_h = min(int(job.launcher.get("timeout_min") or 10 ** 9), int(job.launcher["max_timeout_min"])) / 60
            hours = wall_hours(job.plan)
            if hours is None or hours <= limit_h:
                continue
            source = "sweep.max_job_hours" if job.plan.sweep.max_job_hours else "the partition's limit"
            shown = " ".join(o for o in job.overrides if not o.startswith(("hydra.", "sweep."))) or "defaults"
            if not algorithm(job.plan.algo).checkpoint_copies:
                fail(f"run {job.rid} ({shown}) may take about {_span(hours)}, over its Slurm job's "
                     f"{_span(limit_h)} ({source}), and algo={job.plan.algo} cannot checkpoint to go on after a "
                     "requeue; lower eval.problems or eval.samples, or raise the limit")
            attempts = 1 + int(job.plan.sweep.max_requeues)
            if hours > limit_h * attempts:
                notes.append(f"run {job.rid} ({shown}) may take about {_span(hours)} (token bound), more than "
                             f"{attempts} Slurm jobs of {_span(limit_h)} ({source}; the first and "
                             f"sweep.max_requeues={job.plan.sweep.max_requeues} requeues): it would end unfinished; "
                             "raise sweep.max_requeues or shorten the run")
        return notes

    def compose_all(self, grid: List[List[str]]) -> List[Job]:
        """Every job composed and validated before anything runs; the first bad one exits 2."""
        jobs = []
        for i, overrides in enumerate(grid):
            try:
                jobs.append(self.compose(overrides))
            except Exception as e:  # noqa: BLE001 - ConfigError or a Hydra composition error
                shown = " ".join(o for o in overrides if not o.startswith("hydra.")) or "defaults"
                fail(f"{first_line(e)} (run {i}: {shown})")
        return jobs

    # --- launching --------------------------------------------------------------------------
    def _launcher(self, request: dict):
        """A launcher instantiated for one resolved ``hydra.launcher`` request (cached)."""
        from hydra.core.plugins import Plugins

        key = json.dumps(request, sort_keys=True, default=str)
        if key not in self._launchers:
            config = copy.deepcopy(self.config)
            OmegaConf.copy_cache(from_config=self.config, to_config=config)
            with open_dict(config):
                config.hydra.launcher = OmegaConf.create(request)
            self._launchers[key] = Plugins.instance().instantiate_launcher(
                hydra_context=self.hydra_context, task_function=self.task_function, config=config)
        return self._launchers[key]

    def skipped(self, job: Job) -> bool:
        """Kept as recorded: not launched. A completed run that asks for an analysis it has not
        got (``analysis=[drift]`` added to a finished grid) is launched again: it trains
        nothing, its worker computes the analysis from ``<run>/model/``."""
        from esopt.core import store

        kept = store.keep_recorded(job.before, job.plan.sweep.retry_failed, job.before_error)
        return kept and not (job.before == "completed" and self.analyses_due(job))

    def analyses_due(self, job: Job) -> bool:
        """Whether a completed run lacks an analysis it asks for and can compute it (its
        ``model/`` is there; else one warning, once)."""
        from esopt.cli.sweep import missing_analyses, no_model_warning
        from esopt.core import store

        missing = missing_analyses(job.plan, job.rid)
        if not missing:
            return False
        model = store.RunDir.for_run(job.plan.sweep.root, job.plan.sweep.name, job.rid).model_dir
        if model.is_dir():
            return True
        warned = self.__dict__.setdefault("_no_model", set())
        if job.rid not in warned:
            warned.add(job.rid)
            print(no_model_warning(job.rid, missing, model), file=sys.stderr)
        return False

    def live_elsewhere(self, job: Job) -> Optional[str]:
        """Who runs this run right now (the live owner of its lock: a Slurm job of a killed
        sweep, another sweep over the same grid, a process on another host), so it is not
        launched twice; None if nobody does. (Launched anyway, a run would find its owner and
        step aside: ``esopt.core.store.lock_run``.)"""
        if self.skipped(job):
            return None
        from esopt.core import store
        from esopt.runtime.layout import slurm_job_state

        return store.run_owner(store.RunDir.for_run(job.plan.sweep.root, job.plan.sweep.name, job.rid).path,
                               slurm_job_state)

    def rereport(self, jobs: List[Job], launched: bool = False) -> None:
        """Before dispatch, in this process only: open each run group's Optuna storage (a torn
        journal is repaired here, ``tuning.repair_journal``) and re-report every kept run whose
        trial lost its record, from its own summary.json (``tuning.rereport``). ``launched``:
        after dispatch, the runs of this sweep that ended while the storage did not answer
        (``<run>/.optuna-pending``); a storage still down leaves them to the next sweep."""
        from esopt.core import store
        from esopt.runtime import tuning

        n, down = 0, 0
        for job in {j.rid: j for j in jobs if self.skipped(j) != launched}.values():
            t = job.plan.tuning_settings
            if launched and not tuning.pending_path(t.root, t.sweep, job.rid).exists():
                continue
            summary = store.RunDir.for_run(t.root, t.sweep, job.rid).read_summary() or {}
            params = job.plan.trial_attrs((summary.get("model") or {}).get("params"))
            try:
                n += tuning.retrying(tuning.rereport, t, job.rid, summary, params) if launched else \
                    tuning.rereport(t, job.rid, summary, params)
            except Exception as e:  # noqa: BLE001 - bookkeeping; never takes the sweep down
                down += 1
                print(f"esopt: warning: run {job.rid}: its Optuna trial cannot be re-reported: "
                      f"{first_line(e)}"[:WARNING_CHARS], file=sys.stderr)
        if n:
            print(f"esopt: note: {n} {'finished' if launched else 'kept'} run(s) re-reported to Optuna from "
                  "their summary.json (their trial had " + ("not reached the storage)" if launched else
                                                           "lost its record)"), file=sys.stderr)
        if down and launched:
            print(f"esopt: note: the next run of this sweep reports the {down} trial(s) the storage did not "
                  "take (nothing is rerun)", file=sys.stderr)

    def launch(self, jobs: List[Job]) -> None:
        """Run the jobs not already done (one per run id), grouped by launcher request."""
        from esopt.core import store

        todo, seen = [], set()
        for job in jobs:
            where = self.live_elsewhere(job)
            if where:
                print(f"esopt: warning: run {job.rid} is still running ({where}); not launched again",
                      file=sys.stderr)
                seen.add(job.rid)
            if not self.skipped(job) and job.rid not in seen:
                seen.add(job.rid)
                todo.append(job)
        self._mark_start()
        groups: Dict[str, List[Job]] = {}
        for job in by_model(todo):
            groups.setdefault(json.dumps(job.launcher, sort_keys=True, default=str), []).append(job)
        with SweepProgress(todo):
            self._launch_groups(groups)
        for job in jobs:  # the store is the truth (also for runs done elsewhere)
            rd = store.RunDir.for_run(job.plan.sweep.root, job.plan.sweep.name, job.rid)
            job.summary = rd.read_summary()
            if job.summary is None and rd.status == store.UNREADABLE:
                job.summary = {"status": store.UNREADABLE, "error": f"{rd.summary_path} cannot be read"}

    def _launch_groups(self, groups: Dict[str, List[Job]]) -> None:
        """Every group's first batch is submitted before any is waited on (Slurm: one job array
        per resource shape, all queued at once, so a grid over model sizes takes the longest
        group's time, not their sum); a group's next batch (``max_batch_size``) goes when its
        previous one has ended. A launcher without ``submit`` (in process, submitit's local
        one) runs each batch as it is started, one after another."""
        import time

        queues = [[g[i:i + (self.max_batch_size or len(g))] for i in range(0, len(g), self.max_batch_size or len(g))]
                  for g in groups.values()]
        flying: List[tuple] = []  # (queue, batch, Submitted or the finished results)

        def start(queue: list) -> None:
            batch = queue.pop(0)
            launcher = self._launcher(batch[0].launcher)
            shipped = [self.shipped(j) for j in batch]
            try:
                if hasattr(launcher, "submit"):
                    handle = launcher.submit(shipped, initial_job_idx=self._job_idx)
                else:
                    handle = launcher.launch(shipped, initial_job_idx=self._job_idx)
            except Exception as e:  # noqa: BLE001 - e.g. sbatch refused the array: see summaries
                print(f"esopt: warning: launcher: {first_line(e)}", file=sys.stderr)
                handle = [None] * len(batch)
            self._job_idx += len(batch)
            flying.append((queue, batch, handle))

        for queue in queues:
            if queue:
                start(queue)
        while flying:
            ended = [f for f in flying if not hasattr(f[2], "done") or f[2].done()]
            if not ended:
                time.sleep(LAUNCH_POLL_S)
                continue
            for queue, batch, handle in ended:
                flying.remove((queue, batch, handle))
                self._record(batch, self._results(handle, batch) if hasattr(handle, "done") else list(handle))
                if queue:
                    start(queue)

    @staticmethod
    def _results(handle, batch: List[Job]) -> list:
        try:
            return list(handle.results())
        except Exception as e:  # noqa: BLE001 - e.g. a Slurm job killed: see summaries
            print(f"esopt: warning: launcher: {first_line(e)}", file=sys.stderr)
            return [None] * len(batch)

    @staticmethod
    def _record(batch: List[Job], results: list) -> None:
        """A batch's launcher results: a run that raised (or whose job ended without a result)
        gets one warning and is recorded failed (``esopt.runtime.run.record_ended``)."""
        for job, r in zip(batch, results):
            job.dispatched = True
            ok = r is not None and getattr(getattr(r, "status", None), "name", "") == "COMPLETED"
            if not ok and r is not None:
                err = getattr(r, "_return_value", None)
                print(f"esopt: warning: run {job.rid} raised: {err!r}"[:WARNING_CHARS], file=sys.stderr)
                if isinstance(err, BaseException):  # e.g. its Slurm job was cancelled
                    from esopt.runtime.run import record_ended

                    record_ended(job.plan, job.rid, err)

    @staticmethod
    def shipped(job: Job) -> List[str]:
        """The job's overrides plus ``+run_plan='<run id>'``, its plan written to ``<run>/plan.json``
        first: the worker reads the plan validated here (``esopt.cli.sweep.shipped_plan``)
        instead of validating and resolving again."""
        from esopt.cli.sweep import ship
        from esopt.core import store
        from esopt.runtime import runplan

        runplan.write(job.plan, store.RunDir.for_run(job.plan.sweep.root, job.plan.sweep.name, job.rid).path)
        return list(job.overrides) + [ship(job.rid)]

    # --- output -----------------------------------------------------------------------------
    def table(self, jobs: List[Job], *, dry: bool = False):
        import pandas as pd
        from esopt.runtime import tuning

        keys = varying_keys([j.overrides for j in jobs])
        layouts = [j.plan.layout for j in jobs] if dry else []
        show_layout = any(lay.ranks > 1 or lay.gpus_requested for lay in layouts)  # not for CPU-only sweeps
        rows = []
        for i, job in enumerate(jobs):
            row = {"#": i, "run_id": job.rid}
            kv = dict(o.split("=", 1) for o in job.overrides if "=" in o)
            for k in keys:
                row[k.lstrip("+~")] = kv.get(k, "")
            if dry:
                if show_layout:
                    lay = layouts[i]
                    row["ranks"], row["gpus_req"], row["gpus_used"] = lay.ranks, lay.gpus_requested, lay.gpus_used
                    minutes = collective_minutes(job.plan, lay.gpus_used > 0)  # the ranks' process group timeout
                    row["collective_min"] = "-" if minutes is None else minutes
                row["status"] = job.before or "new"
                row["action"] = "skip" if self.skipped(job) else ("resume" if job.before == "running" else "run")
                row["max_tokens"] = estimate_tokens(job.plan)
                from esopt.algorithms.es import noise_label

                label = noise_label(job.plan)  # low-rank ES is EGGROLL, not the study's full-rank ES
                if label is not None:
                    row["es_noise"] = label
                row["engine"] = job.plan.engine_config.name  # what engine=auto picked, or the forced one
                # a GPU job's engine build is its environment's, never this host's
                remote = bool(remote_cuda(job.launcher, {"model": job.plan.model}))
                row["engine_version"] = type(job.plan.engine_config).where(remote, job.plan.engine_config.device)
            else:
                s = job.summary or {}
                metric = job.plan.tuning_settings.metric
                row["status"] = s.get("status", "missing") + (" (kept)" if self.skipped(job) else "")
                v = tuning.metric_value(s.get("final"), metric)
                row[metric] = None if v is None else round(v, 4)
                row["wall_s"] = s.get("wall_s")
                row["error"] = (s.get("error") or "")[:ERROR_COLUMN]
            rows.append(row)
        return pd.DataFrame(rows)

    def sweep_dir(self, jobs: List[Job]) -> Path:
        from esopt.core import store

        plan = jobs[0].plan if jobs else None
        root = plan.sweep.root if plan else self.config.sweep.root
        name = plan.sweep.name if plan else self.config.sweep.name
        return store.sweep_dir(root, name).resolve()

    def dry_run(self, jobs: List[Job]) -> None:
        df = self.table(jobs, dry=True)
        n_runs = len({j.rid for j in jobs})
        what = f"{n_runs} runs" if n_runs == len(jobs) else f"{len(jobs)} grid points = {n_runs} runs"
        print(f"esopt: dry run: {what} in {self.sweep_dir(jobs)} (nothing launched)")
        if "es_noise" in df:  # runs that do not train with ES have no ES noise to name
            df["es_noise"] = df["es_noise"].fillna("-")
        with wide():
            print(df.to_string(index=False))
        done = list({j.rid: j for j in jobs if self.skipped(j)}.values())
        todo = list({j.rid: j for j in jobs if not self.skipped(j)}.values())
        whole = list({j.rid: j for j in jobs}.values())
        print(f"completed already (skipped): {len(done)}"
              + (f" [{', '.join(j.rid for j in done)}]" if done else ""))
        print(f"to run: {len(todo)}; max generated tokens (upper bound): "
              f"{sum(estimate_tokens(j.plan) for j in todo):,} to run, "
              f"{sum(estimate_tokens(j.plan) for j in whole):,} for the whole grid")
        self.budget_notes(todo, dry=True)
        from esopt.study.claims.design import trend_line

        line = trend_line([j.plan for j in whole])  # None unless the grid spans sizes and populations
        if line:
            print(line)

    def budget_notes(self, todo: List[Job], dry: bool = False) -> None:
        """Before launching (and in the dry run): the disk the runs to run need against the
        free space, one warning when a run on a CPU would take over an hour, and (launching, not
        in the dry run: there a note) exit 2 when the runs on this machine would take longer than
        ``sweep.max_local_hours`` unless ``sweep.force`` (``esopt.runtime.budget``)."""
        from esopt.runtime import budget

        if not todo:
            return
        if any("array_parallelism" in j.launcher for j in todo):  # Slurm: every group's array at once
            groups: Dict[str, int] = {}
            for j in todo:
                key = json.dumps(j.launcher, sort_keys=True, default=str)
                groups[key] = groups.get(key, 0) + 1
            at_once = sum(min(n, int(json.loads(k).get("array_parallelism") or n)) for k, n in groups.items())
        else:
            at_once = max(int(j.launcher.get("n_jobs") or 1) for j in todo)
            at_once = (os.cpu_count() or 1) if at_once < 1 else at_once  # joblib's n_jobs=-1: every core
        need = budget.sweep_disk([j.plan for j in todo], at_once=min(at_once, len(todo)))
        where = self.sweep_dir(todo)
        if dry:
            print(budget.disk_line(need, where) if need else "disk (estimate): unknown (a model's size is not known here)")
        warn = budget.disk_warning(need, where)
        if warn:
            print(f"esopt: warning: {warn}", file=sys.stderr)
        cuda = {j.rid: remote_cuda(j.launcher, {"model": j.plan.model}) for j in todo}
        secs = {j.rid: budget.cpu_seconds(j.plan, estimate_tokens(j.plan), cuda[j.rid]) or 0.0 for j in todo}
        local = {rid: t for rid, t in secs.items()
                 if not str(next(j for j in todo if j.rid == rid).launcher.get("_target_", "")).endswith("SlurmLauncher")}
        refusal = budget.local_refusal(local, at_once, float(todo[0].plan.sweep.max_local_hours))
        if refusal and dry:
            print(f"esopt: note: a launch would be refused: {refusal}", file=sys.stderr)
        elif refusal and not todo[0].plan.sweep.force:
            fail(refusal)
        slow = [j for j in todo if secs[j.rid] > budget.CPU_WARN_S]
        if slow:
            job = max(slow, key=lambda j: secs[j.rid])
            more = f" ({len(slow)} of {len(todo)} runs over an hour; the longest, run {job.rid})" if len(slow) > 1 else ""
            line = budget.cpu_time_warning(job.plan, estimate_tokens(job.plan), cuda[job.rid])
            print(f"esopt: warning: {line}{more}", file=sys.stderr)

    def finish(self, jobs: List[Job], title: str = "runs") -> int:
        """Print the table and sweep dir, aggregate, and return the exit code (1 if any failed).
        The sweep has ended: its start stamp goes (a later sweep in this process stamps its own)."""
        import os

        from esopt.runtime.tuning import SWEEP_START

        os.environ.pop(SWEEP_START, None)
        self._started = False
        df = self.table(jobs)
        sdir = self.sweep_dir(jobs)
        statuses = [(j.summary or {}).get("status", "missing") for j in jobs]
        counts = {s: statuses.count(s) for s in dict.fromkeys(statuses)}
        print(f"\nesopt: {len(jobs)} {title}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        with wide():
            print(df.to_string(index=False))
        print(f"sweep dir: {sdir}")
        if jobs and jobs[0].plan.sweep.aggregate:
            aggregate_sweep(sdir, jobs[0].plan.tuning_settings.metric)
        bad = sum(s not in ("completed", "pruned") for s in statuses)
        if bad:
            how = ", ".join(f"{n} {s}" for s, n in counts.items() if s not in ("completed", "pruned"))
            print(f"esopt: error: {bad} of {len(jobs)} runs did not complete ({how}; see the table)",
                  file=sys.stderr)
        return 1 if bad else 0

    def register_claims(self, jobs: List[Job]) -> None:
        """A claims sweep's design goes into its claims.json before any run starts: the
        registration its verdicts are judged against (esopt.study.claims.register)."""
        from esopt.study import claims

        if jobs and claims.claims_sweep(jobs[0].plan.sweep.name, {j.plan.algo for j in jobs}):
            claims.register(self.sweep_dir(jobs), [(j.rid, j.plan) for j in jobs])

    def _pin_time(self) -> None:
        """Resolve ``hydra.sweep.dir`` (``${now:...}``) once in the master config: every job
        composed later copies its cache, so all jobs share one sweep dir and launcher request."""
        str(self.config.hydra.sweep.dir)

    def _mark_start(self) -> None:
        """Once, as the first runs are launched (after every job was validated here): stamp
        when this sweep began (``esopt.runtime.tuning.SWEEP_START``, inherited by the launchers'
        workers): a tracker that missed a deadline in it stays off until it ends, and a worker
        rides out a storage outage instead of failing its validation."""
        import os
        import time

        from esopt.runtime.tuning import SWEEP_START

        if not getattr(self, "_started", False):
            self._started = True
            os.environ[SWEEP_START] = repr(time.time())

    def composed(self, arguments: List[str]) -> List[Job]:
        """The sweep's jobs, composed and validated as they would run (sub-grids: one job per
        run id), with the notes about them printed; nothing launched. ``esopt.design`` reads these."""
        from esopt.cli.common import SWEEP_CONSUMER
        from esopt.tasks import hub_offline

        self._pin_time()
        quiet_sacct()
        grid = self._grid(arguments)
        with hub_offline(bool(self.config.sweep.get("offline")) and not SWEEP_CONSUMER):
            jobs = self.compose_all(grid)  # sweep.offline: a hub dataset not in the cache fails here
        if self.grids:  # the union of sub-grids: one job per run id
            seen_ids: set = set()
            jobs = [j for j in jobs if not (j.rid in seen_ids or seen_ids.add(j.rid))]
        else:
            for line in unread_notes(jobs):
                print(f"esopt: note: {line}", file=sys.stderr)
        for line in layout_notes(jobs):
            print(f"esopt: note: {line}", file=sys.stderr)
        for line in self.time_notes(jobs):
            print(f"esopt: warning: {line}", file=sys.stderr)
        return jobs

    def sweep(self, arguments: List[str]) -> Any:
        from esopt.cli.common import SWEEP_CONSUMER

        jobs = self.composed(arguments)
        if SWEEP_CONSUMER:  # python -m esopt.design: the jobs go to it, nothing is launched
            SWEEP_CONSUMER[-1](jobs)
            return []
        if self.config.sweep.get("dry_run"):
            self.dry_run(jobs)
            return []
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, Path(str(self.config.hydra.sweep.dir)) / "multirun.yaml")
        kept = sum(self.skipped(j) for j in jobs)
        if kept:
            print(f"esopt: {kept} of {len(jobs)} runs already recorded; not launched again "
                  "(sweep.retry_failed=true reruns failed and unreadable ones)")
        self.register_claims(jobs)
        self.rereport(jobs)
        self.budget_notes(list({j.rid: j for j in jobs if not self.skipped(j)}.values()))
        offline = any(j.plan.sweep.offline for j in jobs)
        saved = {k: os.environ.get(k) for k in OFFLINE_ENV}
        if offline:  # inherited by the launchers' processes and Slurm jobs (sbatch exports the environment)
            os.environ.update(OFFLINE_ENV)
        from esopt.tasks import hub_offline

        try:
            with hub_offline(offline):  # and the runs in this process
                self.launch(jobs)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.rereport(jobs, launched=True)
        code = self.finish(jobs)
        if code:
            sys.exit(code)
        return []


def _span(hours: float) -> str:
    """``1.5 h`` / ``40 min``."""
    return f"{hours:.1f} h" if hours >= 1 else f"{max(1, round(hours * 60))} min"


def collective_minutes(plan, cuda: bool) -> Optional[float]:
    """The process group's timeout of a run of several ranks, in minutes (``esopt.runtime.budget
    .collective_timeout``), for the dry run; None for a single process or a model of unknown size."""
    from esopt import models
    from esopt.runtime.budget import collective_timeout

    params = models.param_count(plan.model)
    if plan.layout.ranks < 2 or not params:
        return None
    return round(collective_timeout(plan, params, cuda=cuda)[0] / 60, 1)


def remote_cuda(launcher: dict, cfg) -> Optional[bool]:
    """For ``engine=auto``: True when the run goes to a Slurm job that asks for GPUs (it will see
    CUDA there, whatever this submitting host has); None = decide by this process's devices."""
    slurm = str(launcher.get("_target_", "")).endswith("SlurmLauncher")
    gpus = ((cfg.get("model") or {}).get("resources") or {}).get("gpus") or 0
    return True if slurm and int(gpus) > 0 else None

