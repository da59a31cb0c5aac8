"""Drift of a run's update by module type and layer, and where its largest entries sit.

Drift. ``||delta|| / ||theta_base||`` overall and per module type (embeddings, attn_q/k/v/o,
mlp, norm, lm_head, other); a tied LM head is one tensor with the embeddings (reported as
``tied_embeddings: true`` and counted under embeddings). Squared norms add up over types.
Where the largest ``top`` fraction (default 1%) of the nonzero |delta| sit: counts per type
and per layer, share and enrichment (= share / the type's share of parameters).

The update's size and density, for any trained run (ES, GRPO, a sequence; claim 9):
``update_l2 = ||delta||_2`` (float64 sum of squares of the float32 delta) and
``update_top_share = ||T_k delta||^2 / ||delta||^2``, T_k the exact global top-k mask over |delta|
at ``k = round(0.22 nnz)`` (claim 5's keep fraction, config.HEADLINE_KEEP; the same mask the
sparsity analysis keeps): a dense update spreads its squared norm, a sparse one concentrates it
(a Gaussian update: ~0.68). The runs table carries both as ``update_l2`` / ``update_top_share``.

    python -m esopt.analyze drift <run-dir> [<run-dir> ...] [--top 0.01]   (writes drift.json)
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from esopt.algorithms import kind
from esopt.core.errors import ConfigError
from esopt.core.config import HEADLINE_KEEP
from esopt.study.analyses.common import result_header, write_result
from esopt.study.analyses.delta import (delta_chunks, keep_count, kept_norm, make_rules, open_pair, stream_bits,
                                        tied_embeddings, trained_tensor)
from esopt.study.analyses.module_types import MODULE_TYPES, layer_of, module_type

TOP_FRACTION = 0.01      # the default share of the largest nonzero |delta| entries located
DENSE_KEEP = HEADLINE_KEEP   # update_top_share's keep fraction: claim 5's (config.HEADLINE_KEEP)


def drift(run_dir: str | Path, *, top: float = TOP_FRACTION, base: str | None = None, device: str | None = "cpu",
          write: bool = True) -> dict:
    """Relative L2 drift overall / per module type / per layer and where the top updates sit;
    write ``drift.json``. Only the base model is loaded; trained tensors stream from disk."""
    t0 = time.time()
    if not 0.0 < top <= 1.0:
        raise ConfigError(f"--top must be in (0, 1], got {top}")
    pair = open_pair(run_dir, base, device)
    plan = pair.plan
    tied = tied_embeddings(pair.base_model)
    acc = {}                       # name -> [n, delta_sq, base_sq, nnz]
    for name, b in pair.base_params:
        t = trained_tensor(pair, name, b)
        a = acc[name] = [b.numel(), 0.0, float(b.detach().double().pow(2).sum()), 0]
        for _, _, d in delta_chunks(b, t, name):
            a[1] += float(d.double().pow(2).sum())
            a[3] += int((d != 0).sum())
    nnz = sum(a[3] for a in acc.values())
    k = keep_count(top, nnz) if nnz else 0
    top_count = {name: 0 for name in acc}
    threshold = None
    rules = make_rules(lambda: (bits for _, bits in stream_bits(pair)), nnz, sorted({top, DENSE_KEEP}),
                       largest=True) if nnz else {}
    d_sq = sum(a[1] for a in acc.values())
    top_share = kept_norm(pair, lambda name, r=rules[DENSE_KEEP].copy(): r) ** 2 / d_sq if nnz and d_sq > 0 else None
    if k > 0:
        rule = rules[top]
        threshold = float(np.array([rule.thr], dtype=np.int32).view(np.float32)[0])
        for name, bits in stream_bits(pair):
            top_count[name] += int(rule.mask(bits).sum())

    n_all = sum(a[0] for a in acc.values())
    d_all = sum(a[1] for a in acc.values())
    b_all = sum(a[2] for a in acc.values())

    def summarise(groups: dict[str, list[str]]) -> dict:
        out = {}
        for key, names in groups.items():
            n = sum(acc[x][0] for x in names)
            dsq, bsq = sum(acc[x][1] for x in names), sum(acc[x][2] for x in names)
            tc = sum(top_count[x] for x in names)
            out[key] = {
                "n": n, "delta_sq": dsq, "base_sq": bsq,
                "relative": math.sqrt(dsq / bsq) if bsq > 0 else None,
                "share_sq": dsq / d_all if d_all > 0 else None,
                "contrib": dsq / b_all if b_all > 0 else None,
                "top": tc, "top_share": tc / k if k else None,
                "top_enrichment": (tc / k) / (n / n_all) if k and n else None,
            }
        return out

    by_type: dict[str, list[str]] = {}
    by_layer: dict[str, list[str]] = {}
    by_cell: dict[str, list[str]] = {}
    for name in acc:
        by_type.setdefault(module_type(name), []).append(name)
        by_layer.setdefault(layer_of(name), []).append(name)
        by_cell.setdefault(f"{layer_of(name)}|{module_type(name)}", []).append(name)
    modules = summarise({t: by_type[t] for t in MODULE_TYPES if t in by_type})
    layers = summarise(dict(sorted(by_layer.items(), key=lambda kv: (kv[0] == "none", int(kv[0]) if kv[0].isdigit() else 0))))
    cells = summarise(by_cell)
    result = {
        **result_header("drift", plan, pair.run_dir, pair.base_name, pair.base_path),
        "tied_embeddings": tied,
        "note": "lm_head is tied to the input embeddings: counted under embeddings" if tied else None,
        "n_params": n_all, "nnz": nnz, "changed_frac": nnz / max(n_all, 1),
        "delta_norm": math.sqrt(d_all), "base_norm": math.sqrt(b_all),
        "update_l2": math.sqrt(d_all), "update_top_share": top_share, "update_top_keep": DENSE_KEEP,
        "relative": math.sqrt(d_all / b_all) if b_all > 0 else None,
        "delta_sq": d_all, "base_sq": b_all,
        "top_fraction": top, "top_k": k, "top_threshold": threshold,
        "top_module": max(modules, key=lambda t: modules[t]["top"]) if k else None,
        "modules": modules,
        "layers": [{"layer": key, **v} for key, v in layers.items()],
        "cells": [{"layer": key.split("|")[0], "module": key.split("|")[1], **v} for key, v in cells.items()],
        "tensors": [{"name": name, "module": module_type(name), "layer": layer_of(name), "n": a[0],
                     "delta_sq": a[1], "base_sq": a[2], "nnz": a[3], "top": top_count[name]}
                    for name, a in acc.items()],
        "wall_s": round(time.time() - t0, 3),
    }
    return write_result(pair.run_dir, "drift", result, write)


def compare_drift(results: Sequence[dict]) -> dict:
    """Runs side by side: relative drift overall and per module type, ratio to the first run."""
    labels, seen = [], {}
    for r in results:
        lab = r.get("algo") or "run"
        seen[lab] = seen.get(lab, 0) + 1
        labels.append(lab if seen[lab] == 1 else f"{lab}#{seen[lab]}")
    types = [t for t in MODULE_TYPES if any(t in r["modules"] for r in results)]
    out = {"runs": [{"label": lab, "run_dir": r["run_dir"], "relative": r["relative"],
                     "top_module": r["top_module"]} for lab, r in zip(labels, results)],
           "modules": {t: {lab: (r["modules"].get(t) or {}).get("relative") for lab, r in zip(labels, results)}
                       for t in types},
           "top_share": {t: {lab: (r["modules"].get(t) or {}).get("top_share") for lab, r in zip(labels, results)}
                         for t in types},
           "top_enrichment": {t: {lab: (r["modules"].get(t) or {}).get("top_enrichment")
                                  for lab, r in zip(labels, results)} for t in types}}
    first = results[0]["relative"]
    out["ratio_to_first"] = {lab: (r["relative"] / first if first else None) for lab, r in zip(labels, results)}
    first_of = {}  # each algorithm kind's first run (registry ``kind``): es, grpo, ...
    for r in results:
        first_of.setdefault(kind(r.get("algo")), r["relative"])
    if first_of.get("es") is not None and first_of.get("grpo"):
        out["es_over_grpo"] = first_of["es"] / first_of["grpo"]  # the study: ES moves 40-44x farther
    return out


def format_drift(cmp: dict) -> str:
    labels = [r["label"] for r in cmp["runs"]]
    w = max(10, *(len(x) + 2 for x in labels))

    def f(v):
        return "-" if v is None else f"{v:.3e}"

    lines = [f"{'relative drift':<16}" + "".join(f"{x:>{w}}" for x in labels)
             + "   top-1% share (enrichment), per run"]
    lines.append(f"{'overall':<16}" + "".join(f"{f(r['relative']):>{w}}" for r in cmp["runs"]))
    for t, row in cmp["modules"].items():
        share, enr = cmp["top_share"][t], cmp["top_enrichment"][t]
        lines.append(f"{t:<16}" + "".join(f"{f(row[x]):>{w}}" for x in labels) + "   "
                     + "  ".join("-" if share[x] is None else f"{share[x]:.2f} ({enr[x]:.2f}x)" for x in labels))
    if len(labels) > 1:
        lines.append("ratio to " + labels[0] + ": " + ", ".join(f"{x} {v:.3g}" for x, v in cmp["ratio_to_first"].items()
                                                                if v is not None))
    if cmp.get("es_over_grpo") is not None:
        lines.append(f"relative drift ES / GRPO: {cmp['es_over_grpo']:.3g}")
    return "\n".join(lines)
