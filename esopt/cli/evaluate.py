"""``python -m esopt.evaluate model=... task=... [eval.out=FILE.json]``: evaluate one model
(a name or a checkpoint directory) on a task split with the shared evaluator; print a table."""

from __future__ import annotations

import sys

from esopt.cli.common import fail, hydra_app
from esopt.core import store
from esopt.core.config import check_output_file
from esopt.core.errors import ConfigError
from esopt.evaluator import evaluate_config, format_table, ood_task
from esopt.runtime.run import load_components
from esopt.runtime.validate import validate


def evaluate_model(cfg) -> dict:
    """The Hydra task function: validate, load, evaluate, print, maybe save."""
    try:
        rc = validate(cfg)
        if rc.eval.out:  # before the evaluation, not after it (the result would be lost)
            check_output_file("eval.out", str(rc.eval.out))
    except ConfigError as e:
        fail(str(e))
    try:
        model, tokenizer, engine, task = load_components(rc)
        ood = ood_task(rc.eval, tokenizer, rc.model.get("prompt_style"))
    except ConfigError as e:
        fail(str(e))
    except Exception as e:  # noqa: BLE001 - weights that pass the header check but do not load
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        fail(f"cannot load model {rc.model['name']!r}"
             + (f" from {rc.model['path']}" if rc.model.get("path") else "") + f": {type(e).__name__}: {first}")
    result = evaluate_config(rc.eval, engine, task, ood)
    result["model"] = {"name": rc.model["name"], "path": rc.model.get("path")}
    result["engine"] = rc.engine["name"]
    print(format_table(result))
    if rc.eval.out:
        store.atomic_write_json(rc.eval.out, result)
        print(f"wrote {rc.eval.out}")
    return result


def main() -> None:
    # it trains nothing: validated as algo=none unless told otherwise, so a benchmark file
    # evaluated whole (no train rows, e.g. task=math's default) passes the data checks
    if not any(a.split("=", 1)[0].lstrip("+~") == "algo" for a in sys.argv[1:]):
        sys.argv.append("algo=none")
    hydra_app(evaluate_model)


if __name__ == "__main__":
    main()
