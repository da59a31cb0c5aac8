"""Experiment trackers: every run's config, metrics lines and summary, also sent to TensorBoard,
Weights & Biases or MLflow (``logger=[tensorboard,wandb,mlflow]``, any subset; default none).

    python -m esopt.sweep -m model=tiny-s,tiny-m pop=8,16 logger=[tensorboard,mlflow]

``metrics.jsonl`` stays the record; a tracker is a copy for watching curves live and comparing
with other work. One hook feeds them all: the run's store (``esopt.core.store.RunDir``) calls
its observers on every metrics line (ES and GRPO alike: GRPO's TRL callback writes through the
same store), on every rewrite of metrics.jsonl at a resume, and on every summary; :func:`attach`
installs a :class:`Trackers` observer there. Names: the sweep groups, the run id names.

==============  =====================================================================================
tensorboard     ``<sweep>/tensorboard/<run_id>/`` (``logger_opts.tensorboard.dir`` moves the root):
                ``tensorboard --logdir results/<sweep>/tensorboard`` shows a sweep. Scalars
                ``train/<key>`` and ``eval/<key>`` at step = iteration, ``final/<key>`` /
                ``base/<key>`` at the last one, the config and summary as text. At each resume
                the run's events are rewritten from metrics.jsonl, so every step appears once.
wandb           project ``logger_opts.wandb.project`` (esopt), group = sweep, name = run id,
                id = ``<sweep>-<run_id>``, ``resume="allow"``; history keyed by ``iteration``
                (a resume sends the lines it keeps again); summary = ``final/*``, ``base/*``, status. Offline (files in
                ``<sweep>/wandb/offline-run-*``, upload with ``wandb sync``) unless logged in
                (``WANDB_API_KEY`` or a netrc entry for the W&B host) or ``WANDB_MODE`` /
                ``logger_opts.wandb.mode`` says otherwise.
mlflow          experiment = sweep, run name = run id, tag ``esopt.run_id`` (a resume finds and
                continues that run); params = the flattened config (``logger_opts`` left out, as
                everywhere: a database URI may hold a password), metrics as for TensorBoard
                (``@`` spelled ``_at_``: MLflow refuses it), status FINISHED / KILLED (pruned) /
                FAILED. ``logger_opts.mlflow.tracking_uri``: a server (``http://host:5000``) or a
                database; null = ``sqlite:///<sweep>/mlflow.db``.
==============  =====================================================================================

Failures never touch the run: a tracker that raises (server down, disk full, a library error)
prints one ``esopt: warning:`` line and is dropped for the rest of that run. A network
tracker's every call has a deadline (``logger_opts.<name>.timeout_s``, 10 s): one that does not
answer in time (a server that accepts and never replies) is left behind in a daemon thread and
dropped, and when it fails to start or misses a deadline it is off for the rest of the sweep:
a marker in ``<sweep>/.trackers/`` tells the sweep's later runs (those started after the
sweep began: ``ESOPT_SWEEP_START``, set by the sweeper) to skip it without a word, so a dead
server costs one deadline per sweep, not one per run; the next sweep tries again. MLflow's own
HTTP retries are bounded too (``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` 2, timeout 30 s, unless set). Bad input is refused before dispatch
(:func:`check`): an unknown tracker, a library not installed, a malformed MLflow URI.
Adding a tracker: one class with ``name``, ``package``, ``Options``, the four methods, and one
line in :data:`TRACKERS`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse

from esopt.core import store
from esopt.core.config import block
from esopt.core.errors import ConfigError
from esopt.runtime.context import eval_line
from esopt.runtime.tuning import SWEEP_START

LINE_LABELS = ("kind", "iteration", "phase")   # a metrics line's labels, not its values


def line_scalars(line: dict) -> dict[str, float]:
    """The numbers of a metrics line as ``<kind>/<key>`` (``train/reward_mean``, ``eval/pass@1``);
    labels, strings, nested values and nulls (NaN in metrics.jsonl) are left out."""
    kind = line.get("kind", "train")
    return {f"{kind}/{k}": float(v) for k, v in line.items()
            if k not in LINE_LABELS and isinstance(v, (int, float)) and not isinstance(v, bool)}


def summary_scalars(summary: dict) -> dict[str, float]:
    """A summary's numbers: ``base/<key>`` and ``final/<key>`` (its evaluations, flattened as
    their metrics lines are), ``wall_s``, ``tokens_generated``, ``attempts``."""
    out = {}
    for part in ("base", "final"):
        if isinstance(summary.get(part), dict):
            out.update({k.replace("eval/", f"{part}/", 1): v
                        for k, v in line_scalars({"kind": "eval", **eval_line(summary[part])}).items()})
    for key in ("wall_s", "tokens_generated", "attempts"):
        if isinstance(summary.get(key), (int, float)):
            out[key] = float(summary[key])
    return out


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay values)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _line_key(line: dict) -> tuple:
    return tuple(line.get(k) for k in LINE_LABELS)


def _last_step(lines) -> int:
    return max((int(x.get("iteration") or 0) for x in lines), default=0)


# --- the trackers ------------------------------------------------------------------------------
class Tracker:
    """One tracker of one run. ``start`` opens (or, on a resume, reopens) the tracker's run;
    ``metrics`` takes each metrics line, ``rewrite`` the whole of metrics.jsonl after a resume
    cut it back, ``finish`` the final summary (then the tracker's run is closed)."""

    name = ""
    package = ""          # the import it needs (checked before dispatch)
    pip = ""              # what installs it

    @dataclass
    class Options:
        pass

    def __init__(self, opts, run: "RunInfo"):
        self.opts, self.run = opts, run

    def start(self) -> None: ...
    def metrics(self, line: dict) -> None: ...
    def rewrite(self, lines: list[dict]) -> None: ...
    def finish(self, summary: dict) -> None: ...

    def check(self) -> None:
        """Checks of the options that need no connection (ConfigError, one line)."""

    @property
    def timeout_s(self) -> float | None:
        """Each call's deadline when it talks to a server (a network tracker's ``timeout_s``
        option); None = no deadline (local files: no server to wait for)."""
        return None


@dataclass
class RunInfo:
    sweep: str
    sweep_dir: Path
    run_id: str
    config: dict
    run_dir: store.RunDir


class TensorBoard(Tracker):
    name, package, pip = "tensorboard", "tensorboard", "tensorboard"

    @dataclass
    class Options:
        dir: Optional[str] = None   # root of the event files; null = <sweep dir>/tensorboard

    @property
    def logdir(self) -> Path:
        return Path(self.opts.dir or self.run.sweep_dir / "tensorboard") / self.run.run_id

    def start(self) -> None:
        self.writer = None
        self.rewrite(list(self.run.run_dir.lines()))  # a resume: the earlier attempts' lines, once

    def _open(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        if self.writer is not None:
            self.writer.close()
        for old in self.logdir.glob("events.out.tfevents.*"):
            old.unlink()
        self.writer = SummaryWriter(str(self.logdir), flush_secs=10)
        import yaml

        self.writer.add_text("config", "```\n" + yaml.safe_dump(self.run.config, sort_keys=False) + "\n```", 0)

    def metrics(self, line: dict, flush: bool = True) -> None:
        step = int(line.get("iteration") or 0)
        for tag, value in line_scalars(line).items():
            self.writer.add_scalar(tag, value, step)
        if flush:
            self.writer.flush()

    def rewrite(self, lines: list[dict]) -> None:
        self._open()
        for line in lines:
            self.metrics(line, flush=False)
        self.writer.flush()

    def finish(self, summary: dict) -> None:
        step = _last_step(self.run.run_dir.lines())
        for tag, value in summary_scalars(summary).items():
            self.writer.add_scalar(tag, value, step)
        self.writer.add_text("summary", "```\n" + store.dumps(
            {k: v for k, v in summary.items() if k != "config"}, indent=1) + "\n```", step)
        self.writer.close()


def wandb_logged_in() -> bool:
    """Whether W&B credentials are at hand without asking the network: ``WANDB_API_KEY``, or
    an entry for the W&B host (``WANDB_BASE_URL``, default api.wandb.ai) in the netrc file
    (``NETRC``, else ``~/.netrc``), where ``wandb login`` stores the key."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc

    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    path = Path(os.environ.get("NETRC") or "~/.netrc").expanduser()
    try:
        return bool(path.is_file() and netrc.netrc(str(path)).authenticators(host))
    except (OSError, netrc.NetrcParseError):
        return False


WANDB_MODES = ("online", "offline", "disabled")
DEADLINE_S = 10.0          # default deadline of one call to a network tracker (logger_opts.<name>.timeout_s)
OFF_DIR = ".trackers"      # <sweep>/.trackers/<name>.off: the tracker missed a deadline in this sweep


def check_timeout(t: Tracker) -> None:
    v = t.opts.timeout_s
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ConfigError(f"logger_opts.{t.name}.timeout_s must be a number of seconds > 0, got {v!r}")


class Wandb(Tracker):
    name, package, pip = "wandb", "wandb", "wandb"

    @dataclass
    class Options:
        project: str = "esopt"         # the W&B project (the sweep is the run group within it)
        entity: Optional[str] = None   # team or user; null = the account's default
        mode: Optional[str] = None     # online | offline | disabled; null = WANDB_MODE, else
        #                                online when logged in (WANDB_API_KEY / netrc), else offline
        timeout_s: float = DEADLINE_S  # a call that takes longer turns wandb off for the rest of the sweep

    def check(self) -> None:
        check_timeout(self)
        if self.opts.mode is not None and self.opts.mode not in WANDB_MODES:
            raise ConfigError(f"logger_opts.wandb.mode must be one of {', '.join(WANDB_MODES)} or null, "
                              f"got {self.opts.mode!r}")

    def mode(self) -> str:
        return self.opts.mode or os.environ.get("WANDB_MODE") or ("online" if wandb_logged_in() else "offline")

    @property
    def timeout_s(self) -> float | None:
        return self.opts.timeout_s if self.mode() == "online" else None

    def start(self) -> None:
        import wandb

        mode = self.mode()
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.run.sweep)[:48]
        quiet = os.environ.get("ESOPT_VERBOSE", "") in ("", "0")
        self.wb = wandb.init(
            project=self.opts.project, entity=self.opts.entity, group=self.run.sweep, name=self.run.run_id,
            id=f"{safe}-{self.run.run_id}", resume="allow", mode=mode, dir=str(self.run.sweep_dir),
            config=self.run.config, reinit="create_new",
            settings=wandb.Settings(silent=quiet, console="off", x_disable_stats=True))
        self.wb.define_metric("iteration")
        self.wb.define_metric("*", step_metric="iteration")
        self.sent: set = set()

    def metrics(self, line: dict) -> None:
        self.wb.log({"iteration": int(line.get("iteration") or 0), **line_scalars(line)})
        self.sent.add(_line_key(line))

    def rewrite(self, lines: list[dict]) -> None:
        """A resume: the lines kept from earlier attempts, again (same values, plotted by
        iteration), so this attempt's run files hold the whole curve even when a killed attempt
        never flushed its own (wandb writes them from a separate process)."""
        for line in lines:
            if _line_key(line) not in self.sent:
                self.metrics(line)

    def finish(self, summary: dict) -> None:
        self.wb.summary.update({**summary_scalars(summary), "status": summary.get("status")})
        self.wb.finish(exit_code=0 if summary.get("status") in ("completed", "pruned") else 1)


MLFLOW_SCHEMES = ("", "file", "http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks")
MLFLOW_STATUS = {"completed": "FINISHED", "pruned": "KILLED"}   # anything else: FAILED
RUN_ID_TAG = "esopt.run_id"


def mlflow_name(key: str) -> str:
    """A metric or param name MLflow accepts (alphanumerics, ``_ - . / : space``): ``@`` is
    spelled ``_at_`` (``eval/pass_at_1``), anything else becomes ``_``."""
    key = key.replace("@", "_at_")
    return "".join(c if c.isalnum() or c in "_-./: " else "_" for c in key)


class MLflow(Tracker):
    name, package, pip = "mlflow", "mlflow", "mlflow"

    @dataclass
    class Options:
        tracking_uri: Optional[str] = None  # http(s)://host:port (a server), sqlite:///file.db,
        #                                     postgresql://..., file:/dir; null = sqlite:///<sweep dir>/mlflow.db
        timeout_s: float = DEADLINE_S       # a call that takes longer turns MLflow off for the rest of the sweep

    @property
    def uri(self) -> str:
        return self.opts.tracking_uri or f"sqlite:///{(self.run.sweep_dir / 'mlflow.db').resolve()}"

    @property
    def timeout_s(self) -> float | None:
        local = urlparse(self.uri).scheme.split("+")[0] in ("", "file", "sqlite")
        return None if local else self.opts.timeout_s

    def check(self) -> None:
        check_timeout(self)
        uri = self.opts.tracking_uri
        if uri is None:
            return
        bad = f"logger_opts.mlflow.tracking_uri {uri!r} is not a tracking URI"
        try:
            u = urlparse(str(uri))
            u.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as e:
            raise ConfigError(f"{bad} ({e})") from None
        scheme = u.scheme.split("+")[0]
        if not str(uri).strip() or scheme not in MLFLOW_SCHEMES:
            raise ConfigError(f"{bad} (scheme {u.scheme!r}; known: http, https, sqlite, postgresql, "
                              "mysql, mssql, file, databricks, or a directory path)")
        if scheme in ("http", "https") and not u.hostname:
            raise ConfigError(f"{bad} (no host: e.g. http://127.0.0.1:5000)")
        if scheme in ("sqlite", "file") and not (u.path or u.netloc):
            raise ConfigError(f"{bad} (no path: e.g. sqlite:///path/to/mlflow.db)")

    def start(self) -> None:
        import logging

        for var, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"), ("MLFLOW_HTTP_REQUEST_TIMEOUT", "30"),
                           ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")):
            os.environ.setdefault(var, value)
        from mlflow.tracking import MlflowClient

        if os.environ.get("ESOPT_VERBOSE", "") in ("", "0"):  # "creating database tables" and such
            for name in ("mlflow", "alembic"):
                logging.getLogger(name).setLevel(logging.WARNING)

        self.client = c = MlflowClient(self.uri)
        exp = c.get_experiment_by_name(self.run.sweep)
        exp_id = exp.experiment_id if exp is not None else c.create_experiment(self.run.sweep)
        found = c.search_runs([exp_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{self.run.run_id}'", max_results=1)
        if found:  # a resume: continue the same MLflow run
            self.id = found[0].info.run_id
            c.update_run(self.id, status="RUNNING")
            return
        self.id = c.create_run(exp_id, run_name=self.run.run_id,
                               tags={RUN_ID_TAG: self.run.run_id, "esopt.sweep": self.run.sweep}).info.run_id
        from mlflow.entities import Param

        params = [Param(mlflow_name(k)[:250], (v if isinstance(v, str) else json.dumps(v))[:6000])
                  for k, v in flatten(self.run.config).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            c.log_batch(self.id, params=params[i:i + 100])

    def _log(self, values: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        c = [Metric(mlflow_name(k), v, now, step) for k, v in values.items()]
        for i in range(0, len(c), 1000):
            self.client.log_batch(self.id, metrics=c[i:i + 1000])

    def metrics(self, line: dict) -> None:
        self._log(line_scalars(line), int(line.get("iteration") or 0))

    def finish(self, summary: dict) -> None:
        self._log(summary_scalars(summary), _last_step(self.run.run_dir.lines()))
        self.client.set_tag(self.id, "esopt.status", str(summary.get("status")))
        self.client.set_terminated(self.id, MLFLOW_STATUS.get(summary.get("status"), "FAILED"))


TRACKERS: dict[str, type[Tracker]] = {t.name: t for t in (TensorBoard, Wandb, MLflow)}


# --- configuration ----------------------------------------------------------------------------
def default_options() -> dict:
    """The ``logger_opts`` block's defaults, one entry per tracker (esopt.cli.configs)."""
    return {name: dataclasses.asdict(t.Options()) for name, t in TRACKERS.items()}


def _options(rc, name: str):
    raw = (getattr(rc, "logger_opts", None) or {}).get(name)
    return block(TRACKERS[name].Options, raw, f"logger_opts.{name}")


def check(rc) -> dict:
    """Before dispatch: every name of ``logger`` is a tracker, its library is installed, its
    options are well-formed (ConfigError, one line). Returns the run's trackers' typed options,
    by name in ``logger``'s order: what the run's plan keeps (``plan.tracker_options``)."""
    names = tuple(getattr(rc, "logger", ()) or ())
    unknown_opts = sorted(set(getattr(rc, "logger_opts", None) or {}) - set(TRACKERS))
    if unknown_opts:
        raise ConfigError(f"unknown logger_opts key {unknown_opts[0]!r} (known: {', '.join(TRACKERS)})")
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(f"unknown logger {name!r} (known: {', '.join(TRACKERS)}; e.g. logger=[tensorboard])")
        t = TRACKERS[name]
        try:
            found = importlib.util.find_spec(t.package) is not None
        except (ImportError, ValueError):  # a parent package missing, or a blocked import
            found = False
        if not found:
            raise ConfigError(f"logger={name} needs the {t.package} package, which is not installed: "
                              f"pip install {t.pip}  (or pip install 'esopt[trackers]')")
    options = {name: _options(rc, name) for name in TRACKERS}
    for name, opts in options.items():
        TRACKERS[name](opts, None).check()
    return {name: options[name] for name in dict.fromkeys(names)}


# --- the observer a run's store calls -------------------------------------------------------------
class Trackers:
    """The run's trackers behind the store's observer calls; a tracker that raises or misses its
    deadline is dropped after one warning line, and nothing it does reaches the run."""

    def __init__(self, trackers: list[Tracker]):
        self.trackers = []
        for t in trackers:
            if off_in_this_sweep(t):
                continue          # it missed a deadline earlier in this sweep: warned there
            try:                  # seconds of imports (mlflow) are not the server's answer time
                importlib.import_module(t.package)
            except Exception:  # noqa: BLE001 - start() reports it
                pass
            if self._call(t, "start", sweep_wide=True):
                self.trackers.append(t)

    def _call(self, t: Tracker, method: str, *args, sweep_wide: bool = False) -> bool:
        try:
            if not bounded(getattr(t, method), args, t.timeout_s):
                mark_off(t, f"no answer within {t.timeout_s:g} s")
                print(f"esopt: warning: logger {t.name} did not answer within {t.timeout_s:g} s "
                      f"(logger_opts.{t.name}.timeout_s) in run {t.run.run_id}; it is off for the rest of "
                      "this sweep (metrics.jsonl has everything)", file=sys.stderr)
                return False
            return True
        except Exception as e:  # noqa: BLE001 - a tracker never fails the run
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            if sweep_wide:        # it cannot start (server down): the sweep's other runs would not either
                mark_off(t, msg)
            print(f"esopt: warning: logger {t.name} failed for run {t.run.run_id} ({msg}); it is off for "
                  f"the rest of this {'sweep' if sweep_wide else 'run'} (metrics.jsonl has everything)",
                  file=sys.stderr)
            return False

    def _each(self, method: str, *args) -> None:
        self.trackers = [t for t in self.trackers if self._call(t, method, *args)]

    # the store's observer interface (esopt.core.store.RunDir.observers)
    def on_metrics(self, line: dict) -> None:
        self._each("metrics", line)

    def on_rewrite(self, lines: list[dict]) -> None:
        self._each("rewrite", lines)

    def on_summary(self, summary: dict) -> None:
        if summary.get("status") not in (None, "running"):  # the end: send it, close the runs
            self._each("finish", summary)
            self.trackers = []


def bounded(fn, args: tuple, timeout: float | None) -> bool:
    """``fn(*args)``; with a ``timeout``, in a daemon thread that is left behind (False) when it
    has not returned by then. Its exception is raised here."""
    if timeout is None:
        fn(*args)
        return True
    box: dict = {}

    def call() -> None:
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    th = threading.Thread(target=call, daemon=True, name="esopt-tracker")
    th.start()
    th.join(timeout)
    if th.is_alive():
        return False
    if "error" in box:
        raise box["error"]
    return True


def _off_path(t: Tracker) -> Path:
    return t.run.sweep_dir / OFF_DIR / f"{t.name}.off"


def mark_off(t: Tracker, why: str) -> None:
    """Tell the sweep's later runs that ``t`` is down (best effort: a marker that cannot be
    written costs each run one deadline, nothing more)."""
    try:
        store.atomic_write_json(_off_path(t), {"at": time.time(), "run_id": t.run.run_id, "why": why})
    except OSError:
        pass


def off_in_this_sweep(t: Tracker) -> bool:
    """Whether a run of this sweep (begun at ``ESOPT_SWEEP_START``) marked ``t`` down."""
    try:
        start = float(os.environ[SWEEP_START])
        return float(json.loads(_off_path(t).read_bytes())["at"]) >= start
    except (KeyError, ValueError, TypeError, OSError):
        return False


def attach(plan, rid: str, rd: store.RunDir) -> Trackers | None:
    """Start the run's trackers (``logger``, with the options its plan holds:
    ``plan.tracker_options``) and let its store feed them; None when none."""
    if not plan.tracker_options:
        return None
    config = {k: v for k, v in plan.to_dict().items() if k != "logger_opts"}  # URIs may hold passwords
    info = RunInfo(sweep=plan.sweep.name, sweep_dir=store.sweep_dir(plan.sweep.root, plan.sweep.name), run_id=rid,
                   config=config, run_dir=rd)
    group = Trackers([TRACKERS[n](opts, info) for n, opts in plan.tracker_options.items()])
    rd.observers.append(group)
    return group
