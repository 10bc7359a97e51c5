"""The per-node launcher's end when the session that started it goes away, and the
starter's signals carried over the same stdin.

A command started by ssh without a terminal gets no SIGHUP when the connection drops or
the starting machine's ssh is killed: the only sign is that its stdin reaches end of file
(sshd closes the pipe). `start` sets `contract.STDIN_EOF_ENDS` in each host's command; the
launcher there (`launch.main`) then watches its stdin and, at end of file, sends itself
SIGHUP, which ends the job as a hang-up of its terminal would: workers stopped, the other
nodes told, exit 129. Workers never read this stdin (they get /dev/null).

The starter holds that stdin for the whole job, so it is also the starter's way to signal
each host's launcher. In order, that stdin carries: the host's script (read by /bin/sh,
which then execs the launcher: `remote.REMOTE_SHELL`), GO (`hold`, sent only once every
host said READY, so nothing follows the script before sh has read it all), then lines
``signal N`` (`signal_line`): each makes the launcher send itself signal N, as if `kill
-N` had been typed on that host (Ctrl-C on the login node: SIGINT once; again: SIGINT
again; SIGUSR1: stacks; a --signals_to_handle signal: to the workers). Only the signals
the starter sends are taken (`SENT_SIGNALS` and the launcher's --signals_to_handle):
another line (SIGKILL, SIGSTOP) is ignored with one line on stderr. One ending is one
signal: a hang-up that follows (sshd's, or this watch's at the end of file) never counts
as a second one (`run.signals.escalates`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Collection

from paddlike.contract import STDIN_EOF_ENDS
from paddlike.launch.run.signals import FROM_STARTER

SIGNAL_WORD = b"signal"
# the signals a line may carry: what the starter sends (`start`): the ending ones, the
# stacks' (SIGUSR1, SIGRTMIN+4), SIGUSR2 (Slurm's), and the launcher's --signals_to_handle
# ones (given to `end_on_stdin_eof`); never SIGKILL, SIGSTOP or another one
SENT_SIGNALS = frozenset(
    {
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGRTMIN + 4,
    }
)


def signal_line(signum: int) -> bytes:
    """What the starter writes to a host's launcher's stdin to signal it."""
    return SIGNAL_WORD + b" " + str(int(signum)).encode() + b"\n"


def parse_signal_line(line: bytes, allowed: Collection[int] = SENT_SIGNALS) -> int | None:
    """`signal_line`'s number when it is one of `allowed`; None for anything else
    (ignored: nothing else is sent)."""
    word, _, number = line.strip().partition(b" ")
    if word != SIGNAL_WORD or not number.isdigit() or len(number) > 3:
        return None
    signum = int(number)
    return signum if signum in allowed else None


def end_on_stdin_eof(passed_on: Collection[int] = ()) -> threading.Thread:
    """Start the watch (`passed_on`: this launcher's --signals_to_handle, which a line may
    carry too); the variable is taken out of this process's environment so that the
    workers (and a launcher they might start) do not inherit it."""
    os.environ.pop(STDIN_EOF_ENDS, None)
    allowed = SENT_SIGNALS | frozenset(passed_on)
    watch = threading.Thread(
        target=_hang_up_at_eof, args=(0, allowed), name="stdin-eof", daemon=True
    )
    watch.start()
    return watch


def _hang_up_at_eof(fd: int = 0, allowed: Collection[int] = SENT_SIGNALS) -> None:
    pending = b""
    while True:
        try:
            data = os.read(fd, 4096)
        except InterruptedError:
            continue
        except OSError:  # no stdin at all: nothing to watch
            return
        if not data:
            signal.raise_signal(signal.SIGHUP)
            return
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            signum = parse_signal_line(line, allowed)
            if signum is None and line.startswith(SIGNAL_WORD + b" "):
                _refused(line)
            if signum is not None:
                # raised in this thread: its C-level handler writes the launcher's wake-up
                # pipe before this returns, so the launcher reads the signals in the order
                # they were sent (a signal line, then the end of stdin: never the reverse)
                if signum != signal.SIGTERM:  # that one is a preemption notice, named so
                    FROM_STARTER.add(signum)
                signal.raise_signal(signum)


def _refused(line: bytes) -> None:
    """A signal line the starter never sends: said once each, not raised."""
    text = line.decode(errors="replace")[:40]
    print(f"paddlike.launch: ignored {text!r} on stdin: not a signal the cluster starter "
          "sends", file=sys.stderr, flush=True)  # fmt: skip
