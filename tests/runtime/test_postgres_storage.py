"""Optuna's database storage for real: ``tuning.storage=postgresql://...`` on a PostgreSQL server.

The server: ``ESOPT_TEST_POSTGRES_URL`` (``export ESOPT_TEST_POSTGRES_URL=$(bash
scripts/start_postgres.sh)``; CI's ``.ci/run`` does, with ``ESOPT_REQUIRE_POSTGRES=1``, where a
skip is a failure). Without it the tests that need a server skip with the reason; the journal
runs the same parallel harness as the control, and the bad-URL checks need only the driver.

Parallel workers: 4 processes (spawned, each with its own connections, like Slurm workers) run
10 trials each through the calls a run makes (``tuning.attach`` / ``report`` / ``should_prune``
/ ``finish``) with ``tuning.pruner=auto``; one trial of every round of four is a planted poor
configuration. The storage must record every trial once, with what its worker reported, and
the prunes must be the ones a single process decides from the same evidence."""

import contextlib
import multiprocessing as mp
import os
import socket
import time
import uuid

import numpy as np
import optuna
import pytest
from helpers import cli, require
from optuna.trial import TrialState

from esopt.core.errors import ConfigError
from esopt.runtime import tuning

WORKERS, ROUNDS, P, S, STEPS = 4, 10, 40, 8, (3, 6, 9, 12)
DIFFICULTY = np.random.default_rng(123).beta(0.6, 2.4, P)  # per-problem success rates, mean ~0.2


def _driver_reason() -> str | None:
    try:
        import psycopg  # noqa: F401  (SQLAlchemy's driver for postgresql://)
    except ImportError:
        return "the PostgreSQL driver is not installed (pip install -e '.[test]' brings psycopg[binary])"
    return None


def _skip(reason: str):
    require("postgres", reason)


def _postgres_url() -> str:
    """The test server's URL, checked the way a sweep checks it (skip, or fail in CI)."""
    url = os.environ.get("ESOPT_TEST_POSTGRES_URL", "")
    if not url:
        _skip("no PostgreSQL server: export ESOPT_TEST_POSTGRES_URL=$(bash scripts/start_postgres.sh)")
    if _driver_reason():
        _skip(_driver_reason())
    tuning.check_storage(url)  # set but broken: a failure, not a skip
    return url


def cfg(url, sweep, **tun):
    return {"sweep": {"root": "/nonexistent", "name": sweep}, "model": {"name": "tiny-xs"}, "algo": "es",
            "task": {"name": "countdown"}, "tuning": {"storage": url, "pruner": "auto", **tun}}


def result(counts):
    return {"pass@k": {"1": float(np.mean(counts) / S)}, "samples": S, "correct_counts": [int(c) for c in counts],
            "greedy_correct": None}


def plan(w, j):
    """Worker ``w``'s trial of round ``j``: (run id, config id, rate scale); each round's poor
    trial sits in another worker, so its reference runs are other processes' trials."""
    poor = w == j % WORKERS
    return f"w{w}-t{j}", "poor" if poor else "good", 0.05 if poor else 1.0


def reports(w, j):
    """What that trial reports at each step (its own seeded draws)."""
    rng = np.random.default_rng(1000 * w + j)
    scale = plan(w, j)[2]
    return {s: result(rng.binomial(S, np.clip(DIFFICULTY * scale, 0, 1))) for s in STEPS}


def _lane(attach, w, j, phase, state):
    """One worker's part of one phase of a step; the parallel workers and the one-process
    replay run this same code. Phases: start, then per step report, decide, finish."""
    rid, cid, scale = plan(w, j)
    step = state.get("step")
    if phase == "start":
        state.update(rt=attach(rid, {"config_id": cid, "worker": w}), pruned=None, decision=False)
    elif state["pruned"] is not None:
        return
    elif phase == "report":
        state["rt"].report(reports(w, j)[step], step)
    elif phase == "decide":
        state["decision"] = step < STEPS[-1] and state["rt"].should_prune()
    elif phase == "finish" and state["decision"]:
        state["rt"].finish("pruned")
        state["pruned"] = step
    elif phase == "finish" and step == STEPS[-1]:
        state["again"] = attach(rid, {"config_id": cid, "worker": w}).number  # a requeued attempt re-attaches
        state["rt"].finish({"status": "completed", "final": {"pass@1": 0.2 * scale}})


def _worker(url, sweep, w, barrier, queue):
    c = tuning.resolve(cfg(url, sweep))

    def attach(rid, params):
        return tuning.attach(c, rid, params)

    out = []
    try:
        for j in range(ROUNDS):
            state = {}
            _lane(attach, w, j, "start", state)
            for step in STEPS:
                state["step"] = step
                for phase in ("report", "decide", "finish"):
                    _lane(attach, w, j, phase, state)
                    barrier.wait(60)  # every worker's reports (decisions, finishes) of this step are stored
            why = state["rt"].reason if state["pruned"] is not None else None
            out.append((plan(w, j)[0], state["rt"].number, state.get("again"), state["pruned"],
                        why and why.get("reference_runs")))
    except Exception as e:  # noqa: BLE001 - reported to the test, and the others stop waiting
        barrier.abort()
        queue.put(f"worker {w}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        raise
    queue.put(out)


def replay(sweep) -> dict:
    """The same trials, phases and order in one process on an in-memory storage: run id ->
    step pruned at (or None)."""
    t = tuning.settings(cfg("", sweep)["tuning"])
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize",
                                pruner=tuning.make_pruner(t))

    def attach(rid, params):
        return tuning.RunTrial(study, tuning.start_trial(study, rid, params), "pass@1", True, "auto")

    got = {}
    for j in range(ROUNDS):
        states = [{} for _ in range(WORKERS)]
        for w, state in enumerate(states):
            _lane(attach, w, j, "start", state)
        for step in STEPS:
            for phase in ("report", "decide", "finish"):
                for w, state in enumerate(states):
                    state["step"] = step
                    _lane(attach, w, j, phase, state)
        got.update({plan(w, j)[0]: state["pruned"] for w, state in enumerate(states)})
    return got


@contextlib.contextmanager
def fresh_schema(url):
    """The server's URL with a new, empty schema first on the search path (dropped after):
    each test starts on a database without Optuna's tables, like a first sweep."""
    import sqlalchemy

    name = f"esopt_test_{uuid.uuid4().hex[:8]}"
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {name}")
    try:
        yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{name}"
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {name} CASCADE")
        engine.dispose()


@pytest.fixture(params=["journal", "postgresql"])
def storage(request, tmp_path):
    """(storage URL, sweep name): a journal file, or a fresh schema on the test server."""
    sweep = f"pg-{uuid.uuid4().hex[:8]}"
    if request.param == "journal":
        yield str(tmp_path / "optuna.journal"), sweep
        return
    with fresh_schema(_postgres_url()) as url:
        yield url, sweep


def test_four_parallel_workers_ten_trials_each_auto_pruner(storage):
    """Every trial recorded once with what its worker reported; prunes decided on the shared
    evidence: exactly the planted poor trials, at their first report, against other
    processes' runs, and the same decisions as a one-process replay."""
    url, sweep = storage
    ctx = mp.get_context("spawn")  # nothing inherited: each worker opens its own connections
    barrier, queue = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, sweep, w, barrier, queue)) for w in range(WORKERS)]
    t0 = time.time()
    for p in procs:
        p.start()
    got, errors = {}, []
    for _ in procs:
        msg = queue.get(timeout=120)
        errors += [msg] if isinstance(msg, str) else []
        got.update({} if isinstance(msg, str) else {row[0]: row[1:] for row in msg})
    assert not [e for e in errors if "BrokenBarrierError" not in e], errors  # the first failure, not its echoes
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    print(f"{url.split('://')[0]}: {WORKERS} workers x {ROUNDS} trials in {time.time() - t0:.1f}s")

    study = optuna.load_study(study_name=tuning.resolve(cfg(url, sweep)).study, storage=tuning.open_storage(url))
    trials = study.get_trials()
    expected = sorted(plan(w, j)[0] for w in range(WORKERS) for j in range(ROUNDS))
    assert len(trials) == WORKERS * ROUNDS  # none lost, none duplicated
    assert sorted(t.user_attrs["run_id"] for t in trials) == expected
    assert sorted(t.number for t in trials) == list(range(WORKERS * ROUNDS))
    for t in trials:
        rid = t.user_attrs["run_id"]
        w, j = (int(x) for x in rid[1:].split("-t"))
        number, again, pruned_at, refs = got[rid]
        assert t.number == number and t.user_attrs["worker"] == w
        sent = reports(w, j)
        steps = STEPS[:1] if plan(w, j)[1] == "poor" else STEPS
        assert t.intermediate_values == pytest.approx({s: sent[s]["pass@k"]["1"] for s in steps})
        assert t.user_attrs[f"evidence@{steps[-1]}"]["correct"] == sent[steps[-1]]["correct_counts"]
        if plan(w, j)[1] == "poor":  # planted: pruned at its first report, against good runs only
            assert t.state == TrialState.PRUNED and pruned_at == STEPS[0]
            assert t.user_attrs["pruned_because"]["reference_runs"] == refs
            assert refs and all(plan(*map(int, r[1:].split("-t")))[1] == "good" for r in refs)
            if j == 0:  # the first round: the only good runs are other processes'
                assert all(not r.startswith(f"w{w}-") for r in refs), refs
        else:  # null control: equally good runs are never pruned
            assert t.state == TrialState.COMPLETE and pruned_at is None
            assert t.value == pytest.approx(0.2) and again == number  # attach found the same trial
    assert {rid: v[2] for rid, v in got.items()} == replay(sweep)


@pytest.mark.parametrize("value,match", [
    ("postgresql://esopt:secret@127.0.0.1:notaport/esopt", "is not a database URL .*notaport"),
    ("postgresql:/esopt", "is not a database URL"),
    ("nosuchdb://a@127.0.0.1/esopt", "unknown database 'nosuchdb' for Optuna's RDBStorage"),
    ("postgresql+nosuchdriver://a@127.0.0.1/esopt", "unknown driver 'nosuchdriver' for postgresql"),
])
def test_bad_storage_url_is_one_line_config_error(value, match):
    from helpers import run_config

    with pytest.raises(ConfigError, match=match) as e:
        run_config("model=tiny-xs", "algo=es", "iterations=2", f"tuning.storage={value}")
    assert "\n" not in str(e.value) and "secret" not in str(e.value)


def test_missing_driver_names_the_package():
    import importlib.util

    packages = {"pg8000": "pg8000", "psycopg2": "psycopg2-binary", "pymysql": "PyMySQL"}
    missing = next((d for d in packages if importlib.util.find_spec(d) is None), None)
    if missing is None:
        pytest.skip("pg8000, psycopg2 and pymysql are all installed: no missing driver to ask for")
    backend = "mysql" if missing == "pymysql" else "postgresql"
    with pytest.raises(ConfigError, match=rf"needs the Python driver '{missing}', which is not installed "
                                          rf"\(pip install '{packages[missing]}'\)$"):
        tuning.check_storage(f"{backend}+{missing}://u:secret@127.0.0.1/db")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_fails_before_dispatch_within_the_timeout():
    """Nothing listening: refused at once. A server that accepts and never answers (a hung
    host, a wrong port behind a firewall): the connect timeout (5 s) bounds the wait."""
    if _driver_reason():
        _skip(_driver_reason())
    from helpers import run_config

    with pytest.raises(ConfigError, match=r"^cannot reach tuning.storage 'postgresql://esopt:\*\*\*@127.0.0.1:\d+/"
                                          r"esopt': .*refused"):
        run_config("model=tiny-xs", "algo=es", "iterations=2",
                   f"tuning.storage=postgresql://esopt:secret@127.0.0.1:{_closed_port()}/esopt")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        t0 = time.time()
        with pytest.raises(ConfigError, match="cannot reach tuning.storage .*timeout"):
            tuning.check_storage(f"postgresql://esopt@127.0.0.1:{silent.getsockname()[1]}/esopt")
        assert 4.0 <= time.time() - t0 < 15.0


def test_unreachable_server_is_one_line_exit_2_from_the_sweep(tmp_path):
    if _driver_reason():
        _skip(_driver_reason())
    from helpers import REPO, cli

    r = cli("esopt.sweep", "-m", "model=tiny-xs", "algo=es", "iterations=2", "seed=0,1",
                f"tuning.storage=postgresql://esopt@127.0.0.1:{_closed_port()}/esopt",
                f"sweep.root={tmp_path}", "sweep.name=pgdown", env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 2, r.stderr[-2000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("esopt: error:")]
    assert len(errors) == 1 and "cannot reach tuning.storage 'postgresql://esopt@127.0.0.1:" in errors[0], r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "pgdown" / "runs").exists()


def test_real_run_records_its_trial_in_postgres(tmp_path):
    """A tiny ES run with tuning.storage=postgresql://...: its trial is in the database,
    COMPLETE, with the evaluations the run reported and the value in its summary."""
    url = _postgres_url()
    from helpers import run_config

    from esopt.runtime.run import run

    sweep = f"pg-{uuid.uuid4().hex[:8]}"
    rc = run_config("model=tiny-xs", "algo=es", "iterations=2", "pop=2", "es.batch_size=2", "eval.every=1",
                    "eval.problems=4", "eval.samples=2", "task.n_train=16", "task.n_test=8", "task.n_heldout=8",
                    f"sweep.root={tmp_path}", f"sweep.name={sweep}", f"tuning.storage={url}")
    try:
        summary = run(rc)
        assert summary["status"] == "completed", summary.get("error")
        study = optuna.load_study(study_name=rc.tuning_settings.study, storage=tuning.open_storage(url))
        (trial,) = study.get_trials()
        assert trial.user_attrs["run_id"] == summary["run_id"] and trial.state == TrialState.COMPLETE
        assert trial.value == pytest.approx(summary["final"]["pass@k"]["1"])
        assert sorted(trial.intermediate_values) == [1, 2]  # every evaluation, the last one too
        assert {"evidence@1", "evidence@2"} <= set(trial.user_attrs)
    finally:
        optuna.delete_study(study_name=rc.tuning_settings.study, storage=tuning.open_storage(url))


# --- an outage: a TCP link to the real server that can be cut -------------------------------------
class Link:
    """A TCP proxy on a free port of 127.0.0.1 in front of the test server whose link can be cut
    (every open connection closed, new ones closed as they arrive) and restored: a database
    outage as the client sees it, on the real server, without stopping the one other tests use."""

    def __init__(self, url: str):
        import threading
        from urllib.parse import urlparse

        u = urlparse(url)
        self.target, self.up, self.open = (u.hostname, u.port or 5432), True, []
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.url = url.replace(f"{u.hostname}:{u.port}", f"127.0.0.1:{self.lsock.getsockname()[1]}")
        self._thread = threading.Thread
        self._thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            server = socket.create_connection(self.target)
            self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                self._thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self):
        self.up = False
        for s in self.open:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.open = []

    def restore(self):
        self.up = True

    def close(self):
        self.cut()
        self.lsock.close()


@contextlib.contextmanager
def cuttable(tmp_path):
    """(Link, cfg) on a fresh schema of the test server, the sweep under ``tmp_path``."""
    with fresh_schema(_postgres_url()) as url:
        link = Link(url)
        try:
            c = cfg(link.url, f"pg-{uuid.uuid4().hex[:8]}", pruner="none")
            c["sweep"]["root"] = str(tmp_path)
            yield link, tuning.resolve(c)
        finally:
            link.close()


def trials_of(c, rid):
    study = optuna.load_study(study_name=c.study, storage=tuning.open_storage(c.storage))
    return [t for t in study.get_trials() if t.user_attrs.get("run_id") == rid]


def test_a_short_outage_mid_run_is_retried_and_the_trial_is_complete(tmp_path, capsys):
    """Issue 42: a 10 s PostgreSQL outage failed the runs that touched the storage during it
    (Optuna's "exceeding max length"). The link is cut between two reports and restored 1.5 s
    later: the report is retried with backoff, the trial holds both reports and ends COMPLETE,
    no warning."""
    import threading

    with cuttable(tmp_path) as (link, c):
        t = tuning.attach(c, "r-short", {"seed": 0})
        t.report(result([4] * P), 3)
        link.cut()
        threading.Timer(1.5, link.restore).start()
        t0 = time.time()
        t.report(result([5] * P), 6)
        assert 1.0 < time.time() - t0 < 15
        assert not t.should_prune()
        t.finish({"status": "completed", "final": result([6] * P)})
        (trial,) = trials_of(c, "r-short")
        assert trial.state == TrialState.COMPLETE and trial.value == pytest.approx(6 / S)
        assert trial.intermediate_values == pytest.approx({3: 4 / S, 6: 5 / S})
    assert "warning" not in capsys.readouterr().err


def test_storage_down_past_the_retries_the_run_finishes_and_its_trial_is_reported_later(
        tmp_path, capsys, monkeypatch):
    """The storage stays down through the end of the run: one warning, the run goes on (no
    exception reaches it), its trial is not marked from a guess; the sweep's rereport, once the
    storage answers, records it COMPLETE with the run's value: one trial, no FAIL."""
    monkeypatch.setattr(tuning, "STORAGE_RETRY_S", (0.1, 0.2))
    with cuttable(tmp_path) as (link, c):
        t = tuning.attach(c, "r-long", {"seed": 0})
        t.report(result([4] * P), 3)
        link.cut()
        t.report(result([5] * P), 6)           # down: warned once, the run goes on
        assert not t.should_prune()
        summary = {"status": "completed", "final": result([6] * P)}
        t.finish(summary)
        err = [x for x in capsys.readouterr().err.splitlines() if x]
        assert len(err) == 2 and all(x.startswith("esopt: warning: Optuna storage") for x in err), err
        assert "***" in err[0] and "esopt:esopt@" not in err[0]          # the password hidden
        pending = tuning.pending_path(str(tmp_path), c.sweep, "r-long")
        assert pending.read_text() == "completed"
        link.restore()
        assert tuning.rereport(c, "r-long", summary, {"seed": 0})
        assert not tuning.rereport(c, "r-long", summary, {"seed": 0})   # once
        (trial,) = trials_of(c, "r-long")
        assert trial.state == TrialState.COMPLETE and trial.value == pytest.approx(6 / S)
        assert not pending.exists()
