"""The fingerprint of a large data file covers its whole content (a same-size edit in the
middle changes the run id), hashed once: the digest is cached by real path, size, mtime and
inode in ~/.cache/esopt/fingerprints.json."""

import json
import os

import pytest

from esopt.core import fingerprint as store  # the fingerprint functions (re-exported by esopt.core.store)


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(store, "_FP_CACHE", {})
    return tmp_path / "cache" / "esopt" / "fingerprints.json"


def _big(tmp_path) -> tuple:
    path = tmp_path / "big.jsonl"
    data = bytearray(os.urandom(store.FP_WHOLE + 5 * store.FP_BLOCK))
    path.write_bytes(data)
    return path, data


def test_a_same_size_edit_in_the_middle_of_a_large_file_changes_its_fingerprint(tmp_path, cache_home):
    path, data = _big(tmp_path)
    before = store.fingerprint(path)
    st = path.stat()
    data[len(data) // 2] ^= 1
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # an edit moves the mtime
    store._FP_CACHE.clear()
    after = store.fingerprint(path)
    assert after["size"] == before["size"] and after["sha256"] != before["sha256"]
    assert store.fingerprint_key(after) != store.fingerprint_key(before)


def test_a_large_file_is_hashed_once_and_its_digest_cached_on_disk(tmp_path, cache_home):
    path, data = _big(tmp_path)
    first = store.fingerprint(path)["sha256"]
    cached = json.loads(cache_home.read_text())
    assert list(cached.values()) == [first] and str(path.stat().st_ino) in next(iter(cached))

    # another process (empty in-memory cache): the cached digest is used while size, mtime and
    # inode are unchanged (here the content is changed behind its back, mtime restored, to show it)
    st = path.stat()
    data[len(data) // 2] ^= 1
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    store._FP_CACHE.clear()
    assert store.fingerprint(path)["sha256"] == first
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # touched: hashed again
    store._FP_CACHE.clear()
    assert store.fingerprint(path)["sha256"] != first


def test_small_files_are_not_cached_and_an_unwritable_cache_is_skipped(tmp_path, cache_home, monkeypatch):
    small = tmp_path / "small.jsonl"
    small.write_text('{"nums": [1, 2], "target": 3}\n')
    store.fingerprint(small)
    assert not cache_home.exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file, not a directory
    path, _ = _big(tmp_path)
    assert len(store.fingerprint(path)["sha256"]) == 64
