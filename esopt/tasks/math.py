"""Math: competition problems with one final answer (MATH, MATH-500, AIME, AMC, ...).

Data (``source``), in this order:

  * a benchmark name of ``BENCHMARKS`` (``math500``, the default; ``math``, ``math_l3_5``,
    ``aime24``, ``aime25``, ``amc23``): its hub dataset, config, splits and level filter, loaded
    through ``datasets`` (needs network once; the hub cache after). Any of those knobs set
    explicitly overrides the benchmark's. Any other bare name is a ConfigError.
  * a local ``.jsonl`` / ``.json`` (an array or JSON lines) / ``.parquet`` file, a folder holding
    ``<split>.jsonl`` (or ``.json`` / ``.parquet``), a ``save_to_disk`` folder, or a hub dataset
    name ``owner/name`` (``esopt.tasks.load_split``).

Rows, in the public files' column names: the problem is ``problem`` (MATH, MATH-500, AMC, most
AIME copies), ``Problem`` or ``question``; the gold answer is ``answer`` / ``Answer`` (a string
or a number; ``final_answer`` holding a one-item list, as OlympiadBench), else the last
``\\boxed{}`` of ``solution`` / ``Solution`` (MATH has no answer column). ``level`` (MATH's
``"Level 3"`` or MATH-500's ``3``) is read when present, and ``levels`` keeps only those
levels; ``unique_id`` / ``id`` / ``ID`` is kept as ``unique_id``. A row with neither an answer
nor a boxed solution is one ConfigError line naming the file and the row.

Splits (``train_split``: whether the source has a split to train on):

  * one split (a file; a folder or hub source without ``train_split``; ``math500``, ``aime24``,
    ``aime25``, ``amc23``): Countdown's file rule in file order: train = the first ``n_train``
    rows (default 0: a benchmark file is evaluated whole), heldout = the last ``n_heldout``
    (default 0), test = the rows in between (at most ``n_test``; null = all).
  * two splits (``math``, ``math_l3_5``, or ``train_split`` set): GSM8K's rule: test = the
    ``test_split`` rows (the first ``n_test``), heldout = ``n_heldout`` rows of ``train_split``
    (default 500) drawn by a seeded shuffle (``seed``), train = the other ``train_split`` rows in
    order (the first ``n_train``; null = all).

Rows whose whitespace-normalised problem repeats a row of test, then heldout, then an earlier
row are dropped, so the three splits are disjoint.

Prompt and reward (the study's, as GSM8K's ``answer_format=boxed``): chat prompt = system
``SYSTEM_BOXED`` + the problem; compact prompt ``"Q: <problem>\\nA:"``. Training reward
(``verify``, ``math_verdict``): 1.0 if the last ``\\boxed{...}`` holds the gold answer
(``same_answer``: equal as numbers, ``boxed_number``, else equal after ``normalize_answer``),
0.1 if a boxed answer is present but wrong, else 0; format = 1 if present. Training never runs
math-verify.

Evaluation (``verdicts``): with math-verify (``math_verify``: ``auto`` = when installed,
``true`` = required, ``false``), its verdict decides ``correct`` wherever it found an answer in
the completion (the gold read as LaTeX: ``2\\sqrt{2}`` == ``\\sqrt{8}``, ``\\frac{1}{2}`` ==
``0.5``), batched in subprocesses by GSM8K's ``math_verify_batch``; elsewhere, and without it,
the exact check above on the last boxed answer decides.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from esopt.tasks import (
    DATA_EXTENSIONS,
    ConfigError,
    Task,
    Verdict,
    chat_prompt,
    check_int,
    load_split,
    make_dataset,
)
from esopt.tasks.gsm8k import (
    FORMAT_REWARD,
    SYSTEM_BOXED,
    boxed_number,
    extract_boxed,
    math_verify_available,
    math_verify_batch,
    same_number,
    use_math_verify,
)


@dataclass(frozen=True)
class Benchmark:
    """A named source: hub dataset, its config, the split evaluated as test, the split trained
    on (None: carve the test split by the one-split rule) and the MATH levels kept (None: all)."""

    hub: str
    config: str | None
    test_split: str
    train_split: str | None = None
    levels: tuple[int, ...] | None = None


_MATH = "DigitalLearningGmbH/MATH-lighteval"  # Hendrycks MATH, 7,500 train + 5,000 test
BENCHMARKS: dict[str, Benchmark] = {
    "math500": Benchmark("HuggingFaceH4/MATH-500", None, "test"),  # 500 of MATH's test split
    "math": Benchmark(_MATH, "default", "test", "train"),
    "math_l3_5": Benchmark(_MATH, "default", "test", "train", (3, 4, 5)),  # the hard setting
    "aime24": Benchmark("HuggingFaceH4/aime_2024", None, "train"),  # 30 problems
    "aime25": Benchmark("math-ai/aime25", None, "test"),  # 30 problems
    "amc23": Benchmark("math-ai/amc23", None, "test"),  # 40 problems, column 'question'
}

# column aliases, first present wins (the public files' spellings)
PROBLEM_KEYS = ("problem", "Problem", "question", "Question")
ANSWER_KEYS = ("answer", "Answer", "final_answer")
SOLUTION_KEYS = ("solution", "Solution")
LEVEL_KEYS = ("level", "Level")
ID_KEYS = ("unique_id", "id", "ID")


def benchmark(source) -> Benchmark | None:
    """The ``BENCHMARKS`` entry named ``source``; None for a file, folder or ``owner/name`` hub
    dataset; ConfigError for any other bare name (a mistyped benchmark). Reads no data."""
    if source in BENCHMARKS:
        return BENCHMARKS[source]
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"task math: source must be a benchmark name, a data file or folder, or a "
                          f"hub dataset name, got {source!r}")
    path = os.path.expanduser(source)
    if "/" in source or os.sep in source or os.path.splitext(path)[1].lower() in DATA_EXTENSIONS \
            or os.path.exists(path):
        return None
    raise ConfigError(f"task math: unknown benchmark {source!r} (known: {', '.join(BENCHMARKS)}; or a "
                      ".jsonl / .json / .parquet file, a folder, or a hub dataset name owner/name)")


# ------------------------------------------------------------------------------ the verifier

_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_CHOICE = re.compile(r"\(?([A-E])\)?")
_SHORT_FRAC = re.compile(r"\\frac([0-9])([0-9])")


def normalize_answer(text: str) -> str:
    """The exact-string form of an answer: ``\\text{..}`` (``\\textbf``, ``\\mathrm``, ``\\mbox``)
    unwrapped, ``\\left`` / ``\\right``, ``\\!`` ``\\,`` ``\\;``, ``$`` and all whitespace dropped,
    ``\\dfrac`` / ``\\tfrac`` -> ``\\frac`` (``\\frac12`` -> ``\\frac{1}{2}``), trailing ``.``
    dropped, and a choice ``(B)`` -> ``B``: ``"\\text{(B)}"`` -> ``"B"``,
    ``"\\left( 3, \\dfrac{\\pi}{2} \\right)"`` -> ``"(3,\\frac{\\pi}{2})"``."""
    s = _WRAP.sub(r"\1", text)
    for old in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\$", "$"):
        s = s.replace(old, "")
    s = "".join(s.replace("dfrac", "frac").replace("tfrac", "frac").split()).rstrip(".")
    s = _SHORT_FRAC.sub(r"\\frac{\1}{\2}", s)
    m = _CHOICE.fullmatch(s)
    return m.group(1) if m else s


def canonical_answer(text: str | None) -> str | None:
    """A number's canonical string (``boxed_number``: ``"\\frac{3}{2}"`` -> ``"1.5"``, units and
    ``%`` dropped), else ``normalize_answer``; None for None or an empty answer."""
    if text is None:
        return None
    num = boxed_number(text)
    if num is not None:
        return num
    s = normalize_answer(text)
    return (boxed_number(s) or s) if s else None


def same_answer(pred: str | None, gold: str | None) -> bool:
    """Whether two answers are equal: the same number, or the same ``normalize_answer`` string
    (``canonical_answer`` of each). Cheap; what the training reward uses."""
    a, b = canonical_answer(pred), canonical_answer(gold)
    return a is not None and b is not None and (a == b or same_number(a, b))


def math_verdict(completion: str, gold: str) -> Verdict:
    """The training reward and the fallback evaluation check (module doc): the last boxed
    answer against ``gold``; ``extracted`` is its ``canonical_answer`` (for majority votes)."""
    content = extract_boxed(completion)
    right = same_answer(content, gold)
    reward = 1.0 if right else (FORMAT_REWARD if content is not None else 0.0)
    return Verdict(reward, float(content is not None), float(right), right,
                   canonical_answer(content))


# ------------------------------------------------------------------------------ rows


def _first(row: Mapping, keys: Sequence[str]):
    return next((row[k] for k in keys if row.get(k) is not None), None)


def gold_of(row: Mapping) -> str | None:
    """The gold answer of a row (module doc, Rows): its answer column as text (``27.0`` ->
    ``"27"``, ``"$5$"`` -> ``"5"``), else the last boxed answer of its solution; None if none."""
    ans = _first(row, ANSWER_KEYS)
    if isinstance(ans, list) and len(ans) == 1:
        ans = ans[0]
    if isinstance(ans, bool):
        ans = None
    elif isinstance(ans, float) and ans.is_integer():
        ans = str(int(ans))
    elif isinstance(ans, (int, float)):
        ans = str(ans)
    if isinstance(ans, str) and ans.strip().strip("$").strip():
        return ans.strip().strip("$").strip()
    sol = _first(row, SOLUTION_KEYS)
    if isinstance(sol, str):
        boxed = extract_boxed(sol.replace("\\fbox", "\\boxed"))
        if boxed:
            return boxed
    return None


def level_of(value) -> int | None:
    """MATH's ``"Level 3"`` or MATH-500's ``3`` -> 3; None for anything else (``"Level ?"``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = re.fullmatch(r"(?:Level\s*)?([0-9]+)", value.strip()) if isinstance(value, str) else None
    return int(m.group(1)) if m else None


def parse_row(row: Mapping, where: str) -> dict:
    """A source row -> ``{problem, gold, solution, level, subject, unique_id}``; ConfigError
    (one line, starting with ``where``) when the problem or the gold answer is missing."""
    problem = _first(row, PROBLEM_KEYS)
    cols = ", ".join(k for k, v in row.items() if v is not None) or "none"
    if not isinstance(problem, str) or not problem.strip():
        raise ConfigError(f"{where}: no 'problem' field (or 'Problem', 'question') with text; "
                          f"fields: {cols}")
    gold = gold_of(row)
    if gold is None:
        raise ConfigError(f"{where}: no 'answer' field (or 'Answer', 'final_answer') and no "
                          f"'solution' with a \\boxed{{}} answer; fields: {cols}")
    sol, uid = _first(row, SOLUTION_KEYS), _first(row, ID_KEYS)
    subject = row.get("subject") or row.get("type")
    return {"problem": problem, "gold": gold, "solution": sol if isinstance(sol, str) else "",
            "level": level_of(_first(row, LEVEL_KEYS)),
            "subject": subject if isinstance(subject, str) else "",
            "unique_id": "" if uid is None else str(uid)}


def _features():
    import datasets

    cols = ("prompt", "id", "problem", "gold", "solution", "subject", "unique_id")
    return {**{k: datasets.Value("string") for k in cols}, "level": datasets.Value("int64")}


class MathTask(Task):
    name = "math"
    styles = ("compact", "chat")
    eval_problems = None  # eval.problems: null evaluates the whole test split (MATH-500: 500)
    # Every knob of `task=math` (defaults registered with Hydra from here); nulls are resolved
    # from the benchmark named by source (resolve()), so a run's config holds what it used.
    knobs = {
        "source": "math500",     # a BENCHMARKS name (math500, math, math_l3_5, aime24, aime25, amc23),
        #                          a .jsonl/.json/.parquet file, a folder, or a hub name owner/name
        "hub_config": None,      # hub dataset config; null = the benchmark's
        "train_split": None,     # split trained on (two-split sources); null = the benchmark's
        #                          (math, math_l3_5: train), else none: carve the test split
        "test_split": None,      # split evaluated as test; null = the benchmark's, else test
        "levels": None,          # keep only these MATH levels, e.g. [3, 4, 5]; null = the benchmark's
        "n_train": None,         # train problems; null = all of train_split, or 0 of a one-split source
        "n_test": None,          # test problems (the first, in order); null = all
        "n_heldout": None,       # held-out problems; null = 500 of train_split, or 0 (the last rows)
        "seed": 0,               # seed of the held-out draw (two-split sources)
        "math_verify": "auto",   # evaluation check by math-verify: auto (when installed) | true | false
        "math_verify_timeout": 5.0,  # seconds per math-verify parse / verify
    }
    budgets = {"compact": 256, "chat": 2048}  # as GSM8K's: the study's 2,048 new tokens
    stops = {"compact": ("\nQ:",)}

    @classmethod
    def resolve(cls, cfg: dict) -> dict:
        """Nulls -> the benchmark's hub config, splits and levels; test_split -> test; n_train /
        n_heldout -> the defaults of a one- or two-split source (module doc)."""
        out = dict(cfg)
        bench = benchmark(out.get("source"))
        if bench is not None:
            for key in ("hub_config", "train_split", "test_split", "levels"):
                if out.get(key) is None:
                    value = getattr(bench, "config" if key == "hub_config" else key)
                    out[key] = list(value) if isinstance(value, tuple) else value
        if out.get("test_split") is None:
            out["test_split"] = "test"
        two = out.get("train_split") is not None
        if out.get("n_heldout") is None:
            out["n_heldout"] = 500 if two else 0
        if out.get("n_train") is None and not two:
            out["n_train"] = 0
        return out

    def _validate(self) -> None:
        c = self.cfg
        is_file = os.path.splitext(str(c["source"]))[1].lower() in DATA_EXTENSIONS
        if c["train_split"] is not None and is_file:
            raise ConfigError(f"task math: a file has no splits (train_split={c['train_split']!r}); "
                              "its first n_train rows are trained on")
        for key in ("train_split", "test_split"):
            if c[key] is not None and (not isinstance(c[key], str) or not c[key]):
                raise ConfigError(f"task math: {key} must be a split name, got {c[key]!r}")
        lv = c["levels"]
        if lv is not None and (not isinstance(lv, list) or not lv
                               or not all(type(x) is int and x >= 1 for x in lv)):
            raise ConfigError(f"task math: levels must be a list of levels (e.g. [3, 4, 5]), got {lv!r}")
        check_int("math", "n_train", c["n_train"], 0, allow_none=True)
        check_int("math", "n_test", c["n_test"], 1, allow_none=True)
        check_int("math", "n_heldout", c["n_heldout"], 0)
        check_int("math", "seed", c["seed"], 0)
        mv, t = c["math_verify"], c["math_verify_timeout"]
        if mv not in ("auto", True, False):
            raise ConfigError(f"task math: math_verify must be auto, true or false, got {mv!r}")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
            raise ConfigError(f"task math: math_verify_timeout must be > 0, got {t!r}")
        self.math_verify = use_math_verify("math", mv, mv is not False and math_verify_available())
        self.verifier = ("math-verify + " if self.math_verify else "") + "last-boxed exact fallback"

    # -- data
    def _rows(self, split: str) -> tuple[list[dict], str]:
        c = self.cfg
        source = str(c["source"])
        bench = benchmark(source)
        ds, where = load_split(bench.hub if bench else source, "math", split, c["hub_config"])
        rows = [parse_row(r, f"{where}: row {i}") for i, r in enumerate(ds.to_list())]
        if c["levels"] is not None:
            rows = [r for r in rows if r["level"] in c["levels"]]
        return rows, where

    def _build(self) -> dict:
        c = self.cfg
        if c["train_split"] is None:  # one split: train | test | heldout by position
            rows, where = self._rows(c["test_split"])
            n, n_train, n_held = len(rows), c["n_train"], c["n_heldout"]
            if n_train + n_held >= n:
                kept = f" of levels {c['levels']}" if c["levels"] is not None else ""
                raise ConfigError(f"task math: {where} has {n} problems{kept}; n_train={n_train} + "
                                  f"n_heldout={n_held} leaves no test problems")
            end = n - n_held
            stop = end if c["n_test"] is None else min(end, n_train + c["n_test"])
            parts = {"test": rows[n_train:stop], "heldout": rows[end:], "train": rows[:n_train]}
        else:  # two splits: test from test_split, heldout a seeded draw from train_split
            test, _ = self._rows(c["test_split"])
            pool, _ = self._rows(c["train_split"])
            order = list(range(len(pool)))
            random.Random(c["seed"]).shuffle(order)
            held = set(order[: c["n_heldout"]])
            parts = {"test": test[: c["n_test"]], "heldout": [pool[i] for i in sorted(held)],
                     "train": [r for i, r in enumerate(pool) if i not in held]}
        seen: set[str] = set()
        out = {}
        for name in ("test", "heldout", "train"):
            kept = []
            for r in parts[name]:
                k = " ".join(r["problem"].split())
                if k not in seen:
                    seen.add(k)
                    kept.append(r)
            if name == "train" and c["train_split"] is not None:  # the first n_train distinct
                kept = kept[: c["n_train"]]
            out[name] = make_dataset(
                [{"prompt": self.prompt(r["problem"]), "id": f"math/{name}/{j}", **r}
                 for j, r in enumerate(kept)], _features())
        return out

    def prompt(self, problem: str) -> str:
        if self.style == "compact":
            return f"Q: {problem}\nA:"
        messages = [{"role": "system", "content": SYSTEM_BOXED},
                    {"role": "user", "content": problem.strip()}]
        return chat_prompt(self.tokenizer, messages)

    # -- verifier
    def verify(self, completion: str, row: Mapping) -> Verdict:
        """Reward and the fallback check of one completion (never math-verify: see verdicts)."""
        return math_verdict(completion, row["gold"])

    def verdicts(self, completions: Sequence[str], rows: Sequence[Mapping]) -> list[Verdict]:
        """``verify`` for each, then (math-verify on) its verdict decides ``correct`` wherever
        it found an answer; rewards never change."""
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions for {len(rows)} rows")
        out = [self.verify(c, r) for c, r in zip(completions, rows)]
        if not self.math_verify:
            return out
        mv = math_verify_batch([f"${r['gold']}$" for r in rows], completions,
                               self.cfg["math_verify_timeout"], gold_format="latex")
        return [v if ok is None or ok == v.correct else
                Verdict(v.reward, v.format, v.answer, ok, v.extracted) for v, ok in zip(out, mv)]

    def reference(self, row: Mapping) -> str | None:
        body = (row.get("solution") or "").rstrip()
        if "\\boxed" not in body:
            body = f"{body}\nThe answer is \\boxed{{{row['gold']}}}.".lstrip()
        return f" {body}" if self.style == "compact" else body
