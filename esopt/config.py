"""Typed run configuration and its validation, in one place.

The Hydra config (``conf/config.yaml`` and its groups) is turned into a :class:`RunConfig`
once, at the entry point, by :func:`validate`. Everything a user can get wrong is checked
here and reported as a :class:`ConfigError` with one clear line, before any work starts.

Note: a top-level key named ``pop`` collides with ``DictConfig.pop`` (a method), so the raw
config is always read as ``cfg["pop"]``; code after validation uses ``RunConfig.pop``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

ALGOS = ("none", "es", "grpo", "grpo_es", "es_grpo")
SPLITS = ("train", "test", "heldout")
ANALYSES = ("sparsity", "drift", "forgetting")  # esopt/analyze.py, run after training
# Config keys each algorithm ignores (they do not enter its run id).
IRRELEVANT = {
    "none": ("pop", "sigma", "lr", "iterations", "es", "grpo", "sequence", "analysis"),
    "es": ("grpo", "sequence"),
    "grpo": ("pop", "sigma", "es", "sequence"),
    "grpo_es": (),
    "es_grpo": (),
}


class ConfigError(ValueError):
    """A user error in the configuration or input data; its message is one line."""


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation settings shared by every algorithm (see esopt.evaluate)."""

    split: str = "test"
    problems: int = 200
    samples: int = 32
    temperature: float = 0.6
    top_p: float = 1.0
    max_new_tokens: int | None = None
    seed: int = 0
    every: int = 10
    greedy: bool = True
    out: str | None = None


@dataclass(frozen=True)
class SweepConfig:
    name: str = "default"
    root: str = "results"
    dry_run: bool = False
    retry_failed: bool = False
    aggregate: bool = True
    save_model: bool = True  # write the trained weights to <run>/model/ (HF format)


@dataclass(frozen=True)
class RunConfig:
    """One run: what to train, how, and where its results land.

    ``model``, ``task``, ``engine``, ``es``, ``grpo``, ``sequence`` and ``tuning`` stay plain
    dicts (their own modules own and validate their knobs); the grid axes are typed fields.
    """

    model: dict
    task: dict
    algo: str
    engine: dict
    pop: int
    sigma: float | None
    lr: float | None
    seed: int
    iterations: int
    eval: EvalConfig
    sweep: SweepConfig
    es: dict = field(default_factory=dict)
    grpo: dict = field(default_factory=dict)
    sequence: dict = field(default_factory=dict)
    tuning: dict = field(default_factory=dict)
    analysis: tuple = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["analysis"] = list(self.analysis)
        return d

    def identity(self) -> dict:
        """The part of the config that defines the run's result (its id is a hash of this).

        Launcher, sweep bookkeeping, tuning and output paths are excluded: the same run
        launched locally or on Slurm, or in a sweep of another name, is the same run.
        """
        d = self.to_dict()
        for key in ("sweep", "tuning", "analysis"):  # analyses read the result, never change it
            d.pop(key, None)
        d["eval"].pop("out", None)
        d["engine"] = {k: v for k, v in d["engine"].items() if k in ("name",)}
        d["model"] = {k: v for k, v in d["model"].items() if k != "resources"}  # launcher-only
        # Knobs the algorithm does not read do not make a different run: a grid
        # `algo=none,es,grpo pop=8,16` has one base run and one GRPO run per seed.
        for key in IRRELEVANT[self.algo]:
            d.pop(key, None)
        return d

    def uses(self, key: str) -> bool:
        """Whether this run's algorithm reads the top-level or block key ``key``."""
        return key not in IRRELEVANT[self.algo]


def _plain(value: Any) -> Any:
    """OmegaConf containers -> plain Python (dict / list), resolving interpolations."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return value


def _number(cfg: Mapping, key: str, kind: type, *, allow_none: bool = False):
    value = cfg.get(key)
    if value is None:
        if allow_none:
            return None
        raise ConfigError(f"{key} is required")
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a number, got {value!r}")
    try:
        out = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number, got {value!r}") from None
    if kind is int and float(value) != out:
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if kind is float and not math.isfinite(out):
        raise ConfigError(f"{key} must be finite, got {value!r}")
    return out


def _eval_config(raw: Mapping) -> EvalConfig:
    known = EvalConfig.__dataclass_fields__
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"unknown eval key(s): {', '.join(unknown)} (known: {', '.join(known)})")
    ev = EvalConfig(**raw)
    if ev.split not in SPLITS:
        raise ConfigError(f"eval.split must be one of {', '.join(SPLITS)}, got {ev.split!r}")
    if _number(raw, "samples", int) < 1:
        raise ConfigError(f"eval.samples must be >= 1, got {ev.samples}")
    if _number(raw, "problems", int) < 1:
        raise ConfigError(f"eval.problems must be >= 1, got {ev.problems}")
    if _number(raw, "every", int) < 1:
        raise ConfigError(f"eval.every must be >= 1, got {ev.every}")
    if not 0.0 <= _number(raw, "temperature", float):
        raise ConfigError(f"eval.temperature must be >= 0, got {ev.temperature}")
    if not 0.0 < _number(raw, "top_p", float) <= 1.0:
        raise ConfigError(f"eval.top_p must be in (0, 1], got {ev.top_p}")
    if ev.max_new_tokens is not None and _number(raw, "max_new_tokens", int) < 1:
        raise ConfigError(f"eval.max_new_tokens must be >= 1, got {ev.max_new_tokens}")
    return ev


def validate(cfg: Any, check_data: bool = True) -> RunConfig:
    """Check a composed Hydra config and return the typed :class:`RunConfig`.

    Raises :class:`ConfigError` (one line) on the first problem found. With ``check_data``
    the task's data is loaded once (cached per task config) to catch missing or bad files.
    """
    raw = _plain(cfg)
    if not isinstance(raw, Mapping):
        raise ConfigError("the configuration is not a mapping")

    algo = raw.get("algo", "none")
    if algo not in ALGOS:
        raise ConfigError(f"unknown algo {algo!r} (known: {', '.join(ALGOS)})")

    model = dict(raw.get("model") or {})
    if not model.get("name"):
        raise ConfigError("model.name is required (e.g. model=tiny-s)")
    from esopt import models

    known_models = tuple(models.TINY) + tuple(models.REGISTRY)
    if model["name"] not in known_models and not model.get("path"):
        raise ConfigError(
            f"unknown model {model['name']!r} (known: {', '.join(known_models)}; "
            "or set model.path=/local/checkpoint)"
        )

    task = dict(raw.get("task") or {})
    from esopt import tasks

    if task.get("name") not in tasks.TASK_NAMES:
        raise ConfigError(f"unknown task {task.get('name')!r} (known: {', '.join(tasks.TASK_NAMES)})")

    engine = dict(raw.get("engine") or {"name": "hf"})
    if engine.get("name") not in ("hf", "vllm"):
        raise ConfigError(f"unknown engine {engine.get('name')!r} (known: hf, vllm)")
    threads = engine.get("threads", "auto")
    if threads not in (None, "auto") and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"engine.threads must be an integer >= 1 or auto, got {threads!r}")

    pop = _number(raw, "pop", int)
    sigma = _number(raw, "sigma", float, allow_none=True)
    lr = _number(raw, "lr", float, allow_none=True)
    seed = _number(raw, "seed", int)
    iterations = _number(raw, "iterations", int)
    if pop < 2:
        raise ConfigError(f"pop must be >= 2 (ES needs at least two members), got {pop}")
    if sigma is not None and sigma <= 0:
        raise ConfigError(f"sigma must be > 0, got {sigma}")
    if lr is not None and lr <= 0:
        raise ConfigError(f"lr must be > 0, got {lr}")
    if iterations < 1:
        raise ConfigError(f"iterations must be >= 1, got {iterations}")
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")

    sweep_raw = dict(raw.get("sweep") or {})
    unknown = sorted(set(sweep_raw) - set(SweepConfig.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"unknown sweep key(s): {', '.join(unknown)}")
    sweep = SweepConfig(**sweep_raw)
    if not sweep.name or "/" in str(sweep.name):
        raise ConfigError(f"sweep.name must be a non-empty name without '/', got {sweep.name!r}")

    analysis = raw.get("analysis") or ()
    if isinstance(analysis, str):
        analysis = (analysis,)
    unknown = [a for a in analysis if a not in ANALYSES]
    if unknown:
        raise ConfigError(f"unknown analysis {unknown[0]!r} (known: {', '.join(ANALYSES)})")

    rc = RunConfig(
        model=model,
        task=task,
        algo=algo,
        engine=engine,
        pop=pop,
        sigma=sigma,
        lr=lr,
        seed=seed,
        iterations=iterations,
        eval=_eval_config(dict(raw.get("eval") or {})),
        sweep=sweep,
        es=dict(raw.get("es") or {}),
        grpo=dict(raw.get("grpo") or {}),
        sequence=dict(raw.get("sequence") or {}),
        tuning=dict(raw.get("tuning") or {}),
        analysis=tuple(analysis),
    )
    _validate_algo(rc)
    if check_data:
        _check_task_data(rc)
    return rc


_CHECKED_TASKS: set[str] = set()


def _check_task_data(rc: RunConfig) -> None:
    """Build the task once per distinct task config and read its splits, so a missing data
    file or a malformed row is one line before anything is dispatched, not a failed run."""
    import json

    key = json.dumps([rc.task, rc.model.get("prompt_style")], sort_keys=True, default=str)
    if key in _CHECKED_TASKS:
        return
    from esopt import tasks

    task = tasks.get(rc.task, tokenizer=None, style=rc.task.get("style") or rc.model.get("prompt_style") or "compact")
    for split in {"train", rc.eval.split}:
        task.split(split)
    _CHECKED_TASKS.add(key)


def _validate_algo(rc: RunConfig) -> None:
    """Per-algorithm checks, owned by the algorithm modules (imported lazily)."""
    uses_es = rc.algo in ("es", "grpo_es", "es_grpo")
    uses_grpo = rc.algo in ("grpo", "grpo_es", "es_grpo")
    if uses_es:
        try:
            from esopt import es
        except ImportError:  # ES not installed in this checkout
            raise ConfigError("algo uses ES but esopt.es is not available") from None
        if hasattr(es, "validate"):
            es.validate(rc)
    if uses_grpo:
        try:
            from esopt import grpo
        except ImportError:
            raise ConfigError("algo uses GRPO but esopt.grpo is not available") from None
        if hasattr(grpo, "validate"):
            grpo.validate(rc)
    if rc.algo in ("grpo_es", "es_grpo"):
        split = rc.sequence.get("split", 0.5)
        if not isinstance(split, (int, float)) or not 0.0 < float(split) < 1.0:
            raise ConfigError(f"sequence.split must be in (0, 1), got {split!r}")
        if rc.iterations < 2:
            raise ConfigError(f"iterations must be >= 2 for a sequence ({rc.algo}), got {rc.iterations}")
        if rc.lr is not None:
            raise ConfigError(
                f"lr sets one step size for both phases of {rc.algo}, whose scales differ ~100x; "
                "leave lr=null and set es.lr / grpo.lr"
            )
