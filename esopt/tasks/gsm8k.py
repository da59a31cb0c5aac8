"""GSM8K: grade-school math word problems; the gold final answer follows ``#### `` in ``answer``.

Protocol (the study's public setting, Ba et al. 2026): train on the train split, evaluate on the
whole test split. Data (``source``): the hub dataset ``openai/gsm8k`` (config ``hub_config``), a
local folder holding ``<train_split>.jsonl`` and ``<test_split>.jsonl`` (or ``.json`` /
``.parquet``; e.g. ``../shared/data/gsm8k``), or a ``save_to_disk`` DatasetDict folder. Rows need
a ``question`` string and an ``answer`` string ending in ``#### <number>``. Splits:

  * test: the ``test_split`` rows in file order, all of them (1,319) or the first ``n_test``;
    ``eval.problems: null`` evaluates all of them (``eval_problems = None``);
  * heldout: ``n_heldout`` rows of ``train_split`` drawn by a seeded shuffle (``seed``), never
    trained on and never evaluated as test;
  * train: the other ``train_split`` rows in file order (the first ``n_train``; null = all).

Rows of train / heldout whose whitespace-normalised question repeats a test question or an
earlier row are dropped, so the three splits are disjoint (the GSM8K files have no repeats).

Answer formats (``answer_format``):

  * ``boxed`` (the study): chat prompt = system ``SYSTEM_BOXED`` + the question. Training reward
    (``boxed_verdict``): 1.0 if the last ``\\boxed{...}`` holds the gold number (after
    ``boxed_number``), 0.1 if a boxed answer is present but wrong, else 0; format = 1 if present.
    Evaluation check (``Verdict.correct``): ``extract_answer`` (the last ``#### N``, else the last
    boxed answer, else the last "answer is N") equal to the gold number.
  * ``hash``: chat prompt = the question + ``INSTRUCTION`` (``#### <answer>``). Reward = answer
    = 1 if the extracted number equals the gold, with lm-evaluation-harness's extractions:
    strict (the last ``#### N``) and, with ``extraction: flexible``, else the last number;
    format = 1 if the strict pattern is found. ``correct`` = answer.

Numbers compare as exact rationals (``18.00`` == ``18``, ``\\frac{3}{2}`` == ``1.5``).

math-verify (``math_verify``: ``auto`` = when installed, ``true`` = required, ``false``): the
evaluator's batch check (``verdicts``) asks ``math_verify`` about every completion (the study's
extraction: LaTeX with boxed answers first, then plain expressions; first match). With ``boxed``,
when math-verify finds an answer in the completion its verdict is ``correct``, else the fallback
above; with ``hash`` it can only add accepted answers. It runs in subprocesses (one per CPU, each
pair with a timeout) because its timeouts use ``signal.alarm``, which fails off the main thread.
``verify`` (one completion; what training calls) never runs it, so training stays fast and its
success diagnostics use the fallback check.

Compact style (tiny character models): prompt ``"Q: <question>\\nA:"``; rewards as above.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction

from esopt.tasks import ConfigError, Task, Verdict, chat_prompt, check_int, load_split, make_dataset

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
# Fallback evaluation extraction (linear time: each quantified part is preceded by a literal).
_NUMBER = r"(-?[0-9][0-9,]*(?:\.[0-9]+)?)"
HASH = re.compile(r"####\s*" + _NUMBER)
ANSWER_IS = re.compile(r"(?:answer|result)\s+(?:is|=)\s*(?::\s*)?(?:\\?\$\s*)?" + _NUMBER, re.IGNORECASE)

# The study's system prompt (yunpengba7/understanding-es, src/es_reproduction/prompts.py).
SYSTEM_BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
INSTRUCTION = (
    "Solve the problem step by step. At the end, write the final answer as a number on its own "
    "line in the form '#### <answer>'."
)
FORMAT_REWARD = 0.1  # boxed: reward of a boxed answer that is wrong (the study's format_reward)
MAX_BOXED = 200  # longer boxed contents are not read as numbers
MAX_NUMBER = 64  # longer numbers found by the evaluation fallback are not read as numbers


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


def extract_boxed(text: str) -> str | None:
    """Content (stripped) of the last ``\\boxed{...}`` in ``text``, braces balanced; None when
    there is none or its braces do not close. One backward search and one forward scan."""
    if not isinstance(text, str):
        return None
    i = text.rfind("\\boxed")
    if i < 0:
        return None
    j = i + len("\\boxed")
    while j < len(text) and text[j].isspace():
        j += 1
    if j >= len(text) or text[j] != "{":
        return None
    depth = 0
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:k].strip()
    return None


_TEXT = re.compile(r"\\(?:text|mbox|mathrm)\{[^{}]*\}")
_FRAC = re.compile(r"\\frac\{(-?[0-9]+)\}\{(-?[0-9]+)\}|(-?[0-9]+)/(-?[0-9]+)")


def boxed_number(content: str | None) -> str | None:
    """A boxed answer as a normalised number string, or None if it is not one.

    Drops units (``\\text{...}``), ``$``, ``\\%``, ``%``, spaces, ``\\!``, ``\\,``, ``\\left`` /
    ``\\right``, a short left-hand side (``x = 5`` -> ``5``) and thousands separators; reads
    ``\\frac{a}{b}`` (``\\dfrac``, ``\\tfrac``) and ``a/b`` as exact fractions (``"3/2"`` ->
    ``"1.5"``; a non-terminating fraction stays ``"a/b"``).
    """
    if content is None or len(content) > MAX_BOXED:
        return None
    s = _TEXT.sub("", content)
    for old, new in (("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\$", ""), ("$", ""), ("\\%", ""),
                     ("%", ""), ("\\left", ""), ("\\right", ""), ("dfrac", "frac"),
                     ("tfrac", "frac"), ("{,}", ""), (" ", "")):
        s = s.replace(old, new)
    if s.count("=") == 1 and len(s.split("=")[0]) <= 2:
        s = s.split("=")[1]
    m = _FRAC.fullmatch(s)
    if m:
        num, den = (int(x) for x in (m.group(1, 2) if m.group(1) is not None else m.group(3, 4)))
        if den == 0:
            return None
        return canonical(Fraction(num, den))
    return normalize(s)


def canonical(x: Fraction) -> str:
    """``Fraction`` -> ``"3"``, ``"1.5"`` (terminating decimals) or ``"1/3"``."""
    if x.denominator == 1:
        return str(x.numerator)
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        return f"{x.numerator}/{x.denominator}"
    return format((Decimal(x.numerator) / Decimal(x.denominator)).normalize(), "f")


def same_number(a: str | None, b: str | None) -> bool:
    """Whether two normalised number strings are the same rational number (equal canonical
    strings are, at any length; Fraction refuses more than 4,300 digits)."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    try:
        return Fraction(a) == Fraction(b)
    except (ValueError, ZeroDivisionError):
        return False


def extract_answer(completion: str) -> str | None:
    """The evaluation fallback (as the study's): the number of the last ``#### N``, else of the
    last boxed answer, else of the last "answer is N" / "result = N"; normalised; None if none."""
    if not isinstance(completion, str):
        return None
    found = HASH.findall(completion)
    if found:
        return normalize(found[-1]) if len(found[-1]) <= MAX_NUMBER else None
    boxed = extract_boxed(completion)
    if boxed is not None:
        return boxed_number(boxed)
    found = ANSWER_IS.findall(completion)
    return normalize(found[-1]) if found and len(found[-1]) <= MAX_NUMBER else None


def boxed_verdict(completion: str, gold: str) -> Verdict:
    """The study's training reward and the fallback evaluation check (module doc, ``boxed``)."""
    content = extract_boxed(completion)
    right = same_number(boxed_number(content), gold)
    reward = 1.0 if right else (FORMAT_REWARD if content is not None else 0.0)
    extracted = extract_answer(completion)
    return Verdict(reward, float(content is not None), float(right), same_number(extracted, gold),
                   extracted)


# ------------------------------------------------------------------------------ math-verify

_MV_SCRIPT = r"""
import json, sys
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
timeout = int(sys.argv[1])
pred_cfg = (LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False),
            ExprExtractionConfig())
gold_cfg = ((LatexExtractionConfig(), ExprExtractionConfig()) if sys.argv[2] == "latex"
            else (ExprExtractionConfig(),))
out = []
for gold, pred in json.load(sys.stdin):
    try:
        p = parse(pred, extraction_config=pred_cfg, extraction_mode="first_match",
                  parsing_timeout=timeout)
        if not p:
            out.append(None)
            continue
        g = parse(gold, extraction_config=gold_cfg, extraction_mode="first_match",
                  parsing_timeout=timeout)
        out.append(bool(g) and bool(verify(g, p, timeout_seconds=timeout)))
    except Exception:
        out.append(None)
print(json.dumps(out))
"""


_MV_PROBLEM: list = []   # math_verify_problem's answer, found once per process
_MV_WARNED: list = []    # whether the fallback warning was printed in this process


def math_verify_problem() -> str | None:
    """Why math-verify cannot check answers in this environment, else None: not installed, or
    its import fails (its LaTeX parser, latex2sympy2_extended, needs an antlr4 runtime it
    supports: 4.9.3, 4.11 or 4.13.2; ``pip install 'esopt[math]'`` brings 4.9.3). Imported once
    per process (about 0.4 s), on the first task that would use it."""
    if not _MV_PROBLEM:
        if importlib.util.find_spec("math_verify") is None:
            _MV_PROBLEM.append("math-verify is not installed")
        else:
            try:
                importlib.import_module("math_verify")
                _MV_PROBLEM.append(None)
            except Exception as e:  # noqa: BLE001 - ImportError of the parser, or anything it raises
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                _MV_PROBLEM.append(f"math-verify is installed but cannot load its LaTeX parser "
                                   f"({type(e).__name__}: {first})")
    return _MV_PROBLEM[0]


def math_verify_available() -> bool:
    return math_verify_problem() is None


def use_math_verify(task: str, setting, available: bool) -> bool:
    """Whether a task's evaluation uses math-verify (``math_verify``: true, false or auto) given
    whether it is ``available`` here: true without it is a ConfigError naming why; auto without
    it prints one warning per process (the evaluation falls back to the task's own extraction,
    which accepts fewer equivalent answers), never silently."""
    if setting is True and not available:
        raise ConfigError(f"task {task}: math_verify=true needs the math-verify package "
                          f"(pip install 'esopt[math]'): {math_verify_problem() or 'not available'}")
    if setting == "auto" and not available and not _MV_WARNED:
        _MV_WARNED.append(True)
        print(f"esopt: warning: {math_verify_problem() or 'math-verify is not available'}; "
              f"task {task} checks answers with its fallback extraction only "
              "(pip install 'esopt[math]'; task.math_verify=false silences this)", file=sys.stderr)
    return setting is True or (setting == "auto" and available)


def math_verify_batch(
    golds: Sequence[str], completions: Sequence[str], timeout: float, workers: int | None = None,
    gold_format: str = "expr",
) -> list[bool | None]:
    """math-verify's verdict on each (gold, completion) pair: True / False when it found an answer
    in the completion, None when it found none or failed. Golds are read as plain expressions
    (``gold_format="expr"``: GSM8K's numbers) or as LaTeX, then expressions (``"latex"``: MATH's
    ``$\\frac{3}{4}$``; pass them inside ``$...$``). The pairs are split over ``workers``
    subprocesses (default: one per available CPU) run side by side; each pair's parse and verify
    have a ``timeout`` (seconds), and a subprocess that fails or overruns gives None for its pairs
    (with one warning line on stderr)."""
    pairs = [[str(g), str(c)] for g, c in zip(golds, completions)]
    if not pairs:
        return []
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = max(1, min(int(workers or 1), math.ceil(len(pairs) / 32)))
    size = math.ceil(len(pairs) / workers)
    chunks = [pairs[i:i + size] for i in range(0, len(pairs), size)]
    t = max(1, math.ceil(timeout))
    procs = [
        subprocess.Popen([sys.executable, "-c", _MV_SCRIPT, str(t), gold_format],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in chunks
    ]
    out: list[bool | None] = []
    failed = 0
    for proc, chunk in zip(procs, chunks):
        got = None
        try:
            stdout, _ = proc.communicate(json.dumps(chunk), timeout=30 + 2 * t * len(chunk))
            got = json.loads(stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        except (ValueError, IndexError, OSError):
            pass
        if not isinstance(got, list) or len(got) != len(chunk):
            failed += len(chunk)
            got = [None] * len(chunk)
        out += [None if x is None else bool(x) for x in got]
    if failed:
        print(f"esopt: warning: math-verify gave no verdict on {failed} of {len(pairs)} "
              "completions; the fallback extraction decided them", file=sys.stderr)
    return out


def _features():
    import datasets

    return {k: datasets.Value("string") for k in ("prompt", "id", "question", "answer", "gold")}


class GSM8KTask(Task):
    name = "gsm8k"
    styles = ("compact", "chat")
    eval_problems = None  # eval.problems: null evaluates the whole test split (the study: 1,319)
    # Every knob of `task=gsm8k` (defaults registered with Hydra from here).
    knobs = {
        "source": "openai/gsm8k",  # hub dataset name; or a local folder holding <train_split>.jsonl
        #                            and <test_split>.jsonl (or .json / .parquet), e.g.
        #                            ../shared/data/gsm8k; or a save_to_disk DatasetDict folder
        "hub_config": "main",      # hub dataset config name
        "train_split": "train",    # split trained on; heldout is carved from it
        "test_split": "test",      # split evaluated as test (the study: all 1,319 rows)
        "n_train": None,           # train problems (the first, in file order); null = every row not held out
        "n_test": None,            # test problems (the first, in file order); null = all
        "n_heldout": 500,          # held-out problems: a seeded draw from train_split, never trained on
        "seed": 0,                 # seed of the held-out draw
        "answer_format": "boxed",  # boxed: the study's \boxed{} prompt, reward 1 / 0.1 / 0;
        #                            hash: '#### N' instruction, reward 1 / 0 (see the module doc)
        "extraction": "flexible",  # hash: strict (only '#### N' counts) or flexible (else the last number)
        "math_verify": "auto",     # evaluation check by math-verify: auto (when installed) | true | false
        "math_verify_timeout": 5.0,  # seconds per math-verify parse / verify
    }
    budgets = {"compact": 256, "chat": 2048}  # chat: the study's 2,048 new tokens
    stops = {"compact": ("\nQ:",)}

    def _validate(self) -> None:
        c = self.cfg
        if not c["source"]:
            raise ConfigError("task gsm8k: source must be a data folder or a hub dataset name")
        for key in ("train_split", "test_split"):
            if not isinstance(c[key], str) or not c[key]:
                raise ConfigError(f"task gsm8k: {key} must be a split name, got {c[key]!r}")
        check_int("gsm8k", "n_train", c["n_train"], 1, allow_none=True)
        check_int("gsm8k", "n_test", c["n_test"], 1, allow_none=True)
        check_int("gsm8k", "n_heldout", c["n_heldout"], 0)
        check_int("gsm8k", "seed", c["seed"], 0)
        if c["answer_format"] not in ("boxed", "hash"):
            raise ConfigError(
                f"task gsm8k: answer_format must be boxed or hash, got {c['answer_format']!r}"
            )
        if c["extraction"] not in ("strict", "flexible"):
            raise ConfigError(
                f"task gsm8k: extraction must be strict or flexible, got {c['extraction']!r}"
            )
        if c["math_verify"] not in ("auto", True, False):
            raise ConfigError(
                f"task gsm8k: math_verify must be auto, true or false, got {c['math_verify']!r}"
            )
        t = c["math_verify_timeout"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
            raise ConfigError(f"task gsm8k: math_verify_timeout must be > 0, got {t!r}")
        self.math_verify = use_math_verify("gsm8k", c["math_verify"],
                                           c["math_verify"] is not False and math_verify_available())
        # which check decides Verdict.correct in an evaluation (recorded with every result)
        self.verifier = ("math-verify + " if self.math_verify else "") + (
            "####/boxed/answer-is fallback" if c["answer_format"] == "boxed"
            else f"#### {c['extraction']} extraction"
        )

    # -- data
    def _rows(self, split: str) -> tuple[list[dict], str]:
        c = self.cfg
        layout = (f"a folder holding {c['train_split']}.jsonl and {c['test_split']}.jsonl (or .json / .parquet), "
                  "one row per problem with a 'question' and an 'answer' ending in '#### <number>'")
        ds, where = load_split(str(c["source"]), "gsm8k", split, c["hub_config"], layout=layout)
        rows = []
        for i, row in enumerate(ds.to_list()):
            q, ans = row.get("question"), row.get("answer")
            if not isinstance(q, str) or not q.strip():
                raise ConfigError(f"{where}: row {i}: field 'question' must be a non-empty string, "
                                  f"got {q!r:.60}")
            if not isinstance(ans, str):
                raise ConfigError(f"{where}: row {i}: field 'answer' must be a string ending in "
                                  f"'#### <number>', got {ans!r:.60}")
            gold = gold_answer(ans)
            if gold is None:
                tail = ans.rsplit("#### ", 1)[1] if "#### " in ans else ans[-40:]
                raise ConfigError(f"{where}: row {i}: field 'answer' must end in '#### <number>', "
                                  f"got ...{tail!r:.60}")
            rows.append({"question": q, "answer": ans, "gold": gold})
        return rows, where

    def _build(self) -> dict:
        c = self.cfg
        test, _ = self._rows(c["test_split"])
        if c["n_test"] is not None:
            test = test[: c["n_test"]]
        pool, where = self._rows(c["train_split"])
        key = lambda r: " ".join(r["question"].split())  # noqa: E731
        seen = {key(r) for r in test}
        order = list(range(len(pool)))
        random.Random(c["seed"]).shuffle(order)
        held_idx = set(order[: c["n_heldout"]])
        parts: dict[str, list[dict]] = {"test": test, "heldout": [], "train": []}
        for i in sorted(held_idx):
            if key(pool[i]) not in seen:
                seen.add(key(pool[i]))
                parts["heldout"].append(pool[i])
        for i, r in enumerate(pool):
            if i in held_idx or key(r) in seen:
                continue
            if c["n_train"] is not None and len(parts["train"]) >= c["n_train"]:
                break
            seen.add(key(r))
            parts["train"].append(r)
        return {
            name: make_dataset(
                [{"prompt": self.prompt(r["question"]), "id": f"gsm8k/{name}/{j}", **r}
                 for j, r in enumerate(rows)],
                _features(),
            )
            for name, rows in parts.items()
        }

    def prompt(self, question: str) -> str:
        if self.style == "compact":
            return f"Q: {question}\nA:"
        if self.cfg["answer_format"] == "boxed":
            messages = [{"role": "system", "content": SYSTEM_BOXED},
                        {"role": "user", "content": question.strip()}]
        else:
            messages = [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
        return chat_prompt(self.tokenizer, messages)

    # -- verifier
    def _gold(self, row: Mapping) -> str:
        gold = row.get("gold") or gold_answer(row.get("answer"))
        if gold is None:
            raise ConfigError("gsm8k: row has no gold answer ('gold' or 'answer' with '#### ')")
        return gold

    def _hash_verdict(self, completion: str, gold: str) -> Verdict:
        strict = extract_strict(completion)
        extracted = strict
        if extracted is None and self.cfg["extraction"] == "flexible":
            extracted = extract_flexible(completion)
        ok = same_number(extracted, gold)
        return Verdict(float(ok), 1.0 if strict is not None else 0.0, float(ok), ok, extracted)

    def verify(self, completion: str, row: Mapping) -> Verdict:
        """Reward and the fallback check of one completion (never math-verify: see verdicts)."""
        gold = self._gold(row)
        if self.cfg["answer_format"] == "boxed":
            return boxed_verdict(completion, gold)
        return self._hash_verdict(completion, gold)

    def verdicts(self, completions: Sequence[str], rows: Sequence[Mapping]) -> list[Verdict]:
        """``verify`` for each, then (when math-verify is on) its verdict decides ``correct``:
        boxed: wherever it found an answer; hash: it may accept an answer the extraction missed."""
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions for {len(rows)} rows")
        golds = [self._gold(r) for r in rows]
        out = [self.verify(c, r) for c, r in zip(completions, rows)]
        if not self.math_verify:
            return out
        boxed = self.cfg["answer_format"] == "boxed"
        todo = list(range(len(out))) if boxed else [i for i, v in enumerate(out) if not v.correct]
        mv = math_verify_batch([golds[i] for i in todo], [completions[i] for i in todo],
                               self.cfg["math_verify_timeout"])
        for i, ok in zip(todo, mv):
            if ok is not None and ok != out[i].correct:
                v = out[i]
                out[i] = Verdict(v.reward, v.format, v.answer, ok, v.extracted)
        return out

    def reference(self, row: Mapping) -> str | None:
        ans = row.get("answer")
        if not isinstance(ans, str):
            return None
        if self.cfg["answer_format"] == "boxed":
            body = ans.rsplit("####", 1)[0].rstrip()
            ans = f"{body}\nThe answer is \\boxed{{{self._gold(row)}}}."
        return f" {ans}" if self.style == "compact" else ans
