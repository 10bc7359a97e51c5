"""SIGINT, SIGTERM and SIGHUP to the launcher: 130, 143 or 129, and the other nodes told.
SIGUSR1: write the stacks of the workers (while they run; ignored anywhere else).

Two regimes, never both at once, both installed in the main thread only:

- while workers run, `signals_to_pipe` routes the signals into a pipe that the
  supervisor's event loop watches, and the supervisor tears the round down;
- anywhere else (opening the log directory, connecting to node 0's store, the
  rendezvous, waiting for the other nodes to finish), `signals_raise` makes them raise
  `LauncherSignal`, which the job pipeline turns into one line and an exit code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

LAUNCHER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# SIGUSR1: take the stacks of the job's workers and write them; the job keeps running.
DUMP_SIGNAL = signal.SIGUSR1


class LauncherSignal(BaseException):
    """SIGINT/SIGTERM/SIGHUP arrived outside a supervised round. A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _raise_signal(signum: int, frame: object) -> None:
    raise LauncherSignal(signum)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Make the launcher signals raise `LauncherSignal` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, _raise_signal) for sig in LAUNCHER_SIGNALS}
    old[DUMP_SIGNAL] = signal.signal(DUMP_SIGNAL, _note_signal)  # no workers: nothing to dump
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_to_pipe() -> Iterator[int | None]:
    """Route the launcher signals to a pipe an event loop watches; restore on exit.

    Yields the read end (each byte read is a signal number), or None off the main thread
    (where Python cannot install handlers; the caller then owns signal handling).
    """
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_handlers = {}
    old_wakeup = -1
    try:
        old_wakeup = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        for sig in (*LAUNCHER_SIGNALS, DUMP_SIGNAL):
            old_handlers[sig] = signal.signal(sig, _note_signal)
        yield rfd
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_wakeup)
        os.close(rfd)
        os.close(wfd)


def _note_signal(signum: int, frame: object) -> None:
    """The C-level handler already wrote `signum` to the wake-up pipe (if one is set);
    nothing else to do."""


def read_signals(fd: int) -> list[int]:
    """The launcher signals (and SIGUSR1) waiting in the pipe of `signals_to_pipe`."""
    try:
        data = os.read(fd, 512)
    except BlockingIOError:
        return []
    wanted = {int(s) for s in (*LAUNCHER_SIGNALS, DUMP_SIGNAL)}
    return [s for s in data if s in wanted]
