"""The graphical approach to multiple testing: Bretz, Maurer, Brannath and Posch (2009), "A
graphical approach to sequentially rejective multiple test procedures", Statistics in Medicine
28:586-604 (their Algorithm 1 and its adjusted p-values). No maintained Python package carries it
(R's gMCP and graphicalMCP do), so it is here, in full.

A graph over hypotheses H_i: initial weights w_i >= 0 with sum_i w_i <= 1, and transition weights
g_ij >= 0 (g_ii = 0, sum_j g_ij <= 1): the share of H_i's weight that goes to H_j once H_i is
rejected. At family-wise error alpha (strong control, any dependence: every intersection is
tested by a weighted Bonferroni test, and the procedure is the closed test's shortcut):

    1. pick j with p_j <= w_j alpha (the smallest p_j / w_j); if none, stop;
    2. reject H_j and remove it; for the remaining l, k (l != k):
           w_l  <- w_l + w_j g_jl
           g_lk <- (g_lk + g_lj g_jk) / (1 - g_lj g_jl)     (0 where g_lj g_jl = 1)
    3. repeat.

Adjusted p-values (Bretz et al. 2009, section 4): in the order the hypotheses would be rejected
at alpha = 1, p~_j = max(p~ of those before, min(1, p_j / w_j)); H_j is rejected at alpha iff
p~_j <= alpha. A hypothesis that never gets weight has p~ = 1.

A graph is a mapping {"weights": {name: w}, "edges": {name: {name: g}}}; ``check`` says what is
wrong with one (weights summing above 1, an edge to an unknown hypothesis, ...).
"""

from __future__ import annotations

from typing import Mapping

EPS = 1e-12


def check(graph: Mapping, known=None) -> list[str]:
    """What is wrong with ``graph`` (empty: nothing), each a phrase: a negative or non-numeric
    weight, weights summing above 1, an edge from or to a hypothesis without a weight (or not in
    ``known``), a self loop, a negative transition, or a node's transitions summing above 1."""
    bad = []
    w, edges = graph.get("weights"), graph.get("edges") or {}
    if not isinstance(w, Mapping) or not w:
        return ["no weights"]
    names = set(w) if known is None else set(known)
    for h, x in w.items():
        if h not in names:
            bad.append(f"weight for unknown hypothesis {h}")
        if not isinstance(x, (int, float)) or x < 0:
            bad.append(f"weight of {h} is {x!r} (needs a number >= 0)")
    total = sum(float(x) for x in w.values() if isinstance(x, (int, float)))
    if total > 1 + EPS:
        bad.append(f"the weights sum to {total:.6g} > 1")
    for h, out in edges.items():
        if h not in w:
            bad.append(f"edge from unknown hypothesis {h}")
        for k, g in (out or {}).items():
            if k not in w:
                bad.append(f"edge {h} -> {k}: unknown hypothesis {k}")
            elif k == h:
                bad.append(f"self loop at {h}")
            if not isinstance(g, (int, float)) or g < 0:
                bad.append(f"edge {h} -> {k} has weight {g!r} (needs a number >= 0)")
        row = sum(float(g) for g in (out or {}).values() if isinstance(g, (int, float)))
        if row > 1 + EPS:
            bad.append(f"the edges from {h} sum to {row:.6g} > 1")
    return bad


def _copy(graph: Mapping) -> tuple[dict, dict]:
    w = {h: float(x) for h, x in graph["weights"].items()}
    g = {h: {k: float((graph.get("edges") or {}).get(h, {}).get(k, 0.0)) for k in w if k != h} for h in w}
    return w, g


def _remove(w: dict, g: dict, j) -> None:
    """Step 2 of the algorithm: reject H_j, pass its weight on, reroute the edges through it."""
    wj, gj = w.pop(j), g.pop(j)
    for l in w:
        w[l] += wj * gj.get(l, 0.0)
    new = {}
    for l in w:
        glj = g[l].get(j, 0.0)
        row = {}
        for k in w:
            if k == l:
                continue
            den = 1.0 - glj * gj.get(l, 0.0)
            row[k] = (g[l].get(k, 0.0) + glj * gj.get(k, 0.0)) / den if den > EPS else 0.0
        new[l] = row
    g.clear()
    g.update(new)


def weights_after(graph: Mapping, rejected) -> dict:
    """The weights of the hypotheses left once those in ``rejected`` are (in that order)."""
    w, g = _copy(graph)
    for j in rejected:
        if j in w:
            _remove(w, g, j)
    return w


def adjusted(pvalues: Mapping, graph: Mapping) -> dict:
    """Adjusted p-value of every hypothesis of ``graph`` (``pvalues``: name -> p; a missing or
    None p is 1): reject H_j at alpha iff its adjusted p <= alpha (see the module docstring)."""
    w, g = _copy(graph)
    p = {h: 1.0 if pvalues.get(h) is None else float(pvalues[h]) for h in w}
    out, running = {}, 0.0
    while w:
        ratio = {h: (p[h] / w[h] if w[h] > EPS else float("inf")) for h in w}
        j = min(ratio, key=lambda h: (ratio[h], str(h)))
        running = max(running, min(1.0, ratio[j]))
        out[j] = running
        _remove(w, g, j)
    return out


def reject(pvalues: Mapping, graph: Mapping, alpha: float) -> dict:
    """name -> (rejected at family-wise ``alpha``, adjusted p)."""
    return {h: (q <= alpha, q) for h, q in adjusted(pvalues, graph).items()}
