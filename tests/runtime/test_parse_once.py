"""Each config block is parsed once, by validate (``esopt.core.config.block``: ``es:`` by the
phase that resolves it, the engine block into ``plan.engine_config``), and never again below it:
the run reads its plan. Counted by code object (``helpers.counted_calls``), nothing replaced."""

import pytest

from esopt import algorithms
from esopt.core import config
from esopt.runtime.validate import validate
from helpers import cli, compose, counted_calls

TINY = ("model=tiny-xs", "pop=2", "iterations=2", "eval.problems=2", "eval.samples=1", "es.batch_size=2")


@pytest.mark.parametrize("algo", list(algorithms.ALGORITHMS))
def test_validate_parses_each_block_once(algo):
    cfg = compose(*TINY, f"algo={algo}")
    with counted_calls(block=config.block, by="name") as n:
        plan = validate(cfg, check_data=False)
    parsed = {k.removeprefix("block:"): v for k, v in n.items() if k.startswith("block:")}
    assert parsed and max(parsed.values()) == 1, parsed
    assert all(parsed.get(name) == 1 for name in algorithms.get(algo).block_names), parsed  # its own blocks
    assert parsed[f"engine ({plan.engine_config.name})"] == 1


def test_a_run_parses_no_block_below_validate(tmp_path):
    """A real single ES run (tiny-xs, 1 iteration of pop 2), in this interpreter: validated once,
    and its layers read the plan (no block parsed after validate returned)."""
    with counted_calls(validate=validate, block=config.block, outside=validate) as n:
        out = cli("esopt.sweep", *TINY, "algo=es", "iterations=1", f"sweep.root={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert "completed" in out.stdout
    assert n["validate"] == 1 and n["block"] > 0 and n["block_outside"] == 0
