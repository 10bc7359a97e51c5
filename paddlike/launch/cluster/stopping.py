"""SIGINT, SIGTERM or SIGHUP while the starter prepares (`ssh -G`, pdsh's check): the
start-up ends, and every ssh it started is ended with it.

The signal is raised as `Stopped` in the main thread, but never while a child is being
started: raised there, it would leave the child running with no `Popen` to end it (its
exec done, the parent not yet back from `Popen`, as on a loaded machine). Inside
`spawning()` it is held and raised once the block has kept the child.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

from paddlike.launch.run.signals import kept_ignored

ENDING_EARLY = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """One of `ENDING_EARLY` arrived before the sessions started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Hold:
    depth = 0
    pending: int | None = None


def _stop(signum: int, _frame: FrameType | None) -> None:
    ignore_signals()  # a second one cuts no clean-up short
    if _Hold.depth:
        _Hold.pending = signum
        return
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """`Stopped` on SIGINT, SIGTERM or SIGHUP within; each one's handler as it was after
    (also when ignored meanwhile: none of the clean-up is cut short)."""
    previous = {s: signal.signal(s, _stop) for s in kept_ignored(ENDING_EARLY)}  # nohup
    _Hold.pending = None
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def ignore_signals() -> None:
    """From here on (the clean-up), SIGINT, SIGTERM and SIGHUP are ignored."""
    for s in ENDING_EARLY:
        signal.signal(s, signal.SIG_IGN)


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Start a child (and keep its `Popen`) within: a signal meanwhile is raised after."""
    _Hold.depth += 1
    try:
        yield
    finally:
        _Hold.depth -= 1
        if not _Hold.depth and _Hold.pending is not None:
            signum, _Hold.pending = _Hold.pending, None
            raise Stopped(signum)
