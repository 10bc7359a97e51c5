"""This node's share of the job: what it publishes at each rendezvous and how it plans
from the agreed world. One shape for one node and many, collective and PS; each mode's
node job is made with its planner in `plan.planners`.

    PlanSpec + node match + devices -> NodeJob                      (planners, main)
    NodeJob.planner + RendezvousResult + JobFacts -> LaunchPlan     (each round,
        then `placement.place`: run.job.JobRun.plan)

Pure: the ports a node reserves and the rendezvous that trades them are the shell's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from paddlike import __version__
from paddlike.launch import NamedTuple
from paddlike.launch.plan.jobspec import Placement
from paddlike.launch.plan.membership import ElasticSpec
from paddlike.launch.plan.world import NodeEntry, RendezvousResult

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.plan import JobFacts, LaunchPlan


def new_job_id(
    clock: Callable[[], float] = time.time, tail: Callable[[], str] = lambda: os.urandom(2).hex()
) -> str:
    """job-YYYYmmdd-HHMMSS-xxxx: sortable by start time, unique by its random tail."""
    return time.strftime("job-%Y%m%d-%H%M%S-", time.localtime(clock())) + tail()


class Planner:
    """A mode's planner (`plan.planners`): makes a round's plan from the world the
    rendezvous agreed (every node's ports, the job id in force)."""

    __slots__ = ()

    def plan(self, result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        raise NotImplementedError


class NodeJob(NamedTuple):
    """This node's part of the job, as the rounds need it (collective or PS).

    `reserve`: how many ports this node reserves and publishes at each rendezvous
    (collective: one per trainer and the workers' store; PS: none, its ports are given,
    derived from --start_port identically on every node, or reserved once on one node).
    `planner` makes the round's plan from the rendezvous result (every node's ports, the
    job id in force: `plan.planners`), `placement` places it (`plan.placement.place`).
    `servers_wait_for_job`: PS on several nodes; the servers stop when every trainer of
    the job is done, not when this node's are.
    """

    hosts: tuple[str, ...]  # every node's address, in node order ("" = found at the rendezvous)
    index: int
    interface: str
    reason: str  # how this node was matched, for the banner
    master: tuple[str, int] | None  # the launchers' TCP store; None on one node
    fingerprint: dict[str, str]
    reserve: int
    planner: Planner
    servers_wait_for_job: bool = False
    # torchrun style (no --ips): round 0's rendezvous gives the node list and the ranks
    # (`agreement.assign_ranks`); without --node_rank, `index` is a placeholder until then
    assign_ranks: bool = False
    rank_known: bool = True
    # --master_port given (collective): the workers' MASTER_PORT, claimed by node 0 as the
    # last of its ports instead of a free one; None: node 0 reserves a free one
    workers_port: int | None = None
    # an elastic job (--nnodes MIN:MAX): `hosts` has MAX entries, found at each round's
    # rendezvous (`peers.elastic_rendezvous`); None for a fixed set of nodes
    elastic: ElasticSpec | None = None
    # collective on GPUs: this node's workers' devices, published in its entry (nodes may
    # differ); "" on CPUs and in PS mode
    devices: str = ""
    # no --node_rank, and this node is not at --master's address (`NodeMatch.node0_host`)
    node0_host: str = ""
    # started by the one-command cluster start (`cluster.start`): this host's console lines
    # meet every other host's on the starter's console (`console.tee` keeps rank prefixes)
    started_by_cluster: bool = False
    # --numa_binding, torchrun's -t/-r: applied to every plan, the preview's and each round's
    placement: Placement | None = None

    @property
    def nnodes(self) -> int:
        return len(self.hosts)

    @property
    def host(self) -> str:
        return self.hosts[self.index]

    def entry(self, ports: Sequence[int], *, hostname: str, pid: int, job_id: str) -> NodeEntry:
        """What this node publishes at a rendezvous (index -1: a rank to be assigned)."""
        index = self.index if self.rank_known else -1
        return NodeEntry(
            index,
            self.host,
            hostname,
            pid,
            tuple(ports),
            self.fingerprint,
            job_id=job_id,
            devices=self.devices,
        )

    def placed(self, result: RendezvousResult) -> NodeJob:
        """This job once a rendezvous placed it: its index and the node list from `result`
        (the rank assigned there, kept for the later rounds)."""
        index = result.own_index(self.index)
        if index == self.index and self.rank_known and result.hosts == self.hosts:
            return self
        return self._replace(hosts=tuple(result.hosts), index=index, rank_known=True)

    def preview_world(
        self, ports_of: Callable[[int], Sequence[int]], job_id: str
    ) -> RendezvousResult:
        """A world as a rendezvous would give it, for --dry_run and the checks made before
        anything starts: `ports_of(node)` gives each node's ports; unknown addresses
        (torchrun style) show as "<node i>". A node whose rank the rendezvous decides and
        that is not at --master's address (`node0_host`, node 0's) shows as node 1."""
        hosts, own = self.hosts, self.index
        if self.node0_host and not self.rank_known and self.nnodes > 1:
            hosts = (self.node0_host, self.host) + ("",) * (self.nnodes - 2)
            own = 1
        nodes = tuple(
            NodeEntry(
                i,
                h or f"<node {i}>",
                "",
                0,
                tuple(ports_of(i)),
                self.fingerprint,
                job_id,
                devices=self.devices if i == own else "",
            )
            for i, h in enumerate(hosts)
        )
        return RendezvousResult(0, nodes, job_id, 0.0, index=own)


def fingerprint(
    *,
    ips: Sequence[str],
    devices_per_node: str,
    nproc_per_node: int | None = None,
    run_mode: str,
    job_id: str | None,
    script: str,
    script_args: Sequence[str],
    version: str = __version__,
) -> dict[str, str]:
    """The configuration every node must share. Field order is the order of the report.

    An unset job id is left out: each node would generate its own; node 0's is adopted.
    `nproc_per_node` None (collective jobs): nodes may differ in their worker counts, each
    publishes its own (its ports); a count given here must be the same on every node.
    """
    fp = {"ips": ",".join(ips), "devices per node": devices_per_node}
    if nproc_per_node is not None:
        fp["nproc_per_node"] = str(nproc_per_node)
    return fp | job_fields(run_mode, job_id, script, script_args, version)


def job_fields(
    run_mode: str, job_id: str | None, script: str, script_args: Sequence[str], version: str
) -> dict[str, str]:
    """The fields every kind of job shares, after its own: mode, version, what runs, and
    the job id when one was given (unset, each node would generate its own)."""
    fields = {
        "run_mode": run_mode,
        "paddlike version": version,
        "training script": script,
        # repr, not json: json is not imported at a launch's start (start-up time)
        "script arguments": repr(list(script_args)),
    }
    if job_id:
        fields["job_id"] = job_id
    return fields


def ps_fingerprint(
    *,
    servers: Sequence[str],
    trainers: Sequence[str],
    nodes: Sequence[str],
    run_mode: str,
    job_id: str | None,
    script: str,
    script_args: Sequence[str],
    version: str = __version__,
    heter_stages: Sequence[Sequence[str]] = (),
    heter_devices: Sequence[str] = (),
) -> dict[str, str]:
    """`fingerprint` for parameter-server lists: the resolved server and trainer endpoints
    stand in for --ips and the device counts; "nodes" (the node order they imply) is last,
    as it can only differ when a list does. ps-heter adds its stages and their devices."""
    fp = {
        "servers": ",".join(servers),
        "workers": ",".join(trainers),
    }
    if heter_stages:
        fp["heter workers"] = ";".join(",".join(s) for s in heter_stages)
        fp["heter devices"] = ";".join(heter_devices)
    fp |= job_fields(run_mode, job_id, script, script_args, version)
    fp["nodes"] = ",".join(nodes)
    return fp
