"""Optuna 5, used directly: one study per group, every run a trial, pruning inside runs.

Why not ``hydra-optuna-sweeper``: it pins ``optuna<3`` and tells Optuna only whole-run results,
so it cannot prune. Here each run attaches to its own trial and reports its held-out metric at
every evaluation; the pruner decides whether it goes on.

- Group and study: runs of one (sweep, model, algo, task) share a study named
  ``esopt:<sweep>:<model>:<algo>:<task>`` (:func:`resolve`, which names the study and the storage once per run), so pruners compare like with
  like. The direction comes from ``tuning.direction`` (default maximize).
- Storage: ``tuning.storage`` null = a journal file ``<sweep.root>/<sweep.name>/optuna.journal``
  (``JournalStorage(JournalFileBackend(path))``: several writers on a shared filesystem); a
  path ending in ``.journal``/``.log`` = that journal file; anything with ``://`` = a database
  URL (e.g. ``postgresql://user@host/db``; not SQLite for parallel writers), checked before
  dispatch (:func:`check_storage`: it parses, its driver is installed, the server answers). Open
  it with ``optuna-dashboard <file-or-url>``. Which to pick: sweeps/README.md.
- Trials: :func:`attach` creates the run's trial or attaches to the one already made for this
  run id (by the ``optuna`` sweeper, or by an earlier, interrupted attempt of the same run); the
  run id and the run's key params are user attributes. Finishing marks the trial
  ``COMPLETE`` (value = final metric), ``PRUNED`` or ``FAIL``.
- Pruners are not stored with a study, so every worker builds the same one from the config
  knobs (:func:`make_pruner`), through the pruner registry (``esopt.runtime.pruners``):
  ``none`` (default), ``auto`` (recommended: noise-aware, compares configurations with
  confidence bounds on per-problem evidence; ``esopt.runtime.pruning``), ``median``,
  ``percentile``, ``successive_halving``, ``hyperband``, ``wilcoxon``.
- Every report also stores the evaluation's per-problem results with the trial
  (``evidence@<step>``) and the run's ``config_id`` (its config without the seed), the
  evidence the ``auto`` pruner pools; a pruned run records why (:meth:`RunTrial.should_prune`,
  ``summary.json`` ``pruning``).
- :func:`check` validates the block against the whole run (metric produced by the evaluator,
  warmup shorter than the run) before anything is dispatched (``esopt.runtime.validate``).

Config: the ``tuning:`` block, :class:`TuningConfig` (every knob documented there).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from esopt.core.config import block
from esopt.core.errors import ConfigError
from esopt.core.store import atomic_path

@dataclass
class TuningConfig:
    """The ``tuning:`` block: Optuna bookkeeping and pruning for every run. Each run is a trial
    in the study of its group (sweep, model, algo, task); it reports ``metric`` at every
    evaluation and the pruner decides whether it goes on."""

    enabled: bool = True
    metric: str = "pass@1"            # pass@K | maj@K | greedy | entropy | format (held-out eval)
    direction: str = "maximize"
    storage: Optional[str] = None     # null = <sweep.root>/<sweep.name>/optuna.journal; a path; a DB URL
    study: Optional[str] = None       # null = esopt:<sweep>:<model>:<algo>:<task>
    pruner: str = "none"              # none | auto (recommended) | median | percentile | successive_halving
    #                                   | hyperband | wilcoxon
    # auto, median, percentile
    n_warmup_steps: int = 0           # warmup: a trial is not pruned before this step (iteration)
    # auto (esopt.runtime.pruning): prune when the upper bound of the trial's configuration is
    # below the lower bound of the best other configuration at the same step
    confidence: float = 0.95          # level of each two-sided bound
    pool_seeds: bool = True           # compare configurations (seeds pooled); false = single runs
    baseline: bool = True             # also prune when the configuration is worse than the base model
    #                                   it started from (paired with the run's evaluation before training)
    baseline_confidence: float = 0.99  # level of that bound (stricter: it is tested at every report)
    # median / percentile
    n_startup_trials: int = 5         # trials that are never pruned (and set the reference)
    interval_steps: int = 1
    n_min_trials: int = 1
    percentile: float = 25.0          # percentile pruner: prune below this percentile of the others
    # successive_halving / hyperband (resource = iteration of the report)
    min_resource: Any = "auto"
    max_resource: Any = "auto"
    reduction_factor: int = 3
    min_early_stopping_rate: int = 0
    bootstrap_count: int = 0
    # wilcoxon
    p_threshold: float = 0.1
    n_startup_steps: int = 2


@dataclass(frozen=True)
class TuningSettings:
    """The ``tuning:`` block resolved for one run (:func:`resolve`): made once by
    ``esopt.runtime.validate`` and kept in the run's plan (``plan.tuning_settings``, also in
    ``plan.json``). The run's trial, its study, its pruner and the sweep's table read this; nothing
    below validate reads the block itself."""

    enabled: bool
    metric: str           # reported at every evaluation, pruned on, shown in the sweep's table
    direction: str        # maximize | minimize
    pruner: str           # its registered name (esopt.runtime.pruners)
    study: str            # tuning.study, else esopt:<sweep>:<model>:<algo>:<task>
    storage: str          # tuning.storage, else <sweep.root>/<sweep.name>/optuna.journal
    root: str             # sweep.root and sweep.name: where a run's pending mark goes (pending_path)
    sweep: str
    knobs: dict = field(default_factory=dict)  # the whole block, checked (settings): what the pruner is built from

    @property
    def prunes(self) -> bool:
        """Whether its pruner can prune at all (``none`` cannot)."""
        from esopt.runtime import pruners

        return pruners.get(self.pruner).prunes


JOURNAL_NAME = "optuna.journal"
# Set by the sweepers as they launch (time.time()): a process that sees it is a run of a sweep
# whose storage and trackers were checked before dispatch (esopt.runtime.trackers reads it too).
SWEEP_START = "ESOPT_SWEEP_START"
# Waits between tries of a storage call made during a run (a database that restarts, a network
# blip): ~15 s in all, then the run goes on without its trial, which the sweep reports later.
STORAGE_RETRY_S = (0.5, 1.0, 2.0, 4.0, 8.0)


class StorageDown(RuntimeError):
    """The Optuna storage did not answer through every retry of :data:`STORAGE_RETRY_S`."""


def storage_errors() -> tuple[type, ...]:
    """What a storage that does not answer raises: the driver's connection errors (SQLAlchemy's
    OperationalError / InterfaceError; Optuna wraps a failed commit in StorageInternalError,
    saying "e.g. exceeding max length"), a journal's OSError."""
    import optuna
    import sqlalchemy.exc

    return (optuna.exceptions.StorageInternalError, sqlalchemy.exc.OperationalError,
            sqlalchemy.exc.InterfaceError, OSError)


def cause(e: BaseException) -> str:
    """The first line of the innermost cause (the driver's words, not Optuna's wrapper)."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def retrying(fn, *args, waits=None):
    """``fn(*args)``, tried again after each wait of ``waits`` (:data:`STORAGE_RETRY_S`) while
    the storage does not answer; then :class:`StorageDown` naming the cause."""
    import time

    for wait in (*(STORAGE_RETRY_S if waits is None else waits), None):
        try:
            return fn(*args)
        except storage_errors() as e:
            if wait is None:
                raise StorageDown(cause(e)) from e
            time.sleep(wait)


def settings(tuning: Mapping | None) -> dict:
    """The tuning block with defaults filled in and checked (ConfigError, one line)."""
    from esopt.runtime import pruners

    t = asdict(block(TuningConfig, tuning, "tuning"))
    t["pruner"] = pruners.get(str(t["pruner"]).lower()).name
    if t["direction"] not in ("maximize", "minimize"):
        raise ConfigError(f"tuning.direction must be maximize or minimize, got {t['direction']!r}")
    if not 0.0 <= float(t["percentile"]) <= 100.0:
        raise ConfigError(f"tuning.percentile must be in [0, 100], got {t['percentile']}")
    for key in ("enabled", "pool_seeds", "baseline"):
        if not isinstance(t[key], bool):
            raise ConfigError(f"tuning.{key} must be true or false, got {t[key]!r}")
    if not 0.0 < float(t["confidence"]) < 1.0:
        raise ConfigError(f"tuning.confidence must be in (0, 1), got {t['confidence']}")
    if not 0.0 < float(t["baseline_confidence"]) < 1.0:
        raise ConfigError(f"tuning.baseline_confidence must be in (0, 1), got {t['baseline_confidence']}")
    if int(t["n_warmup_steps"]) < 0:
        raise ConfigError(f"tuning.n_warmup_steps must be >= 0, got {t['n_warmup_steps']}")
    if not 0.0 < float(t["p_threshold"]) <= 1.0:
        raise ConfigError(f"tuning.p_threshold must be in (0, 1], got {t['p_threshold']}")
    if int(t["reduction_factor"]) < 2:
        raise ConfigError(f"tuning.reduction_factor must be >= 2, got {t['reduction_factor']}")
    if not _METRIC.match(str(t["metric"])):
        raise ConfigError(f"tuning.metric must look like pass@1, maj@8, greedy or entropy, got {t['metric']!r}")
    return t


_METRIC = re.compile(r"^(?:(pass|maj)@(\d+)|[A-Za-z_][\w.]*)$")


def produced_metrics(ev) -> list[str]:
    """The scalar metrics the evaluator produces for an ``eval:`` block
    (``esopt.evaluator.evaluate``): pass@k and maj@k for k in ``k_values(samples)``, greedy
    (when ``eval.greedy``), entropy, format."""
    from esopt.evaluator import k_values

    ks = k_values(int(ev.samples))
    return ([f"pass@{k}" for k in ks] + [f"maj@{k}" for k in ks] + (["greedy"] if ev.greedy else [])
            + ["entropy", "format"])


def check(rc) -> TuningSettings:
    """Check the tuning block against the whole run (a RunConfig), before dispatch: the block
    itself (:func:`settings`), ``tuning.metric`` among the metrics the evaluator produces,
    ``auto`` given a per-problem metric, and a pruner with at least one evaluation it may
    prune: a step that is a multiple of ``eval.every`` (or a sequence's phase end), at or
    after ``tuning.n_warmup_steps`` and before the run's end (the last evaluation is never
    pruned). Returns the run's :class:`TuningSettings` (:func:`resolve`); ConfigError (one line)
    otherwise."""
    from esopt import algorithms

    resolved = resolve(rc)
    t = resolved.knobs
    if not t["enabled"]:
        return resolved
    metric = str(t["metric"])
    produced = produced_metrics(rc.eval)
    if metric not in produced:
        raise ConfigError(f"tuning.metric {metric!r} is not produced by the evaluator with eval.samples="
                          f"{rc.eval.samples}, eval.greedy={str(rc.eval.greedy).lower()} "
                          f"(it produces: {', '.join(produced)})")
    from esopt.runtime import pruners

    pruner = pruners.get(t["pruner"])
    if pruner.check is not None:
        pruner.check(t)
    algo = algorithms.get(rc.algo)
    if not pruner.prunes or not algo.trains:
        return resolved
    warmup, total, every = int(t["n_warmup_steps"]), int(rc.iterations), int(rc.eval.every)
    if warmup >= total:
        raise ConfigError(f"tuning.n_warmup_steps={warmup} is not shorter than the run (iterations={total}): "
                          f"tuning.pruner={t['pruner']} could prune nothing")
    first = max(every, -(-warmup // every) * every)  # the first multiple of eval.every at or after the warmup
    phase_ends = itertools.accumulate(algo.budgets(rc))
    if not (first < total or any(warmup <= s < total for s in phase_ends)):  # arithmetic: no list of steps
        raise ConfigError(f"tuning.pruner={t['pruner']} could prune nothing: no evaluation between the warmup "
                          f"(tuning.n_warmup_steps={warmup}) and the run's last one (iterations={total}, "
                          f"eval.every={every})")
    return resolved


def make_pruner(tuning: TuningSettings | Mapping | None):
    """Build the pruner named by ``tuning.pruner`` from its knobs, identically in every worker
    (its entry in ``esopt.runtime.pruners``: which knobs each reads, how it is built): a run's
    :class:`TuningSettings`, or a raw block (checked by :func:`settings`; benchmarks, tests)."""
    from esopt.runtime import pruners

    t = tuning.knobs if isinstance(tuning, TuningSettings) else settings(tuning)
    return pruners.get(t["pruner"]).make(t)


def metric_value(result: Mapping | float | int | None, metric: str = "pass@1") -> float | None:
    """The tuning metric from an evaluator dict (``{"pass@k": {"1": v}}`` or flattened
    ``{"pass@1": v}``), or the number itself. None when absent or not finite."""
    import math

    if result is None or isinstance(result, (int, float)):
        v = result
    else:
        m = _METRIC.match(metric)
        v = result.get(metric)
        if v is None and m and m.group(1):
            v = (result.get(f"{m.group(1)}@k") or {}).get(m.group(2))
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# --- studies ---------------------------------------------------------------------------------

def _get(cfg: Any, key: str) -> Any:
    return cfg[key] if isinstance(cfg, Mapping) else getattr(cfg, key)


def resolve(cfg: Any) -> TuningSettings:
    """The run's :class:`TuningSettings` from its config (a RunConfig, or a plain dict in tests):
    the block checked (:func:`settings`), the study named ``esopt:<sweep>:<model>:<algo>:<task>``
    unless ``tuning.study`` names one, the storage a journal file
    ``<sweep.root>/<sweep.name>/optuna.journal`` unless ``tuning.storage`` names one (module doc).
    Called once per run, by ``esopt.runtime.validate`` (through :func:`check`)."""
    t = settings(_get(cfg, "tuning"))
    s = _get(cfg, "sweep")
    root, sweep = str(_get(s, "root")), str(_get(s, "name"))
    study = str(t["study"]) if t["study"] else (
        f"esopt:{sweep}:{_get(cfg, 'model')['name']}:{_get(cfg, 'algo')}:{_get(cfg, 'task')['name']}")
    storage = str(t["storage"]) if t["storage"] else str(Path(root) / sweep / JOURNAL_NAME)
    return TuningSettings(bool(t["enabled"]), str(t["metric"]), str(t["direction"]), str(t["pruner"]),
                          study, storage, root, sweep, t)


_STORAGES: dict[str, Any] = {}


_CHECKED: set[str] = set()  # database URLs check_storage found working in this process


def check_storage(url: str, timeout: int = 5) -> None:
    """Check a database ``tuning.storage`` before dispatch (ConfigError, one line): the URL
    parses (SQLAlchemy's ``dialect+driver://user:password@host:port/db``), names a database
    Optuna's RDBStorage runs on (postgresql, mysql/mariadb, sqlite), its Python driver is
    installed, the server answers a login within ``timeout`` seconds (``connect_timeout``,
    unless the URL sets one) and Optuna's tables are there or can be made (made here, before
    dispatch). A journal path is left to :func:`open_storage`. Checked once per URL and
    process; the messages hide the password."""
    hidden = re.sub(r":[^:/@]*@", ":***@", url)
    if re.match(r"^[A-Za-z][\w+.-]*:/?(?!/)", url) and not url.endswith((".journal", ".log")):
        raise ConfigError(f"tuning.storage {hidden!r} is not a database URL (dialect+driver://user:password@"
                          "host:port/db) nor a journal file path")  # e.g. postgresql:/db, a URL missing its //
    if "://" not in url or url in _CHECKED:
        return
    drivers = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient",
               "pymysql": "PyMySQL", "mariadb": "mariadb"}  # DB-API module -> its pip package
    import sqlalchemy
    from sqlalchemy.engine import make_url

    try:
        u = make_url(url)
        shown = u.render_as_string(hide_password=True)
    except Exception as e:  # noqa: BLE001 - ArgumentError, or ValueError for a bad port
        raise ConfigError(f"tuning.storage {hidden!r} is not a database URL "
                          f"(dialect+driver://user:password@host:port/db): {e}") from None
    backend = u.get_backend_name()
    if backend not in ("postgresql", "mysql", "mariadb", "sqlite"):
        raise ConfigError(f"tuning.storage {shown!r}: unknown database {backend!r} for Optuna's RDBStorage "
                          "(known: postgresql, mysql, mariadb, sqlite; or a journal file path)")
    try:
        dialect = u.get_dialect()
        dialect.import_dbapi()
    except sqlalchemy.exc.NoSuchModuleError:
        raise ConfigError(f"tuning.storage {shown!r}: unknown driver {u.get_driver_name()!r} for {backend}") from None
    except ImportError as e:
        pkg = drivers.get(getattr(e, "name", "") or "", getattr(e, "name", None) or dialect.driver)
        raise ConfigError(f"tuning.storage {shown!r} needs the Python driver {dialect.driver!r}, which is not "
                          f"installed (pip install '{pkg}')") from None
    args = {} if backend == "sqlite" or "connect_timeout" in u.query else {"connect_timeout": int(timeout)}
    # a worker of a sweep (its URL checked by the sweeper before dispatch) rides out an outage
    waits = STORAGE_RETRY_S if os.environ.get(SWEEP_START) else ()
    try:  # log in and create Optuna's tables now, once, not in many workers at the same moment
        retrying(lambda: _rdb(url, poolclass=sqlalchemy.pool.NullPool, connect_args=args).engine.dispose(),
                 waits=waits)
    except Exception as e:  # noqa: BLE001 - OperationalError, ProgrammingError (rights), schema version
        e = e.__cause__ if isinstance(e, StorageDown) else e
        why = str(getattr(e, "orig", None) or e).strip().splitlines()
        raise ConfigError(f"cannot {'open' if backend == 'sqlite' else 'reach'} tuning.storage {shown!r}: "
                          f"{why[0] if why else type(e).__name__}") from None
    _CHECKED.add(url)


def _rdb(url: str, **engine_kwargs):
    """``optuna.storages.RDBStorage(url)``. Workers that start at once on a fresh database race
    to create Optuna's tables, types and version rows: the losers get an IntegrityError or
    "already exists" (measured: 3 of 4 workers on PostgreSQL), after which those exist."""
    import optuna
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs or None)
        except (IntegrityError, ProgrammingError) as e:
            if attempt == 4 or (isinstance(e, ProgrammingError) and "already exists" not in str(e)):
                raise


def open_storage(url: str):
    """A (per-process cached) Optuna storage for a journal path or a database URL."""
    if url in _STORAGES:
        return _STORAGES[url]
    if "://" in url:
        st = _rdb(url)
    else:
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        Path(url).parent.mkdir(parents=True, exist_ok=True)
        repair_journal(url)
        try:
            st = JournalStorage(JournalFileBackend(url))
        except Exception as e:  # noqa: BLE001 - the error names the file it came from
            raise JournalError(f"Optuna journal {url} cannot be read: {type(e).__name__}: {e}") from e
    _STORAGES[url] = st
    return st


class JournalError(RuntimeError):
    """An Optuna journal that cannot be read even after :func:`repair_journal`; names the file."""


def _salvage(line: bytes) -> bytes | None:
    """A journal line as one complete JSON record (newline-terminated), or the complete record
    glued after a torn one (``<partial>{...}\n``: an append after a crash or a full disk), or None."""
    import json

    if not line.endswith(b"\n"):
        return None
    start = 0
    while start != -1:
        try:
            rec = json.loads(line[start:])
        except ValueError:
            rec = None
        if isinstance(rec, dict) and "op_code" in rec:
            return line[start:]
        start = line.find(b"{", start + 1)
    return None


def repair_journal(path: str) -> int:
    """Set aside the torn or garbage lines of the Optuna journal ``path`` before Optuna reads it
    (issue 29: a full disk left a partial last line; the next append was glued to it and every
    later reader failed). Returns the number of lines dropped or cut.

    Under Optuna's own journal lock (``JournalFileSymlinkLock``, the lock ``JournalFileBackend``
    takes by default for every append, which writes and fsyncs whole lines inside it), so no
    writer is half-way through a line while this reads: a line that is not newline-terminated
    or not a JSON record is torn, never in flight. Each complete record is kept (also one glued
    after a torn prefix); a copy of the original goes to ``<path>.torn-<timestamp>`` and one
    warning line names both. Lines before the first bad one are left byte for byte, so readers
    in other processes (which cache byte offsets of good lines only) stay valid."""
    import os
    import sys
    import time

    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return 0
    from optuna.storages.journal import JournalFileSymlinkLock
    from optuna.storages.journal._file import get_lock_file

    with get_lock_file(JournalFileSymlinkLock(path)):
        with open(path, "rb") as f:
            data = f.read()
        lines = data.splitlines(keepends=True)
        kept, bad, recovered = [], 0, 0
        for line in lines:
            good = _salvage(line)
            if good is None:
                bad += 1
            else:
                recovered += len(good) != len(line)
                kept.append(good)
        if len(kept) == len(lines) and not recovered:
            return 0
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        copy = f"{path}.torn-{stamp}"
        with open(copy, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"".join(kept))
    print(f"esopt: warning: Optuna journal {path}: {bad + recovered} torn or garbage line(s) set aside "
          f"({recovered} record(s) recovered from them); the original is kept as {copy}", file=sys.stderr)
    return bad + recovered


def open_study(t: TuningSettings, *, sampler=None, name: str | None = None):
    """Create or load the run group's study (``name``, default ``t.study``), with the configured
    pruner attached."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        storage=open_storage(t.storage), study_name=name or t.study,
        direction=t.direction, pruner=make_pruner(t), sampler=sampler, load_if_exists=True,
    )


def find_trial(study, run_id: str, states=None):
    """The newest trial of ``study`` whose user attribute ``run_id`` matches, or None."""
    found = None
    for ft in study.get_trials(deepcopy=False, states=states):
        if ft.user_attrs.get("run_id") == run_id:
            found = ft
    return found


class RunTrial:
    """A run's handle on its Optuna trial: report / should_prune / finish.

    Every storage call is retried (:func:`retrying`); a storage still down after that turns the
    trial off for the rest of the run after one warning (no pruning; nothing trained is lost) and
    :meth:`finish` tries once more, else leaves the trial to :func:`rereport`, which the sweep
    calls when the storage answers again (from the run's summary.json: no FAIL for a completed
    run, no second trial). ``trial`` None: the storage was down when the run attached."""

    def __init__(self, study, trial, metric: str, pruning: bool, pruner: str | None = None, *,
                 run_id: str | None = None, where: str = ""):
        self.study, self.trial, self.metric, self.pruning = study, trial, metric, pruning
        self.pruner = pruner
        self.reason: dict | None = None  # why should_prune() last said yes (pruners.explain)
        self.run_id, self.where = run_id, where
        self.down = trial is None        # the storage stopped answering: off for this run
        self.reopen, self.params = None, None   # attach's: how to open the study later, the trial's attrs
        self.pending: Path | None = None        # written when finish could not reach the storage

    @property
    def number(self) -> int:
        return self.trial.number

    def _safe(self, fn, *args):
        """``fn(*args)`` through :func:`retrying`; None (and the trial off, one warning) when
        the storage stays down."""
        if self.down:
            return None
        try:
            return retrying(fn, *args)
        except StorageDown as e:
            self.off(e)
            return None

    def off(self, e: BaseException) -> None:
        self.down = True
        print(f"esopt: warning: Optuna storage {self.where} does not answer ({e}); run {self.run_id} goes on "
              "without pruning, and its trial is reported when the sweep finds the storage again",
              file=sys.stderr)

    def report(self, result: Mapping | float, step: int) -> None:
        """Report the tuning metric of an evaluation (dict or number) at ``step``; an evaluator
        dict's per-problem results are stored with the trial first (``evidence@<step>``)."""
        v = metric_value(result, self.metric)
        if v is not None:
            self._safe(self._report, result, v, int(step))

    def _report(self, result, v: float, step: int) -> None:
        import warnings

        from esopt.runtime.pruning import evidence, evidence_key

        ev = evidence(result) if isinstance(result, Mapping) else None
        if ev is not None:
            self.trial.set_user_attr(evidence_key(step), ev)
        with warnings.catch_warnings():  # a resumed run (or a retry) re-reports a step: ignored
            warnings.simplefilter("ignore")
            self.trial.report(v, step)

    def record_base(self, result: Mapping | None) -> None:
        """Store the per-problem results of the run's evaluation before training with its trial
        (``evidence@base``): the auto pruner's second reference (esopt.runtime.pruning)."""
        from esopt.runtime.pruning import BASE_KEY, evidence

        ev = evidence(result)
        if ev is not None:
            self._safe(self.trial.set_user_attr, BASE_KEY, ev)

    def should_prune(self) -> bool:
        """Ask the study's pruner; when it says yes, :attr:`reason` says why (statistic,
        value, threshold, reference, step; ``esopt.runtime.pruners.explain``), also stored
        as the trial's user attribute ``pruned_because``."""
        self.reason = None
        if not (self.pruning and self._safe(self.trial.should_prune)):
            return False
        from esopt.runtime import pruners

        try:
            frozen = next(t for t in self.study.get_trials(deepcopy=False) if t.number == self.trial.number)
            self.reason = pruners.explain(self.pruner or "", self.study.pruner, self.study, frozen, self.metric)
            self.trial.set_user_attr("pruned_because", self.reason)
        except Exception as e:  # noqa: BLE001 - the explanation must not turn a prune into a failure
            self.reason = {"pruner": self.pruner, "note": f"no explanation ({type(e).__name__}: {e})"}
        return True

    def finish(self, summary: Mapping | str, value: float | None = None) -> None:
        """Mark the trial from the run's summary (or a status string): completed -> COMPLETE
        with the final metric; pruned -> PRUNED; anything else -> FAIL. A storage that stopped
        answering during the run is tried again (retried); if it still does not answer, the
        trial is left for :func:`rereport` (one warning), never marked from a guess."""
        if isinstance(summary, Mapping):
            status = summary.get("status")
            if value is None:
                value = metric_value(summary.get("final"), self.metric)
        else:
            status = summary
        if self.study is None and self.reopen is None:
            return
        self.down = False                 # the end: one more round of tries
        if self._safe(self._tell, status, value) is None and self.pending is not None:
            try:                          # tells the sweep to report it once the storage answers
                self.pending.parent.mkdir(parents=True, exist_ok=True)
                self.pending.write_text(str(status))
            except OSError:
                pass                      # the next sweep's rereport finds it anyway

    def _tell(self, status, value) -> None:
        from optuna.trial import TrialState

        if self.study is None:            # attached while the storage was down: attach now
            self.study = self.reopen()
        if self.trial is None:
            self.trial = start_trial(self.study, self.run_id, self.params)
        if status == "completed" and value is not None:
            self.study.tell(self.trial.number, value, skip_if_finished=True)
        elif status == "pruned":
            self.study.tell(self.trial.number, state=TrialState.PRUNED, skip_if_finished=True)
        else:
            self.study.tell(self.trial.number, state=TrialState.FAIL, skip_if_finished=True)
        return True


def start_trial(study, run_id: str, params: Mapping | None = None):
    """The study's RUNNING trial of this run id (a resumed or requeued attempt, or one the
    ``optuna`` sweeper made), else a new one; ``params`` (model, pop, sigma, ..., config_id)
    become user attributes beside ``run_id``."""
    from optuna.trial import Trial, TrialState

    ft = find_trial(study, run_id, states=(TrialState.RUNNING,))
    if ft is not None:
        trial = Trial(study, ft._trial_id)
    else:
        trial = study.ask()
        trial.set_user_attr("run_id", run_id)
    for k, v in dict(params or {}).items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            trial.set_user_attr(k, v)
    return trial


def attach(t: TuningSettings, run_id: str, params: Mapping | None = None) -> RunTrial | None:
    """The run's trial (:func:`start_trial` in the group's study) as a :class:`RunTrial`; a
    storage that does not answer through the retries gives a RunTrial without a trial (the run
    goes on; :meth:`RunTrial.finish` or the sweep's :func:`rereport` records it later).

    ``t``: the run's :class:`TuningSettings` (``plan.tuning_settings``). Returns None when
    ``tuning.enabled`` is false.
    """
    if not t.enabled:
        return None
    where = re.sub(r":[^:/@]*@", ":***@", t.storage)
    handle = RunTrial(None, None, t.metric, t.prunes, t.pruner, run_id=run_id, where=where)
    handle.reopen, handle.params = (lambda: open_study(t)), params
    handle.pending = pending_path(t.root, t.sweep, run_id)
    try:
        handle.study = retrying(open_study, t)
        handle.trial = retrying(start_trial, handle.study, run_id, params)
        handle.down = False
    except StorageDown as e:
        handle.off(e)
    except (ValueError, AssertionError) as e:  # Optuna's own words never name the journal
        raise JournalError(f"Optuna storage {t.storage}: {type(e).__name__}: {e}") from e
    return handle


PENDING = ".optuna-pending"   # <run>/.optuna-pending: the run ended but its trial is not recorded yet


def pending_path(root: str, sweep: str, run_id: str) -> Path:
    from esopt.core.store import RunDir

    return RunDir.for_run(root, sweep, run_id).path / PENDING


def rereport(t: TuningSettings, run_id: str, summary: Mapping, params: Mapping | None = None) -> bool:
    """Tell the study the outcome of a run recorded in the store (its ``summary.json``) when its
    trial lost that record (e.g. a torn journal line, :func:`repair_journal`): a run kept by the
    sweeper whose trial is missing or still RUNNING is marked from its summary (completed ->
    COMPLETE with its final metric, pruned -> PRUNED). Called by the sweep before dispatch;
    returns whether anything was written. ``t``: the run's :class:`TuningSettings`. A run
    renamed by ``esopt.migrate_ids`` has its trial under the id it ran with (``migrated_from``)."""
    if not t.enabled or summary.get("status") not in ("completed", "pruned"):
        return False
    study = open_study(t)
    found = find_trial(study, run_id) or find_trial(study, summary.get("migrated_from") or run_id)
    done = found is not None and found.state.is_finished()
    if not done:
        trial = start_trial(study, run_id, params)
        RunTrial(study, trial, t.metric, False, t.pruner)._tell(
            summary.get("status"), metric_value(summary.get("final"), t.metric))
    pending_path(t.root, t.sweep, run_id).unlink(missing_ok=True)
    return not done
