"""`--stacks` through the running launcher: SIGRTMIN+4 to it, then wait for its dump.

The launcher's stack trigger is a real-time signal that nothing else sends: SIGUSR1 may
be the workers' (--signals_to_handle, and by default under Slurm, whose `--signal=USR1@90`
warns a job before its time limit), and a launcher passes that on instead of dumping.

The launcher knows what this command can only guess (which processes are its workers
right now, and, on many nodes, how to reach the others), so while one holds the log
directory it takes the stacks itself. Its pid is in the directory's owner file; it is
asked only when it runs on this machine, is a paddlike launcher, and its summary says
the job is running. Otherwise the caller takes the stacks directly.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from paddlike.logformat import OWNER_FILE, read_regular_text
from paddlike.summary import RunStatus, read_summary

STACKS_DIR = "stacks"
# The launcher's stack trigger (paddlike.launch.run.signals.STACKS_SIGNAL: the same number,
# checked by tests/logs/test_ask.py; `logs` never imports `launch`).
STACKS_SIGNAL = signal.SIGRTMIN + 4
STACKS_SIGNAL_NAME = "SIGRTMIN+4"
# The launcher's collection has a 10 s deadline; then it writes the files.
WAIT = 30.0


def launcher_pid(log_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the live paddlike launcher on this machine that holds `log_dir` and
    runs its workers now; None when there is none."""
    try:
        owner = json.loads(read_regular_text(Path(log_dir) / OWNER_FILE))
        pid = int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if owner.get("hostname") not in (None, os.uname().nodename):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"paddlike.launch" not in cmdline:
        return None  # the pid was reused by another program
    summary = read_summary(log_dir)
    if summary is None or summary.status != RunStatus.RUNNING:
        return None
    return pid


def _dumps(log_dir: Path) -> set[str]:
    try:
        return {p.name for p in (log_dir / STACKS_DIR).iterdir()}
    except OSError:
        return set()


def ask_launcher(log_dir: str | os.PathLike[str], pid: int, wait: float = WAIT) -> Path | str:
    """STACKS_SIGNAL to launcher `pid`; the dump directory it wrote, or a one-line reason."""
    root = Path(log_dir)
    before = _dumps(root)
    try:
        os.kill(pid, STACKS_SIGNAL)
    except OSError as exc:
        return f"could not signal launcher pid {pid}: {exc}"
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for name in sorted(_dumps(root) - before):
            if (root / STACKS_DIR / name / "stacks.json").exists():  # written last
                return root / STACKS_DIR / name
        time.sleep(0.05)  # a command-line wait for another process's files
    return (
        f"launcher pid {pid} wrote no stacks within {wait:g} s of {STACKS_SIGNAL_NAME} "
        "(is it between rounds?); taking them directly"
    )
