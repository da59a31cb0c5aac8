"""Countdown: use each given number exactly once with + - * / and parentheses to hit the target.

Data (``source``):
  * ``null``: a seeded procedural generator. Each problem draws ``count`` numbers uniformly from
    ``min_number..max_number`` (repeats allowed), then combines two random pool items with a
    random operator until one value is left: ``a+b``, ``a*b``, ``a-b`` only when positive,
    ``a/b`` only when exact, so every intermediate value is a positive integer. The result is the
    target (kept only if ``1 <= target <= max_target``) and the expression is kept as
    ``solution`` (minimal parentheses, no spaces), so every target is reachable by construction.
    Half of the problem space (by a hash of the problem key, ``pool_of``) is reserved for
    pretraining the tiny family; the generator only deals problems of the other half (``rl``).
    Problems are deduplicated by ``(sorted numbers, target)`` and dealt in generation order:
    first ``n_test`` to test, then ``n_heldout`` to heldout, then ``n_train`` to train. So test and
    heldout do not change when only ``n_train`` changes (a bigger ``n_train`` with the same other
    knobs yields a superset train split, disjoint from the same test/heldout).
  * a local ``.json`` (array or JSON lines), ``.jsonl`` or ``.parquet`` file, a folder holding
    ``<hub_split>.jsonl``, a ``save_to_disk`` directory, or a hub dataset name, in either public
    format: ``{nums, target}`` (Countdown-Tasks-3to4, TinyZero) or ``{id, context, numbers,
    target, solution}`` (the ES-at-scale repo's 2,200-problem ``countdown.json``). ``target`` may
    be a number or a numeric string (``"98"``), and need not be an integer (``"27.4"``, from
    98/(47-52)+47); ``solution`` may be missing or null. Split rule (the ES repo's README: the
    first 200 rows train, the others test): train = the first ``n_train`` rows (default 200);
    heldout = the last ``n_heldout`` rows (default 0); test = the rows in between, at most
    ``n_test`` (default null = all: 2,000 of that file). Rows of test/heldout whose key already
    occurs in an earlier split are dropped so the splits stay disjoint. In the chat style a row's
    own ``context`` is its prompt, verbatim (the ES repo feeds it to the tokenizer as is: a
    rendered Qwen chat prompt ending in ``<think>``); rows without one get the rendered prompt
    below. The compact style always renders its prompt.

Styles:
  * ``compact`` (tiny models): prompt ``"3 7 2=23:"`` (numbers in given order, ``=``, target,
    ``:``); completion = a bare expression, ended by EOS. Verdict: format = 1 iff the stripped
    completion is a syntactically valid allowed expression; answer = ``check_expression``;
    reward = 0.1*format + answer; extracted = canonical expression (no spaces, minimal
    parentheses) or None.
  * ``chat`` (instruct models): TinyZero-style think/answer prompt, assistant turn opened with
    ``<think>``; reward = the public ES reward (``reward``). Stop string ``</answer>``: the engine
    must keep the stop string in the completion, or the format part cannot score 1.
"""

from __future__ import annotations

import ast
import hashlib
import math
import numbers as _numbers
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from esopt.tasks import (
    ConfigError,
    Task,
    Verdict,
    chat_prompt,
    check_counts,
    check_int,
    load_split,
    make_dataset,
)

# ------------------------------------------------------------------------------ the verifier

MAX_LEN = 200  # longer expressions are rejected before parsing
MAX_DEPTH = 16  # parenthesis nesting cap (checked on the text, before ast)
MAX_DIGITS = 12  # longest integer literal
MAX_MAGNITUDE = 10**12  # any intermediate numerator/denominator above this -> False
_ALLOWED = frozenset("0123456789+-*/() \t")
_LITERAL = re.compile(r"[0-9]+")
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def parse_expression(expr: str) -> ast.expr | None:
    """The ``ast`` of ``expr`` if it is an allowed expression, else None. Never evaluates.

    Allowed: ASCII integer literals (no sign, no leading zeros except ``0`` itself, at most
    12 digits), binary ``+ - * /``, parentheses (nesting <= 16), spaces/tabs; at most 200
    characters after stripping surrounding whitespace. Rejected before ``ast`` is called: any
    other character (non-ASCII or unicode digits, letters, ``.``, ``_``, ``e``, quotes, ``,``,
    ``=``), ``**``, ``//``, unbalanced or too deep parentheses. Rejected on the tree: unary
    ``+``/``-`` (so ``-3`` or ``3--4`` are not allowed: Countdown uses the given numbers as
    they are), calls such as ``(3)(4)``, anything but BinOp/Constant(int).
    """
    if not isinstance(expr, str):
        return None
    expr = expr.strip()
    if not expr or len(expr) > MAX_LEN or not _ALLOWED.issuperset(expr):
        return None
    if "**" in expr or "//" in expr:
        return None
    depth = 0
    for ch in expr:
        if ch == "(":
            depth += 1
            if depth > MAX_DEPTH:
                return None
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return None
    if depth:
        return None
    for lit in _LITERAL.findall(expr):
        if len(lit) > MAX_DIGITS or (lit[0] == "0" and len(lit) > 1):
            return None
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = tree.body
    return body if _allowed(body) else None


def _allowed(node: ast.expr) -> bool:
    """Only BinOp(+ - * /) over int Constants, all the way down (iterative: no recursion limit)."""
    todo = [node]
    while todo:
        n = todo.pop()
        t = type(n)
        if t is ast.BinOp:
            if type(n.op) not in _OPS:
                return False
            todo += (n.left, n.right)
        elif t is not ast.Constant or type(n.value) is not int:
            return False
    return True


def _literals(node: ast.expr) -> Counter:
    """The multiset of integer literals of an allowed tree."""
    out: Counter = Counter()
    todo = [node]
    while todo:
        n = todo.pop()
        if type(n) is ast.Constant:
            out[n.value] += 1
        else:
            todo += (n.left, n.right)
    return out


def _value(node: ast.expr) -> int | Fraction | None:
    """Exact value of a parsed tree (an int until a division makes it a ``Fraction``); None on
    division by zero or a magnitude over the cap."""
    if type(node) is ast.Constant:
        return node.value
    left, right = _value(node.left), _value(node.right)  # type: ignore[attr-defined]
    if left is None or right is None:
        return None
    op = type(node.op)  # type: ignore[attr-defined]
    if op is ast.Add:
        v = left + right
    elif op is ast.Sub:
        v = left - right
    elif op is ast.Mult:
        v = left * right
    else:
        if right == 0:
            return None
        v = Fraction(left, right) if type(left) is int and type(right) is int else left / right
    if abs(v.numerator) > MAX_MAGNITUDE or v.denominator > MAX_MAGNITUDE:  # ints have both too
        return None
    return v


def evaluate(expr: str) -> Fraction | None:
    """Exact ``Fraction`` value of an allowed expression (see ``parse_expression``), else None."""
    tree = parse_expression(expr)
    value = None if tree is None else _value(tree)
    return None if value is None else Fraction(value)


def canonical(expr: str) -> str | None:
    """Normal form of an allowed expression: minimal parentheses, no spaces; None if not allowed.

    e.g. ``" (3 * 7) + 2"`` -> ``"3*7+2"``.
    """
    tree = parse_expression(expr)
    return None if tree is None else _unparse(tree)


_PRECEDENCE = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2}


def _unparse(tree: ast.expr, context: int = 0) -> str:
    """``ast.unparse(tree)`` without spaces, for allowed trees: operators are left-associative,
    so an operand is parenthesised when its operator binds less tightly than the context asks
    (the left operand: the parent's precedence; the right one: one more)."""
    if type(tree) is ast.Constant:
        return str(tree.value)
    op = type(tree.op)  # type: ignore[attr-defined]
    p = _PRECEDENCE[op]
    text = _unparse(tree.left, p) + _OPS[op] + _unparse(tree.right, p + 1)  # type: ignore[attr-defined]
    return f"({text})" if context > p else text


TOLERANCE = Fraction(1, 10**5)  # the published reward: |value - target| < 1e-5
_TARGET_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def parse_target(value) -> Fraction | None:
    """A Countdown target as an exact ``Fraction``: an int, a finite float (read as its shortest
    decimal, ``27.4`` -> 137/5), a numeric string (``"98"``, ``" 27.4 "``, ``"266.6666666666667"``)
    or a numpy number; None for anything else (bool, ``"abc"``, ``""``, ``"nan"``, ``"1e5"``)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, _numbers.Integral):
        return Fraction(int(value))
    if isinstance(value, _numbers.Real):
        f = float(value)
        return Fraction(repr(f)) if math.isfinite(f) else None
    if isinstance(value, Fraction):  # pragma: no cover - Fraction is a numbers.Real
        return value
    if isinstance(value, str) and len(value) <= 40 and _TARGET_TEXT.fullmatch(value.strip()):
        return Fraction(value.strip())
    return None



def target_text(target) -> str:
    """How a target is written in a prompt: ``"98"``, ``"27.4"``, ``"266.6666666666667"``."""
    v = parse_target(target)
    if v is None:
        raise ValueError(f"not a countdown target: {target!r}")
    return str(v.numerator) if v.denominator == 1 else repr(float(v))


def check_expression(expr: str, numbers: Iterable[int], target) -> bool:
    """True iff ``expr`` is an allowed expression (``parse_expression``) that uses exactly the
    multiset ``numbers`` as its literals and whose exact rational value lies within 1e-5 of
    ``target`` (strictly: ``|value - target| < 1e-5``, the published reward's tolerance).

    ``target`` is anything ``parse_target`` reads (``23``, ``"98"``, ``27.4``, ``"27.4"``).
    Arithmetic is exact (``fractions.Fraction``), so ``6/4*8`` is 12 and ``1/3*3`` is 1 exactly;
    the tolerance only matters for targets the file rounded (``"266.6666666666667"`` =
    800/3 to 16 digits); an answer 0.01 away is never right. The public verifiers used float
    ``eval`` instead. Never calls ``eval``; any input returns quickly (length, character and
    nesting checks come before ``ast``; intermediate values are capped at 10**12).
    """
    tree = parse_expression(expr)
    return tree is not None and _tree_checks(tree, numbers, target)


def _tree_checks(tree: ast.expr, numbers: Iterable[int], target) -> bool:
    """``check_expression`` on an already parsed allowed tree."""
    goal = parse_target(target)
    if goal is None:
        return False
    try:
        want = Counter(int(n) for n in numbers)
    except (TypeError, ValueError, OverflowError):
        return False
    if _literals(tree) != want:
        return False
    value = _value(tree)
    return value is not None and abs(value - goal) < TOLERANCE


# ------------------------------------------------------------------- the chat (public) reward

# The public reward's patterns, kept as the reference the scanners below must equal (tests
# compare them on random and mutated inputs). The regexes backtrack quadratically on repeated
# tags, so the scoring uses str.find scans instead: linear in the completion's length.
_FULL = re.compile(r"^<think>.*?</think>\n<answer>.*?</answer>$", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_MID = "</think>\n<answer>"
_END = "</answer>"


def _has_block(text: str, open_tag: str, close_tag: str) -> bool:
    """``re.search(open_tag + ".*?" + close_tag, text, DOTALL)`` in one linear scan: an opening
    tag followed (anywhere later) by a closing one."""
    i = text.find(open_tag)
    return i >= 0 and text.find(close_tag, i + len(open_tag)) >= 0


def format_score(completion: str) -> float:
    """Public ES format reward on ``"<think>" + completion`` (the prompt opens the think block):
    1.0 if it matches ``^<think>.*?</think>\\n<answer>.*?</answer>$`` (DOTALL; ``$`` as in
    Python ``re``, so one trailing newline is tolerated), else 0.1 if it contains a
    ``<think>...</think>`` block plus 0.5 if it contains an ``<answer>...</answer>`` block.

    Computed by ``str.find`` scans, linear in the length (the regexes above are the reference):
    the full pattern matches iff the text ends with ``</answer>`` (or ``</answer>\\n``) and a
    ``</think>\\n<answer>`` starts at or after index 7 and ends at or before that final tag."""
    text = "<think>" + completion
    body = text[:-1] if text.endswith("\n") else text
    if body.endswith(_END):
        mid = text.find(_MID, len("<think>"))
        if 0 <= mid and mid + len(_MID) <= len(body) - len(_END):
            return 1.0
    return (0.1 if _has_block(text, "<think>", "</think>") else 0.0) + (
        0.5 if _has_block(text, "<answer>", _END) else 0.0)


def last_answer(completion: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` block, whitespace-stripped; None if none.

    ``_ANSWER.findall`` up to the last ``</answer>`` only: there every opening tag has a closing
    one after it, so no lazy scan runs to the end of the text (the quadratic case of the
    regex on many unclosed tags) and the blocks are the same as over the whole text."""
    end = completion.rfind(_END)
    if end < 0:
        return None
    found = _ANSWER.findall(completion, 0, end + len(_END))
    return found[-1].strip() if found else None


def reward(completion: str, numbers: Sequence[int], target) -> float:
    """Public ES Countdown reward: ``0.1 * format + answer``.

    format = ``format_score(completion)`` (in {0, 0.1, 0.5, 0.6, 1}); answer = 1.0 if the last
    ``<answer>`` content (stripped) passes ``check_expression`` else 0.0. Differences from the
    public verifier: exact rational arithmetic instead of float ``eval`` within 1e-5, and the
    stricter expression grammar of ``parse_expression`` (e.g. no ``**``, no unary minus).
    """
    return chat_verdict(completion, numbers, target).reward


def chat_verdict(completion: str, numbers: Sequence[int], target) -> Verdict:
    fmt = format_score(completion)
    content = last_answer(completion)
    tree = None if content is None else parse_expression(content)  # parsed once: answer and extract
    ok = tree is not None and _tree_checks(tree, numbers, target)
    extracted = None if content is None else (_unparse(tree) if tree is not None else content)
    return Verdict(0.1 * fmt + float(ok), fmt, float(ok), ok, extracted)


def compact_verdict(completion: str, numbers: Sequence[int], target) -> Verdict:
    """Compact style: format = 1 iff the stripped completion is an allowed expression;
    answer = check_expression; reward = 0.1*format + answer."""
    tree = parse_expression(completion)  # parsed once for the format, the answer and the extract
    extracted = None if tree is None else _unparse(tree)
    fmt = 0.0 if extracted is None else 1.0
    ok = tree is not None and _tree_checks(tree, numbers, target)
    return Verdict(0.1 * fmt + float(ok), fmt, float(ok), ok, extracted)


# ------------------------------------------------------------------------------- prompts

SYSTEM = (
    "You are a helpful assistant. You first think about the reasoning process in the mind "
    "and then provide the user with the answer."
)
USER = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use basic "
    "arithmetic operations (+, -, *, /) and each number can only be used once. Show your work "
    "in <think> </think> tags. And return the final answer in <answer> </answer> tags, for "
    "example <answer> (1 + 2) / 3 </answer>."
)


def compact_prompt(numbers: Sequence[int], target) -> str:
    """``"3 7 2=23:"``: numbers space-separated in the given order, '=', target, ':'."""
    return " ".join(str(int(n)) for n in numbers) + "=" + target_text(target) + ":"


def chat_messages(numbers: Sequence[int], target) -> list[dict]:
    nums = "[" + ", ".join(str(int(n)) for n in numbers) + "]"
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER.format(numbers=nums, target=target_text(target))},
    ]


# ----------------------------------------------------------------------------- generator


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
    tries: int = 20,
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
    seen = set(exclude)
    out: list[dict] = []
    budget = 50 * n + 1000
    while len(out) < n:
        budget -= 1
        if budget < 0:
            raise ConfigError(
                f"task countdown: only {len(out)} distinct problems found of {n} wanted; widen "
                f"min_number..max_number ({min_number}..{max_number}), raise max_target "
                f"({max_target}) or lower n_train/n_test/n_heldout"
            )
        p = random_problem(rng, rng.choice(counts), min_number, max_number, max_target)
        if p is None:
            continue
        k = key(p["numbers"], p["target"])
        if k in seen:
            continue
        seen.add(k)
        if pool_of(k) == pool:
            out.append(p)
    return out


# ----------------------------------------------------------------------------- the task



def _features(integer_targets: bool = True):
    """Dataset columns; ``target`` is int64 when every target of the data is an integer (the
    generator, Countdown-Tasks-3to4), else float64 (the ES file's ``27.4``)."""
    import datasets

    return {
        "prompt": datasets.Value("string"),
        "id": datasets.Value("string"),
        "numbers": datasets.Sequence(datasets.Value("int64")),
        "target": datasets.Value("int64" if integer_targets else "float64"),
        "solution": datasets.Value("string"),
    }


def _as_int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    try:  # numpy integers
        import numbers as _n

        if isinstance(v, _n.Integral):
            return int(v)
    except Exception:  # pragma: no cover
        pass
    return None


def parse_row(row: Mapping, where: str) -> dict:
    """A public-format row -> ``{"numbers", "target", "solution", "context"}`` (target an int,
    or a float when it is not an integer); ConfigError naming ``where`` (file and row) and the
    field when the row lacks its numbers or target, or they are not numbers."""
    field = "nums" if row.get("nums") is not None else "numbers"
    nums = row.get(field)
    if nums is None:
        raise ConfigError(f"{where}: malformed countdown row: field 'numbers' (or 'nums') is missing")
    ints = [_as_int(n) for n in nums] if isinstance(nums, (list, tuple)) else None
    if ints is None or len(ints) < 2 or any(n is None or n < 0 for n in ints):
        raise ConfigError(
            f"{where}: malformed countdown row: field {field!r} must be a list of >= 2 "
            f"non-negative integers, got {nums!r:.80}"
        )
    if row.get("target") is None:
        raise ConfigError(f"{where}: malformed countdown row: field 'target' is missing")
    t = parse_target(row["target"])
    if t is None:
        raise ConfigError(
            f"{where}: malformed countdown row: field 'target' must be a number, "
            f"got {row['target']!r:.40}"
        )
    solution, context = row.get("solution"), row.get("context")
    return {
        "numbers": ints,
        "target": t.numerator if t.denominator == 1 else float(t),
        "solution": solution if isinstance(solution, str) and solution.strip() else None,
        "context": context if isinstance(context, str) and context.strip() else None,
    }


class CountdownTask(Task):
    name = "countdown"
    styles = ("compact", "chat")
    # Every knob of `task=countdown` (defaults registered with Hydra from here). The generator
    # (source null) deals test, heldout, train from one seeded stream of distinct problems
    # (distinct by sorted numbers + target), so test/heldout stay fixed when only n_train changes.
    # n_train / n_test / n_heldout left null take the default of the source (resolve()).
    knobs = {
        "count": [3, 4],        # numbers per problem: 3, 4, or a list such as [3, 4] (drawn per problem)
        "min_number": 1,        # smallest number (>= 1)
        "max_number": 12,       # largest number
        "max_target": 100,      # largest target (targets are >= 1); null = no cap
        "n_train": None,        # train problems; null = generator 2000, files 200 (the first rows,
        #                         as the ES repo trains on its file's first 200)
        "n_test": None,         # test problems; null = generator 500, files every row between
        #                         train and heldout (2,000 of the ES file)
        "n_heldout": None,      # held-out problems; null = generator 500, files 0 (the last rows)
        "seed": 0,              # generator seed: same knobs + seed = same data
        "source": None,         # null = the generator; or a local .json/.jsonl/.parquet file, a
        #                         folder with <hub_split>.jsonl, a save_to_disk directory, or a hub
        #                         dataset name, with rows {nums, target} or
        #                         {id, context, numbers, target, solution}
        "hub_config": None,     # hub dataset config name (source = hub name only)
        "hub_split": "train",   # hub split (or folder / save_to_disk split) that is loaded and carved
    }
    budgets = {"compact": 24, "chat": 1024}
    stops = {"chat": ("</answer>",)}
    SIZES = {"generator": (2000, 500, 500), "file": (200, None, 0)}  # (n_train, n_test, n_heldout)

    @classmethod
    def resolve(cls, cfg: dict) -> dict:
        """n_train / n_test / n_heldout left null -> ``SIZES`` of the generator or of a file."""
        sizes = cls.SIZES["generator" if cfg.get("source") is None else "file"]
        out = dict(cfg)
        for key, default in zip(("n_train", "n_test", "n_heldout"), sizes):
            if out.get(key) is None:
                out[key] = default
        return out

    def _validate(self) -> None:
        c = self.cfg
        c["count"] = check_counts("countdown", c["count"])
        check_int("countdown", "min_number", c["min_number"], 1)
        check_int("countdown", "max_number", c["max_number"], c["min_number"])
        check_int("countdown", "max_target", c["max_target"], 1, allow_none=True)
        check_int("countdown", "n_train", c["n_train"], 0)
        check_int("countdown", "n_test", c["n_test"], 1, allow_none=c["source"] is not None)
        check_int("countdown", "n_heldout", c["n_heldout"], 0)
        check_int("countdown", "seed", c["seed"], 0)

    # -- data
    def _build(self) -> dict:
        c = self.cfg
        if c["source"] is None:
            probs = generate(
                c["n_test"] + c["n_heldout"] + c["n_train"],
                count=c["count"],
                min_number=c["min_number"],
                max_number=c["max_number"],
                max_target=c["max_target"],
                seed=c["seed"],
            )
            a, b = c["n_test"], c["n_test"] + c["n_heldout"]
            parts = {"test": probs[:a], "heldout": probs[a:b], "train": probs[b:]}
        else:
            parts = self._load(str(c["source"]))
        integer = all(isinstance(p["target"], int) for ps in parts.values() for p in ps)
        return {
            name: make_dataset(
                [self._row(p, f"countdown/{name}/{i}") for i, p in enumerate(ps)],
                _features(integer),
            )
            for name, ps in parts.items()
        }

    def _load(self, source: str) -> dict[str, list[dict]]:
        c = self.cfg
        ds, where = load_split(source, "countdown", c["hub_split"], c["hub_config"])
        total = len(ds)
        n_train, n_heldout = c["n_train"], c["n_heldout"]
        if n_train + n_heldout >= total:
            raise ConfigError(
                f"task countdown: {where} has {total} rows; n_train={n_train} + "
                f"n_heldout={n_heldout} leaves no test rows"
            )
        end = total - n_heldout
        stop = end if c["n_test"] is None else min(end, n_train + c["n_test"])
        ranges = {"train": (0, n_train), "test": (n_train, stop), "heldout": (end, total)}
        parts, seen = {}, set()
        for name in ("train", "test", "heldout"):
            lo, hi = ranges[name]
            rows = ds.select(range(lo, hi)).to_list() if hi > lo else []
            kept = []
            for i, row in enumerate(rows):
                p = parse_row(row, f"{where}: row {lo + i}")
                k = key(p["numbers"], p["target"])
                if name == "train" or k not in seen:
                    kept.append(p)
                seen.add(k)
            parts[name] = kept
        return parts

    def _row(self, p: dict, id_: str) -> dict:
        if self.style == "compact":
            prompt = compact_prompt(p["numbers"], p["target"])
        elif p.get("context"):
            prompt = p["context"]
        else:
            prompt = chat_prompt(
                self.tokenizer, chat_messages(p["numbers"], p["target"]), suffix="<think>"
            )
        return {"prompt": prompt, "id": id_, "numbers": p["numbers"], "target": p["target"],
                "solution": p.get("solution")}

    # -- verifier
    def verify(self, completion: str, row: Mapping) -> Verdict:
        if self.style == "compact":
            return compact_verdict(completion, row["numbers"], row["target"])
        return chat_verdict(completion, row["numbers"], row["target"])

    def reference(self, row: Mapping) -> str | None:
        sol = row.get("solution")
        if not sol:
            return None
        if self.style == "compact":
            return sol
        return f" ...</think>\n<answer>{sol}</answer>"
