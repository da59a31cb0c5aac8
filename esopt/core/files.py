"""Files written whole or not at all, and their sha256: the one home of both (re-exported by
``esopt.core.store``; here, below the store, so that ``esopt.core.fingerprint`` can use them)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

HASH_BLOCK = 1 << 20  # bytes read at a time while hashing a file


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 (hex) of the whole file ``path``, read HASH_BLOCK bytes at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(HASH_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


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


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, *, replace: bool = True):
    """Yield an empty temporary directory beside ``path``; when the block succeeds, rename it
    into place, so ``path`` is a complete directory or absent, never half-written. On any error
    the temporary directory is removed and ``path`` is left as it was.

    ``replace=True`` (a path one writer owns: a run's ``checkpoint/`` and ``model/``): the
    temporary is ``<path>.tmp`` (a killed writer's leftover is cleared by the next), and an
    existing ``path`` is moved to ``<path>.old`` for the instant of the swap, then removed (a
    kill between the two renames leaves the previous version there). ``replace=False`` (a folder
    made once, which concurrent writers may race for): the temporary is a unique hidden
    ``.<name>.tmp-*`` and a ``path`` that appeared meanwhile is kept (the first writer wins)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if replace:
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    else:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
        if not replace:
            try:
                os.rename(tmp, path)
            except OSError:
                if not path.exists():
                    raise
            return
    except BaseException:  # a full disk: leave the previous version, not half a new one
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if not replace:
            shutil.rmtree(tmp, ignore_errors=True)
    old = path.with_name(path.name + ".old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    """The process umask, read without changing it where Linux tells it (``os.umask`` can only
    be read by setting it, which would race with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str | os.PathLike) -> None:
    """Give ``path`` (a file, or a directory and everything under it) the modes the process
    umask gives new files (0666 & ~umask) and directories (0777 & ~umask): writers that
    create files 0600 (safetensors, temporary files) otherwise leave results a group that
    shares them on a cluster cannot read."""
    mask = _umask()
    path = Path(path)
    items = [path] + (sorted(path.rglob("*")) if path.is_dir() else [])
    for p in items:
        try:
            if not p.is_symlink():
                p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)
        except OSError:
            pass


def link_tree(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """``dst`` as a complete copy of directory ``src`` (:func:`atomic_dir`), its files hard links
    to ``src``'s where the filesystem allows (no second copy on disk while ``src`` keeps them;
    a later writer that replaces ``src`` writes new files, so ``dst`` keeps these), else copies."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    dst = Path(dst)
    with atomic_dir(dst) as tmp:
        shutil.copytree(src, tmp, copy_function=link, dirs_exist_ok=True)
    return dst
