"""A launcher's link to the job's store for the whole job: one interface (`Link`), one
class per backend, opened by `open_link` as the peers' spec says:

| backend                  | class       | who hosts the store | liveness                    |
| ------------------------ | ----------- | ------------------- | --------------------------- |
| node 0's TCP store       | `StoreLink` | node 0's launcher   | counters; node 0 watches    |
| etcd (--master etcd://)  | `EtcdLink`  | nobody              | leases; every node watches  |

`session.StorePeers` runs the job's rounds over the link, and makes each round's
`JobWatch` from the round's `WatchSpec` and the link's `transport`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Sequence

from paddlike import netaddr
from paddlike.distributed.store import (
    StoreAuthError,
    StoreClient,
    StoreError,
    StoreServer,
    StoreTimeoutError,
)
from paddlike.launch.context.addresses import resolve_host
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.kv import CONNECT_CHUNK, KV, Progress, connect_with_progress
from paddlike.launch.peers.liveness import CounterLiveness, LeaseLiveness
from paddlike.launch.peers.rendezvous import find_rival
from paddlike.launch.peers.rendezvous_errors import (
    RendezvousError,
    RendezvousTimeout,
    StoreBindError,
    StoreHostError,
    StoreRefused,
)
from paddlike.launch.peers.stackreq import StackChannel
from paddlike.launch.peers.start_verdict import read_spare_verdict
from paddlike.launch.peers.watch import HEARTBEATS_PER_TIMEOUT, WatchSpec, WatchTransport
from paddlike.launch.plan.membership import LOST
from paddlike.launch.plan.policy import launcher_died_cause
from paddlike.launch.plan.world import node_label

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Protocol

    from paddlike.launch.context.peers_spec import PeersSpec
    from paddlike.launch.peers.etcd import EtcdStore
    from paddlike.launch.plan.nodejob import NodeJob
    from paddlike.launch.plan.world import NodeEntry
else:
    Protocol = object  # an interface for type checkers; nothing checks it at run time


class Link(Protocol):
    """A launcher's connection to the job's store, and what it hosts, for the whole job."""

    kv: KV  # the connection the rendezvous and the rounds use
    # node 0's store, hosted by this launcher (it writes a stop straight into its table);
    # None on every other node and on etcd
    server: StoreServer | None

    @property
    def keeps_keys(self) -> bool:
        """Whether this launcher's exit takes away keys the others may still read: node 0's
        on the TCP store (it hosts it), every node's on etcd (its keys carry its lease)."""

    def connect(self) -> KV:
        """A fresh, short-lived connection (a stop, the end of an elastic job); closed by
        the caller."""

    def transport(self, spec: WatchSpec) -> WatchTransport:
        """How round `spec`'s watch reaches the store: its connections, its liveness,
        its stack requests and its death notice."""

    def rival(
        self, entry: NodeEntry, round_: int, hosts: Sequence[str], missing: list[int]
    ) -> str | None:
        """The store's host, while nodes are missing at a fixed job's rendezvous: a
        mismatch message when one of them hosts a rendezvous of its own; else None."""

    def close(self) -> None:
        """Close the connection, and the store this launcher hosts."""


def open_link(
    spec: PeersSpec,
    job: NodeJob,
    *,
    progress: Progress,
    waiting: Callable[[str], None],
) -> Link:
    """Connect to the job's other nodes: through etcd with ``--master etcd://...``, else
    through node 0's store (hosted here on node 0). `waiting` is told what the launcher
    waits for meanwhile. Raises RendezvousError (a store that cannot be reached or hosted
    included), never a bare StoreError."""
    try:
        if spec.etcd is not None:
            return EtcdLink.open(spec, job.index, progress=progress, waiting=waiting)
        return StoreLink.open(spec, job, progress=progress, waiting=waiting)
    except StoreError as exc:
        raise RendezvousError(str(exc)) from exc


class StoreLink:
    """A launcher's link to node 0's store (see `Link`)."""

    def __init__(
        self,
        kv: StoreClient,
        *,
        master: tuple[str, int],
        token: bytes | None,
        heartbeat_timeout: float,
        server: StoreServer | None = None,
    ) -> None:
        """`kv`: connected to the store at `master`; `server`: the store, when this
        launcher hosts it (node 0)."""
        self.kv: KV = kv
        self.master = master
        self.token = token
        self.heartbeat_timeout = heartbeat_timeout
        self.server = server

    @classmethod
    def open(
        cls,
        spec: PeersSpec,
        job: NodeJob,
        *,
        progress: Progress,
        waiting: Callable[[str], None] = lambda what: None,
    ) -> StoreLink:
        """Node 0 starts the store at the job's master address; every node connects
        (retrying to --rdzv_timeout, with a progress line while node 0's store is not up).
        `waiting` is told what the launcher waits for (for an interrupt's message).

        Without a rank (`job.rank_known` False: ranks assigned at the rendezvous) a node
        whose address is the master's tries to host the store, and is node 0 if it can;
        when another launcher holds the port already (several nodes on one machine), it
        joins."""
        assert job.master is not None
        master, hosts, node_index, token = job.master, job.hosts, job.index, spec.token
        server = None
        address = netaddr.join(*master)  # [fd00::1]:6170 for IPv6
        # torchrun style on one machine: every node's address is the master's; only node 0
        # hosts the store then
        if is_store_host(master[0], hosts, node_index) and (all(hosts) or node_index == 0):
            # torchrun style: the other nodes' addresses are unknown until they publish
            # them, so any peer may connect (a --job_token still keeps strangers out)
            allowed = hosts if all(hosts) else None
            try:
                server = host_store(master[0], master[1], allowed_hosts=allowed, token=token)
            except StoreHostError:
                if job.rank_known:
                    raise
        store_host = "node 0" if server is None else "this node"
        what = f"waiting for {store_host} ({address}) to host the launchers' store"
        waiting(what)
        rdzv_timeout = spec.rdzv_timeout
        look = None
        if server is None and job.workers_port is not None:
            # node 0 leaves its start failure at the workers' port when another program
            # holds the launchers' (`start_verdict.tell_start_failure`)
            look = functools.partial(read_spare_verdict, (master[0], job.workers_port), token)
        try:
            kv = connect_with_progress(
                master, token, rdzv_timeout, spec.heartbeat_timeout, what, progress, look
            )
        except StoreTimeoutError as exc:
            if server is not None:
                server.close()
            raise RendezvousTimeout(
                # torchrun style: hosts[0] is not known before the rendezvous
                f"rendezvous: node 0 ({hosts[0] or master[0]}) never opened the launchers' "
                f"store at {address} within {rdzv_timeout:g} s (--rdzv_timeout): {exc}; a node "
                "0 that cannot start keeps its store up only a few seconds to say why (see its "
                "output)"
            ) from exc
        except StoreAuthError as exc:
            if server is not None:
                server.close()
            # without a rank yet, `node_index` is a placeholder: name this launcher instead
            who = f"the launcher on {node_label(node_index, hosts)}" if job.rank_known else None
            raise token_refused(exc, who or "this launcher") from exc
        except BaseException:
            if server is not None:
                server.close()
            raise
        return cls(
            kv, master=master, token=token, heartbeat_timeout=spec.heartbeat_timeout,
            server=server,
        )  # fmt: skip

    @property
    def keeps_keys(self) -> bool:
        """Node 0's exit takes its store, and every key, away."""
        return self.server is not None

    def connect(self) -> KV:
        """Node 0 writes straight into its own table; the others connect once, briefly."""
        if self.server is not None:
            return OwnTable(self.server)
        return StoreClient(*self.master, timeout=1.0, token=self.token, reconnect_timeout=0.0)

    def watch_connection(self) -> StoreClient:
        """A connection for one of a round's threads. Each call on it gives up after one
        heartbeat period, so a cut network is noticed within the timeout rather than after
        a TCP timeout."""
        period = self.heartbeat_timeout / HEARTBEATS_PER_TIMEOUT
        return StoreClient(
            *self.master,
            timeout=self.heartbeat_timeout,
            token=self.token,
            reconnect_timeout=period,
            io_timeout=period,
        )

    def transport(self, spec: WatchSpec) -> WatchTransport:
        """Node 0 monitors the heartbeats, counted on a connection of their own."""
        beats = self.watch_connection()
        hosts_store = self.server is not None
        return WatchTransport(
            kv=self.kv,
            connect=self.watch_connection,
            liveness=CounterLiveness(
                beats, spec.node_index, len(spec.hosts), self.heartbeat_timeout
            ),
            heartbeat_timeout=self.heartbeat_timeout,
            monitor=spec.node_index == 0,
            heartbeat_kv=beats,
            hosts_store=hosts_store,
            stacks=stack_channel(self.watch_connection, self.kv, spec),
            # node 0's store goes with its launcher: nobody to tell then
            death_notice=None if hosts_store else death_notice(spec, self.master, self.token),
        )

    def rival(
        self, entry: NodeEntry, round_: int, hosts: Sequence[str], missing: list[int]
    ) -> str | None:
        """Only the store's host can have a rival (`rendezvous.find_rival`)."""
        if self.server is None:
            return None
        return find_rival(entry, round_, hosts, missing, self.master[1], self.token)

    def close(self) -> None:
        with contextlib.suppress(StoreError):
            self.kv.close()
        if self.server is not None:
            self.server.close()


class OwnTable:
    """Node 0's own store as a connection: straight into its table, nothing to close."""

    def __init__(self, server: StoreServer) -> None:
        self.server = server
        self.address = server.address_str

    def try_get(self, key: str) -> bytes | None:
        return self.server.peek(key)

    def compare_set(self, key: str, expected: bytes | None, desired: bytes) -> bytes:
        return self.server.compare_set(key, expected, desired) or b""

    def close(self) -> None:
        pass


class EtcdLink:
    """A launcher's link to the job's keys on etcd (see `Link`)."""

    server = None  # nobody hosts the store
    keeps_keys = True  # this launcher's keys go with its lease

    def __init__(self, kv: EtcdStore, *, job_id: str | None, heartbeat_timeout: float) -> None:
        self.kv: EtcdStore = kv
        self.job_id = job_id
        self.heartbeat_timeout = heartbeat_timeout

    @classmethod
    def open(
        cls,
        spec: PeersSpec,
        node_index: int,
        *,
        progress: Progress,
        waiting: Callable[[str], None] = lambda what: None,
    ) -> EtcdLink:
        """Take a lease and mark this node alive under it, retrying until --rdzv_timeout
        while etcd does not answer (with a progress line)."""
        from paddlike.launch.peers.etcd import EtcdStore, EtcdUnreachable, parse_etcd_master

        assert spec.etcd is not None
        rdzv_timeout = spec.rdzv_timeout
        kv = EtcdStore(
            parse_etcd_master(spec.etcd),
            job_id=spec.job_id,
            timeout=rdzv_timeout,
            io_timeout=max(0.5, spec.heartbeat_timeout / HEARTBEATS_PER_TIMEOUT),
        )
        what = f"waiting for etcd at {kv.address} to answer"
        waiting(what)
        started = time.monotonic()
        deadline, delay = started + rdzv_timeout, 0.05
        try:
            while True:
                try:
                    if kv.lease is None:
                        kv.grant_lease(spec.heartbeat_timeout)
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
                    raise RendezvousError(
                        f"--master: cannot use etcd at {kv.address}: {exc}"
                    ) from exc
        except BaseException:
            kv.close()
            raise
        return cls(kv, job_id=spec.job_id, heartbeat_timeout=spec.heartbeat_timeout)

    def connect(self) -> KV:
        """Another handle on the same keys and lease; its `close` leaves the lease alone."""
        return self.kv.sharing_lease()

    def transport(self, spec: WatchSpec) -> WatchTransport:
        """Every node monitors the others' leases. An elastic job's node also marks itself
        alive in the round (its ranks change between rounds)."""
        elastic = spec.elastic is not None
        liveness = LeaseLiveness(
            self.kv,
            spec.node_index,
            len(spec.hosts),
            round_=spec.round if elastic else None,
            timeout=self.heartbeat_timeout,
        )
        if elastic:
            self.kv.set(p.round_alive_key(spec.round, spec.node_index), str(os.getpid()))
        return WatchTransport(
            kv=self.kv,
            connect=self.kv.sharing_lease,
            liveness=liveness,
            heartbeat_timeout=self.heartbeat_timeout,
            monitor=True,
            stacks=stack_channel(self.kv.sharing_lease, self.kv, spec),
            death_notice=death_notice(spec, etcd=self.kv.endpoints, job_id=self.job_id),
        )

    def rival(
        self, entry: NodeEntry, round_: int, hosts: Sequence[str], missing: list[int]
    ) -> str | None:
        return None  # nobody hosts a store of its own

    def close(self) -> None:
        self.kv.close()  # revokes the lease: this launcher's keys go


def death_notice(
    spec: WatchSpec,
    store: tuple[str, int] | None = None,
    token: bytes | None = None,
    *,
    etcd: Sequence[tuple[str, int]] = (),
    job_id: str | None = None,
) -> bytes:
    """What this node's guardian writes to the job's store (node 0's `store`, or `etcd`)
    if this launcher dies during the round (`run.guardian`): the lost node as the round's
    cause, and its end, so that the others name it at once instead of blaming their own
    workers, whose collectives fail as soon as this node's workers are gone."""
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
    return p.encode_notice(store, token, cause_write, marks, etcd=etcd, job_id=job_id)


def stack_channel(connect: Callable[[], KV], kv: KV, spec: WatchSpec) -> StackChannel:
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
    """Start node 0's store for the launchers; a taken port is a user error naming it
    (the pipeline words it after the option that chose the port)."""
    try:
        return StoreServer(host, port, allowed_hosts=allowed_hosts, token=token).start()
    except OSError as exc:
        address, reason = netaddr.join(host, port), str(exc.strerror or exc)
        raise StoreBindError(
            f"--master: cannot host the launchers' store at {address}: {reason}; another "
            "job's store may hold it, pick another port",
            address,
            reason,
        ) from exc
