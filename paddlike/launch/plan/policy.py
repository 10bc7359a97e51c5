"""The causes of a job, pure and tested as tables: how a process's exit counts, which
cause is the job's, and each kind of cause (a lost node, lost contact, a launcher's signal,
a hang) as the report names it. What exit code a cause gives is `plan.exitcode`; what
round follows it, `plan.next_round`.

Every node of a job sees the same root cause, so every node decides the same way.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from paddlike import netaddr
from paddlike.launch import NamedTuple
from paddlike.launch.plan.signames import signal_name
from paddlike.launch.plan.world import node_label, store_node
from paddlike.summary import HANG_EXIT_CODE, ProcessStatus, RootCause

# --- a process's exit --------------------------------------------------------------------


def how_ended(code: int) -> str:
    """Popen's form (negative: killed by that signal) in words."""
    return f"was killed by {signal_name(-code)}" if code < 0 else f"exited with code {code}"


class ExitVerdict(NamedTuple):
    """What one process's exit means: its status, and a failure reason when the exit is a
    root cause of the round (None: not a failure, or one that came after the teardown began)."""

    status: str  # ProcessStatus: OK | FAILED | KILLED
    failure: str | None = None


def exit_verdict(
    label: str,
    code: int,
    *,
    stop_sent: bool,
    kill_sent: bool,
    stopping_services: bool,
    tearing_down: bool,
) -> ExitVerdict:
    """How an exit counts. `code` in Popen's form; `stop_sent`/`kill_sent`: the launcher
    sent SIGTERM/SIGKILL to this process; `stopping_services`: the servers were asked to
    stop because the trainers are done; `tearing_down`: the job is already ending.

    | asked to stop | phase            | exit                 | status | root cause |
    | ------------- | ---------------- | -------------------- | ------ | ---------- |
    | no            | any              | 0                    | ok     | no         |
    | no            | running          | != 0                 | failed | yes        |
    | no            | teardown         | != 0                 | failed | no         |
    | SIGTERM       | stopping servers | 0, SIGTERM, 143      | ok     | no         |
    | SIGTERM       | stopping servers | anything else        | failed | yes        |
    | SIGTERM/KILL  | teardown         | anything             | killed | no         |
    """
    if stop_sent:
        if stopping_services and not kill_sent:
            if code in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
                return ExitVerdict(ProcessStatus.OK)
            how = signal_name(-code) if code < 0 else f"code {code}"
            return ExitVerdict(
                ProcessStatus.FAILED, f"{label} exited with {how} after being asked to stop"
            )
        return ExitVerdict(ProcessStatus.KILLED)
    if code == 0:
        return ExitVerdict(ProcessStatus.OK)
    if tearing_down:
        return ExitVerdict(ProcessStatus.FAILED)
    return ExitVerdict(ProcessStatus.FAILED, f"{label} {how_ended(code)}")


# --- the job-wide root cause ---------------------------------------------------------------


class JobCause:
    """The job's root cause as one node learns it. The store keeps the first cause written
    (create-only), so every node ends up with the same one; this object applies the rules
    around it:

    | event                                     | effect                                   |
    | ----------------------------------------- | ---------------------------------------- |
    | `published(winner)` after our own failure | winner known; we are ending anyway, so   |
    |                                           | `to_act_on` stays None                    |
    | `learned(cause)` (another node's, a lost  | known if nothing was known yet; the      |
    | node, lost contact)                       | supervisor tears down for it             |
    | `settled(cause)` at the round's end       | the store's final word replaces ours     |
    """

    __slots__ = ("cause", "ours_published")

    def __init__(self, cause: RootCause | None = None, ours_published: bool = False) -> None:
        self.cause = cause
        self.ours_published = ours_published

    def published(self, winner: RootCause) -> None:
        if self.cause is None:
            self.cause = winner
        self.ours_published = True

    def learned(self, cause: RootCause) -> None:
        if self.cause is None:
            self.cause = cause

    def settled(self, cause: RootCause | None) -> None:
        if cause is not None:
            self.cause = cause

    def to_act_on(self) -> RootCause | None:
        """A cause that must end this node's round: known, and not our own."""
        if self.ours_published:
            return None
        return self.cause


def as_seen_from(cause: RootCause, node_index: int, hosts: Sequence[str]) -> RootCause:
    """The failure report names the log file: say that it is on the other node's host
    (an absolute path is printed as it is, not joined to our log directory)."""
    if cause.log_file and cause.node_index not in (None, node_index):
        where = node_label(cause.node_index, hosts)
        return cause.replace(log_file=f"{cause.log_file} on {where}")
    return cause


# A fixed job does not wait for a lost node to come back: its nodes cannot be replaced (its
# ranks and --ips are fixed), a scheduler that restarts one restarts the whole job, and a
# restart round would wait --rdzv_timeout for nothing. It ends, and says so.
FIXED_JOB_ENDS = (
    "; a fixed job ends without it (restarting cannot bring a node back; --nnodes MIN:MAX "
    "makes an elastic job that goes on without it)"
)


def lost_node_cause(
    node: int, hosts: Sequence[str], timeout: float, now: float, *, ends_job: bool = False
) -> RootCause:
    """Node `node`'s heartbeats stopped; `ends_job`: a fixed job's (it ends, and says so)."""
    return RootCause(
        reason=(
            f"{node_label(node, hosts)} stopped sending heartbeats for {timeout:g} s "
            "(--heartbeat_timeout): its launcher died or the network to it failed"
            + (FIXED_JOB_ENDS if ends_job else "")
        ),
        host=hosts[node] if node < len(hosts) else "",
        node_index=node,
        time=now,
    )


def launcher_died_cause(
    node: int, hosts: Sequence[str], pid: int, *, ends_job: bool, membership: str | None
) -> RootCause:
    """Node `node`'s launcher died (SIGKILL, OOM): its guardian says so at once, before its
    workers' peers fail in their collectives (a consequence, not the cause)."""
    return RootCause(
        reason=(
            f"{node_label(node, hosts)} was lost: its launcher (pid {pid}) died"
            + (FIXED_JOB_ENDS if ends_job else "")
        ),
        host=hosts[node] if node < len(hosts) else "",
        node_index=node,
        membership=membership,
    )


BY_STARTER = "the cluster start command received "  # `launcher_signal_cause(by_starter=)`


def same_cause(a: RootCause, b: RootCause) -> bool:
    """Whether two copies of a cause (this node's own, and the job's as the store keeps it,
    its log file made absolute, its reason perhaps extended: node 0 of an elastic job adds
    why its signal ends the job) are one failure."""
    if a.reason == b.reason and a.reason.startswith(BY_STARTER):
        return True  # each host's copy of the start command's signal: one cause
    if (a.node_index, a.rank, a.role) != (b.node_index, b.rank, b.role):
        return False
    return a.reason == b.reason or b.reason.startswith(a.reason) or a.reason.startswith(b.reason)


def membership_cause(
    cause: RootCause | None,
    gone: Sequence[tuple[int, str]],
    hosts: Sequence[str],
    timeout: float,
    now: float,
) -> RootCause:
    """Elastic jobs: a round in which a node was lost or left ends as a membership change,
    whatever failed first. Its peers' collectives fail as soon as its processes vanish,
    seconds before the heartbeats say why; that failure must not use up a restart.
    `gone`: (node, "lost" | "left"), in node order."""
    if cause is not None and cause.membership is not None:
        return cause
    node, how = gone[0]
    if how == "lost":
        base = lost_node_cause(node, hosts, timeout, now)
    else:
        base = RootCause(
            reason=f"{node_label(node, hosts)} left the job (its launcher was stopped)",
            host=hosts[node] if node < len(hosts) else "",
            node_index=node,
            time=now,
        )
    seen = f"; first seen as: {cause.reason}" if cause is not None else ""
    return base.replace(reason=base.reason + seen, membership=how)


def lost_contact_cause(
    node: int,
    hosts: Sequence[str],
    store: str,
    store_host: str,
    timeout: float,
    detail: str,
    now: float,
    store_node: int | None = None,
) -> RootCause:
    """This node cannot reach the store: `store` is its address (etcd://... or host:port),
    `store_host` who hosts it ("node 0 (10.0.0.1)"), `store_node` its index when a node of
    the job hosts it: that node was lost, so the cause is there (its host and index, as
    every node's summary says), though only this node can tell."""
    me = node_label(node, hosts)
    if store.startswith("etcd://"):
        endpoints = store.removeprefix("etcd://")
        reason = (
            f"{me} lost contact with etcd at {endpoints} (--master) for {timeout:g} s "
            "(--heartbeat_timeout): the etcd endpoint stopped answering or the network to it "
            f"failed ({detail})"
        )
    elif store_node == node:  # its own store: neither a lost launcher nor a network
        reason = (
            f"{me} lost contact with the job's store it hosts itself at {store} for "
            f"{timeout:g} s (--heartbeat_timeout): this launcher is stuck or its machine "
            f"overloaded ({detail})"
        )
    else:
        reason = (
            f"{me} lost contact with {store_host}, which hosts the job's store at {store}, for "
            f"{timeout:g} s (--heartbeat_timeout): its launcher died or the network to it "
            f"failed ({detail})"
        )
    if store_node is not None and not store.startswith("etcd://"):
        node = store_node
    return RootCause(
        reason=reason, host=hosts[node] if node < len(hosts) else "", node_index=node, time=now
    )


def store_refused_cause(
    node: int,
    hosts: Sequence[str],
    store: str,
    store_host: str,
    now: float,
    store_node: int | None = None,
) -> RootCause:
    """Node 0's store at `store` (host:port) refused a new connection: its host answers,
    so nothing listens there any more: the launcher that hosted it is gone. Said at once,
    not after --heartbeat_timeout (which is for a host that went silent)."""
    me = node_label(node, hosts)
    who = f"node {store_node}'s launcher" if store_node is not None else "its launcher"
    reason = (
        f"{me} lost contact with {store_host}: {who} is gone (its store at {store} "
        "refused the connection)"
    )
    if store_node is not None:
        node = store_node
    return RootCause(
        reason=reason, host=hosts[node] if node < len(hosts) else "", node_index=node, time=now
    )


def store_contact_cause(
    address: str,
    node_index: int,
    hosts: Sequence[str],
    label: str,
    hosts_store: bool,
    heartbeat_timeout: float,
    detail: str,
    now: float,
    *,
    refused: bool = False,
) -> RootCause:
    """Why node `node_index` lost the store at `address` (hosted by `label`): refused (the
    launcher there is gone, said at once), or silent for `heartbeat_timeout`."""
    where = store_node(node_index, hosts, netaddr.split(address)[0], hosts_store)
    if refused:
        return store_refused_cause(node_index, hosts, address, label, now, where)
    return lost_contact_cause(
        node_index, hosts, address, label, heartbeat_timeout, detail, now, store_node=where
    )


def launcher_signal_cause(
    host: str, node_index: int, signum: int, what: str, now: float, *, by_starter: bool = False
) -> RootCause:
    """A launcher received signal `signum` (SIGINT/SIGTERM/SIGHUP); `what` it was doing (""
    while supervising). The cause names it, as summary.json and the report spell it;
    `by_starter`: the cluster start command got it and passed it to every host, and every
    host names that, in the same words."""
    name = signal_name(signum)
    while_ = f" while {what}" if what else ""
    reason = f"launcher on {host} received {name}{while_}"
    if by_starter:
        reason = f"{BY_STARTER}{name}; every host's launcher got it"
    return RootCause(
        reason=reason,
        host=host,
        node_index=node_index,
        signal=name,
        time=now,
    )


# --- hangs ---------------------------------------------------------------------------------


def hang_cause(
    host: str, node_index: int, summary: Sequence[str], stalled: str, dump: str, now: float
) -> RootCause:
    """--on_hang abort: the grouped summary's first line (the odd rank out) is the reason;
    the dump's summary file (`dump`, relative to the log directory) is the log, quoted
    whole with how long the job stalled. Not a process's failure, so no restart round
    follows (a restart would hang the same way)."""
    return RootCause(
        reason=summary[0] if summary else stalled,
        host=host,
        node_index=node_index,
        exit_code=HANG_EXIT_CODE,
        log_file=dump or None,
        tail=[*summary, stalled],
        time=now,
    )
