"""GSM8K: grade-school math word problems; the gold final answer follows ``#### `` in ``answer``.

Data (``source``): a local ``.json``/``.jsonl``/``.parquet`` file or ``save_to_disk`` directory
with ``question`` and ``answer`` columns, or a hub dataset name (``openai/gsm8k`` with
``hub_config: main``, ``hub_split``). One file/split is carved into our three splits by a seeded
shuffle of the row indices: first ``n_test`` -> test, next ``n_heldout`` -> heldout, then up to
``n_train`` (``null`` = all remaining) -> train. Rows whose question text repeats an earlier
row's are dropped, so the splits are disjoint.

Answer extraction (as lm-evaluation-harness's gsm8k filters):
  * strict: the last ``#### <number>`` in the completion;
  * flexible: the last number anywhere in the completion.
Numbers are normalised by dropping ``,`` and ``$`` and a trailing ``.``, then compared as
decimals (``18.00`` == ``18``). Verdict: format = 1 if the strict pattern is found; extracted =
strict if found, else flexible (``extraction: strict`` disables the fallback); answer = 1 if
extracted equals the gold; reward = answer.

``math_verify: true`` additionally accepts a completion when ``math_verify.verify(parse(gold),
parse(completion))`` says so. It runs in a subprocess with a timeout (math-verify's own
timeouts use ``signal.alarm``, which fails off the main thread); ``rewards`` batches a whole
list into one subprocess. Needs the ``math-verify`` package.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence

from esopt.tasks import ConfigError, Task, Verdict, chat_prompt, check_int, load_rows, make_dataset

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")

INSTRUCTION = (
    "Solve the problem step by step. At the end, write the final answer as a number on its own "
    "line in the form '#### <answer>'."
)


_NUMBER = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?")


def normalize(text: str | None) -> str | None:
    """``"$1,234.50."`` -> ``"1234.5"``; ``"18.00"`` -> ``"18"``; ``"-0.0"`` -> ``"0"``; None if
    not a number. Drops ``,`` and ``$`` and trailing ``.``, then writes the decimal in its
    canonical form by string operations (leading zeros of the integer part and trailing zeros
    of the fraction dropped, no sign on zero): exact for any number of digits (a Decimal
    rounds to 28 digits; int() refuses more than 4,300) and linear in the text's length."""
    if text is None:
        return None
    s = text.strip().replace(",", "").replace("$", "").rstrip(".")
    m = _NUMBER.fullmatch(s)
    if not m:
        return None
    sign, whole, frac = m.group(1), m.group(2).lstrip("0") or "0", (m.group(3) or "").rstrip("0")
    if whole == "0" and not frac:
        sign = ""
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def gold_answer(answer: str) -> str | None:
    """Normalised gold number after the last ``#### `` of a GSM8K ``answer`` field."""
    if not isinstance(answer, str) or "#### " not in answer:
        return None
    return normalize(answer.rsplit("#### ", 1)[1])


def extract_strict(completion: str) -> str | None:
    """Normalised number of the last ``#### N`` in ``completion``, or None."""
    found = STRICT.findall(completion)
    return normalize(found[-1]) if found else None


# FLEXIBLE's pieces are the maximal runs of [$0-9.,] ("segments"; a run of one character only
# when it is a digit), each with the '-' just before it; the last piece normalize() accepts is
# the answer. _LAST_NUMBER finds it in one regex search over the reversed text (the first
# match there is the last one here), starting with a character class so the engine skips
# other text at C speed, possessive so nothing backtracks: linear, and equal to the loop over
# FLEXIBLE.findall (tests/tasks/test_verifier_fuzz.py compares them). It matches a reversed
# segment that normalize() accepts, i.e. "[,$]* digit [0-9,$]* (. [,$]* digit [0-9,$]*)? [.,$]*"
# read backwards, then the optional '-'.
_LAST_NUMBER = re.compile(
    r"[$0-9.,](?<![$0-9.,].)"                                       # a segment's first character
    r"(?:(?<=[0-9])[0-9,$]*+(?:\.[,$]*+[0-9][0-9,$]*+)?+"           # it is a digit, or
    r"|(?<=[.,$])[.,$]*+(?:[,$]*+[0-9][0-9,$]*+\.)?+[,$]*+[0-9][0-9,$]*+)"   # trailing . , $
    r"(?![$0-9.,])(-?)")                                            # the whole segment; sign
_DIGIT = re.compile(r"[0-9]")
_RUN = re.compile(r"[$0-9.,]*+")


def extract_flexible(completion: str) -> str | None:
    """Normalised last number in ``completion`` (skipping pieces like ``,`` or ``.`` that are
    not numbers), or None: the last of ``FLEXIBLE.findall(completion)`` that ``normalize``
    accepts, found in linear time (``_LAST_NUMBER``)."""
    rev = completion[::-1]
    digit = _DIGIT.search(rev)              # no digit after this point: nothing to find there
    if digit is None:
        return None
    j = len(completion) - 1 - digit.start()  # back to the start (in rev) of its segment
    m = _LAST_NUMBER.search(rev, len(completion) - _RUN.match(completion, j).end())
    if m is None:
        return None
    sign = m.group(1)
    return normalize(sign + rev[m.start():m.end() - len(sign)][::-1])


_MV_SCRIPT = r"""
import json, sys
from math_verify import parse, verify
pairs = json.load(sys.stdin)
out = []
for gold, pred in pairs:
    try:
        out.append(bool(verify(parse(gold), parse(pred))))
    except Exception:
        out.append(False)
print(json.dumps(out))
"""


def math_verify_batch(
    golds: Sequence[str], completions: Sequence[str], timeout: float
) -> list[bool]:
    """``math_verify.verify(parse(gold), parse(completion))`` for each pair, in one subprocess;
    all False if it fails or takes longer than ``timeout`` seconds per pair (+10 s start-up)."""
    pairs = [[g, c] for g, c in zip(golds, completions)]
    if not pairs:
        return []
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _MV_SCRIPT],
            input=json.dumps(pairs),
            capture_output=True,
            text=True,
            timeout=10 + timeout * len(pairs),
        )
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if proc.returncode == 0 and isinstance(out, list) and len(out) == len(pairs):
            return [bool(x) for x in out]
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError):
        pass
    return [False] * len(pairs)


def _features():
    import datasets

    return {k: datasets.Value("string") for k in ("prompt", "id", "question", "answer", "gold")}


class GSM8KTask(Task):
    name = "gsm8k"
    styles = ("compact", "chat")
    # Every knob of `task=gsm8k` (defaults registered with Hydra from here).
    knobs = {
        "source": "openai/gsm8k",  # hub dataset name, or a local .json/.jsonl/.parquet file / save_to_disk
        #                            directory with question/answer columns
        "hub_config": "main",      # hub dataset config name
        "hub_split": "test",       # hub split that is loaded and carved into train/test/heldout
        "n_train": None,           # train problems; null = all remaining rows
        "n_test": 500,             # test problems
        "n_heldout": 500,          # held-out problems
        "seed": 0,                 # shuffle seed
        "extraction": "flexible",  # strict: only "#### N" counts; flexible: else the last number
        "math_verify": False,      # also accept answers math-verify judges equal (needs math-verify)
        "math_verify_timeout": 5.0,  # seconds per completion for math-verify
    }
    budgets = {"compact": 256, "chat": 1024}
    stops = {"compact": ("\nQ:",)}

    def _validate(self) -> None:
        c = self.cfg
        if not c["source"]:
            raise ConfigError("task gsm8k: source must be a data file or a hub dataset name")
        check_int("gsm8k", "n_train", c["n_train"], 0, allow_none=True)
        check_int("gsm8k", "n_test", c["n_test"], 1)
        check_int("gsm8k", "n_heldout", c["n_heldout"], 0)
        check_int("gsm8k", "seed", c["seed"], 0)
        if c["extraction"] not in ("strict", "flexible"):
            raise ConfigError(
                f"task gsm8k: extraction must be strict or flexible, got {c['extraction']!r}"
            )
        if c["math_verify"] and importlib.util.find_spec("math_verify") is None:
            raise ConfigError(
                "task gsm8k: math_verify=true needs the math-verify package "
                "(pip install math-verify)"
            )

    def _build(self) -> dict:
        c = self.cfg
        source = str(c["source"])
        ds = load_rows(source, "gsm8k", c["hub_config"], c["hub_split"])
        total = len(ds)
        if c["n_test"] + c["n_heldout"] > total:
            raise ConfigError(
                f"task gsm8k: {source} has {total} rows, fewer than n_test={c['n_test']} + "
                f"n_heldout={c['n_heldout']}"
            )
        order = list(range(total))
        random.Random(c["seed"]).shuffle(order)
        a, b = c["n_test"], c["n_test"] + c["n_heldout"]
        end = total if c["n_train"] is None else min(total, b + c["n_train"])
        picks = {"test": order[:a], "heldout": order[a:b], "train": order[b:end]}
        seen: set[str] = set()
        out = {}
        for name in ("test", "heldout", "train"):
            rows = []
            for i in picks[name]:
                row = ds[i]
                q, ans = row.get("question"), row.get("answer")
                gold = gold_answer(ans)
                if not isinstance(q, str) or not q.strip() or gold is None:
                    raise ConfigError(
                        f"{source}: row {i}: malformed gsm8k row (need a 'question' string and "
                        f"an 'answer' string ending in '#### <number>'): {dict(row)!r:.120}"
                    )
                k = " ".join(q.split())
                if k in seen:
                    continue
                seen.add(k)
                rows.append(
                    {
                        "prompt": self.prompt(q),
                        "id": f"gsm8k/{name}/{len(rows)}",
                        "question": q,
                        "answer": ans,
                        "gold": gold,
                    }
                )
            out[name] = make_dataset(rows, _features())
        return out

    def prompt(self, question: str) -> str:
        if self.style == "compact":
            return f"Q: {question}\nA:"
        messages = [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
        return chat_prompt(self.tokenizer, messages)

    def _verdict(self, completion: str, gold: str, mv_ok: bool = False) -> Verdict:
        strict = extract_strict(completion)
        extracted = strict
        if extracted is None and self.cfg["extraction"] == "flexible":
            extracted = extract_flexible(completion)
        ok = (extracted is not None and extracted == gold) or mv_ok
        return Verdict(float(ok), 1.0 if strict is not None else 0.0, float(ok), ok, extracted)

    def _gold(self, row: Mapping) -> str:
        gold = row.get("gold") or gold_answer(row.get("answer"))
        if gold is None:
            raise ConfigError("gsm8k: row has no gold answer ('gold' or 'answer' with '#### ')")
        return gold

    def verify(self, completion: str, row: Mapping) -> Verdict:
        v = self._verdict(completion, self._gold(row))
        if self.cfg["math_verify"] and not v.correct:
            mv = math_verify_batch([self._gold(row)], [completion], self.cfg["math_verify_timeout"])
            v = self._verdict(completion, self._gold(row), mv[0])
        return v

    def rewards(self, completions: Sequence[str], rows: Sequence[Mapping]) -> list[float]:
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions for {len(rows)} rows")
        golds = [self._gold(r) for r in rows]
        verdicts = [self._verdict(c, g) for c, g in zip(completions, golds)]
        if self.cfg["math_verify"]:
            todo = [i for i, v in enumerate(verdicts) if not v.correct]
            mv = math_verify_batch(
                [golds[i] for i in todo],
                [completions[i] for i in todo],
                self.cfg["math_verify_timeout"],
            )
            for i, ok in zip(todo, mv):
                verdicts[i] = self._verdict(completions[i], golds[i], ok)
        return [v.reward for v in verdicts]

    def reference(self, row: Mapping) -> str | None:
        ans = row.get("answer")
        return f" {ans}" if isinstance(ans, str) and self.style == "compact" else ans
