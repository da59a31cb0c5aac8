"""What every analysis shares: its evaluation options, evaluating a model on a task, the
intervals of a change (paired over problems), and the JSON it writes beside the run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from esopt import engines, tasks
from esopt.core.config import SPLITS
from esopt.core.errors import ConfigError
from esopt.core.metrics import bootstrap_ci, pass_at_k, percentile_interval, resample_indices
from esopt.core.store import atomic_write_json
from esopt.evaluator import evaluate


@dataclass
class EvalOpts:
    """Evaluation size and sampling for the analyses (small defaults for CPU)."""

    split: str = "heldout"
    problems: int | None = 64               # None = the whole split
    samples: int = 8
    temperature: float | None = None      # None = the run's eval.temperature
    top_p: float | None = None            # None = the run's eval.top_p
    max_new_tokens: int | None = None     # None = the run's eval.max_new_tokens / task default
    seed: int | None = None               # None = the run's eval.seed
    greedy: bool = False
    bootstrap: int = 1000

    def resolved(self, plan) -> "EvalOpts":
        ev = plan.eval
        return dataclasses.replace(
            self,
            temperature=ev.temperature if self.temperature is None else float(self.temperature),
            top_p=ev.top_p if self.top_p is None else float(self.top_p),
            max_new_tokens=ev.max_new_tokens if self.max_new_tokens is None else int(self.max_new_tokens),
            seed=ev.seed if self.seed is None else int(self.seed))

    def check(self) -> None:
        if self.split not in SPLITS:
            raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if (self.problems is not None and self.problems < 1) or self.samples < 1:
            raise ConfigError(f"--problems and --samples must be >= 1, got {self.problems}, {self.samples}")
        if self.bootstrap < 1:
            raise ConfigError(f"--bootstrap must be >= 1, got {self.bootstrap}")


def checked(opts: EvalOpts | None, log, default: EvalOpts) -> tuple:
    """An analysis's evaluation options (``default`` when None), checked, and its progress
    logger (a no-op when None)."""
    opts = opts or default
    opts.check()
    return opts, log or (lambda s: None)


def run_evaluate(engine, task, o: EvalOpts) -> dict:
    return evaluate(engine, task, split=o.split, problems=o.problems, samples=o.samples,
                    temperature=o.temperature, top_p=o.top_p, max_new_tokens=o.max_new_tokens,
                    seed=o.seed, greedy=o.greedy, entropy=False)


def per_problem(counts: Sequence[int], n: int, k: int) -> np.ndarray:
    """Per-problem unbiased pass@k from correct counts out of n samples."""
    return np.asarray(pass_at_k(n, np.asarray(counts, dtype=np.int64), k), dtype=np.float64)


def gain_share(base: np.ndarray, trained: np.ndarray, pruned: np.ndarray, *, n_boot: int = 1000,
               seed: int = 0, alpha: float = 0.05) -> tuple[float | None, list | None]:
    """Share of the trained model's gain a pruned model keeps, with a paired bootstrap interval.

    share = (mean(pruned) - mean(base)) / (mean(trained) - mean(base)), means over problems.
    Each replicate resamples problems once and uses the same rows for the three models; the
    interval is the (alpha/2, 1-alpha/2) percentiles of the replicates whose gain is nonzero.
    Returns (None, None) when the point gain is 0.
    """
    base, trained, pruned = (np.asarray(a, dtype=np.float64) for a in (base, trained, pruned))
    gain = trained.mean() - base.mean()
    if gain == 0:
        return None, None
    share = float((pruned.mean() - base.mean()) / gain)
    idx = resample_indices(np.random.default_rng(seed), n_boot, len(base))
    g = trained[idx].mean(1) - base[idx].mean(1)
    ok = g != 0
    if not ok.any():
        return share, None
    reps = (pruned[idx].mean(1)[ok] - base[idx].mean(1)[ok]) / g[ok]
    return share, percentile_interval(reps, 1 - alpha)


def paired_change(base: np.ndarray, trained: np.ndarray, *, n_boot: int = 1000, seed: int = 0) -> tuple[float, list]:
    """mean(trained - base) over problems and its 95% paired percentile bootstrap interval."""
    diff = np.asarray(trained, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    return float(diff.mean()), list(bootstrap_ci(diff, n=n_boot, seed=seed))


def analysis_task(plan, tokenizer, task_cfg: dict | None = None):
    """The run's task as its plan builds it (``plan.task_spec``), or another task (``task_cfg``:
    forgetting's) in the model's prompt style."""
    if task_cfg is None:
        return tasks.get(plan.task_spec.config, tokenizer=tokenizer, style=plan.task_spec.stated)
    return tasks.get(task_cfg, tokenizer=tokenizer, style=plan.model.get("prompt_style"))


def analysis_engine(plan, model, tokenizer, device: str):
    # analyses edit the HF model's tensors in place: always the hf engine on the analysis device
    return engines.get({"name": "hf", "device": device, "max_batch": plan.engine_config.max_batch},
                       model, tokenizer)


def scores(result: dict, k: int) -> dict:
    out = {"pass@1": result["pass@k"]["1"], "pass@K": result["pass@k"][str(k)]}
    if result.get("greedy") is not None:
        out["greedy"] = result["greedy"]
    return out


def result_header(kind: str, plan, run_dir: Path, base_name: str, base_path: str | None) -> dict:
    return {"analysis": kind, "version": 1, "run_dir": str(Path(run_dir).resolve()), "algo": plan.algo,
            "model": plan.model["name"], "task": plan.task.get("name"), "seed": plan.seed,
            "base": {"name": base_name, "path": base_path}}


def write_result(run_dir: Path, kind: str, result: dict, write: bool) -> dict:
    if write:
        atomic_write_json(Path(run_dir) / f"{kind}.json", result)
    return result
