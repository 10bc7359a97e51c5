"""A many-node launcher's link to the other nodes for the whole job (`StorePeers`).

It hosts the launchers' store on node 0 (or talks to etcd), joins each
round's rendezvous and hands out each round's `JobWatch`. It also knows what the
launcher is waiting for at any moment (`waiting_for`), so that an interrupt can say
so, and how to tell the other nodes that this launcher stops (`publish_stop`):

| this launcher is                     | `publish_stop` writes                          |
| ------------------------------------ | ---------------------------------------------- |
| not connected yet (store not up)     | nothing (there is no one to tell)              |
| in round r's rendezvous              | ``rdzv/<r>/complete`` = aborted + cause        |
| past round r's rendezvous            | ``job/<r>/abort`` = cause, its end and done    |

Node 0 refuses clients with a wrong or missing job token; when the refused address is
one of the job's nodes, that node would never join, so node 0 ends the rendezvous at
once with a verdict naming it (exit 2 everywhere, like a fingerprint mismatch).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence

from paddlike.distributed.store import (
    WRONG_TOKEN,
    StoreAuthError,
    StoreClient,
    StoreError,
    StoreServer,
    StoreTimeoutError,
)
from paddlike.launch.context.master import uses_etcd
from paddlike.launch.context.options import LaunchOptions
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.elastic import ElasticRendezvous
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
    host_store,
    is_store_host,
)
from paddlike.launch.peers.rendezvous import Rendezvous, find_rival, linger
from paddlike.launch.peers.stackreq import StackChannel
from paddlike.launch.peers.watch import (
    DONE_GRACE,
    HEARTBEATS_PER_TIMEOUT,
    JobWatch,
    LeaseLiveness,
    tcp_store_watch,
)
from paddlike.launch.plan.elastic import LEFT, LOST, ElasticSpec
from paddlike.launch.plan.nodejob import NodeJob
from paddlike.launch.plan.policy import membership_cause
from paddlike.launch.plan.world import NodeEntry, RendezvousResult, describe_missing, node_label
from paddlike.summary import RootCause


class StorePeers:
    """A many-node launcher's link to the others for the whole job (see `peers.Peers`).

    peers = StorePeers.open_tcp(...)  (or open_etcd)
    for round_ in range(max_restarts + 1):
        result = peers.rendezvous(round_, entry)    # all nodes' ports, same everywhere
        watch = peers.watch(round_, log_dir, ...)   # fd/poll/publish for the supervisor
        ... supervisor.run(extra_fds={watch.fd: watch.poll}, on_failure=watch.publish)
        cause = peers.finish(watch, ok)             # job-wide: None = all nodes fine
    peers.close()                                   # node 0 waits for the others first
    """

    def __init__(
        self,
        *,
        kv: KV,
        node_index: int,
        nnodes: int,
        hosts: Sequence[str],
        rdzv_timeout: float,
        heartbeat_timeout: float,
        progress: Progress,
        make_watch: Callable[[int, Sequence[str], int], JobWatch],
        connect: Callable[[], KV],
        server: StoreServer | None = None,
        master: tuple[str, int] | None = None,
        token: bytes | None = None,
        assign: bool = False,
    ) -> None:
        self.kv = kv
        # round 0 assigns the node ranks (the identical command on every node); `node_index`
        # is this node's from then on (before it: the rank asked for, or a placeholder)
        self.assign = assign
        self.node_index = node_index
        self.nnodes = nnodes
        self.hosts = list(hosts)
        self.rdzv_timeout = rdzv_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.progress = progress
        self._make_watch = make_watch
        self._connect = connect  # a fresh, short-lived connection (for `publish_stop`)
        self.server = server
        self.master = master
        self.token = token
        # whether this launcher's exit takes away keys the others may still read: node 0's
        # on the TCP store (it hosts it), every node's on etcd (its keys carry its lease)
        self.keeps_keys = server is not None
        self._watches: list[JobWatch] = []
        # the rendezvous in progress, if any
        self._rdzv: Rendezvous | ElasticRendezvous | None = None
        self._round: int | None = None  # the round of the rendezvous or of the watch
        self._waiting = f"joining the rendezvous at {kv.address}"
        # an elastic job (--nnodes MIN:MAX): each round's members come from `peers.elastic`
        self.elastic: ElasticSpec | None = None
        self.world: tuple[NodeEntry, ...] = ()  # the last round's members
        # elastic: (host, pid) of the last round's members that may come back; None
        # before a round ended
        self.survivors: set[tuple[str, int]] | None = None
        self._after = ""  # elastic: why the next round is held below MIN, for its timeout
        self._ended_round: int | None = None  # elastic: the last round this node finished
        if server is not None:
            server.on_refused = self._refused

    @property
    def waiting_for(self) -> str:
        """What this launcher waits for now, for the line an interrupt prints."""
        rdzv = self._rdzv
        if rdzv is not None and rdzv.missing:
            return (
                f"waiting for {describe_missing(rdzv.missing, self.hosts)} at the rendezvous "
                f"at {self.kv.address}"
            )
        return self._waiting

    # -- opening --

    @classmethod
    def open(
        cls,
        options: LaunchOptions,
        job: NodeJob,
        *,
        progress: Progress,
        waiting: Callable[[str], None],
    ) -> StorePeers:
        """Connect to the job's other nodes: through etcd with ``--master etcd://...``, else
        through node 0's store (hosted here on node 0). Raises RendezvousError (a store
        that cannot be reached or hosted included), never a bare StoreError."""
        try:
            if uses_etcd(options):
                assert options.master is not None
                peers = cls.open_etcd(
                    master=options.master,
                    job_id=options.job_id,
                    node_index=job.index,
                    hosts=job.hosts,
                    assign=job.assign_ranks,
                    rdzv_timeout=options.rdzv_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    progress=progress,
                    waiting=waiting,
                    elastic=job.elastic is not None,
                )
            else:
                assert job.master is not None
                peers = cls.open_tcp(
                    master=job.master,
                    node_index=job.index,
                    hosts=job.hosts,
                    assign=job.assign_ranks,
                    rank_known=job.rank_known,
                    token=options.job_token.encode() if options.job_token else None,
                    rdzv_timeout=options.rdzv_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    progress=progress,
                    waiting=waiting,
                )
        except StoreError as exc:
            raise RendezvousError(str(exc)) from exc
        peers.elastic = job.elastic
        return peers

    @classmethod
    def open_tcp(
        cls,
        *,
        master: tuple[str, int],
        node_index: int,
        hosts: Sequence[str],
        token: bytes | None,
        rdzv_timeout: float,
        heartbeat_timeout: float,
        progress: Progress,
        waiting: Callable[[str], None] = lambda what: None,
        assign: bool = False,
        rank_known: bool = True,
    ) -> StorePeers:
        """Node 0 starts the store at `master`; every node connects (retrying to the timeout,
        with a progress line while node 0's store is not up). `waiting` is told what the
        launcher waits for before the session exists (for an interrupt's message).

        Without a rank (`rank_known` False: ranks assigned at the rendezvous) a node whose
        address is the master's tries to host the store, and is node 0 if it can; when
        another launcher holds the port already (several nodes on one machine), it joins."""
        server = None
        address = f"{master[0]}:{master[1]}"
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
            kv = connect_with_progress(
                master, token, rdzv_timeout, heartbeat_timeout, what, progress
            )
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
            raise token_refused(exc, node_label(node_index, hosts)) from exc
        except BaseException:
            if server is not None:
                server.close()
            raise

        def make_watch(round_: int, hosts: Sequence[str], node_index: int) -> JobWatch:
            return tcp_store_watch(
                address=master,
                token=token,
                kv=kv,
                node_index=node_index,
                nnodes=len(hosts),
                hosts=hosts,
                round_=round_,
                heartbeat_timeout=heartbeat_timeout,
            )

        def connect() -> KV:
            return StoreClient(*master, timeout=1.0, token=token, reconnect_timeout=0.0)

        return cls(
            kv=kv,
            node_index=node_index,
            nnodes=len(hosts),
            hosts=hosts,
            rdzv_timeout=rdzv_timeout,
            heartbeat_timeout=heartbeat_timeout,
            progress=progress,
            make_watch=make_watch,
            connect=connect,
            server=server,
            master=master,
            token=token,
            assign=assign,
        )

    @classmethod
    def open_etcd(
        cls,
        *,
        master: str,
        job_id: str | None,
        node_index: int,
        hosts: Sequence[str],
        rdzv_timeout: float,
        heartbeat_timeout: float,
        progress: Progress,
        waiting: Callable[[str], None] = lambda what: None,
        assign: bool = False,
        elastic: bool = False,
    ) -> StorePeers:
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
                    raise RendezvousError(
                        f"--master: cannot use etcd at {kv.address}: {exc}"
                    ) from exc
        except BaseException:
            kv.close()
            raise

        def make_watch(round_: int, hosts: Sequence[str], node_index: int) -> JobWatch:
            liveness = LeaseLiveness(
                kv,
                node_index,
                len(hosts),
                round_=round_ if elastic else None,
                timeout=heartbeat_timeout,
            )
            if elastic:
                kv.set(p.round_alive_key(round_, node_index), str(os.getpid()))
            return JobWatch(
                connect=kv.sharing_lease,
                kv=kv,
                liveness=liveness,
                node_index=node_index,
                nnodes=len(hosts),
                hosts=hosts,
                round_=round_,
                heartbeat_timeout=heartbeat_timeout,
                monitor=True,
            )

        session = cls(
            kv=kv,
            node_index=node_index,
            nnodes=len(hosts),
            hosts=hosts,
            rdzv_timeout=rdzv_timeout,
            heartbeat_timeout=heartbeat_timeout,
            progress=progress,
            make_watch=make_watch,
            connect=kv.sharing_lease,
        )
        session.keeps_keys = True
        session.assign = assign
        return session

    # -- the rounds --

    @property
    def address(self) -> str:
        return self.kv.address

    def rendezvous(self, round_: int, entry: NodeEntry) -> RendezvousResult:
        if self.elastic is not None:
            return self._elastic_rendezvous(self.elastic, round_, entry)

        def rival_check(round_: int, missing: list[int]) -> str | None:
            if self.server is None or self.master is None:
                return None  # only a store's host can have a rival
            return find_rival(entry, round_, self.hosts, missing, self.master[1], self.token)

        assign = self.assign and round_ == 0  # later rounds keep the ranks round 0 gave
        if assign and self.server is not None and entry.index < 0:
            entry = entry._replace(index=0)  # the node hosting the launchers' store is node 0
        rdzv = Rendezvous(
            kv=self.kv,
            node_index=self.node_index,
            nnodes=self.nnodes,
            hosts=self.hosts,
            timeout=self.rdzv_timeout,
            progress=self.progress,
            rival_check=rival_check,
            assign=assign,
        )
        self._rdzv, self._round = rdzv, round_
        self._waiting = f"waiting for the other nodes at the rendezvous at {self.kv.address}"
        for addr in self._token_refusals if round_ == 0 else ():
            self._refused(addr, WRONG_TOKEN)  # refused before the first rendezvous began
        try:
            result = rdzv.join(entry, round_)
        except Exception:
            self._rdzv = None
            if self.keeps_keys:  # the others must read the verdict before it goes
                rdzv.linger(round_, DONE_GRACE)
            raise
        # (a LauncherSignal leaves `_rdzv` set: `publish_stop` aborts this rendezvous)
        self._rdzv = None
        self.hosts = list(result.hosts)
        self.node_index = result.own_index(self.node_index)
        self._waiting = f"running round {round_}"
        return result

    def _elastic_rendezvous(
        self, spec: ElasticSpec, round_: int, entry: NodeEntry
    ) -> RendezvousResult:
        """A round of an elastic job: whoever came (`peers.elastic`). The store's host
        asks for rank 0 (it stays rank 0, and its heartbeat monitor with it); the others
        for their previous rank (kept in order), newcomers for none."""
        if self.server is not None:
            entry = entry._replace(index=0)
        elif not any(e.pid == entry.pid and e.host == entry.host for e in self.world):
            entry = entry._replace(index=-1)
        if self._ended_round is not None:
            # this member goes on: the round it ran is over, and the next may close. (Only
            # now, never when the round ends: nodes waiting for a place must not start a
            # round of their own while the job ends; they read `end_elastic`'s word.)
            self.kv.set(p.over_key(self._ended_round), b"1")
        holding = self.survivors is not None and len(self.survivors) < spec.min_nodes
        rdzv = ElasticRendezvous(
            self.kv,
            spec,
            timeout=spec.hold if holding else self.rdzv_timeout,
            progress=self.progress,
            survivors=self.survivors,
            after=self._after if holding else "",
        )
        self._rdzv, self._round = rdzv, round_
        self._waiting = f"waiting for the other nodes at the rendezvous at {self.kv.address}"
        try:
            result = rdzv.join(entry, round_)
        finally:
            self._rdzv = None
        self._round = result.round
        self.world = result.nodes
        self.hosts = list(result.hosts)
        self.node_index = result.own_index(self.node_index)
        self._waiting = f"running round {result.round}"
        return result

    @property
    def _token_refusals(self) -> list[str]:
        if self.server is None:
            return []
        return [r.rpartition(":")[0] for r in self.server.refused if r.endswith(WRONG_TOKEN)]

    def _refused(self, addr: str, reason: str) -> None:
        """The store refused `addr` (a server thread): a job node refused for its token will
        never join, so end the rendezvous now with a verdict naming it."""
        rdzv, round_ = self._rdzv, self._round
        if reason != WRONG_TOKEN or rdzv is None or round_ is None:
            return
        if addr in self.hosts:
            who = node_label(self.hosts.index(addr), self.hosts)
        elif all(self.hosts):
            return  # not one of the job's nodes: refused and logged, nothing more
        else:
            who = addr  # torchrun style: any address may be one of the nodes still unknown
        message = (
            f"rendezvous: the launcher on {who} was refused by the "
            f"launchers' store at {self.kv.address}: {reason}; give every node the same "
            "--job_token (or PADDLIKE_JOB_TOKEN, --job_token_file)"
        )
        assert self.server is not None
        self.server.compare_set(p.complete_key(round_), None, p.MISMATCH_PREFIX + message.encode())

    def watch(self, round_: int, log_dir: str, *, services: bool) -> JobWatch:
        """This round's watch: started, with its `ServicesStop` when `services` (PS on
        several nodes: the servers stop when every trainer of the job is done)."""
        if self._watches:
            self._watches[-1].stop()  # (the earlier ones were stopped in their turn)
        w = self._make_watch(round_, self.hosts, self.node_index)
        w.elastic = self.elastic
        w.log_dir = log_dir
        w.services = w.services_stop() if services else None
        w.stacks = StackChannel(
            connect=w.connect, kv=w.kv, round_=round_, node_index=w.node_index, nnodes=w.nnodes
        )
        w.start()
        self._watches.append(w)
        self._round = round_
        self._waiting = f"running round {round_}"
        return w

    def finish(self, watch: JobWatch, ok: bool) -> RootCause | None:
        """`watch.finish`, saying meanwhile that this launcher waits for the other nodes."""
        self._waiting = f"waiting for the other nodes to finish round {watch.round}"
        cause = watch.finish(ok)
        if self.elastic is not None:
            gone = (p.END_LOST, p.END_LEFT, p.STOPPED, b"")
            self.survivors = {
                (e.host, e.pid)
                for j, e in enumerate(self.world)
                if watch.ends.get(j, b"") not in gone
            }
            went = [
                (j, LOST if mark == p.END_LOST else LEFT)
                for j, mark in sorted(watch.ends.items())
                if mark in gone
            ]
            if went and not watch.leaving:
                cause = membership_cause(
                    cause, went, self.hosts, self.heartbeat_timeout, time.time()
                )
            self._after = f"after {cause.reason}" if cause is not None else ""
            self._ended_round = watch.round
        return cause

    def publish_stop(self, cause: RootCause) -> bool:
        """This launcher stops outside a supervised round (a signal): tell the other nodes,
        so that they stop too (then `wait_readers`). False when there was no one to tell
        (not connected, or the only launcher at the rendezvous so far)."""
        round_ = self._round
        if round_ is None:
            return False
        if isinstance(self._rdzv, ElasticRendezvous):
            return self._withdraw(self._rdzv)
        if self.elastic is not None:  # between rounds of an elastic job: it leaves
            cause = cause.replace(membership=LEFT)
        rdzv, payload = self._rdzv, p.encode_cause(cause)
        try:
            if rdzv is not None:
                key, value = p.complete_key(round_), p.ABORTED_PREFIX + payload
                keys = [key]
                if rdzv.ticket is not None:  # read the verdict: node 0 need not wait for us
                    keys.append(p.left_key(round_, rdzv.ticket))
            else:
                key, value = p.abort_key(round_), payload
                keys = [key, p.end_key(round_, self.node_index)]
                keys.append(p.done_key(round_, self.node_index))
            # Count the arrivals before publishing: once our "left" key is there, node 0
            # may read the verdict, see everyone gone and close its store at once.
            arrived = p.arrived_key(round_)
            if self.server is not None:  # node 0: straight into its own table
                count = self.server.peek(arrived)
                for k in keys:
                    self.server.compare_set(k, None, value if k == key else p.STOPPED)
            else:
                kv = self._connect()
                try:
                    count = kv.try_get(arrived)
                    for k in keys:
                        kv.compare_set(k, None, value if k == key else p.STOPPED)
                finally:
                    kv.close()
        except StoreError:
            return False
        # in a rendezvous, someone to tell only when another launcher arrived
        return rdzv is None or int(count or b"0") > 1

    def _withdraw(self, rdzv: ElasticRendezvous) -> bool:
        """An elastic node stopped while waiting for a round: it leaves alone (a round
        that closed with it in it notices it lost). Nobody else is told."""
        if rdzv.round is not None and rdzv.ticket is not None:
            with contextlib.suppress(StoreError):
                self.kv.set(p.gone_key(rdzv.round, rdzv.ticket), b"1")
        self._rdzv = None
        return False

    def end_elastic(self, how: str) -> None:
        """The elastic job ended (`how`, for a node still waiting to join): nodes waiting
        for a place stop rather than start a job of their own. A launcher whose exit takes
        keys away (node 0's store, any node's etcd lease) lets them read it first (each
        marks its ticket ``left`` then)."""
        if self.elastic is None:
            return
        with contextlib.suppress(StoreError):
            self.kv.compare_set(p.ELASTIC_END_KEY, None, how.encode())
            if self.keeps_keys and self._ended_round is not None:  # node 0's store, etcd
                waiting = self._ended_round + 1
                self._waiting = "waiting for the nodes waiting to join to read the job's end"
                linger(self.kv, waiting, DONE_GRACE)

    def wait_readers(self) -> None:
        """After `publish_stop`: where this launcher's exit takes the keys away (node 0, etcd),
        wait (up to DONE_GRACE) until the others have read why it stopped."""
        if not self.keeps_keys or self._round is None:
            return
        self._waiting = "waiting for the other nodes to read why this launcher stopped"
        if self._rdzv is not None:
            linger(self.kv, self._round, DONE_GRACE)
        elif self._watches:
            self._watches[-1].wait_done()

    def close(self, linger: bool = True) -> None:
        """Stop the watches; node 0 first waits (briefly) until every node read the outcome
        (unless `linger` is False: `publish_stop` waited already, or was cut short)."""
        if linger and self.keeps_keys and self._watches:
            self._waiting = "waiting for the other nodes to read the job's outcome"
            self._watches[-1].wait_done()
        for w in self._watches:
            w.stop()
        with contextlib.suppress(StoreError):
            self.kv.close()
        if self.server is not None:
            self.server.close()


def token_refused(exc: StoreAuthError, who: str):  # type: ignore[no-untyped-def]
    """The refused side of a token mismatch: a configuration error (exit 2)."""
    return StoreRefused(
        f"rendezvous: {exc}; {who} needs the same --job_token (or PADDLIKE_JOB_TOKEN, "
        "--job_token_file) as node 0"
    )
