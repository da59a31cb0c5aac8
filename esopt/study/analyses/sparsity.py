"""Functional sparsity of a run's update: how much of its gain the largest entries keep.

For a keep fraction f, ``k = round(f * nnz)`` of the ``nnz`` nonzero
entries of delta are kept and the rest set back to the base value: the evaluated weights are
``where(keep, theta_trained, theta_base)`` (no arithmetic, so f = 1 is the trained model and
f = 0 the base, bit for bit). Modes: ``global`` (the k largest |delta| over the whole model),
``per_tensor`` (``round(f * nnz_t)`` largest within each tensor), ``smallest`` (control: the k
smallest nonzero |delta| over the whole model). Ties at the threshold are kept in tensor
order, then flat index, so exactly k entries are kept.

Controls at equal size (evaluated at ``control_fractions``, by default only the headline keep
0.22: each point is one full evaluation):

* ``random``: a uniformly random k-subset of the nonzero entries, ``where(R_k, theta_trained,
  theta_base)``. Every nonzero entry gets a seeded 30-bit draw (``esopt.study.analyses.delta.random_key``:
  PCG64 seeded by (mask_seed, tensor name, chunk start), so the same seed gives the same mask bit
  for bit, streamed tensor by tensor) and the k largest draws are kept, by the same exact
  histogram top-k as the |delta| modes (exactly k; draws tied at the threshold kept in stream
  order). ``mask_seed`` defaults to the run's seed and is recorded in sparsity.json.
* ``equal_norm``: the same random mask at equal update norm, ``theta_base + c * R_k * delta``
  with ``c = ||T_k * delta|| / ||R_k * delta||`` (T_k the global top-k mask), so the kept update
  has the top-k update's L2 norm (for a Gaussian update the largest 22% of entries carry ~68% of
  its squared norm, so c is about 1.8). Unlike the other modes this does arithmetic: the kept
  entries are computed in float32 and rounded to the run's dtype. At k = nnz (c = 1) and k = 0
  no arithmetic is done: f = 1 is the trained model and f = 0 the base, bit for bit.

Share of gain kept:
``share = (S_pruned - S_base) / (S_trained - S_base)`` for S = Pass@1 and Pass@K (K =
samples), with a 95% paired percentile bootstrap over problems (the same resampled problems
for the three models; replicates with zero gain are dropped; None when the gain is 0).

    python -m esopt.analyze sparsity <run-dir> [--fractions ...] [--modes ...] [--control-fractions 0.22]
                                     [--mask-seed S]                          (writes sparsity.json)

Inside a run (``analysis=[sparsity]``) the points are the run config's ``sparsity:`` block
(``esopt.core.config.SparsityConfig``, where the defaults below are stated), e.g.
``sparsity.fractions=[0.22] sparsity.modes=[global,random]``: 4 evaluations instead of 22.
"""

from __future__ import annotations

import numbers
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from esopt.core.config import HEADLINE_KEEP, SparsityConfig
from esopt.core.errors import ConfigError
from esopt.study.analyses.common import (EvalOpts, analysis_engine, analysis_task, checked, gain_share, per_problem,
                                         result_header, run_evaluate, scores, write_result)
from esopt.study.analyses.delta import (Rule, apply_rule, count_nonzero, kept_norm, load_model, make_rules, open_pair,
                               params, random_key, stream_bits)

# the defaults, stated once with the run config's sparsity: block (analysis=[sparsity])
DEFAULT_FRACTIONS = SparsityConfig.fractions
MODES = SparsityConfig.modes            # every mode, in the order they are evaluated and written
CONTROL_MODES = SparsityConfig.control_modes  # random masks of the top-k's size, at control_fractions
CONTROL_FRACTIONS = SparsityConfig.control_fractions
assert set(CONTROL_MODES) <= set(MODES)


def sparsity(run_dir: str | Path, *, fractions: Sequence[float] = DEFAULT_FRACTIONS,
             modes: Sequence[str] = MODES, control_fractions: Sequence[float] = CONTROL_FRACTIONS,
             mask_seed: int | None = None, base: str | None = None, device: str | None = None,
             opts: EvalOpts | None = None, write: bool = True, log: Callable[[str], None] | None = None) -> dict:
    """Evaluate where(mask, trained, base) for each keep fraction and mode (the control modes at
    ``control_fractions``, with the random mask drawn from ``mask_seed``, default the run's seed);
    write ``sparsity.json``. See the module docstring for the definitions."""
    t0 = time.time()
    fractions = [float(f) for f in fractions]
    control_fractions = [float(f) for f in control_fractions]
    if not fractions or any(not 0.0 <= f <= 1.0 for f in fractions):
        raise ConfigError(f"--fractions must be in [0, 1], got {fractions}")
    if any(not 0.0 <= f <= 1.0 for f in control_fractions):
        raise ConfigError(f"--control-fractions must be in [0, 1], got {control_fractions}")
    if mask_seed is not None and (not isinstance(mask_seed, numbers.Integral) or isinstance(mask_seed, bool)
                                  or mask_seed < 0):
        raise ConfigError(f"--mask-seed must be an integer >= 0, got {mask_seed}")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ConfigError(f"unknown sparsity mode(s) {bad or modes} (known: {', '.join(MODES)})")
    opts, log = checked(opts, log, EvalOpts())
    pair = open_pair(run_dir, base, device)
    plan = pair.plan
    o = opts.resolved(plan)
    k = o.samples
    work, tok = load_model(plan, plan.model["name"], str(pair.trained.path), pair.device)
    work_params = dict(params(work))
    engine = analysis_engine(plan, work, tok, pair.device)
    task = analysis_task(plan, tok)

    trained_eval = run_evaluate(engine, task, o)           # the working model is the trained one now
    nnz_t = count_nonzero(pair)
    nnz = sum(nnz_t.values())
    n_params = sum(p.numel() for _, p in pair.base_params)

    seed = int(plan.seed if mask_seed is None else mask_seed)
    rules = mode_rules(pair, modes, fractions, nnz_t, control_fractions, seed)
    base_eval = None
    curves = []
    for mode in [m for m in MODES if m in modes]:
        for f in (control_fractions if mode in CONTROL_MODES else fractions):
            kept, extra = apply_mode(pair, work_params, rules, mode, f, seed, nnz)
            ev = run_evaluate(engine, task, o)
            log(f"sparsity {mode:<10} keep {f:<5g} ({kept} of {nnz} entries): pass@1 {ev['pass@k']['1']:.4f}")
            curves.append({"mode": mode, "keep": f, "kept": kept, **extra, **scores(ev, k),
                           "correct_counts": ev["correct_counts"], "greedy_correct": ev.get("greedy_correct")})
            if base_eval is None and kept == 0:
                base_eval = ev
    if base_eval is None:                                  # evaluate the base itself
        apply_rule(pair, work_params, lambda name: Rule(True, None, 0, 0))
        base_eval = run_evaluate(engine, task, o)

    b_c, t_c = base_eval["correct_counts"], trained_eval["correct_counts"]
    add_shares(curves, b_c, t_c, trained_eval["pass@k"]["1"], k, o)
    base_s, trained_s = scores(base_eval, k), scores(trained_eval, k)
    result = {
        **result_header("sparsity", plan, pair.run_dir, pair.base_name, pair.base_path),
        "trained_path": str(pair.trained.path), "split": o.split, "n_problems": trained_eval["n_problems"],
        "samples": o.samples, "k": k, "temperature": o.temperature, "eval_seed": o.seed,
        "n_params": int(n_params), "nnz": int(nnz), "changed_frac": nnz / max(n_params, 1),
        "fractions": fractions, "modes": [m for m in MODES if m in modes],
        "control_fractions": control_fractions, "mask_seed": seed,
        "base_score": base_s, "trained_score": trained_s,
        "gain": {m: trained_s[m] - base_s[m] for m in base_s},
        "headline": _headline(curves),
        "curves": curves,
        "base_counts": b_c, "trained_counts": t_c,
        "wall_s": round(time.time() - t0, 3),
    }
    return write_result(pair.run_dir, "sparsity", result, write)


def apply_mode(pair, work_params: dict, rules: dict, mode: str, f: float, seed: int, nnz: int) -> tuple[int, dict]:
    """Set the working model to ``mode``'s model at keep fraction ``f`` (``rules`` from
    :func:`mode_rules`). Returns (entries kept, the curve's mask fields: ``threshold`` (the k-th
    |delta|, |delta| modes), or ``mask_seed``, ``topk_norm``, ``random_norm`` and ``scale`` (the
    controls; ``scale`` = c of equal_norm, 1 for random))."""
    if mode == "per_tensor":
        fresh = {name: r[f].copy() for name, r in rules[mode][f].items()}
        return apply_rule(pair, work_params, lambda name: fresh[name]), {"threshold": None}
    if mode in CONTROL_MODES:
        key = random_key(seed)
        c, norms = control_scale(pair, rules["random"][f], rules["global"][f], key, nnz)
        scale = c if mode == "equal_norm" else 1.0
        kept = apply_rule(pair, work_params, _one(rules["random"][f].copy()), key, scale)
        return kept, {"threshold": None, "mask_seed": seed, **norms, "scale": scale}
    one = rules[mode][f].copy()
    threshold = None if one.thr is None else float(np.array([one.thr], dtype=np.int32).view(np.float32)[0])
    return apply_rule(pair, work_params, _one(one)), {"threshold": threshold}


def _one(rule: Rule) -> Callable[[str], Rule]:
    return lambda name: rule


def control_scale(pair, random_rule: Rule, top_rule: Rule, key, nnz: int) -> tuple[float, dict]:
    """The equal-norm factor ``c = ||T_k delta|| / ||R_k delta||`` (1 exactly at k = 0 and
    k = nnz, where the two masks are the same set) and both norms."""
    top = kept_norm(pair, _one(top_rule.copy()))
    rnd = kept_norm(pair, _one(random_rule.copy()), key)
    c = 1.0 if random_rule.k in (0, nnz) or rnd == 0 else top / rnd
    return c, {"topk_norm": top, "random_norm": rnd}


def mode_rules(pair, modes: Sequence[str], fractions: Sequence[float], nnz_t: dict[str, int],
               control_fractions: Sequence[float] = (), seed: int = 0) -> dict:
    """mode -> fraction -> the exact keep :class:`Rule` (``per_tensor``: a rule per tensor;
    ``random``: over the seeded random keys, at ``control_fractions``; ``global`` also at those
    when a control needs the top-k norm)."""
    nnz = sum(nnz_t.values())
    controls = [c for c in CONTROL_MODES if c in modes]

    def whole():
        return (bits for _, bits in stream_bits(pair))

    rules: dict[str, dict] = {}
    glob = [*(fractions if "global" in modes else []), *(control_fractions if controls else [])]
    if glob:
        rules["global"] = make_rules(whole, nnz, sorted(set(glob)), largest=True)
    if controls:
        key = random_key(seed)
        rules["random"] = make_rules(lambda: (b for _, b in stream_bits(pair, key=key)), nnz, control_fractions,
                                     largest=True)
    if "smallest" in modes:
        rules["smallest"] = make_rules(whole, nnz, fractions, largest=False)
    if "per_tensor" in modes:
        per: dict[str, dict[float, Rule]] = {}
        for name, _ in pair.base_params:
            per[name] = make_rules(lambda name=name: (b for _, b in stream_bits(pair, [name])),
                                   nnz_t[name], fractions, largest=True)
        rules["per_tensor"] = {f: per for f in fractions}
    return rules


def add_shares(curves: list[dict], base_counts, trained_counts, trained_pass1: float, k: int, o: EvalOpts) -> None:
    """Each curve point's share of the gain kept (Pass@1 and Pass@K, with intervals,
    :func:`esopt.study.analyses.common.gain_share`) and its Pass@1 against the trained model."""
    for c in curves:
        for metric, kk in (("pass@1", 1), ("pass@K", k)):
            share, ci = gain_share(per_problem(base_counts, k, kk), per_problem(trained_counts, k, kk),
                                   per_problem(c["correct_counts"], k, kk), n_boot=o.bootstrap, seed=o.seed)
            c[f"share_{metric}"], c[f"share_{metric}_ci"] = share, ci
        c["delta_pass@1"] = c["pass@1"] - trained_pass1


def _headline(curves: list[dict]) -> dict:
    """The global-mode point nearest keep 0.22 (the study's 78% zeroed), with its controls
    (smallest, random, equal_norm) at the same keep."""
    glob = [c for c in curves if c["mode"] == "global"] or curves
    if not glob:
        return {}
    best = min(glob, key=lambda c: abs(c["keep"] - HEADLINE_KEEP))
    out = {"mode": best["mode"], "keep": best["keep"]}
    for key in ("pass@1", "pass@K", "delta_pass@1", "share_pass@1", "share_pass@1_ci", "share_pass@K",
                "share_pass@K_ci"):
        out[key] = best.get(key)
    for mode in ("smallest", *CONTROL_MODES):
        ctrl = [c for c in curves if c["mode"] == mode and c["keep"] == best["keep"]]
        if ctrl:
            out[f"{mode}_share_pass@1"] = ctrl[0]["share_pass@1"]
            out[f"{mode}_share_pass@1_ci"] = ctrl[0]["share_pass@1_ci"]
    return out
