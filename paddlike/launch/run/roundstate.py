"""One round on this node, as data: its phase, its live processes, its outcome.

Apart from the supervisor so that the event loop (`run.supervisor`) and the teardown
policy (`run.teardown`) share one state without importing each other, and so that
the job (`run.job`, `run.roundend`) reads a round's `RunOutcome` without the loop.
"""

from __future__ import annotations

import enum

from paddlike.launch import NamedTuple
from paddlike.launch.plan.plan import ProcessSpec, Role
from paddlike.summary import ProcessRecord, RootCause, RunStatus

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

    from paddlike.launch.run.hangwatch import HangWatch
    from paddlike.launch.run.logdir import WorkerLog

# Roles that serve until the trainers finish (PS mode), then are asked to stop. Heter
# trainers (ps-heter) are not: they end by themselves once every trainer ended its stream,
# and are waited for like trainers; the servers stop after both.
SERVICE_ROLES = (Role.SERVER,)


class Phase(enum.Enum):
    """The round on this node. RUNNING -> STOPPING_SERVICES -> (all exited), or
    RUNNING | STOPPING_SERVICES -> TEARDOWN -> (all exited) on a failure, a signal or
    a remote cause."""

    RUNNING = "running"
    STOPPING_SERVICES = "stopping services"
    TEARDOWN = "teardown"


class RunOutcome(NamedTuple):
    """What one round ended with on this node: the exit code, each process's record, the
    root cause this node knows of (its own failure, a signal, or a remote cause)."""

    exit_code: int
    records: list[ProcessRecord]
    root_cause: RootCause | None
    status: str  # RunStatus: SUCCEEDED | FAILED | INTERRUPTED
    duration: float
    preemption: dict | None = None  # summary.json's "preemption" (`run.preempt`)

    @property
    def trainers(self) -> int:
        return sum(1 for r in self.records if r.role == Role.TRAINER.value)


class Proc:
    """A running instance of a ProcessSpec."""

    __slots__ = (
        "guarded",
        "kill_sent",
        "log",
        "lost",
        "parked",
        "parking",
        "pidfd",
        "popen",
        "record",
        "returncode",
        "spec",
        "started",
        "stop_sent",
        "stop_signal",
        "stopped",
    )

    def __init__(self, spec: ProcessSpec, record: ProcessRecord, log: WorkerLog) -> None:
        self.spec = spec
        self.record = record
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None
        self.pidfd = -1
        self.started = 0.0  # monotonic
        self.stop_sent = False  # the launcher asked it to stop (SIGINT or SIGTERM)
        self.stop_signal = 0  # the last of those it sent (0: none yet)
        self.kill_sent = False  # the launcher sent SIGKILL
        self.returncode: int | None = None
        self.lost = False  # still there long after SIGKILL; given up on
        self.guarded = False  # its group is registered with the guardian
        self.stopped = False  # stopped (SIGSTOP, a debugger) when SIGTERM was sent
        # in-process restarts (`run.warm`): sent the park signal instead of SIGTERM; parked
        # (torn down, kept for the next round: out of this round, not ended)
        self.parking = False
        self.parked = False

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.returncode is None and not self.parked

    @property
    def is_service(self) -> bool:
        return self.spec.role in SERVICE_ROLES


class RoundState:
    """The mutable state of one `Supervisor.run()`."""

    def __init__(
        self,
        on_failure: Callable[[RootCause], None] | None = None,
        hangs: HangWatch | None = None,
    ) -> None:
        self.procs: list[Proc] = []
        self.phase = Phase.RUNNING
        self.cause: RootCause | None = None
        self.exit_code = 0
        self.status = RunStatus.SUCCEEDED
        self.kill_deadline: float | None = None
        self.trainers_reported = False  # ServicesStop.local_trainers_done() was called
        self.on_failure = on_failure
        self.hangs = hangs
        # a failure that only reports a peer's exit, held back until `held_until` for the
        # failure it reports (`run.consequence`)
        self.held: RootCause | None = None
        self.held_until = 0.0
        self.hold = 0.0  # seconds
        # the ending signals this launcher itself received (`signals.ending_again`)
        self.own_endings: list[int] = []
        # a preemption notice ended the round (`run.teardown`), and who hears of it first
        self.notice: RootCause | None = None
        # marks the ranks; returns what starts the agreement (after their SIGTERM)
        self.on_notice: Callable[[RootCause], Callable[[], None]] | None = None
        self.notice_node = -1  # this node's index, for the ranks named at the deadline

