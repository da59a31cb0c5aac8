"""What an algorithm's ``train(ctx)`` gets: the run's objects and its recorder."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esopt.core import store
from esopt.core.errors import Pruned
from esopt.evaluator import evaluate_config, write_samples

PER_PROBLEM_KEYS = ("correct_counts", "greedy_correct")
SAMPLES_DIR = "samples"   # <run>/samples/iteration_<i>.json: each evaluation's completions


def samples_path(run_dir, iteration: int) -> Path:
    """Where the evaluation of a run at ``iteration`` (0: the base model) keeps its completions."""
    return Path(run_dir) / SAMPLES_DIR / f"iteration_{int(iteration)}.json"


def evaluate_recorded(cfg: Any, engine, task, ood, run: store.RunDir | None, iteration: int,
                      probes: dict | None = None, shards=None) -> dict:
    """``evaluate_config`` with the run's eval block (``probes``: its forgetting probes,
    ``esopt.runtime.run.load_probe_tasks``), its completions written to :func:`samples_path`
    (``eval.save_samples`` problems in full; 0 or no run directory: none). ``shards``: this
    rank's share when the run's ranks evaluate together (``esopt.algorithms.distributed.shards``;
    the ranks > 0 pass no run directory: rank 0 records)."""
    records = [] if cfg.eval.save_samples and run is not None else None
    result = evaluate_config(cfg.eval, engine, task, ood, completions=records, probes=probes, shards=shards)
    if records is not None:
        write_samples(samples_path(run.path, iteration), records, cfg.eval.save_samples, result,
                      iteration=int(iteration))
    return result


@dataclass
class Shared:
    """State shared by a run's context and its phase views."""

    t0: float
    tokens_total: int = 0
    last_eval: dict | None = None
    last_eval_iteration: int | None = None
    phases: list = field(default_factory=list)
    effective: dict = field(default_factory=dict)
    trial: Any = None
    trained_state: dict | None = None  # the trained weights when the model itself holds only a shard (GRPO
    #                                    under FSDP2: esopt.algorithms.distributed.full_state, on rank 0)


@dataclass
class RunContext:
    """The run's model, tokenizer, engine, task and run directory, plus its recorder.

    ``iterations`` is this phase's budget; ``iteration_offset`` shifts the iteration numbers
    it logs, so a sequence's second phase continues the first one's count. ``ood_task`` is the
    out-of-domain task of ``eval.ood_task`` (None when unset); ``probes`` the forgetting probes
    of ``eval.probes`` by name ({} when none).
    """

    cfg: Any   # the run's RunPlan (esopt.runtime.runplan), made by validate
    model: Any
    tokenizer: Any
    engine: Any
    task: Any
    run: store.RunDir
    phase: str
    iterations: int
    iteration_offset: int = 0
    shared: Shared = field(default_factory=lambda: Shared(time.time()))
    ood_task: Any = None
    probes: dict = field(default_factory=dict)

    @property
    def settings(self) -> Any:
        """This phase's resolved algorithm settings: the run plan's (``RunPlan.phase``, resolved
        once by validate)."""
        return self.cfg.phase(self.phase).settings

    # --- recording ---------------------------------------------------------------------
    @property
    def tokens_total(self) -> int:
        return self.shared.tokens_total

    def add_tokens(self, n: int) -> None:
        self.shared.tokens_total += int(n)

    def wall_s(self) -> float:
        return time.time() - self.shared.t0

    def log(self, **line: Any) -> None:
        """Append a metrics line; ``iteration`` is phase-local and shifted to the run's count."""
        line.setdefault("kind", "train")
        line["iteration"] = int(line.get("iteration", 0)) + self.iteration_offset
        line.setdefault("phase", self.phase)
        line.setdefault("tokens_total", self.tokens_total)
        line.setdefault("wall_s", round(self.wall_s(), 4))
        self.run.log(**line)

    def set_effective(self, **values: Any) -> None:
        """Record hyperparameters an algorithm resolved from defaults (e.g. sigma, lr)."""
        self.shared.effective.update(values)

    # --- evaluation --------------------------------------------------------------------
    def eval_due(self, iteration: int) -> bool:
        """The one evaluation schedule of every algorithm: after phase iteration ``iteration``
        when the run's count (``iteration_offset + iteration``: a sequence's second phase
        counts on, so its curves line up with a single algorithm's) is a multiple of
        ``eval.every``, and at the phase's end."""
        return (self.iteration_offset + int(iteration)) % self.cfg.eval.every == 0 or int(iteration) >= self.iterations

    def evaluate(self, iteration: int) -> dict:
        """Shared held-out evaluation: log an eval line, report to Optuna, maybe prune.

        A run of several ranks calls it on every rank: each evaluates its share of the problems
        (``esopt.algorithms.distributed.shards``) and gets the whole result; rank 0 alone logs
        and reports, and its pruning decision is every rank's."""
        from esopt.algorithms import distributed

        step = int(iteration) + self.iteration_offset
        shards = distributed.shards()
        lead = shards is None or shards.rank == 0
        result = evaluate_recorded(self.cfg, self.engine, self.task, self.ood_task, self.run if lead else None,
                                   step, self.probes, shards=shards)
        self.shared.last_eval, self.shared.last_eval_iteration = result, step
        if not lead:
            if distributed.agree(False):
                raise Pruned(f"pruned at iteration {step} (rank 0's trial)", None)
            return result
        self.log(kind="eval", iteration=iteration, **eval_line(result))
        trial = self.shared.trial
        prune = False
        if trial is not None:
            trial.report(result, step)
            # the run's last evaluation is never pruned: nothing is left to save
            prune = step < self.cfg.iterations and trial.should_prune()
        if shards is not None:
            distributed.agree(prune)
        if prune:
            raise Pruned(prune_message(step, trial.reason), trial.reason)
        return result

    def for_phase(self, algo: str, iterations: int, iteration_offset: int) -> "RunContext":
        return RunContext(
            self.cfg, self.model, self.tokenizer, self.engine, self.task, self.run,
            phase=algo, iterations=int(iterations), iteration_offset=int(iteration_offset),
            shared=self.shared, ood_task=self.ood_task, probes=self.probes,
        )

    def phase_done(self, algo: str, eval_result: dict | None = None) -> None:
        """Record the evaluation after a sequence phase into the summary's ``phases``."""
        if eval_result is None:
            eval_result = self.evaluate(self.iterations)
        self.shared.phases.append({"algo": algo, "iterations": self.iterations, "eval": eval_result})


def prune_message(step: int, reason: dict | None) -> str:
    """``pruned at iteration <step>``, plus the pruner's statistic, value and threshold."""
    msg = f"pruned at iteration {step}"
    r = reason or {}
    if r.get("value") is not None and r.get("threshold") is not None:
        msg += (f" by {r.get('pruner')}: {r.get('statistic')} = {r['value']:.4g}, threshold {r['threshold']:.4g}"
                f" ({r.get('reference')})")
    return msg


def eval_line(result: dict) -> dict:
    """The evaluator's result without per-problem lists, flattened for metrics.jsonl."""
    line = {k: v for k, v in result.items() if k not in PER_PROBLEM_KEYS}
    # the evaluation's own cost, under names that do not shadow the run's cumulative counters
    line["eval_wall_s"] = line.pop("wall_s", None)
    line["eval_tokens"] = line.pop("tokens_generated", None)
    for k, v in result.get("pass@k", {}).items():
        line[f"pass@{k}"] = v
    return line
