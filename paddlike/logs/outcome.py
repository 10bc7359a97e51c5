"""The job's outcome as `python -m paddlike.logs`'s exit status, so that a CI script can
use the reader as a check; and whether a running job looks hung.

| the job                                              | exit status                 |
| ---------------------------------------------------- | --------------------------- |
| succeeded on every node                              | 0                           |
| failed, or was stopped (Ctrl-C, SIGTERM)             | the launcher's exit code    |
| a launcher died without recording the end (SIGKILL)  | 1                           |
| still running                                        | 75 (EX_TEMPFAIL: look later) |
| no summary.json, no error in the logs                | 3                           |
| not a log directory (missing, empty, unreadable)     | 2 (a bad option too)        |

The launcher's exit code is the failed process's own, 128+N for signal N (130 after
Ctrl-C), 124 for --on_hang abort; 1 where none is known. No summary.json: written by
Paddle's own launchers, or by a launcher still starting.
A job's exit code can itself be 2, 3 or 75: the text (or `--json`'s "status") tells.
"""

from __future__ import annotations

import socket
import time

from paddlike.logs.reader import JobView, NodeView
from paddlike.summary import ProcessStatus, RunStatus

EXIT_NOT_LOGS = 2
EXIT_UNKNOWN = 3
EXIT_RUNNING = 75  # sysexits.h EX_TEMPFAIL: "try again later"
# A running job whose every rank showed no output and no progress for this long is hung.
HUNG_AFTER = 120.0


def exit_code(job: JobView) -> int:
    """The exit status that says how the job ended (see the module's table)."""
    status = job.status
    if status == RunStatus.SUCCEEDED:
        return 0
    if status == RunStatus.RUNNING:
        return EXIT_RUNNING
    if status == RunStatus.UNKNOWN:
        return EXIT_UNKNOWN
    if status in (RunStatus.FAILED, RunStatus.INTERRUPTED):
        codes = [n.summary.exit_code for n in _cause_first(job) if n.summary is not None]
        return next((c for c in codes if c), 1)
    return 1  # GONE: no outcome was recorded, and the job did not finish


def _cause_first(job: JobView) -> list[NodeView]:
    """The node holding the root cause first: its launcher's code is the job's."""
    holder = job.root_cause_log_dir
    return sorted(job.nodes, key=lambda n: n.log_dir != holder)


def hung_for(job: JobView, now: float | None = None, after: float = HUNG_AFTER) -> float | None:
    """Seconds since the last output, heartbeat or collective of any running trainer of a
    running job on this machine, when every one has been quiet for `after` seconds or
    more; None otherwise (not running, life seen, or nothing to judge by here)."""
    if job.status != RunStatus.RUNNING:
        return None
    nodes = [n for n in job.nodes if n.status == RunStatus.RUNNING and _here(n)]
    if not nodes:
        return None
    from paddlike.distributed import progress
    from paddlike.logs import hang, stacks

    now = time.time() if now is None else now
    quiet: list[float] = []
    for node in nodes:
        assert node.summary is not None  # a running node has a summary
        logs = {
            p.rank: p.log_file
            for p in node.processes
            if p.role == "trainer" and p.status == ProcessStatus.RUNNING and p.rank is not None
        }
        if not logs:
            return None
        ranks = progress.read_all(node.log_dir, node.summary.job_id, flight=False)
        found = hang.detect_hang(stacks.signs_of_life(node.log_dir, logs, ranks), now, after)
        if found is None:
            return None
        quiet.append(found.stalled_for)
    return min(quiet)


def _here(node: NodeView) -> bool:
    s = node.summary
    return s is not None and (not s.hostname or s.hostname == socket.gethostname())
