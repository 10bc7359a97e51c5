"""The per-node launcher's end when the session that started it goes away.

A command started by ssh without a terminal gets no SIGHUP when the connection drops or
the starting machine's ssh is killed: the only sign is that its stdin reaches end of file
(sshd closes the pipe). `start` sets `STDIN_EOF_ENDS` in each host's command; the
launcher there (`launch.main`) then watches its stdin and, at end of file, sends itself
SIGHUP, which ends the job as a hang-up of its terminal would: workers stopped, the other
nodes told, exit 129. Workers never read this stdin (they get /dev/null).
"""

from __future__ import annotations

import os
import signal
import threading

STDIN_EOF_ENDS = "PADDLIKE_STDIN_EOF_ENDS"  # "1": end the job when stdin closes


def end_on_stdin_eof() -> threading.Thread:
    """Start the watch; the variable is taken out of this process's environment so that
    the workers (and a launcher they might start) do not inherit it."""
    os.environ.pop(STDIN_EOF_ENDS, None)
    watch = threading.Thread(target=_hang_up_at_eof, name="stdin-eof", daemon=True)
    watch.start()
    return watch


def _hang_up_at_eof(fd: int = 0) -> None:
    while True:
        try:
            data = os.read(fd, 4096)
        except InterruptedError:
            continue
        except OSError:  # no stdin at all: nothing to watch
            return
        if not data:
            os.kill(os.getpid(), signal.SIGHUP)
            return
