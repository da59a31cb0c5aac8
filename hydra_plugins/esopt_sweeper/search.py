"""The ``optuna`` sweeper (``hydra/sweeper=optuna``): an Optuna 5 sampler proposes configs from
the search space of ``hydra.sweeper.params``; trials run in parallel batches through the
configured launcher, reporting and pruned inside the runs (``tuning.pruner``). Every trial is
composed and validated like a grid job (``esopt.runtime.validate``) before it is launched."""

import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from hydra_plugins.esopt_sweeper.output import first_line, quiet_sacct
from hydra_plugins.esopt_sweeper.sweepers import EsoptSweeper, Job, estimate_tokens, fail


class OptunaSweeper(EsoptSweeper):
    """Search mode: an Optuna 5 sampler proposes configs; runs report and are pruned inside."""

    def __init__(self, sampler: str = "tpe", seed: int = 0, n_trials: int = 8, n_jobs: int = 2,
                 n_startup_trials: int = 4, study: Optional[str] = None,
                 params: Optional[Dict[str, str]] = None):
        super().__init__(max_batch_size=None, params=params)
        self.sampler_name, self.seed, self.n_trials = sampler, int(seed), int(n_trials)
        self.n_jobs, self.n_startup_trials, self.study_name = max(1, int(n_jobs)), int(n_startup_trials), study

    def _space(self, arguments: List[str]):
        """(fixed overrides, {key: optuna distribution}) from params + command line."""
        fixed, space = [], {}
        for ov in self._arguments(arguments):
            key = ov.get_key_element()
            if not ov.is_sweep_override():
                fixed.append(f"{key}={ov.get_value_element_as_str()}")
                continue
            try:
                space[key] = _distribution(ov)
            except ValueError as e:
                fail(f"{key}: {e}")
        if not space:
            fail("hydra/sweeper=optuna needs a search space, e.g. sigma='tag(log,interval(1e-4,1e-2))' "
                 "pop='choice(8,16,32)' (or hydra.sweeper.params)")
        return fixed, space

    def _sampler(self):
        import optuna

        if self.sampler_name == "tpe":
            return per_trial_seed(optuna.samplers.TPESampler(
                seed=self.seed, n_startup_trials=self.n_startup_trials, constant_liar=True), self.seed)
        if self.sampler_name == "random":
            return per_trial_seed(optuna.samplers.RandomSampler(seed=self.seed), self.seed)
        fail(f"unknown hydra.sweeper.sampler {self.sampler_name!r} (known: tpe, random)")

    def _wait_elsewhere(self, jobs: List[Job]) -> None:
        """Runs of ``jobs`` that another process (a second search on this study) is running:
        wait until they end, then take their summaries (their result, not a FAIL)."""
        import time

        from esopt.core import store

        waiting = [j for j in jobs if (j.summary or {}).get("status") in (None, "running") and self.live_elsewhere(j)]
        if waiting:
            print(f"esopt: note: waiting for {len(waiting)} run(s) another process is running: "
                  + ", ".join(j.rid for j in waiting), file=sys.stderr)
        while waiting:
            time.sleep(WAIT_S)
            waiting = [j for j in waiting if self.live_elsewhere(j)]
        for job in jobs:
            job.summary = store.RunDir.for_run(job.plan.sweep.root, job.plan.sweep.name, job.rid).read_summary()

    def sweep(self, arguments: List[str]) -> Any:
        from optuna.trial import TrialState

        from esopt.runtime import tuning

        from esopt.cli.common import SWEEP_CONSUMER

        if SWEEP_CONSUMER:  # esopt.design: a search samples its runs as it goes
            fail("esopt.design assesses a grid (hydra/sweeper=esopt); the optuna sweeper picks its runs as it goes")
        self._pin_time()
        quiet_sacct()
        fixed, space = self._space(arguments)
        base = self.compose_all([fixed])[0]  # the fixed part must be valid on its own
        name = self.study_name or f"esopt:{base.plan.sweep.name}:search"
        if self.config.sweep.get("dry_run"):
            print(f"esopt: dry run: optuna search, study {name!r} in {base.plan.tuning_settings.storage}, "
                  f"{self.n_trials} trials in batches of {self.n_jobs}; space: "
                  + ", ".join(f"{k}={v}" for k, v in space.items()) + f"; fixed: {' '.join(fixed) or '-'}")
            print(f"max generated tokens per run (upper bound, at the fixed values): {estimate_tokens(base.plan):,}")
            return []
        study = tuning.open_study(base.plan.tuning_settings, sampler=self._sampler(), name=name)
        all_jobs: List[Job] = []
        asked = 0
        while asked < self.n_trials:
            batch: List[Job] = []
            for _ in range(min(self.n_jobs, self.n_trials - asked)):
                asked += 1
                trial = study.ask(space)
                overrides = fixed + [f"{k}={_encode(v)}" for k, v in trial.params.items()]
                overrides.append(f"++tuning.study={name}")
                try:
                    job = self.compose(overrides)
                except Exception as e:  # noqa: BLE001 - a proposal the config rejects
                    print(f"esopt: warning: trial {trial.number} rejected: {first_line(e)}", file=sys.stderr)
                    study.tell(trial.number, state=TrialState.FAIL)
                    continue
                job.trial = trial.number
                trial.set_user_attr("run_id", job.rid)
                batch.append(job)
            self.launch(batch)
            self._wait_elsewhere(batch)
            for job in batch:  # workers tell their trial; tell here too for skipped / crashed runs
                s = job.summary or {"status": "failed"}
                tuning.RunTrial(study, _Number(job.trial), job.plan.tuning_settings.metric, False).finish(s)
            all_jobs += batch
        code = self.finish(all_jobs, title="trials")
        done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
        if done:
            best = study.best_trial
            print(f"best trial #{best.number}: {best.value:.4f} "
                  f"({base.plan.tuning_settings.metric}), params {best.params}, "
                  f"run {best.user_attrs.get('run_id')} (study {name!r})")
        else:
            print(f"no completed trial in study {name!r}")
        if code:
            sys.exit(code)
        return []


WAIT_S = 2.0   # how often a search polls a run another process is running


def per_trial_seed(sampler, seed: int):
    """``sampler`` reseeded before each trial from (``seed``, the trial's number): the numbers are
    unique within a study (the storage hands them out), so two searches on one study started
    together draw distinct proposals, where one seeded stream each proposed the same ones
    (issue 42); a single search stays reproducible."""
    inner = sampler.before_trial

    def before_trial(study, trial) -> None:
        s = (int(seed) * 1_000_003 + int(trial.number)) % 2 ** 32
        for part in (sampler, getattr(sampler, "_random_sampler", None)):
            rng = getattr(part, "_rng", None)
            if rng is not None:
                rng.rng.seed(s)
        inner(study, trial)

    sampler.before_trial = before_trial
    return sampler


@dataclass
class _Number:
    """Stand-in trial with only a number (RunTrial.finish needs trial.number)."""

    number: int


def _distribution(ov):
    """Hydra sweep override -> Optuna distribution (choice / range / interval, tag(log, ...))."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    v = ov.value()
    if isinstance(v, ChoiceSweep):
        return CategoricalDistribution([_plain(x) for x in v.list])
    if isinstance(v, RangeSweep):
        return CategoricalDistribution([_plain(x) for x in ov.sweep_iterator()])
    if isinstance(v, IntervalSweep):
        log = "log" in (v.tags or set())
        if isinstance(v.start, int) and isinstance(v.end, int) and "float" not in (v.tags or set()):
            return IntDistribution(int(v.start), int(v.end), log=log)
        return FloatDistribution(float(v.start), float(v.end), log=log)
    raise ValueError(f"unsupported search space {ov.input_line!r}")


def _plain(x):
    return x if isinstance(x, (str, int, float, bool)) or x is None else str(x)


def _encode(v) -> str:
    return "null" if v is None else (repr(v) if isinstance(v, float) else str(v))
