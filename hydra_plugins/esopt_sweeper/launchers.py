"""Slurm launcher that can pack several runs into one Slurm array task (``runs_per_job``).

hydra-submitit-launcher's SlurmLauncher gives every run its own array task: a fresh Python
process that imports torch and transformers before the run starts (several seconds), which
dominates short runs. ``runs_per_job: k`` hands k runs to each task, run one after another in
one process, and multiplies ``timeout_min`` by k. Requeue (time-out / preemption) resubmits the
whole pack; its finished runs are skipped by the store and the interrupted one resumes.
``runs_per_job: 1`` is exactly SlurmLauncher.
"""

from typing import Any, List, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher, SlurmLauncher


class _Pack:
    """The callable of one array task: several launcher calls; checkpointable for requeue."""

    def __init__(self, launcher: BaseSubmititLauncher):
        self.launcher = launcher

    def __call__(self, pack: List[tuple]) -> List[JobReturn]:
        return [self.launcher(*args) for args in pack]

    def checkpoint(self, pack: List[tuple]) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self, pack)


class EsoptSlurmLauncher(SlurmLauncher):
    def __init__(self, runs_per_job: int = 1, **params: Any) -> None:
        super().__init__(**params)
        self.runs_per_job = max(1, int(runs_per_job or 1))

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        k = self.runs_per_job
        if k == 1 or len(job_overrides) == 1:
            return super().launch(job_overrides, initial_job_idx)
        import logging

        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        log = logging.getLogger(__name__)
        params = dict(self.params)
        init = {"folder": params.pop("submitit_folder"),
                "slurm_max_num_timeout": params.pop("max_num_timeout", 0)}
        executor = submitit.AutoExecutor(cluster="slurm", **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        if params.get("timeout_min"):
            params["timeout_min"] = int(params["timeout_min"]) * k
        executor.update_parameters(**{x if x in base else f"slurm_{x}": y for x, y in params.items()})

        args = []
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            args.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        packs = [args[i:i + k] for i in range(0, len(args), k)]
        log.info(f"{len(args)} runs in {len(packs)} Slurm tasks of up to {k} runs")
        jobs = executor.map_array(_Pack(self), packs)
        return [r for job in jobs for r in job.results()[0]]
