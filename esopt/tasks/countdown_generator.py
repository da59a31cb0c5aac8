"""Countdown's procedural generator: random solvable problems, their identity (``key``), the
half of the problem space each belongs to (``pool_of``: RL splits or pretraining) and every
solution of a problem (``solutions``: the tiny family's pretraining targets). Both the random
problems and the solutions are built from one rule for an intermediate value (``apply``)."""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import random
from collections.abc import Iterable, Sequence

from esopt.tasks import distinct_problems
from esopt.tasks.countdown_verifier import parse_target, solution_text

TREE_TRIES = 20          # random expression trees tried over one draw of numbers
OPERATIONS = (ast.Add, ast.Mult, ast.Sub, ast.Div)  # in the order the generator draws from


def apply(op: type, x: int, y: int) -> int | None:
    """``x op y`` when it is again a positive integer (Countdown's rule for every intermediate
    value of a problem's solution), else None: ``x + y``, ``x * y``, ``x - y`` when x > y,
    ``x / y`` when y divides x and x >= y."""
    if op is ast.Add:
        return x + y
    if op is ast.Mult:
        return x * y
    if op is ast.Sub:
        return x - y if x > y else None
    return x // y if y and x >= y and x % y == 0 else None


def _combine(a: tuple[int, ast.expr], b: tuple[int, ast.expr], rng: random.Random):
    """One random allowed operation (:func:`apply`) on two (value, tree) items, the larger
    first: a+b, a*b, larger-smaller (if different), larger/smaller (if exact)."""
    (x, ex), (y, ey) = a, b
    if x < y:
        (x, ex), (y, ey) = (y, ey), (x, ex)
    options = [(v, op) for op in OPERATIONS if (v := apply(op, x, y)) is not None]
    value, op = rng.choice(options)
    return value, ast.BinOp(left=ex, op=op(), right=ey)


def expressions(numbers: Sequence[int]) -> list[tuple[int, int | tuple]]:
    """Every expression over the ordered ``numbers`` (all bracketings and operations) whose
    intermediate values are all allowed (:func:`apply`), as (value, node): a node is a number
    or ``(operation, left node, right node)``; :func:`tree` makes one an ``ast`` (only the
    solutions need one: an ``ast`` node for every expression made this several times slower)."""
    if len(numbers) == 1:
        return [(numbers[0], numbers[0])]
    out = []
    for cut in range(1, len(numbers)):
        for x, ex in expressions(numbers[:cut]):
            for y, ey in expressions(numbers[cut:]):
                for op in OPERATIONS:
                    v = apply(op, x, y)
                    if v is not None:
                        out.append((v, (op, ex, ey)))
    return out


def tree(node: int | tuple) -> ast.expr:
    """The ``ast`` of an :func:`expressions` node."""
    if isinstance(node, int):
        return ast.Constant(node)
    op, left, right = node
    return ast.BinOp(left=tree(left), op=op(), right=tree(right))


def solutions(numbers: Iterable[int], target: int) -> list[str]:
    """All distinct solutions of a problem, sorted: expressions using each of ``numbers`` once,
    in any order and bracketing, with allowed intermediate values, equal to ``target``, each
    written with the fewest parentheses (``countdown_verifier.solution_text``)."""
    found = set()
    for perm in set(itertools.permutations(int(n) for n in numbers)):
        found.update(solution_text(tree(node)) for v, node in expressions(perm) if v == target)
    return sorted(found)


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
    deterministic for the knobs, so a process draws each set once (``_draw``'s cache: the runs
    of a sweep in one process build the same splits) and gets a fresh copy of it each time.

    Raises ConfigError when the knobs admit too few distinct problems.
    """
    counts = (count,) if isinstance(count, int) else tuple(count)
    problems = _draw(n, counts, min_number, max_number, max_target, seed, frozenset(exclude), pool)
    return [{**p, "numbers": list(p["numbers"])} for p in problems]


@functools.lru_cache(maxsize=8)
def _draw(n: int, counts: tuple[int, ...], min_number: int, max_number: int, max_target: int | None,
          seed: int, exclude: frozenset, pool: str) -> tuple[dict, ...]:
    rng = random.Random(seed)
    return tuple(distinct_problems(
        n, lambda: random_problem(rng, rng.choice(counts), min_number, max_number, max_target),
        lambda p: key(p["numbers"], p["target"]), exclude=exclude, keep=lambda k: pool_of(k) == pool,
        too_few=lambda found: (
            f"task countdown: only {found} distinct problems found of {n} wanted; widen "
            f"min_number..max_number ({min_number}..{max_number}), raise max_target "
            f"({max_target}) or lower n_train/n_test/n_heldout")))
