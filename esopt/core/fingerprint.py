"""Fingerprints of a run's local inputs (data files, weights): path, size, mtime and the sha256
of the whole content, which enter the run id (changed data at the same path -> a new run).
Large files' digests are cached by (path, size, mtime_ns, inode) so each is hashed once."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from esopt.core.files import HASH_BLOCK, atomic_path, file_sha256

# --- fingerprints of a run's inputs (part of the run id) ------------------------------------
FP_BLOCK = HASH_BLOCK       # bytes read at a time while hashing
FP_WHOLE = 16 * FP_BLOCK    # larger files: their digest is kept in the digest cache (FP_CACHE_FILE)
FP_MAX_FILES = 10_000       # a directory with more files is fingerprinted by its first ones
FP_CACHE_FILE = "fingerprints.json"  # under $XDG_CACHE_HOME/esopt (~/.cache/esopt)
FP_CACHE_ENTRIES = 2000     # the digest cache keeps this many files (the latest hashed)
_FP_CACHE: dict[tuple, dict] = {}


def _digest_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "esopt" / FP_CACHE_FILE


def _digest_cache_key(path: str, st: os.stat_result) -> str:
    return f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_dev}:{st.st_ino}"


def _read_digest_cache() -> dict:
    try:
        data = json.loads(_digest_cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember_digest(key: str, digest: str) -> None:
    """Add one digest to the cache file (atomically; a cache that cannot be written is skipped:
    the file is then hashed again by the next process)."""
    path = _digest_cache_path()
    try:
        cache = _read_digest_cache()
        cache.pop(key, None)
        cache[key] = digest
        keep = dict(list(cache.items())[-FP_CACHE_ENTRIES:])
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(keep))
    except OSError:
        pass


def _file_digest(path: str, size: int) -> str:
    """sha256 of the whole file. A file over FP_WHOLE bytes is hashed once: its digest is kept
    in the digest cache (``~/.cache/esopt/fingerprints.json``) under its real path, size,
    mtime (ns) and inode, so a same-size edit anywhere in it changes the digest and an
    unchanged one is not read again."""
    st = os.stat(path)
    key = _digest_cache_key(path, st) if size > FP_WHOLE else None
    if key is not None:
        cached = _read_digest_cache().get(key)
        if isinstance(cached, str) and len(cached) == 64:
            return cached
    digest = file_sha256(path)
    if key is not None:
        _remember_digest(key, digest)
    return digest


def fingerprint(path: str | os.PathLike) -> dict:
    """What a local input holds, cheaply: ``{"path", "kind", "size", "mtime", "sha256"}``.

    A file: its size, modification time and :func:`_file_digest` (of its whole content). A directory (a checkpoint, a
    ``save_to_disk`` dataset): every regular file under it (hidden names skipped), its relative
    name, size and digest folded into one sha256; size = total bytes, mtime = the newest.
    A missing path: ``{"path", "kind": "missing"}``. The run id takes ``kind``, ``size`` and
    ``sha256`` (content, not mtime: a copy with ``cp`` or a fresh clone keeps its runs);
    the summary records the whole dict. Cached per process by (path, size, mtime).
    """
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        return {"path": str(p), "kind": "missing"}
    if p.is_file():
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _FP_CACHE:
            _FP_CACHE[key] = {"path": str(p), "kind": "file", "size": st.st_size,
                              "mtime": st.st_mtime_ns / 1e9, "sha256": _file_digest(str(p), st.st_size)}
        return dict(_FP_CACHE[key])
    files = []
    for root, dirs, names in os.walk(p):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith(".") and len(files) < FP_MAX_FILES:
                f = Path(root) / name
                try:
                    fst = f.stat()
                except OSError:
                    continue
                if f.is_file():
                    files.append((f, fst))
    h = hashlib.sha256()
    size, mtime = 0, 0
    for f, fst in files:
        sub = fingerprint(f)
        h.update(f"{f.relative_to(p).as_posix()}\0{sub['size']}\0{sub['sha256']}\n".encode())
        size += fst.st_size
        mtime = max(mtime, fst.st_mtime_ns)
    return {"path": str(p), "kind": "dir", "size": size, "mtime": mtime / 1e9, "files": len(files),
            "sha256": h.hexdigest()}


def fingerprint_key(fp: dict) -> dict:
    """The part of a :func:`fingerprint` that enters the run id (content, not place or time)."""
    return {k: fp[k] for k in ("kind", "size", "sha256") if k in fp}
