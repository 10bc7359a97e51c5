"""A process's failure as its round's cause (`RootCause`): who, how it ended, its log's
last lines and first error. Apart from `roundstate` so that the teardown's import chain
does not reach the log files."""

from __future__ import annotations

import os
import time

from paddlike.launch.plan.signames import signal_name
from paddlike.launch.run.logdir import read_tail_since
from paddlike.launch.run.roundstate import Proc
from paddlike.logs.first_error import first_error_in_file
from paddlike.summary import RootCause

# The lines of a failed process's log quoted in its cause (the report's tail).
TAIL_LINES = 20


def process_cause(proc: Proc, host: str, node_index: int, code: int, reason: str) -> RootCause:
    """A process's failure as the round's cause: who, how it ended, its log's last lines
    (its error log's, when it wrote one)."""
    log_path, start = proc.log.path, proc.log.start
    if proc.log.err_path is not None and _grew(proc.log.err_path, proc.log.err_start):
        log_path, start = proc.log.err_path, proc.log.err_start
    spec = proc.spec
    return RootCause(
        reason=reason,
        host=host,
        node_index=node_index,
        role=spec.role.value,
        rank=spec.rank,
        local_index=spec.local_index,
        exit_code=code if code >= 0 else None,
        signal=signal_name(-code) if code < 0 else None,
        log_file=log_path.name,
        tail=read_tail_since(log_path, start, TAIL_LINES),
        time=time.time(),
        duration=time.monotonic() - proc.started if proc.started else None,
        error=first_error_in_file(os.fspath(log_path), start=start),
    )


def _grew(path: os.PathLike[str], start: int) -> bool:
    try:
        return os.stat(path).st_size > start
    except OSError:
        return False
