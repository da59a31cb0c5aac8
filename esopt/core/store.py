"""Results layout, run ids and atomic writes.

A sweep lives in ``<root>/<sweep>/``; each run in ``<root>/<sweep>/runs/<run_id>/``::

    config.yaml      the resolved run config (RunConfig.to_dict)
    metrics.jsonl    one JSON object per line: train iterations and evaluations
    summary.json     status, evaluations before/after, tokens, wall time (written atomically)
    owner.lock       who runs the run right now (:func:`lock_run`; absent when nobody does)
    checkpoint/      latest checkpoint (HF save_pretrained + algorithm state), for resume
    model/           the trained model at the end (HF save_pretrained), for analyses

The run id is a hash of the part of the config that defines the result
(:func:`esopt.runtime.validate.identity`), so rerunning a sweep finds its finished runs.

A :class:`RunDir` tells its ``observers`` what it records, after recording it: ``on_metrics(line)``
for each metrics line, ``on_rewrite(lines)`` when metrics.jsonl is cut back (a resume),
``on_summary(summary)`` for each summary (the experiment trackers, esopt.runtime.trackers).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

# atomic writes and file hashes live in esopt.core.files; fingerprints of a run's inputs
# (part of the run id) in esopt.core.fingerprint
from esopt.core.files import apply_umask, atomic_dir, atomic_path, atomic_write_text, file_sha256  # noqa: F401
from esopt.core.fingerprint import (FP_BLOCK, FP_CACHE_ENTRIES, FP_CACHE_FILE, FP_MAX_FILES,  # noqa: F401
                                    FP_WHOLE, fingerprint, fingerprint_key)

STATUSES = ("running", "completed", "pruned", "failed")
ENDED = ("completed", "pruned")   # the statuses of a run that ended: kept by every sweep (keep_recorded)
UNREADABLE = "unreadable"   # RunDir.status of a summary.json that exists but cannot be parsed


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


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, dumps(obj, indent=2, sort_keys=False) + "\n")


MANIFEST = "esopt_manifest.json"  # a checkpoint's sha256 of every file, written last


def write_manifest(directory: str | os.PathLike) -> Path:
    """Record the sha256 and size of every file under a checkpoint ``directory`` in
    ``<directory>/esopt_manifest.json``, written atomically and last: a checkpoint without a
    valid manifest (a writer killed or out of disk before it) is not trusted on resume."""
    directory = Path(directory)
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.name != MANIFEST and not p.name.endswith(".tmp"):
            files[p.relative_to(directory).as_posix()] = {"size": p.stat().st_size, "sha256": file_sha256(p)}
    atomic_write_json(directory / MANIFEST, {"files": files})
    return directory / MANIFEST


def verify_manifest(directory: str | os.PathLike) -> str | None:
    """None when every file recorded in ``directory``'s manifest is there with its recorded
    size and sha256; else the reason, naming the first bad file (``<path>: checksum mismatch``,
    ``<path>: missing``, ``<manifest>: no valid manifest``)."""
    directory = Path(directory)
    try:
        files = json.loads((directory / MANIFEST).read_text())["files"]
        if not isinstance(files, dict) or not files:
            raise ValueError("empty")
    except (OSError, ValueError, KeyError, TypeError):
        return f"{directory / MANIFEST}: no valid manifest"
    for name, rec in files.items():
        p = directory / name
        try:
            if p.stat().st_size != int(rec["size"]):
                return f"{p}: size {p.stat().st_size}, recorded {rec['size']} (truncated)"
            if file_sha256(p) != rec["sha256"]:
                return f"{p}: checksum mismatch"
        except FileNotFoundError:
            return f"{p}: missing"
        except (OSError, KeyError, TypeError, ValueError) as e:
            return f"{p}: unreadable ({e})"
    return None


def checkpoint_warning(reason: str, fallback: str | None) -> None:
    """The one line an unusable checkpoint gets: what is wrong (naming the file) and where the
    run goes on from (an earlier checkpoint, or the start)."""
    import sys

    then = f"resuming from {fallback}" if fallback else "restarting the run"
    print(f"esopt: warning: {reason}; {then}", file=sys.stderr)


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
        self.observers: list = []             # told of every line / rewrite / summary written

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
        line = jsonable(line)
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        for observer in self.observers:
            observer.on_metrics(line)

    def lines(self) -> Iterator[dict]:
        """Metrics lines; a torn last line (killed mid-write) is skipped."""
        return (line for line in self._parsed_lines() if line is not None)

    def read_metrics(self) -> tuple[list, int]:
        """(metrics lines, how many lines could not be parsed): :meth:`lines` and a count of what
        it skips (a torn last line, a damaged file), for whoever compares a run with another."""
        parsed = list(self._parsed_lines())
        lines = [line for line in parsed if line is not None]
        return lines, len(parsed) - len(lines)

    def _parsed_lines(self) -> Iterator:
        """Each non-blank line of metrics.jsonl parsed, None for one that cannot be."""
        if not self.metrics_path.exists():
            return
        with open(self.metrics_path) as f:
            for raw in f:
                raw = raw.strip()
                if not raw:
                    continue
                try:
                    yield json.loads(raw)
                except (json.JSONDecodeError, RecursionError):   # RecursionError: nested too deep
                    yield None

    def truncate_metrics(self, keep: "callable") -> None:
        """Keep only the lines for which ``keep(line)`` is true (used on resume)."""
        kept = [line for line in self.lines() if keep(line)]
        atomic_write_text(self.metrics_path, "".join(dumps(x) + "\n" for x in kept))
        for observer in self.observers:
            observer.on_rewrite(kept)

    # --- summary.json ----------------------------------------------------------------
    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.summary_path, summary)
        for observer in self.observers:
            observer.on_summary(jsonable(summary))

    def read_summary(self) -> dict | None:
        """The summary, or None when there is none or it cannot be read (not UTF-8, not JSON,
        not an object, unreadable file): never raises (:attr:`status` tells the two apart)."""
        s, _ = self._summary()
        return s

    def _summary(self) -> tuple[dict | None, bool]:
        """(summary or None, whether a summary.json exists but is unreadable)."""
        try:
            s = json.loads(self.summary_path.read_bytes())
        except FileNotFoundError:
            return None, False
        except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return None, self.summary_path.exists()
        return (s, False) if isinstance(s, dict) else (None, True)

    @property
    def status(self) -> str | None:
        """The recorded status; ``"unreadable"`` for a summary.json that cannot be parsed (kept
        and listed, rerun only with ``sweep.retry_failed``); None when there is no summary."""
        s, unreadable = self._summary()
        if unreadable:
            return UNREADABLE
        return s.get("status") if s else None


def completed_run_ids(root: str, sweep: str) -> dict[str, str]:
    """run_id -> status for every run of a sweep that has a summary."""
    out = {}
    runs = sweep_dir(root, sweep) / "runs"
    if runs.is_dir():
        for d in sorted(runs.iterdir()):
            status = RunDir(d).status
            if status:
                out[d.name] = status
    return out


def keep_recorded(status: str | None, retry_failed: bool, error_type: str | None = None) -> bool:
    """Whether a run recorded with ``status`` is kept (not run again): completed and pruned
    runs always; failed and unreadable ones unless ``sweep.retry_failed``, except a run that
    failed on its input (``error_type`` ConfigError, found while loading, before any
    training): it is retried, so a fixed input needs no flag (a changed local input gets a new
    run id anyway, :func:`fingerprint`). The one rule of the sweepers and ``esopt.runtime.run``."""
    if status in ENDED:
        return True
    if status == "failed" and error_type == "ConfigError":
        return False
    return status in ("failed", UNREADABLE) and not retry_failed


# --- who runs a run (so one run is never started twice) ------------------------------------
LOCK_NAME = "owner.lock"
HEARTBEAT_S = 30.0       # an owner touches its lock this often
STALE_AFTER_S = 600.0    # a lock from another host (no Slurm job) untouched this long is stale
_GRACE_S = 10.0          # an unreadable lock (killed while writing it) younger than this: busy


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
    """The process running a run: host, pid (+ start time), Slurm job id and restart count
    (summary["worker"], and the content of the run's lock)."""
    import socket

    restart = os.environ.get("SLURM_RESTART_COUNT")
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _proc_start(os.getpid()),
            "slurm_job_id": _slurm_job_id(), "slurm_restart": int(restart) if (restart or "").isdigit() else 0}


def worker_alive(worker: dict | None, heartbeat_age: float | None = None,
                 job_state: Callable[[str], str | None] | None = None) -> str | None:
    """Where a run is still being run by another live process: ``"Slurm job J (running)"`` or
    ``"pid P on HOST"``; None when that worker is gone or is this very process.

    - Another Slurm job: alive while ``job_state(job)`` (the scheduler's state of the job, lower
      case; "" = no longer listed; None = cannot be asked) says running / pending / completing
      (``esopt.runtime.layout.slurm_job_state`` asks squeue; without ``job_state`` Slurm is not
      asked and the job's process is judged as below).
    - The same Slurm job: a requeued incarnation (a higher ``SLURM_RESTART_COUNT``) takes over
      its own run; a sibling process of the same allocation is judged like any process.
    - A process on this host: alive while its pid exists with the same start time (a reused
      pid is told apart).
    - A process on another host (or Slurm not answering): alive while the owner's lock was
      touched less than ``STALE_AFTER_S`` ago (owners touch it every ``HEARTBEAT_S``);
      ``heartbeat_age`` None = unknown = gone.
    """
    import socket

    worker = worker or {}
    pid, host = worker.get("pid"), worker.get("host")
    job = worker.get("slurm_job_id")
    if job and job == _slurm_job_id():
        if int(worker.get("slurm_restart") or 0) < worker_info()["slurm_restart"]:
            return None  # our own earlier incarnation, killed by the requeue
    elif job and job_state is not None:
        state = job_state(job)
        if state is not None:
            return f"Slurm job {job} ({state})" if state in ("running", "pending", "completing",
                                                            "configuring", "suspended") else None
    if not pid:
        return None
    if host == socket.gethostname():
        if int(pid) == os.getpid():
            return None
        start = _proc_start(int(pid))
        if start is None or (worker.get("pid_start") is not None and start != worker["pid_start"]):
            return None
        return f"pid {pid} on {host}"
    if heartbeat_age is not None and heartbeat_age < STALE_AFTER_S:
        return f"pid {pid} on {host} (lock touched {heartbeat_age:.0f} s ago)"
    return None


def _read_lock(path: Path) -> tuple[dict | None, float | None]:
    """(owner record, age of the file in seconds) of a lock; (None, age) when it cannot be
    parsed (its creator was killed while writing it), (None, None) when there is none. An
    unparseable lock gets the nonce ``unreadable-<hash of its bytes>``, so it can be taken over."""
    try:
        age = time.time() - path.stat().st_mtime
        raw = path.read_bytes()
    except OSError:
        return None, None
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    if not isinstance(record, dict) or not record.get("nonce"):
        return {"nonce": "unreadable-" + hashlib.sha256(raw).hexdigest()[:16], "unreadable": True}, age
    return record, age


def _create_exclusive(path: Path, record: dict) -> bool:
    """Create ``path`` holding ``record`` only if it does not exist (O_EXCL): True if created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return False
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


class RunLock:
    """This process's ownership of one run directory (:func:`lock_run`); ``release()`` (or the
    end of a ``with`` block) gives it up. While held, a daemon thread touches the lock every
    ``HEARTBEAT_S`` seconds so that processes on other hosts can tell a live owner from a dead one."""

    def __init__(self, lock: Path, record: dict, took_over: dict | None = None):
        import threading

        self.lock, self.record, self.took_over = lock, record, took_over
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="esopt-lock-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                os.utime(self.lock)
            except OSError:
                pass

    @property
    def held(self) -> bool:
        record, _ = _read_lock(self.lock)
        return record is not None and record["nonce"] == self.record["nonce"]

    def release(self) -> None:
        """Remove the lock if it is still ours (never another owner's)."""
        self._stop.set()
        if self.held:
            try:
                os.unlink(self.lock)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_run(run_dir: str | os.PathLike, retries: int = 50,
             job_state: Callable[[str], str | None] | None = None) -> tuple[RunLock | None, str | None]:
    """Atomically become the one process that runs ``run_dir``: ``(RunLock, None)``, or ``(None,
    where)`` when a live process owns it (``where`` as :func:`worker_alive` says it).

    The lock is ``<run>/owner.lock``, created with ``O_EXCL`` (exactly one creator wins, on
    local disks and on NFS v3+/Lustre alike) and holding :func:`worker_info` plus a random
    nonce. A lock whose owner is dead (:func:`worker_alive`: pid gone, Slurm job ended, our own
    requeued job, or no heartbeat from another host for ``STALE_AFTER_S``) is taken over: the
    taker first creates ``owner.lock.takeover-<nonce of the dead owner>`` with ``O_EXCL`` (so
    of several takers of one dead owner exactly one proceeds), checks that the lock still
    holds that dead owner, then renames its own record over it.
    """
    import uuid

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / LOCK_NAME
    record = {**worker_info(), "nonce": uuid.uuid4().hex, "locked_at": time.time()}
    for _ in range(retries):
        if _create_exclusive(lock, record):
            return RunLock(lock, record), None
        held, age = _read_lock(lock)
        if held is None:                                  # released meanwhile: try again
            continue
        if held.get("unreadable"):                        # being written, or its writer died
            if age < _GRACE_S:
                time.sleep(0.05)
                continue
        else:
            where = worker_alive(held, age, job_state)
            if where:
                return None, where
        marker = lock.with_name(f"{LOCK_NAME}.takeover-{held['nonce']}")
        if not _create_exclusive(marker, record):
            other, mage = _read_lock(marker)               # another taker, or a dead one
            if other is not None and mage > _GRACE_S and (other.get("unreadable") or worker_alive(other, mage, job_state) is None):
                try:
                    os.unlink(marker)
                except FileNotFoundError:
                    pass
            time.sleep(0.05)
            continue
        try:
            again, _ = _read_lock(lock)
            if again is None or again["nonce"] != held["nonce"]:
                continue                                   # changed under us: look again
            with atomic_path(lock) as tmp:
                tmp.write_text(json.dumps(record) + "\n")
            return RunLock(lock, record, took_over=held), None
        finally:
            try:
                os.unlink(marker)
            except FileNotFoundError:
                pass
    held, age = _read_lock(lock)
    return None, (worker_alive(held, age, job_state) if held else None) or f"another process (lock {lock} keeps changing)"


def run_owner(run_dir: str | os.PathLike, job_state: Callable[[str], str | None] | None = None) -> str | None:
    """Who owns ``run_dir`` right now (a live process holding its lock), else None
    (``job_state``: as for :func:`worker_alive`)."""
    held, age = _read_lock(Path(run_dir) / LOCK_NAME)
    return worker_alive(held, age, job_state) if held and not held.get("unreadable") else None
