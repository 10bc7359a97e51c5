"""What a spawned job's end gives its caller: the return values in rank order, or one of
torch.multiprocessing's exceptions (its names and attributes) for the first failure,
read from the job's summary.json and the failed child's error file."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

__all__ = [
    "ProcessException",
    "ProcessExitedException",
    "ProcessRaisedException",
    "SpawnError",
    "outcome",
]



class ProcessException(Exception):
    """A spawned process failed. `error_index`: its process index (torch's i; the local
    rank); `error_pid` (also `pid`, torch's spelling): its pid; `rank`: its global rank."""

    def __init__(
        self, msg: str, error_index: int, error_pid: int | None, *, rank: int | None = None
    ) -> None:
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.error_pid = error_pid
        self.pid = error_pid
        self.rank = error_index if rank is None else rank
        self.log_file: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.msg), dict(self.__dict__))


def _rebuild(cls: type[ProcessException], msg: str) -> ProcessException:
    exc = Exception.__new__(cls)
    Exception.__init__(exc, msg)
    return exc


class ProcessRaisedException(ProcessException):
    """The function raised in a child. `traceback` is the child's traceback text;
    `exc_type` and `exc_message` name what it raised (``"ValueError"``, ``"bad input"``)."""

    def __init__(
        self,
        msg: str,
        error_index: int,
        error_pid: int | None,
        *,
        rank: int | None = None,
        exc_type: str = "",
        exc_message: str = "",
        traceback: str = "",
    ) -> None:
        super().__init__(msg, error_index, error_pid, rank=rank)
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.traceback = traceback


class ProcessExitedException(ProcessException):
    """A child exited with a non-zero code or was killed by a signal, without a Python
    exception of its function: `exit_code` (negative: the signal's number, as in
    multiprocessing) and `signal_name` (``"SIGKILL"``, or None)."""

    def __init__(
        self,
        msg: str,
        error_index: int,
        error_pid: int | None,
        exit_code: int,
        signal_name: str | None = None,
        *,
        rank: int | None = None,
    ) -> None:
        super().__init__(msg, error_index, error_pid, rank=rank)
        self.exit_code = exit_code
        self.signal_name = signal_name


class SpawnError(RuntimeError):
    """The job failed for a reason that is no local child's: the launcher could not run
    it (log directory busy, rendezvous), or another node failed."""


def outcome(jobdir: Path, log_dir: str, code: int, launcher_text: str, nprocs: int) -> list[Any]:
    """Return values in rank order, or raise the failure's exception."""
    from paddlike.summary import RunStatus, read_summary

    from .. import _spawn_child as child

    summary = read_summary(log_dir)
    if code == 0 and summary is not None and summary.status == RunStatus.SUCCEEDED:
        return [child.read_result(jobdir, i) for i in range(nprocs)]
    cause = summary.root_cause if summary is not None else None
    if code == 128 + signal.SIGINT and (summary is None or summary.status == RunStatus.INTERRUPTED):
        raise KeyboardInterrupt("the spawned job was interrupted (SIGINT); every child stopped")
    local = (
        cause is not None
        and cause.local_index is not None
        and cause.role == "trainer"
        and cause.node_index == summary.node_index
    )
    if not local:
        reason = cause.reason if cause is not None else f"the launcher exited with code {code}"
        tail = launcher_text.strip()
        raise SpawnError(f"spawn: {reason}" + (f"\n{tail}" if tail else ""))
    index = int(cause.local_index)
    record = next(
        (p for p in summary.processes if p.local_index == index and p.role == "trainer"), None
    )
    pid = record.pid if record is not None else None
    rank = cause.rank
    log_file = str(Path(log_dir) / cause.log_file) if cause.log_file else None
    error = child.read_error(jobdir, index)
    who = f"rank {rank}, pid {pid}"
    exc: ProcessException
    # torch's wording first ("process 1 terminated with ..."), so that code matching
    # torch's messages matches ours; then the rank and pid
    if error is not None:
        exc = ProcessRaisedException(
            f"\n\n-- Process {index} terminated with the following error ({who}):\n"
            f"{error['traceback']}",
            index,
            pid,
            rank=rank,
            exc_type=error.get("type", ""),
            exc_message=error.get("message", ""),
            traceback=error.get("traceback", ""),
        )
    else:
        if cause.signal:
            how = f"signal {cause.signal}"
            exit_code = -int(getattr(signal.Signals, cause.signal, 0))
        else:
            how = f"exit code {cause.exit_code}"
            exit_code = int(cause.exit_code or 0)
        tail = "".join(f"\n  {line.rstrip()}" for line in cause.tail[-10:])
        more = f"; last lines of {cause.log_file}:{tail}" if tail else ""
        exc = ProcessExitedException(
            f"process {index} terminated with {how} ({who}){more}",
            index,
            pid,
            exit_code,
            cause.signal,
            rank=rank,
        )
    exc.log_file = log_file
    raise exc
