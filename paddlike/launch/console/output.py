"""The launcher's own lines on stderr, one prefix for all of them: ``paddlike.launch:``.

Every message the launcher prints goes through one `Console`: plain lines (`say`),
warnings (`warn`, yellow on a terminal), and blocks such as the failure report
(`block`). A status line that rewrites itself while waiting (`console.progress`) is
erased before any of them, so a terminal never shows two lines run together.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

PREFIX = "paddlike.launch:"


def _nothing() -> None:
    pass


class Console:
    """The launcher's own messages (stderr) and reports."""

    def __init__(
        self,
        err: TextIO | None = None,
        color: bool = False,
        before_output: Callable[[], None] = _nothing,
    ) -> None:
        self.err = sys.stderr if err is None else err
        self.color = color
        # erases a progress line before any other output (set by `ProgressLine`)
        self.before_output = before_output

    def say(self, message: str) -> None:
        self._emit(f"{PREFIX} {message}")

    def warn(self, message: str) -> None:
        label = f"\x1b[33m{PREFIX} warning:\x1b[0m" if self.color else f"{PREFIX} warning:"
        self._emit(f"{label} {message}")

    def error(self, message: str) -> None:
        self._emit(f"{PREFIX} error: {message}")

    def block(self, text: str) -> None:
        self._emit(text)

    def _emit(self, text: str) -> None:
        self.before_output()
        try:
            self.err.write(text + "\n")
            self.err.flush()
        except (BrokenPipeError, ValueError):
            pass  # a console gone away must not end the launcher
