"""This node's part in a preemption notice, for one round: its ranks told to wait for the
job's stop step, the step agreed with the other nodes, and the outcome said.

    a notice (this launcher's SIGTERM, or another node's through the store)
      -> `start`: this node's ranks' progress files marked PENDING, their positions read
         (then the teardown sends each rank SIGTERM); a thread publishes this node's
         furthest position and writes the job's stop step into the files (`peers.stopstep`,
         `distributed.preempt`)
      -> the round ends (`run.teardown` gave the ranks until --kill_timeout after the notice)
      -> `outcome`: this node's part of summary.json's "preemption"
      -> (many nodes) each node's part to the others before its end mark, theirs read
         after every node's end, as "other_nodes" (`run.roundend.hear_stop_outcomes`,
         `peers.stopstep`), or why one is unknown: every node's last line and summary
         say which ranks of the job did not stop at the step
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from paddlike.launch.console.output import Console
from paddlike.launch.peers.stopstep import StopStep
from paddlike.summary import ProcessRecord, ProcessStatus, RootCause

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.peers.api import RoundWatch
    from paddlike.launch.plan.plan import LaunchPlan

# The agreement's own deadline, within the grace: the ranks wait for it at PENDING.
AGREE_TIMEOUT = 5.0
# a rank that exited 0 but never reported a step: whatever it saved, it chose its own step
NEVER_ASKED = "never called should_stop"


class Preemption:
    """A round's notice on this node. `agree(position, timeout)`: the job's stop step from
    this node's position (the round's watch)."""

    def __init__(
        self,
        log_dir: str,
        ranks: Sequence[int],
        agree: Callable[[int, float], StopStep],
        console: Console,
        node_index: int = 0,
        host: str = "",
    ) -> None:
        self.log_dir = log_dir
        self.node_index = node_index
        self.host = host
        self.ranks = list(ranks)
        self.agree = agree
        self.console = console
        self.notice: RootCause | None = None
        self.stop: StopStep | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, plan: LaunchPlan, log_dir: str, watch: RoundWatch, console: Console) -> Preemption:
        """The round's: this node's ranks, the round's watch to agree through."""
        ranks = [s.rank for s in plan.processes if s.rank is not None]
        return cls(log_dir, ranks, watch.agree_stop_step, console, plan.node_index, plan.host)

    def start(self, notice: RootCause) -> Callable[[], None]:
        """Mark the ranks PENDING now (before their SIGTERM); return what starts the
        agreement in a thread (after it)."""
        from paddlike.distributed import preempt

        self.notice = notice
        positions = preempt.mark_pending(self.log_dir, self.ranks)
        position = max(positions.values(), default=0)
        self._thread = threading.Thread(
            target=self._agree, args=(position,), name="preemption", daemon=True
        )
        return self._thread.start

    def _agree(self, position: int) -> None:
        from paddlike.distributed import preempt

        try:
            stop = self.agree(position, AGREE_TIMEOUT)
        except Exception as exc:  # the store is gone: this node's ranks stop on their own
            self.console.warn(f"could not agree on a stop step with the other nodes: {exc}")
            stop = StopStep(position, (-1,))
        preempt.decide(self.log_dir, self.ranks, stop.step)
        self.stop = stop
        after = _since(self.notice)
        missing = (
            f" (without node{'s' if len(stop.missing) > 1 else ''} "
            f"{', '.join(map(str, stop.missing))}: no answer)"
            if stop.missing
            else ""
        )
        if not preempt.reported(self.log_dir, self.ranks):  # not one step heard of here
            unused = (
                "no rank on this node has called should_stop() (or heartbeat()): they end on "
                "their SIGTERM"
            )
            if stop.step <= 0:  # no rank of the job reported a step: there is none to stop at
                self.console.say(f"{unused} (a script's own SIGTERM handler may save)")
            else:
                self.console.say(
                    f"the job's stop step is {stop.step}{missing}, agreed {after:.2f} s after "
                    f"the notice; {unused}, not at that step"
                )
            return
        self.console.say(
            f"stop step {stop.step}: should_stop() is True there on every rank{missing}, "
            f"agreed {after:.2f} s after the notice"
        )

    def wait(self, timeout: float = AGREE_TIMEOUT + 1.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def outcome(self, records: Sequence[ProcessRecord]) -> dict[str, object] | None:
        """summary.json's "preemption": who sent the notice, the stop step, this node's
        ranks that did not exit 0 after it, seconds from the notice to the last exit."""
        notice = self.notice
        if notice is None:
            return None
        self.wait()
        from paddlike.distributed import preempt

        preempt.clear_node_notice(self.log_dir)  # an elastic job's next round starts afresh
        ends = [r.end_time for r in records if r.end_time is not None]
        last = max(ends) - notice.time if ends and notice.time is not None else None
        ranks = [r.rank for r in records if r.rank is not None]
        heard = preempt.reported(self.log_dir, ranks)
        return {
            "signal": notice.signal,
            "node_index": notice.node_index,
            "host": notice.host,
            "time": notice.time,
            "reason": notice.reason,  # not a signal's: --on_straggler exclude's leaving
            "node": self.node_index,  # whose part this is (the others come as "other_nodes")
            "node_host": self.host,
            # no step from any rank here: the agreed number would name a save nobody made
            "stop_step": self.stop.step if self.stop is not None and heard else None,
            "not_stopped": [
                {
                    "rank": r.rank,
                    "status": _not_stopped_status(r),
                    "exit_code": r.exit_code,
                    "signal": r.signal,
                }
                for r in records
                if r.status != ProcessStatus.OK or (r.rank is not None and r.rank not in heard)
            ],
            "seconds_to_last_exit": round(last, 3) if last is not None else None,
        }


def _not_stopped_status(record: ProcessRecord) -> str:
    """Why a rank is named: it never asked (exited 0 all the same), it failed on its own
    after the notice (a save that raised: its exit code, not "killed", though the launcher
    had sent it the notice's SIGTERM), or its status (killed by the grace's SIGKILL)."""
    if record.status == ProcessStatus.OK:
        return NEVER_ASKED
    if record.signal is None and record.exit_code not in (None, 0):
        return f"exited {record.exit_code}"
    return str(record.status)


def _since(notice: RootCause | None) -> float:
    if notice is None or notice.time is None:
        return 0.0
    return max(0.0, time.time() - notice.time)
