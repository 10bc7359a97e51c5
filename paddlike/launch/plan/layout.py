"""Ports arithmetic: where every process of the job listens, from ports already chosen.

Pure. The ports themselves come from the shell (`run.ports` reserves free ones on this
node) or from the rendezvous (every node's published ports); this module only arranges
them, in one place for one node and many, for the real launch and for --dry_run.
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike import netaddr
from paddlike.launch import NamedTuple
from paddlike.launch.context.master import master_address, ps_master_port
from paddlike.launch.context.options.record import UsageError
from paddlike.launch.plan.plan import EndpointLayout, PsLayout
from paddlike.launch.plan.world import RendezvousResult

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.node import PsNode


def collective_ports_needed(nproc: int) -> int:
    """Ports a node reserves in collective mode: one per trainer, and the workers' store
    (used on node 0 only, reserved everywhere so that every entry has the same shape)."""
    return nproc + 1


def collective_layout(
    world: RendezvousResult, node_index: int, nproc: int, master_port: int | None = None
) -> EndpointLayout:
    """Endpoints from every node's published ports: each node's trainers first (one port
    each: nodes may differ in their worker counts), then its store port (used on node 0).
    `nproc` is this node's own count (its entry must carry that many trainer ports).
    `master_port`: the workers' store port the user gave (--master_port, which node 0
    claims and publishes as its last port); None: node 0's last published port.

    node 0 ports (40001, 40002, 40003), node 1 (50001, 50002, 50003, 50004)
      -> trainers 0:40001 0:40002 1:50001 1:50002 1:50003, workers' store on node 0 at 40003
    """
    own = len(world.nodes[node_index].ports) - 1
    if own != nproc:
        label = world.nodes[node_index].label
        raise ValueError(f"{label} published {own} trainer ports, not {nproc}")
    return EndpointLayout(
        world.hosts,
        node_index,
        tuple(n.ports[:-1] for n in world.nodes),
        master_port=master_port if master_port is not None else world.nodes[0].ports[-1],
        devices=world.devices,
    )


def start_port_ports(start_port: int, nproc: int) -> tuple[int, ...]:
    """--dry_run on many nodes shows ports from --start_port (a real launch negotiates them)."""
    needed = collective_ports_needed(nproc)
    if start_port + needed - 1 > 65535:
        raise UsageError(
            f"--start_port: {start_port} leaves no room for {needed} ports", "--start_port"
        )
    return tuple(range(start_port, start_port + needed))


def ps_counts_layout(
    host: str,
    n_servers: int,
    n_trainers: int,
    ports: Sequence[int],
    heter_sizes: Sequence[int] = (),
    heter_devices: Sequence[str] = (),
) -> PsLayout:
    """--server_num/--worker_num (and --heter_worker_num): everything on this node; `ports`
    holds one per server, one per trainer, Paddle fleet's gloo endpoint, then one per heter
    trainer, stage 2 first (`ps_counts_ports_needed`)."""
    eps = tuple(netaddr.join(host, p) for p in ports)
    n = n_servers + n_trainers
    stages, at = [], n + 1
    for size in heter_sizes:
        stages.append(eps[at : at + size])
        at += size
    return PsLayout(
        eps[:n_servers],
        eps[n_servers:n],
        host,
        0,
        1,
        (host,),
        gloo_endpoint=eps[n],
        heter_stages=tuple(stages),
        heter_devices=tuple(heter_devices),
    )


def ps_counts_world_layout(
    world: RendezvousResult, node_index: int, n_servers: int, n_trainers: int
) -> PsLayout:
    """--server_num/--worker_num on several nodes (Paddle's `--nnodes N --server_num S
    --trainer_num T` with --master or --ips): every node runs S servers and T trainers on
    ports it reserved and published, S + T + 1 of them (the last is Paddle fleet's gloo
    endpoint, used on node 0's, where server 0 is). The job's lists are every node's,
    node-major: a trainer's id is its place in them, the same on every node.

    node 0 a (40001, 40002, 40003), node 1 b (50001, 50002, 50003), S 1, T 1
      -> servers a:40001,b:50001  trainers a:40002,b:50002  gloo a:40003
    """
    used = n_servers + n_trainers
    for n in world.nodes:
        if len(n.ports) != used + 1:
            raise ValueError(f"{n.label} published {len(n.ports)} ports, not {used + 1}")
    servers = tuple(netaddr.join(n.host, p) for n in world.nodes for p in n.ports[:n_servers])
    trainers = tuple(netaddr.join(n.host, p) for n in world.nodes for p in n.ports[n_servers:used])
    first = world.nodes[0]
    return PsLayout(
        servers,
        trainers,
        world.hosts[node_index],
        node_index,
        len(world.nodes),
        world.hosts,
        gloo_endpoint=netaddr.join(first.host, first.ports[used]),
    )


def ps_counts_ports_needed(servers: int, trainers: int, heters: Sequence[int] = ()) -> int:
    """One node's PS counts: a port for each server, trainer and heter trainer, and
    Paddle fleet's gloo endpoint."""
    return servers + trainers + 1 + sum(heters)


def ps_lists_layout(
    node: PsNode, start_port: int, heter_devices: Sequence[str] | None = None
) -> PsLayout:
    """--servers/--workers: servers' ports as given; a trainer listed without a port gets
    the first port from --start_port (`start_port`) not already listed on its host (the
    same on every node), and so does Paddle fleet's gloo endpoint on server 0's host."""
    assert node.servers is not None and node.trainers is not None
    used: dict[str, set[int]] = {}
    heters = [e for s in node.heter_stages for e in s]
    for host, port in (*node.servers, *node.trainers, *heters):
        if port is not None:
            used.setdefault(host, set()).add(port)

    def next_port(host: str) -> int:
        port = start_port
        while port in used.get(host, ()):
            port += 1
        if port > 65535:
            raise UsageError(f"--start_port: {start_port} leaves no free port", "--start_port")
        used.setdefault(host, set()).add(port)
        return port

    trainers = [netaddr.join(h, p if p is not None else next_port(h)) for h, p in node.trainers]
    servers = tuple(netaddr.join(h, p) for h, p in node.servers)
    gloo_host = node.servers[0][0]
    gloo_endpoint = netaddr.join(gloo_host, next_port(gloo_host))
    hosts = tuple(dict.fromkeys(h for h, _ in (*node.servers, *node.trainers, *heters)))
    stages = tuple(tuple(netaddr.join(h, p) for h, p in s) for s in node.heter_stages)
    _check_heter_endpoints(servers, trainers, stages)
    return PsLayout(
        servers,
        tuple(trainers),
        node.host,
        hosts.index(node.host),
        len(hosts),
        hosts,
        gloo_endpoint=gloo_endpoint,
        heter_stages=stages,
        heter_devices=tuple(heter_devices or ()) if stages else (),
    )


def _check_heter_endpoints(
    servers: Sequence[str], trainers: Sequence[str], stages: Sequence[Sequence[str]]
) -> None:
    """A heter trainer binds its endpoint: it cannot be a server's or a trainer's too."""
    others = {*servers, *trainers}
    for stage in stages:
        for ep in stage:
            if ep in others:
                raise UsageError(
                    f"--heter_workers: {ep} is also a --servers or --workers endpoint; "
                    "give each process its own port",
                    "--heter_workers",
                )


# PaddleCloud's PADDLE_PORT (`options.others.paddlecloud_ports`): the platform opened those
# ports on every node, so every node uses them, not only a one-node job
GIVEN_PORTS_SOURCE = "PADDLE_PORT"


def ports_given_everywhere(start_port_from: str | None) -> bool:
    """Whether every node of the job takes its ports from a given start (PaddleCloud)."""
    return start_port_from == GIVEN_PORTS_SOURCE


class PortRequest(NamedTuple):
    """The ports one round needs on this node, before any is reserved (`port_request`)."""

    count: int  # ports for this node's processes, free ones or consecutive from `start`
    start: int | None = None  # one node with a given start port: from here, consecutively
    source: str = ""  # where `start` came from (--start_port, PADDLE_START_PORT, ...)
    limit: int | None = None  # how many ports from `start` the source grants (--ports_num)
    workers_port: int | None = None  # claimed last: the workers' store (--master_port)
    # given ports on a node that does not host the workers' store: its entry's store slot,
    # published but neither claimed nor used (only node 0's is read: `collective_layout`)
    unused_slot: int | None = None


def port_request(
    *,
    reserve: int,
    nnodes: int,
    workers_port: int | None,
    hosts_workers_store: bool,
    start_port: int | None = None,
    start_port_from: str | None = None,
    ports_num: int | None = None,
) -> PortRequest:
    """What to reserve: `reserve` ports in all, of which a given --master_port (the workers'
    store, on the node that hosts it: `hosts_workers_store`) is claimed rather than free;
    one node with a start port takes consecutive ones from it. Many nodes reserve free ones
    (they trade them at the rendezvous), except PaddleCloud's given ports (PADDLE_PORT with
    TRAINER_PORTS_NUM: only those are open), which every node takes from PADDLE_PORT: its
    trainers' ports, and the workers' store's on the node that hosts it only (node 0: a
    given --master_port, else the port after its trainers'); the other nodes need just
    their trainers' ports, as under Paddle's own launcher.

    | reserve | nnodes | workers_port | hosts it | start_port_from | -> count, start, workers |
    | ------- | ------ | ------------ | -------- | --------------- | ------------------------ |
    | 0       | any    | any          | any      | any             | 0 (nothing to reserve)   |
    | 3       | 2      | None         | yes      | -               | 3 free                   |
    | 3       | 2      | 6170         | yes      | -               | 2 free + 6170            |
    | 3       | 2      | 6170         | no       | -               | 3 free                   |
    | 3       | 1      | 6170         | (always) | --start_port    | 2 from start + 6170      |
    | 3       | 2      | None         | any      | --start_port    | 3 free                   |
    | 3       | 2      | None         | yes      | PADDLE_PORT     | 3 from start             |
    | 3       | 2      | None         | no       | PADDLE_PORT     | 2 from start (+ unused)  |
    | 3       | 2      | 6170         | yes      | PADDLE_PORT     | 2 from start + 6170      |
    | 3       | 2      | 6170         | no       | PADDLE_PORT     | 2 from start (+ unused)  |
    """
    if not reserve:
        return PortRequest(0)
    claim = workers_port is not None and (nnodes == 1 or hosts_workers_store)
    count = reserve - 1 if claim else reserve
    everywhere = ports_given_everywhere(start_port_from)
    given = start_port_from and (nnodes == 1 or everywhere) and start_port is not None
    unused_slot = None
    if given and everywhere and nnodes > 1 and not hosts_workers_store and start_port:
        count = reserve - 1  # the workers' store is another node's: not one of our ports
        unused_slot = workers_port if workers_port is not None else start_port + count
    return PortRequest(
        count,
        start=start_port if given else None,
        source=(start_port_from or "") if given else "",
        limit=ports_num if given else None,
        workers_port=workers_port if claim else None,
        unused_slot=unused_slot,
    )


def port_span(first: int, last: int) -> str:
    """'port 6170' or 'ports 6170-6173': how messages name the ports a node needs."""
    return f"port {first}" if first == last else f"ports {first}-{last}"


def workers_port_overlap(request: PortRequest, ports: Sequence[int]) -> str | None:
    """Why the given --master_port cannot be the workers' store port (it is one of the
    trainers' consecutive ports), or None when it can."""
    if request.workers_port is None or request.workers_port not in ports:
        return None
    return (
        f"--master_port {request.workers_port}: also a trainer port from {request.source} "
        f"{request.start} (this node needs {port_span(ports[0], ports[-1])} for its trainers); "
        "give ports that do not overlap"
    )


def ps_lists_master(
    layout: PsLayout, master: str | None, master_addr: str | None, master_port: int
) -> tuple[str, int] | None:
    """Where the launchers of a PS job with given ports meet (None on one node): the node
    holding the first server, unless --master/--master_addr say otherwise; --master_port
    moved up past the ports the lists give there (`context.master.ps_master_port`)."""
    hosts = tuple(layout.node_hosts)
    if len(hosts) <= 1:
        return None
    given = master_address(master, master_addr, master_port, hosts)
    heters = (ep for s in layout.heter_stages for ep in s)
    taken = (*layout.servers, *layout.trainers, *heters, layout.gloo_endpoint)
    return (given[0], ps_master_port(given, master_port, taken))
