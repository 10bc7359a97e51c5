"""Waiting for files to say something, not for time.

A worker may still be writing its log when a test looks (a peer's error is printed as
it dies), and on a loaded machine a process may take seconds to write what a test
expects. `wait_until` returns once a condition on files holds, or once the process
writing them exited (then the caller's assertion shows what is there), with a deadline;
it wakes on writes under a directory (inotify, which sees writes from processes in other
network namespaces too) and on the writer's exit (pidfd), so it never sleeps.
`wait_for_text` is the common case: a log file contains the expected words.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
# a file written or closed, or a file or directory made (or moved) in a watched directory
_EVENTS = 0x002 | 0x008 | 0x080 | 0x100  # IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE

Writer = subprocess.Popen | int | None


class _TreeWatch:
    """inotify on a directory and every directory below it (those made later included,
    once `update` sees them); `root` may not exist yet: its nearest existing ancestor is
    watched until it does."""

    def __init__(self, root: Path) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.root = root
        self.watched: set[Path] = set()
        self.update()

    def _add(self, d: Path) -> None:
        if d not in self.watched and _libc.inotify_add_watch(self.fd, os.fsencode(d), _EVENTS) >= 0:
            self.watched.add(d)

    def update(self) -> None:
        """Drain the events, then watch what exists now."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 65536):
                pass
        d = self.root
        while not d.is_dir() and d != d.parent:
            d = d.parent
        self._add(d)
        if d == self.root:  # os.walk, not rglob: a directory made and removed meanwhile
            for top, _, _ in os.walk(self.root):  # (etcd's wal.tmp) is passed over
                self._add(Path(top))

    def close(self) -> None:
        os.close(self.fd)


def _pidfd(writer: Writer) -> int | None:
    """A pidfd of `writer`; -1 when it has exited already; None without a writer."""
    if writer is None:
        return None
    if isinstance(writer, subprocess.Popen):
        if writer.poll() is not None:
            return -1
        writer = writer.pid
    try:
        return os.pidfd_open(writer)
    except ProcessLookupError:
        return -1


def wait_until(
    ready: Callable[[], object],
    *,
    under: str | os.PathLike[str],
    timeout: float,
    what: str,
    writer: Writer = None,
) -> bool:
    """Wait until `ready()` is true (True) or `writer` (a process or a pid) has exited
    (False, after one last look); AssertionError saying `what` at the deadline. `ready`
    reads files under the directory `under`, which need not exist yet."""
    deadline = time.monotonic() + timeout
    pidfd = _pidfd(writer)
    tree = _TreeWatch(Path(under))  # before the first look: no write after it is missed
    try:
        while True:
            if ready():
                return True
            if pidfd == -1:
                return bool(ready())
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            fds = [tree.fd] if pidfd is None else [tree.fd, pidfd]
            ready_fds, _, _ = select.select(fds, [], [], left)
            if pidfd is not None and pidfd in ready_fds:
                os.close(pidfd)
                pidfd = -1  # exited: one last look above
            tree.update()
    finally:
        if pidfd is not None and pidfd >= 0:
            os.close(pidfd)
        tree.close()


def read_text(path: str | os.PathLike[str]) -> str:
    """The file's text, "" while it does not exist."""
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def wait_for_text(
    path: str | os.PathLike[str], expected: str, *, timeout: float, writer: Writer = None
) -> str:
    """The text of `path` once it contains `expected`, or once `writer` has exited;
    AssertionError naming the file and its last lines at the deadline."""
    path = Path(path)
    try:
        wait_until(
            lambda: expected in read_text(path),
            under=path.parent,
            timeout=timeout,
            what=f"{expected!r} in {path}",
            writer=writer,
        )
    except AssertionError as exc:
        tail = "\n".join(read_text(path).splitlines()[-15:])
        raise AssertionError(f"{exc}; it ends:\n{tail}") from None
    return read_text(path)


def wait_exited(pids: list[int], *, timeout: float) -> list[int]:
    """Wait until every process in `pids` has exited (a zombie counts: its pidfd is
    readable then), at most `timeout` s; the pids still running at the deadline."""
    fds: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            fds[os.pidfd_open(pid)] = pid
    deadline = time.monotonic() + timeout
    try:
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done, _, _ = select.select(list(fds), [], [], left)
            for fd in done:
                del fds[fd]
                os.close(fd)
        return sorted(fds.values())
    finally:
        for fd in fds:
            os.close(fd)


def read_until(proc: subprocess.Popen[str], text: str) -> str:
    """`proc`'s output up to the first line containing `text` (within the test's own
    timeout: a launcher that prints it does so within seconds)."""
    assert proc.stdout is not None
    seen = ""
    for line in proc.stdout:
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never printed; output: {seen}")
