"""Easy held-out tasks with one-word answers: forgetting probes for small models
(``eval.probes``), disjoint from the training task ``arith`` (no sums asked). Their style is
``compact`` (three answered examples, then the question: SmolLM2-135M-Instruct answers them far
better so than asked in one chat turn) unless the probe's config sets ``style: chat``.

  * ``successor``: ``"What number comes after 417? Answer with the number only."`` -> ``418``
    (``n`` in ``min_number..max_number``); verdict as arith's (the last integer written).
  * ``copy``:      ``"Repeat this word exactly: tomaki"`` -> ``tomaki`` (a made-up word of
    ``min_syllables..max_syllables`` consonant-vowel syllables, so no word list ships);
    extracted = the first word of the completion, lower-cased, quotes and punctuation dropped.

SmolLM2-135M-Instruct's base Pass@1 on each (and the candidates that were rejected):
docs/results/probes.md. Problems are distinct and dealt from one seeded stream as the synthetic
tasks' are (``esopt.tasks.synthetic.deal``): test, then heldout, then train.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping

from esopt.tasks import ConfigError, Task, Verdict, chat_prompt, check_int, make_dataset
from esopt.tasks.arith import verdict as number_verdict
from esopt.tasks.synthetic import deal

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
MAX_NUMBER = 10**6
MAX_SYLLABLES = 6
_WORD = re.compile(r"[A-Za-z]+")
COMMON = {"n_train": 0, "n_test": 500, "n_heldout": 500, "seed": 0}  # a probe is never trained on


def _features():
    import datasets

    return {"prompt": datasets.Value("string"), "id": datasets.Value("string"),
            "question": datasets.Value("string"), "answer": datasets.Value("string")}


class ShortProbe(Task):
    """A generated question with a short gold answer: in ``chat`` style one user turn, in
    ``compact`` style plain text after ``shots`` answered examples (``Q: ...`` / ``A: ...``
    lines; the answer ends at the line's end)."""

    styles = ("chat", "compact")
    budgets = {"chat": 16, "compact": 16}
    stops = {"compact": ("\n",)}
    eval_problems = 200
    question = ""
    shots: tuple = ()  # (fields, answer) examples of the compact prompt, outside the generated range

    @classmethod
    def resolve(cls, cfg: dict) -> dict:
        return {**cfg, "style": cfg.get("style") or "compact"}

    def prompt(self, q: str) -> str:
        if self.style == "chat":
            return chat_prompt(self.tokenizer, [{"role": "user", "content": q}])
        lines = [f"Q: {self.question.format(**f)}\nA: {a}\n" for f, a in self.shots]
        return "".join(lines) + f"Q: {q}\nA:"

    def _validate(self) -> None:
        for k, lo in (("n_train", 0), ("n_test", 1), ("n_heldout", 0), ("seed", 0)):
            check_int(self.name, k, self.cfg[k], lo)

    def make(self, rng: random.Random) -> dict:
        """One problem ``{"key": ..., "fields": {...} (the question's), "answer": str}``."""
        raise NotImplementedError

    def _build(self) -> dict:
        c = self.cfg
        parts = deal(self.name, self.make, lambda p: p["key"], c["n_test"], c["n_heldout"], c["n_train"], c["seed"])
        out = {}
        for name, probs in parts.items():
            rows = []
            for i, p in enumerate(probs):
                q = self.question.format(**p["fields"])
                rows.append({"prompt": self.prompt(q),
                             "id": f"{self.name}/{name}/{i}", "question": q, "answer": p["answer"]})
            out[name] = make_dataset(rows, _features())
        return out

    def reference(self, row: Mapping) -> str | None:
        return str(row["answer"])


class SuccessorTask(ShortProbe):
    name = "successor"
    question = "What number comes after {n}? Answer with the number only."
    shots = (({"n": 6}, "7"), ({"n": 29}, "30"), ({"n": 4099}, "4100"))
    knobs = {"min_number": 1,     # smallest n (>= 0)
             "max_number": 1999,  # largest n (< 1000000)
             **COMMON}

    def _validate(self) -> None:
        super()._validate()
        check_int(self.name, "min_number", self.cfg["min_number"], 0)
        check_int(self.name, "max_number", self.cfg["max_number"], self.cfg["min_number"])
        if self.cfg["max_number"] >= MAX_NUMBER:
            raise ConfigError(f"task successor: max_number must be < {MAX_NUMBER}")

    def make(self, rng: random.Random) -> dict:
        n = rng.randint(self.cfg["min_number"], self.cfg["max_number"])
        return {"key": n, "fields": {"n": n}, "answer": str(n + 1)}

    def verify(self, completion: str, row: Mapping) -> Verdict:
        return number_verdict(completion, int(row["answer"]))


class WordProbe(ShortProbe):
    """A made-up word of consonant-vowel syllables; the answer is ``transform(word)``."""

    knobs = {"min_syllables": 2,  # fewest consonant-vowel syllables of the word (>= 1)
             "max_syllables": 3,  # most (<= 6)
             **COMMON}

    @staticmethod
    def transform(word: str) -> str:
        return word

    def _validate(self) -> None:
        super()._validate()
        check_int(self.name, "min_syllables", self.cfg["min_syllables"], 1)
        check_int(self.name, "max_syllables", self.cfg["max_syllables"], self.cfg["min_syllables"])
        if self.cfg["max_syllables"] > MAX_SYLLABLES:
            raise ConfigError(f"task {self.name}: max_syllables must be <= {MAX_SYLLABLES}")

    def make(self, rng: random.Random) -> dict:
        n = rng.randint(self.cfg["min_syllables"], self.cfg["max_syllables"])
        word = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(n))
        return {"key": word, "fields": {"word": word}, "answer": self.transform(word)}

    def verify(self, completion: str, row: Mapping) -> Verdict:
        words = _WORD.findall(completion)
        extracted = words[0] if words else None
        ok = extracted == row["answer"]
        fmt = float(len(words) == 1)  # the word alone, as asked
        return Verdict(0.1 * fmt + float(ok), fmt, float(ok), ok, extracted)


class UpperTask(WordProbe):
    name = "upper"
    question = "Write this word in capital letters: {word}"
    shots = (({"word": "bird"}, "BIRD"), ({"word": "xyloq"}, "XYLOQ"), ({"word": "wenchy"}, "WENCHY"))

    @staticmethod
    def transform(word: str) -> str:
        return word.upper()


class CopyTask(WordProbe):
    name = "copy"
    question = "Repeat this word exactly: {word}"
    shots = (({"word": "bird"}, "bird"), ({"word": "xyloq"}, "xyloq"), ({"word": "wenchy"}, "wenchy"))


class FirstLetterTask(WordProbe):
    name = "first_letter"
    question = "What is the first letter of the word {word}?"
    shots = (({"word": "bird"}, "b"), ({"word": "xyloq"}, "x"), ({"word": "wenchy"}, "w"))

    @staticmethod
    def transform(word: str) -> str:
        return word[0]


class PassagesTask(Task):
    """Held-out English text scored by likelihood, not by generation (``scored_by``): each row
    is one passage of ``esopt.tasks.passages`` (public-domain openings shipped in the package),
    dealt alternately to test and heldout; train is empty. The evaluator scores it with
    ``evaluator.evaluate_likelihood``: its Pass@1 is the share of the text's tokens the model
    predicts top-1 (greedy next-token accuracy), beside the mean log-likelihood per token. The
    plain text is scored whatever the prompt style (no chat template)."""

    name = "passages"
    styles = ("compact", "chat")
    budgets = {"compact": 1, "chat": 1}  # nothing is generated
    scored_by = "likelihood"
    knobs = {}
    eval_problems = None  # every passage of the split

    def _build(self) -> dict:
        import datasets

        from esopt.tasks.passages import passages

        feats = {"prompt": datasets.Value("string"), "id": datasets.Value("string")}
        texts = passages()
        parts = {"test": texts[0::2], "heldout": texts[1::2], "train": []}
        return {name: make_dataset([{"prompt": t, "id": f"passages/{name}/{i}"} for i, t in enumerate(ts)], feats)
                for name, ts in parts.items()}

    def verify(self, completion: str, row: Mapping) -> Verdict:
        raise ConfigError("task passages is scored by likelihood (an eval.probes entry), not by a verifier")
