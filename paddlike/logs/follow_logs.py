"""`--follow`: every log of a job as it grows, each line prefixed `[role rank]`.

Files are polled (the standard library has no inotify; 0.1 s between looks is well
under what a person notices, like `tail -F`). New files (a restart, a slow node) are
picked up, a file that shrinks (a new run with --log_overwrite) is read from its
start, and only whole lines are printed, so two processes' lines never interleave
mid-line. Following stops by itself once every node's summary says its job ended
(after a last read of every file), or when the caller's deadline passes; Ctrl-C is
the caller's to catch.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from paddlike.logformat import LOG_PREFIXES, match_log_name, open_regular
from paddlike.logs.alive import launcher_alive, pid_alive
from paddlike.logs.report import paint, read_tail
from paddlike.summary import RunStatus, read_summary

POLL_INTERVAL = 0.1
# A summary that says "running" while none of its processes lives: the launcher may be
# between restart rounds or about to write the end; give up after this long (at once
# when the launcher is gone too).
ORPHAN_GRACE = 10.0
_COLORS = ("36", "32", "35", "34", "33", "96", "92", "95")


@dataclass
class _Followed:
    path: Path
    label: str
    color: str
    offset: int = 0
    partial: bytes = b""


def _labels(node_dir: Path, multi_node: bool) -> dict[str, str]:
    """log file name -> '[role rank]' from the summary, or from the file name."""
    labels: dict[str, str] = {}
    try:
        summary = read_summary(node_dir)
    except (OSError, ValueError, TypeError):
        summary = None
    if summary is not None:
        for p in summary.processes:
            labels[p.log_file] = f"[{p.role} {p.rank}]"
    try:
        names = os.listdir(node_dir)
    except OSError:
        names = []
    for name in names:
        match = match_log_name(name)
        if match and name not in labels:
            role = LOG_PREFIXES[match.group(1)]
            where = f"{node_dir.name} " if multi_node else ""
            labels[name] = f"[{where}{role} #{match.group(2)}]"
    return labels


def _job_state(node_dirs: list[Path]) -> tuple[bool, bool, bool]:
    """(ended, anything_alive, launchers_gone): ended when every node has a summary that
    is not running; launchers_gone when every node still running is on this host and its
    launcher no longer exists (it can record no end: no need to wait for one)."""
    ended = True
    alive = False
    gone = True
    for d in node_dirs:
        try:
            summary = read_summary(d)
        except (OSError, ValueError, TypeError):
            summary = None
        if summary is None:
            ended = False
            alive = True  # cannot tell: keep following until Ctrl-C
            continue
        if summary.status == RunStatus.RUNNING:
            ended = False
            if any(pid_alive(p.pid, p.start_time) for p in summary.processes):
                alive = True
            here = not summary.hostname or summary.hostname == socket.gethostname()
            if not here or launcher_alive(d):
                gone = False
    return ended, alive, gone and not ended


class Follower:
    """Follows the log files of `node_dirs`, writing prefixed lines to `out`."""

    def __init__(
        self,
        node_dirs: list[Path],
        out: TextIO,
        *,
        color: bool = False,
        tail: int = 10,
        clock: Callable[[], float] = time.monotonic,
        only: Callable[[str], bool] | None = None,
    ) -> None:
        """`only(label)` picks the logs to follow (default: every log of the directories)."""
        self.node_dirs = node_dirs
        self.only = only
        self.out = out
        self.color = color
        self.tail = tail
        self.clock = clock
        self.files: dict[Path, _Followed] = {}
        self._width = 0

    def _discover(self) -> None:
        multi = len(self.node_dirs) > 1
        for d in self.node_dirs:
            for name, label in _labels(d, multi).items():
                path = d / name
                if path in self.files or not path.exists():
                    continue
                if self.only is not None and not self.only(label):
                    continue
                followed = _Followed(path, label, _COLORS[len(self.files) % len(_COLORS)])
                if self.tail >= 0:
                    # Start near the end of what exists: the last `tail` lines; what
                    # was written between the two reads is lost to the tail, not doubled.
                    try:
                        size = path.stat().st_size
                    except OSError:
                        continue
                    lines = read_tail(path, self.tail) if self.tail else []
                    followed.offset = size
                else:
                    lines = []
                self.files[path] = followed
                self._width = max(self._width, len(label))
                for line in lines:
                    self._emit(followed, line)

    def _emit(self, f: _Followed, line: str) -> None:
        label = f.label.ljust(self._width)
        if self.color:
            label = paint(label, f.color, True)
        self.out.write(f"{label} {line}\n")

    def poll(self, *, final: bool = False) -> int:
        """Read what every file gained since the last look; returns lines written."""
        self._discover()
        written = 0
        for f in list(self.files.values()):
            try:
                size = f.path.stat().st_size
                if size < f.offset:  # truncated: a new run with --log_overwrite
                    f.offset, f.partial = 0, b""
                if size == f.offset:
                    data = b""
                else:
                    with open(open_regular(f.path, os.O_RDONLY), "rb") as fh:
                        fh.seek(f.offset)
                        data = fh.read(size - f.offset)
            except OSError:
                continue
            f.offset += len(data)
            data = f.partial + data
            *complete, f.partial = data.split(b"\n")
            if final and f.partial:
                complete.append(f.partial)
                f.partial = b""
            for raw in complete:
                self._emit(f, raw.decode("utf-8", errors="replace").rstrip("\r"))
                written += 1
        if written:
            self.out.flush()
        return written

    def run(self, *, deadline: float | None = None) -> str:
        """Follow until the job ends ("ended"), its processes vanish ("orphaned"), or
        `deadline` (a `clock()` value) passes ("deadline")."""
        orphaned_since: float | None = None
        while True:
            ended, alive, gone = _job_state(self.node_dirs)
            self.poll(final=ended)
            if ended:
                return "ended"
            now = self.clock()
            if gone and not alive:  # nobody left to record the end
                self.poll(final=True)
                return "orphaned"
            if alive:
                orphaned_since = None
            elif orphaned_since is None:
                orphaned_since = now
            elif now - orphaned_since > ORPHAN_GRACE:
                self.poll(final=True)
                return "orphaned"
            if deadline is not None and now >= deadline:
                self.poll(final=True)
                return "deadline"
            time.sleep(POLL_INTERVAL)
