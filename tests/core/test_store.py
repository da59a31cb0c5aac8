import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from esopt.core import store
from helpers import REPO


def test_run_id_is_stable_and_sensitive():
    a = {"model": {"name": "tiny-s"}, "pop": 16, "sigma": 0.01}
    b = {"sigma": 0.01, "pop": 16, "model": {"name": "tiny-s"}}
    assert store.run_id(a) == store.run_id(b)
    assert len(store.run_id(a)) == 12
    assert store.run_id(a) != store.run_id({**a, "pop": 32})


def test_atomic_write_never_leaves_half_a_file(tmp_path):
    """A writer killed mid-loop leaves either an old or a new complete summary."""
    path = tmp_path / "summary.json"
    code = textwrap.dedent(f"""
        from esopt.core import store
        i = 0
        while True:
            store.atomic_write_json({str(path)!r}, {{"i": i, "pad": "x" * 200000}})
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    import time
    deadline = time.time() + 20
    while not path.exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    data = json.loads(path.read_text())
    assert data["i"] >= 0 and len(data["pad"]) == 200000
    leftovers = [p for p in os.listdir(tmp_path) if p != "summary.json"]
    assert all(p.startswith(".summary.json.") for p in leftovers)


def test_atomic_dir_swaps_whole_folders_or_keeps_the_first(tmp_path):
    """replace=True: a failed write leaves the previous folder and no temporary; a good one
    replaces it. replace=False: a folder that appeared meanwhile is kept, the new one dropped."""
    path = tmp_path / "model"
    with store.atomic_dir(path) as d:
        (d / "w").write_text("1")
    with pytest.raises(OSError):
        with store.atomic_dir(path) as d:
            (d / "w").write_text("2")
            raise OSError("disk full")
    assert (path / "w").read_text() == "1" and sorted(os.listdir(tmp_path)) == ["model"]
    with store.atomic_dir(path) as d:
        (d / "w").write_text("3")
    assert (path / "w").read_text() == "3" and sorted(os.listdir(tmp_path)) == ["model"]
    once = tmp_path / "once"
    with store.atomic_dir(once, replace=False) as d:
        (d / "w").write_text("first")
        with store.atomic_dir(once, replace=False) as d2:  # a racing writer finishes first
            (d2 / "w").write_text("racer")
    assert (once / "w").read_text() == "racer" and sorted(os.listdir(tmp_path)) == ["model", "once"]


def test_rundir_log_and_torn_line(tmp_path):
    rd = store.RunDir(tmp_path / "r")
    rd.create({"a": 1})
    rd.log(kind="train", iteration=1, reward_mean=0.5, bad=float("nan"))
    with open(rd.metrics_path, "a") as f:
        f.write('{"kind": "train", "iter')  # torn by a kill
    lines = list(rd.lines())
    assert lines == [{"kind": "train", "iteration": 1, "reward_mean": 0.5, "bad": None}]
    assert rd.read_metrics() == (lines, 1)                   # the torn line, counted
    rd.write_summary({"status": "completed"})
    assert rd.status == "completed"


def test_completed_run_ids(tmp_path):
    for rid, status in [("aaa", "completed"), ("bbb", "failed")]:
        store.RunDir.for_run(str(tmp_path), "sw", rid).write_summary({"status": status})
    (tmp_path / "sw" / "runs" / "ccc").mkdir()
    assert store.completed_run_ids(str(tmp_path), "sw") == {"aaa": "completed", "bbb": "failed"}


# --- unreadable summaries -------------------------------------------------------------------
def test_unreadable_summary_is_a_status_never_an_exception(tmp_path):
    rd = store.RunDir(tmp_path / "r")
    rd.path.mkdir()
    assert rd.status is None and rd.read_summary() is None  # none yet
    for raw in (b"\xff\xfe not utf-8 \x80", b'{"status": "compl', b"[1, 2]", b""):
        rd.summary_path.write_bytes(raw)
        assert rd.read_summary() is None and rd.status == store.UNREADABLE, raw
    rd.write_summary({"status": "completed"})
    assert rd.status == "completed"
    assert store.completed_run_ids(str(tmp_path), "x") == {}


def test_keep_recorded():
    keep = store.keep_recorded
    assert keep("completed", False) and keep("pruned", True)
    assert keep("failed", False) and not keep("failed", True)
    assert keep(store.UNREADABLE, False) and not keep(store.UNREADABLE, True)
    assert not keep("failed", False, "ConfigError")  # failed on its input: retried
    assert not keep("running", False) and not keep(None, False)


# --- fingerprints ---------------------------------------------------------------------------
def test_fingerprint_follows_content_not_place_or_time(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text('{"nums": [1, 2], "target": 3}\n' * 10)
    fa = store.fingerprint(a)
    assert fa["kind"] == "file" and fa["size"] == a.stat().st_size and fa["mtime"] > 0
    b = tmp_path / "b.jsonl"
    b.write_bytes(a.read_bytes())  # a copy: same content key, other path and time
    assert store.fingerprint_key(store.fingerprint(b)) == store.fingerprint_key(fa)
    a.write_text('{"nums": [1, 2], "target": 4}\n' + '{"nums": [1, 2], "target": 3}\n' * 9)
    assert store.fingerprint(a)["sha256"] != fa["sha256"]  # same size, other content
    assert store.fingerprint(tmp_path / "nope") == {"path": str(tmp_path / "nope"), "kind": "missing"}

    big = tmp_path / "big.bin"  # larger than FP_WHOLE: size + first and last blocks
    data = bytearray(os.urandom(store.FP_WHOLE + 3 * store.FP_BLOCK))
    big.write_bytes(data)
    f0 = store.fingerprint(big)["sha256"]
    data[-1] ^= 1
    big.write_bytes(data)
    assert store.fingerprint(big)["sha256"] != f0  # the last block changed
    data[-1] ^= 1
    data[0] ^= 1
    big.write_bytes(data)
    assert store.fingerprint(big)["sha256"] != f0  # the first block changed

    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"x" * 100)
    fd = store.fingerprint(d)
    assert fd["kind"] == "dir" and fd["files"] == 2 and fd["size"] == 102
    (d / "model.safetensors").write_bytes(b"y" * 100)
    assert store.fingerprint(d)["sha256"] != fd["sha256"]


# --- one owner per run ----------------------------------------------------------------------
def _dead_process_record():
    """A worker record of a process that existed and has exited (its pid is free again)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    start = store._proc_start(p.pid)
    p.wait()
    return {**store.worker_info(), "pid": p.pid, "pid_start": start, "nonce": "dead0000"}


def test_lock_is_exclusive_and_released(tmp_path):
    run = tmp_path / "run"
    mine, owner = store.lock_run(run)
    assert mine is not None and owner is None
    lock = json.loads((run / store.LOCK_NAME).read_text())
    assert lock["pid"] == os.getpid() and lock["nonce"] == mine.record["nonce"]
    # a second process cannot lock it while we hold it
    code = f"from esopt.core import store; c, o = store.lock_run({str(run)!r}); print(c is None, o)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO).stdout.split()
    assert out[0] == "True" and f"pid {os.getpid()}" in " ".join(out[1:])
    assert store.run_owner(run) is None  # this very process is never "another owner"
    mine.release()
    assert not (run / store.LOCK_NAME).exists()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO).stdout.split()
    assert out[0] == "False"  # free again: the other process got it (and exited)


def test_lock_takes_over_from_dead_owner_and_unreadable_lock(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    dead = _dead_process_record()
    (run / store.LOCK_NAME).write_text(json.dumps(dead))
    assert store.run_owner(run) is None
    mine, _ = store.lock_run(run)
    assert mine is not None and mine.took_over["pid"] == dead["pid"]
    mine.release()
    assert sorted(os.listdir(run)) == []  # no takeover marker, no temporaries left

    (run / store.LOCK_NAME).write_bytes(b'{"pid": 1')  # its writer died mid-write, long ago
    old = time.time() - 60
    os.utime(run / store.LOCK_NAME, (old, old))
    mine, _ = store.lock_run(run)
    assert mine is not None and mine.took_over["unreadable"]
    mine.release()


def test_lock_respects_a_live_owner_and_slurm_requeue(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = {**store.worker_info(), "pid": p.pid, "pid_start": store._proc_start(p.pid), "nonce": "live"}
        (run / store.LOCK_NAME).write_text(json.dumps(live))
        mine, owner = store.lock_run(run)
        assert mine is None and owner == f"pid {p.pid} on {live['host']}"
        # the same lock from another host: alive while its heartbeat is fresh, stale after
        (run / store.LOCK_NAME).write_text(json.dumps({**live, "host": "elsewhere"}))
        assert store.lock_run(run)[0] is None
        old = time.time() - store.STALE_AFTER_S - 5
        os.utime(run / store.LOCK_NAME, (old, old))
        mine, _ = store.lock_run(run)
        assert mine is not None
        mine.release()
        # a requeued Slurm task (same job id, higher restart count) takes over its own run,
        # even from a pid that is alive here; a sibling in the same allocation does not
        monkeypatch.setenv("SLURM_JOB_ID", "4242")
        monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
        monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
        (run / store.LOCK_NAME).write_text(json.dumps({**live, "slurm_job_id": "4242", "slurm_restart": 0}))
        assert store.lock_run(run)[0] is None
        monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
        mine, _ = store.lock_run(run)
        assert mine is not None and mine.took_over["pid"] == p.pid
        mine.release()
    finally:
        p.kill()
        p.wait()


def _race(run, start_at, hold_s, out_dir):
    """One of several processes released at the same instant, all locking one run."""
    while time.time() < start_at:
        pass
    mine, owner = store.lock_run(run)
    name = Path(out_dir) / f"{os.getpid()}.{'won' if mine else 'lost'}"
    name.write_text(str(time.time()))
    if mine:
        time.sleep(hold_s)
        mine.release()


@pytest.mark.parametrize("stale", [False, True])
def test_lock_race_has_exactly_one_winner(tmp_path, stale):
    """Six processes spin until the same instant, then mine one run (fresh, or from a dead
    owner's lock): exactly one wins; the others see it and step aside."""
    import multiprocessing as mp

    run = tmp_path / "run"
    run.mkdir()
    if stale:
        (run / store.LOCK_NAME).write_text(json.dumps(_dead_process_record()))
    out = tmp_path / "out"
    out.mkdir()
    ctx = mp.get_context("fork")
    start_at = time.time() + 1.5
    procs = [ctx.Process(target=_race, args=(run, start_at, 1.0, out)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = sorted(f.suffix for f in out.iterdir())
    assert results == [".lost"] * 5 + [".won"], results
    assert not (run / store.LOCK_NAME).exists()
    assert not [n for n in os.listdir(run) if "takeover" in n]


# --- modes and full disks -------------------------------------------------------------------
def test_files_are_created_with_the_process_umask(tmp_path):
    code = textwrap.dedent(f"""
        import os
        os.umask(0o027)
        from esopt.core import store
        rd = store.RunDir({str(tmp_path / 'r')!r})
        rd.create({{"a": 1}})
        rd.write_summary({{"status": "running"}})
        rd.log(kind="train", iteration=1)
        rd.truncate_metrics(lambda line: True)
        store.atomic_write_text({str(tmp_path / 'r' / 'error.txt')!r}, "x")
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "r").iterdir()}
    assert modes == dict.fromkeys(["config.yaml", "summary.json", "metrics.jsonl", "error.txt"], 0o640), modes


def test_atomic_write_past_a_file_size_limit_keeps_the_old_file(tmp_path):
    """A real write error (RLIMIT_FSIZE: the kernel refuses bytes past 1 MB with EFBIG) in the
    middle of writing: the previous file is intact and no temporary is left."""
    path = tmp_path / "report.html"
    path.write_text("old page")
    code = textwrap.dedent(f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        from esopt.core import store
        try:
            store.atomic_write_text({str(path)!r}, "x" * (3 << 20))
        except OSError as e:
            print("error", e.errno)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "error 27", out.stderr  # EFBIG
    assert path.read_text() == "old page"
    assert os.listdir(tmp_path) == ["report.html"]
