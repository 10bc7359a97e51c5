"""The console echo: the chosen workers' log files echoed to the launcher's stdout as they
grow (which workers: --console, or torchrun's --tee/--redirects/--local_ranks_filter, as
`context/options/console.py` decides).

The workers' output is the job's output, so it goes to stdout (`launch ... | grep loss`
works) and the launcher's own lines go to stderr (`console.output`). The echo is written
on a thread of its own, so a console that stops reading (`| less`) never stalls the
launcher's teardown or its signals.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from paddlike.launch.console.output import PREFIX
from paddlike.launch.plan.plan import ProcessSpec, Role
from paddlike.logformat import open_regular

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

    from paddlike.launch.context.options.record import TeeSelection


def tee_targets(selection: TeeSelection, specs: Sequence[ProcessSpec]) -> list[ProcessSpec]:
    """The trainers whose local index is selected (servers are never echoed)."""
    trainers = [s for s in specs if s.role is Role.TRAINER]
    if selection == "all":
        return trainers
    return [s for s in trainers if s.local_index in selection]


class _Followed:
    __slots__ = ("offset", "partial", "path", "prefix")

    def __init__(self, path: Path, offset: int, prefix: bytes) -> None:
        self.path = path
        self.offset = offset
        self.prefix = prefix
        self.partial = b""


class _ConsoleWriter:
    """Writes echoed output to the console from a thread of its own.

    The supervisor's event loop must never block on the console: a paused terminal or
    `launch ... | less` that stops reading would otherwise stall failure handling and
    signals. Pending output is bounded; past the bound it is dropped (the log files
    keep everything) and the console is told how much once the job ends.
    """

    LIMIT = 8 << 20  # bytes waiting for the console before echo is dropped

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._pending: list[bytes] = []
        self._size = 0
        self.dropped = 0
        self._cond = threading.Condition()
        self._idle = True
        self._thread: threading.Thread | None = None

    def write(self, data: bytes) -> None:
        with self._cond:
            if self._size + len(data) > self.LIMIT:
                self.dropped += len(data)
                return
            self._pending.append(data)
            self._size += len(data)
            self._idle = False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tee", daemon=True)
                self._thread.start()
            self._cond.notify()

    def drain(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the console to take what is pending; True if it did."""
        with self._cond:
            return self._cond.wait_for(lambda: self._idle, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending)
                data, self._pending, self._size = b"".join(self._pending), [], 0
            _write_out(self.out, data)
            with self._cond:
                if not self._pending:
                    self._idle = True
                    self._cond.notify_all()


def _write_out(out: TextIO, data: bytes) -> None:
    buffer = getattr(out, "buffer", None)
    try:
        if buffer is not None:
            out.flush()
            buffer.write(data)
            buffer.flush()
        else:
            out.write(data.decode("utf-8", errors="replace"))
            out.flush()
    except (BrokenPipeError, ValueError, OSError):
        pass  # the console went away (`| head`); the job and its logs go on


class TeeEcho:
    """Echo log files to `out` as they grow, whole lines only, `[rank N] ` prefixed when
    more than one worker is echoed. Call `pump()` when the files may have grown and
    `flush()` once the writers are gone (it also prints an unterminated last line).
    Writing happens on a thread of its own (`_ConsoleWriter`): never blocks the caller."""

    # How long the end of a job waits for a slow console to take the last output.
    FINAL_DRAIN = 2.0

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._files: list[_Followed] = []
        self._writer: _ConsoleWriter | None = None

    def follow(self, spec: ProcessSpec, path: Path, offset: int) -> None:
        self._files.append(_Followed(path, offset, f"[rank {spec.rank}] ".encode()))

    def finish_setup(
        self, selection: TeeSelection | None = None, *, among_hosts: bool = False
    ) -> None:
        """Drop the prefixes when only one worker's output is shown (like Paddle's console),
        unless this host was started by the one-command cluster start (`among_hosts`) and
        the selection is for many (--console all): its lines meet every other host's on the
        login node's console, and read alike whatever each host's worker count."""
        many = selection is not None and (selection == "all" or len(selection) > 1)
        if among_hosts and many:
            return
        ranks = {f.prefix for f in self._files}
        if len(ranks) <= 1:
            for f in self._files:
                f.prefix = b""

    @property
    def paths(self) -> list[Path]:
        return [f.path for f in self._files]

    def __bool__(self) -> bool:
        return bool(self._files)

    def pump(self) -> int:
        """Echo what the files gained since the last call; the number of bytes read."""
        chunks: list[bytes] = []
        got = 0
        for f in self._files:
            data = _read_from(f.path, f.offset)
            if not data:
                continue
            got += len(data)
            f.offset += len(data)
            data = f.partial + data
            cut = data.rfind(b"\n") + 1
            f.partial = data[cut:]
            if cut:
                chunks.append(_prefixed(data[:cut], f.prefix))
        self._write(chunks)
        return got

    def flush(self) -> None:
        while self.pump():
            pass
        chunks = []
        for f in self._files:
            if f.partial:
                chunks.append(_prefixed(f.partial + b"\n", f.prefix))
                f.partial = b""
        self._write(chunks)
        writer = self._writer
        if writer is None:
            return
        writer.drain(self.FINAL_DRAIN)
        if writer.dropped:
            print(
                f"{PREFIX} the console did not keep up: {writer.dropped} bytes of worker "
                "output were not echoed (the log files have everything)",
                file=sys.stderr,
                flush=True,
            )

    def _write(self, chunks: list[bytes]) -> None:
        if not chunks:
            return
        if self._writer is None:
            self._writer = _ConsoleWriter(self.out)
        self._writer.write(b"".join(chunks))


def _read_from(path: Path, offset: int, limit: int = 1 << 20) -> bytes:
    """Up to `limit` bytes of the log from `offset`; nothing where it is not a regular file
    (another user's FIFO put in its place would block the console's reader)."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.pread(fd, limit, offset)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _prefixed(data: bytes, prefix: bytes) -> bytes:
    if not prefix:
        return data
    lines = data.split(b"\n")
    body = b"\n".join(prefix + line for line in lines[:-1])
    return body + b"\n"
