"""The looks ledger: the data verdicts were computed on, remembered per data, not per sweep folder.

A verdict is confirmatory only on data no other look has read. The data a look reads are its
runs' (task, split, test draw, seed): the test problems (the task, its problem source where it
has one, the split evaluated, countdown's ``task.test_draw``) and the training seeds, whatever
folder the sweep lives in. The same seeds of the same split read again, by another sweep or
under another registration, are a second look at them (seeds 0-7 of paper_cpu's standard split
tuned the simulator's components and the rules: a verdict on them is not a first look). Each
sweep's claims.json remembers its own looks (``judge_look``); this ledger remembers them across
sweeps. One JSON-lines file per user, outside any sweep:

    $ESOPT_LOOKS, else $XDG_STATE_HOME/esopt/looks.jsonl, else ~/.local/state/esopt/looks.jsonl

(point ``ESOPT_LOOKS`` at a shared file to pool a team's looks), one line per look:
{"at", "look", "sweep", "keys": [sha256 of each datum's canonical JSON], "data": a readable summary}.

A look's name (``look_id``): the registration in force (its design's and graph's hashes and its
time), so recomputing the verdicts of one registered sweep, wherever it is copied, is the same
look; a sweep without a registration: ``unregistered:<hash of its run ids>``.

    data_of(records) -> {key: datum}           per completed run with a task
    data_of_configs(runs) -> {key: datum}      per registered run (the sweeper's warning)
    look_id(registration, records) -> str
    earlier(keys, look) -> [entries]           other looks that read any of these data
    remember(keys, look, sweep, data) -> None  appends this look (once per look and data)
    summary(data) -> str                       "countdown test split, draw 0, seeds 0-7"
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Iterable, Mapping

from esopt.study.claims.stored import current_design

ENV = "ESOPT_LOOKS"


def path() -> Path:
    """The ledger's file: ``$ESOPT_LOOKS``, else ``$XDG_STATE_HOME/esopt/looks.jsonl``, else
    ``~/.local/state/esopt/looks.jsonl``."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    return Path(os.environ.get("XDG_STATE_HOME") or "~/.local/state").expanduser() / "esopt" / "looks.jsonl"


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def datum(r: Mapping) -> dict | None:
    """A run's data identity: {"task", "source", "split", "test_draw", "seed"}; None without a
    task or a seed, or for a run whose summary.json was not read (``attach_details`` sets its
    ``eval_split``: its test draw is unknown). A missing test draw is the standard split (0)."""
    task, seed = r.get("task"), r.get("seed")
    if not task or seed is None or (isinstance(seed, float) and seed != seed) or r.get("eval_split") is None:
        return None
    return {"task": str(task), "source": r.get("task_source") or None, "split": str(r.get("eval_split") or "test"),
            "test_draw": int(r.get("test_draw") or 0), "seed": int(seed)}


def data_of(records: Iterable[Mapping]) -> dict:
    """{key: datum} of the completed runs among ``records`` (``datum``)."""
    out = {}
    for r in records:
        if r.get("status", "completed") != "completed":
            continue
        d = datum(r)
        if d is not None:
            out[_hash(d)] = d
    return out


def data_of_configs(runs: Iterable) -> dict:
    """{key: datum} of a design's runs, (run id, RunPlan) pairs as ``register`` takes them: the
    data their records will carry (``datum``)."""
    out = {}
    for _, rc in runs:
        task = dict(rc.task or {})
        d = datum({"task": task.get("name"), "task_source": task.get("source"), "eval_split": rc.eval.split,
                   "test_draw": task.get("test_draw"), "seed": rc.seed})
        if d is not None:
            out[_hash(d)] = d
    return out


def look_id(registration: Mapping | None, records: Iterable[Mapping]) -> str:
    """This look's name: its registration's (design and graph hashes, time), else
    ``unregistered:`` and its completed runs' hash."""
    if registration:
        return "registered:" + _hash({"design": current_design(registration), "graph": registration.get("graph"),
                                      "at": registration.get("at")})[:16]
    runs = sorted(str(r.get("run_id")) for r in records if r.get("status", "completed") == "completed")
    return "unregistered:" + _hash(runs)[:16]


def _entries() -> list[dict]:
    p = path()
    try:
        text = p.read_text()
    except OSError:       # none yet (or unreadable: then nothing is known, and nothing is claimed)
        return []
    out = []
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except ValueError:  # a torn last line of a concurrent writer: the others still count
            continue
        if isinstance(e, dict) and isinstance(e.get("keys"), list):
            out.append(e)
    return out


def earlier(keys: Iterable[str], look: str) -> list[dict]:
    """The ledger's entries of other looks that read any of ``keys`` (oldest first), each with
    "shared": how many of them."""
    want = set(keys)
    out = []
    for e in _entries():
        if e.get("look") == look:
            continue
        shared = want & set(e["keys"])
        if shared:
            out.append({**{k: e.get(k) for k in ("at", "look", "sweep", "data")}, "shared": len(shared)})
    return out


def remember(keys: Iterable[str], look: str, sweep: str | None, data: Mapping) -> None:
    """Append this look at ``keys`` to the ledger, unless it is there already with all of them
    (the same look recomputed); one line, appended (O_APPEND: concurrent looks do not tear each
    other's lines)."""
    keys = sorted(set(keys))
    if not keys:
        return
    have = set()
    for e in _entries():
        if e.get("look") == look:
            have |= set(e["keys"])
    if set(keys) <= have:
        return
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "look": look, "sweep": sweep,
                       "keys": keys, "data": summary(data.values())}) + "\n"
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def summary(data: Iterable[Mapping]) -> str:
    """The data in words, per (task, source, split, draw): "countdown test split, draw 0, seeds 0-7"."""
    groups: dict = {}
    for d in data:
        groups.setdefault((d["task"], d.get("source"), d["split"], d["test_draw"]), set()).add(d["seed"])
    return "; ".join(f"{task}{f' ({src})' if src else ''} {split} split, draw {draw}, seeds {_ranges(seeds)}"
                     for (task, src, split, draw), seeds in sorted(groups.items(), key=str))


def _ranges(xs) -> str:
    xs = sorted(xs)
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}-{x}" if x != start else f"{x}")
            start = None
    return ", ".join(out)
