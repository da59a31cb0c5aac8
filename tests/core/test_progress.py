"""Long work says it is alive (esopt.core.progress): a real model's evaluation and ES iterations
printed nothing until they ended (163 s of a 0.5B model's evaluation with no line). In a log it
is one line every few percent or minutes with tokens/s and the time left; short work and
ESOPT_PROGRESS=0 (the suite's default) print nothing; on a terminal it is a tqdm bar."""

import io

import pytest

from esopt.core import progress
from esopt.core.progress import Progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_a_line_every_few_percent_or_minutes_with_rate_and_time_left(monkeypatch):
    monkeypatch.setenv("ESOPT_PROGRESS", "1")
    clock, log = Clock(), io.StringIO()
    with Progress("evaluate gsm8k test", 200, "completions", counts_generation=True, stream=log, clock=clock) as p:
        for i in range(199):
            clock.t += 1.0                       # 1 s and 50 tokens per completion
            progress.generated(1, 50)
    lines = log.getvalue().splitlines()
    # nothing in the first QUIET_S seconds, then one line per EVERY_PCT percent; none at 100%
    assert lines[0] == "esopt: evaluate gsm8k test 15% (30 of 200 completions), 50 tok/s, 30s so far, about 2m50s left"
    assert [int(x.split("% ")[0].split()[-1]) for x in lines] == [15, 25, 35, 45, 55, 65, 75, 85, 95]
    assert p.done == 199 and p.tokens == 199 * 50
    slow, log = Clock(), io.StringIO()   # a slow piece of work: a line every EVERY_S seconds too
    with Progress("es", 1000, "iterations", stream=log, clock=slow) as p:
        for _ in range(30):
            slow.t += 60.0
            p.advance(1, 10)
            progress.generated(8, 100)           # the members' generations are not ES's units
    assert p.done == 30 and len(log.getvalue().splitlines()) == 30 * 60 // int(progress.EVERY_S)
    assert progress.time_left(10.0, 4, 10) == pytest.approx(15.0) and progress.time_left(5.0, 0, 10) is None


def test_quiet_by_default_in_tests_and_silent_on_other_ranks(monkeypatch):
    clock, log = Clock(), io.StringIO()
    with Progress("evaluate", 10, "completions", counts_generation=True, stream=log, clock=clock):
        clock.t += 1000
        progress.generated(5, 5)
    assert log.getvalue() == ""                          # ESOPT_PROGRESS=0 (tests/conftest.py)
    monkeypatch.setenv("ESOPT_PROGRESS", "1")
    monkeypatch.setenv("RANK", "1")
    with Progress("evaluate", 10, "completions", counts_generation=True, stream=log, clock=clock):
        clock.t += 1000
        progress.generated(5, 5)
    assert log.getvalue() == ""


def test_a_terminal_gets_a_bar_and_a_real_evaluation_advances_it(monkeypatch):
    """On a terminal: tqdm's bar with tok/s. A real tiny model's evaluation advances it by its
    completions as the engine's batches finish (samples and greedy), tokens as generated."""
    from esopt import engines, models, tasks
    from esopt.evaluator import evaluate

    monkeypatch.setenv("ESOPT_PROGRESS", "1")
    term = Terminal()
    with Progress("evaluate", 4, "completions", counts_generation=True, stream=term) as p:
        progress.generated(2, 30)
        assert p.bar is not None and p.bar.n == 2 and p.bar.postfix.endswith(" tok/s")
    assert term.getvalue().startswith("\resopt evaluate:   0%|")

    model, tok = models.load("tiny-xs")
    task = tasks.get({"name": "countdown"}, tokenizer=tok, style="compact")
    engine = engines.get({"name": "hf", "device": "cpu", "max_batch": 8}, model, tok)
    seen = []
    monkeypatch.setattr(Progress, "advance", lambda self, n=1, tokens=0: seen.append((self.what, n, tokens)))
    r = evaluate(engine, task, problems=6, samples=4, seed=0)
    assert sum(n for _, n, _ in seen) == 6 * 4 + 6 and len(seen) == 3 + 1          # 24 samples in 3 batches, greedy
    assert sum(t for _, _, t in seen) == r["tokens_generated"] and seen[0][0] == "evaluate countdown test"
