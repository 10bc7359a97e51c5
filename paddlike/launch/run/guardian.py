"""A guardian process that ends the workers' process groups if the launcher dies.

PR_SET_PDEATHSIG reaches only a worker itself: the processes a worker starts
(a data loader, the python under `--no_python bash train.sh`) are re-parented to init
when the launcher is SIGKILLed, and keep their GPUs. The guardian is a forked child
of the launcher that blocks reading a pipe whose only writer is the launcher. The
launcher tells it each worker's process-group id as it spawns and reaps; when the
pipe reaches end-of-file without a goodbye, the launcher is gone, and the guardian
SIGKILLs every group still registered, grandchildren included.

During a many-node round the launcher also leaves it a death notice (`note`,
`peers.notice`): what to write to node 0's store if the launcher dies. The guardian
writes it first, then ends the workers, so the other nodes learn that this node was
lost before their workers' collectives fail for it (a consequence, not the cause).

Forked, not exec'd: ~1 ms instead of a new interpreter's ~20 ms. Fork it before the
launcher starts threads; the child only reads, parses and kills.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

_GOODBYE = b"q\n"


class Guardian:
    """The launcher's end of the pipe. `add`/`remove` process groups; `close` at the end."""

    def __init__(self, fd: int, pid: int) -> None:
        self._fd = fd
        self.pid = pid

    @classmethod
    def start(cls, deliver: Callable[[bytes], object] | None = None) -> Guardian | None:
        """Fork the guardian; None where fork is not possible (the launcher runs without).
        `deliver(notice)`: how it delivers a death notice (`peers.notice.deliver_notice`)."""
        try:
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            pid = os.fork()
        except OSError:
            return None
        if pid == 0:  # the guardian
            try:
                os.close(write_end)
                _guard(read_end, deliver)
            finally:
                os._exit(0)
        os.close(read_end)
        return cls(write_end, pid)

    def add(self, pgid: int) -> None:
        self._send(f"+{pgid}\n".encode())

    def remove(self, pgid: int) -> None:
        self._send(f"-{pgid}\n".encode())

    def note(self, notice: bytes | None) -> None:
        """The round's death notice (one line of JSON, `peers.notice`); None: none now."""
        self._send(b"n" + (notice or b"") + b"\n")

    def remove_dir(self, path: str) -> None:
        """A directory of the launcher's (`run.warm`'s sockets) the guardian removes, its
        files one level deep, if the launcher dies."""
        self._send(b"d" + os.fsencode(path) + b"\n")

    def close(self) -> None:
        """Dismiss the guardian: the launcher ends normally and has reaped its workers."""
        if self._fd < 0:
            return
        self._send(_GOODBYE)
        os.close(self._fd)
        self._fd = -1
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)  # exits at once on the goodbye

    def _send(self, line: bytes) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):  # a dead guardian must not break the launch
                os.write(self._fd, line)


def _guard(read_end: int, deliver: Callable[[bytes], object] | None) -> None:
    """The guardian's whole life: follow the registrations until the pipe closes."""
    # Ctrl-C in the terminal reaches the launcher's process group, the guardian too:
    # the launcher handles it; the guardian waits for the pipe.
    # So do a scheduler's signals to the group (Slurm's `scancel --signal=USR1`), which
    # would end it by default.
    ignored = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    for sig in (*ignored, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    # Hold nothing of the launcher's: not its log-directory lock, not its sockets.
    os.closerange(3, read_end)
    os.closerange(read_end + 1, 65536)
    groups: set[int] = set()
    dirs: list[bytes] = []
    notice = b""
    pending = b""
    while True:
        try:
            chunk = os.read(read_end, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line == _GOODBYE.strip():
                return
            if line[:1] == b"n":
                notice = line[1:]
                if notice and deliver is not None:
                    deliver(b"")  # a dry run: its imports now, not when every ms counts
                continue
            if line[:1] == b"d":
                dirs.append(line[1:])
                continue
            if line[:1] in (b"+", b"-") and line[1:].isdigit():
                pgid = int(line[1:])
                if line[:1] == b"+":
                    groups.add(pgid)
                else:
                    groups.discard(pgid)
    # end-of-file without a goodbye: the launcher died
    if notice and deliver is not None:  # first the others learn it, then the workers go
        deliver(notice)
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    for path in dirs:
        with contextlib.suppress(OSError):
            for name in os.listdir(path):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(path, name))
            os.rmdir(path)
