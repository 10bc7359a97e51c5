"""What follows a round, for every job: the one round loop (`run_rounds`) and the one
restart rule (`may_restart`). Pure: the round itself is carried out by `run.job.JobRun`.

A fixed job is one whose membership cannot change (its nodes are its --ips, or --nnodes N):
it is an elastic job without membership changes, so both run the same loop.

| the round ended with                          | next                                    |
| --------------------------------------------- | --------------------------------------- |
| success (no root cause)                       | stop, the round's exit code (0)         |
| a failed process (trainer, server, ...)       | a restart round, while restarts remain  |
| a membership change (elastic: a node lost,    | a new round at once, not counted as a   |
|   left or waiting to join)                    | restart (torchrun's rule)               |
| ... that left fewer than MIN nodes, none held | stop, naming who went                   |
| a signal to a launcher, a lost node (fixed),  | stop: restarting cannot fix it, and the |
|   a rendezvous error                          | user (or scheduler) wants it over       |
| a hang (--on_hang abort), even one that names | stop: the same job would hang again     |
|   its odd rank                                |                                         |

Every node of a job sees the same root cause, so every node decides the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from paddlike.launch import NamedTuple
from paddlike.launch.plan.exitcode import below_min_exit_code
from paddlike.launch.plan.membership import ElasticSpec, is_membership_change
from paddlike.summary import RootCause


class RoundEnd(NamedTuple):
    """How one round ended on this node."""

    exit_code: int  # this launcher's, were the job to end here (`plan.exitcode`)
    cause: RootCause | None  # the job-wide root cause; None: it succeeded everywhere
    round: int = 0  # the store's round number it ran as (a late elastic node skips ahead)
    survivors: int = 0  # elastic: members that may take part in the next round


def restartable(cause: RootCause) -> bool:
    """A process of the job failed (rather than a launcher, a node or the rendezvous). A
    hang's cause names its odd rank but is not that process's failure: a restart would
    hang the same way."""
    return cause.role is not None and not cause.hung


def may_restart(cause: RootCause, restarts: int, max_restarts: int) -> bool:
    """The restart rule: a restartable cause, and restarts left (`restarts` used so far)."""
    return restartable(cause) and restarts < max_restarts


def run_rounds(
    elastic: ElasticSpec | None,
    max_restarts: int,
    run_round: Callable[[int, int], RoundEnd],
    say: Callable[[str], None],
) -> int:
    """Rounds until one succeeds everywhere, a failure cannot be restarted, restarts run
    out, or a membership change leaves fewer than MIN nodes (the module's table); returns
    the exit code. `elastic`: None for a fixed job.

    `run_round(round, restarts)` runs one round (the store's round number, at least `round`)
    after `restarts` failure restarts, and says how it ended."""
    round_, restarts = 0, 0
    while True:
        end = run_round(round_, restarts)
        cause = end.cause
        if cause is None:
            return end.exit_code
        if elastic is not None and is_membership_change(cause):
            if elastic.ends_with(end.survivors):
                return below_min_exit_code(end.exit_code)
            say(f"new round (membership change): {cause.reason}")
        elif may_restart(cause, restarts, max_restarts):
            restarts += 1
            say(f"restart {restarts} of {max_restarts} after: {cause.reason}")
        else:
            if restartable(cause) and max_restarts:
                say(f"giving up after {max_restarts} restart(s); last root cause: {cause.reason}")
            return end.exit_code
        round_ = max(end.round, round_) + 1
