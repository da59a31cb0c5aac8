"""Countdown's verifier: parse an expression safely, evaluate it exactly, check it uses each
given number once and hits the target, and score a completion (compact verdict, the public
chat reward). Pure functions, no dataset; ``esopt.tasks.countdown`` is the task.
"""

from __future__ import annotations

import ast
import math
import numbers as _numbers
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction

from esopt.tasks import Verdict

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


def _unparse(tree: ast.expr, context: int = 0, associative: bool = False) -> str:
    """``ast.unparse(tree)`` without spaces, for allowed trees: operators are left-associative,
    so an operand is parenthesised when its operator binds less tightly than the context asks
    (the left operand: the parent's precedence; the right one: one more, or, ``associative``,
    the parent's under + and *, which are associative: ``2+(3-1)`` -> ``2+3-1``)."""
    if type(tree) is ast.Constant:
        return str(tree.value)
    op = type(tree.op)  # type: ignore[attr-defined]
    p = _PRECEDENCE[op]
    right = p if associative and op in (ast.Add, ast.Mult) else p + 1
    text = (_unparse(tree.left, p, associative) + _OPS[op]  # type: ignore[attr-defined]
            + _unparse(tree.right, right, associative))  # type: ignore[attr-defined]
    return f"({text})" if context > p else text


def solution_text(tree: ast.expr) -> str:
    """An allowed tree written with the fewest parentheses its value needs (``_unparse`` with +
    and * associative: ``2*(6/3)`` -> ``2*6/3``, the same exact value): how the tiny family's
    pretraining writes a Countdown solution (``countdown_generator.solutions``)."""
    return _unparse(tree, associative=True)


MAX_TARGET_TEXT = 40  # longest target string parsed
FORMAT_WEIGHT = 0.1  # compact reward = FORMAT_WEIGHT * format + answer
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
    if isinstance(value, str) and len(value) <= MAX_TARGET_TEXT and _TARGET_TEXT.fullmatch(value.strip()):
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
    return Verdict(FORMAT_WEIGHT * fmt + float(ok), fmt, float(ok), ok, extracted)


def compact_verdict(completion: str, numbers: Sequence[int], target) -> Verdict:
    """Compact style: format = 1 iff the stripped completion is an allowed expression;
    answer = check_expression; reward = 0.1*format + answer."""
    tree = parse_expression(completion)  # parsed once for the format, the answer and the extract
    extracted = None if tree is None else _unparse(tree)
    fmt = 0.0 if extracted is None else 1.0
    ok = tree is not None and _tree_checks(tree, numbers, target)
    return Verdict(FORMAT_WEIGHT * fmt + float(ok), fmt, float(ok), ok, extracted)
