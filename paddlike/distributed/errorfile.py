"""The error file of a rank that leaves by an uncaught exception, written before the
runtime closes its connections (sys.excepthook runs before atexit), or by sys.exit with
a non-zero status (`paddlike.distributed.leaving`), written before it closes them.

torchelastic's format (TORCHELASTIC_ERROR_FILE, which the launcher sets next to each
worker's log), so the failure report shows the exception; plus paddlike's own word,
``"paddlike": {"peer_exited": R}``, when the exception is a consequence of peer rank R's
exit (a PeerExitedError): such a rank fails *after* the rank that raised closed its
sockets, often before that rank's process is gone, and its launcher must not make it the
job's cause (`launch.run.consequence`).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from types import TracebackType

from paddlike.contract import ERROR_FILE, PEER_EXITED
from paddlike.logformat import write_atomically

from .collective.errors import PeerExitedError


def peer_exited(exc: BaseException | None) -> int | None:
    """The peer rank whose exit `exc` (or an exception it was raised from) reports; -1 when
    the rank is not known; None when `exc` is no consequence of a peer's exit."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, PeerExitedError):
            return exc.peer if exc.peer is not None else -1
        exc = exc.__cause__ or exc.__context__
    return None


def write(
    kind: type[BaseException], exc: BaseException, tb: TracebackType | None, since: float
) -> None:
    """Write the error file, unless one newer than `since` (this rank's start: torch's
    `@record` wrote it already) is there; a stale one from an earlier run is replaced."""
    import traceback

    message = "".join(traceback.format_exception_only(kind, exc)).strip()
    _write(message, "".join(traceback.format_exception(kind, exc, tb)), peer_exited(exc), since)


def write_exit(code: int, where: str, since: float) -> None:
    """The error file of a rank that left by sys.exit(code), code non-zero: its own exit,
    the job's cause (`where`: the stack of the sys.exit call)."""
    message = f"SystemExit: {code} (sys.exit({code}) ended this rank)"
    callstack = f"Traceback (most recent call last):\n{where}{message}\n" if where else ""
    _write(message, callstack, None, since)


def _write(message: str, callstack: str, peer: int | None, since: float) -> None:
    path = os.environ.get(ERROR_FILE)
    if not path:
        return
    try:
        if os.stat(path).st_mtime >= since:
            return
    except OSError:
        pass
    body: dict[str, object] = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": callstack, "timestamp": str(int(time.time()))},
        }
    }
    if peer is not None:
        body["paddlike"] = {PEER_EXITED: peer}
    # the log directory may be shared: a new temporary file, never one through a link
    with contextlib.suppress(OSError):
        write_atomically(Path(path), json.dumps(body))
