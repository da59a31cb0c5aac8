"""Plot plumbing shared by the page's figures: Plotly traces and layouts as plain dicts, menus
that switch between groups of traces (one per model), bands, facets, and each algorithm's
colour and order (from its registry entry, ``esopt.algorithms``)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from esopt.algorithms import ALGORITHMS

BASE = "base"               # the base model's series: not an algorithm, drawn like algo=none, first
UNKNOWN_COLOR = "#333333"   # an algorithm without a registry entry
UNKNOWN_ORDER = 99          # ... and its place: after every registered one
BAND_ALPHA = 0.18           # opacity of a confidence band's fill
MENU_Y = 1.18               # height of the dropdown menu above the plot (paper coordinates)
LAYOUT = dict(margin=dict(l=60, r=30, t=70, b=50), plot_bgcolor="#fafafa",
              xaxis=dict(gridcolor="#e5e5e5"), yaxis=dict(gridcolor="#e5e5e5"))


def algo_color(algo) -> str:
    """The algorithm's colour on the page (its registry entry's ``color``; base = the colour of
    the entry that trains nothing, which evaluates the base model)."""
    entry = (next((a for a in ALGORITHMS.values() if not a.trains), None) if algo == BASE
             else ALGORITHMS.get(algo))
    return entry.color if entry is not None else UNKNOWN_COLOR


def algo_key(algo) -> tuple:
    """Sort key: the base model first, then the registry's ``order``, unknown names last."""
    entry = ALGORITHMS.get(algo)
    return (-1 if algo == BASE else entry.order if entry is not None else UNKNOWN_ORDER, str(algo))


def reads(algo, key: str) -> bool:
    """Whether runs of ``algo`` read config key ``key`` (``Algorithm.uses``; unknown: no)."""
    entry = ALGORITHMS.get(algo)
    return entry is not None and entry.uses(key)


def trace_dict(kind: str, **kw) -> dict:
    """A Plotly trace as a plain dict (graph_objects validation costs ~3 ms per trace)."""
    return {"type": kind, **kw}


def layout_dict(title: str, **kw) -> dict:
    """Layout dict: LAYOUT + kw; ``xaxis_title="t"`` style keys and string titles expanded."""
    out = json.loads(json.dumps(LAYOUT))
    out["title"] = {"text": title}
    for k, v in kw.items():
        axis, _, attr = k.partition("_")
        if axis in ("xaxis", "yaxis") and attr:
            out[axis][attr] = {"text": v} if attr == "title" else v
        elif k in ("xaxis", "yaxis"):
            out[k].update({a: ({"text": x} if a == "title" and isinstance(x, str) else x) for a, x in v.items()})
        else:
            out[k] = v
    return out


def figure_dict(traces) -> dict:
    return {"data": traces if isinstance(traces, list) else [traces], "layout": {}}


# ---------------------------------------------------------------------------------------
# helpers
def run_label(row) -> str:
    parts = [str(row.get("model")), str(row.get("algo"))]
    if reads(row.get("algo"), "pop") and pd.notna(row.get("pop")):
        parts.append(f"N={int(row['pop'])}")
    if pd.notna(row.get("seed")):
        parts.append(f"s{int(row['seed'])}")
    return " ".join(parts)


def facet_name(model, task, multi_task: bool) -> str:
    return f"{model} · {task}" if multi_task else str(model)


def facet_order(facets, runs: pd.DataFrame) -> list[str]:
    """Facets ordered by model size, then name."""
    size = runs.groupby("model")["params"].median()
    return sorted(facets, key=lambda f: (np.nan_to_num(size.get(f.split(" · ")[0], np.nan), nan=np.inf), f))


def dropdown(labels: list[str], n_traces_each: list[int], y: float = MENU_Y) -> dict:
    """An updatemenu showing only the traces of one label (traces are grouped in order)."""
    buttons, start, total = [], 0, sum(n_traces_each)
    for lab, n in zip(labels, n_traces_each):
        vis = [False] * total
        vis[start:start + n] = [True] * n
        buttons.append(dict(label=lab, method="update", args=[{"visible": vis}]))
        start += n
    return dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=y, yanchor="top")


def menu_figure(traces: list[dict], labels: list[str], counts: list[int], *, always_menu: bool = False,
                 **layout) -> dict:
    """A figure whose traces come in groups (one per label), the first group shown and a
    dropdown to switch (shown when there is more than one group, or always)."""
    for t in traces[counts[0]:]:
        t["visible"] = False
    fig = figure_dict(traces)
    menu = [dropdown(labels, counts)] if always_menu or len(labels) > 1 else []
    fig["layout"] = layout_dict(updatemenus=menu, **layout)
    return fig


def band_trace(x, lo, hi, color, name, meta) -> dict:
    x = list(x)
    return trace_dict("scatter", x=x + x[::-1], y=list(hi) + list(lo)[::-1], fill="toself", mode="lines",
                      line=dict(width=0), fillcolor=rgba(color, BAND_ALPHA), hoverinfo="skip",
                      showlegend=False, name=name, meta=meta, legendgroup=name)


def rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def facet_groups(groups: dict, runs: pd.DataFrame) -> dict[str, list]:
    """facet -> [(algo, group)] in the algorithms' order, from best_groups' (model, task, algo)."""
    multi_task = runs["task"].nunique() > 1
    facets: dict[str, list] = {}
    for (model, task, algo), g in groups.items():
        facets.setdefault(facet_name(model, task, multi_task), []).append((algo, g))
    return {f: sorted(entries, key=lambda e: algo_key(e[0])) for f, entries in facets.items()}


def close_group(traces: list, n0: int, facet: str, labels: list, counts: list) -> None:
    """End one facet's group of traces (``traces[n0:]``): its menu label and trace count."""
    if len(traces) > n0:
        labels.append(facet)
        counts.append(len(traces) - n0)


def fmt_params(p: float) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if p >= div:
            return f"{p / div:.3g}{unit}"
    return f"{p:.3g}"
