"""Which node this launcher is: resolve the node list and find our own entry.

Every node runs the same command, so each launcher must find itself in ``--ips``.
An entry is this node when its address is assigned to a local interface (psutil)
or can be bound here; ``--host`` or ``POD_IP`` names this node's address directly
and ``--node_rank`` its index. Schedulers (Slurm, PaddleCloud) may supply the list
and the index (`paddlike.launch.context.schedulers`); explicit flags that contradict them
are errors, never a silent rank 0.

The interface holding the matched address is reported too: workers get it as
GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME (a wrong NCCL interface is the most
reported multi-node hang), and the start banner says what was matched and why.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence

from paddlike.contract import POD_IP
from paddlike.launch import NamedTuple
from paddlike.launch.context.options.record import LaunchOptions, UsageError
from paddlike.launch.context.schedulers import SchedulerInfo, detect_scheduler


def _is_ipv4(text: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET, text)  # strict dotted quad, unlike inet_aton
    except OSError:
        return False
    return True


def _is_loopback(addr: str) -> bool:
    return addr.startswith("127.")


def resolve_ipv4(name: str) -> str:
    """The first IPv4 address of `name` (an IP is returned as is); OSError if none.

    The first address, not any: every node must derive the same endpoint list.
    """
    if _is_ipv4(name):
        return name
    infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"no IPv4 address for {name!r}")
    return str(infos[0][4][0])


class LocalAddresses:
    """This machine's IPv4 addresses and the interface holding each.

    Scanned (psutil) on first need only: loopback-only jobs never pay for it.
    """

    def __init__(self, by_addr: Mapping[str, str] | None = None, *, bind_probe: bool = True):
        self._by_addr = dict(by_addr) if by_addr is not None else None
        self.bind_probe = bind_probe  # also count addresses that can be bound (tests: off)

    @classmethod
    def scan(cls) -> LocalAddresses:
        return cls()

    @property
    def by_addr(self) -> Mapping[str, str]:
        """address -> interface name."""
        if self._by_addr is None:
            import psutil

            found: dict[str, str] = {}
            for ifname, addrs in psutil.net_if_addrs().items():
                for a in addrs:
                    if a.family == socket.AF_INET:
                        found.setdefault(a.address, ifname)
            self._by_addr = found
        return self._by_addr

    def interface_of(self, addr: str) -> str:
        """The interface holding `addr`; "lo" for all of 127.0.0.0/8 (Linux); "" if unknown."""
        if _is_loopback(addr):
            return "lo"
        return self.by_addr.get(addr, "")

    def is_local(self, addr: str) -> bool:
        """Assigned here, or bindable here (e.g. a floating address not listed per interface)."""
        if _is_loopback(addr) or addr in self.by_addr:
            return True
        if not self.bind_probe:
            return False
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, 0))
            except OSError:
                return False
        return True

    def listing(self) -> str:
        return ", ".join(f"{a} ({i})" for a, i in sorted(self.by_addr.items())) or "none"


class NodeMatch(NamedTuple):
    """The job's nodes and which one is this: the input of the plan."""

    entries: tuple[str, ...]  # the node list as given (hostnames or IPs)
    hosts: tuple[str, ...]  # their IPv4 addresses, same order
    node_index: int
    interface: str  # interface holding hosts[node_index]; "" if unknown
    reason: str  # how the match was made, for the start banner
    scheduler: str | None = None  # "slurm" | "paddlecloud" when it supplied the list
    scheduler_master: str | None = None  # PADDLE_MASTER from PaddleCloud
    # torchrun style (--nnodes N --node_rank R --master_addr A, no --ips): only this node's
    # address is known here (the others are ""); every launcher publishes its own at the
    # rendezvous, which then gives the node list
    discovered: bool = False
    # no --node_rank: the rendezvous assigns it (`node_index` is 0 until then, a placeholder)
    rank_known: bool = True

    @property
    def address(self) -> str:
        return self.hosts[self.node_index]

    @property
    def nnodes(self) -> int:
        return len(self.hosts)


def _resolve_or_none(name: str, resolve: Callable[[str], str]) -> str | None:
    try:
        return resolve(name)
    except (OSError, UnicodeError):
        return None


def _resolve_for(option: str, name: str, resolve: Callable[[str], str]) -> str:
    """`resolve(name)`, or the UsageError naming the option the name came from."""
    try:
        return resolve(name)
    except (OSError, UnicodeError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise UsageError(f"{option}: {name!r} does not resolve ({why})", option) from None


def _resolve_all(
    entries: Sequence[str], option: str, resolve: Callable[[str], str]
) -> tuple[str, ...]:
    seen: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e in seen:
            raise UsageError(
                f"{option}: entry {e!r} appears twice (positions {seen[e]} and {i}), got "
                f"{','.join(entries)!r}",
                option,
            )
        seen[e] = i
    hosts = [_resolve_for(option, e, resolve) for e in entries]
    by_addr: dict[str, str] = {}
    for e, h in zip(entries, hosts, strict=True):
        if h in by_addr:
            raise UsageError(
                f"{option}: {by_addr[h]!r} and {e!r} are the same node ({h}), got "
                f"{','.join(entries)!r}",
                option,
            )
        by_addr[h] = e
    return tuple(hosts)


def _merge_scheduler(
    options: LaunchOptions, sched: SchedulerInfo | None
) -> tuple[tuple[str, ...], str, int | None, str | None]:
    """(entries, option name for messages, node_rank, host) after merging a scheduler's view."""
    if sched is None:
        return options.ips, "--ips", options.node_rank, options.host
    where = f"{sched.source} ({sched.name})"
    if options.ips_given and tuple(options.ips) != sched.hosts:
        raise UsageError(
            f"--ips: {','.join(options.ips)!r} contradicts {where}, which lists "
            f"{','.join(sched.hosts)!r}; drop --ips or run outside the scheduler's environment",
            "--ips",
        )
    if options.nnodes is not None and options.nnodes != len(sched.hosts):
        raise UsageError(
            f"--nnodes: {options.nnodes} contradicts {where}, which lists {len(sched.hosts)}",
            "--nnodes",
        )
    node_rank = options.node_rank
    if sched.node_index is not None:
        if node_rank is not None and node_rank != sched.node_index:
            var = "SLURM_NODEID" if sched.name == "slurm" else "PADDLE_TRAINER_ID"
            raise UsageError(
                f"--node_rank: {node_rank} contradicts {var}={sched.node_index}", "--node_rank"
            )
        node_rank = sched.node_index
    host = options.host if options.host is not None else sched.host
    return sched.hosts, f"--ips (from {where})", node_rank, host


def match_node(
    options: LaunchOptions,
    environ: Mapping[str, str],
    *,
    local: LocalAddresses | None = None,
    resolve: Callable[[str], str] = resolve_ipv4,
) -> NodeMatch:
    """Find this node in the node list; raise `UsageError` (one line) when it cannot.

    An elastic job (--nnodes MIN:MAX, --elastic_level 0|1) has no node list: it is
    matched like the identical command on every node, ranks from each round's
    rendezvous, whatever a scheduler lists (its allocation is not the job's range)."""
    if options.min_nnodes is not None:
        return match_node_by_rank(options, environ, local=local, resolve=resolve)
    sched = detect_scheduler(environ)
    if sched is None and not options.ips_given and (options.nnodes or 1) > 1:
        return match_node_by_rank(options, environ, local=local, resolve=resolve)
    entries, option, node_rank, host = _merge_scheduler(options, sched)
    # POD_IP alone (no scheduler list, no --host) is only a hint: many Kubernetes pods
    # set it for every container, including single-node jobs on 127.0.0.1.
    hint_only = host is None and sched is None
    if hint_only and environ.get(POD_IP):
        host = environ[POD_IP]
    host_option = "--host" if options.host is not None else POD_IP
    if options.nnodes is not None and options.nnodes != len(entries):
        raise UsageError(
            f"--nnodes: {options.nnodes} contradicts {option}, which lists {len(entries)} "
            f"({','.join(entries)}); give --ips with one entry per node",
            "--nnodes",
        )
    if node_rank is not None and node_rank >= len(entries):
        raise UsageError(
            f"--node_rank: {node_rank} is out of range for {option} {','.join(entries)!r}",
            "--node_rank",
        )
    hosts = _resolve_all(entries, option, resolve)
    local = local if local is not None else LocalAddresses.scan()

    def found(index: int, why: str) -> NodeMatch:
        return NodeMatch(
            entries=tuple(entries),
            hosts=hosts,
            node_index=index,
            interface=local.interface_of(hosts[index]),
            reason=f"matched {option} entry {index} ({entries[index]}), {why}",
            scheduler=sched.name if sched else None,
            scheduler_master=sched.master if sched else None,
        )

    if host is not None and hint_only and _resolve_or_none(host, resolve) not in hosts:
        host = None
    if host is not None:
        addr = _resolve_for(host_option, host, resolve)
        if addr not in hosts:
            raise UsageError(
                f"{host_option}: {host!r} is not one of {option} {','.join(entries)!r}",
                host_option,
            )
        index = hosts.index(addr)
        if node_rank is not None and node_rank != index:
            raise UsageError(
                f"--node_rank: {node_rank} contradicts {host_option} {host!r}, which is entry "
                f"{index} of {option}",
                "--node_rank",
            )
        return found(index, f"named by {host_option}")
    if node_rank is not None:
        if not local.is_local(hosts[node_rank]):
            raise UsageError(
                f"--node_rank: {node_rank} names {entries[node_rank]!r} ({hosts[node_rank]}), "
                f"which is not an address of this node (local addresses: {local.listing()}); "
                "pass --host if this node is reached through another address",
                "--node_rank",
            )
        by = "SLURM_NODEID" if sched and sched.name == "slurm" else "the node rank"
        return found(node_rank, f"chosen by {by}")
    mine = [i for i, h in enumerate(hosts) if local.is_local(h)]
    if not mine:
        raise UsageError(
            f"{option}: no entry of {','.join(entries)!r} is an address of this node "
            f"(local addresses: {local.listing()}); pass --host to name this node",
            option.split(" ")[0],
        )
    if len(mine) > 1:
        both = " and ".join(f"{entries[i]!r} ({hosts[i]})" for i in mine)
        raise UsageError(
            f"{option}: {both} are all addresses of this node; pass --node_rank or --host to "
            "choose one",
            option.split(" ")[0],
        )
    return found(mine[0], "an address of this node")


def route_source(addr: str, port: int) -> str:
    """The local address this machine would send from to reach `addr` (the kernel's route
    choice). A UDP socket's connect() only picks the route: no packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((addr, port or 9))
        return str(s.getsockname()[0])


def _meeting_host(options: LaunchOptions) -> tuple[str, int, str]:
    """(host, port, option) where the launchers meet, for the torchrun-style match."""
    master = options.master
    if master and master.startswith("etcd://"):
        first = master.removeprefix("etcd://").split(",")[0]
        host, _, port = first.rpartition(":")
        return host, int(port), "--master"
    if master:
        host, _, port = master.rpartition(":")
        return host, int(port), "--master"
    if options.master_addr:
        return options.master_addr, options.master_port, "--master_addr"
    raise UsageError(
        f"--master_addr: needed with --nnodes {options.nnodes} when --ips is not given: "
        "the address of node 0 (--node_rank 0), where the launchers meet; or give --ips "
        "with one entry per node",
        "--master_addr",
    )


def match_node_by_rank(
    options: LaunchOptions,
    environ: Mapping[str, str],
    *,
    local: LocalAddresses | None = None,
    resolve: Callable[[str], str] = resolve_ipv4,
    route: Callable[[str, int], str] = route_source,
) -> NodeMatch:
    """torchrun / OneFlow style: ``--nnodes N --node_rank R --master_addr A`` and no --ips.

    This node is entry R; its address is --host (or POD_IP), else node 0's --master_addr
    for R = 0 (which must then be an address of this node), else the local source
    address of the route to A. The other entries stay "" until the rendezvous.
    """
    nnodes = int(options.nnodes or 1)
    elastic = options.min_nnodes is not None  # MAX entries; --node_rank ignored (options)
    if options.node_rank is None and not options.master and not options.master_addr:
        raise UsageError(
            f"--node_rank: needed with --nnodes {nnodes} when --ips is not given (0 on the "
            "node at --master_addr, 1..N-1 on the others); or give every node the same "
            "--master ip:port (node ranks are then assigned at the rendezvous), or --ips "
            "with one entry per node",
            "--node_rank",
        )
    host, port, option = _meeting_host(options)
    master_ip = _resolve_for(option, host, resolve)
    local = local if local is not None else LocalAddresses.scan()
    etcd = bool(options.master and options.master.startswith("etcd://"))
    given = options.host if options.host is not None else environ.get(POD_IP) or None
    given_option = "--host" if options.host is not None else POD_IP
    if elastic and options.host is None and options.ips_given:
        given, given_option = options.ips[0], "--ips"  # one entry: this node's address
    if options.node_rank is None or elastic:
        if etcd and not elastic:
            raise UsageError(
                f"--node_rank: needed with --nnodes {nnodes} and etcd when --ips is not given "
                "(ranks are assigned at the rendezvous only at node 0's store, --master "
                "ip:port); or give --ips with one entry per node",
                "--node_rank",
            )
        return _match_unranked(
            nnodes, master_ip, host, port, option, given, given_option, local, resolve, route
        )
    rank = options.node_rank
    if rank == 0 and not etcd and not local.is_local(master_ip):
        raise UsageError(
            f"--node_rank: 0 hosts the launchers' store at {option} {host} ({master_ip}), but "
            f"that is not an address of this node (local addresses: {local.listing()}); run "
            f"--node_rank 0 on {host}, or point {option} at this node",
            "--node_rank",
        )
    if given is not None:
        addr = _resolve_for(given_option, given, resolve)
        if rank == 0 and not etcd and addr != master_ip:
            raise UsageError(
                f"{given_option}: {given!r} ({addr}) is not {option} {host} ({master_ip}), "
                "where node 0 hosts the launchers' store",
                given_option,
            )
        why = f"address named by {given_option}"
    elif rank == 0 and not etcd:
        addr, why = master_ip, f"address of {option} {host}"
    else:
        addr = _route_to(master_ip, port, host, option, route)
        why = f"the address this node reaches {option} {host} from"
    hosts = tuple(addr if i == rank else "" for i in range(nnodes))
    return NodeMatch(
        entries=hosts,
        hosts=hosts,
        node_index=rank,
        interface=local.interface_of(addr),
        reason=f"node {rank} of {nnodes} by --node_rank, {addr}: {why}",
        discovered=True,
    )


def _route_to(
    master_ip: str, port: int, host: str, option: str, route: Callable[[str, int], str]
) -> str:
    """This node's address towards the master (the route's source), or the UsageError."""
    try:
        return route(master_ip, port)
    except OSError as err:
        raise UsageError(
            f"{option}: no route from this node to {host} ({master_ip}): "
            f"{err.strerror or err}; pass --host with this node's address",
            option,
        ) from None


def _match_unranked(
    nnodes: int,
    master_ip: str,
    host: str,
    port: int,
    option: str,
    given: str | None,
    given_option: str,
    local: LocalAddresses,
    resolve: Callable[[str], str],
    route: Callable[[str, int], str],
) -> NodeMatch:
    """The identical command on every node (no --node_rank): this node's address is
    --host / POD_IP, else the master's when it is ours (then it may host the store, and
    is node 0), else the route's source towards it. The rank comes from the rendezvous."""
    if given is not None:
        addr, why = _resolve_for(given_option, given, resolve), f"named by {given_option}"
    elif local.is_local(master_ip):
        addr, why = master_ip, f"{option} {host} is an address of this node"
    else:
        addr = _route_to(master_ip, port, host, option, route)
        why = f"the address this node reaches {option} {host} from"
    return NodeMatch(
        entries=(addr,) + ("",) * (nnodes - 1),
        hosts=(addr,) + ("",) * (nnodes - 1),
        node_index=0,
        interface=local.interface_of(addr),
        reason=f"rank assigned at the rendezvous, {addr}: {why}",
        discovered=True,
        rank_known=False,
    )


class PsNode(NamedTuple):
    """This node in parameter-server mode: the role lists (resolved) and our address.

    `servers` / `trainers` are None in counts mode (--server_num/--worker_num), where
    every role runs on this node.
    """

    host: str
    interface: str
    reason: str
    servers: tuple[tuple[str, int], ...] | None = None
    trainers: tuple[tuple[str, int | None], ...] | None = None
    heter_stages: tuple[tuple[tuple[str, int], ...], ...] = ()  # ps-heter: --heter_workers


def _split_entry(entry: str) -> tuple[str, int | None]:
    host, sep, port = entry.rpartition(":")
    return (host, int(port)) if sep else (entry, None)


def match_ps_node(
    options: LaunchOptions,
    environ: Mapping[str, str],
    *,
    local: LocalAddresses | None = None,
    resolve: Callable[[str], str] = resolve_ipv4,
) -> PsNode:
    """Find this node among the PS role lists (same local matching as --ips).

    A node that appears in neither list has nothing to run: an error.
    """
    if options.servers is None or options.workers is None:
        node = match_node(options, environ, local=local, resolve=resolve)
        if not node.rank_known:  # ranks at the rendezvous are for collective jobs only
            raise UsageError(
                f"--node_rank: needed with --nnodes {node.nnodes} in parameter-server mode "
                "when --ips is not given; or give --ips with one entry per node",
                "--node_rank",
            )
        return PsNode(node.address, node.interface, node.reason)
    local = local if local is not None else LocalAddresses.scan()
    resolved: dict[str, str] = {}
    parsed: dict[str, list[tuple[str, int | None]]] = {"--servers": [], "--workers": []}
    for option, entries in (("--servers", options.servers), ("--workers", options.workers)):
        for entry in entries:
            name, port = _split_entry(entry)
            if name not in resolved:
                resolved[name] = _resolve_for(option, name, resolve)
            parsed[option].append((resolved[name], port))
    servers = tuple((h, p) for h, p in parsed["--servers"] if p is not None)
    if len(set(servers)) != len(servers):
        raise UsageError(
            f"--servers: two entries name the same endpoint, got {','.join(options.servers)!r}",
            "--servers",
        )
    stages = _heter_stages(options, resolved, resolve)
    all_hosts = [h for h, _ in (*servers, *parsed["--workers"], *(e for s in stages for e in s))]
    host_opt = options.host if options.host is not None else environ.get(POD_IP) or None
    host_option = "--host" if options.host is not None else POD_IP
    host = None
    if options.host is None and host_opt is not None:
        host = _resolve_or_none(host_opt, resolve)
        if host not in all_hosts:  # POD_IP is only a hint (see match_node)
            host_opt = host = None
    if host_opt is not None and host is None:
        host = _resolve_for(host_option, host_opt, resolve)
    mine = match_local_entries(all_hosts, local=local, host=host)
    if mine is None:
        seen = (
            f"{host_option} {host_opt!r}"
            if host is not None
            else (f"local addresses: {local.listing()}")
        )
        heters = (
            f", heter trainers {';'.join(','.join(s) for s in options.heter_workers)!r}"
            if options.heter_workers
            else ""
        )
        raise UsageError(
            f"--servers/--workers: this node has no role: no entry is an address of this node "
            f"({seen}); servers {','.join(options.servers)!r}, workers "
            f"{','.join(options.workers)!r}{heters}",
            "--servers",
        )
    how = f"named by {host_option}" if host is not None else "an address of this node"
    return PsNode(
        host=mine,
        interface=local.interface_of(mine),
        reason=f"matched --servers/--workers host {mine}, {how}",
        servers=servers,
        trainers=tuple(parsed["--workers"]),
        heter_stages=stages,
    )


def _heter_stages(
    options: LaunchOptions, resolved: dict[str, str], resolve: Callable[[str], str]
) -> tuple[tuple[tuple[str, int], ...], ...]:
    """--heter_workers resolved like the other lists: per stage, (address, port)."""
    stages = []
    for stage in options.heter_workers or ():
        members = []
        for entry in stage:
            name, port = _split_entry(entry)
            if name not in resolved:
                resolved[name] = _resolve_for("--heter_workers", name, resolve)
            assert port is not None  # options require ports in --heter_workers
            members.append((resolved[name], port))
        stages.append(tuple(members))
    taken = [*(e for s in stages for e in s)]
    if len(set(taken)) != len(taken):
        raise UsageError(
            "--heter_workers: two entries name the same endpoint, got "
            f"{';'.join(','.join(s) for s in options.heter_workers or ())!r}",
            "--heter_workers",
        )
    return tuple(stages)


def match_local_entries(
    hosts: Sequence[str], *, local: LocalAddresses, host: str | None
) -> str | None:
    """This node's address among `hosts` (may repeat), or None: for PS role lists.

    Raises `UsageError` when two different local addresses appear (ambiguous).
    """
    distinct = list(dict.fromkeys(hosts))
    if host is not None:
        return host if host in distinct else None
    mine = [h for h in distinct if local.is_local(h)]
    if len(mine) > 1:
        raise UsageError(
            f"--servers/--workers: {' and '.join(mine)} are all addresses of this node; "
            "pass --host to choose one",
            "--servers",
        )
    return mine[0] if mine else None
