"""The planner of each mode: how a round's plan is made from the world the rendezvous
agreed (every node's ports, the job id in force); and each mode's node job, made with its
planner (`NodeJob.planner`). `run.job.JobRun.plan` calls the planner each round, then
places the result (`plan.placement`).

| planner            | mode                          | its layout                              |
| ------------------ | ----------------------------- | --------------------------------------- |
| CollectivePlanner  | collective                    | each round's: every node's ports        |
| PsWorldPlanner     | PS counts on several nodes    | each round's: every node's ports        |
| PsPlanner          | PS lists, or one node's counts | fixed: the lists' (or reserved) ports  |
| PsHeterPlanner     | ps-heter                      | fixed, with the heter stages            |
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike import __version__
from paddlike.launch.plan.layout import (
    collective_layout,
    collective_ports_needed,
    ps_counts_world_layout,
)
from paddlike.launch.plan.nodejob import (
    NodeJob,
    Planner,
    fingerprint,
    job_fields,
    ps_fingerprint,
)
from paddlike.launch.plan.plan import (
    JobFacts,
    LaunchPlan,
    PsLayout,
    plan_collective,
    world_devices_text,
)

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.devices import DeviceAssignment
    from paddlike.launch.context.node import NodeMatch
    from paddlike.launch.plan.jobspec import PlanSpec
    from paddlike.launch.plan.membership import ElasticSpec
    from paddlike.launch.plan.world import RendezvousResult


class CollectivePlanner(Planner):
    """One trainer per device group on this node, ranks node-major (`plan.plan_collective`).
    `node_index`: ours, until a rendezvous assigns one; `master_port`: a --master_port,
    the workers' store port on node 0."""

    __slots__ = ("devices", "master_port", "node_index", "spec")

    def __init__(
        self,
        spec: PlanSpec,
        node_index: int,
        devices: DeviceAssignment,
        master_port: int | None = None,
    ) -> None:
        self.spec = spec
        self.node_index = node_index
        self.devices = devices
        self.master_port = master_port

    def plan(self, result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        index = result.own_index(self.node_index)  # assigned at the rendezvous, or ours
        layout = collective_layout(result, index, self.devices.nproc, master_port=self.master_port)
        return plan_collective(self.spec, layout, self.devices, facts)


class PsWorldPlanner(Planner):
    """Parameter-server counts on several nodes (Paddle's launch with --server_num and
    --worker_num): every node runs the same counts (`servers`, `trainers` per node) on the
    ports it published; the lists are every node's, node-major
    (`layout.ps_counts_world_layout`)."""

    __slots__ = ("node_index", "servers", "spec", "trainers")

    def __init__(self, spec: PlanSpec, node_index: int, servers: int, trainers: int) -> None:
        self.spec = spec
        self.node_index = node_index
        self.servers = servers
        self.trainers = trainers

    def plan(self, result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        index = result.own_index(self.node_index)  # assigned at the rendezvous, or ours
        layout = ps_counts_world_layout(result, index, self.servers, self.trainers)
        from paddlike.launch.plan.ps_plan import plan_ps  # (PS jobs only load it)

        return plan_ps(self.spec, layout, facts)


class PsPlanner(Planner):
    """Parameter-server lists (or one node's counts): the layout is known before any
    rendezvous, the same every round (`ps_plan.plan_ps`)."""

    __slots__ = ("layout", "spec")

    def __init__(self, spec: PlanSpec, layout: PsLayout) -> None:
        self.spec = spec
        self.layout = layout

    def plan(self, result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        from paddlike.launch.plan.ps_plan import plan_ps  # (PS jobs only load it)

        return plan_ps(self.spec, self.layout, facts)


class PsHeterPlanner(Planner):
    """ps-heter: `PsPlanner`'s servers and trainers in stage 1, and this node's heter
    trainers in the stages after it (`heter.plan_ps_heter`)."""

    __slots__ = ("layout", "spec")

    def __init__(self, spec: PlanSpec, layout: PsLayout) -> None:
        self.spec = spec
        self.layout = layout

    def plan(self, result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        from paddlike.launch.plan.heter import plan_ps_heter  # (ps-heter jobs only load it)

        return plan_ps_heter(self.spec, self.layout, facts)


def ps_planner(spec: PlanSpec, layout: PsLayout) -> PsPlanner | PsHeterPlanner:
    """The planner of a fixed PS layout: ps-heter's when it has heter stages."""
    if layout.heter_stages:
        return PsHeterPlanner(spec, layout)
    return PsPlanner(spec, layout)


# --- each mode's node job, with its planner ----------------------------------------------


def collective_node_job(
    spec: PlanSpec,
    node: NodeMatch,
    devices: DeviceAssignment,
    *,
    master: tuple[str, int] | None = None,
    workers_port: int | None = None,
    elastic: ElasticSpec | None = None,
) -> NodeJob:
    """Collective mode: ports reserved here and traded at the rendezvous. `master`: where
    the launchers meet (several nodes); `workers_port`: a --master_port, the workers'
    store port claimed on node 0; `elastic`: --nnodes MIN:MAX."""
    hosts = tuple(node.hosts)
    if elastic is not None:  # every node must agree on the range, not only on MAX
        ips: Sequence[str] = (f"{elastic.range_text} nodes (elastic), found at the rendezvous",)
    elif node.discovered:  # torchrun style: every node knows only the count until then
        ips = (f"{len(hosts)} nodes, found at the rendezvous",)
    else:
        ips = hosts
    shared = fingerprint(  # the kind of devices only: counts may differ between nodes
        ips=ips,
        devices_per_node=devices.kind,
        run_mode=spec.run_mode,
        job_id=spec.job_id,
        script=spec.training_script,
        script_args=spec.training_script_args,
    )
    if elastic is not None:  # every node must close rounds and wait below MIN alike
        shared["elastic"] = (
            f"--elastic_level {elastic.level}, --rdzv_last_call {elastic.last_call:g} s, "
            f"survivors below MIN wait {elastic.hold:g} s"
        )
    if workers_port is not None:  # every node's workers must meet at the same MASTER_PORT
        shared["master_port (the workers')"] = str(workers_port)
    return NodeJob(
        hosts=hosts,
        index=node.node_index,
        interface=node.interface,
        reason=node.reason,
        master=master if len(hosts) > 1 else None,
        fingerprint=shared,
        reserve=collective_ports_needed(devices.nproc),
        planner=CollectivePlanner(spec, node.node_index, devices, workers_port),
        assign_ranks=node.discovered,
        rank_known=node.rank_known,
        node0_host=node.node0_host,
        workers_port=workers_port,
        elastic=elastic,
        devices=world_devices_text(devices),
    )


def ps_counts_node_job(
    spec: PlanSpec, node: NodeMatch, servers: int, trainers: int, master: tuple[str, int]
) -> NodeJob:
    """Parameter-server counts on several nodes (--server_num/--worker_num with --ips or
    --nnodes and --master, as Paddle's launch takes them): every node runs the same counts
    on ports it reserves each round and trades at the rendezvous, like a collective job
    (`planners.PsWorldPlanner`). The servers stop once every trainer of the job is done."""
    hosts = tuple(node.hosts)
    ips = (f"{len(hosts)} nodes, found at the rendezvous",) if node.discovered else hosts
    shared = {
        "ips": ",".join(ips),
        "servers per node": str(servers),
        "trainers per node": str(trainers),
    } | job_fields(
        spec.run_mode, spec.job_id, spec.training_script, spec.training_script_args, __version__
    )
    return NodeJob(
        hosts=hosts,
        index=node.node_index,
        interface=node.interface,
        reason=node.reason,
        master=master,
        fingerprint=shared,
        reserve=servers + trainers + 1,
        planner=PsWorldPlanner(spec, node.node_index, servers, trainers),
        servers_wait_for_job=True,
        assign_ranks=node.discovered,
        rank_known=node.rank_known,
        node0_host=node.node0_host,
    )


def ps_node_job(
    spec: PlanSpec,
    layout: PsLayout,
    interface: str,
    reason: str,
    master: tuple[str, int] | None = None,
) -> NodeJob:
    """Parameter-server mode: the ports are in `layout` already; `master`: where the
    launchers meet on several nodes (`ps_lists_master`)."""
    hosts = tuple(layout.node_hosts)
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
            run_mode=spec.run_mode,
            job_id=spec.job_id,
            script=spec.training_script,
            script_args=spec.training_script_args,
            heter_stages=layout.heter_stages,
            heter_devices=layout.heter_devices,
        ),
        reserve=0,
        planner=ps_planner(spec, layout),
        servers_wait_for_job=len(hosts) > 1,
    )
