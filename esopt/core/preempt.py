"""Save on the scheduler's warning, then requeue: a Slurm job near its time limit (or preempted)
gets ``SIGUSR2`` ``signal_delay_s`` seconds ahead (``hydra.launcher.signal_delay_s``).

submitit binds that signal to a handler that checkpoints the job's callable (its resubmission),
requeues the job and exits at once, wherever the run was: a run then resumes from its last
scheduled checkpoint and redoes the iterations since. :func:`install` (called by the Slurm
launcher's task before its runs) binds the signal to a flag instead; a training loop asks
:func:`requested` at the end of each iteration or step, writes its checkpoint there and calls
:func:`release`, which hands the signal to submitit's handler (requeue and exit). A run that
reaches no such point within ``grace_s`` (an evaluation, a run that trains nothing) is handed
over then, as before.
"""

from __future__ import annotations

import os
import signal
import threading

SIGNAL = getattr(signal, "SIGUSR2", None)
_state: dict = {"handler": None, "event": threading.Event(), "grace_s": 0.0, "timer": None, "pass": False}


def install(grace_s: float) -> bool:
    """Where submitit has bound ``SIGUSR2`` (a submitit job), bind it to a flag; the signal goes
    to submitit's handler when the run calls :func:`release`, or ``grace_s`` seconds after it
    came. Returns whether it was bound. Idempotent; main thread only."""
    if SIGNAL is None or threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(SIGNAL)
    if current is _flag:
        return True
    if not callable(current):  # default / ignored: not a submitit job
        return False
    _state.update(handler=current, grace_s=max(1.0, float(grace_s)), timer=None)
    _state["pass"] = False
    _state["event"].clear()
    signal.signal(SIGNAL, _flag)
    return True


def _flag(signum, frame) -> None:
    if _state["pass"]:  # the grace is over: submitit's handler, here in the main thread
        _state["handler"](signum, frame)
        return
    if _state["event"].is_set():
        return
    _state["event"].set()
    timer = threading.Timer(_state["grace_s"], _hand_over)
    timer.daemon = True
    _state["timer"] = timer
    timer.start()


def _hand_over() -> None:
    """Signal this process again, now for submitit's handler (a signal handler runs in the main
    thread, where it can exit)."""
    _state["pass"] = True
    os.kill(os.getpid(), SIGNAL)


def requested() -> bool:
    """Whether the scheduler's warning has come (the run should save now and :func:`release`)."""
    return _state["event"].is_set()


def release() -> None:
    """After the run's state is saved: submitit's handler checkpoints the job, requeues it and
    exits this process (on a rank other than 0 it only returns)."""
    timer = _state["timer"]
    if timer is not None:
        timer.cancel()
    handler = _state["handler"]
    _state["event"].clear()  # handled (where the handler returns: a rank other than 0)
    if handler is not None and not _state["pass"]:
        handler(SIGNAL, None)
