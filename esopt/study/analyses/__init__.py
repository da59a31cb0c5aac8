"""Mechanism analyses of a trained run: functional sparsity, drift by module, forgetting, the
connectivity of a seed's ES and GRPO solutions, as a
registry (``REGISTRY``: name -> :class:`Analysis`); adding one is its module plus one entry here
and its name in ``esopt.core.config.ANALYSES`` (the list config validation checks before any
run is dispatched; the registry must cover it exactly, checked at import).

    python -m esopt.analyze sparsity   <run-dir> [--fractions 1,0.5,0.22,0.1,0.05,0.01]
                                       [--modes global,per_tensor,smallest,random,equal_norm]
                                       [--control-fractions 0.22] [--mask-seed S] [eval options]
    python -m esopt.analyze drift      <run-dir> [<run-dir> ...] [--top 0.01] [--out FILE]
    python -m esopt.analyze forgetting <run-dir> [--tasks addition,compare,reverse] [eval options]
    python -m esopt.analyze connectivity <es-run> <grpo-run> | --sweep <sweep-dir> [eval options]
    eval options: --split heldout --problems 64 --samples 8 --temperature T --seed S
                  --max-new-tokens N --greedy --bootstrap 1000 --base NAME|PATH --device cpu|cuda

Each writes ``sparsity.json`` / ``drift.json`` / ``forgetting.json`` into the run directory
(connectivity: ``connectivity.json`` into the ES run's, a copy into the GRPO run's; the
aggregator turns their scalars into ``sparsity_*`` / ``drift_*`` / ``forgetting_*`` /
``connectivity_*`` columns; the page draws sparsity curves and drift by module). The trained model is the run's
``model/`` (HF save_pretrained, safetensors); the base model is the run's ``config.yaml``
``model`` (name / path), or ``--base``. Bad input (no ``model/``, a base whose tensors do not
match the trained ones) is one line ``esopt: error: ...`` and exit code 2.

Definitions (``delta = theta_trained - theta_base``, computed per entry in float32 from the
weights as loaded in the run's dtype):

* Functional sparsity (``esopt.study.analyses.sparsity``): the share of the gain kept when only the
  largest fraction of the update's entries is kept (the rest set back to the base), against
  random masks of the same size (as drawn, or rescaled to the top-k update's norm).
* Drift (``esopt.study.analyses.drift``): ``||delta|| / ||theta_base||`` per module type and layer, and
  where the largest 1% of the update's entries sit.
* Forgetting (``esopt.study.analyses.forgetting``): base against trained on tasks not trained on.
* Connectivity (``esopt.study.analyses.connectivity``): held-out Pass@1 along the line between a
  seed's ES and GRPO models (the barrier below the straight line) and the cosine of their updates.

Each module states its definitions; the base/trained pair and the exact top-k over |delta|
are ``esopt.study.analyses.delta``, the evaluation and intervals ``esopt.study.analyses.common``.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from esopt.core.config import ANALYSES
from esopt.core.errors import ConfigError
from esopt.study.analyses.common import EvalOpts, gain_share, paired_change, per_problem, run_evaluate
from esopt.study.analyses.delta import (CHUNK, Pair, Rule, TrainedWeights, apply_rule, check_match, count_nonzero,
                               delta_chunks, keep_count, kept_norm, magnitude_bits, magnitude_key, make_rules,
                               open_pair, random_key, rank_thresholds, run_plan, stream_bits, trained_dir)
from esopt.study.analyses.connectivity import INTERIOR, connectivity, partner_of, partners
from esopt.study.analyses.drift import TOP_FRACTION, compare_drift, drift, format_drift
from esopt.study.analyses.forgetting import REAL_HELDOUT_TASKS, TINY_HELDOUT_TASKS, default_tasks, forgetting, task_config
from esopt.study.analyses.module_types import MODULE_TYPES, layer_of, module_type
from esopt.study.analyses.sparsity import CONTROL_FRACTIONS, CONTROL_MODES, DEFAULT_FRACTIONS, HEADLINE_KEEP, MODES, sparsity

ERROR_CHARS = 500        # a failed analysis's error line is cut to this length
__all__ = ["REGISTRY", "Analysis", "CHUNK", "INTERIOR", "connectivity", "partner_of", "partners", "CONTROL_FRACTIONS", "CONTROL_MODES", "DEFAULT_FRACTIONS", "HEADLINE_KEEP", "MODES",
           "MODULE_TYPES", "REAL_HELDOUT_TASKS", "TINY_HELDOUT_TASKS", "TOP_FRACTION", "ConfigError", "EvalOpts",
           "Pair", "Rule", "TrainedWeights", "apply_rule", "check_match", "compare_drift", "count_nonzero",
           "default_tasks", "delta_chunks", "drift", "forgetting", "format_drift", "gain_share", "keep_count",
           "kept_norm", "layer_of", "magnitude_bits", "magnitude_key", "make_rules", "module_type", "open_pair",
           "paired_change", "per_problem", "random_key", "rank_thresholds", "run_analyses", "run_plan",
           "run_evaluate", "sparsity", "stream_bits", "task_config", "trained_dir"]


@dataclass(frozen=True)
class Analysis:
    """One analysis: ``run(run_dir, opts, eval_opts)`` writes ``<run_dir>/<name>.json``."""

    name: str
    summary: str       # one line: what it measures
    run: Callable      # (run_dir, opts: dict, eval_opts: EvalOpts) -> None


def _sparsity(run_dir, opts: dict, eo: EvalOpts) -> None:
    sparsity(run_dir, fractions=opts.get("fractions", DEFAULT_FRACTIONS), modes=opts.get("modes", MODES),
             control_fractions=opts.get("control_fractions", CONTROL_FRACTIONS),
             mask_seed=opts.get("mask_seed"), opts=eo, device=opts.get("device"))


def _drift(run_dir, opts: dict, eo: EvalOpts) -> None:
    drift(run_dir, top=float(opts.get("top", TOP_FRACTION)), device=opts.get("device", "cpu"))


def _forgetting(run_dir, opts: dict, eo: EvalOpts) -> None:
    forgetting(run_dir, tasks=opts.get("tasks"), device=opts.get("device"),
               opts=dataclasses.replace(eo, greedy=bool(opts.get("greedy", True))))


def _connectivity(run_dir, opts: dict, eo: EvalOpts) -> None:
    """In a sweep: the second of a seed's ES / GRPO pair to finish computes it (the first finds no
    partner yet: a warning); connectivity.json goes into the ES run's folder, a copy into the GRPO
    run's (so neither asks for it again)."""
    import shutil

    es, grpo = partner_of(run_dir)
    connectivity(es, grpo, device=opts.get("device"), opts=eo)
    if Path(run_dir).resolve() == grpo.resolve():
        shutil.copyfile(es / "connectivity.json", grpo / "connectivity.json")


REGISTRY: dict[str, Analysis] = {a.name: a for a in (
    Analysis("sparsity", "the share of the gain kept by the largest update entries, against random masks", _sparsity),
    Analysis("drift", "relative update norm per module type and layer; where the largest entries sit", _drift),
    Analysis("forgetting", "base against trained on tasks not trained on", _forgetting),
    Analysis("connectivity", "held-out Pass@1 between a seed's ES and GRPO models; the cosine of their updates",
             _connectivity),
)}
if set(REGISTRY) != set(ANALYSES):  # config validation's names and the registry: one set
    raise ImportError(f"analyses registry {sorted(REGISTRY)} != esopt.core.config.ANALYSES {sorted(ANALYSES)}")


def run_analyses(plan, run_dir: str | Path, names: Iterable[str], opts: dict | None = None) -> dict:
    """Run the named analyses on a finished run (sweep.run calls this after saving ``model/``).

    Evaluation sizes default to the run's own eval config (problems, samples, temperature,
    seed) on the task's ``heldout`` split; ``opts`` overrides (keys of :class:`EvalOpts` plus
    ``fractions``, ``modes``, ``control_fractions`` (a run: its ``sparsity:`` block, passed by
    ``esopt.cli.sweep.analyses``), ``mask_seed``, ``top``, ``tasks``). Returns name -> path of the written JSON, or
    name -> ``{"error": line}``; never raises for an analysis that fails (it is reported on
    stderr as a warning), except for unknown names (ConfigError).
    """
    names = list(names)
    unknown = [n for n in names if n not in ANALYSES]
    if unknown:
        raise ConfigError(f"unknown analysis {unknown[0]!r} (known: {', '.join(ANALYSES)})")
    opts = dict(opts or {})
    fields = {f.name for f in dataclasses.fields(EvalOpts)}
    eo = EvalOpts(**{"problems": plan.eval.problems, "samples": plan.eval.samples, "greedy": False,
                     **{k: v for k, v in opts.items() if k in fields}})
    out: dict = {}
    for name in names:
        try:
            REGISTRY[name].run(run_dir, opts, eo)
            out[name] = str(Path(run_dir) / f"{name}.json")
        except Exception as e:  # noqa: BLE001 - an analysis never fails the run
            line = f"{type(e).__name__}: {e}".splitlines()[0][:ERROR_CHARS]
            print(f"esopt: warning: analysis {name} failed for {run_dir}: {line}", file=sys.stderr)
            out[name] = {"error": line}
    return out
