"""The pruners, chosen by ``tuning.pruner=NAME``: a registry of small parts (as Optuna's own).

Each :class:`Pruner` entry says how to build its Optuna pruner from the tuning settings (every
worker builds the same one: a pruner is not stored with a study), which ``tuning`` keys it
reads, what it requires of the run (``check``), and how to say why it pruned a trial
(``explain``: statistic, value, threshold, reference, rule; into ``summary.json`` as
``pruning`` and the report's pruning figure).

- ``none`` (default): never prunes.
- ``auto`` (recommended): noise-aware, configurations compared with confidence bounds on
  per-problem evidence (``esopt.runtime.pruning.ConfidencePruner``).
- ``percentile``: Optuna's PercentilePruner; ``median`` is its 50th-percentile specialisation.
- ``successive_halving``, ``hyperband``: rung promotion (resource = the reported iteration).
- ``wilcoxon``: Optuna's WilcoxonPruner against the best trial.

Adding a pruner is one entry below (or :func:`register` from outside).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

import numpy as np

from esopt.core.errors import ConfigError

MEDIAN = 50.0  # the median pruner is the percentile pruner at this percentile


@dataclass(frozen=True)
class Pruner:
    """One ``tuning.pruner`` choice."""

    name: str
    summary: str
    make: Callable[[dict], Any]           # the tuning settings -> an Optuna pruner
    knobs: tuple[str, ...] = ()           # the tuning keys it reads (documented in TuningConfig)
    explain: Optional[Callable] = None    # (pruner, study, trial, metric) -> why it pruned (dict)
    check: Optional[Callable] = None      # (settings) -> None; ConfigError when the run cannot use it
    prunes: bool = True                   # false: it never prunes (runs need not ask it)


PRUNERS: dict[str, Pruner] = {}


def register(p: Pruner) -> Pruner:
    PRUNERS[p.name] = p
    return p


def get(name: str) -> Pruner:
    if name not in PRUNERS:
        raise ConfigError(f"unknown tuning.pruner {name!r} (known: {', '.join(PRUNERS)})")
    return PRUNERS[name]


def explain(name: str, pruner: Any, study, trial, metric: str) -> dict:
    """Why ``pruner`` (``tuning.pruner=name``) pruned ``trial`` at its last step: statistic,
    value, threshold, reference, step (a dict for ``summary.json``). A pruner without its own
    explanation (or whose explanation fails) reports the trial's value at that step."""
    step = trial.last_step
    value = trial.intermediate_values.get(step) if step is not None else None
    out: dict = {"pruner": name, "step": None if step is None else int(step), "metric": metric}
    entry = PRUNERS.get(name)
    if entry is not None and entry.explain is not None:
        try:
            return {**out, **entry.explain(pruner, study, trial, metric)}
        except Exception:  # noqa: BLE001 - an explanation must never fail a run
            pass
    return {**out, "statistic": f"{metric} at this step", "value": value, "threshold": None,
            "reference": f"{name} rule", "rule": None}


def _maximize(study) -> bool:
    from optuna.study import StudyDirection

    return study.direction == StudyDirection.MAXIMIZE


def _rule(maximize: bool) -> str:
    return "value < threshold" if maximize else "value > threshold"


# --- none -------------------------------------------------------------------------------------
def _none(t: dict):
    from optuna.pruners import NopPruner

    return NopPruner()


register(Pruner("none", "never prunes", _none, prunes=False))


# --- auto -------------------------------------------------------------------------------------
def _auto(t: dict):
    from esopt.runtime.pruning import ConfidencePruner

    return ConfidencePruner(str(t["metric"]), int(t["n_warmup_steps"]), float(t["confidence"]),
                            bool(t["pool_seeds"]), bool(t["baseline"]), float(t["baseline_confidence"]))


def _auto_explain(pruner, study, trial, metric: str) -> dict:
    return dict(pruner.last.get(trial.number, {}))  # the comparison the last call made


def _auto_check(t: dict) -> None:
    from esopt.runtime.pruning import PER_PROBLEM

    if not PER_PROBLEM.match(str(t["metric"])):
        raise ConfigError(f"tuning.pruner=auto needs a metric with per-problem scores (pass@K or greedy), "
                          f"got tuning.metric={t['metric']}")


register(Pruner("auto", "noise-aware: confidence bounds on per-problem evidence (esopt.runtime.pruning)",
                _auto, ("metric", "n_warmup_steps", "confidence", "pool_seeds", "baseline", "baseline_confidence"),
                _auto_explain, _auto_check))


# --- percentile, and median as its 50th percentile --------------------------------------------
STEP_KNOBS = ("n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials")


def _steps(t: dict) -> dict:
    return {k: int(t[k]) for k in STEP_KNOBS}


def _percentile(t: dict):
    from optuna.pruners import PercentilePruner

    return PercentilePruner(float(t["percentile"]), **_steps(t))


def _median(t: dict):
    from optuna.pruners import MedianPruner

    return MedianPruner(**_steps(t))


def _percentile_explain(pruner, study, trial, metric: str) -> dict:
    """Optuna's rule: the trial's best value so far against the percentile, at this step, of
    the completed trials (for maximize the (100 - p)-th percentile; median: p = 50)."""
    from optuna.trial import TrialState

    step, pct, maximize = trial.last_step, float(pruner._percentile), _maximize(study)
    done = [t.intermediate_values[step] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if step in t.intermediate_values]
    vals = np.asarray(list(trial.intermediate_values.values()), dtype=float)
    best = float(np.nanmax(vals) if maximize else np.nanmin(vals))
    thr = float(np.nanpercentile(done, 100 - pct if maximize else pct)) if done else math.nan
    what = "median" if pct == MEDIAN else f"{pct:g}th percentile"
    return {"statistic": f"best {metric} reported so far", "value": best, "threshold": thr,
            "reference": f"{what} of {len(done)} completed trial(s) at this step", "rule": _rule(maximize)}


PERCENTILE = register(Pruner("percentile", "Optuna's PercentilePruner (tuning.percentile)", _percentile,
                             ("percentile", *STEP_KNOBS), _percentile_explain))
register(replace(PERCENTILE, name="median", summary="Optuna's MedianPruner: the percentile pruner at 50",
                 make=_median, knobs=STEP_KNOBS))


# --- successive halving, hyperband -----------------------------------------------------------
def _resource(v):
    return v if v == "auto" else int(v)


def _successive_halving(t: dict):
    from optuna.pruners import SuccessiveHalvingPruner

    return SuccessiveHalvingPruner(min_resource=_resource(t["min_resource"]), reduction_factor=int(t["reduction_factor"]),
                                   min_early_stopping_rate=int(t["min_early_stopping_rate"]),
                                   bootstrap_count=int(t["bootstrap_count"]))


def _hyperband(t: dict):
    from optuna.pruners import HyperbandPruner

    min_r = 1 if t["min_resource"] == "auto" else int(t["min_resource"])
    return HyperbandPruner(min_resource=min_r, max_resource=_resource(t["max_resource"]),
                           reduction_factor=int(t["reduction_factor"]), bootstrap_count=int(t["bootstrap_count"]))


def _rung_explain(name: str) -> Callable:
    def why(pruner, study, trial, metric: str) -> dict:
        return {"statistic": f"{metric} at this step", "value": trial.intermediate_values.get(trial.last_step),
                "threshold": None, "reference": f"{name} rule (rung promotion cut-off)", "rule": None}

    return why


register(Pruner("successive_halving", "Optuna's SuccessiveHalvingPruner", _successive_halving,
                ("min_resource", "reduction_factor", "min_early_stopping_rate", "bootstrap_count"),
                _rung_explain("successive_halving")))
register(Pruner("hyperband", "Optuna's HyperbandPruner", _hyperband,
                ("min_resource", "max_resource", "reduction_factor", "bootstrap_count"), _rung_explain("hyperband")))


# --- wilcoxon ---------------------------------------------------------------------------------
def _wilcoxon(t: dict):
    from optuna.pruners import WilcoxonPruner

    with warnings.catch_warnings():  # experimental in Optuna 5; the interface we use is stable
        warnings.simplefilter("ignore")
        return WilcoxonPruner(p_threshold=float(t["p_threshold"]), n_startup_steps=int(t["n_startup_steps"]))


def _wilcoxon_explain(pruner, study, trial, metric: str) -> dict:
    from scipy.stats import wilcoxon

    maximize, best = _maximize(study), study.best_trial
    common = sorted(set(trial.intermediate_values) & set(best.intermediate_values))
    d = [trial.intermediate_values[s] - best.intermediate_values[s] for s in common]
    p = float(wilcoxon(d, alternative="less" if maximize else "greater", zero_method="zsplit").pvalue)
    return {"statistic": f"Wilcoxon signed-rank p-value of {metric} vs the best trial", "value": p,
            "threshold": float(pruner._p_threshold), "reference": f"best trial #{best.number} ({len(common)} common steps)",
            "rule": "value < threshold"}


register(Pruner("wilcoxon", "Optuna's WilcoxonPruner against the best trial", _wilcoxon,
                ("p_threshold", "n_startup_steps"), _wilcoxon_explain))
