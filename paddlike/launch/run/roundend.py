"""How a round's end is written and told: this node's summary.json, and the console's
last word on the round (its own failure, another node's, a change of nodes, "OK").
"""

from __future__ import annotations

import os

from paddlike.launch.console.output import Console
from paddlike.launch.console.report import (
    report_failure,
    report_remote_failure,
    report_success,
)
from paddlike.launch.plan.elastic import ElasticSpec, below_min_cause, is_membership_change
from paddlike.launch.plan.plan import LaunchPlan
from paddlike.launch.plan.policy import RoundEnd, cause_exit_code
from paddlike.launch.run.record import RunRecord
from paddlike.summary import RootCause

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.run.supervisor import RunOutcome


def elastic_round_cause(
    console: Console,
    spec: ElasticSpec,
    own: RootCause | None,
    cause: RootCause | None,
    survivors: int,
    leaving: bool,
    log_dir: os.PathLike[str],
) -> RootCause | None:
    """How an elastic round ended for this node, and what it prints about it: this node's
    own failure report unless a membership change explains it (a lost node's peers fail
    first); the end of the job when fewer than MIN nodes are left and none may wait."""
    if leaving:
        # this node leaves: the round ends with its own exit code, not in a new round
        return cause.replace(membership=None) if cause is not None else None
    if own is not None:
        if not is_membership_change(cause):
            report_failure(console, own, log_dir)
        elif not is_membership_change(own):
            console.say(f"{own.reason}: put down to the change of nodes, not a restart")
    if cause is not None and is_membership_change(cause) and spec.ends_with(survivors):
        cause = below_min_cause(cause, survivors, spec)
        console.error(f"the elastic job ends: {cause.reason}")
    return cause


def conclude_round(
    console: Console,
    record: RunRecord,
    plan: LaunchPlan,
    outcome: RunOutcome,
    cause: RootCause | None,
    round_: int,
) -> RoundEnd:
    """The round's job-wide outcome is known (`cause`, None when every node succeeded):
    write this node's summary once, say "OK" or that another node failed, and return how
    the round ended. (This node's own failure report was printed when its round ended.)"""
    exit_code = outcome.exit_code or (cause_exit_code(cause) if cause is not None else 0)
    status = "failed" if cause is not None and outcome.status == "succeeded" else outcome.status
    record.finished(plan, outcome.records, round_, status=status, exit_code=exit_code, cause=cause)
    if is_membership_change(cause):  # said already, and the next round's line follows
        return RoundEnd(exit_code, cause)
    if cause is None:
        report_success(
            console,
            trainers=outcome.trainers,
            duration=outcome.duration,
            nnodes=plan.nnodes,
            log_dir=record.log_dir,
            restarts=round_,
        )
        return RoundEnd(exit_code, None)
    if outcome.exit_code == 0:  # else the failure report is out already
        report_remote_failure(console, cause)
    return RoundEnd(exit_code, cause)
