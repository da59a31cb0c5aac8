"""The typed run configuration: one :class:`RunConfig` per run, parsed once at the entry point.

The Hydra config (``conf/config.yaml``, its groups, and the structured blocks registered by
``esopt.cli.configs``) is turned into a :class:`RunConfig` by :func:`parse`, which checks
everything that needs no other layer (types, ranges, the eval and sweep blocks). The checks
that need the model registry, the tasks or the algorithms run one layer up, in
``esopt.runtime.validate`` (which calls this first). Every problem is a ``ConfigError`` with
one clear line, before any work starts.

Note: a top-level key named ``pop`` collides with ``DictConfig.pop`` (a method), so the raw
config is always read as ``cfg["pop"]``; code after parsing uses ``RunConfig.pop``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar, Collection, Mapping, Optional, Sequence

from esopt.core.errors import ConfigError

SPLITS = ("train", "test", "heldout")
ANALYSES = ("sparsity", "drift", "forgetting", "connectivity")  # esopt/study/analyses/, run after training
ANALYSIS_KEYS = ("analysis", "sparsity")  # read after training, from its weights: never in the run id


@dataclass(frozen=True)
class EvalConfig:
    """The ``eval:`` block: held-out evaluation shared by every algorithm (esopt.evaluator)."""

    split: str = "test"                  # split the run is evaluated on (train | test | heldout)
    problems: Optional[int] = None       # problems evaluated (the first N of the split); null = the
    #                                      task's default (Task.eval_problems: countdown and the
    #                                      synthetic tasks 200, gsm8k the whole split, 1,319)
    samples: int = 32                    # samples per problem for Pass@K / Maj@K (the study: 32)
    temperature: float = 0.6             # sampling temperature (the study: 0.6)
    top_p: float = 1.0
    max_new_tokens: Optional[int] = None  # null = the task's default budget
    seed: int = 0                        # sampling seed of the evaluation
    every: int = 10                      # evaluate every N iterations while training (and at the end)
    greedy: bool = True                  # also measure greedy accuracy
    out: Optional[str] = None            # esopt.evaluate only: write the evaluation JSON here
    # Completions on record (esopt.evaluator.write_samples; not part of the run id): every
    # evaluation of a run writes <run>/samples/iteration_<i>.json (esopt.evaluate: beside
    # eval.out, <out>.samples.json) with each completion's text, extracted answer, reward,
    # verdict, token count and truncation for the first N problems, per-problem counts for the rest.
    save_samples: Any = 4                # N problems in full | all | 0 (no file)
    print_samples: int = 0               # esopt.evaluate only: print this many problems' completions
    # Out-of-domain set (the study: token entropy on GPQA): at every evaluation the evaluator also
    # samples `samples` completions per problem of this task's split and records their token
    # entropy and Pass@K under ood_* keys (ood_entropy, ood_pass@k, ...; esopt.evaluator).
    ood_task: Optional[Any] = None       # a task name (e.g. gsm8k) or a task config
    #                                      ({name: countdown, source: file.json}); null = none
    ood_split: str = "test"              # its split (train | test | heldout)
    ood_problems: Optional[int] = 100    # its problems (the first N); null = the task's default
    # Forgetting probes (esopt.evaluator.evaluate_config): held-out tasks the base model does well,
    # evaluated at every evaluation (base, every `every`, final) with `probe_samples` samples per
    # problem at `temperature`, no greedy pass; metrics get probe_<name> (Pass@1) and probe_pass1
    # (their mean); summary.json base_/final_/min_probe_pass1 and probe_curve. SmolLM2-135M's:
    # [copy, first_letter, passages] (docs/results/probes.md; passages is scored by likelihood,
    # engine=hf). Each task probe costs probe_problems x probe_samples short completions per evaluation.
    probes: tuple = ()                   # task names or task configs (e.g. [copy, first_letter]); () = none
    probe_split: str = "test"            # their split (train | test | heldout)
    probe_problems: Optional[int] = 200  # problems per probe (the first N); null = the task's default
    probe_samples: int = 4               # samples per problem (Pass@1 is the mean over them)
    require_probes: bool = False         # refuse (exit 2) a run without probes: for presets whose claims read them


@dataclass(frozen=True)
class SweepConfig:
    """The ``sweep:`` block: where runs land and how a sweep treats recorded runs."""

    name: str = "default"        # results/<name>/
    root: str = "results"
    dry_run: bool = False        # print the grid, recorded runs and token estimates; launch nothing
    retry_failed: bool = False   # rerun runs recorded as failed
    aggregate: bool = True       # aggregate the sweep (report.html) when a multirun ends
    save_model: bool = True      # keep the trained weights in <run>/model/ (HF format) for analyses
    keep_checkpoints: bool = False  # keep every checkpoint (ES <run>/checkpoint-<it>/, GRPO checkpoint-<step>/)
    #                                 and the last after the run completes; false keeps only the last while
    #                                 it runs and frees it (0.5B: 5-10 GB per run) once model/ is saved
    max_job_hours: float | None = None  # Slurm: the longest a job may run; caps every job's timeout_min.
    #                                 null = the partition's limit as Slurm states it (none if infinite)
    max_requeues: int = 3           # Slurm: requeues after a time-out or preemption (the launcher's
    #                                 max_num_timeout); a run may take 1 + this many jobs' time
    max_local_hours: float = 24.0   # a sweep (or run) estimated to take longer on this machine (its runs'
    #                                 CPU estimate over the runs at once) is refused, exit 2, naming a launcher
    force: bool = False             # launch it anyway
    offline: bool = False           # compute nodes without internet: jobs run with HF_HUB_OFFLINE=1,
    #                                 HF_DATASETS_OFFLINE=1 and WANDB_MODE=offline; a hub model or dataset
    #                                 not in the cache fails the dry run (python -m esopt.fetch fills it)
    design_power: Any = None        # {claim id: power}: the study design's power per claim at its smallest
    #                                 effect of interest (python -m esopt.design writes it into the presets it
    #                                 designs); a claims sweep's registration records it (the report's "planned
    #                                 power"). Was sweep.plan_power (still read for a release: RENAMED)


HEADLINE_KEEP = 0.22   # the study's headline keep fraction (78% of the update zeroed): claim 5's pruning point,
#                        its controls' and claim 9's update_top_share (the one home of the 0.22)


@dataclass(frozen=True)
class SparsityConfig:
    """The ``sparsity:`` block: the points ``analysis=[sparsity]`` evaluates (esopt.study.analyses.sparsity,
    which defines the modes; ``python -m esopt.analyze sparsity`` has the same defaults). Each
    point is one full evaluation (the run's eval.problems x eval.samples on the heldout split),
    besides the trained and the base model: the defaults are 6 fractions x 3 |delta| modes + 2
    controls + 2 = 22 evaluations; claim 5 reads global and equal_norm at HEADLINE_KEEP (0.22), and random beside
    them (``fractions: [0.22]``, ``modes: [global, random, equal_norm]``: 5). Like ``analysis``,
    not part of the run id."""

    fractions: tuple = (1.0, 0.5, HEADLINE_KEEP, 0.1, 0.05, 0.01)  # keep fractions of the |delta| modes, in [0, 1]
    modes: tuple = ("global", "per_tensor", "smallest", "random", "equal_norm")  # any of these (all known)
    control_fractions: tuple = (HEADLINE_KEEP,)   # keep fractions of the random-mask controls (random, equal_norm)
    control_modes: ClassVar[tuple] = ("random", "equal_norm")  # the modes that are controls (random masks of the
    #                                      top-k's size, at control_fractions; claim 5's comparison)


@dataclass(frozen=True, init=False)
class RunConfig:
    """One run: what to train, how, and where its results land.

    ``model``, ``task``, ``engine`` and ``tuning`` stay plain dicts (the layers that own them
    parse their knobs); the grid axes are typed fields. ``blocks`` holds the algorithm's config
    blocks by name (``es:``, ``grpo:``, ...): each is declared by its algorithm and composed by
    the registry (``esopt.algorithms``), so core names none of them. A block reads as an
    attribute too (``rc.es``), and :meth:`to_dict` puts each at the top level, where the config
    has it.
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
    tuning: dict
    analysis: tuple
    blocks: Mapping[str, dict]
    logger: tuple                   # experiment trackers (esopt.runtime.trackers): not in the run id
    logger_opts: dict
    sparsity: SparsityConfig        # what analysis=[sparsity] evaluates: not in the run id

    def __init__(self, model: dict, task: dict, algo: str, engine: dict, pop: int, sigma: float | None,
                 lr: float | None, seed: int, iterations: int, eval: EvalConfig, sweep: SweepConfig,
                 tuning: dict | None = None, analysis: tuple = (), blocks: Mapping[str, dict] | None = None,
                 logger: tuple = (), logger_opts: dict | None = None, sparsity: SparsityConfig | None = None,
                 **named_blocks: dict):
        values = dict(model=model, task=task, algo=algo, engine=engine, pop=pop, sigma=sigma, lr=lr,
                      seed=seed, iterations=iterations, eval=eval, sweep=sweep, tuning=dict(tuning or {}),
                      analysis=tuple(analysis), blocks={**dict(blocks or {}), **named_blocks},
                      logger=tuple(logger), logger_opts=dict(logger_opts or {}),
                      sparsity=sparsity or SparsityConfig())
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __getattr__(self, name: str) -> dict:
        """``rc.es``: the run's block ``es`` (AttributeError when it has none)."""
        blocks = self.__dict__.get("blocks") or {}
        if name.startswith("_") or name not in blocks:
            raise AttributeError(f"RunConfig has no field or block {name!r}")
        return blocks[name]

    def block(self, name: str) -> dict:
        """The run's block ``name`` (``{}`` when it has none: every key at its default)."""
        return dict(self.blocks.get(name) or {})

    def to_dict(self) -> dict:
        d = asdict(self)
        blocks = d.pop("blocks")
        tail = {"tuning": d.pop("tuning"), "analysis": list(d.pop("analysis")),
                "sparsity": {k: list(v) for k, v in d.pop("sparsity").items()},
                "logger": list(d.pop("logger")), "logger_opts": d.pop("logger_opts")}
        return {**d, **blocks, **tail}


def plain(value: Any) -> Any:
    """OmegaConf containers -> plain Python (dict / list), resolving interpolations."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return value


INT_LIMIT = 2**63  # a config integer (a seed, a size) is an int64: |n| < 2**63


def boolean(value: Any, name: str, *, allow_none: bool = False) -> bool | None:
    """The one reading of a config boolean: ``true`` or ``false`` (YAML's, or the same words
    quoted: ``sweep.save_model='false'`` is false), None with ``allow_none``. Anything else is
    one ConfigError line: no truthy strings (``'no'``, ``'0'``), no numbers."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"{name} must be true or false{' or null' if allow_none else ''}, got {value!r}")


def integer(value: Any, name: str, *, allow_none: bool = False) -> int | None:
    """The one reading of a config integer: an int, or a number or digit string that is exactly
    one (``4.0``, ``'4'``), with ``|n| < 2**63``; None with ``allow_none``. A float too large to
    be exact (``1e30``) is refused like its integer spelling (``10**30``): one ConfigError line."""
    if value is None and allow_none:
        return None
    out = None
    if isinstance(value, int) and not isinstance(value, bool):
        out = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        out = int(value)
    elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        out = int(value.strip())
    if out is None:
        raise ConfigError(f"{name} must be an integer{' or null' if allow_none else ''}, got {value!r}")
    if not -INT_LIMIT < out < INT_LIMIT:
        raise ConfigError(f"{name} must be an integer of magnitude below 2**63, got {value!r}")
    return out


def number(cfg: Mapping, key: str, kind: type, *, allow_none: bool = False, where: str = ""):
    """``cfg[key]`` as an int (:func:`integer`) or a finite float; ConfigError naming ``where + key``
    otherwise."""
    value = cfg.get(key)
    name = f"{where}{key}"
    if value is None:
        if allow_none:
            return None
        raise ConfigError(f"{name} is required")
    if kind is int:
        return integer(value, name)
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    try:
        out = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if kind is float and not math.isfinite(out):
        raise ConfigError(f"{name} must be finite, got {value!r}")
    return out


def at_least(name: str, value: Any, lo: float, *, kind: type = int, above: bool = False,
             allow_none: bool = False):
    """The one range check of a block's value: ``value`` is an int (``kind=int``) or a finite
    number (``kind=float``) >= ``lo`` (> ``lo`` with ``above``), or None with ``allow_none``;
    returns it. Else one ConfigError line: ``<name> must be [null or ]an integer >= <lo>, got
    <value>`` (``a number`` for floats)."""
    if value is None and allow_none:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
    if ok:
        ok = math.isfinite(value) and (value > lo if above else value >= lo)
    if not ok:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{name} must be {'null or ' if allow_none else ''}{what} {'>' if above else '>='} "
                          f"{lo}, got {value!r}")
    return value


def check_axes(pop: int, sigma: float | None, lr: float | None, iterations: int, seed: int = 0) -> None:
    """The grid axes' ranges (after :func:`number` made them numbers): pop >= 2, sigma and lr
    > 0 and finite when set, iterations >= 1, seed >= 0. One ConfigError line on the first bad
    one; :func:`parse` checks the given values, ES the ones it resolved."""
    if pop < 2:
        raise ConfigError(f"pop must be >= 2 (ES needs at least two members), got {pop}")
    if sigma is not None and not (sigma > 0 and math.isfinite(sigma)):
        raise ConfigError(f"sigma must be > 0, got {sigma}")
    if lr is not None and not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"lr must be > 0, got {lr}")
    if iterations < 1:
        raise ConfigError(f"iterations must be >= 1, got {iterations}")
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")


TYPED = {"bool": (boolean, False), "Optional[bool]": (boolean, True), "bool | None": (boolean, True),
         "int": (integer, False), "Optional[int]": (integer, True), "int | None": (integer, True)}


def block(cls, raw: Mapping | None, name: str):
    """Build dataclass ``cls`` from config block ``raw``; unknown keys are one ConfigError. Every
    field declared ``bool`` or ``int`` (or Optional) is read by :func:`boolean` / :func:`integer`,
    so every block (eval, sweep, es, grpo, tuning, the engines, the trackers) reads them alike."""
    raw = dict(raw or {})
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"unknown {name} key(s): {', '.join(unknown)} (known: {', '.join(known)})")
    where = name.split(" (")[0]  # "engine (hf)" -> engine.max_batch
    for f in fields(cls):
        kind = TYPED.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
        if f.name in raw and kind is not None:
            raw[f.name] = kind[0](raw[f.name], f"{where}.{f.name}", allow_none=kind[1])
    return cls(**raw)


def design_power(raw: Any) -> dict | None:
    """``sweep.design_power`` as {claim id: power}: ids positive integers, powers in [0, 1]; None
    when unset. Anything else is one ConfigError naming the entry."""
    raw = plain(raw)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"sweep.design_power must map claim ids to powers (e.g. {{1: 0.85}}), got {raw!r}")
    out = {}
    for k, v in raw.items():
        try:
            cid, pw = int(k), float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"sweep.design_power: {k!r}: {v!r} is not a claim id and a power") from None
        if cid < 1 or str(cid) != str(k).strip() or isinstance(v, bool) or not 0.0 <= pw <= 1.0:
            raise ConfigError(f"sweep.design_power: {k!r}: {v!r} is not a claim id (>= 1) and a power in [0, 1]")
        out[cid] = pw
    return dict(sorted(out.items()))


def _probe_configs(probes: Any) -> tuple:
    """``eval.probes`` as a tuple of task configs (a name is ``{name: <name>}``); names unique."""
    if probes is None:
        return ()
    if isinstance(probes, (str, Mapping)) or not isinstance(probes, Sequence):
        probes = [probes]
    out = []
    for p in probes:
        if isinstance(p, str):
            p = {"name": p}
        if not isinstance(p, Mapping) or not p.get("name") or not isinstance(p.get("name"), str):
            raise ConfigError(f"eval.probes must be task names or task configs with a name, got {p!r}")
        out.append(dict(p))
    names = [p["name"] for p in out]
    if len(set(names)) < len(names):
        raise ConfigError(f"eval.probes names a task twice: {', '.join(names)} (each probe's metric is probe_<name>)")
    return tuple(out)


def _eval_config(raw: Mapping) -> EvalConfig:
    ev = block(EvalConfig, raw, "eval")
    raw = {**ev.__dict__}
    for key in ("split", "ood_split", "probe_split"):
        if raw[key] not in SPLITS:
            raise ConfigError(f"eval.{key} must be one of {', '.join(SPLITS)}, got {raw[key]!r}")
    for key in ("samples", "problems", "every", "ood_problems", "probe_problems", "probe_samples"):
        value = number(raw, key, int, allow_none=key in ("problems", "ood_problems", "probe_problems"), where="eval.")
        if value is not None and value < 1:
            raise ConfigError(f"eval.{key} must be >= 1, got {raw[key]}")
    ood = raw["ood_task"]
    if isinstance(ood, str):
        ood = {"name": ood}
    if ood is not None and (not isinstance(ood, Mapping) or not ood.get("name")):
        raise ConfigError(f"eval.ood_task must be a task name or a task config with a name, got {ood!r}")
    if ood is not None:
        ev = replace(ev, ood_task=dict(ood))
    ev = replace(ev, probes=_probe_configs(raw["probes"]))
    if not 0.0 <= number(raw, "temperature", float, where="eval."):
        raise ConfigError(f"eval.temperature must be >= 0, got {ev.temperature}")
    if not 0.0 < number(raw, "top_p", float, where="eval.") <= 1.0:
        raise ConfigError(f"eval.top_p must be in (0, 1], got {ev.top_p}")
    if ev.max_new_tokens is not None and number(raw, "max_new_tokens", int, where="eval.") < 1:
        raise ConfigError(f"eval.max_new_tokens must be >= 1, got {ev.max_new_tokens}")
    if ev.save_samples != "all":
        if isinstance(ev.save_samples, str) and ev.save_samples.strip().isdigit():
            ev = replace(ev, save_samples=int(ev.save_samples))
        if isinstance(ev.save_samples, bool) or not isinstance(ev.save_samples, int) or ev.save_samples < 0:
            raise ConfigError(f"eval.save_samples must be all or a number of problems >= 0, got {ev.save_samples!r}")
    if number(raw, "print_samples", int, where="eval.") < 0:
        raise ConfigError(f"eval.print_samples must be >= 0, got {ev.print_samples}")
    return ev


def _sparsity_config(raw: Mapping) -> SparsityConfig:
    """The ``sparsity:`` block: non-empty lists of keep fractions in [0, 1] and of known modes
    (a single value reads as a list of one)."""
    sp = block(SparsityConfig, raw, "sparsity")
    values = {}
    for key in ("fractions", "modes", "control_fractions"):
        value = getattr(sp, key)
        items = [value] if isinstance(value, (str, int, float)) else list(value or ())
        if not items:
            raise ConfigError(f"sparsity.{key} must not be empty")
        if key == "modes":
            known = SparsityConfig.modes
            bad = [m for m in items if m not in known]
            if bad:
                raise ConfigError(f"unknown sparsity.modes {bad[0]!r} (known: {', '.join(known)})")
            values[key] = tuple(dict.fromkeys(items))
            continue
        out = [number({key: v}, key, float, where="sparsity.") for v in items]
        if any(not 0.0 <= f <= 1.0 for f in out):
            raise ConfigError(f"sparsity.{key} must be in [0, 1], got {items}")
        values[key] = tuple(out)
    return SparsityConfig(**values)


def parse(cfg: Any, blocks: Collection[str] | None = None) -> RunConfig:
    """Check a composed Hydra config (or a plain mapping) and return the typed RunConfig.

    ``blocks``: the names of the algorithms' config blocks (``esopt.algorithms.blocks()``); None
    takes every other top-level mapping for one (the caller checks their names). Raises
    ConfigError (one line) on the first problem found. Only what needs no other layer is
    checked here; ``esopt.runtime.validate.validate`` adds the model, task and algorithm checks.
    """
    raw = plain(cfg)
    if not isinstance(raw, Mapping):
        raise ConfigError("the configuration is not a mapping")
    raw = renamed(raw, RENAMED)      # this file's blocks' renamed keys move to where they are now
    if isinstance(blocks, Mapping):  # and the registry's blocks'
        raw = renamed(raw, {f"{name}.{old}": new for name, b in blocks.items() for old, new in b.renamed})
    check_keys(raw, blocks)
    names = [k for k in raw if k not in TOP_LEVEL and k != "hydra"] if blocks is None else list(blocks)

    model = dict(raw.get("model") or {})
    if not model.get("name"):
        raise ConfigError("model.name is required (e.g. model=tiny-s)")
    model = model_paths(raw, model)
    if "trust_remote_code" in model:  # read by the model loader: true or false, never a truthy string
        model["trust_remote_code"] = boolean(model["trust_remote_code"], "model.trust_remote_code")
    task = dict(raw.get("task") or {})
    if not task.get("name"):
        raise ConfigError("task.name is required (e.g. task=countdown)")
    engine = dict(raw.get("engine") or {"name": "auto"})

    pop = number(raw, "pop", int)
    sigma = number(raw, "sigma", float, allow_none=True)
    lr = number(raw, "lr", float, allow_none=True)
    seed = number(raw, "seed", int)
    iterations = number(raw, "iterations", int)
    check_axes(pop, sigma, lr, iterations, seed)

    sweep = block(SweepConfig, raw.get("sweep"), "sweep")
    check_sweep_location(sweep.name, sweep.root)
    at_least("sweep.max_job_hours", sweep.max_job_hours, 0, kind=float, above=True, allow_none=True)
    at_least("sweep.max_requeues", sweep.max_requeues, 0)
    at_least("sweep.max_local_hours", sweep.max_local_hours, 0, kind=float, above=True)
    sweep = replace(sweep, design_power=design_power(sweep.design_power))

    analysis = raw.get("analysis") or ()
    if isinstance(analysis, str):
        analysis = (analysis,)
    unknown = [a for a in analysis if a not in ANALYSES]
    if unknown:
        raise ConfigError(f"unknown analysis {unknown[0]!r} (known: {', '.join(ANALYSES)})")

    return RunConfig(
        model=model, task=task, algo=str(raw.get("algo", "none")), engine=engine, pop=pop,
        sigma=sigma, lr=lr, seed=seed, iterations=iterations,
        eval=_eval_config(dict(raw.get("eval") or {})), sweep=sweep, tuning=dict(raw.get("tuning") or {}),
        analysis=tuple(analysis), blocks={k: dict(raw[k] or {}) for k in names if k in raw},
        logger=_names(raw.get("logger")), logger_opts=dict(raw.get("logger_opts") or {}),
        sparsity=_sparsity_config(dict(raw.get("sparsity") or {})),
    )


_WARNED: set = set()  # the renamed keys this process has warned about (one line each)
RENAMED = {"sweep.plan_power": "sweep.design_power"}   # this file's blocks' renamed keys, old -> new, read
#                                                        for a release (the algorithms' blocks: Block.renamed)


def renamed(raw: Mapping, renames: Mapping[str, str]) -> dict:
    """The config with each deprecated spelling moved to where the key is now (``renames``:
    ``"<block>.<old>": "<block>.<key>"``, declared by the blocks' ``renamed``): a value set
    under the old spelling replaces the new key's, with one ``esopt: warning:`` line per key
    and process; the old spelling at null (its Hydra default) is dropped. The run id hashes
    the value under its old spelling (``esopt.algorithms.Block.id_dict``), so it stays as it was."""
    import sys

    out = dict(raw)
    for old, new in renames.items():
        head, _, key = old.partition(".")
        if not isinstance(out.get(head), Mapping) or key not in out[head]:
            continue
        out[head] = dict(out[head])
        value = out[head].pop(key)
        if value is None:
            continue
        to_head, _, to_key = new.partition(".")
        out[to_head] = {**dict(out.get(to_head) or {}), to_key: value}
        if old not in _WARNED:
            _WARNED.add(old)
            print(f"esopt: warning: {old} is deprecated and goes in a later release: it is {new} now "
                  "(the same run, the same id)", file=sys.stderr)
    return out


def _names(value) -> tuple:
    """A list-valued key given as one name (``logger=wandb``) or a list (``logger=[a,b]``)."""
    return (value,) if isinstance(value, str) else tuple(value or ())


# every top-level key of a run config besides the algorithms' blocks
TOP_LEVEL = tuple(f.name for f in fields(RunConfig) if f.name != "blocks") + ("models",)


def model_paths(raw: Mapping, model: dict) -> dict:
    """``models.paths`` (model name -> local folder, for a grid over sizes on a cluster without
    the hub): the run's model block with ``path`` set from it when the model has none. Every
    entry must be an existing directory (ConfigError naming it), whether the grid uses it or not."""
    import os

    paths = (raw.get("models") or {}).get("paths") or {}
    if not isinstance(paths, Mapping):
        raise ConfigError(f"models.paths must map model names to folders, got {paths!r}")
    for name, folder in paths.items():
        if not isinstance(folder, str) or not os.path.isdir(os.path.expanduser(folder)):
            raise ConfigError(f"models.paths.{name}: {folder!r} is not a directory")
    if not model.get("path") and model.get("name") in paths:
        return {**model, "path": os.path.expanduser(paths[model["name"]])}
    return model


def did_you_mean(key: str, known) -> str:
    """`` (did you mean 'pop'?)`` when ``key`` is close to one of ``known`` (difflib), else ``""``."""
    import difflib

    close = difflib.get_close_matches(str(key), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(raw: Mapping, blocks: Collection[str] | None = None) -> None:
    """Refuse top-level keys no layer reads (``foo=1``, ``+popsize=8``): a typo would otherwise
    be ignored silently. ConfigError with a "did you mean" when close to a known key.
    ``blocks``: the algorithms' block names; None accepts any mapping as one (see :func:`parse`)."""
    known = TOP_LEVEL + tuple(blocks or ())
    unknown = [k for k in raw if k not in known and k != "hydra"
               and not (blocks is None and isinstance(raw[k], Mapping))]
    if unknown:
        k = unknown[0]
        raise ConfigError(f"unknown key {k!r}{did_you_mean(k, known)}; known top-level keys: "
                          f"{', '.join(known)}")


def check_plain_text(key: str, value: Any) -> None:
    """A name that reaches a path, a study, an ``sbatch`` job name or a log line holds no control
    character (newline, tab, escape, NUL, ...: Unicode category Cc), which would split an
    ``#SBATCH`` line or a log record; ConfigError (one line) naming the key otherwise."""
    import unicodedata

    if value is None:
        return
    bad = next((c for c in str(value) if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise ConfigError(f"{key} must not contain control characters, got {str(value)!r} "
                          f"(found {bad!r})")


def check_sweep_location(name: Any, root: Any) -> None:
    """``sweep.name`` is one plain directory name and ``sweep.root`` has no ``..`` component,
    so ``<root>/<name>`` (where runs, the Optuna journal and Hydra's ``.hydra/`` land) is a
    directory of its own inside the root: never the root itself, its parent, or elsewhere.
    Checked on the command line before Hydra creates anything (esopt.cli.common)."""
    import os

    name, root = "" if name is None else str(name), "" if root is None else str(root)
    check_plain_text("sweep.name", name)
    check_plain_text("sweep.root", root)
    if (not name.strip() or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
            or name != name.strip()):
        raise ConfigError(f"sweep.name must be a plain directory name (no '/', not '.' or '..'), got {name!r}")
    if not root.strip() or "\0" in root:
        raise ConfigError(f"sweep.root must be a directory path, got {root!r}")
    if ".." in root.replace("\\", "/").split("/"):
        raise ConfigError(f"sweep.root must not contain a '..' component, got {root!r} (give an absolute path)")
    base = os.path.abspath(root)
    if os.path.dirname(os.path.abspath(os.path.join(base, name))) != base:
        raise ConfigError(f"sweep.name {name!r} leaves sweep.root {root!r}")
    if len(name.encode(errors="surrogateescape")) > MAX_NAME_BYTES:
        raise ConfigError(f"sweep.name is {len(name.encode(errors='surrogateescape'))} bytes long; a directory "
                          f"name holds at most {MAX_NAME_BYTES} (got {name[:24]!r}...)")
    check_creatable_dir("sweep.root", root)


def check_output_file(key: str, path: str) -> None:
    """``path`` can be written as a file: not an existing directory, its folder creatable."""
    import os

    if os.path.isdir(os.path.expanduser(path)):
        raise ConfigError(f"{key} {path!r} is a directory; give a file name")
    check_creatable_dir(key, os.path.dirname(os.path.abspath(os.path.expanduser(path))))


def check_creatable_dir(key: str, path: str) -> None:
    """``path`` is a directory, or one can be made there: its deepest part that exists is a
    writable directory (not a file, as ``sweep.root=<file>`` or ``eval.out=<file>/x.json``'s
    parent would be). ConfigError naming ``key`` otherwise; checked before any work is done."""
    import os

    where = os.path.abspath(os.path.expanduser(path))
    while not os.path.lexists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)                    # the deepest part that exists
    if not os.path.isdir(where):
        raise ConfigError(f"{key} {path!r}: {where} is a file, not a directory")
    if not os.access(where, os.W_OK | os.X_OK):
        raise ConfigError(f"{key} {path!r}: {where} is not writable")


MAX_NAME_BYTES = 255    # one path component (NAME_MAX of Linux and macOS file systems)


def model_default(cfg: RunConfig, key: str) -> float:
    """A hyperparameter default of the run's model (``model.hparams.<key>``, e.g. ``es_sigma``,
    ``es_lr``, ``grpo_lr``; conf/model/*.yaml), used when neither the top-level axis nor the
    algorithm's block sets it. ConfigError when the model config has none."""
    value = (cfg.model.get("hparams") or {}).get(key)
    if value is None:
        raise ConfigError(f"model {cfg.model.get('name')!r} has no default for {key} "
                          f"(set model.hparams.{key}, or the top-level / block value)")
    return float(value)
