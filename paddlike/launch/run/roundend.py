"""How a round's end is written and told: this node's summary.json, and the console's
last word on the round (its own failure, another node's, a change of nodes, "OK").
"""

from __future__ import annotations

import errno
import os
import time

from paddlike.launch.console.output import Console
from paddlike.launch.console.report import (
    report_failure,
    report_remote_failure,
    report_success,
)
from paddlike.launch.plan.exitcode import round_exit_code
from paddlike.launch.plan.membership import ElasticSpec, below_min_cause, is_membership_change
from paddlike.launch.plan.next_round import RoundEnd, may_restart
from paddlike.launch.plan.plan import LaunchPlan
from paddlike.launch.plan.policy import as_seen_from, same_cause
from paddlike.launch.run.record import RunRecord
from paddlike.summary import RootCause, RunStatus

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.peers.api import Peers, RoundWatch
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
            report_own_failure(console, own, cause, log_dir)
        elif not is_membership_change(own):
            console.say(f"{own.reason}: put down to the change of nodes, not a restart")
    if cause is not None and is_membership_change(cause) and spec.ends_with(survivors):
        cause = below_min_cause(cause, survivors, spec)
        console.error(f"the elastic job ends: {cause.reason}")
    return cause


def report_own_failure(
    console: Console,
    own: RootCause,
    job_cause: RootCause | None,
    log_dir: os.PathLike[str],
    *,
    restarts_left: bool = False,
) -> None:
    """This node's failure, as soon as its round ended: its report when it is the job's
    cause (or none is known yet), else one line: it came after the job's cause (a node
    lost, another node's failure: its peers' collectives fail at once), which is
    reported when the round ends (`conclude_round`)."""
    if job_cause is None or same_cause(own, job_cause):
        # the job's copy where it says more (node 0's signal in an elastic job: why it ends)
        longer = job_cause is not None and len(job_cause.reason) > len(own.reason)
        shown = own.replace(reason=job_cause.reason) if longer else own  # type: ignore[union-attr]
        report_failure(console, shown, log_dir, restarts_left=restarts_left)
    else:
        console.say(f"{own.reason}: put down to the job's root cause (below), not a cause")


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
    own = outcome.root_cause
    theirs = cause is not None and own is not None and not same_cause(own, cause)
    # theirs: this node's failure was a consequence, the job's cause is another
    exit_code = round_exit_code(outcome.exit_code, cause, consequence=theirs)
    failed = cause is not None and outcome.status == RunStatus.SUCCEEDED  # another node failed
    status = RunStatus.FAILED if failed else outcome.status
    if cause is not None and cause.stopped:  # a launcher's signal stopped the job: every node
        status = RunStatus.INTERRUPTED
    record.preemption = outcome.preemption
    record.finished(plan, outcome.records, round_, status=status, exit_code=exit_code, cause=cause)
    if is_membership_change(cause):  # said already, and the next round's line follows
        return RoundEnd(exit_code, cause)
    if cause is None:
        # the whole job's time (every restart and elastic round), not only the last round's
        job_time, last_round = outcome.duration, None
        if record.rounds_started > 1 and record.started is not None:
            job_time, last_round = time.monotonic() - record.started, outcome.duration
        report_success(
            console,
            trainers=outcome.trainers,
            duration=job_time,
            last_round=last_round,
            nnodes=plan.nnodes,
            log_dir=record.log_dir,
            restarts=round_,
        )
        return RoundEnd(exit_code, None)
    if outcome.exit_code == 0:  # this node's workers succeeded: one line (the report is theirs)
        report_remote_failure(console, cause)
    elif theirs:  # this node's failure was put down to it: the job's cause, as a report
        where = cause.node_index if cause.node_index is not None else -1  # type: ignore[union-attr]
        hosts = [""] * where + [cause.host or ""]  # type: ignore[union-attr]
        shown = as_seen_from(cause, plan.node_index, hosts)  # type: ignore[arg-type]
        report_failure(console, shown, record.log_dir)
    if outcome.preemption is not None:  # the last word: the stop step, who saved it
        from paddlike.logs.report import format_preemption

        console.say(format_preemption([outcome.preemption]))
    return RoundEnd(exit_code, cause)


def write_failure_cause(exc: OSError, host: str, node_index: int) -> RootCause:
    """This node cannot write its log directory (endpoints.log before a round): the job's
    cause, naming the file and, when the disk is full, the filesystem and what to do."""
    path = exc.filename or "the log directory"
    reason = f"cannot write {path} on {host}: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        mount = _mount_point(os.path.dirname(path))
        reason += (
            f" (the log directory's filesystem, mounted at {mount}, is full: free space "
            "there or give another --log_dir)"
        )
    return RootCause(reason=reason, host=host, node_index=node_index, time=time.time())


def _mount_point(path: str) -> str:
    """The mount point of the filesystem that holds `path`."""
    path = os.path.realpath(path)
    try:
        dev = os.stat(path).st_dev
        while path != "/" and os.stat(os.path.dirname(path)).st_dev == dev:
            path = os.path.dirname(path)
    except OSError:
        pass
    return path


def settle_round(
    peers: Peers,
    watch: RoundWatch,
    outcome: RunOutcome,
    console: Console,
    elastic: ElasticSpec | None,
    log_dir: os.PathLike[str],
    *,
    restarts: int,
    max_restarts: int,
) -> tuple[RootCause | None, int, bool]:
    """The round's job-wide cause (None: it succeeded everywhere) once every node ended
    it, how many of its members may come back (elastic), and whether this node leaves
    the job (elastic: its launcher got a signal)."""
    own = outcome.root_cause
    if outcome.preemption is not None:  # before the end mark: whoever reads it finds this
        watch.share_stop_outcome(outcome.preemption)
    if elastic is None:
        if own is not None:  # before waiting for the others: that may be long
            # then one line; the rounds say more (a hang is not restarted)
            left = may_restart(own, restarts, max_restarts)
            report_own_failure(console, own, watch.root_cause, log_dir, restarts_left=left)
        cause = peers.finish(watch, outcome.exit_code == 0)
        hear_stop_outcomes(watch, outcome)
        return cause, 0, False
    leaving = watch.leaving
    if leaving:
        what = own.reason if own is not None else "stopped"
        console.say(f"{what}: this node leaves the elastic job; the others go on")
    cause = peers.finish(watch, outcome.exit_code == 0)
    hear_stop_outcomes(watch, outcome)
    survivors = len(peers.survivors or ())
    cause = elastic_round_cause(console, elastic, own, cause, survivors, leaving, log_dir)
    return cause, survivors, leaving


def hear_stop_outcomes(watch: RoundWatch, outcome: RunOutcome) -> None:
    """A preemption: every node ended the round (`finish`, which read the other nodes'
    parts of its outcome before saying it was done: `peers.stopstep`); theirs are added
    to this node's (summary.json's "preemption", written by `conclude_round`), so that
    its last line and summary name another node's ranks that did not stop at the step,
    or say that a node's are unknown."""
    part = outcome.preemption
    if part is None:
        return
    from paddlike.launch.peers.stopstep import OUTCOME_TIMEOUT

    others = watch.stop_outcomes(OUTCOME_TIMEOUT)  # [] on one node; read by `finish`
    if others:  # (the outcome's own dict: `conclude_round` writes and says it)
        part["other_nodes"] = others  # `logs.report.format_preemption` counts them in
