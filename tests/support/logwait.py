"""Waiting for a log to say something, not for time.

A worker may still be writing its log when the launcher has exited (a peer's error is
printed as it dies), and on a loaded machine a process may take seconds to write what a
test expects. `wait_for_text` returns the file's text once it contains the expected
words, or once the writer exited (then the caller's assertion shows what is there), with
a deadline; it wakes on the file's writes (inotify) and the writer's exit (pidfd), so it
never sleeps.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import subprocess
import time
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
# a file written, or a file or directory made (or moved) in a watched directory
_EVENTS = 0x002 | 0x080 | 0x100  # IN_MODIFY | IN_MOVED_TO | IN_CREATE


class _DirWatch:
    """inotify on the directory of a file and on every missing directory above it, as they
    appear: readable when the file may have changed (or the file's directory appeared)."""

    def __init__(self, path: Path) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.path = path
        self.watched: set[Path] = set()
        self.update()

    def update(self) -> None:
        """Watch the deepest existing directory on the way to the file (and drain)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 65536):
                pass
        d = self.path.parent
        while not d.is_dir() and d != d.parent:
            d = d.parent
        if d not in self.watched and _libc.inotify_add_watch(self.fd, os.fsencode(d), _EVENTS) >= 0:
            self.watched.add(d)

    def close(self) -> None:
        os.close(self.fd)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _pidfd(writer: subprocess.Popen | int | None) -> int | None:
    if writer is None:
        return None
    pid = writer if isinstance(writer, int) else writer.pid
    if not isinstance(writer, int) and writer.returncode is not None:
        return -1  # exited and reaped
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -1


def wait_for_text(
    path: str | os.PathLike[str],
    expected: str,
    *,
    timeout: float,
    writer: subprocess.Popen | int | None = None,
) -> str:
    """The text of `path` once it contains `expected`, or once `writer` (a process or a
    pid) has exited; AssertionError naming the file and its last lines at the deadline."""
    path = Path(path)
    deadline = time.monotonic() + timeout
    pidfd = _pidfd(writer)
    notify = _DirWatch(path)  # before the first look: nothing written after it is missed
    try:
        while True:
            text = _read(path)
            if expected in text:
                return text
            if pidfd == -1:
                return _read(path)
            left = deadline - time.monotonic()
            if left <= 0:
                tail = "\n".join(text.splitlines()[-15:])
                raise AssertionError(
                    f"{path} did not contain {expected!r} within {timeout:g} s; it ends:\n{tail}"
                )
            fds = [notify.fd] if pidfd is None else [notify.fd, pidfd]
            ready, _, _ = select.select(fds, [], [], left)
            if pidfd is not None and pidfd in ready:
                os.close(pidfd)
                pidfd = -1  # exited: one last read above
            notify.update()
    finally:
        if pidfd is not None and pidfd >= 0:
            with contextlib.suppress(OSError):
                os.close(pidfd)
        notify.close()
