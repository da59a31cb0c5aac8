"""Results layout, run ids and atomic writes.

A sweep lives in ``<root>/<sweep>/``; each run in ``<root>/<sweep>/runs/<run_id>/``::

    config.yaml      the resolved run config (RunConfig.to_dict)
    metrics.jsonl    one JSON object per line: train iterations and evaluations
    summary.json     status, evaluations before/after, tokens, wall time (written atomically)
    checkpoint/      latest checkpoint (HF save_pretrained + algorithm state), for resume
    model/           the trained model at the end (HF save_pretrained), for analyses

The run id is a hash of the part of the config that defines the result
(:func:`esopt.runtime.validate.identity`), so rerunning a sweep finds its finished runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

STATUSES = ("running", "completed", "pruned", "failed")


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values: numpy scalars and arrays -> Python numbers and lists,
    NaN / inf -> None (files stay strict JSON), tuples and sets -> lists, paths -> strings,
    dict keys -> strings. The one JSON sanitiser of esopt (summaries, tables, the page)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    try:
        import numpy as np

        if isinstance(obj, np.ndarray):
            if obj.dtype.kind == "f":
                return np.where(np.isfinite(obj), obj, None).tolist()
            if obj.dtype.kind in "iub":
                return obj.tolist()
            return [jsonable(v) for v in obj.tolist()]
        if isinstance(obj, np.generic):
            return jsonable(obj.item())
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj: Any, **kw) -> str:
    """``json.dumps(jsonable(obj))``: strict JSON for anything esopt records."""
    return json.dumps(jsonable(obj), **kw)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; when the block succeeds, fsync it and rename it
    over ``path`` (atomic on POSIX filesystems, NFS/Lustre included, within one directory), so
    readers see the old file or the new one, never half of one. On any error (a full disk) the
    temporary file is removed and the previous ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, dumps(obj, indent=2, sort_keys=False) + "\n")


def run_id(identity: dict) -> str:
    """12 hex digits of sha256 over the canonical JSON of the run's identity config."""
    canon = json.dumps(jsonable(identity), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:12]


def sweep_dir(root: str, name: str) -> Path:
    return Path(root) / name


class RunDir:
    """One run's directory: the only place a run writes to."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.metrics_path = self.path / "metrics.jsonl"
        self.summary_path = self.path / "summary.json"
        self.config_path = self.path / "config.yaml"
        self.checkpoint_dir = self.path / "checkpoint"
        self.model_dir = self.path / "model"  # final trained weights (HF save_pretrained)

    @classmethod
    def for_run(cls, root: str, sweep: str, rid: str) -> "RunDir":
        return cls(sweep_dir(root, sweep) / "runs" / rid)

    def create(self, config: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        import yaml  # PyYAML comes with omegaconf

        atomic_write_text(self.config_path, yaml.safe_dump(config, sort_keys=False))

    # --- metrics.jsonl -------------------------------------------------------------
    def log(self, **line: Any) -> None:
        """Append one JSON line (flushed and fsynced, so a kill loses at most this line)."""
        with open(self.metrics_path, "a") as f:
            f.write(dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def lines(self) -> Iterator[dict]:
        """Metrics lines; a torn last line (killed mid-write) is skipped."""
        if not self.metrics_path.exists():
            return
        with open(self.metrics_path) as f:
            for raw in f:
                raw = raw.strip()
                if not raw:
                    continue
                try:
                    yield json.loads(raw)
                except json.JSONDecodeError:
                    continue

    def truncate_metrics(self, keep: "callable") -> None:
        """Keep only the lines for which ``keep(line)`` is true (used on resume)."""
        kept = [line for line in self.lines() if keep(line)]
        atomic_write_text(self.metrics_path, "".join(dumps(x) + "\n" for x in kept))

    # --- summary.json ----------------------------------------------------------------
    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.summary_path, summary)

    def read_summary(self) -> dict | None:
        try:
            return json.loads(self.summary_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    @property
    def status(self) -> str | None:
        s = self.read_summary()
        return s.get("status") if s else None


def completed_run_ids(root: str, sweep: str) -> dict[str, str]:
    """run_id -> status for every run of a sweep that has a summary."""
    out = {}
    runs = sweep_dir(root, sweep) / "runs"
    if runs.is_dir():
        for d in sorted(runs.iterdir()):
            s = RunDir(d).read_summary()
            if s and s.get("status"):
                out[d.name] = s["status"]
    return out


# --- who runs a run (so one run is never started twice) ------------------------------------
def _proc_start(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _slurm_job_id() -> str | None:
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID")


def worker_info() -> dict:
    """The process running a run: host, pid (+ start time) and Slurm job id (summary["worker"])."""
    import socket

    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _proc_start(os.getpid()),
            "slurm_job_id": _slurm_job_id()}


def worker_alive(worker: dict | None) -> str | None:
    """Where a run recorded ``running`` is still being run by another live process: ``"Slurm
    job J (running)"`` or ``"pid P on HOST"``; None when that worker is gone or is this very
    process (a requeued Slurm job keeps its id and must resume its own run)."""
    import socket
    import subprocess

    worker = worker or {}
    job = worker.get("slurm_job_id")
    if job:
        if job == _slurm_job_id():
            return None
        try:
            r = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True,
                               text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        state = r.stdout.strip().splitlines()[0].lower() if r.returncode == 0 and r.stdout.strip() else ""
        return f"Slurm job {job} ({state})" if state in ("running", "pending", "completing", "configuring") else None
    pid, host = worker.get("pid"), worker.get("host")
    if not pid or host != socket.gethostname() or int(pid) == os.getpid():
        return None
    start = _proc_start(int(pid))
    if start is None or (worker.get("pid_start") is not None and start != worker["pid_start"]):
        return None
    return f"pid {pid} on {host}"
