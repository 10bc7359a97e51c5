"""summary.json for this node: written when a round's processes have started ("running")
and once when the round's job-wide outcome is known — never rewritten by anyone else.

The schema lives in `paddlike.summary`; this is the one writer in the launcher. On a full
disk nothing half-written is left, and the last word still lands where it fits
(`logformat.write_atomically`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from paddlike.launch.plan.plan import LaunchPlan
from paddlike.logformat import write_atomically
from paddlike.summary import (
    SUMMARY_FILE,
    ProcessRecord,
    ProcessStatus,
    RootCause,
    RunStatus,
    RunSummary,
    summary_text,
)


class RunRecord:
    """This node's run summary across rounds (`start_time` is the job's first start)."""

    def __init__(self, log_dir: str | os.PathLike[str], *, warn: Callable[[str], None]) -> None:
        self.log_dir = log_dir
        self.warn = warn
        self.hostname = os.uname().nodename
        self.start_time: float | None = None
        self.started: float | None = None  # the same moment, monotonic (the job's duration)
        self.rounds_started = 0  # restarts and elastic rounds: the last round is not the job
        # elastic jobs: each round's members and why it ended (summary.json "rounds")
        self.rounds: list[dict] = []
        # --max_restarts: why each restart happened (summary.json "restart_causes")
        self.restart_causes: list[dict] = []
        # --hang_timeout: every hang diagnosed (summary.json "hangs"), kept to the end
        self.hangs: list[dict] = []
        # --straggler_check: the last check's lateness table (summary.json "stragglers")
        self.stragglers: dict | None = None
        self.last_status = ""
        self._last: tuple | None = None  # what the summary was last written with
        self.preemption: dict | None = None  # summary.json's "preemption", once a notice came
        self.preflight: dict | None = None  # summary.json's "preflight" (launch.health.gate)
        # each round after a failure or a change of nodes: which processes were kept (an
        # in-process restart, `run.warm`), which started anew, how long it took
        self.recoveries: list[dict] = []

    def restarted(self, round_: int, cause: RootCause) -> None:
        """Round `round_` restarts the job after `cause` (kept after a later success)."""
        self.restart_causes.append({"round": round_, "cause": cause.reason, "error": cause.error})

    def recovered(
        self,
        round_: int,
        restarts: int,
        records: Sequence[ProcessRecord],
        kept: Sequence[ProcessRecord],
        cause: RootCause,
    ) -> None:
        """Round `round_` is running after `cause`: summary.json's "recoveries" entry, its
        `recovery_s` from the failure to every process of this node started or, kept,
        given the new round."""
        kept_ids = {id(r) for r in kept}
        now = time.time()
        self.recoveries.append(
            {
                "round": round_,
                "restarts": restarts,
                "kept": [_who(r) for r in records if id(r) in kept_ids],
                "started": [_who(r) for r in records if id(r) not in kept_ids],
                "recovery_s": round(now - cause.time, 3) if cause.time else None,
                "measured": "failure -> every process of this node running the new round",
            }
        )

    def kept_ended(self) -> None:
        """Processes kept for a round that did not come were ended with the job: the
        summary says "killed", as without `restartable`."""
        if self._last is None:
            return
        for record in self._last[1]:
            if record.status == ProcessStatus.KEPT:
                record.status = ProcessStatus.KILLED
        self._write(*self._last)

    def round_ended(
        self, round_: int, restarts: int, members: Sequence[str], cause: RootCause | None
    ) -> None:
        self.rounds.append(
            {
                "round": round_,
                "restarts": restarts,
                "members": list(members),
                "ended": RunStatus.SUCCEEDED if cause is None else cause.reason,
                "membership": None if cause is None else cause.membership,
            }
        )

    def hang_diagnosed(self, diagnosis: dict) -> None:
        """A hang was diagnosed (`hangwatch.diagnosis`): kept, and written at once, so that
        the summary names it while the job runs, and after Ctrl-C or a kill."""
        self.hangs.append(diagnosis)
        if self._last is not None:
            self._write(*self._last)

    def stragglers_found(self, table: dict) -> None:
        """A straggler check's table (`lateness.Lateness.to_json`): kept, and written at
        once, so that the summary (and a followed page's heat map) says it while the job
        runs; a check comes every --straggler_check seconds, never more often."""
        self.stragglers = table
        if self._last is not None:
            self._write(*self._last)

    def outcome_text(self) -> str:
        """How the job ended, for nodes still waiting to join an elastic job."""
        if self.rounds and self.rounds[-1]["ended"] == RunStatus.SUCCEEDED:
            return "it succeeded"
        if self.rounds:
            return f"it failed: {self.rounds[-1]['ended']}"
        return "it stopped"

    def running(self, plan: LaunchPlan, records: Sequence[ProcessRecord], restarts: int) -> None:
        if self.start_time is None:
            self.start_time = time.time()
            self.started = time.monotonic()
        self.rounds_started += 1
        self._write(plan, records, restarts, RunStatus.RUNNING, None, None)

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
        """`status`: RunStatus SUCCEEDED | FAILED | INTERRUPTED; `cause`: the job-wide one."""
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
        self._last = (plan, records, restarts, status, exit_code, cause, end)
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
            rounds=list(self.rounds),
            restart_causes=list(self.restart_causes),
            hangs=list(self.hangs),
            stragglers=self.stragglers,
            preemption=self.preemption if end is not None else None,
            preflight=self.preflight,
            recoveries=list(self.recoveries),
        )
        path = Path(self.log_dir) / SUMMARY_FILE
        try:  # write_summary's format, through the launcher's one atomic write
            text = summary_text(summary)
            write_atomically(path, text.encode(), in_place_when_full=True)
        except OSError as exc:
            self.warn(f"could not write the run summary in {self.log_dir}: {exc}")


def _who(record: ProcessRecord) -> dict:
    return {"rank": record.rank, "local_index": record.local_index, "pid": record.pid}


def recovery_line(
    restarts: int,
    max_restarts: int,
    records: Sequence[ProcessRecord],
    kept: Sequence[ProcessRecord],
) -> str:
    """The console's word on an in-process restart: "restart 1/1: 1 process kept (rank 0,
    pid 4242), 1 started anew"."""
    started = len(records) - len(kept)
    names = ", ".join(f"rank {r.rank}, pid {r.pid}" for r in kept[:4])
    more = f", +{len(kept) - 4}" if len(kept) > 4 else ""
    what = f"restart {restarts}/{max_restarts}" if restarts else "new round"
    return (
        f"{what}: {len(kept)} process{'es' if len(kept) != 1 else ''} kept ({names}{more}), "
        f"{started} started anew"
    )
