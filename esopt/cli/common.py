"""What every entry point shares: the config directory, argv preparation, one-line errors."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

# The Hydra configs: conf/ at the top of the checkout, reached through the esopt/conf link (an
# installed package holds a copy there).
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


# Libraries whose warnings and info logs are chatter at the command line (deprecations of
# transformers / TRL internals, torch notices, progress bars); ESOPT_VERBOSE=1 or -v shows them.
NOISY = ("transformers", "trl", "torch", "datasets", "accelerate", "huggingface_hub", "tokenizers", "optuna",
         "submitit", "hydra", "omegaconf", "pandas", "pyarrow", "plotly", "scipy", "numpy", "tqdm", "vllm")


def verbose(argv: list[str] | None = None) -> bool:
    """Whether the user asked for library output: ``ESOPT_VERBOSE=1`` or ``-v`` / ``--verbose``."""
    import os

    return os.environ.get("ESOPT_VERBOSE", "") not in ("", "0") or any(a in ("-v", "--verbose") for a in argv or ())


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


def check_group_choices(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Reject unknown config-group choices (model=foo) with one line, before Hydra runs."""
    from esopt import engines, tasks

    code_groups = {"task": tuple(tasks.TASK_NAMES), "engine": tuple(engines.ENGINES)}
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


def prepare_argv(argv: list[str]) -> list[str]:
    """Check group choices; ``model=<checkpoint dir>`` becomes ``model=local model.path=<dir>``.

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
    return out


def hydra_app(task_function):
    """Run ``task_function(cfg)`` as esopt's Hydra app over ``conf/`` (argv already prepared)."""
    import hydra

    from esopt.cli import configs

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
