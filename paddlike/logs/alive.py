"""Is a process the summary says runs still there? And the launcher that holds a directory?

A summary says "running" until its launcher records the end; a launcher killed with
SIGKILL never does, and its workers die with it (the guardian's doing). So the reader
asks the kernel: a pid that no longer exists, that is a zombie waiting to be reaped (its
parent died too), or that was reused by a process started after ours, is gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from paddlike.logformat import read_owner

# A process's start as /proc tells it and as the launcher recorded it differ by the
# clock ticks' rounding and the moment of recording; more than this is another process.
_START_SLACK = 5.0


def _boot_time(proc: Path) -> float | None:
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def pid_alive(pid: int | None, started: float | None = None, proc: Path = Path("/proc")) -> bool:
    """True when `pid` is a live process here (not a zombie) that started no later than
    `started` (Unix time, when known: else a reused pid would pass)."""
    if not pid or pid <= 0:
        return False
    try:
        stat = (proc / str(pid) / "stat").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return _signal_zero(pid)  # no /proc here: existence is all that can be told
    fields = stat[stat.rfind(b")") + 2 :].split()  # the name (field 2) may hold spaces
    if not fields or fields[0] in (b"Z", b"X"):
        return False
    if started is not None:
        boot = _boot_time(proc)
        if boot is not None:
            began = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
            if began > started + _START_SLACK:
                return False
    return True


def _signal_zero(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def launcher_pid(log_dir: str | os.PathLike[str]) -> int | None:
    """The pid in the directory's owner file (None: no owner file, or no pid in it). A
    launcher removes the file when it ends normally, after recording the end."""
    owner = read_owner(log_dir)
    try:
        return int(owner["pid"]) if owner is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def launcher_alive(log_dir: str | os.PathLike[str]) -> bool:
    """Whether the launcher named by the owner file still runs here."""
    owner = read_owner(log_dir)
    pid = launcher_pid(log_dir)
    since = owner.get("since") if owner is not None else None
    return pid_alive(pid, since if isinstance(since, (int, float)) else None)
