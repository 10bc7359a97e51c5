"""This node's share of the job: what it publishes at each rendezvous and how it plans
from the agreed world. One shape for one node and many, collective and PS.

    options + node match + devices -> NodeJob
    NodeJob + RendezvousResult + JobFacts -> LaunchPlan     (each round)

Pure: the ports a node reserves and the rendezvous that trades them are the shell's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence

from paddlike import __version__
from paddlike.launch import NamedTuple
from paddlike.launch.context.devices import DeviceAssignment
from paddlike.launch.context.master import (
    launchers_master,
    master_address,
    ps_master_port,
    workers_port,
)
from paddlike.launch.context.options.record import LaunchOptions
from paddlike.launch.plan.heter import plan_ps_heter
from paddlike.launch.plan.layout import (
    collective_layout,
    collective_ports_needed,
    ps_counts_world_layout,
)
from paddlike.launch.plan.membership import ElasticSpec, elastic_spec
from paddlike.launch.plan.plan import (
    JobFacts,
    LaunchPlan,
    PsLayout,
    plan_collective,
    world_devices_text,
)
from paddlike.launch.plan.world import NodeEntry, RendezvousResult

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.node import NodeMatch


def new_job_id(
    clock: Callable[[], float] = time.time, tail: Callable[[], str] = lambda: os.urandom(2).hex()
) -> str:
    """job-YYYYmmdd-HHMMSS-xxxx: sortable by start time, unique by its random tail."""
    return time.strftime("job-%Y%m%d-%H%M%S-", time.localtime(clock())) + tail()


class NodeJob(NamedTuple):
    """This node's part of the job, as the rounds need it (collective or PS).

    `reserve`: how many ports this node reserves and publishes at each rendezvous
    (collective: one per trainer and the workers' store; PS: none, its ports are given,
    derived from --start_port identically on every node, or reserved once on one node).
    `plan` builds the round's plan from the rendezvous result (every node's ports, the
    job id in force). `servers_wait_for_job`: PS on several nodes; the servers stop when
    every trainer of the job is done, not when this node's are.
    """

    hosts: tuple[str, ...]  # every node's address, in node order ("" = found at the rendezvous)
    index: int
    interface: str
    reason: str  # how this node was matched, for the banner
    master: tuple[str, int] | None  # the launchers' TCP store; None on one node
    fingerprint: dict[str, str]
    reserve: int
    plan: Callable[[RendezvousResult, JobFacts], LaunchPlan]
    servers_wait_for_job: bool = False
    # torchrun style (no --ips): round 0's rendezvous gives the node list and the ranks
    # (`agreement.assign_ranks`); without --node_rank, `index` is a placeholder until then
    assign_ranks: bool = False
    rank_known: bool = True
    # --master_port given (collective): the workers' MASTER_PORT, claimed by node 0 as the
    # last of its ports instead of a free one; None: node 0 reserves a free one
    workers_port: int | None = None
    # an elastic job (--nnodes MIN:MAX): `hosts` has MAX entries, found at each round's
    # rendezvous (`peers.elastic`); None for a fixed set of nodes
    elastic: ElasticSpec | None = None
    # collective on GPUs: this node's workers' devices, published in its entry (nodes may
    # differ); "" on CPUs and in PS mode
    devices: str = ""
    # no --node_rank, and this node is not at --master's address (`NodeMatch.node0_host`)
    node0_host: str = ""

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
    return fp | _job_fields(run_mode, job_id, script, script_args, version)


def _job_fields(
    run_mode: str, job_id: str | None, script: str, script_args: Sequence[str], version: str
) -> dict[str, str]:
    """The fields every kind of job shares, after its own: mode, version, what runs, and
    the job id when one was given (unset, each node would generate its own)."""
    fields = {
        "run_mode": run_mode,
        "paddlike version": version,
        "training script": script,
        "script arguments": json.dumps(list(script_args)),
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
    fp |= _job_fields(run_mode, job_id, script, script_args, version)
    fp["nodes"] = ",".join(nodes)
    return fp


def collective_node_job(
    options: LaunchOptions, node: NodeMatch, devices: DeviceAssignment
) -> NodeJob:
    """Collective mode: ports reserved here and traded at the rendezvous (a --master_port
    is the workers' store port, claimed on node 0); raises UsageError when --master*
    contradict the scheduler's PADDLE_MASTER or put both stores on one port."""
    hosts, nproc = tuple(node.hosts), devices.nproc
    port = workers_port(options)

    def plan(result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        index = result.own_index(node.node_index)  # assigned at the rendezvous, or ours
        layout = collective_layout(result, index, nproc, master_port=port)
        return plan_collective(options, layout, devices, facts)

    many = len(hosts) > 1
    elastic = elastic_spec(options)
    if elastic is not None:  # every node must agree on the range, not only on MAX
        ips: Sequence[str] = (f"{elastic.range_text} nodes (elastic), found at the rendezvous",)
    elif node.discovered:  # torchrun style: every node knows only the count until then
        ips = (f"{len(hosts)} nodes, found at the rendezvous",)
    else:
        ips = hosts
    shared = fingerprint(  # the kind of devices only: counts may differ between nodes
        ips=ips,
        devices_per_node=devices.kind,
        run_mode=options.run_mode,
        job_id=options.job_id,
        script=options.training_script,
        script_args=options.training_script_args,
    )
    if elastic is not None:  # every node must close rounds and wait below MIN alike
        shared["elastic"] = (
            f"--elastic_level {elastic.level}, --rdzv_last_call {elastic.last_call:g} s, "
            f"survivors below MIN wait {elastic.hold:g} s"
        )
    if port is not None:  # every node's workers must meet at the same MASTER_PORT
        shared["master_port (the workers')"] = str(port)
    return NodeJob(
        hosts=hosts,
        index=node.node_index,
        interface=node.interface,
        reason=node.reason,
        master=launchers_master(options, hosts, node.scheduler_master) if many else None,
        fingerprint=shared,
        reserve=collective_ports_needed(nproc),
        plan=plan,
        assign_ranks=node.discovered,
        rank_known=node.rank_known,
        node0_host=node.node0_host,
        workers_port=port,
        elastic=elastic,
        devices=world_devices_text(devices),
    )


def ps_counts_node_job(options: LaunchOptions, node: NodeMatch) -> NodeJob:
    """Parameter-server counts on several nodes (--server_num/--worker_num with --ips or
    --nnodes and --master, as Paddle's launch takes them): every node runs the same counts
    on ports it reserves each round and trades at the rendezvous, like a collective job;
    the lists are every node's, node-major (`layout.ps_counts_world_layout`). The servers
    stop once every trainer of the job is done."""
    n_servers, n_trainers = options.server_num or 1, options.worker_num or 1
    hosts = tuple(node.hosts)

    def plan(result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        index = result.own_index(node.node_index)  # assigned at the rendezvous, or ours
        layout = ps_counts_world_layout(result, index, n_servers, n_trainers)
        return plan_ps_heter(options, layout, facts)  # plain plan_ps without heter stages

    ips = (f"{len(hosts)} nodes, found at the rendezvous",) if node.discovered else hosts
    shared = {
        "ips": ",".join(ips),
        "servers per node": str(n_servers),
        "trainers per node": str(n_trainers),
    } | _job_fields(
        options.run_mode,
        options.job_id,
        options.training_script,
        options.training_script_args,
        __version__,
    )
    return NodeJob(
        hosts=hosts,
        index=node.node_index,
        interface=node.interface,
        reason=node.reason,
        master=launchers_master(options, hosts, node.scheduler_master),
        fingerprint=shared,
        reserve=n_servers + n_trainers + 1,
        plan=plan,
        servers_wait_for_job=True,
        assign_ranks=node.discovered,
        rank_known=node.rank_known,
        node0_host=node.node0_host,
    )


def ps_node_job(options: LaunchOptions, layout: PsLayout, interface: str, reason: str) -> NodeJob:
    """Parameter-server mode: the ports are in `layout` already. On several nodes the node
    holding the first server hosts the launchers' store (unless --master/--master_addr say
    otherwise); raises UsageError when --master_port is a port the lists give to a server
    or trainer there."""
    hosts = tuple(layout.node_hosts)
    master = None
    if len(hosts) > 1:
        given = master_address(options.master, options.master_addr, options.master_port, hosts)
        heters = (ep for s in layout.heter_stages for ep in s)
        taken = (*layout.servers, *layout.trainers, *heters, layout.gloo_endpoint)
        master = (given[0], ps_master_port(given, options.master_port, taken))

    def plan(result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        return plan_ps_heter(options, layout, facts)  # plain plan_ps without heter stages

    return NodeJob(
        hosts=hosts,
        index=layout.node_index,
        interface=interface,
        reason=reason,
        master=master,
        fingerprint=ps_fingerprint(
            servers=layout.servers,
            trainers=layout.trainers,
            nodes=hosts,
            run_mode=options.run_mode,
            job_id=options.job_id,
            script=options.training_script,
            script_args=options.training_script_args,
            heter_stages=layout.heter_stages,
            heter_devices=layout.heter_devices,
        ),
        reserve=0,
        plan=plan,
        servers_wait_for_job=len(hosts) > 1,
    )
