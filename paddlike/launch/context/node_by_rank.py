"""This node by its rank, torchrun / OneFlow style: --nnodes N --node_rank R
--master_addr A and no node list, or the identical command on every node (ranks from
the rendezvous).

Only this node's own address can be known here (--host, POD_IP, the master's address
when it is ours, or the route's source towards it); the other nodes' addresses come from
the rendezvous, where every launcher publishes its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from paddlike import netaddr
from paddlike.contract import POD_IP
from paddlike.launch.context.addresses import (
    LocalAddresses,
    resolve_for,
    resolve_host,
    route_source,
)
from paddlike.launch.context.names import NameWait, resolve_names
from paddlike.launch.context.nodematch import NodeMatch
from paddlike.launch.context.options.record import LaunchOptions, UsageError


def _meeting_host(options: LaunchOptions) -> tuple[str, int, str]:
    """(host, port, option) where the launchers meet, for the torchrun-style match."""
    master = options.master
    if master and master.startswith("etcd://"):
        first = master.removeprefix("etcd://").split(",")[0]
        host, port = netaddr.split(first)
        return host, int(port), "--master"
    if master:
        host, port = netaddr.split(master)
        return host, int(port), "--master"
    if options.master_addr:
        return netaddr.bare(options.master_addr), options.master_port, "--master_addr"
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
    resolve: Callable[[str], str] = resolve_host,
    route: Callable[[str, int], str] = route_source,
    wait: NameWait | None = None,
) -> NodeMatch:
    """torchrun / OneFlow style: ``--nnodes N --node_rank R --master_addr A`` and no --ips.

    This node is entry R; its address is --host (or POD_IP), else node 0's --master_addr
    for R = 0 (which must then be an address of this node), else the local source
    address of the route to A. The other entries stay "" until the rendezvous.
    With `wait`, a master's name that does not resolve yet is waited for.
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
    master_ip = resolve_names({host: option}, resolve, wait)[host]
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
        match = _match_unranked(
            nnodes, master_ip, host, port, option, given, given_option, local, resolve, route
        )
        if etcd or match.address == master_ip:
            return match
        return match._replace(node0_host=master_ip)  # node 0 is at the store's address
    rank = options.node_rank
    if rank == 0 and not etcd and not local.is_local(master_ip):
        raise UsageError(
            f"--node_rank: 0 hosts the launchers' store at {option} {host} ({master_ip}), but "
            f"that is not an address of this node (local addresses: {local.listing()}); run "
            f"--node_rank 0 on {host}, or point {option} at this node",
            "--node_rank",
        )
    if given is not None:
        addr = resolve_for(given_option, given, resolve)
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
        addr, why = resolve_for(given_option, given, resolve), f"named by {given_option}"
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
