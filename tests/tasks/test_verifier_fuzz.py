"""Verifiers are linear-time and bounded: hostile and mutated completions up to 1 MB, and the
scanners agree with the public reward's regexes (the reference) wherever those can run.

The speed table (10 KB / 100 KB / 1 MB per input family, and the regexes' quadratic times)
is ``benchmarks/bench_verifiers.py``; the bound here only catches a return of super-linear
behaviour (the regexes took over 120 s on 1 MB; the scanners take milliseconds)."""

import random
import re
import time
from decimal import Decimal

import pytest

from esopt.tasks import countdown, gsm8k

TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "\n", "x", " ", "3*7+2", "<", ">", "/",
          "</think>\n<answer>", "answer>", "</", "\n\n", "7", "<think", "</answer>\n"]


def ref_format_score(completion: str) -> float:
    """The public reward, verbatim: the regexes."""
    text = "<think>" + completion
    if countdown._FULL.match(text):
        return 1.0
    return (0.1 if countdown._THINK.search(text) else 0.0) + (0.5 if countdown._ANSWER.search(text) else 0.0)


def ref_last_answer(completion: str):
    found = countdown._ANSWER.findall(completion)
    return found[-1].strip() if found else None


def ref_normalize(text):
    """The previous Decimal implementation (exact for up to 28 significant digits)."""
    if text is None:
        return None
    s = text.strip().replace(",", "").replace("$", "").rstrip(".")
    if not re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", s):
        return None
    d = Decimal(s)
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def test_chat_scanners_equal_the_regexes_on_random_tag_soup():
    rng = random.Random(0)
    cases = ["", "\n", "</answer>", "</think>\n<answer></answer>", "</think>\n<answer></answer>\n",
             "</think>\n<answer></answer>\n\n", "x</think>\n<answer>1</answer>", "</think>\n<answer>"]
    cases += ["".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 25))) for _ in range(20000)]
    seen = set()
    for c in cases:
        assert countdown.format_score(c) == ref_format_score(c), repr(c)
        assert countdown.last_answer(c) == ref_last_answer(c), repr(c)
        seen.add(ref_format_score(c))
    assert seen == {0.0, 0.1, 0.5, 0.6, 1.0}  # every branch of the reward was exercised


def ref_extract_flexible(completion: str):
    """The previous implementation: every FLEXIBLE piece, from the last."""
    for a, b in reversed(gsm8k.FLEXIBLE.findall(completion)):
        n = gsm8k.normalize(a or b)
        if n is not None:
            return n
    return None


def test_gsm8k_flexible_extraction_equals_the_findall_reference():
    rng = random.Random(3)
    alphabet = "0123456789.,$- x\n"
    cases = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(60000)]
    cases += ["The answer is 18.", "costs $1,234.50.", "-5 and --7", "1.2.3", ".5", "x 7 y -", "3 - 4"]
    found = 0
    for c in cases:
        assert gsm8k.extract_flexible(c) == ref_extract_flexible(c), repr(c)
        found += gsm8k.extract_flexible(c) is not None
    assert found > 30000  # the cases exercise the match, not only its absence


def test_gsm8k_normalize_equals_the_decimal_reference():
    rng = random.Random(1)
    alphabet = "0123456789.,$- "
    cases = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))) for _ in range(50000)]
    cases += ["-0", "-0.0", "0.000", "007", "1.10", "-1.50", "0.000001", "5.", "$1,234.50.", "18.00"]
    for c in cases:
        assert gsm8k.normalize(c) == ref_normalize(c), repr(c)
    # beyond Decimal's 28 digits and int()'s 4,300: exact, never an exception
    big = "1" * 5000 + ".5000"
    assert gsm8k.normalize(big) == "1" * 5000 + ".5"
    assert gsm8k.normalize("9" * 40 + "1") != gsm8k.normalize("9" * 40 + "2")  # Decimal rounded these equal


MB = 1 << 20


def hostile(n: int, rng: random.Random) -> dict[str, str]:
    """Completions of about ``n`` characters built to make a backtracking matcher work hard."""
    valid = " 3*7 is 21</think>\n<answer>3*7+2</answer>"
    pieces = ["<think>", "</think>", "<answer>", "</answer>", "</think>\n<answer>", "#### ", "9", "1,", "$", "-", "."]
    mutated = list(valid * (n // len(valid)))
    for _ in range(2000):
        mutated.insert(rng.randrange(len(mutated)), rng.choice(pieces))
    return {
        "unclosed think": "<think>" * (n // 7),
        "mid tags, no end": "</think>\n<answer>" * (n // 17) + "x",
        "unclosed answers": "<answer>" * (n // 8),
        "blocks then junk": "</think>\n<answer></answer>x" * (n // 27),
        "huge valid answer": "</think>\n<answer>" + "1" * n + "</answer>",
        "mutated valid": "".join(mutated)[:n],
        "digits": "9" * n,
        "grouped digits": "1," * (n // 2),
        "strict markers": "#### " * (n // 5),
        "strict + digits": "#### " + "9" * n,
        "dollars": "$" * n,
        "dashes": "-" * n,
        "decimals": "1." * (n // 2),
        "invalid numbers": "1.2.3 " * (n // 6),
        "dot digits": ".1 " * (n // 3),
        "dollar spaces": "$ " * (n // 2),
        "random": "".join(rng.choice("0123456789.,$-# <>/answerthink\n") for _ in range(n)),
    }


def _score_all(completion: str, g8) -> None:
    countdown.chat_verdict(completion, [3, 7, 2], 23)
    countdown.compact_verdict(completion, [3, 7, 2], 23)
    g8.verify(completion, {"gold": "23"})


@pytest.mark.parametrize("family", list(hostile(64, random.Random(0))))
def test_hostile_megabyte_completions_are_scored_fast(family):
    """Every family at 1 MB through both tasks' verifiers (Countdown chat and compact, GSM8K
    strict + flexible): well under a second each (the goal, 50 ms, is measured in
    benchmarks/bench_verifiers.py; the old regexes needed minutes here)."""
    g8 = gsm8k.GSM8KTask({"source": "unused.jsonl"})
    completion = hostile(MB, random.Random(2))[family]
    assert len(completion) > 0.9 * MB
    best = float("inf")
    for _ in range(2):  # the better of two: a loaded machine can stall one attempt
        t = time.perf_counter()
        _score_all(completion, g8)
        best = min(best, time.perf_counter() - t)
    assert best < 1.0, f"{family}: {best:.3f} s for 1 MB"


def test_verdicts_on_large_inputs_are_right():
    assert countdown.format_score("x" * MB + "</think>\n<answer>3*7+2</answer>") == 1.0
    many = "</think>\n<answer>" * 50000 + "3*7+2</answer>"  # the first <answer> opens the block
    assert countdown.last_answer(many) == many[len("</think>\n<answer>"):-len("</answer>")]
    assert countdown.format_score(many) == 1.0 and not countdown.chat_verdict(many, [3, 7, 2], 23).correct
    assert countdown.chat_verdict("<answer>" + "x" * MB + "</answer><answer>3*7+2</answer>", [3, 7, 2], 23).correct
    assert countdown.last_answer("<answer>" * 100000) is None
    g8 = gsm8k.GSM8KTask({"source": "unused.jsonl", "answer_format": "hash"})
    v = g8.verify("#### " + "9" * MB, {"gold": "9" * MB})
    assert v.correct and v.format == 1.0
    assert not g8.verify("#### " + "9" * MB, {"gold": "9" * (MB - 1)}).correct
    boxed = gsm8k.GSM8KTask({"source": "unused.jsonl"})  # the study's format, the default
    assert boxed.cfg["answer_format"] == "boxed"
    v = boxed.verify("x" * MB + "\\boxed{23}", {"gold": "23"})
    assert v.correct and v.reward == 1.0
    v = boxed.verify("\\boxed{" + "9" * MB + "}", {"gold": "9" * MB})  # too long to read: format only
    assert not v.correct and v.reward == gsm8k.FORMAT_REWARD
