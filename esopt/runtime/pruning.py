"""Noise-aware pruning (``tuning.pruner=auto``; its registry entry is in ``esopt.runtime.pruners``).

A single evaluation on a few hundred problems is noisy: a median rule prunes half of the runs
of an equally good configuration at its first report. The ``auto`` pruner prunes only when
the evidence says the trial's configuration is worse than another one:

- Evidence: at every evaluation a run stores its per-problem results in its trial's user
  attributes (``evidence@<step>``: correct counts out of ``samples``, greedy correctness;
  :func:`evidence`), so every worker, and a later replay (``benchmarks/bench_pruning.py``),
  sees the per-problem scores of every trial of the study.
- Configurations, not seeds: runs whose configs differ only in ``seed`` share a
  ``config_id`` (``esopt.runtime.validate.config_id``); with ``tuning.pool_seeds`` (default)
  the seeds of a configuration that reported the same step are pooled problem by problem.
- Rule, at a reported step ``s >= tuning.n_warmup_steps``: with the bounds of
  :func:`esopt.core.metrics.config_bounds` (level ``tuning.confidence``; the seed-to-seed
  variance from :func:`esopt.core.metrics.seed_variance` over the configurations with two or
  more runs at ``s``), prune when the upper bound of the trial's configuration is below the
  lower bound of the best other configuration at ``s`` (mirrored when minimizing). A
  configuration is never compared with itself, so seeds of one configuration never prune each
  other. The run's last evaluation is never pruned (nothing is left to save;
  ``esopt.runtime.context``).
- Second reference, the base model (``tuning.baseline``, default on): every run evaluates its
  model before training (``summary["base"]``) and stores that evaluation's per-problem results
  as ``evidence@base``. At a step that the rule above does not prune, the configuration's
  per-problem change from its base, ``d_rp = x_rp(s) - x_rp(base)`` (paired by problem, seeds
  pooled), gets the same kind of bounds (:func:`esopt.core.metrics.config_bounds`, the seed
  variance of d over the configurations with two or more runs) at the stricter level
  ``tuning.baseline_confidence`` (0.99: the same base is tested again at every report); prune
  when the upper bound is below 0: training has made the model worse than the one it started
  from. This needs no other
  configuration, so it also cuts a collapsing configuration launched first (the between-
  configuration rule has nothing to compare it with then).

Why a trial was pruned (any pruner; ``esopt.runtime.pruners.explain``) lands in ``summary.json`` as
``pruning`` (statistic, value, threshold, reference, step) and in the report's pruning
figure (``esopt.study.report.page.fig_pruning``).
"""

from __future__ import annotations

import re
from typing import Mapping

import numpy as np
from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from esopt.core import metrics

EVIDENCE_PREFIX = "evidence@"
BASE_KEY = "evidence@base"   # the run's evaluation before training (not an Optuna step)
CONFIG_ATTR = "config_id"
PER_PROBLEM = re.compile(r"^(?:pass@(\d+)|greedy)$")  # metrics with per-problem scores


def evidence_key(step: int) -> str:
    return f"{EVIDENCE_PREFIX}{int(step)}"


def evidence(result: Mapping | None) -> dict | None:
    """The per-problem part of an evaluator result, as stored with the trial (or None):
    ``{"samples": n, "correct": [c_p ...], "greedy": [0/1 ...] | None}``."""
    if not isinstance(result, Mapping) or result.get("correct_counts") is None:
        return None
    return {"samples": int(result["samples"]), "correct": [int(c) for c in result["correct_counts"]],
            "greedy": None if result.get("greedy_correct") is None else [int(g) for g in result["greedy_correct"]]}


def per_problem(ev: Mapping | None, metric: str) -> np.ndarray | None:
    """Per-problem scores of ``metric`` from stored evidence: pass@k per problem (unbiased,
    ``metrics.pass_at_k`` from c of n) or greedy correctness; None when not available."""
    m = PER_PROBLEM.match(metric)
    if not ev or not m:
        return None
    if m.group(1):
        k, n = int(m.group(1)), int(ev["samples"])
        if k > n:
            return None
        return np.asarray(metrics.pass_at_k(n, np.asarray(ev["correct"], dtype=np.int64), k), dtype=float)
    return None if ev.get("greedy") is None else np.asarray(ev["greedy"], dtype=float)


def _group(t: FrozenTrial, pool_seeds: bool) -> str:
    if pool_seeds and t.user_attrs.get(CONFIG_ATTR):
        return str(t.user_attrs[CONFIG_ATTR])
    return f"trial {t.number}"


class ConfidencePruner(BasePruner):
    """``tuning.pruner=auto``: prune a trial when its configuration's upper confidence bound
    falls below the best other configuration's lower bound at the same step, or (``baseline``)
    when its paired change from the base model is below 0 at that confidence (module doc).

    After each call, ``last[trial.number]`` holds the comparison made (or why none was).
    """

    def __init__(self, metric: str = "pass@1", n_warmup_steps: int = 0, confidence: float = 0.95,
                 pool_seeds: bool = True, baseline: bool = True, baseline_confidence: float = 0.99):
        if not PER_PROBLEM.match(metric):
            raise ValueError(f"the auto pruner needs a per-problem metric (pass@K or greedy), got {metric!r}")
        self.metric, self.n_warmup_steps = metric, int(n_warmup_steps)
        self.confidence, self.pool_seeds = float(confidence), bool(pool_seeds)
        self.baseline, self.baseline_confidence = bool(baseline), float(baseline_confidence)
        self.last: dict[int, dict] = {}

    def groups_at(self, study, step: int, size: int) -> tuple[dict[str, np.ndarray], dict[str, list]]:
        """Per configuration, the [runs, problems] scores reported at ``step`` (runs on
        ``size`` problems), and the trials behind them."""
        rows: dict[str, list] = {}
        who: dict[str, list] = {}
        for t in study.get_trials(deepcopy=False):
            if t.state == TrialState.FAIL:
                continue
            x = per_problem(t.user_attrs.get(evidence_key(step)), self.metric)
            if x is None or x.size != size:
                continue
            g = _group(t, self.pool_seeds)
            rows.setdefault(g, []).append(x)
            who.setdefault(g, []).append(t)
        return {g: np.vstack(v) for g, v in rows.items()}, who

    def prune(self, study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        self.last.pop(trial.number, None)
        if step is None or step < self.n_warmup_steps:
            return False
        mine = per_problem(trial.user_attrs.get(evidence_key(step)), self.metric)
        if mine is None:
            return False
        groups, who = self.groups_at(study, step, mine.size)
        own = _group(trial, self.pool_seeds)
        if own not in groups:  # the evidence is written before the report; be safe anyway
            groups[own], who[own] = mine[None, :], [trial]
        others = [g for g in groups if g != own]
        if not others:
            self.last[trial.number] = {"step": step, "note": "no other configuration reported this step"}
            return self._below_base(study, trial, step, own, groups, who)
        tau2 = metrics.seed_variance(list(groups.values()))
        bounds = {g: metrics.config_bounds(groups[g], tau2, self.confidence) for g in groups}
        maximize = study.direction == StudyDirection.MAXIMIZE
        ref = (max if maximize else min)(others, key=lambda g: bounds[g][0])
        m, lo, hi = bounds[own]
        rm, rlo, rhi = bounds[ref]
        value, threshold = (hi, rlo) if maximize else (lo, rhi)
        prune = value < threshold if maximize else value > threshold
        pct = f"{100 * self.confidence:g}%"
        what = "configuration" if self.pool_seeds else "run"
        n_own, n_ref = groups[own].shape[0], groups[ref].shape[0]
        params = _describe(who[ref][0])
        self.last[trial.number] = {
            "pruner": "auto", "step": int(step), "metric": self.metric,
            "statistic": f"{'upper' if maximize else 'lower'} {pct} bound of {self.metric} of this {what} "
                         f"({self._pooled(n_own)}mean {m:.4g})",
            "value": float(value), "threshold": float(threshold),
            "reference": f"best other {what} ({params + '; ' if params else ''}{self._pooled(n_ref)}mean {rm:.4g}): "
                         f"its {'lower' if maximize else 'upper'} {pct} bound",
            "reference_runs": [t.user_attrs.get("run_id", f"trial {t.number}") for t in who[ref]],
            "seed_variance": float(tau2), "rule": "value < threshold" if maximize else "value > threshold",
            "pruned": bool(prune),
        }
        return bool(prune) or self._below_base(study, trial, step, own, groups, who)

    def _pooled(self, n: int) -> str:
        return f"{n} runs pooled, " if self.pool_seeds and n > 1 else ""

    def _below_base(self, study, trial: FrozenTrial, step: int, own: str, groups: dict, who: dict) -> bool:
        """The base-model rule (module doc): prune when the upper bound of the configuration's
        paired change from its base model is below 0 (mirrored when minimizing)."""
        if not self.baseline:
            return False
        diffs: dict[str, np.ndarray] = {}
        for g, trials in who.items():
            rows = []
            for t, x in zip(trials, groups[g]):
                b = per_problem(t.user_attrs.get(BASE_KEY), self.metric)
                if b is not None and b.size == x.size:
                    rows.append(x - b)
            if rows:
                diffs[g] = np.vstack(rows)
        if own not in diffs:
            return False
        tau2 = metrics.seed_variance(list(diffs.values()))
        m, lo, hi = metrics.config_bounds(diffs[own], tau2, self.baseline_confidence)
        maximize = study.direction == StudyDirection.MAXIMIZE
        value = hi if maximize else lo
        prune = value < 0.0 if maximize else value > 0.0
        if prune:
            pct = f"{100 * self.baseline_confidence:g}%"
            what = "configuration" if self.pool_seeds else "run"
            n = diffs[own].shape[0]
            self.last[trial.number] = {
                "pruner": "auto", "step": int(step), "metric": self.metric,
                "statistic": f"{'upper' if maximize else 'lower'} {pct} bound of the change in {self.metric} "
                             f"from the base model, paired by problem, of this {what} "
                             f"({self._pooled(n)}mean change {m:+.4g})",
                "value": float(value), "threshold": 0.0,
                "reference": "the base model this configuration started from, evaluated before training",
                "reference_runs": [],
                "seed_variance": float(tau2), "rule": "value < threshold" if maximize else "value > threshold",
                "pruned": True,
            }
        return bool(prune)


def _describe(t: FrozenTrial) -> str:
    """Key params of a trial (its user attributes) in one short string, seed left out."""
    keys = ("pop", "sigma", "lr")
    return ", ".join(f"{k}={t.user_attrs[k]:g}" if isinstance(t.user_attrs.get(k), (int, float))
                     else f"{k}={t.user_attrs[k]}" for k in keys if t.user_attrs.get(k) is not None)
