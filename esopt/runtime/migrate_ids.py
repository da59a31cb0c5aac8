"""Run folders recorded under the run ids of before the resolved plan, renamed to their ids now.

Until run ids hashed the resolved plan (``esopt.runtime.validate.identity``: ES's sigma and lr
filled in, a stated default and an implied one one run), a run's id hashed its config as
written (:func:`old_identity`). A sweep finds a run by its current id only, so a run recorded
under its old id is run again unless it is migrated, once::

    python -m esopt.migrate_ids RESULTS_ROOT [--dry-run]

For each ``<root>/<sweep>/runs/<id>/`` (or the runs of one sweep directory) the run's plan is
read back (``validate.recorded_plan``: its plan.json, else its config.yaml validated) with the
inputs it recorded, and its old and current ids computed. A folder named with its old id and
recorded completed or pruned (the runs a sweep keeps) is renamed to its current id (one
``rename``), then its summary.json (``run_id``; ``migrated_from``: the old id, which the
sweep's Optuna re-report reads, ``tuning.rereport``) and plan.json are rewritten atomically. A
run whose current id is already taken, one that did not end (failed, running: a sweep runs it
under its current id) and one whose plan cannot be read here are reported and left alone.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from esopt.core import store
from esopt.core.errors import ConfigError
from esopt.runtime import runplan
from esopt.runtime.runplan import RunPlan
from esopt.runtime.validate import config_id, config_identity, recorded_plan, run_id


def old_identity(plan: RunPlan) -> dict:
    """The run's identity as ids hashed it before the resolved plan: its config as written
    (sigma and lr unresolved, the blocks as given), ``validate.config_identity``."""
    return config_identity(plan.config, plan.inputs)


def old_run_id(plan: RunPlan) -> str:
    """The id the run had before ids hashed the resolved plan (:func:`old_identity`)."""
    return store.run_id(old_identity(plan))


@dataclass(frozen=True)
class Move:
    """One run folder looked at: ``action`` is ``renamed`` (or ``would rename``), ``current``
    (already under its id), ``taken``, ``not ended``, ``unrecognised`` or ``unreadable``."""

    path: Path
    action: str
    old: str = ""
    new: str = ""
    why: str = ""

    def line(self) -> str:
        if self.action in ("renamed", "would rename"):
            return f"{self.action} {self.old} -> {self.new} ({self.path.parent})"
        return f"left {self.path}: {self.why}"


def run_dirs(root: str | os.PathLike) -> list[Path]:
    """The run folders under ``root``: a results root (``<root>/<sweep>/runs/<id>``) or one
    sweep directory (``<root>/runs/<id>``); ConfigError when it holds none."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"no such directory: {root}")
    found = sorted(p for p in root.glob("runs/*") if p.is_dir()) + \
        sorted(p for p in root.glob("*/runs/*") if p.is_dir())
    if not found:
        raise ConfigError(f"{root} holds no run folders (<root>/<sweep>/runs/<id>/ or <sweep>/runs/<id>/)")
    return found


def migrate_one(path: Path, dry_run: bool = False) -> Move:
    """Look at one run folder and, when it is recorded under its old id and ended, rename it to
    its current id and rewrite its recorded ids (module docstring); ``dry_run``: say so only."""
    rd = store.RunDir(path)
    summary = rd.read_summary()
    if summary is None:
        return Move(path, "unreadable", why="no readable summary.json")
    try:
        plan = recorded_plan(path, cuda=True)  # a GPU job's run: this host need not run its engine
    except ConfigError as e:
        return Move(path, "unreadable", why=f"its plan cannot be read here ({e})")
    if isinstance(summary.get("inputs"), dict):  # the fingerprints it ran with, not today's files'
        plan = dataclasses.replace(plan, inputs=summary["inputs"])
    old, new = old_run_id(plan), run_id(plan)
    if path.name == new:
        if old != new and summary.get("run_id") == old:  # renamed, then stopped before the records were rewritten
            if not dry_run:
                _rewrite(rd, plan, summary, old, new)
            return Move(path, "would rename" if dry_run else "renamed", old, new)
        return Move(path, "current", old, new, why=f"recorded under its current id {new}")
    if path.name != old:
        return Move(path, "unrecognised", old, new,
                    why=f"neither its old id {old} nor its current id {new} (edited inputs or config?)")
    if rd.status not in store.ENDED:
        return Move(path, "not ended", old, new,
                    why=f"recorded {rd.status}; a sweep runs it under its current id {new}")
    target = store.RunDir(path.parent / new)
    if target.path.exists():
        return Move(path, "taken", old, new,
                    why=f"its current id {new} is taken ({target.status or 'no summary'}: {target.path})")
    if dry_run:
        return Move(path, "would rename", old, new)
    os.rename(path, target.path)  # one atomic step: the run is under one id or the other
    _rewrite(target, plan, summary, old, new)
    return Move(target.path, "renamed", old, new)


def _rewrite(rd: store.RunDir, plan: RunPlan, summary: dict, old: str, new: str) -> None:
    """The renamed run's summary.json and plan.json with its current ids (atomically)."""
    rd.write_summary({**summary, "run_id": new, "migrated_from": old})
    if (rd.path / runplan.PLAN_FILE).is_file():
        runplan.write(dataclasses.replace(plan, run_id=new, config_id=config_id(plan)), rd.path)


def migrate(root: str | os.PathLike, dry_run: bool = False) -> list[Move]:
    """:func:`migrate_one` over every run folder under ``root`` (:func:`run_dirs`)."""
    return [migrate_one(p, dry_run) for p in run_dirs(root)]
