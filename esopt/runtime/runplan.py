"""The run's plan: one frozen, resolved record of what a run will do, made once by
``esopt.runtime.validate.validate`` and read by every layer after it.

    plan = validate(cfg)          # RunPlan (ConfigError, one line, on bad input)
    plan.phases[0].settings       # e.g. ES's ESRun: pop, sigma, lr, iterations, seed filled in
    plan.task_spec.style          # the prompt style the task is built with
    plan.engine_config            # the typed engine block (engine=auto already picked)
    plan.tuning_settings          # the tuning block resolved: metric, pruner, study, storage
    plan.layout                   # ranks x GPUs per rank, what the launcher is asked for
    run_id(plan)                  # the hash of the resolved plan (esopt.runtime.validate)

What the registry resolves is resolved here, once: each algorithm's block through its entry
(``Algorithm.resolve``: top-level sigma / lr, else the block's, else the model's
``hparams``), a sequence's phases with their share of the iterations, the engine, the task's
knobs, prompt style and token budget, the tuning block (its study and storage named). Nothing
below re-resolves them: a trainer reads its
phase's settings (``RunContext.settings``). The validated config's values are declared on the
plan (``plan.model``, ``plan.eval``, ``plan.block("es")``, ...: read from ``plan.config``, which
``config.yaml`` still comes from).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from pathlib import Path

from esopt import algorithms, engines
from esopt.core import store
from esopt.core.config import RunConfig, parse
from esopt.core.errors import ConfigError
from esopt.runtime import trackers
from esopt.runtime.layout import Layout
from esopt.runtime.tuning import TuningSettings

PLAN_FILE = "plan.json"  # <run>/plan.json: the run's plan (RunPlan.to_json), beside config.yaml


@dataclass(frozen=True)
class TaskSpec:
    """The run's task as it will be built."""

    config: dict          # the task block with its source-dependent knobs resolved (tasks.resolved)
    style: str            # the prompt style it is built with (tasks.prompt_style: task.style, else
    #                       the model's prompt_style, else chat when the model has a chat template;
    #                       a hub id that is not on disk and sets neither reads compact here, and
    #                       its loaded tokenizer decides at run time)
    max_new_tokens: int   # the task's generation budget for that style (used where eval.max_new_tokens,
    #                       es.max_new_tokens or grpo.max_completion_length is null)
    stated: str | None = None  # the style the config states (task.style, else model.prompt_style), which the
    #                            run builds the task with; None = the loaded tokenizer decides (as `style` read it)


@dataclass(frozen=True)
class PhasePlan:
    """One phase of training (a single algorithm is one phase; a sequence has two)."""

    algo: str             # the registered algorithm this phase runs
    iterations: int       # its iterations (a sequence's share: sequence.split)
    offset: int           # the run's iterations before it (its logged iteration numbers continue from here)
    settings: Any         # its block resolved by its registry entry (Algorithm.resolve): ES's ESRun,
    #                       GRPO's GRPOSettings with lr filled in; None when the entry resolves nothing


def _of_config(name: str, doc: str) -> property:
    """A declared, read-only value of the plan's validated config (``plan.model``, ``plan.sweep``)."""
    return property(lambda self: getattr(self.config, name), doc=doc)


@dataclass(frozen=True)
class RunPlan:
    """One run, validated and resolved (module docstring). Frozen: made once, read everywhere.

    The validated config's values read as the plan's own (declared below: ``plan.model``,
    ``plan.sweep``, ``plan.block("es")``); what was resolved from them is in the fields.
    """

    config: RunConfig          # the validated config (engine=auto picked, the run's own blocks, task
    #                            knobs and eval.problems resolved); config.yaml is written from it
    engine_config: Any         # the engine block typed (esopt.engines.EngineConfig subclass)
    task_spec: TaskSpec        # the task as it will be built: knobs, prompt style, token budget
    phases: tuple = ()         # PhasePlan per training phase, in order; () = trains nothing (algo=none)
    run_id: str = ""           # the hash of the resolved plan (esopt.runtime.validate.identity)
    config_id: str = ""        # the run id without the seed: its seed replicates share it (the auto pruner)
    inputs: dict = field(default_factory=dict)  # fingerprints of its local inputs (data file, weights)
    tuning_settings: TuningSettings | None = None  # the tuning block resolved (esopt.runtime.tuning.resolve)
    ood_spec: TaskSpec | None = None  # eval.ood_task as it will be built; None = no out-of-domain set
    probe_specs: tuple = ()           # eval.probes as they will be built (TaskSpec each, in order)
    layout: Layout | None = None      # its ranks x GPUs per rank (esopt.runtime.layout: the launcher request)
    tracker_options: dict = field(default_factory=dict)  # logger=[...]: each tracker's typed options, in order

    # the validated config's values (esopt.core.config.RunConfig), read-only
    model = _of_config("model", "The model block: name, path, dtype, hparams, resources.")
    task = _of_config("task", "The task block, its source-dependent knobs resolved.")
    algo = _of_config("algo", "The registered algorithm the run trains with (none: evaluation only).")
    engine = _of_config("engine", "The engine block as written (engine=auto picked); typed: engine_config.")
    pop = _of_config("pop", "The top-level population axis.")
    sigma = _of_config("sigma", "The top-level sigma axis as written (resolved: axis('sigma')).")
    lr = _of_config("lr", "The top-level lr axis as written (resolved: axis('lr')).")
    seed = _of_config("seed", "The run seed.")
    iterations = _of_config("iterations", "The run's training iterations (all phases together).")
    eval = _of_config("eval", "The eval block (EvalConfig).")
    sweep = _of_config("sweep", "The sweep block (SweepConfig): root, name, dry_run, ...")
    tuning = _of_config("tuning", "The tuning block as written (resolved: tuning_settings).")
    analysis = _of_config("analysis", "The analyses asked for after the run (analysis=[...]).")
    blocks = _of_config("blocks", "The run's own algorithm blocks as written, by name.")
    logger = _of_config("logger", "The experiment trackers (logger=[...]).")
    logger_opts = _of_config("logger_opts", "The trackers' options as written (typed: tracker_options).")
    sparsity = _of_config("sparsity", "What analysis=[sparsity] evaluates (SparsityConfig).")

    def block(self, name: str) -> dict:
        """The run's block ``name`` as written (``{}`` when it has none); resolved: :meth:`phase`."""
        return self.config.block(name)

    def phase(self, algo: str) -> PhasePlan:
        """The phase that runs ``algo`` (KeyError when none does)."""
        for p in self.phases:
            if p.algo == algo:
                return p
        raise KeyError(f"run {self.config.algo!r} has no phase {algo!r}")

    def axis(self, key: str) -> Any:
        """The value a top-level axis (``sigma``, ``lr``, ...) takes in this run: the resolved one
        when exactly one phase's settings hold it (ES's sigma; ES's or GRPO's lr alone; a
        sequence's lr is each phase's own, so none), None when the algorithm does not read it,
        else the config's."""
        if not algorithms.get(self.config.algo).uses(key):
            return None
        held = [getattr(p.settings, key) for p in self.phases if hasattr(p.settings, key)]
        return held[0] if len(held) == 1 else getattr(self.config, key)

    def trial_attrs(self, params: int | None = None) -> dict:
        """The user attributes of the run's Optuna trial (``esopt.runtime.tuning.start_trial``):
        the model and its parameter count, the axes as the run resolved them (:meth:`axis`: ES's
        sigma and lr filled in, None where the algorithm does not read one), seed, algo, config id."""
        return {"model": self.config.model["name"], "params": params, "pop": self.axis("pop"),
                "sigma": self.axis("sigma"), "lr": self.axis("lr"), "seed": self.config.seed,
                "algo": self.config.algo, "config_id": self.config_id}

    def replace_config(self, **changes: Any) -> "RunPlan":
        """The same plan over a changed config (e.g. ``algo=none`` for a one-off evaluation)."""
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **changes))

    def to_dict(self) -> dict:
        """The run's config (as ``config.yaml`` holds it); :meth:`resolved` adds what was resolved."""
        return self.config.to_dict()

    def resolved(self) -> dict:
        """What validation resolved, as plain JSON (``<run>/plan.json``): the engine, the task
        spec and each phase's settings."""
        return {"algo": self.config.algo, "run_id": self.run_id,
                "config_id": self.config_id, "inputs": self.inputs, "engine": dataclasses.asdict(self.engine_config),
                "task": dataclasses.asdict(self.task_spec),
                "tuning": None if self.tuning_settings is None else dataclasses.asdict(self.tuning_settings),
                "ood_task": None if self.ood_spec is None else dataclasses.asdict(self.ood_spec),
                "probes": [dataclasses.asdict(p) for p in self.probe_specs],
                "layout": None if self.layout is None else dataclasses.asdict(self.layout),
                "trackers": {name: dataclasses.asdict(o) for name, o in self.tracker_options.items()},
                "phases": [{"algo": p.algo, "iterations": p.iterations, "offset": p.offset,
                            "settings": settings_dict(p.settings), "type": settings_type(p.settings)}
                           for p in self.phases]}

    def to_json(self) -> str:
        """The plan as one JSON document: the config and what was resolved (:meth:`from_json`
        reads it back: the sweeper ships it to the run's worker, analyses read ``plan.json``)."""
        return json.dumps({"config": self.to_dict(), "resolved": self.resolved()}, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> "RunPlan":
        """The plan :meth:`to_json` wrote, rebuilt without resolving anything again (the config's
        types and ranges are re-read by ``esopt.core.config.parse``; ConfigError on a bad file)."""
        d = json.loads(text)
        resolved = d["resolved"]
        engine = dict(resolved["engine"])
        phases = tuple(PhasePlan(p["algo"], int(p["iterations"]), int(p["offset"]),
                                 None if p["settings"] is None else algorithms.load(p["type"])(**p["settings"]))
                       for p in resolved["phases"])
        config = parse(d["config"], blocks=algorithms.blocks())
        tuning, ood, lay = (resolved.get(k) for k in ("tuning", "ood_task", "layout"))  # absent: an earlier plan.json
        return cls(config, engines.ENGINES[engine["name"]](**engine),
                   TaskSpec(**resolved["task"]), phases, resolved["run_id"],
                   resolved["config_id"], dict(resolved["inputs"]),
                   TuningSettings(**tuning) if tuning is not None else None,
                   TaskSpec(**ood) if ood is not None else None, tuple(TaskSpec(**p) for p in resolved.get("probes") or ()),
                   Layout(**lay) if lay is not None else None,
                   {name: trackers.TRACKERS[name].Options(**o) for name, o in (resolved.get("trackers") or {}).items()})


def settings_type(settings: Any) -> str | None:
    """``"module:Class"`` of a phase's settings (None stays None), for :meth:`RunPlan.from_json`."""
    return None if settings is None else f"{type(settings).__module__}:{type(settings).__qualname__}"


def settings_dict(settings: Any) -> dict | None:
    """A phase's settings as a plain dict (None stays None)."""
    if settings is None:
        return None
    return dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)


def write(plan: RunPlan, run_dir: str | Path) -> Path:
    """``<run_dir>/plan.json`` (atomically); returns its path."""
    path = Path(run_dir) / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    store.atomic_write_text(path, plan.to_json())
    return path


def load(run_dir: str | Path) -> RunPlan | None:
    """The plan a run recorded (``<run_dir>/plan.json``); None when it has none (a run recorded
    before plans were written: read its config.yaml through validate instead)."""
    path = Path(run_dir) / PLAN_FILE
    if not path.is_file():
        return None
    try:
        return RunPlan.from_json(path.read_text())
    except (ValueError, KeyError, TypeError, AttributeError, ImportError) as e:
        raise ConfigError(f"unreadable {path}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
