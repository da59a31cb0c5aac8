"""Experiment trackers (``logger=[tensorboard,wandb,mlflow]``), read back with each library's
own reader: TensorBoard's EventAccumulator, MlflowClient against a real ``mlflow server`` on
127.0.0.1 (and the default SQLite store under the sweep), wandb's offline run files through its
protobuf schema. Every value equals metrics.jsonl's / summary.json's; a killed and resumed run
continues the same tracker run; a dead tracker is one warning and the run completes."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from helpers import cli, REPO, run_config

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")
pytest.importorskip("mlflow")

from esopt.core.errors import ConfigError  # noqa: E402
from esopt.core.store import RunDir  # noqa: E402
from esopt.runtime.run import run  # noqa: E402
from esopt.runtime.validate import run_id  # noqa: E402

ES = ["algo=es", "model=tiny-xs", "pop=4", "es.batch_size=4", "eval.every=2", "eval.problems=4",
      "eval.samples=2", "task.n_train=32", "task.n_test=8", "task.n_heldout=8"]
GRPO = ["algo=grpo", "model=tiny-xs", "iterations=2", "eval.every=2", "eval.problems=4", "eval.samples=2",
        "grpo.num_generations=2", "grpo.prompts_per_step=2", "task.n_train=8", "task.n_test=8", "task.n_heldout=8"]
LABELS = ("kind", "iteration", "phase")


# --- what each tracker should hold, from the run's own files -------------------------------------
def expected(run_dir: Path) -> dict[tuple[str, int], float]:
    """(``<kind>/<key>``, iteration) -> value, for every number of metrics.jsonl."""
    out = {}
    for line in RunDir(run_dir).lines():
        for k, v in line.items():
            if k not in LABELS and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[(f"{line['kind']}/{k}", line["iteration"])] = float(v)
    return out


def the_run(root: Path) -> Path:
    (run_dir,) = (root / "default" / "runs").iterdir()
    return run_dir


# --- readers: each library's own -------------------------------------------------------------------
def tensorboard_scalars(logdir: Path) -> dict[tuple[str, int], float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    out = {}
    for tag in ea.Tags()["scalars"]:
        for e in ea.Scalars(tag):
            assert (tag, e.step) not in out, f"{tag} at step {e.step} twice"
            out[(tag, e.step)] = e.value
    return out


def wandb_records(path: Path) -> list:
    """The records of a ``.wandb`` file (wandb's LevelDB-style log: a 7-byte header ``:W&B``,
    magic 0xBEE1, version; then 32 KiB blocks of chunks with a 7-byte header: crc32, length,
    type full / first / middle / last), parsed with wandb's own protobuf schema. A torn tail
    (a killed writer) ends the list."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1
    pos, buf, out, block = 7, b"", [], 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            pos += left
            continue
        if pos + 7 + length > len(data):
            break
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(buf)
            out.append(r)
            buf = b""
    return out


def item_key(item) -> str:
    return item.key or "/".join(item.nested_key)  # wandb stores some keys as a path


def wandb_run(run_dir: Path) -> dict:
    """One offline wandb run directory: its run record, history rows, last summary, exit."""
    (f,) = run_dir.glob("*.wandb")
    info = {"history": [], "summary": {}, "exit": None, "run": None}
    for r in wandb_records(f):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            info["run"] = r.run
        elif kind == "history":
            info["history"].append({item_key(i): json.loads(i.value_json) for i in r.history.item})
        elif kind == "summary":
            info["summary"].update({item_key(i): json.loads(i.value_json) for i in r.summary.update})
        elif kind == "exit":
            info["exit"] = r.exit.exit_code
    return info


def wandb_values(runs: list[dict]) -> dict[tuple[str, int], float]:
    out = {}
    for info in runs:  # in order: a later attempt's value wins
        for row in info["history"]:
            for k, v in row.items():
                if not k.startswith("_") and k != "iteration":
                    out[(k, row["iteration"])] = v
    return out


def mlflow_values(client, mlflow_run_id: str) -> dict[tuple[str, int], float]:
    """(name, step) -> the latest value logged at that step."""
    out, seen = {}, {}
    for key in client.get_run(mlflow_run_id).data.metrics:
        for m in client.get_metric_history(mlflow_run_id, key):
            if (key, m.step) not in seen or m.timestamp >= seen[(key, m.step)]:
                out[(key, m.step)], seen[(key, m.step)] = m.value, m.timestamp
    return out


def as_mlflow(values: dict) -> dict:
    return {(k.replace("@", "_at_"), step): v for (k, step), v in values.items()}


def as_float32(values: dict) -> dict:
    return {k: float(np.float32(v)) for k, v in values.items()}


def final_expected(summary: dict, prefix: str = "final") -> dict[str, float]:
    out = {f"{prefix}/pass@{k}": v for k, v in summary[prefix]["pass@k"].items()}
    out[f"{prefix}/entropy"] = summary[prefix]["entropy"]
    return out


def mlflow_client_and_run(uri: str, sweep: str, rid: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(sweep)
    assert exp is not None, f"no MLflow experiment named after the sweep {sweep!r}"
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`esopt.run_id` = '{rid}'")
    assert len(runs) == 1, f"{len(runs)} MLflow runs for run {rid}"
    return client, runs[0]


# --- a real MLflow server --------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def mlflow_server(tmp_path_factory):
    """``mlflow server`` on a free port of 127.0.0.1, started when the module starts (it takes
    a while: the tests that need no server run meanwhile), its URI once it answers /health."""
    d = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{d}/mlflow.db", "--default-artifact-root", str(d / "artifacts")],
        stdout=subprocess.DEVNULL, stderr=open(d / "server.log", "w"), start_new_session=True)
    uri = f"http://127.0.0.1:{port}"

    def ready() -> str:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None, (d / "server.log").read_text()[-2000:]
            try:
                if urllib.request.urlopen(f"{uri}/health", timeout=2).status == 200:
                    return uri
            except OSError:
                pass
            assert time.time() < deadline, "mlflow server did not answer /health in 120 s"
            time.sleep(0.5)

    ready.proc = proc
    try:
        yield ready
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # nothing to save: the tests have read it
        proc.wait()


# --- the tests -------------------------------------------------------------------------------------
def test_grpo_lines_and_summary_reach_each_tracker_and_mlflow_defaults_to_a_store_in_the_sweep(tmp_path):
    rc = run_config(*GRPO, f"sweep.root={tmp_path}", "logger=[tensorboard,wandb,mlflow]", "logger_opts.wandb.mode=offline")
    summary = run(rc)
    assert summary["status"] == "completed", summary["error"]
    rd = the_run(tmp_path)
    want, last = expected(rd), rc.iterations
    assert ("train/reward_mean", 1) in want and ("train/loss", 2) in want and ("eval/pass@1", 2) in want
    tb = tensorboard_scalars(tmp_path / "default" / "tensorboard" / rd.name)
    assert {k: tb[k] for k in want} == as_float32(want)
    client, mrun = mlflow_client_and_run(f"sqlite:///{tmp_path}/default/mlflow.db", "default", rd.name)
    got = mlflow_values(client, mrun.info.run_id)
    assert {k: got[k] for k in as_mlflow(want)} == as_mlflow(want)
    assert got[("final/pass_at_1", last)] == summary["final"]["pass@k"]["1"]
    assert got[("base/pass_at_1", last)] == summary["base"]["pass@k"]["1"]
    assert mrun.data.params["algo"] == "grpo"
    (d,) = (tmp_path / "default" / "wandb").glob("offline-run-*")
    info = wandb_run(d)
    assert wandb_values([info]) == want
    assert {k: info["summary"][k] for k in final_expected(summary)} == final_expected(summary)


def test_a_dead_mlflow_server_is_one_warning_and_the_run_completes_with_the_other_trackers(tmp_path, capsys):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    rc = run_config(*ES, "iterations=2", f"sweep.root={tmp_path}", "logger=[mlflow,tensorboard]",
                    f"logger_opts.mlflow.tracking_uri={uri}")
    t0 = time.time()
    summary = run(rc)
    took = time.time() - t0
    assert summary["status"] == "completed", summary["error"]
    warnings = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert len(warnings) == 1 and warnings[0].startswith("esopt: warning: logger mlflow failed for run"), warnings
    rd = the_run(tmp_path)
    tb = tensorboard_scalars(tmp_path / "default" / "tensorboard" / rd.name)
    assert {k: tb[k] for k in expected(rd)} == as_float32(expected(rd))
    assert took < 60, took  # bounded retries: seconds, not MLflow's default minutes


def test_a_tracker_that_never_answers_is_off_for_the_rest_of_the_sweep_after_one_warning(
        tmp_path, capsys, monkeypatch):
    """Issue 42: an MLflow server that accepts connections and never answers stalled every run
    by 90-100 s. Each call now has a deadline (logger_opts.mlflow.timeout_s): the first run
    misses it once, warns and marks MLflow off for the sweep; the sweep's next run skips it
    without a word; a later sweep tries again. The server is a real listening socket."""
    from esopt.runtime import trackers

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)                      # the kernel completes each connection; nobody answers
        uri = f"http://127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setenv(trackers.SWEEP_START, repr(time.time()))      # what the sweeper sets
        took, ids = [], []
        for seed in (0, 1):
            rc = run_config(*ES, "iterations=1", f"seed={seed}", f"sweep.root={tmp_path}", "logger=[mlflow]",
                            f"logger_opts.mlflow.tracking_uri={uri}", "logger_opts.mlflow.timeout_s=1")
            t0 = time.time()
            summary = run(rc)
            took.append(time.time() - t0)
            ids.append(run_id(rc))
            assert summary["status"] == "completed", summary["error"]
    warnings = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"esopt: warning: logger mlflow did not answer within 1 s "
                                  f"(logger_opts.mlflow.timeout_s) in run {ids[0]}"), warnings
    marker = tmp_path / "default" / trackers.OFF_DIR / "mlflow.off"
    assert json.loads(marker.read_text())["run_id"] == ids[0]
    assert took[0] - took[1] < 10, took       # one deadline lost, not MLflow's 30 s x retries
    monkeypatch.setenv(trackers.SWEEP_START, repr(time.time() + 1))  # the next sweep tries it again
    t = trackers.MLflow(trackers.MLflow.Options(tracking_uri=uri), trackers.RunInfo(
        "default", tmp_path / "default", "x", {}, RunDir(tmp_path / "x")))
    assert not trackers.off_in_this_sweep(t)
    with pytest.raises(ConfigError, match="logger_opts.mlflow.timeout_s must be a number of seconds > 0"):
        run_config(*ES, f"sweep.root={tmp_path}", "logger=[mlflow]", "logger_opts.mlflow.timeout_s=0")


def test_bad_logger_input_is_one_line_before_dispatch_and_the_run_id_ignores_the_logger(tmp_path, monkeypatch):
    r = cli("esopt.sweep", *ES, "iterations=1", f"sweep.root={tmp_path}", "logger=[tensorboard,wandbb]")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "esopt: error: unknown logger 'wandbb' (known: tensorboard, wandb, mlflow; e.g. logger=[tensorboard])"]
    assert not (tmp_path / "default" / "runs").exists()

    base = ES + ["iterations=1", f"sweep.root={tmp_path}"]
    for uri, why in (("htp://127.0.0.1:5000", "scheme 'htp'"), ("http://:5000", "no host"),
                     ("http://127.0.0.1:50x0", "Port could not be cast"), ("sqlite://", "no path")):
        with pytest.raises(ConfigError, match=why):
            run_config(*base, "logger=mlflow", f"logger_opts.mlflow.tracking_uri={uri}")
    with pytest.raises(ConfigError, match="logger_opts.wandb.mode must be one of online, offline, disabled"):
        run_config(*base, "logger=[wandb]", "logger_opts.wandb.mode=onlin")
    with pytest.raises(ConfigError, match="unknown logger_opts.mlflow key"):
        run_config(*base, "+logger_opts.mlflow.uri=x")
    with monkeypatch.context() as m, pytest.raises(
            ConfigError, match=r"logger=wandb needs the wandb package, which is not installed: pip install wandb"):
        m.setitem(sys.modules, "wandb", None)  # Python's own way to make an import fail
        run_config(*base, "logger=[tensorboard,wandb]")

    plain = run_config(*base)
    tracked = run_config(*base, "logger=[tensorboard,mlflow]", "logger_opts.mlflow.tracking_uri=http://h:1")
    assert tracked.logger == ("tensorboard", "mlflow") and plain.logger == ()
    assert run_id(tracked) == run_id(plain)


def resume_args(root: Path, uri: str) -> list[str]:
    return [*ES, "iterations=4", "es.checkpoint_every=2", f"sweep.root={root}", "logger=[tensorboard,wandb,mlflow]",
            f"logger_opts.mlflow.tracking_uri={uri}", "logger_opts.wandb.mode=offline",
            "logger_opts.mlflow.timeout_s=120"]   # a loaded CI machine's server: slow, not dead


def sweep(root: Path, uri: str) -> subprocess.Popen:
    # a user's own process: not attached to the wandb-core service of this one (WANDB_SERVICE)
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    return subprocess.Popen([sys.executable, "-m", "esopt.sweep", *resume_args(root, uri)], cwd=REPO,
                            env={**env, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_es_run_killed_and_resumed_continues_each_tracker_run_with_the_values_of_metrics_jsonl(
        tmp_path, mlflow_server, capsys):
    """The first attempt is a sweep killed after iteration 3; the second resumes in this process."""
    mlflow_server = mlflow_server()
    root = tmp_path / "results"
    p = sweep(root, mlflow_server)
    deadline = time.time() + 240
    try:
        while True:  # kill it after iteration 3 (its checkpoint is at 2)
            runs = root / "default" / "runs"
            rd = next(runs.iterdir(), None) if runs.exists() else None
            if rd and any(x["kind"] == "train" and x["iteration"] >= 3 for x in RunDir(rd).lines()):
                break
            assert p.poll() is None, p.stderr.read()[-3000:]
            assert time.time() < deadline, "the run did not reach iteration 3"
            time.sleep(0.05)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert json.loads((rd / "summary.json").read_text())["status"] == "running"
    rc = run_config(*resume_args(root, mlflow_server))
    assert run_id(rc) == rd.name
    run(rc)
    err = capsys.readouterr().err
    assert "esopt: warning" not in err, err
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["attempts"] == 2
    want, rid = expected(rd), rd.name
    assert {s for (_, s) in want} == set(range(5))  # base eval at 0, train 1..4, evals 2, 4

    # TensorBoard: one log dir per run, every step once (rewritten at the resume), float32 values
    tb = tensorboard_scalars(root / "default" / "tensorboard" / rid)
    last = max(s for (_, s) in want)
    assert {k: v for k, v in tb.items() if k[0].startswith(("train/", "eval/"))} == as_float32(want)
    assert {k: tb[(k, last)] for k in final_expected(summary)} == as_float32(final_expected(summary))

    # MLflow (a real server): one run tagged with the run id, in the sweep's experiment, holding
    # both attempts (the killed one's first steps too); the latest value per step = metrics.jsonl
    client, mrun = mlflow_client_and_run(mlflow_server, "default", rid)
    assert mrun.info.status == "FINISHED" and mrun.info.run_name == rid
    got = mlflow_values(client, mrun.info.run_id)
    assert {k: got[k] for k in as_mlflow(want)} == as_mlflow(want)
    final = as_mlflow({(k, last): v for k, v in final_expected(summary).items()})
    assert {k: got[k] for k in final} == final
    assert mrun.data.params["pop"] == "4" and mrun.data.params["es.batch_size"] == "4"
    assert not any(k.startswith("logger_opts") for k in mrun.data.params)  # a URI may hold a password
    assert mrun.data.tags["esopt.status"] == "completed"

    # wandb (offline): the two attempts are one wandb run (same id, group = sweep, name = run id)
    dirs = sorted((root / "default" / "wandb").glob(f"offline-run-*-default-{rid}"), key=lambda d: d.name)
    assert len(dirs) == 2, dirs
    attempts = [wandb_run(d) for d in dirs]
    # the killed attempt's wandb-core may die before it flushes even the run record (SIGKILL at
    # iteration 3, under load); what either attempt wrote names the same run, the last one must
    assert attempts[-1]["run"] is not None
    for a in attempts:
        if a["run"] is not None:
            assert (a["run"].run_id, a["run"].run_group, a["run"].display_name, a["run"].project) == \
                (f"default-{rid}", "default", rid, "esopt")
    # the killed attempt's wandb-core died with it, unflushed; the resumed one sent the kept lines again
    assert wandb_values(attempts[1:]) == want
    assert {k: attempts[1]["summary"][k] for k in final_expected(summary)} == final_expected(summary)
    assert attempts[1]["summary"]["status"] == "completed" and attempts[1]["exit"] == 0
    config = {i.key: json.loads(i.value_json) for i in attempts[1]["run"].config.update}
    assert config["pop"] == 4 and config["logger"] == ["tensorboard", "wandb", "mlflow"]


def test_a_server_that_dies_mid_run_is_one_warning_and_the_run_completes(tmp_path, mlflow_server, capsys):
    """Last in this file: it kills the module's MLflow server after the run's first iteration."""
    import threading

    uri = mlflow_server()
    rc = run_config(*ES, "iterations=4", f"sweep.root={tmp_path}", "logger=[mlflow,tensorboard]",
                    f"logger_opts.mlflow.tracking_uri={uri}")
    rd = RunDir.for_run(rc.sweep.root, rc.sweep.name, run_id(rc))

    def kill_after_first_iteration():
        while not any(x["kind"] == "train" for x in rd.lines()):
            time.sleep(0.02)
        os.killpg(mlflow_server.proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_after_first_iteration, daemon=True)
    killer.start()
    summary = run(rc)
    killer.join(timeout=5)
    assert summary["status"] == "completed", summary["error"]
    warnings = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert len(warnings) == 1 and warnings[0].startswith("esopt: warning: logger mlflow failed for run"), warnings
    tb = tensorboard_scalars(tmp_path / "default" / "tensorboard" / rd.path.name)
    assert {k: tb[k] for k in expected(rd.path)} == as_float32(expected(rd.path))  # the others go on


def test_wandb_is_online_only_with_credentials_at_hand(tmp_path, monkeypatch):
    """An API key in the environment, or a netrc entry for the W&B host (where `wandb login`
    writes it); anything else runs offline."""
    from esopt.runtime.trackers import wandb_logged_in

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    assert not wandb_logged_in()                                   # no file
    netrc.write_text("machine example.org login user password pw\n")
    netrc.chmod(0o600)
    assert not wandb_logged_in()                                   # another host only
    netrc.write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    assert wandb_logged_in()
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.mycluster.org")
    assert not wandb_logged_in()                                   # a self-hosted server: its own entry
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_logged_in()
