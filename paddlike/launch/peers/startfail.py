"""A node that cannot start tells the others why (`tell_start_failure`).

Without this, one node's error before it joins (a missing script there, its log
directory busy, bad devices: anything that exits 2 before the rendezvous) leaves every
other node waiting out --rdzv_timeout and then saying that node "never joined". The
failing launcher prints its own line first, then, bounded by a few seconds, reaches
the launchers' store and writes round 0's verdict (``rdzv/0/complete`` =
``failed_start:exit N:`` + a message naming it and its error, create-only). Every node
at the rendezvous, or arriving later while that store is up, then exits N (the failing
node's own code: 2 for bad input, 1 for a name that never resolved) with that message.
Every form of job tells: collective, PS by counts (--ips, PADDLE_TRAINERS) and PS by
lists (--servers/--workers, where the store's port comes from the lists).

Where the store is:

| this node is                                   | it                                      |
| ---------------------------------------------- | --------------------------------------- |
| another node (node 0 hosts the store)          | connects for up to `REACH_TIMEOUT` s    |
| the store's host (node 0)                      | hosts the store for up to `HOST_LINGER` |
|                                                | s, until every other node read it       |
| etcd (``--master etcd://``)                    | writes it under a lease, lingers alike  |

A node started after that (node 0's brief store is gone, or it never came up) times
out as before; its message says which nodes never contacted the store.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Mapping

from paddlike.contract import POD_IP
from paddlike.distributed.store import StoreClient, StoreError, StoreServer
from paddlike.launch import NamedTuple
from paddlike.launch.context.addresses import LocalAddresses, resolve_ipv4, route_source
from paddlike.launch.context.master import launchers_master, uses_etcd
from paddlike.launch.context.options.record import LaunchOptions, UsageError
from paddlike.launch.context.schedulers import detect_scheduler
from paddlike.launch.peers import protocol as p

REACH_TIMEOUT = 3.0  # seconds a failing node tries to reach the store (node 0 may not be up)
HOST_LINGER = 5.0  # seconds a failing node 0 keeps its store up for the others to read why
POLL = 0.02  # seconds between looks at the store while lingering


class Meeting(NamedTuple):
    """Where the launchers of a many-node job meet, as a failing node can tell."""

    address: str  # "ip:port", or the etcd master "etcd://..."
    nnodes: int
    store_host: bool  # this node hosts the TCP store (node 0)


def meeting_of(
    options: LaunchOptions, environ: Mapping[str, str], *, node_index: int | None = None
) -> Meeting | None:
    """Where this node would meet the others, from its options alone; None on one node
    or when the address cannot be worked out (in PS lists mode: when this node is not
    found in the lists)."""
    try:
        sched = detect_scheduler(environ)
    except UsageError:
        sched = None
    if options.dry_run:
        return None
    if options.is_ps and options.servers is not None and options.workers is not None:
        return _ps_lists_meeting(options, environ)  # the lists say how many nodes
    hosts = sched.hosts if sched is not None else tuple(options.ips)
    nnodes = options.nnodes or len(hosts)
    if nnodes <= 1 or options.dry_run:
        return None
    if uses_etcd(options):
        assert options.master is not None
        return Meeting(options.master, nnodes, False)
    try:
        host, port = launchers_master(options, hosts, sched.master if sched else None)
        master_ip = resolve_ipv4(host)
    except (UsageError, OSError, UnicodeError, ValueError):
        return None
    if node_index is None:
        node_index = options.node_rank if options.node_rank is not None else None
    if node_index is None and sched is not None:
        node_index = sched.node_index
    if node_index is not None and (options.ips_given or sched is not None):
        store_host = _nth_is(hosts, node_index, master_ip)
    elif node_index is not None:  # torchrun style: node 0 is the one at the master address
        store_host = node_index == 0
    else:  # unknown: the master address is ours (not loopback, shared by every local node)
        store_host = not master_ip.startswith("127.") and LocalAddresses().is_local(master_ip)
    return Meeting(f"{master_ip}:{port}", nnodes, store_host)


def _ps_lists_meeting(options: LaunchOptions, environ: Mapping[str, str]) -> Meeting | None:
    """PS lists mode: the store is where the job's plan puts it (the first listed host, at
    --master_port moved up past the ports the lists give there), worked out the same way."""
    from paddlike.launch.context.node_by_roles import match_role_lists
    from paddlike.launch.plan.layout import ps_lists_layout, ps_lists_master

    try:
        assert options.servers is not None and options.workers is not None
        ps_node = match_role_lists(options, environ, options.servers, options.workers)
        layout = ps_lists_layout(ps_node, options.start_port, options.heter_devices)
        master = ps_lists_master(layout, options.master, options.master_addr, options.master_port)
        if master is None:
            return None
        host, port = master
        master_ip = resolve_ipv4(host)
        own_ip = resolve_ipv4(layout.node_hosts[layout.node_index])
    except (UsageError, OSError, UnicodeError, ValueError):
        return None
    return Meeting(f"{master_ip}:{port}", layout.nnodes, own_ip == master_ip)


def _nth_is(hosts: tuple[str, ...], index: int | None, ip: str) -> bool:
    if index is None or index >= len(hosts):
        return False
    try:
        return resolve_ipv4(hosts[index]) == ip
    except (OSError, UnicodeError):
        return False


def _index_in(entries: tuple[str, ...], addr: str) -> int | None:
    for i, entry in enumerate(entries):
        with contextlib.suppress(OSError, UnicodeError):
            if resolve_ipv4(entry) == addr:
                return i
    return None


def own_address(options: LaunchOptions, environ: Mapping[str, str], meeting: Meeting) -> str:
    """This node's address as the others know it: --host, POD_IP, else the route's source
    towards the store (no packet is sent)."""
    given = options.host or environ.get(POD_IP)
    if given:
        return given
    if meeting.address.startswith("etcd://"):
        first = meeting.address.removeprefix("etcd://").split(",")[0]
    else:
        first = meeting.address
    host, _, port = first.rpartition(":")
    try:
        return route_source(resolve_ipv4(host), int(port))
    except (OSError, UnicodeError, ValueError):
        return ""


def failure_message(error: str, *, address: str, hostname: str, node_index: int | None) -> str:
    """What every other node prints: which launcher could not start, and its own line."""
    names = ", ".join(
        n for n in (f"node {node_index}" if node_index is not None else "", address) if n
    )
    if hostname and hostname != address:
        where = f"{hostname} ({names})" if names else hostname
    else:
        where = names or "another node"
    return (
        f"rendezvous: the launcher on {where} could not start: {error}; fix that there, "
        "then start the launcher on every node again"
    )


def tell_start_failure(
    options: LaunchOptions,
    environ: Mapping[str, str],
    error: str,
    *,
    node_index: int | None = None,
    address: str | None = None,
    exit_code: int = 2,
) -> bool:
    """Publish this node's start failure, and the code it exits with, to the others (see
    the module docstring); True when it reached the store. Bounded: at most REACH_TIMEOUT
    (+ HOST_LINGER) seconds."""
    meeting = meeting_of(options, environ, node_index=node_index)
    if meeting is None:
        return False
    if node_index is None:
        node_index = options.node_rank
    addr = address
    if addr is None and node_index is not None and options.ips_given:
        with contextlib.suppress(OSError, UnicodeError, IndexError):
            addr = resolve_ipv4(options.ips[node_index])
    if addr is None:
        addr = own_address(options, environ, meeting)
    if node_index is None and options.ips_given:
        node_index = _index_in(options.ips, addr)
    message = failure_message(
        error, address=addr, hostname=socket.gethostname(), node_index=node_index
    )
    verdict = p.failed_start_verdict(message, exit_code)
    token = options.job_token.encode() if options.job_token else None
    if meeting.address.startswith("etcd://"):
        return _tell_etcd(meeting, options, verdict)
    host, _, port = meeting.address.rpartition(":")
    if meeting.store_host:
        try:
            server = StoreServer(host, int(port), token=token).start()
        except OSError:
            pass  # the port is taken: a store may be there already, tell it as a client
        else:
            try:
                server.compare_set(p.complete_key(0), None, verdict)
                _linger(server.peek, meeting.nnodes)
            finally:
                server.close()
            return True
    try:
        kv = StoreClient(host, int(port), timeout=REACH_TIMEOUT, token=token, reconnect_timeout=0)
    except StoreError:
        return False
    try:
        kv.compare_set(p.complete_key(0), None, verdict)
    except StoreError:
        return False
    finally:
        with contextlib.suppress(StoreError):
            kv.close()
    return True


def _tell_etcd(meeting: Meeting, options: LaunchOptions, verdict: bytes) -> bool:
    """etcd keeps keys: the verdict carries a lease, revoked after the others read it (or
    HOST_LINGER), so that the same --job_id started again is not refused by it."""
    from paddlike.launch.peers.etcd import EtcdStore, parse_etcd_master

    try:
        kv = EtcdStore(
            parse_etcd_master(meeting.address),
            job_id=options.job_id,
            timeout=REACH_TIMEOUT,
            io_timeout=1.0,
        )
    except (ValueError, StoreError):
        return False
    deadline = time.monotonic() + REACH_TIMEOUT
    try:
        while True:
            try:
                kv.grant_lease(max(2.0, HOST_LINGER))
                kv.compare_set(p.complete_key(0), None, verdict)
                break
            except StoreError:
                if time.monotonic() + 0.2 > deadline:
                    return False
                time.sleep(0.2)  # etcd not answering yet: retry until the deadline
        _linger(kv.try_get, meeting.nnodes)
        return True
    finally:
        kv.close()


def _linger(peek, nnodes: int) -> None:  # type: ignore[no-untyped-def]
    """Until every other node arrived at round 0 and read the verdict (each writes
    ``left/<ticket>``), or HOST_LINGER seconds: this launcher's exit takes the key away."""
    deadline = time.monotonic() + HOST_LINGER
    while time.monotonic() < deadline:
        with contextlib.suppress(StoreError, ValueError):
            arrived = int(peek(p.arrived_key(0)) or b"0")
            if arrived >= nnodes - 1 and all(
                peek(p.left_key(0, t)) is not None for t in range(1, arrived + 1)
            ):
                return
        time.sleep(POLL)  # the others' reads are on their own connections: look again
