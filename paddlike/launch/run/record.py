"""summary.json for this node: written when a round's processes have started ("running")
and once when the round's job-wide outcome is known — never rewritten by anyone else.

The schema lives in `paddlike.summary`; this is the one writer in the launcher.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from paddlike.launch.plan.plan import LaunchPlan
from paddlike.summary import ProcessRecord, RootCause, RunSummary, write_summary


class RunRecord:
    """This node's run summary across rounds (`start_time` is the job's first start)."""

    def __init__(self, log_dir: str | os.PathLike[str], *, warn: Callable[[str], None]) -> None:
        self.log_dir = log_dir
        self.warn = warn
        self.hostname = os.uname().nodename
        self.start_time: float | None = None

    def running(self, plan: LaunchPlan, records: Sequence[ProcessRecord], restarts: int) -> None:
        if self.start_time is None:
            self.start_time = time.time()
        self._write(plan, records, restarts, "running", None, None)

    def finished(
        self,
        plan: LaunchPlan,
        records: Sequence[ProcessRecord],
        restarts: int,
        *,
        status: str,
        exit_code: int,
        cause: RootCause | None,
    ) -> None:
        """`status`: "succeeded" | "failed" | "interrupted"; `cause`: the job-wide one."""
        self._write(plan, records, restarts, status, exit_code, cause, end=time.time())

    def _write(
        self,
        plan: LaunchPlan,
        records: Sequence[ProcessRecord],
        restarts: int,
        status: str,
        exit_code: int | None,
        cause: RootCause | None,
        end: float | None = None,
    ) -> None:
        summary = RunSummary(
            job_id=plan.job_id,
            mode=plan.run_mode,
            node_index=plan.node_index,
            nnodes=plan.nnodes,
            host=plan.host,
            hostname=self.hostname,
            log_dir=os.fspath(self.log_dir),
            start_time=self.start_time or time.time(),
            status=status,
            exit_code=exit_code,
            end_time=end,
            restarts=restarts,
            processes=list(records),
            root_cause=cause,
        )
        try:
            write_summary(self.log_dir, summary)
        except OSError as exc:
            self.warn(f"could not write the run summary in {self.log_dir}: {exc}")
