"""``python -m esopt.evaluate model=... task=... [eval.out=FILE.json]``: evaluate one model
(a name or a checkpoint directory) on a task split with the shared evaluator; print a table.
With ``eval.out``, the completions go beside it (``FILE.samples.json``, ``eval.save_samples``);
``eval.print_samples=N`` prints N problems' completions after the table. It writes nothing else:
no Hydra output folder (``hydra.output_subdir=null``, run dir ``.``)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from esopt.cli.common import fail, hydra_app, validated
from esopt.core import store
from esopt.core.config import check_output_file
from esopt.core.errors import ConfigError
from esopt.evaluator import evaluate_config, format_samples, format_table, probe_floor_warnings, write_samples
from esopt.runtime import budget
from esopt.runtime.run import load_components, load_ood_task, load_probe_tasks


def evaluate_model(cfg) -> dict:
    """The Hydra task function: validate, load, evaluate, print, maybe save."""
    try:
        plan = validated(cfg)
        if plan.eval.out:  # before the evaluation, not after it (the result would be lost)
            check_output_file("eval.out", str(plan.eval.out))
    except ConfigError as e:
        fail(str(e))
    once = dataclasses.replace(plan, phases=()).replace_config(algo="none")  # one evaluation, whatever algo says
    line = budget.cpu_time_warning(once, budget.estimate_tokens(once))
    if line:
        print(f"esopt: warning: {line}", file=sys.stderr)
    try:
        model, tokenizer, engine, task = load_components(plan)
        ood = load_ood_task(plan, tokenizer)
        probes = load_probe_tasks(plan, tokenizer)
    except ConfigError as e:
        fail(str(e))
    except Exception as e:  # noqa: BLE001 - weights that pass the header check but do not load
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        fail(f"cannot load model {plan.model['name']!r}"
             + (f" from {plan.model['path']}" if plan.model.get("path") else "") + f": {type(e).__name__}: {first}")
    records: list = []
    result = evaluate_config(plan.eval, engine, task, ood, completions=records, probes=probes)
    for line in probe_floor_warnings(result):
        print(f"esopt: warning: {line}", file=sys.stderr)
    result["model"] = {"name": plan.model["name"], "path": plan.model.get("path")}
    result["engine"] = plan.engine_config.name
    print(format_table(result))
    if plan.eval.print_samples:
        print(format_samples(records, plan.eval.print_samples))
    if plan.eval.out:
        store.atomic_write_json(plan.eval.out, result)
        print(f"wrote {plan.eval.out}")
        if plan.eval.save_samples:
            write_samples(samples_file(plan.eval.out), records, plan.eval.save_samples, result, model=result["model"])
            print(f"wrote {samples_file(plan.eval.out)} (completions)")
    return result


def samples_file(out: str) -> Path:
    """Where ``esopt.evaluate eval.out=FILE.json`` keeps the completions: ``FILE.samples.json``."""
    p = Path(out)
    return p.with_name((p.stem if p.suffix == ".json" else p.name) + ".samples.json")


# esopt.evaluate records nothing of Hydra's: no .hydra/ copy of the config, no run folder
NO_HYDRA_OUTPUT = ("hydra.output_subdir=null", "hydra.run.dir=.")


def main() -> None:
    # it trains nothing: validated as algo=none unless told otherwise, so a benchmark file
    # evaluated whole (no train rows, e.g. task=math's default) passes the data checks
    if not any(a.split("=", 1)[0].lstrip("+~") == "algo" for a in sys.argv[1:]):
        sys.argv.append("algo=none")
    given = {a.split("=", 1)[0] for a in sys.argv[1:]}
    sys.argv += [o for o in NO_HYDRA_OUTPUT if o.split("=", 1)[0] not in given]
    hydra_app(evaluate_model)


if __name__ == "__main__":
    main()
