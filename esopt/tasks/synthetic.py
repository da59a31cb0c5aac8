"""Held-out synthetic tasks (compact style only) that the tiny family is pretrained on but never
RL-trained on, to measure forgetting:

  * ``addition``: ``"add 12 34:"`` -> ``"46"`` (operand digit counts drawn from
    ``min_digits..max_digits``);
  * ``compare``:  ``"max 3 9 4:"`` -> ``"9"`` (``count`` numbers from ``min_number..max_number``);
  * ``reverse``:  ``"reverse 1234:"`` -> ``"4321"`` (a digit string of ``min_length..max_length``).

Prompts and answers are short ASCII (at most ~30 prompt and 8 answer characters at the knob
limits). Each generator is seeded; problems are deduplicated by their key (the sorted operands
for addition/compare, the digit string for reverse) and dealt in generation order: first
``n_test`` to test, then ``n_heldout`` to heldout, then ``n_train`` to train (test/heldout do not
change when only ``n_train`` changes).

Verdict: extracted = the stripped completion (None if empty); correct iff it equals the gold
answer string exactly; format = 1 if extracted is a plain ASCII integer; reward = answer.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping

from esopt.tasks import ConfigError, Task, Verdict, check_counts, check_int, distinct_problems, make_dataset

_INT = re.compile(r"-?[0-9]+")
# Knobs every synthetic task has: split sizes of one seeded stream of distinct problems dealt
# test, heldout, train, and the generator seed (same knobs + seed = same data).
ANSWER_CHARS = 8          # completion budget of the synthetic tasks (characters of the answer)
COMPARE_LIMIT = 10**6     # compare's numbers stay below this (short prompts)
COMMON = {"n_train": 2000, "n_test": 500, "n_heldout": 500, "seed": 0}


def _features():
    import datasets

    return {
        "prompt": datasets.Value("string"),
        "id": datasets.Value("string"),
        "numbers": datasets.Sequence(datasets.Value("int64")),
        "answer": datasets.Value("string"),
    }


def deal(
    task: str,
    make: Callable[[random.Random], dict],
    key: Callable[[dict], object],
    n_test: int,
    n_heldout: int,
    n_train: int,
    seed: int,
) -> dict[str, list[dict]]:
    """Distinct problems from ``make(rng)`` dealt to test, heldout, train (in that order)."""
    n = n_test + n_heldout + n_train
    rng = random.Random(seed)
    probs = distinct_problems(n, lambda: make(rng), key, too_few=lambda found: (
        f"task {task}: only {found} distinct problems found of {n} wanted; "
        "widen the number range or lower n_train/n_test/n_heldout"))
    a, b = n_test, n_test + n_heldout
    return {"test": probs[:a], "heldout": probs[a:b], "train": probs[b:]}


class SyntheticTask(Task):
    styles = ("compact",)
    budgets = {"compact": ANSWER_CHARS}

    def _validate(self) -> None:
        for k, lo in (("n_train", 0), ("n_test", 1), ("n_heldout", 0), ("seed", 0)):
            check_int(self.name, k, self.cfg[k], lo)

    def _check_range(self, low: str, high: str, floor: int, ceiling: int) -> None:
        """Knobs ``floor <= low <= high <= ceiling`` (ConfigError otherwise; the ceiling keeps
        the answer within the ``ANSWER_CHARS`` budget)."""
        check_int(self.name, low, self.cfg[low], floor)
        check_int(self.name, high, self.cfg[high], self.cfg[low])
        if self.cfg[high] > ceiling:
            raise ConfigError(f"task {self.name}: {high} must be <= {ceiling} (the answer budget is {ANSWER_CHARS})")

    def make(self, rng: random.Random) -> dict:
        """One problem ``{"numbers": [...], "prompt": str, "answer": str}``."""
        raise NotImplementedError

    def key(self, p: dict) -> object:
        return tuple(sorted(p["numbers"]))

    def _build(self) -> dict:
        c = self.cfg
        parts = deal(
            self.name, self.make, self.key, c["n_test"], c["n_heldout"], c["n_train"], c["seed"]
        )
        return {
            name: make_dataset(
                [{**p, "id": f"{self.name}/{name}/{i}"} for i, p in enumerate(ps)], _features()
            )
            for name, ps in parts.items()
        }

    def verify(self, completion: str, row: Mapping) -> Verdict:
        extracted = completion.strip() or None
        ok = extracted is not None and extracted == str(row["answer"])
        fmt = 1.0 if extracted is not None and _INT.fullmatch(extracted) else 0.0
        return Verdict(float(ok), fmt, float(ok), ok, extracted)

    def reference(self, row: Mapping) -> str | None:
        return str(row["answer"])


class AdditionTask(SyntheticTask):
    name = "addition"
    knobs = {"min_digits": 1,  # fewest digits of an operand (>= 1)
             "max_digits": 3,  # most digits of an operand (<= 7: the answer budget is 8 characters)
             **COMMON}

    def _validate(self) -> None:
        super()._validate()
        self._check_range("min_digits", "max_digits", 1, ANSWER_CHARS - 1)   # a sum has one digit more

    def make(self, rng: random.Random) -> dict:
        lo, hi = self.cfg["min_digits"], self.cfg["max_digits"]
        a, b = (_number(rng, rng.randint(lo, hi)) for _ in range(2))
        return {"numbers": [a, b], "prompt": f"add {a} {b}:", "answer": str(a + b)}


class CompareTask(SyntheticTask):
    name = "compare"
    knobs = {"count": 3,        # numbers per problem: 2..6 or a list such as [2, 3, 4]
             "min_number": 0,   # smallest number (>= 0)
             "max_number": 99,  # largest number (< 1000000)
             **COMMON}

    def _validate(self) -> None:
        super()._validate()
        c = self.cfg
        c["count"] = check_counts("compare", c["count"])
        check_int("compare", "min_number", c["min_number"], 0)
        check_int("compare", "max_number", c["max_number"], c["min_number"])
        if c["max_number"] >= COMPARE_LIMIT:
            raise ConfigError("task compare: max_number must be < 1000000 (short prompts)")

    def make(self, rng: random.Random) -> dict:
        c = self.cfg
        n = rng.choice(c["count"])
        nums = [rng.randint(c["min_number"], c["max_number"]) for _ in range(n)]
        return {
            "numbers": nums,
            "prompt": "max " + " ".join(map(str, nums)) + ":",
            "answer": str(max(nums)),
        }


class ReverseTask(SyntheticTask):
    name = "reverse"
    knobs = {"min_length": 2,  # shortest digit string (>= 1)
             "max_length": 6,  # longest digit string (<= 8: the answer budget is 8 characters)
             **COMMON}

    def _validate(self) -> None:
        super()._validate()
        self._check_range("min_length", "max_length", 1, ANSWER_CHARS)

    def make(self, rng: random.Random) -> dict:
        n = rng.randint(self.cfg["min_length"], self.cfg["max_length"])
        digits = [rng.randint(0, 9) for _ in range(n)]
        text = "".join(map(str, digits))
        return {"numbers": digits, "prompt": f"reverse {text}:", "answer": text[::-1]}

    def key(self, p: dict) -> object:
        return tuple(p["numbers"])


def _number(rng: random.Random, digits: int) -> int:
    """Uniform integer with exactly ``digits`` digits (0..9 for one digit)."""
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)
