"""A node that cannot start tells the others why: what it tells and where, worked out from
its options (`start_failure`: where the launchers meet, in every form of job, and who this
node is). The telling itself (round 0's verdict, how long node 0 lingers) is
`peers.start_verdict`, which sees only that narrow record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from paddlike.contract import POD_IP
from paddlike.launch.context.addresses import LocalAddresses, resolve_ipv4, route_source
from paddlike.launch.context.master import (
    cannot_host_line,
    launchers_master,
    uses_etcd,
    workers_port,
)
from paddlike.launch.context.options.record import LaunchOptions, UsageError
from paddlike.launch.context.schedulers import detect_scheduler
from paddlike.launch.peers.rendezvous_errors import RendezvousError, StoreBindError
from paddlike.launch.peers.start_verdict import Meeting, StartFailure
from paddlike.launch.peers.start_verdict import tell_start_failure as tell


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
    workers = workers_port(options)  # node 0's, claimed before the rendezvous
    spare = f"{master_ip}:{workers}" if workers is not None and store_host else None
    return Meeting(f"{master_ip}:{port}", nnodes, store_host, spare)


def cannot_host(
    options: LaunchOptions | None, environ: Mapping[str, str], error: RendezvousError
) -> str:
    """Node 0's line when it cannot host the launchers' store (a `StoreBindError`): named
    after the option that chose the port (`master.cannot_host_line`), a scheduler's
    PADDLE_MASTER included; any other error's own line."""
    if options is None or not isinstance(error, StoreBindError):
        return str(error)
    try:
        sched = detect_scheduler(environ)
    except UsageError:
        sched = None
    scheduler_master = sched.master if sched is not None else None
    return cannot_host_line(options, scheduler_master, error.address, error.reason)


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


def start_failure(
    options: LaunchOptions,
    environ: Mapping[str, str],
    *,
    node_index: int | None = None,
    address: str | None = None,
) -> StartFailure | None:
    """What this node tells the others if it cannot start, from its options alone: where
    they meet (`meeting_of`) and who it is; None on one node, or when where they meet
    cannot be worked out."""
    meeting = meeting_of(options, environ, node_index=node_index)
    if meeting is None:
        return None
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
    token = options.job_token.encode() if options.job_token else None
    return StartFailure(meeting, token, options.job_id, node_index, addr)


def tell_start_failure(
    options: LaunchOptions,
    environ: Mapping[str, str],
    error: str,
    *,
    node_index: int | None = None,
    address: str | None = None,
    exit_code: int = 2,
) -> bool:
    """`start_verdict.tell_start_failure` for this node as its options describe it; True
    when it reached the store. Bounded: a few seconds at most."""
    failure = start_failure(options, environ, node_index=node_index, address=address)
    if failure is None:
        return False
    return tell(failure, error, exit_code=exit_code)
