"""One status line while a many-node launcher waits for the others.

Every node shows what it waits for and for how long: node 0 the nodes missing at the
rendezvous, the others node 0's store until it is up. Callers report about once a
second; what reaches the console depends on where it goes:

| stderr is        | shown                                                              |
| ---------------- | ------------------------------------------------------------------ |
| a terminal       | one line rewritten in place (``\\r``), erased before other output |
| a file or a pipe | a line when what is awaited changes, else one every `every` s      |
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable

from paddlike.launch.console.output import PREFIX, Console

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

EVERY = 5.0  # seconds between repeated lines when the console is not a terminal


class ProgressLine:
    """`show(what, elapsed, timeout)` -> "paddlike.launch: <what> (3 s of 300 s)"."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            try:
                tty = self.stream.isatty()
            except (AttributeError, ValueError):
                tty = False
        self.tty = tty
        self.every = every
        self.clock = clock
        self._last_what: str | None = None
        self._last_at = 0.0
        self._drawn = False  # a line is on the terminal, not yet ended

    def show(self, what: str, elapsed: float, timeout: float) -> None:
        text = f"{PREFIX} {what} ({elapsed:.0f} s of {timeout:g} s)"
        now = self.clock()
        try:
            if self.tty:
                self.stream.write(f"\r{text}\x1b[K")
                self._drawn = True
            elif what != self._last_what or now - self._last_at >= self.every:
                self.stream.write(text + "\n")
            else:
                return
            self.stream.flush()
        except (OSError, ValueError):
            return  # a console gone away must not end the launcher
        self._last_what, self._last_at = what, now

    def clear(self) -> None:
        """Erase the line on a terminal, so that the next output starts on a clean line."""
        if not self._drawn:
            return
        self._drawn = False
        with contextlib.suppress(OSError, ValueError):
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def attach(self, console: Console) -> None:
        """Erase this line before anything else the console prints."""
        console.before_output = self.clear
