"""What both commands (`paddlike.launch`, `paddlike.logs`) do alike as command-line tools:
say the name the user typed, and end quietly when the reader of stdout goes away. Small
and free of imports beyond os and sys: the launcher's start-up time is a feature."""

from __future__ import annotations

import contextlib
import os
import sys

# A command killed by SIGPIPE exits 128+13; so does one that stops writing to a closed pipe.
EXIT_PIPE_CLOSED = 141


def command_name(argv0: str, module: str) -> str:
    """The console script's name (`paddlike-logs`) when that is what ran, else
    `python -m <module>` (argv[0] is then the module's file)."""
    base = os.path.basename(argv0)
    if not base or base == "-c" or base.endswith(".py"):
        return f"python -m {module}"
    return base


def stdout_closed() -> int:
    """stdout's reader went away (`... | head -1`): point stdout at /dev/null so that no
    later write or the interpreter's last flush raises again, and exit as `git log | head`
    does, without a traceback."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_PIPE_CLOSED
