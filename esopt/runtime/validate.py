"""Everything checkable about a run before it is dispatched, in one call, and the run's identity.

    plan = validate(cfg)      # the run's frozen RunPlan (esopt.runtime.runplan), or ConfigError
    rid = run_id(plan)        # 12 hex digits, the hash of the resolved plan: results/<sweep>/runs/<rid>/

``validate`` = ``esopt.core.config.parse`` (types, ranges, unknown keys) + the model, task and
engine names + a local model directory's files (``esopt.models.check_dir``: config, tokenizer,
weight headers) + the keys of every algorithm's block (a run keeps its own algorithm's blocks
only) + the algorithm's own checks (``esopt.algorithms``) + whether the engine can run
the model here (``esopt.engines.check``: vLLM installed, head size served) + the ranks and GPUs it
will use (``esopt.runtime.layout``) + the tuning block against the run (``esopt.runtime.tuning.check``:
pruner, metric, warmup) + the task's data (built once per distinct task config, so a missing file,
a malformed row or a split left empty by de-duplication is one line here, not a failed run) + a
database ``tuning.storage`` (``esopt.runtime.tuning.check_storage``: URL, driver, server answers).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from esopt import algorithms, engines, models, tasks
from esopt.core import store
from esopt.core.config import ANALYSIS_KEYS, RunConfig, block, parse
from esopt.core.errors import ConfigError
from esopt.evaluator import scored_by_likelihood
from esopt.runtime import limits, memory, trackers, tuning
from esopt.runtime.layout import layout
from esopt.runtime.runplan import PhasePlan, RunPlan, TaskSpec


def validate(cfg: Any, check_data: bool = True, cuda: bool | None = None) -> RunPlan:
    """Check a composed config and return the run's resolved, frozen :class:`RunPlan`
    (ConfigError, one line). ``engine=auto`` is resolved first (``esopt.engines.resolve``), so
    the plan, the run's id and its config.yaml name the engine it runs on. ``cuda``: None = the
    run executes here, with this process's devices and libraries; True = it goes to a job with
    GPUs and its own environment (the sweeper's Slurm GPU jobs: ``remote_cuda``), which decides
    its engine's build and checks it when the engine starts (this host's vLLM never does)."""
    remote = cuda is not None
    rc = parse(cfg, blocks=algorithms.blocks())
    rc = dataclasses.replace(rc, engine=engines.resolve(rc.engine, cuda, remote=remote))
    check_device(rc, remote)
    check_names(rc)
    algo = algorithms.get(rc.algo)
    rc = own_blocks(rc, algo)
    limits.check_sizes(rc)  # before anything sized by them is built
    known_models = models.known_names()
    if rc.model["name"] not in known_models and not rc.model.get("path"):
        raise ConfigError(
            f"unknown model {rc.model['name']!r} (known: {', '.join(known_models)}; "
            "or set model.path=/local/checkpoint)"
        )
    if rc.task.get("name") not in tasks.TASK_NAMES:
        raise ConfigError(f"unknown task {rc.task.get('name')!r} (known: {', '.join(tasks.TASK_NAMES)})")
    ood = rc.eval.ood_task
    if ood is not None and ood.get("name") not in tasks.TASK_NAMES:
        raise ConfigError(f"unknown eval.ood_task {ood.get('name')!r} (known: {', '.join(tasks.TASK_NAMES)})")
    engine_config = engines.parse(rc.engine)  # the engine block, typed once
    check_probes(rc, engine_config)
    rc = resolve_defaults(rc)
    models.check_dtype(rc.model.get("dtype", "float32"))
    if rc.model.get("save_dtype") is not None:
        models.check_dtype(rc.model["save_dtype"], key="model.save_dtype")
    if rc.model.get("path"):
        models.check_dir(rc.model["path"])
    check_remote_code(rc.model)
    lay = layout(rc, engine_config)  # the GPUs the run asks for must be the GPUs it uses
    draft = draft_plan(rc, engine_config)  # each phase's block resolved (and parsed) once
    algo.validate(dataclasses.replace(draft, layout=lay))  # the checks read the processes it runs on
    engines.check(engine_config, rc.model, remote=remote)
    tuning_settings = tuning.check(rc)
    tracker_options = trackers.check(rc)
    if check_data:  # what the run will read and write: the task's data, a database tuning.storage
        _check_task_data(rc)
        if tuning_settings.enabled:
            tuning.check_storage(tuning_settings.storage)
    plan = make_plan(rc, None, tuning_settings, lay, tracker_options, draft=draft)
    if on_gpu(rc, remote):
        memory.check(plan)  # a plan its GPUs cannot hold is refused before it is queued
    return plan


def draft_plan(rc: RunConfig, engine_config: Any = None) -> RunPlan:
    """The plan's resolved core, what the algorithms' checks read (``Algorithm.validate``): the
    typed engine block (with the engine's adjustments for the run: :func:`run_engine`), the task
    spec, and each phase's block resolved once through its registry entry
    (``Algorithm.resolve``, over the phase's share of the iterations: ``Algorithm.budgets``)."""
    engine_config = run_engine(rc, engine_config if engine_config is not None else engines.parse(rc.engine))
    draft = RunPlan(rc, engine_config, task_spec(rc.task, rc))
    algo = algorithms.get(rc.algo)
    phases, offset = [], 0
    for name, n in zip(algo.phase_names(), algo.budgets(draft)):
        phases.append(PhasePlan(name, int(n), offset, algorithms.get(name).resolve(draft, n)))
        offset += int(n)
    return dataclasses.replace(draft, phases=tuple(phases))


def make_plan(rc: RunConfig, engine_config: Any = None, tuning_settings: Any = None,
              lay: Any = None, tracker_options: dict | None = None, ids: bool = True,
              draft: RunPlan | None = None) -> RunPlan:
    """The run's :class:`RunPlan` from its validated config: each phase's block resolved through
    its registry entry (``Algorithm.resolve``, over the phase's share of the iterations:
    ``Algorithm.budgets``), the typed engine block, the task specs, the tuning settings
    (``esopt.runtime.tuning.resolve``), the layout (``esopt.runtime.layout``) and the trackers'
    options (``esopt.runtime.trackers.check``). ``ids=False``: without
    input fingerprints and ids (a what-if plan that only prices a run: esopt.design's search).
    ``draft``: its :func:`draft_plan`, already made (validate's)."""
    if draft is None:
        draft = draft_plan(rc, engine_config)
    ood = rc.eval.ood_task
    plan = dataclasses.replace(
        draft, inputs=input_fingerprints(rc) if ids else {},
        tuning_settings=tuning_settings if tuning_settings is not None else tuning.resolve(rc),
        ood_spec=task_spec(ood, rc) if ood is not None else None,
        probe_specs=tuple(task_spec(p, rc) for p in rc.eval.probes),
        layout=lay if lay is not None else layout(rc, draft.engine_config),
        tracker_options=tracker_options if tracker_options is not None else trackers.check(rc))
    if not ids:
        return plan
    return dataclasses.replace(plan, run_id=run_id(plan), config_id=config_id(plan))


def plan_in_memory(cfg: Any) -> RunPlan:
    """The plan of a run whose model its caller builds in memory (a benchmark's random-weight
    model, which no directory holds): :func:`validate`'s parsing and resolution (the run's own
    blocks, the task's defaults, each phase's block through its registry entry, the algorithm's
    checks) without the checks of the model's name and files, the engine's libraries and the
    task's data, and without ids. A run to dispatch goes through :func:`validate`."""
    rc = parse(cfg, blocks=algorithms.blocks())
    algo = algorithms.get(rc.algo)
    rc = resolve_defaults(own_blocks(dataclasses.replace(rc, engine=engines.resolve(rc.engine, None)), algo))
    draft = draft_plan(rc)
    lay = layout(rc, draft.engine_config)
    algo.validate(dataclasses.replace(draft, layout=lay))
    return make_plan(rc, lay=lay, ids=False, draft=draft)


def replan(plan: RunPlan, **changes: Any) -> RunPlan:
    """``plan`` with its config changed (``pop``, ``model``, ``eval``, ...) and planned again,
    without checks or ids: a what-if plan that only prices a run (esopt.design's search)."""
    return make_plan(dataclasses.replace(plan.config, **changes), ids=False)


def on_gpu(rc: RunConfig, remote: bool) -> bool:
    """Whether the run generates and trains on a GPU: ``engine.device=cuda``, or ``auto`` in a
    GPU job (``remote``) or here with a GPU visible."""
    device = (rc.engine or {}).get("device") or "auto"
    return device == "cuda" or (device == "auto" and (remote or engines.cuda_visible()))


def check_device(rc: RunConfig, remote: bool) -> None:
    """``engine.device=cuda`` (the GPU presets pin it) needs a GPU where the run executes: here,
    or a job that asks for GPUs (``remote``); ConfigError (one line) otherwise."""
    from esopt.engines.base import resolve_device

    if remote or resolve_device((rc.engine or {}).get("device")) != "cuda" or engines.cuda_visible():
        return
    raise ConfigError("engine.device=cuda but this run would not see a GPU: there is none here and it is not "
                      "sent to a Slurm job with GPUs (hydra/launcher=slurm with model.resources.gpus > 0); "
                      "set engine.device=cpu to run here")


def run_engine(rc: RunConfig, engine_config: Any) -> Any:
    """The typed engine block with the engine's own adjustments for this run (its class's
    ``prepare``, e.g. vLLM: room for the population's LoRA adapters when ``es.batched``): what
    the run builds its engine from (``plan.engine_config``). ``Engine.prepare``'s default keeps it."""
    block = dataclasses.asdict(engine_config)
    prepared = engines.engine_class(engine_config).prepare(block, rc)
    return engine_config if prepared == block else engines.parse(prepared)


def check_names(rc: RunConfig) -> None:
    """The names that reach a path, a study name or a log line hold no control character
    (``esopt.core.config.check_plain_text``; sweep.name and sweep.root are checked by parse):
    a config file's values, as the command line's are before Hydra runs."""
    from esopt.core.config import check_plain_text

    tuning_block = rc.tuning or {}
    for key, value in (("model.name", rc.model.get("name")), ("model.path", rc.model.get("path")),
                       ("task.source", rc.task.get("source")), ("tuning.study", tuning_block.get("study")),
                       ("tuning.storage", tuning_block.get("storage"))):
        check_plain_text(key, value)


def own_blocks(rc: RunConfig, algo: algorithms.Algorithm) -> RunConfig:
    """Check the keys of every block the config holds (the registry composes every algorithm's
    blocks, so ``es.nonsense=1`` is an error under any algo), then keep the blocks ``algo``
    reads: the run's config holds what the run uses."""
    known = algorithms.blocks()
    resolved = {b for name in algo.phase_names() for b in algorithms.get(name).resolved_blocks}
    for name, raw in rc.blocks.items():
        if name not in resolved:  # the run's phases parse theirs, once, as they resolve them (draft_plan)
            block(known[name].dataclass(), raw, name)
    return dataclasses.replace(rc, blocks={name: dict(rc.blocks.get(name) or {}) for name in algo.block_names})


def resolve_defaults(rc: RunConfig) -> RunConfig:
    """Fill in the defaults that depend on the task, so that the run's config (and its id)
    holds the values it uses: the task's source-dependent knobs (``tasks.resolved``), its
    ``eval.problems`` when null (``Task.eval_problems``; None stays = the whole split), and the
    same for ``eval.ood_task`` / ``eval.ood_problems`` and ``eval.probes`` / ``eval.probe_problems``."""
    task = tasks.resolved(rc.task)
    ev = rc.eval
    if ev.problems is None:
        ev = dataclasses.replace(ev, problems=tasks.task_class(task["name"]).eval_problems)
    if ev.ood_task is not None:
        ood = tasks.resolved(ev.ood_task)
        ev = dataclasses.replace(ev, ood_task=ood, ood_problems=ev.ood_problems if ev.ood_problems
                                 is not None else tasks.task_class(ood["name"]).eval_problems)
    if ev.probes:
        probes = tuple(tasks.resolved(p) for p in ev.probes)
        problems = ev.probe_problems
        if problems is None:  # the smallest task default, so every probe is measured on as many
            problems = min(tasks.task_class(p["name"]).eval_problems or limits.MAX_PROBLEMS for p in probes)
        ev = dataclasses.replace(ev, probes=probes, probe_problems=problems)
    return dataclasses.replace(rc, task=task, eval=ev)


def check_probes(rc: RunConfig, engine_config: Any) -> None:
    """``eval.probes``: known task names, none the training task itself (a probe measures what
    training does not touch), and at least one when ``eval.require_probes`` (a preset whose
    claims read the held-out curve switches it on)."""
    probes = rc.eval.probes
    if rc.eval.require_probes and not probes:
        raise ConfigError(f"model {rc.model['name']!r} has no held-out probes and eval.require_probes is set: "
                          "set eval.probes (e.g. eval.probes=[copy,first_letter,passages]; docs/results/probes.md)")
    if scored_by_likelihood(tasks.task_class(rc.task["name"])):
        raise ConfigError(f"task {rc.task['name']} is scored by likelihood: it can be an eval.probes entry, "
                          "not the task a run trains and evaluates on")
    for p in probes:
        if p["name"] not in tasks.TASK_NAMES:
            raise ConfigError(f"unknown eval.probes task {p['name']!r} (known: {', '.join(tasks.TASK_NAMES)})")
        if scored_by_likelihood(tasks.task_class(p["name"])) \
                and not engines.engine_class(engine_config).scores_text:
            raise ConfigError(f"eval.probes: {p['name']} is scored by likelihood, which engine "
                              f"{rc.engine.get('name')} cannot do here (use engine=hf)")
        if p["name"] == rc.task.get("name"):
            raise ConfigError(f"eval.probes names the training task {p['name']!r}: a probe must be held out "
                              "from training (pick another task)")


def check_remote_code(model_cfg: dict) -> None:
    """A model whose config.json asks for its own Python code (``auto_map`` with a
    ``model_type`` transformers does not know) is refused unless ``model.trust_remote_code`` is
    true: one line here, never transformers' interactive prompt mid-run. Read from config.json
    (``models.local_config``), nothing is imported from the directory."""
    trust = model_cfg.get("trust_remote_code", False)  # a bool: config.parse read it (config.boolean)
    cfg = models.local_config(model_cfg["name"], model_cfg.get("path"))
    if trust or not isinstance(cfg, dict) or not cfg.get("auto_map"):
        return
    from transformers import CONFIG_MAPPING

    if cfg.get("model_type") not in CONFIG_MAPPING:
        where = model_cfg.get("path") or model_cfg["name"]
        raise ConfigError(f"{where}: its config asks to run custom code (auto_map); "
                          "set model.trust_remote_code=true to allow it")


_CHECKED_TASKS: set[str] = set()


def task_style(task_cfg: dict, rc: RunConfig) -> str:
    """The style the run will build this task with (``tasks.prompt_style``; before the
    tokenizer is loaded, the model's local directory tells whether it has a chat template)."""
    return tasks.prompt_style(task_cfg, models.local_dir(rc.model), rc.model.get("prompt_style"))


def task_spec(task_cfg: dict, rc: RunConfig) -> TaskSpec:
    """A task as the run will build it (the run's task, or its ``eval.ood_task``): its knobs,
    prompt style (:func:`task_style`), that style's token budget, and the style the config
    states (the task's own ``style``, else the model's ``prompt_style``)."""
    style = task_style(task_cfg, rc)
    return TaskSpec(dict(task_cfg), style, tasks.task_class(task_cfg["name"]).budgets.get(style),
                    task_cfg.get("style") or rc.model.get("prompt_style"))


def _check_task_data(rc: RunConfig) -> None:
    """Build the task (and the out-of-domain task) once per distinct config (and data file
    content), read the splits the run uses and require them non-empty and large enough for
    eval.problems: a missing file, a malformed row, a split carved empty (after dropping rows
    that repeat earlier ones) is one ConfigError line here, before anything is dispatched."""
    trains = algorithms.get(rc.algo).trains
    uses = [(rc.task, "train"), (rc.task, rc.eval.split)] if trains else [(rc.task, rc.eval.split)]
    if rc.eval.ood_task is not None:
        uses.append((rc.eval.ood_task, rc.eval.ood_split))
    probes = [(p, rc.eval.probe_split) for p in rc.eval.probes]
    fp = input_fingerprints(rc).get("task.source")
    for cfg, split in uses + probes:
        problems = rc.eval.problems if (cfg is rc.task and split == rc.eval.split) else None
        if (cfg, split) in probes:  # a text probe scores its passages, up to probe_problems of them
            text = scored_by_likelihood(tasks.task_class(cfg["name"]))
            problems = None if text else rc.eval.probe_problems
        key = json.dumps([cfg, task_style(cfg, rc), split, problems, fp, limits.context_key(rc)],
                         sort_keys=True, default=str)
        if key in _CHECKED_TASKS:
            continue
        task = tasks.get(cfg, tokenizer=None, style=task_style(cfg, rc))
        rows = task.split(split)
        n = len(rows)
        if n == 0:
            sizes = ", ".join([f"source={cfg['source']}"] * bool(cfg.get("source"))
                              + [f"{k}={cfg[k]}" for k in ("n_train", "n_test", "n_heldout") if k in cfg])
            raise ConfigError(f"task {cfg['name']}: the {split} split is empty ({sizes}); held-out rows "
                              "are carved from train and rows that repeat earlier ones are dropped")
        if problems is not None and problems > n:
            if (cfg, split) in probes:
                raise ConfigError(f"eval.probe_problems={problems} exceeds the {split} split of probe "
                                  f"{cfg['name']} ({n} problems); set eval.probe_problems <= {n}")
            raise ConfigError(f"eval.problems={problems} exceeds the {split} split of task {cfg['name']} "
                              f"({n} problems); set eval.problems <= {n}")
        limits.check_context(rc, task, split, rows)
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


def identity(plan: RunPlan) -> dict:
    """The resolved plan's part that defines the run's result (its id is a hash of this): the
    config's (:func:`config_identity`) with each phase's block resolved (``RunPlan.phases``: ES's
    sigma and lr filled in from the top-level axis, the block or the model's hparams; GRPO's
    lr) in place of the top-level ``sigma`` / ``lr`` and the block as written. A stated default
    and an implied one (``sigma=0.01`` on a model whose es_sigma is 0.01, or ``es.sigma=0.01``)
    are one run with one id. A run that trains nothing has the id it had before the plan."""
    d = config_identity(plan.config, plan.inputs)
    algo = algorithms.get(plan.config.algo)
    for phase in plan.phases:
        if phase.settings is None:
            continue
        for b in algorithms.get(phase.algo).blocks:
            neutral = dict(b.neutral_values())  # a later knob at its neutral value: not in the id
            resolved = {k: getattr(phase.settings, k) for k in b.keys()
                        if k not in b.speed_keys() and not (k in neutral and getattr(phase.settings, k) == neutral[k])}
            d[b.name] = b.id_dict({k: v for k, v in resolved.items() if k not in algorithms.AXES or algo.uses(k)},
                                  plan.engine_config)
    if plan.phases:
        for key in ("sigma", "lr"):  # resolved into the blocks above
            d.pop(key, None)
    return d


def config_identity(rc: RunConfig, inputs: dict | None = None) -> dict:
    """The config's part of the run's identity (:func:`identity` puts the resolved phases in
    place of its blocks and axes). Hashed alone, it was the run id before ids hashed the
    resolved plan (``esopt.runtime.migrate_ids`` recognises run folders named so).

    Launcher, sweep bookkeeping, tuning, analyses (``analysis``, ``sparsity``), output paths and the blocks' speed-only
    knobs (``Block.speed_only``, e.g. ES's ``SPEED_ONLY``) are excluded: the same run launched
    locally or on Slurm, or in a sweep of another name, or faster, is the same run. The axes
    the algorithm does not read (``Algorithm.reads``) are excluded too, and a run holds only
    its own algorithm's blocks: a grid ``algo=none,es,grpo pop=8,16`` has one base run and one
    GRPO run per seed. The contents of the local inputs are included
    (``inputs``: size and hash of the data file and of the weights, :func:`input_fingerprints`),
    so the same path with other data or weights is another run.
    """
    d = rc.to_dict()
    for key in ("sweep", "tuning", *ANALYSIS_KEYS, "logger", "logger_opts"):  # read the result, never change it
        d.pop(key, None)
    for key in ("out", "save_samples", "print_samples"):  # what is recorded or shown, not what is measured
        d["eval"].pop(key, None)
    d["task"] = tasks.id_knobs(d["task"])  # a knob at its id-neutral value: the id it had before the knob
    if d["eval"].get("ood_task") is None:  # runs without an OOD set keep their earlier ids
        for key in ("ood_task", "ood_split", "ood_problems"):
            d["eval"].pop(key, None)
    if isinstance(d.get("es"), dict) and d["es"].get("targets", "") is None:  # the engine's default:
        d["es"].pop("targets")  # the ids ES runs had before es.targets (the engine name is in the id)
    if not d["eval"].get("probes"):  # runs without probes keep their earlier ids
        for key in ("probes", "probe_split", "probe_problems", "probe_samples"):
            d["eval"].pop(key, None)
    d["eval"].pop("require_probes", None)  # a check before dispatch, not what is measured
    algo = algorithms.get(rc.algo)
    for b in algo.blocks:  # how fast, never what: the same run (each is tested bitwise)
        for key in b.speed_keys():
            (d.get(b.name) or {}).pop(key, None)
        for key, value in b.neutral_values():  # a later knob at its neutral value: the earlier id
            if key in (d.get(b.name) or {}) and d[b.name][key] == value:
                d[b.name].pop(key)
        if isinstance(d.get(b.name), dict):
            d[b.name] = b.id_dict(d[b.name], rc.engine or {"name": "hf"})
    # the engine's name, and its dtype when set (it changes the numbers; auto keeps earlier ids)
    d["engine"] = {k: v for k, v in d["engine"].items()
                   if k == "name" or (k == "dtype" and v not in (None, "auto"))}
    d["model"] = {k: v for k, v in d["model"].items()  # launcher-only / a permission, not the result
                  if k not in ("resources", "trust_remote_code") and not (k == "save_dtype" and v is None)}
    if algo.master_weights and models.DTYPES.get(d["model"].get("dtype", "float32")) != models.DTYPES["float32"]:
        d["model"]["masters"] = "float32"  # trained as fp32 masters: not the runs that updated bf16 in place
    for key in (*algorithms.AXES, *algorithms.blocks()):
        if not algo.uses(key):
            d.pop(key, None)
    fps = input_fingerprints(rc) if inputs is None else inputs
    if fps:  # changed data or weights at the same path -> a new run, never stale numbers
        d["inputs"] = {k: store.fingerprint_key(v) for k, v in fps.items()}
    return d


def run_id(plan: RunPlan) -> str:
    """The run's id: the hash of its resolved plan (:func:`identity`)."""
    return store.run_id(identity(plan))


def verify_shipped(plan: RunPlan, rid: str, path) -> RunPlan:
    """The plan a job read from ``path`` (``<run rid>/plan.json``), checked against its content:
    its run id and config id recomputed (:func:`identity`) must be the ones it states,
    and ``rid`` one of its ids. A file edited after the sweeper wrote it (pop 2 made 4 under the
    pop-2 id), or copied from another run, is a ConfigError naming the file, so that run fails
    (a Slurm requeue reads the file again and fails again) instead of recording other numbers
    under its id. Its training phases and task specs are resolved again from its config (pure:
    the registry entries' ``resolve``, :func:`task_spec`) and must be the ones it holds, since
    the id hashes the config's axes, not the resolved block's copy of them."""
    again = make_plan(plan.config, plan.engine_config, plan.tuning_settings, plan.layout, plan.tracker_options,
                      ids=False)
    for what in ("phases", "task_spec", "ood_spec", "probe_specs"):
        if getattr(again, what) != getattr(plan, what):
            raise ConfigError(f"{path}: its resolved {what} are not what its config resolves to (edited after "
                              "the sweep wrote it?); rerun the sweep to write it again")
    ids = {"run id": (plan.run_id, run_id(plan)), "config id": (plan.config_id, config_id(plan))}
    for what, (stated, content) in ids.items():
        if stated != content:
            raise ConfigError(f"{path}: its content is {what} {content}, the file says {stated} "
                              "(edited after the sweep wrote it?); rerun the sweep to write it again")
    if rid != plan.run_id:
        raise ConfigError(f"{path}: the plan of run {plan.run_id} is in the folder of run {rid} (copied?); "
                          "rerun the sweep to write it again")
    return plan


def recorded_plan(run_dir, cuda: bool | None = None) -> RunPlan:
    """A recorded run's plan: its ``plan.json`` (``runplan.load``); a run recorded before plans
    were written: its ``config.yaml``, validated (:func:`validate`, ``cuda`` as there; ConfigError
    when it is not a run)."""
    import yaml

    from esopt.runtime import runplan

    plan = runplan.load(run_dir)
    if plan is not None:
        return plan
    path = store.RunDir(run_dir).config_path
    if not path.is_file():
        raise ConfigError(f"not a run directory: {run_dir} (no config.yaml)")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"unreadable {path}: {str(e).splitlines()[0]}") from None
    return validate(raw, check_data=False, cuda=cuda)


def config_id(plan: RunPlan) -> str:
    """The id of the run's configuration: its identity without the seed, so the seed
    replicates of one configuration share it (the ``auto`` pruner pools them)."""
    d = identity(plan)
    d.pop("seed", None)
    return store.run_id(d)


def uses(plan: RunPlan, key: str) -> bool:
    """Whether the run's algorithm reads the top-level or block key ``key``."""
    return algorithms.get(plan.algo).uses(key)
