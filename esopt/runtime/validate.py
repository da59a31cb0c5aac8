"""Everything checkable about a run before it is dispatched, in one call, and the run's identity.

    rc = validate(cfg)        # RunConfig, or ConfigError with one line
    rid = run_id(rc)          # 12 hex digits: results/<sweep>/runs/<rid>/

``validate`` = ``esopt.core.config.parse`` (types, ranges, unknown keys) + the model, task and
engine names + a local model directory's files (``esopt.models.check_dir``: config, tokenizer,
weight headers) + the algorithm's own checks (``esopt.algorithms``) + the task's data (built
once per distinct task config, so a missing file, a malformed row or a split left empty by
de-duplication is one line here, not a failed run).
"""

from __future__ import annotations

import json
import os
from typing import Any

from esopt import algorithms, engines, models, tasks
from esopt.core import store
from esopt.core.config import RunConfig, parse
from esopt.core.errors import ConfigError


def validate(cfg: Any, check_data: bool = True) -> RunConfig:
    """Check a composed config and return the typed RunConfig (ConfigError, one line)."""
    rc = parse(cfg)
    algo = algorithms.get(rc.algo)
    known_models = models.known_names()
    if rc.model["name"] not in known_models and not rc.model.get("path"):
        raise ConfigError(
            f"unknown model {rc.model['name']!r} (known: {', '.join(known_models)}; "
            "or set model.path=/local/checkpoint)"
        )
    if rc.task.get("name") not in tasks.TASK_NAMES:
        raise ConfigError(f"unknown task {rc.task.get('name')!r} (known: {', '.join(tasks.TASK_NAMES)})")
    if rc.model.get("path"):
        models.check_dir(rc.model["path"])
    engines.parse(rc.engine)
    algo.validate(rc)
    if check_data:
        _check_task_data(rc)
    return rc


_CHECKED_TASKS: set[str] = set()


def _check_task_data(rc: RunConfig) -> None:
    """Build the task once per distinct task config and read its splits."""
    trains = rc.algo != "none"
    key = json.dumps([rc.task, rc.model.get("prompt_style"), rc.eval.split, rc.eval.problems, trains,
                      input_fingerprints(rc).get("task.source")], sort_keys=True, default=str)
    if key in _CHECKED_TASKS:
        return
    task = tasks.get(rc.task, tokenizer=None, style=rc.task.get("style") or rc.model.get("prompt_style") or "compact")
    name, source = rc.task.get("name"), rc.task.get("source")
    where = f" of {source}" if source else ""
    for split in dict.fromkeys(["train", rc.eval.split]):
        n = len(task.split(split))
        if n == 0 and (split == rc.eval.split or trains):
            raise ConfigError(f"task {name}: the {split} split{where} is empty (after dropping rows that "
                              f"repeat earlier ones); check the file and n_train / n_test / n_heldout")
        if split == rc.eval.split and rc.eval.problems > n:
            raise ConfigError(f"eval.problems={rc.eval.problems} exceeds the {split} split of task {name} "
                              f"({n} problems); set eval.problems <= {n}")
    _CHECKED_TASKS.add(key)


def input_fingerprints(rc: RunConfig) -> dict:
    """Fingerprints (``esopt.core.store.fingerprint``) of the run's local inputs: the task's
    data (``task.source`` when it is a local file or directory) and the model's weights
    (``model.path``, or a shipped tiny model's folder). Hub names have none."""
    out = {}
    source = rc.task.get("source")
    if source and os.path.exists(os.path.expanduser(str(source))):
        out["task.source"] = store.fingerprint(str(source))
    model_dir = models.local_dir(rc.model)
    if model_dir is not None:
        out["model.path"] = store.fingerprint(model_dir)
    return out


def identity(rc: RunConfig) -> dict:
    """The part of the config that defines the run's result (its id is a hash of this).

    Launcher, sweep bookkeeping, tuning, analyses and output paths are excluded: the same run
    launched locally or on Slurm, or in a sweep of another name, is the same run. Knobs the
    algorithm does not read are excluded too: a grid ``algo=none,es,grpo pop=8,16`` has one
    base run and one GRPO run per seed. The contents of the local inputs are included
    (``inputs``: size and hash of the data file and of the weights, :func:`input_fingerprints`),
    so the same path with other data or weights is another run.
    """
    d = rc.to_dict()
    for key in ("sweep", "tuning", "analysis"):  # analyses read the result, never change it
        d.pop(key, None)
    d["eval"].pop("out", None)
    d["engine"] = {k: v for k, v in d["engine"].items() if k in ("name",)}
    d["model"] = {k: v for k, v in d["model"].items() if k != "resources"}  # launcher-only
    for key in algorithms.get(rc.algo).ignores:
        d.pop(key, None)
    fps = input_fingerprints(rc)
    if fps:  # changed data or weights at the same path -> a new run, never stale numbers
        d["inputs"] = {k: store.fingerprint_key(v) for k, v in fps.items()}
    return d


def run_id(rc: RunConfig) -> str:
    return store.run_id(identity(rc))


def uses(rc: RunConfig, key: str) -> bool:
    """Whether the run's algorithm reads the top-level or block key ``key``."""
    return algorithms.get(rc.algo).uses(key)
