"""Size-like inputs are bounded before dispatch (esopt.runtime.limits): one line naming the
limit, exit 2; nothing is allocated in proportion to ``iterations``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from esopt.cli import configs
from esopt.cli.common import prepare_argv
from helpers import rejected
from esopt.runtime import limits

configs.register()
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, needle", [
    (["algo=es", "pop=1000000000"], f"pop=1000000000 is above the limit {limits.MAX_POP} ("),
    (["algo=es", "iterations=1000000000"], f"iterations=1000000000 is above the limit {limits.MAX_ITERATIONS}"),
    (["eval.samples=100000"], f"eval.samples=100000 is above the limit {limits.MAX_SAMPLES}"),
    (["eval.problems=10000000"], f"eval.problems=10000000 is above the limit {limits.MAX_PROBLEMS}"),
    (["algo=es", "es.batch_size=10000000"], f"es.batch_size=10000000 is above the limit {limits.MAX_BATCH}"),
    (["algo=grpo", "grpo.num_generations=100000"], "grpo.num_generations=100000 is above the limit"),
    (["algo=grpo", "grpo.prompts_per_step=10000000"], "grpo.prompts_per_step=10000000 is above the limit"),
    (["eval.max_new_tokens=10000000"], "eval.max_new_tokens=10000000 is above the limit"),
    (["model=tiny-xs", "eval.max_new_tokens=5000"], "max_new_tokens=5000 is not below the limit 2176: the context of model tiny-xs (128 positions)"),
    (["model=tiny-xs", "algo=es", "es.max_new_tokens=4096"], "max_new_tokens=4096 is not below the limit"),
])
def test_sizes_above_their_limit_are_one_line(capsys, argv, needle):
    assert needle in rejected(capsys, *argv)


def test_limits_leave_real_sizes_alone(capsys):
    prepare_argv(["model=tiny-xs", "algo=es", "pop=4096", "es.batch_size=64", "eval.samples=32",
                  "eval.problems=10", "eval.max_new_tokens=1000"])
    assert capsys.readouterr().err == ""


def _countdown_file(path: Path, long_row: dict) -> Path:
    rows = [{"nums": [i % 9 + 1, 2, 3], "target": 6 + i} for i in range(60)] + [long_row]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_a_prompt_longer_than_the_context_is_refused(tmp_path, capsys):
    """A data row with many numbers makes a prompt past the tiny model's 128 positions + 2048."""
    src = _countdown_file(tmp_path / "long.jsonl", {"nums": list(range(1, 1000)), "target": 7})
    err = rejected(capsys, "model=tiny-xs", "task=countdown", f"task.source={src}", "task.n_train=30",
                   "task.n_heldout=0", "eval.problems=5")
    assert "tokens, which with max_new_tokens=24 exceeds the limit 2176: the context of model " \
           "tiny-xs (128 positions) + 2048" in err, err
    assert "split's problem" in err


def test_a_huge_row_is_refused_without_tokenizing_it(tmp_path, capsys):
    src = _countdown_file(tmp_path / "huge.jsonl", {"nums": [3] * 200_000, "target": 7})
    err = rejected(capsys, "model=tiny-xs", "task=countdown", f"task.source={src}", "task.n_train=30",
                   "task.n_heldout=0", "eval.problems=5")
    assert "characters, which with max_new_tokens" in err, err


def test_pruner_check_does_not_allocate_per_iteration():
    """``tuning.check`` with a billion iterations under a 1.5 GB address-space cap: arithmetic,
    not ``set(range(every, iterations, every))`` (2.5 GB)."""
    code = f"""
import resource
resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))
import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})
from helpers import compose
from esopt import algorithms
from esopt.core.config import parse
from esopt.runtime import tuning
from esopt.runtime.validate import own_blocks
rc = parse(compose("algo=es", "iterations=1000000000", "tuning.pruner=median", "tuning.enabled=true"),
           blocks=algorithms.blocks())
rc = own_blocks(rc, algorithms.get(rc.algo))
print(tuning.check(rc).pruner)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "median", out.stderr[-2000:]


def test_the_context_is_checked_for_every_model_and_budget_of_a_grid(capsys):
    """Validation builds a task's data once per distinct config; the context check still sees
    every job's budget (a grid over eval.max_new_tokens with one task)."""
    prepare_argv(["model=tiny-xs", "eval.problems=5", "eval.max_new_tokens=24"])
    err = rejected(capsys, "model=tiny-xs", "eval.problems=5", "eval.max_new_tokens=2170")
    assert "max_new_tokens=2170 exceeds the limit 2176" in err, err
