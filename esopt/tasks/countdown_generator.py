"""Countdown's procedural generator: random solvable problems, their identity (``key``) and
the half of the problem space each belongs to (``pool_of``: RL splits or pretraining)."""

from __future__ import annotations

import ast
import hashlib
import random
from collections.abc import Iterable, Sequence

from esopt.tasks import distinct_problems
from esopt.tasks.countdown_verifier import parse_target

TREE_TRIES = 20          # random expression trees tried over one draw of numbers

def _combine(a: tuple[int, ast.expr], b: tuple[int, ast.expr], rng: random.Random):
    """One random allowed operation on two (value, tree) items keeping the value a positive
    integer: a+b, a*b, larger-smaller (if different), larger/smaller (if exact)."""
    (x, ex), (y, ey) = a, b
    if x < y:
        (x, ex), (y, ey) = (y, ey), (x, ex)
    options = [(x + y, ast.Add()), (x * y, ast.Mult())]
    if x != y:
        options.append((x - y, ast.Sub()))
    if y and x % y == 0:
        options.append((x // y, ast.Div()))
    value, op = rng.choice(options)
    return value, ast.BinOp(left=ex, op=op, right=ey)


def random_problem(
    rng: random.Random,
    count: int,
    min_number: int,
    max_number: int,
    max_target: int | None,
    tries: int = TREE_TRIES,
) -> dict | None:
    """One problem ``{"numbers", "target", "solution"}`` (numbers in random order), or None if
    ``tries`` random expression trees over one draw of numbers all missed ``1..max_target``."""
    numbers = [rng.randint(min_number, max_number) for _ in range(count)]
    for _ in range(tries):
        pool: list[tuple[int, ast.expr]] = [(n, ast.Constant(n)) for n in numbers]
        while len(pool) > 1:
            i, j = rng.sample(range(len(pool)), 2)
            item = _combine(pool[i], pool[j], rng)
            pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [item]
        target, tree = pool[0]
        if target >= 1 and (max_target is None or target <= max_target):
            solution = ast.unparse(tree).replace(" ", "")
            return {"numbers": numbers, "target": target, "solution": solution}
    return None


def key(numbers: Sequence[int], target) -> tuple:
    """Problem identity for deduplication: (sorted numbers, target as an int, or a Fraction
    when it is not an integer)."""
    t = parse_target(target)
    if t is None:
        raise ValueError(f"not a countdown target: {target!r}")
    return (tuple(sorted(int(n) for n in numbers)), t.numerator if t.denominator == 1 else t)


POOLS = ("rl", "pretrain")


def pool_of(problem_key: tuple) -> str:
    """The half of the problem space a problem belongs to: ``"pretrain"`` when the first byte of
    ``sha256(repr(key))`` is odd, else ``"rl"``.

    The generator deals RL splits (train / test / heldout) from the ``rl`` pool only and the tiny
    family is pretrained on the ``pretrain`` pool only, so pretraining never sees an RL problem,
    whatever the split sizes, seed or number range.
    """
    return "pretrain" if hashlib.sha256(repr(problem_key).encode()).digest()[0] & 1 else "rl"


def generate(
    n: int,
    *,
    count: int | Sequence[int] = 3,
    min_number: int = 1,
    max_number: int = 12,
    max_target: int | None = 100,
    seed: int = 0,
    exclude: Iterable[tuple] = (),
    pool: str = "rl",
) -> list[dict]:
    """``n`` distinct problems (by ``key``) of ``pool`` (``pool_of``), none in ``exclude``;
    deterministic for the knobs.

    Raises ConfigError when the knobs admit too few distinct problems.
    """
    counts = [count] if isinstance(count, int) else list(count)
    rng = random.Random(seed)
    return distinct_problems(
        n, lambda: random_problem(rng, rng.choice(counts), min_number, max_number, max_target),
        lambda p: key(p["numbers"], p["target"]), exclude=exclude, keep=lambda k: pool_of(k) == pool,
        too_few=lambda found: (
            f"task countdown: only {found} distinct problems found of {n} wanted; widen "
            f"min_number..max_number ({min_number}..{max_number}), raise max_target "
            f"({max_target}) or lower n_train/n_test/n_heldout"))
