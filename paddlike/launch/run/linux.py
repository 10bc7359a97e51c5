"""The few Linux calls the supervisor needs that `os` lacks: prctl and inotify (via ctypes),
and whether a process is stopped (/proc).

Why these: PR_SET_PDEATHSIG makes the kernel kill a worker when the launcher dies,
even by SIGKILL, which no handler in the launcher could do; inotify tells the
console that a `--tee` log grew, so echoing it needs no polling loop.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_IN_MODIFY = 0x00000002
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def parent_death_preexec(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A `preexec_fn` that has the kernel send `sig` to the child when the launcher dies.

    The signal fires when the *thread* that forked the child exits, so spawn from
    the main thread. If the launcher died between fork and prctl the child has
    already been re-parented and would never get the signal: it kills itself.
    The function only calls into already-resolved ctypes objects (no imports, no
    allocation-heavy work), which is what is safe between fork and exec.
    """
    launcher = os.getpid()

    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != launcher:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class Inotify:
    """An inotify descriptor that becomes readable when any watched file is modified.

    The caller drains it with `drain()` and then reads its files; which file
    changed does not matter (reading an unchanged file returns nothing).
    """

    def __init__(self) -> None:
        fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd
        self._watches: list[int] = []

    def watch(self, path: str | os.PathLike[str]) -> None:
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_MODIFY)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch {os.fspath(path)}: {os.strerror(err)}")
        self._watches.append(wd)

    def unwatch_all(self) -> None:
        """Forget every watch, keeping the descriptor for the next round (closing one
        waits for the kernel's RCU grace period: 5-15 ms here, per close)."""
        for wd in self._watches:
            _libc.inotify_rm_watch(self.fd, wd)
        self._watches.clear()
        self.drain()

    def drain(self) -> None:
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def is_stopped(pid: int) -> bool:
    """The kernel says `pid` is stopped (state T: SIGSTOP, SIGTSTP; t: held by a debugger):
    it cannot act on SIGTERM until it is continued."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] in (b"T", b"t")
    except (OSError, ValueError):
        return False
