"""Progress of long work (an evaluation's completions, ES iterations) while it runs.

    with Progress("evaluate", total=2640, unit="completions") as p:   # the innermost one is current
        ...                                   # engines call generated(n, tokens) as batches finish
        p.advance(1, tokens=...)              # or the work's own loop advances it

On a terminal it is a tqdm bar with the generated tokens per second. Elsewhere (a log file, a
Slurm job's output) it is one line on stderr at most every ``EVERY_PCT`` percent or every
``EVERY_S`` seconds, whichever comes first, once the work has run ``QUIET_S`` seconds (short work
prints nothing), with tokens/s and the time left at the rate so far:

    esopt: evaluate 40% (1,056 of 2,640 completions), 312 tok/s, 2m10s so far, about 3m15s left

``ESOPT_PROGRESS=0`` turns it off (the test suite does); a process of rank > 0 (``RANK``) is silent.
The time left assumes the remaining units cost what the finished ones did:
``left = elapsed * (total - done) / done``.
"""

from __future__ import annotations

import contextvars
import os
import sys
import time

EVERY_PCT = 10.0   # a log line at least every this many percent of the work...
EVERY_S = 300.0    # ...or every this many seconds, whichever comes first
QUIET_S = 30.0     # no log line before the work has run this long (short work stays silent)

_current: contextvars.ContextVar = contextvars.ContextVar("esopt_progress", default=None)


def enabled() -> bool:
    """Whether progress is shown in this process (``ESOPT_PROGRESS`` not 0, rank 0)."""
    return os.environ.get("ESOPT_PROGRESS", "1") not in ("0", "false", "") and os.environ.get("RANK", "0") == "0"


def duration(seconds: float) -> str:
    """``42s``, ``3m15s``, ``2h05m``."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def time_left(elapsed: float, done: float, total: float) -> float | None:
    """``elapsed * (total - done) / done``: the remaining units at the rate so far (None before any)."""
    return elapsed * (total - done) / done if done > 0 else None


class Progress:
    """One piece of long work with ``total`` units (module docstring). ``counts_generation``: the
    engines' :func:`generated` calls advance it (an evaluation counts completions); otherwise only
    :meth:`advance` does (ES counts iterations, its members' generations are not its units)."""

    def __init__(self, what: str, total: int, unit: str, *, counts_generation: bool = False, stream=None,
                 clock=time.monotonic):
        self.what, self.total, self.unit = what, max(int(total), 0), unit
        self.counts_generation = counts_generation
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.done, self.tokens = 0, 0
        self.on = enabled() and self.total > 0
        self.bar = None
        self._token = None

    def __enter__(self) -> "Progress":
        self.t0 = self._last_t = self.clock()
        self._last_pct = 0.0
        if self.on and _is_terminal(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=f"esopt {self.what}", unit=f" {self.unit}", leave=False,
                            dynamic_ncols=True, file=self.stream)
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _current.reset(self._token)
        if self.bar is not None:
            self.bar.close()

    def advance(self, n: int = 1, tokens: int = 0) -> None:
        """``n`` more units done, ``tokens`` more generated."""
        self.done = min(self.total, self.done + int(n))
        self.tokens += int(tokens)
        if not self.on:
            return
        now = self.clock()
        elapsed = now - self.t0
        if self.bar is not None:
            self.bar.update(int(n))
            if elapsed > 0:
                self.bar.set_postfix_str(f"{self.tokens / elapsed:,.0f} tok/s", refresh=False)
            return
        pct = 100.0 * self.done / self.total
        if elapsed >= QUIET_S and self.done < self.total and (pct - self._last_pct >= EVERY_PCT
                                                              or now - self._last_t >= EVERY_S):
            self._last_t, self._last_pct = now, pct
            print(self.line(elapsed), file=self.stream, flush=True)

    def line(self, elapsed: float) -> str:
        """The log line (module docstring)."""
        left = time_left(elapsed, self.done, self.total)
        rate = f"{self.tokens / elapsed:,.0f} tok/s, " if elapsed > 0 else ""
        return (f"esopt: {self.what} {100.0 * self.done / self.total:.0f}% ({self.done:,} of {self.total:,} "
                f"{self.unit}), {rate}{duration(elapsed)} so far"
                + (f", about {duration(left)} left" if left is not None else ""))


def generated(sequences: int, tokens: int) -> None:
    """An engine finished ``sequences`` completions with ``tokens`` generated tokens: the current
    progress advances when it counts generation (a no-op otherwise)."""
    p = _current.get()
    if p is not None and p.counts_generation:
        p.advance(sequences, tokens)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
