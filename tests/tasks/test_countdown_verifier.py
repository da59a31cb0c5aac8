"""Countdown verifier: hand cases, hostile inputs under a time bound, the public chat reward."""

import time

import pytest

from esopt.tasks.countdown import (
    canonical,
    check_expression,
    compact_verdict,
    evaluate,
    format_score,
    parse_expression,
    reward,
)


@pytest.mark.parametrize(
    "expr, numbers, target",
    [
        ("3*7+2", [3, 7, 2], 23),
        ("(3*7)+2", [7, 2, 3], 23),
        (" 2 + 3 * 7 ", [3, 7, 2], 23),
        ("(6/4)*8", [6, 4, 8], 12),  # fractional intermediate, exact result
        ("6/4*8", [6, 4, 8], 12),
        ("1/3*3", [1, 3, 3], 1),  # float eval gives 1.0000000000000002 style issues; exact here
        ("5+5-5", [5, 5, 5], 5),  # repeated numbers
        ("((8-(3)))*(2+1)", [8, 3, 2, 1], 15),
        ("0+7", [0, 7], 7),
        ("10-4/(2-1)", [10, 4, 2, 1], 6),
    ],
)
def test_valid(expr, numbers, target):
    assert check_expression(expr, numbers, target)


@pytest.mark.parametrize(
    "expr, numbers, target",
    [
        ("3*7+2", [3, 7, 2], 24),  # wrong value
        ("3*7", [3, 7, 2], 21),  # number unused
        ("3*7+2+2", [3, 7, 2], 25),  # number used twice
        ("5+5", [5, 5, 5], 10),  # repeated number used too few times
        ("5+5+5+5", [5, 5, 5], 20),  # ... too many times
        ("4/(2-2)+1", [4, 2, 2, 1], 1),  # division by zero
        ("3*7+2=23", [3, 7, 2], 23),  # '=' not allowed
        ("-3+7+2", [3, 7, 2], 6),  # unary minus rejected by design
        ("3--7+2", [3, 7, 2], 12),
        ("+3*7+2", [3, 7, 2], 23),  # unary plus rejected too
        ("3*07+2", [3, 7, 2], 23),  # leading zero
        ("00+7", [0, 7], 7),  # '00' is not the literal 0
        ("3//1+7", [3, 1, 7], 10),  # floor division
        ("(3)(7)", [3, 7], 21),  # a call in Python's grammar
        ("3 7 2", [3, 7, 2], 23),
        ("", [3, 7, 2], 23),
        ("()", [], 0),
        ("3*(7+2", [3, 7, 2], 27),  # unbalanced
        ("3*7)+2(", [3, 7, 2], 23),
        ("3.0*7+2", [3, 7, 2], 23),  # float
    ],
)
def test_invalid(expr, numbers, target):
    assert not check_expression(expr, numbers, target)


def test_non_string_and_bad_gold():
    assert not check_expression(None, [1, 2], 3)  # type: ignore[arg-type]
    assert not check_expression(b"1+2", [1, 2], 3)  # type: ignore[arg-type]
    assert not check_expression("1+2", [1, 2], "three")
    assert check_expression("1+2", (1, 2), 3.0)  # integral float target is fine


def test_evaluate_and_canonical():
    assert evaluate("6/4") == pytest.approx(1.5)
    assert evaluate("6/4").denominator == 2
    assert evaluate("1/0") is None
    assert canonical(" (3 * 7) + 2 ") == "3*7+2"
    assert canonical("10-(4-2)") == "10-(4-2)"  # needed parentheses kept
    assert canonical("3**2") is None
    assert parse_expression("1+2") is not None and parse_expression("x+1") is None


HOSTILE = [
    "(" * 10000,
    "(" * 10000 + "1" + ")" * 10000,
    "(" * 199 + ")" * 199,
    "(" * 99 + "1" + ")" * 99,
    "9**9**9**9",
    "9**9**9**9**9**9",
    "(9**9)**(9**9)",
    "1" * 100000,
    "1" * 200,
    "9" * 13 + "*1",
    "999999999999*999999999999*999999999999",
    "1+" * 99 + "1",
    "\u0663+\u0664",  # Arabic-Indic digits
    "\uff13+\uff14",  # fullwidth digits
    "\u00b2+1",  # superscript two
    '__import__("os").system("true")',
    "(lambda: 1)()",
    "[1]*10**9",
    "1.5+1.5",
    "2e3",
    "1_000+1",
    "0x10+1",
    "--1",
    "-(-(-(-1)))",
    "+-+-+-1",
    "~1",
    "1 if 1 else 2",
    "1,2",
    "\x00",
    "1+1\n+1",
    "1/0",
    "(1/0)*0",
]


@pytest.mark.parametrize("expr", HOSTILE)
def test_hostile_inputs_rejected_fast(expr):
    numbers, target = [1, 1, 1], 3
    start = time.perf_counter()
    for _ in range(5):
        assert not check_expression(expr, numbers, target)
        compact_verdict(expr, numbers, target)
    per_call = (time.perf_counter() - start) / 5
    assert per_call < 0.010, f"{per_call * 1e3:.2f} ms for {expr[:30]!r}"


def test_huge_intermediate_capped():
    # exact product exceeds the 10**12 cap -> False, even though the multiset matches
    nums = [999999, 999999, 999999]
    assert not check_expression("999999*999999*999999", nums, 999999**3)
    assert check_expression("999999*999999/999999", nums, 999999)


# ---------------------------------------------------------------- the public chat reward


@pytest.mark.parametrize(
    "completion, fmt, total",
    [
        # prompt ends with "<think>", so completions start inside the think block
        (" 3 times 7 is 21, plus 2.</think>\n<answer>3*7+2</answer>", 1.0, 1.1),
        (" ok</think>\n<answer>(3 * 7) + 2</answer>", 1.0, 1.1),
        (" ok</think>\n<answer>3*7-2</answer>", 1.0, 0.1),  # wrong value: format only
        (" ok</think>\n<answer>3*7+2</answer>\n", 1.0, 1.1),  # '$' tolerates one newline
        (" ok</think> <answer>3*7+2</answer>", 0.6, 1.06),  # space instead of newline
        (" ok</think>\n<answer>3*7+2</answer> bye", 0.6, 1.06),  # trailing text
        (" ok</think>\n<answer>3*7+2", 0.1, 0.01),  # unclosed answer
        (" ok, no tags", 0.0, 0.0),
        (" ok <answer>3*7+2</answer>", 0.5, 1.05),  # no </think>: answer block only
        (" ok <answer>1+1</answer>", 0.5, 0.05),
        (" a</think>\n<answer>1+2</answer><answer>2+3*7</answer>", 1.0, 1.1),  # last answer counts
        (" a</think>\n<answer>2+3*7</answer><answer>1+2</answer>", 1.0, 0.1),
        (" a</think>\n<answer>3**7</answer>", 1.0, 0.1),
    ],
)
def test_chat_reward(completion, fmt, total):
    assert format_score(completion) == pytest.approx(fmt)
    assert reward(completion, [3, 7, 2], 23) == pytest.approx(total)


def test_compact_verdict():
    v = compact_verdict("3*7+2", [3, 7, 2], 23)
    assert (v.reward, v.format, v.answer, v.correct, v.extracted) == (1.1, 1.0, 1.0, True, "3*7+2")
    v = compact_verdict(" (3*7)-2 ", [3, 7, 2], 23)
    assert (v.format, v.answer, v.correct, v.extracted) == (1.0, 0.0, False, "3*7-2")
    assert v.reward == pytest.approx(0.1)
    v = compact_verdict("2/(7-7)*3", [3, 7, 2], 23)  # valid syntax, division by zero
    assert (v.format, v.correct) == (1.0, False)
    v = compact_verdict("3*7+", [3, 7, 2], 23)
    assert (v.reward, v.format, v.extracted) == (0.0, 0.0, None)


def test_fast_printer_and_integer_arithmetic_match_the_ast_references():
    """The verifier's own printer and int-until-division arithmetic (a 2x faster reward, which the
    ES iteration waits for) equal ``ast.unparse`` and all-``Fraction`` evaluation exactly, on
    random allowed expressions with parentheses, repeated operators and divisions by zero."""
    import ast
    import random
    from fractions import Fraction

    from esopt.tasks import countdown as cd

    def reference(node):
        if isinstance(node, ast.Constant):
            return Fraction(node.value)
        a, b = reference(node.left), reference(node.right)
        if a is None or b is None or (isinstance(node.op, ast.Div) and b == 0):
            return None
        v = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(node.op)) if not isinstance(
            node.op, ast.Div) else a / b
        return None if abs(v.numerator) > cd.MAX_MAGNITUDE or v.denominator > cd.MAX_MAGNITUDE else v

    rng = random.Random(0)

    def expr(depth):
        if depth == 0 or rng.random() < 0.3:
            return str(rng.choice([0, 1, 2, 3, 7, 12, 99, 10**6]))
        e = expr(depth - 1) + rng.choice("+-*/") + expr(depth - 1)
        return f"({e})" if rng.random() < 0.5 else e

    seen = {"printed": 0, "divzero": 0, "fraction": 0}
    for _ in range(3000):
        tree = parse_expression(expr(rng.randint(1, 6)))
        assert tree is not None
        assert cd._unparse(tree) == ast.unparse(tree).replace(" ", "")
        want, got = reference(tree), cd._value(tree)
        assert got == want and (got is None) == (want is None)
        seen["printed"] += 1
        seen["divzero"] += want is None
        seen["fraction"] += want is not None and want.denominator > 1
    assert min(seen.values()) > 100  # every branch was exercised


def test_every_solution_of_a_problem_is_listed_once_and_checks():
    """``solutions`` (the tiny family's pretraining targets) and the generator share one rule
    for an intermediate value (``countdown_generator.apply``): every listed solution passes the
    verifier, each is written once with the fewest parentheses, and the generator's own
    solution of each problem is among them."""
    from esopt.tasks.countdown_generator import generate, solutions
    from esopt.tasks.countdown_verifier import solution_text

    # by hand: 24 from 2, 3, 4 is their product only, in its 6 orders ((4-2)*3 = 6, (2+4)*3 = 18)
    assert solutions([2, 3, 4], 24) == ["2*3*4", "2*4*3", "3*2*4", "3*4*2", "4*2*3", "4*3*2"]
    assert solutions([6, 3], 2) == ["6/3"] and solutions([3, 6], 1) == [] and solutions([3, 3], 1) == ["3/3"]
    for p in generate(40, count=[3, 4], seed=11):
        listed = solutions(p["numbers"], p["target"])
        assert len(set(listed)) == len(listed) and listed == sorted(listed)
        assert all(check_expression(s, p["numbers"], p["target"]) for s in listed)
        assert solution_text(parse_expression(p["solution"])) in listed
