"""How this rank leaves: the status a script gave `sys.exit` (or `exit`, `quit`).

The runtime's exit barrier (`parallel._destroy_at_exit`) is for a rank that finished: it
waits for the other ranks so that rank 0's store outlives their use of it. A rank that
calls `sys.exit(7)` has not finished; its peers may be in a collective it never enters.
Waiting for them makes it look like the one that is stuck, and its barrier's messages
reach peers that expect other data. Such a rank must leave at once, like one that raised.

Python does not tell an atexit callback the exit status. So `install()` lets `sys.exit`
(and the `exit` / `quit` builtins) raise a subclass of SystemExit that says, when the
interpreter drops it, whether it ended the program: the interpreter drops an uncaught
SystemExit after every Python frame has returned, so no Python frame is below its
`__del__`; a SystemExit that the script caught is dropped inside the script's frames.
A bare `raise SystemExit(7)` is not seen (the exit barrier then still tells the peers
that this rank left), nor is `os._exit` (no atexit at all: the peers see it go).
"""

from __future__ import annotations

import builtins
import contextlib
import sys
import traceback
from typing import Any

__all__ = ["ExitRequest", "install", "left_with"]


class _Left:
    """The exit that ended the program: its status and where sys.exit was called."""

    code: int | None = None
    where: str = ""


_left = _Left()


def _status(code: Any) -> int:
    """The process's exit status for SystemExit(code), as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):  # True and False too: 1 and 0
        return int(code)
    return 1  # a message: printed to stderr, status 1


class ExitRequest(SystemExit):
    """SystemExit raised by `sys.exit` once the runtime is set up; the same to a script
    (`except SystemExit`, `.code`), and it notes the status when it ends the program."""

    def __del__(self) -> None:
        try:
            if sys._getframe().f_back is not None:
                return  # caught and dropped inside the script: the program goes on
            _left.code = _status(self.code)
            _left.where = getattr(self, "where", "")
        except Exception:  # never raise from a finalizer
            pass


def _request(code: Any) -> ExitRequest:
    """ExitRequest(code), with the stack of the call that asked for it (an exit is rare:
    the cost does not matter; the interpreter keeps no traceback of an uncaught SystemExit)."""
    request = ExitRequest(code)
    request.where = "".join(traceback.format_stack(sys._getframe(2)))
    return request


def _exit(status: Any = None) -> None:
    """Exit the interpreter by raising SystemExit(status) (sys.exit's contract)."""
    raise _request(status)


class _Quitter:
    """`exit` / `quit` of the interactive builtins, raising ExitRequest."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"

    def __call__(self, code: Any = None) -> None:
        with contextlib.suppress(Exception):
            sys.stdin.close()  # as site's Quitter does
        raise _request(code)


def install() -> None:
    """Route sys.exit, exit and quit through ExitRequest (once; idempotent)."""
    if sys.exit is not _exit:
        sys.exit = _exit
    for name in ("exit", "quit"):
        if type(getattr(builtins, name, None)).__name__ == "Quitter":
            setattr(builtins, name, _Quitter(name))


def left_with() -> tuple[int, str] | None:
    """(status, the traceback of the sys.exit call) when sys.exit ended the program; None
    while it runs, or when it ends otherwise (its end, an uncaught exception)."""
    if _left.code is None:
        return None
    return _left.code, _left.where
