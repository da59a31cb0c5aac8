"""What every entry point shares: the config directory, argv preparation, one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from esopt.cli import configs
from esopt.cli.configs import CONF_DIR  # noqa: F401 - the Hydra configs (conf/), here for every entry point


# Libraries whose warnings and info logs are chatter at the command line (deprecations of
# transformers / TRL internals, torch notices, progress bars); ESOPT_VERBOSE=1 or -v shows them.
NOISY = ("transformers", "trl", "torch", "datasets", "accelerate", "huggingface_hub", "tokenizers", "optuna",
         "submitit", "hydra", "omegaconf", "pandas", "pyarrow", "plotly", "scipy", "numpy", "tqdm", "vllm")


# ``python -m esopt.design`` appends a callable here: the esopt sweeper hands it the composed jobs
# instead of launching them (a module Hydra's plugin scan does not reload)
SWEEP_CONSUMER: list = []


def verbose(argv: list[str] | None = None) -> bool:
    """Whether the user asked for library output: ``ESOPT_VERBOSE=1`` or ``-v`` / ``--verbose``."""
    import os

    return os.environ.get("ESOPT_VERBOSE", "") not in ("", "0") or any(a in ("-v", "--verbose") for a in argv or ())


def command_argv(argv: list[str] | None, doc: str | None) -> list[str] | None:
    """A hand-parsed command's arguments (``sys.argv[1:]`` when ``argv`` is None), after
    :func:`quiet`; None once ``-h`` / ``--help`` has printed ``doc`` (the caller returns 0)."""
    import sys

    quiet()
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(doc)
        return None
    return argv


def quiet() -> None:
    """Silence known library chatter in this process (and, through the environment, in the
    processes it starts): warnings issued inside the NOISY libraries, transformers' and datasets'
    info logs and progress bars. Idempotent; a no-op when ``verbose()``."""
    import logging
    import os
    import warnings

    if verbose():
        return
    pattern = r"(%s)(\..*)?$" % "|".join(NOISY)
    warnings.filterwarnings("ignore", module=pattern)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::DeprecationWarning")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in ("transformers", "datasets", "accelerate", "trl", "huggingface_hub", "optuna", "torch"):
        logging.getLogger(name).setLevel(logging.ERROR)


def fail(message: str, code: int = 2):
    """``esopt: error: <message>`` on stderr and exit ``code`` (2 = bad input)."""
    print(f"esopt: error: {message}", file=sys.stderr)
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    """argparse for esopt's commands: a usage error is one ``esopt: error: ...`` line and exit 2
    (argparse's own ``<prog>: error:`` after its usage dump is noise)."""

    def error(self, message):
        fail(message)


def check_group_choices(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Reject unknown config-group choices (model=foo) with one line, before Hydra runs."""
    from esopt import algorithms, engines, tasks

    code_groups = {"task": tuple(tasks.TASK_NAMES), "engine": (engines.AUTO, *engines.ENGINES),
                   "algo": tuple(algorithms.ALGORITHMS)}
    for arg in argv:
        m = re.match(r"^(model|task|algo|engine)=(.*)$", arg)
        if not m or "(" in m.group(2):
            continue
        group, values = m.group(1), m.group(2)
        known = sorted(code_groups.get(group) or (p.stem for p in (conf_dir / group).glob("*.yaml")))
        for value in values.split(","):
            value = value.strip()
            if value and value not in known:
                fail(f"unknown {group} {value!r} (known: {', '.join(known)})")


# Hydra's command-line flags that take a value (the value is not an override)
_FLAGS_WITH_VALUE = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-c", "--cfg",
                     "-p", "--package", "--experimental-rerun"}
_OWN_CONFIG = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir"}


def _overrides(argv: list[str]) -> list[str] | None:
    """The overrides of a command line (flags and their values dropped); None when the user
    points Hydra at other configs (``-cp`` / ``-cn`` / ``-cd``): those are not checked here."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in _OWN_CONFIG:
            return None
        if arg.startswith("-"):
            skip = flag in _FLAGS_WITH_VALUE and "=" not in arg
            continue
        out.append(arg)
    return out


def first_point(overrides: list[str]) -> tuple[list[str], dict[str, list]]:
    """The first run of a grid: each sweep override (``pop=8,16``, ``seed=range(3)``,
    ``sigma=tag(log,interval(a,b))``) replaced by its first value (an interval: its start; a
    ``glob(...)``: dropped). Also returns every value given to each key (``{"sweep.name": [...]}``).
    Raises Hydra's OverrideParseException on a malformed override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, QuotedString, RangeSweep

    point, values = [], {}
    for ov in OverridesParser.create().parse_overrides(overrides):
        key = ov.get_key_element()
        if ov.is_delete():
            point.append(ov.input_line)
            continue
        v = ov.value()
        if isinstance(v, ChoiceSweep):
            every = list(v.list)
        elif isinstance(v, RangeSweep):
            every = list(ov.sweep_iterator())
        elif isinstance(v, IntervalSweep):
            every = [v.start]
        elif ov.is_sweep_override():  # glob(...): needs the config loader; Hydra expands it later
            continue
        else:
            every = [v]
        values.setdefault(key.lstrip("+~"), []).extend(  # a quoted choice 'x y': its text
            x.text if isinstance(x, QuotedString) else x for x in every)
        point.append(f"{key}={Override._get_value_element_as_str(every[0])}" if ov.is_sweep_override()
                     else ov.input_line)
    return point, values


def _hydra_error(e: BaseException, overrides: list[str]) -> str:
    """One line for a Hydra composition / parsing error (its own messages run over lines)."""
    from esopt.core.config import did_you_mean

    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else type(e).__name__
    m = re.match(r"Could not override '([^']+)'", first)
    if m:
        key = m.group(1)
        parent, _, leaf = key.rpartition(".")
        known = _known_keys(overrides, key, parent)
        hint = did_you_mean(leaf, known) if known else ""
        where = f" in {parent}" if parent else ""
        return (f"unknown key {key!r}{hint}" + (f"; known keys{where}: {', '.join(known)}" if known else ""))
    m = re.match(r"(?:In '[^']*': )?Could not find '([^']+)'", first)
    if m:
        avail = []
        if "Available options" in text:
            tail = text.split("Available options", 1)[1].splitlines()[1:]
            for ln in tail:
                if not ln.startswith("\t"):
                    break
                avail.append(ln.strip())
        return f"no config {m.group(1)!r}" + (f" (available: {', '.join(avail)})" if avail else "")
    if type(e).__name__ == "OverrideParseException":
        odd = [o for o in overrides if not o.isascii() and "=" in o and "'" not in o and '"' not in o]
        if odd and "LexerNoViableAlt" in first:   # Hydra's grammar reads non-ASCII only in quotes
            key, _, value = odd[0].partition("=")
            return (f"cannot parse the override {odd[0]!r}: Hydra reads a value with non-ASCII characters "
                    f"only in quotes; write \"{key}='{value}'\"")
        return f"cannot parse the overrides: {first}"
    return first


def _known_keys(overrides: list[str], key: str, parent: str) -> list[str]:
    """The keys at ``parent`` of the config composed without the offending ``key`` overrides."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=rest)
        node = OmegaConf.select(cfg, parent) if parent else cfg
        return [str(k) for k in node.keys()] if node is not None and hasattr(node, "keys") else []
    except Exception:  # noqa: BLE001 - only for the hint
        return []


# names that reach a path, a study name or a Slurm job name: no control characters
NAMED_KEYS = ("hydra.launcher.name", "tuning.study", "tuning.storage", "model.name", "model.path",
              "task.source")


def precheck(argv: list[str]) -> None:
    """Before Hydra runs (and creates ``<sweep.root>/<sweep.name>/.hydra/``): compose the first
    run of the command line once and check what needs no data: Hydra's own errors (unknown key
    ``foo=1``, missing config, bad override syntax), top-level keys Hydra would accept but no
    layer reads (``+popsize=8``), ``sweep.name`` / ``sweep.root`` and ``eval.out`` (every value given). Each
    problem is one line and exit 2 (:func:`fail`); the full validation of every run follows
    in the sweeper / the run's entry point."""
    from esopt import algorithms
    from esopt.core.config import check_keys, check_output_file, check_plain_text, check_sweep_location, plain
    from esopt.core.errors import ConfigError

    overrides = _overrides(argv)
    if overrides is None:
        return
    configs.register()  # the config tree of the registries as they are now (an algorithm added or removed)
    try:
        point, values = first_point(overrides)
    except Exception as e:  # noqa: BLE001 - Hydra's OverrideParseException
        fail(_hydra_error(e, overrides))
    try:
        for name in values.get("sweep.name", []):
            check_sweep_location(name, "results")
        for root in values.get("sweep.root", []):
            check_sweep_location("x", root)
        for key in NAMED_KEYS:
            for value in values.get(key, []):
                check_plain_text(key, value)
        for value in values.get("eval.out", []):  # a file written after the whole evaluation
            if value is not None:
                check_output_file("eval.out", str(value))
    except ConfigError as e:
        fail(str(e))
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=point, return_hydra_config=True)
    except Exception as e:  # noqa: BLE001 - every Hydra composition error becomes one line
        fail(_hydra_error(e, point))
    raw = {k: plain(cfg[k]) for k in cfg if k != "hydra"}  # hydra's own keys resolve only in a job
    try:
        check_keys(raw, algorithms.blocks())
        sweep = raw.get("sweep") or {}
        check_sweep_location(sweep.get("name"), sweep.get("root"))
        check_plain_text("hydra.launcher.name", (cfg.hydra.get("launcher") or {}).get("name"))
        if _single_run(argv, overrides):  # exactly this config runs: validate all of it now, once
            from esopt.runtime.validate import validate

            plan = validate(raw)
            _PRECHECKED[_config_key(raw)] = plan  # the run's entry point reads it (:func:`validated`)
            algo = algorithms.get(plan.algo)
            unread = list(dict.fromkeys(k for k in override_keys(point) if not algo.uses(k)))
            if unread:
                print(f"esopt: note: {no_effect(unread, algo.name)}", file=sys.stderr)
            for note in inert_notes(plan, override_keys(point)):
                print(f"esopt: note: {note}", file=sys.stderr)
    except ConfigError as e:
        fail(str(e))


# the plan :func:`precheck` validated for a single run, by its config: the run's task function
# takes it (:func:`validated`) instead of validating the same config a second time
_PRECHECKED: dict = {}


def _config_key(raw: dict) -> str:
    """A composed config's content (and the directory its relative paths are read from)."""
    return json.dumps([os.getcwd(), raw], sort_keys=True, default=str)


def validated(cfg):
    """The run's plan (``esopt.runtime.validate.validate``; ConfigError, one line): the one
    :func:`precheck` made from this very config when it validated the command line's single
    run, else validated here. A run is validated once."""
    from esopt.core.config import plain
    from esopt.runtime.validate import validate

    raw = {k: plain(cfg[k]) for k in cfg if k != "hydra"}
    plan = _PRECHECKED.pop(_config_key(raw), None)
    return plan if plan is not None else validate(cfg)


def override_keys(overrides: list[str]) -> list[str]:
    """The keys the overrides set (``+`` / ``++`` / ``~`` dropped)."""
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o]


def inert_notes(plan, keys: list[str]) -> list[str]:
    """Notes for the given keys that the run's other values leave unread (its blocks' ``inert``:
    ``es.perturb_rank has no effect with es.batched=false (full-rank ES)``; a renamed key's old
    spelling as its new one)."""
    from esopt import algorithms

    inert = {k: why for b in algorithms.get(plan.algo).blocks for k, why in b.inert_keys(plan.block(b.name)).items()}
    keys = [algorithms.renames().get(k, k) for k in keys]
    return [f"{k} has no effect with {inert[k]}" for k in dict.fromkeys(keys) if k in inert]


def no_effect(keys: list[str], algo: str) -> str:
    """The note for keys the run's algorithm does not read (``Algorithm.uses``): they are
    accepted, so a grid over several algorithms takes a key of any one's block."""
    return f"{', '.join(keys) or 'the differing keys'} {'has' if len(keys) == 1 else 'have'} no effect with algo={algo}"


_NO_RUN_FLAGS = {"-c", "--cfg", "-i", "--info", "-h", "--help", "--hydra-help", "--version",
                 "--shell-completion", "-sc", "-m", "--multirun"}


def _single_run(argv: list[str], overrides: list[str]) -> bool:
    """Whether the command line runs its composed config as is (no multirun, no --cfg/--help:
    a multirun's every job is validated by the sweeper before any is dispatched)."""
    if any(a.split("=", 1)[0] in _NO_RUN_FLAGS for a in argv if a.startswith("-")):
        return False
    return not any(o.replace(" ", "").lower() == "hydra.mode=multirun" for o in overrides)


def prepare_argv(argv: list[str]) -> list[str]:
    """Check group choices; ``model=<checkpoint dir>`` becomes ``model=local model.path=<dir>``;
    then :func:`precheck` the command line (one line and exit 2 on bad input).

    A local directory (an HF ``save_pretrained`` layout, e.g. a run's ``model/``) is loaded as
    is; its prompt style is detected from its tokenizer (chat template or not).
    """
    out = []
    for arg in argv:
        m = re.match(r"^model=(.+)$", arg)
        if m and "," not in m.group(1) and Path(m.group(1)).is_dir():
            path = Path(m.group(1)).resolve()
            out += ["model=local", f"model.path={path}", f"model.name={path.name}"]
        else:
            out.append(arg)
    check_group_choices(out)
    precheck(out)
    return out


def hydra_app(task_function):
    """Run ``task_function(cfg)`` as esopt's Hydra app over ``conf/`` (argv already prepared)."""
    import hydra

    configs.register()
    argv = sys.argv[1:]
    loud = verbose(argv)
    argv = [a for a in argv if a not in ("-v", "--verbose")]
    if loud:  # Hydra's launcher logs back on (conf/config.yaml disables them)
        argv += ["hydra/hydra_logging=default", "hydra/job_logging=default"]
        os.environ["ESOPT_VERBOSE"] = "1"  # for the processes launchers start
    quiet()
    sys.argv[1:] = prepare_argv(argv)
    return hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(task_function)()
