"""The two ways a launcher reaches the other nodes, one function each: node 0's TCP store
(`open_store_link`: node 0 hosts it, every node connects) and etcd (`open_etcd_link`:
none hosts anything, each node holds a lease); `open_link` picks the one the options
say. Both return a `Link`: the connection, how to open another, and how to make a
round's `JobWatch` on it. `session.StorePeers` runs
the job's rounds over whichever link it was given.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from paddlike import netaddr
from paddlike.distributed.store import (
    StoreAuthError,
    StoreClient,
    StoreError,
    StoreServer,
    StoreTimeoutError,
)
from paddlike.launch import NamedTuple
from paddlike.launch.context.addresses import resolve_host
from paddlike.launch.context.master import uses_etcd
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.errors import (
    RendezvousError,
    RendezvousTimeout,
    StoreHostError,
    StoreRefused,
)
from paddlike.launch.peers.kv import (
    CONNECT_CHUNK,
    KV,
    Progress,
    connect_with_progress,
)
from paddlike.launch.peers.liveness import CounterLiveness, LeaseLiveness
from paddlike.launch.peers.notice import encode_notice
from paddlike.launch.peers.stackreq import StackChannel
from paddlike.launch.peers.watch import HEARTBEATS_PER_TIMEOUT, JobWatch, WatchSpec
from paddlike.launch.plan.membership import LOST
from paddlike.launch.plan.policy import launcher_died_cause
from paddlike.launch.plan.world import node_label

if TYPE_CHECKING:
    from paddlike.launch.context.options import LaunchOptions
    from paddlike.launch.plan.nodejob import NodeJob


class Link(NamedTuple):
    """A launcher's connection to the job's store for the whole job."""

    kv: KV
    connect: Callable[[], KV]  # a fresh, short-lived connection (for `publish_stop`)
    make_watch: Callable[[WatchSpec], JobWatch]
    # whether this launcher's exit takes away keys the others may still read: node 0's on
    # the TCP store (it hosts it), every node's on etcd (its keys carry its lease)
    keeps_keys: bool
    server: StoreServer | None = None  # node 0's store, hosted by this launcher
    master: tuple[str, int] | None = None  # the TCP store's address
    token: bytes | None = None


def open_link(
    options: LaunchOptions,
    job: NodeJob,
    *,
    progress: Progress,
    waiting: Callable[[str], None],
) -> Link:
    """Connect to the job's other nodes: through etcd with ``--master etcd://...``, else
    through node 0's store (hosted here on node 0). Raises RendezvousError (a store
    that cannot be reached or hosted included), never a bare StoreError."""
    try:
        if uses_etcd(options):
            assert options.master is not None
            return open_etcd_link(
                master=options.master,
                job_id=options.job_id,
                node_index=job.index,
                rdzv_timeout=options.rdzv_timeout,
                heartbeat_timeout=options.heartbeat_timeout,
                progress=progress,
                waiting=waiting,
                elastic=job.elastic is not None,
            )
        assert job.master is not None
        return open_store_link(
            master=job.master,
            node_index=job.index,
            hosts=job.hosts,
            token=options.job_token.encode() if options.job_token else None,
            rdzv_timeout=options.rdzv_timeout,
            heartbeat_timeout=options.heartbeat_timeout,
            progress=progress,
            waiting=waiting,
            rank_known=job.rank_known,
        )
    except StoreError as exc:
        raise RendezvousError(str(exc)) from exc


def open_store_link(
    *,
    master: tuple[str, int],
    node_index: int,
    hosts: Sequence[str],
    token: bytes | None,
    rdzv_timeout: float,
    heartbeat_timeout: float,
    progress: Progress,
    waiting: Callable[[str], None] = lambda what: None,
    rank_known: bool = True,
) -> Link:
    """Node 0 starts the store at `master`; every node connects (retrying to the timeout,
    with a progress line while node 0's store is not up). `waiting` is told what the
    launcher waits for (for an interrupt's message).

    Without a rank (`rank_known` False: ranks assigned at the rendezvous) a node whose
    address is the master's tries to host the store, and is node 0 if it can; when
    another launcher holds the port already (several nodes on one machine), it joins."""
    server = None
    address = netaddr.join(*master)  # [fd00::1]:6170 for IPv6
    # torchrun style on one machine: every node's address is the master's; only node 0
    # hosts the store then
    if is_store_host(master[0], hosts, node_index) and (all(hosts) or node_index == 0):
        # torchrun style: the other nodes' addresses are unknown until they publish them,
        # so any peer may connect (a --job_token still keeps strangers out)
        allowed = hosts if all(hosts) else None
        try:
            server = host_store(master[0], master[1], allowed_hosts=allowed, token=token)
        except StoreHostError:
            if rank_known:
                raise
    store_host = "node 0" if server is None else "this node"
    what = f"waiting for {store_host} ({address}) to host the launchers' store"
    waiting(what)
    try:
        kv = connect_with_progress(master, token, rdzv_timeout, heartbeat_timeout, what, progress)
    except StoreTimeoutError as exc:
        if server is not None:
            server.close()
        raise RendezvousTimeout(
            f"rendezvous: node 0 ({hosts[0]}) never opened the launchers' store at "
            f"{address} within {rdzv_timeout:g} s (--rdzv_timeout): {exc}; a node 0 that "
            "cannot start keeps its store up only a few seconds to say why (see its output)"
        ) from exc
    except StoreAuthError as exc:
        if server is not None:
            server.close()
        # without a rank yet, `node_index` is a placeholder: name this launcher instead
        who = f"the launcher on {node_label(node_index, hosts)}" if rank_known else None
        raise token_refused(exc, who or "this launcher") from exc
    except BaseException:
        if server is not None:
            server.close()
        raise
    # Each call of a watch's own connections gives up after one heartbeat period, so a cut
    # network is noticed within the timeout rather than after a TCP timeout.
    period = heartbeat_timeout / HEARTBEATS_PER_TIMEOUT

    def watch_connection() -> StoreClient:
        return StoreClient(
            *master,
            timeout=heartbeat_timeout,
            token=token,
            reconnect_timeout=period,
            io_timeout=period,
        )

    def make_watch(spec: WatchSpec) -> JobWatch:
        """Node 0 monitors the heartbeats, counted on a connection of their own."""
        beats = watch_connection()
        return JobWatch(
            connect=watch_connection,
            kv=kv,
            liveness=CounterLiveness(beats, spec.node_index, len(spec.hosts), heartbeat_timeout),
            node_index=spec.node_index,
            nnodes=len(spec.hosts),
            hosts=spec.hosts,
            round_=spec.round,
            heartbeat_timeout=heartbeat_timeout,
            monitor=spec.node_index == 0,
            heartbeat_kv=beats,
            elastic=spec.elastic,
            log_dir=spec.log_dir,
            services=spec.services,
            stacks=_stacks(watch_connection, kv, spec),
            hosts_store=server is not None,
            # node 0's store goes with its launcher: nobody to tell then
            death_notice=None if server is not None else _death_notice(spec, master, token),
        )

    def connect() -> KV:
        return StoreClient(*master, timeout=1.0, token=token, reconnect_timeout=0.0)

    return Link(
        kv=kv,
        connect=connect,
        make_watch=make_watch,
        keeps_keys=server is not None,
        server=server,
        master=master,
        token=token,
    )


def open_etcd_link(
    *,
    master: str,
    job_id: str | None,
    node_index: int,
    rdzv_timeout: float,
    heartbeat_timeout: float,
    progress: Progress,
    waiting: Callable[[str], None] = lambda what: None,
    elastic: bool = False,
) -> Link:
    """Every node talks to the etcd cluster; none hosts anything. Each holds a lease
    (TTL --heartbeat_timeout) and marks itself alive under it (`elastic`: once per
    round, as ranks change between rounds)."""
    from paddlike.launch.peers.etcd import EtcdStore, EtcdUnreachable, parse_etcd_master

    kv = EtcdStore(
        parse_etcd_master(master),
        job_id=job_id,
        timeout=rdzv_timeout,
        io_timeout=max(0.5, heartbeat_timeout / HEARTBEATS_PER_TIMEOUT),
    )
    what = f"waiting for etcd at {kv.address} to answer"
    waiting(what)
    started = time.monotonic()
    deadline, delay = started + rdzv_timeout, 0.05
    try:
        while True:
            try:
                if kv.lease is None:
                    kv.grant_lease(heartbeat_timeout)
                kv.set(p.alive_key(node_index), str(os.getpid()))
                break
            except EtcdUnreachable as exc:
                if time.monotonic() + delay > deadline:
                    raise RendezvousTimeout(
                        f"rendezvous: etcd at {kv.address} did not answer within "
                        f"{rdzv_timeout:g} s (--rdzv_timeout): {exc}"
                    ) from exc
                if time.monotonic() - started >= CONNECT_CHUNK:
                    progress(what, time.monotonic() - started, rdzv_timeout)
                time.sleep(delay)  # etcd not up yet: back off and retry until the deadline
                delay = min(delay * 2, 1.0)
            except StoreError as exc:
                raise RendezvousError(f"--master: cannot use etcd at {kv.address}: {exc}") from exc
    except BaseException:
        kv.close()
        raise

    def make_watch(spec: WatchSpec) -> JobWatch:
        """Every node monitors the others' leases."""
        nnodes = len(spec.hosts)
        liveness = LeaseLiveness(
            kv,
            spec.node_index,
            nnodes,
            round_=spec.round if elastic else None,
            timeout=heartbeat_timeout,
        )
        if elastic:
            kv.set(p.round_alive_key(spec.round, spec.node_index), str(os.getpid()))
        return JobWatch(
            connect=kv.sharing_lease,
            kv=kv,
            liveness=liveness,
            node_index=spec.node_index,
            nnodes=nnodes,
            hosts=spec.hosts,
            round_=spec.round,
            heartbeat_timeout=heartbeat_timeout,
            monitor=True,
            elastic=spec.elastic,
            log_dir=spec.log_dir,
            services=spec.services,
            stacks=_stacks(kv.sharing_lease, kv, spec),
            death_notice=_death_notice(spec, etcd=kv.endpoints, job_id=job_id),
        )

    return Link(kv=kv, connect=kv.sharing_lease, make_watch=make_watch, keeps_keys=True)


def _death_notice(
    spec: WatchSpec,
    master: tuple[str, int] | None = None,
    token: bytes | None = None,
    *,
    etcd: Sequence[tuple[str, int]] = (),
    job_id: str | None = None,
) -> bytes:
    """What this node's guardian writes to node 0's store if this launcher dies during the
    round (`run.guardian`): the lost node as the round's cause, and its end, so that the
    others name it at once instead of blaming their own workers, whose collectives fail
    as soon as this node's workers are gone."""
    cause = launcher_died_cause(
        spec.node_index,
        spec.hosts,
        os.getpid(),
        ends_job=spec.elastic is None,
        membership=LOST if spec.elastic is not None else None,
    )
    marks = [
        (p.end_key(spec.round, spec.node_index), p.END_LOST),
        (p.done_key(spec.round, spec.node_index), p.END_LOST),
    ]
    cause_write = (p.abort_key(spec.round), p.encode_cause(cause))
    return encode_notice(master, token, cause_write, marks, etcd=etcd, job_id=job_id)


def _stacks(connect: Callable[[], KV], kv: KV, spec: WatchSpec) -> StackChannel:
    """The round's job-wide stack requests (SIGUSR1, --hang_timeout)."""
    nnodes = len(spec.hosts)
    return StackChannel(
        connect=connect, kv=kv, round_=spec.round, node_index=spec.node_index, nnodes=nnodes
    )


def token_refused(exc: StoreAuthError, who: str) -> StoreRefused:
    """The refused side of a token mismatch (`who`: the refused launcher, as its user
    knows it): a configuration error (exit 2)."""
    return StoreRefused(
        f"rendezvous: {exc}; {who} needs the same --job_token (or PADDLIKE_JOB_TOKEN, "
        "--job_token_file) as the one on node 0, which hosts that store"
    )


def is_store_host(master_host: str, hosts: Sequence[str], node_index: int) -> bool:
    """Whether this node hosts the launchers' store: the node whose address the master
    names (by default the first --ips entry, so node 0), in either family: the master's
    name resolves as the node list's names do (`addresses.resolve_host`)."""
    try:
        addr = resolve_host(master_host)
    except (OSError, UnicodeError) as exc:
        raise StoreHostError(
            f"--master_addr: {master_host!r} does not resolve ({exc}); give an IP address"
        ) from exc
    return addr == hosts[node_index]


def host_store(
    host: str, port: int, *, allowed_hosts: Sequence[str] | None, token: bytes | None
) -> StoreServer:
    """Start node 0's store for the launchers; a taken port is a user error naming it."""
    try:
        return StoreServer(host, port, allowed_hosts=allowed_hosts, token=token).start()
    except OSError as exc:
        raise StoreHostError(
            f"--master: cannot host the launchers' store at {netaddr.join(host, port)}: "
            f"{exc.strerror or exc}; another job's store may hold it, pick another port"
        ) from exc
