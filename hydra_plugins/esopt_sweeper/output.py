"""What the sweepers print around the runs: the notes before launch (keys an algorithm does not
read, layouts), the progress line while runs go, the tables' helpers, and the aggregation at
the end. Light imports only (Hydra imports every plugin module at each start)."""

import logging
import sys
from pathlib import Path
from typing import Any, Dict, List

Job = Any  # hydra_plugins.esopt_sweeper.sweepers.Job (not imported: that module imports this one)

POLL_S = 2.0        # the progress line re-reads the runs' summaries this often
JOIN_S = 10.0       # at the end, wait at most this long for the progress thread
TABLE_WIDTH = 200   # the tables' pandas display: characters per line,
TABLE_COLUMNS = 30  # columns
TABLE_ROWS = 500    # and rows before pandas elides
FIXED_COLUMNS = 4   # a grid of one point: the table shows its first this many keys


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def layout_notes(jobs: List[Job]) -> List[str]:
    """The distinct notes of the runs' layouts (fewer GPUs used than the model asks for, and why)."""
    return list(dict.fromkeys(n for n in (j.plan.layout.note for j in jobs) if n))


def unread_notes(jobs: List[Job]) -> List[str]:
    """The grid's keys that a run's algorithm does not read (its registry entry's ``uses``),
    reported once per algorithm, never refused (a grid over several algorithms takes a key of
    any one's block): where points that differ in such keys are one run, "pop has no effect
    with algo=grpo: 6 points are 2 runs" (:func:`collapsed_points`); any other such key once,
    "es.batch_size has no effect with algo=none"."""
    from esopt import algorithms
    from esopt.cli.common import inert_notes, no_effect, override_keys

    out, covered = [], set()
    for (algo, keys), (points, runs) in collapsed_points(jobs).items():
        out.append(f"{no_effect(list(keys), algo)}: {points} points are {runs} run{'s' if runs > 1 else ''}")
        covered |= {(algo, k) for k in keys}
    unread: Dict[str, List[str]] = {}
    for job in jobs:
        algo = algorithms.get(job.plan.algo)
        for key in override_keys(job.overrides):
            keys = unread.setdefault(algo.name, [])
            if not algo.uses(key) and (algo.name, key) not in covered and key not in keys:
                keys.append(key)
    inert = [n for job in jobs for n in inert_notes(job.plan, override_keys(job.overrides))]
    return out + [no_effect(keys, algo) for algo, keys in unread.items() if keys] + list(dict.fromkeys(inert))


def collapsed_points(jobs: List[Job]) -> Dict[tuple, List[int]]:
    """Grid points that are one run because their algorithm does not read the keys they differ
    in (e.g. pop with algo=grpo): {(algo, keys): [points, runs]}."""
    by_rid: Dict[str, List[Job]] = {}
    for job in jobs:
        by_rid.setdefault(job.rid, []).append(job)
    notes: Dict[tuple, List[int]] = {}
    for same in by_rid.values():
        if len(same) < 2:
            continue
        kvs = [dict(o.split("=", 1) for o in j.overrides if "=" in o) for j in same]
        keys = sorted({k for kv in kvs for k in kv if len({kv.get(k) for kv in kvs}) > 1})
        key = (same[0].plan.algo, tuple(k.lstrip("+~") for k in keys))
        notes.setdefault(key, [0, 0])
        notes[key][0] += len(same)
        notes[key][1] += 1
    return notes


def varying_keys(grid: List[List[str]]) -> List[str]:
    """Override keys whose value differs between runs (the grid's axes), in order."""
    values: Dict[str, set] = {}
    for overrides in grid:
        for o in overrides:
            if "=" in o and not o.startswith(("hydra.", "++tuning.study")):
                k, v = o.split("=", 1)
                values.setdefault(k, set()).add(v)
    return ([k for k, vs in values.items() if len(vs) > 1]
            or [k for k in values if not k.startswith("sweep.")][:FIXED_COLUMNS])


class wide:
    def __enter__(self):
        import pandas as pd

        self._ctx = pd.option_context("display.width", TABLE_WIDTH, "display.max_columns", TABLE_COLUMNS,
                                      "display.max_rows", TABLE_ROWS)
        self._ctx.__enter__()

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


class SweepProgress:
    """One updating line for the whole sweep (tqdm on a terminal, silent in logs): runs done /
    total, running, failed, and an ETA from the finished runs' wall times. A thread polls the
    runs' summary.json files, so it works the same for every launcher (in process, submitit,
    Slurm)."""

    def __init__(self, jobs: List[Job], every_s: float = POLL_S):
        import threading

        self.jobs, self.every_s = list(jobs), every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.bar = None

    def counts(self) -> dict:
        from esopt.core import store

        out = {"done": 0, "running": 0, "failed": 0, "walls": []}
        for job in self.jobs:
            s = store.RunDir.for_run(job.plan.sweep.root, job.plan.sweep.name, job.rid).read_summary() or {}
            status = s.get("status")
            if status in ("completed", "pruned", "failed"):
                out["done"] += 1
                out["failed"] += status == "failed"
                if s.get("wall_s"):
                    out["walls"].append(float(s["wall_s"]))
            elif status == "running":
                out["running"] += 1
        return out

    def _poll(self) -> None:
        while True:
            c = self.counts()
            left = len(self.jobs) - c["done"]
            eta = (sum(c["walls"]) / len(c["walls"]) * left / max(1, c["running"])) if c["walls"] and left else None
            self.bar.n = c["done"]
            self.bar.set_postfix_str(f"running {c['running']}, failed {c['failed']}"
                                     + (f", eta {eta / 60:.1f} min" if eta is not None else ""), refresh=True)
            if self.stop.wait(self.every_s):
                return

    def __enter__(self):
        from tqdm.auto import tqdm

        if len(self.jobs) > 1:
            self.bar = tqdm(total=len(self.jobs), desc="esopt sweep", unit="run", disable=None,
                            dynamic_ncols=True, leave=False)
            if not self.bar.disable:
                self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=JOIN_S)
        if self.bar is not None:
            self.bar.close()
        return False


class _OnceFilter(logging.Filter):
    """Let submitit's "Bypassing sacct error" warning through once (Slurm without slurmdbd
    has no sacct; submitit then reads its own result files, which is fine)."""

    seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "sacct" not in record.getMessage():
            return True
        if _OnceFilter.seen:
            return False
        _OnceFilter.seen = True
        return True


def quiet_sacct() -> None:
    lg = logging.getLogger("submitit")
    if not any(isinstance(f, _OnceFilter) for f in lg.filters):
        lg.addFilter(_OnceFilter())


def aggregate_sweep(sweep_dir: Path, metric: str = "pass@1") -> None:
    """Aggregate the sweep directory (never fails the sweep: the runs are recorded)."""
    from esopt.study.report.aggregate import aggregate

    try:
        aggregate(str(sweep_dir), metric=metric)
        print(f"aggregated: {sweep_dir / 'report.html'} (runs.parquet, trend.json beside it)")
    except Exception as e:  # noqa: BLE001 - the runs are recorded; aggregation can be rerun
        print(f"esopt: warning: aggregation failed ({first_line(e)}); rerun: "
              f"python -m esopt.aggregate {sweep_dir}", file=sys.stderr)
