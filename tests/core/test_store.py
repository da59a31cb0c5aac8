import json
import os
import signal
import subprocess
import sys
import textwrap

from esopt.core import store


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


def test_rundir_log_and_torn_line(tmp_path):
    rd = store.RunDir(tmp_path / "r")
    rd.create({"a": 1})
    rd.log(kind="train", iteration=1, reward_mean=0.5, bad=float("nan"))
    with open(rd.metrics_path, "a") as f:
        f.write('{"kind": "train", "iter')  # torn by a kill
    lines = list(rd.lines())
    assert lines == [{"kind": "train", "iteration": 1, "reward_mean": 0.5, "bad": None}]
    rd.write_summary({"status": "completed"})
    assert rd.status == "completed"


def test_completed_run_ids(tmp_path):
    for rid, status in [("aaa", "completed"), ("bbb", "failed")]:
        store.RunDir.for_run(str(tmp_path), "sw", rid).write_summary({"status": status})
    (tmp_path / "sw" / "runs" / "ccc").mkdir()
    assert store.completed_run_ids(str(tmp_path), "sw") == {"aaa": "completed", "bbb": "failed"}
