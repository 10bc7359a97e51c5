"""Job-wide failure handling: one root cause, every node down within a second.

During a round each launcher runs a `JobWatch`:

- `publish(cause)` (the supervisor's `on_failure`) stores this node's root cause
  under ``job/<round>/abort`` create-only, so the first failure anywhere wins and
  every node reports the same one (its log file as an absolute path on its host;
  other nodes print it "on node N (host)");
- a watcher thread blocks on that key (a waiting `get`, no polling) and, when it
  appears, makes `fd` readable; the supervisor's event loop then calls `poll()`,
  which returns the remote cause and the supervisor tears down;
- a heartbeat thread beats every `heartbeat_timeout / 5` s. The monitoring nodes
  (node 0 on the TCP store, every node on etcd) publish "node N stopped sending
  heartbeats" for a node silent longer than `heartbeat_timeout`, and mark its end
  so nobody waits for it. A node that cannot reach the store for that long
  (node 0 gone, network cut) aborts with that as the cause. Each call on the
  watch's own connections gives up after one beat period, so a cut network is
  seen within the timeout rather than after TCP's;
- parameter-server jobs: `services_stop()` gives the supervisor its `ServicesStop`:
  each node stores ``job/<round>/trainers-ok/<i>`` once its trainers have all exited
  0 (at once when it has none), and a thread waiting for every node's key makes the
  servers stop everywhere then, not when one node's own trainers are done;
- `finish(ok)` reports this node's end and waits until every node has ended (or
  was lost); it returns the job-wide root cause, None when the round succeeded
  everywhere. Node 0 keeps its store up until everyone has read the outcome
  (`JobSession.close`; on etcd every node waits so, as its keys go with its lease).

`run_multinode` runs rounds through `rounds.run_rounds`, the loop the one-node path
uses too; `JobSession` is the link to the other nodes (TCP store or etcd).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from paddlike.distributed.store import StoreClient, StoreError, StoreTimeoutError
from paddlike.launch.rendezvous import KV, NodeEntry, RendezvousResult, node_label, wait_keys
from paddlike.summary import RootCause

if TYPE_CHECKING:
    from paddlike.launch.plan import JobFacts, LaunchPlan
    from paddlike.launch.supervisor import ServicesStop

HEARTBEATS_PER_TIMEOUT = 5
WATCH_CHUNK = 2.0  # seconds per blocking wait on the abort key (to notice `stop()`)
DONE_GRACE = 5.0  # how long node 0 waits for the others to read the outcome


def encode_cause(cause: RootCause) -> bytes:
    return json.dumps(asdict(cause), sort_keys=True).encode()


def decode_cause(raw: bytes) -> RootCause:
    d = json.loads(raw)
    known = set(RootCause.__dataclass_fields__)
    return RootCause(**{k: v for k, v in d.items() if k in known})


class Liveness(Protocol):
    """How a backend shows that nodes are alive (TCP store counters or etcd leases)."""

    def beat(self) -> None:
        """Say this node is alive; raise StoreError when the backend cannot be reached."""

    def silent(self, now: float) -> list[int]:
        """Nodes whose heartbeats lapsed (only asked on monitoring nodes)."""


@dataclass
class CounterLiveness:
    """TCP store heartbeats: each node bumps ``hb/<i>``; the monitor notes when each changed."""

    kv: KV
    node_index: int
    nnodes: int
    timeout: float
    clock: Callable[[], float] = time.monotonic
    _seen: dict[int, tuple[bytes | None, float]] = field(default_factory=dict)

    def beat(self) -> None:
        self.kv.add(f"hb/{self.node_index}", 1)

    def silent(self, now: float) -> list[int]:
        lost = []
        for j in range(self.nnodes):
            if j == self.node_index:
                continue
            value = self.kv.try_get(f"hb/{j}")
            old = self._seen.get(j)
            if old is None or old[0] != value:
                self._seen[j] = (value, now)
            elif now - old[1] > self.timeout:
                lost.append(j)
        return lost


class JobWatch:
    """One node's failure handling for one round (see the module docstring)."""

    def __init__(
        self,
        *,
        connect: Callable[[], KV],
        kv: KV,
        liveness: Liveness,
        node_index: int,
        nnodes: int,
        hosts: Sequence[str],
        round_: int,
        heartbeat_timeout: float,
        monitor: bool,
        heartbeat_kv: KV | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.heartbeat_kv = heartbeat_kv or kv  # the heartbeat thread's own connection
        self._connect = connect
        self.liveness = liveness
        self.node_index = node_index
        self.nnodes = nnodes
        self.hosts = list(hosts)
        self.round = round_
        self.heartbeat_timeout = heartbeat_timeout
        self.monitor = monitor
        self.clock = clock
        self.abort_key = f"job/{round_}/abort"
        self.log_dir: str | None = None  # this node's log directory, for published causes
        self._read_fd, self._write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._cause: RootCause | None = None  # the job-wide root cause, once known
        self._published_ours = False
        self._lost_contact: RootCause | None = None
        self._threads: list[threading.Thread] = []
        self._services_fds: tuple[int, ...] = ()
        self._fds_open = True  # until stop() closes them

    @property
    def store_host_label(self) -> str:
        """Who this node loses when the store goes: node 0 on the TCP store, else the store."""
        host = self.kv.address.rpartition(":")[0]
        if host in self.hosts:
            return node_label(self.hosts.index(host), self.hosts)
        return f"the store ({self.kv.address})"

    @property
    def fd(self) -> int:
        """Readable when the job must end for a cause found by a thread of this watch."""
        return self._read_fd

    def end_key(self, node: int) -> str:
        return f"job/{self.round}/end/{node}"

    def done_key(self, node: int) -> str:
        return f"job/{self.round}/done/{node}"

    def trainers_ok_key(self, node: int) -> str:
        return f"job/{self.round}/trainers-ok/{node}"

    def start(self) -> JobWatch:
        for target, name in ((self._watch, "abort-watch"), (self._heartbeat, "heartbeat")):
            t = threading.Thread(target=target, name=f"{name}-r{self.round}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:  # the threads write to these fds under the lock, never after this
            fds, self._fds_open = (self._read_fd, self._write_fd, *self._services_fds), False
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- parameter-server lifecycle --

    def services_stop(self) -> ServicesStop:
        """The supervisor's say on when the servers stop: once every node's trainers are done.

        Starts a thread that waits for every node's ``trainers-ok`` key on its own
        connection; a lost node or an abort ends the round through `fd` instead.
        """
        from paddlike.launch.supervisor import ServicesStop

        read_fd, write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._services_fds = (read_fd, write_fd)
        t = threading.Thread(
            target=self._wait_trainers_ok, name=f"trainers-ok-r{self.round}", daemon=True
        )
        t.start()
        self._threads.append(t)
        return ServicesStop(read_fd, self._local_trainers_done, self._services_ready)

    def _local_trainers_done(self) -> None:
        try:
            self.kv.set(self.trainers_ok_key(self.node_index), b"1")
        except StoreError as exc:  # the heartbeat thread decides whether the store is gone
            _say(f"warning: could not tell the other nodes that its trainers are done: {exc}")

    def _services_ready(self) -> bool:
        try:
            return bool(os.read(self._services_fds[0], 4096))
        except OSError:
            return False

    def _wait_trainers_ok(self) -> None:
        keys = [self.trainers_ok_key(j) for j in range(self.nnodes)]
        kv: KV | None = None
        while not self._stop.is_set():
            try:
                if kv is None:
                    kv = self._connect()
                wait_keys(kv, keys, WATCH_CHUNK)
            except StoreTimeoutError:
                continue
            except StoreError:
                # the connection broke: the heartbeat thread decides when it is fatal
                if kv is not None:
                    with contextlib.suppress(StoreError):
                        kv.close()
                kv = None
                self._stop.wait(0.1)  # no event to wait on: the peer is gone; retry shortly
                continue
            with self._lock, contextlib.suppress(OSError):
                if self._fds_open:
                    os.write(self._services_fds[1], b"!")
            break
        if kv is not None:
            with contextlib.suppress(StoreError):
                kv.close()

    # -- the supervisor's hooks --

    def publish(self, cause: RootCause) -> None:
        """`on_failure`: make `cause` the job's root cause unless another node's came first."""
        if cause.time is None:
            cause.time = time.time()
        if cause.log_file and self.log_dir and not os.path.isabs(cause.log_file):
            # the other nodes cannot join a relative name to our log directory
            cause = replace(cause, log_file=os.path.join(self.log_dir, cause.log_file))
        try:
            winner = decode_cause(self.kv.compare_set(self.abort_key, None, encode_cause(cause)))
        except StoreError:
            winner = cause  # the store is gone: our cause is the best we know
        with self._lock:
            if self._cause is None:
                self._cause = winner
            self._published_ours = True

    def poll(self) -> RootCause | None:
        """`extra_fds` callback: the cause that ends the job, unless it is our own."""
        with contextlib.suppress(OSError):
            os.read(self._read_fd, 4096)
        with self._lock:
            if self._published_ours or self._cause is None:
                return None
            cause = self._cause
        if cause.log_file and cause.node_index not in (None, self.node_index):
            # The failure report names the log file: say that it is on the other node's host
            # (an absolute path is printed as it is, not joined to our log directory).
            where = node_label(cause.node_index, self.hosts)
            cause = replace(cause, log_file=f"{cause.log_file} on {where}")
        return cause

    @property
    def root_cause(self) -> RootCause | None:
        with self._lock:
            return self._cause

    def _found(self, cause: RootCause) -> None:
        with self._lock:
            if self._cause is None:
                self._cause = cause
            if self._fds_open:
                with contextlib.suppress(OSError):
                    os.write(self._write_fd, b"!")

    # -- threads --

    def _watch(self) -> None:
        try:
            kv = self._connect()
        except StoreError as exc:
            self._found(self._contact_cause(str(exc)))
            return
        try:
            while not self._stop.is_set():
                try:
                    raw = kv.get(self.abort_key, timeout=WATCH_CHUNK)
                except StoreTimeoutError:
                    continue
                except StoreError:
                    if self._stop.is_set():
                        return
                    # the connection broke: the heartbeat thread decides when it is fatal
                    time.sleep(0.1)  # no event to wait on: the peer is gone; retry shortly
                    with contextlib.suppress(StoreError):
                        kv.close()
                        kv = self._connect()
                    continue
                self._found(decode_cause(raw))
                return
        finally:
            kv.close()

    def _contact_cause(self, detail: str) -> RootCause:
        return RootCause(
            reason=(
                f"{node_label(self.node_index, self.hosts)} lost contact with "
                f"{self.store_host_label}, which hosts the job's store at {self.kv.address}, "
                f"for {self.heartbeat_timeout:g} s (--heartbeat_timeout): its launcher died or "
                f"the network to it failed ({detail})"
            ),
            host=self.hosts[self.node_index] if self.node_index < len(self.hosts) else "",
            node_index=self.node_index,
            time=time.time(),
        )

    def _heartbeat(self) -> None:
        interval = self.heartbeat_timeout / HEARTBEATS_PER_TIMEOUT
        last_ok = self.clock()
        reported: set[int] = set()
        while not self._stop.is_set():
            try:
                self.liveness.beat()
                last_ok = self.clock()
                if self.monitor:
                    for j in self.liveness.silent(self.clock()):
                        if j not in reported:
                            reported.add(j)
                            self._lost_node(j)
            except StoreError as exc:
                if self.clock() - last_ok > self.heartbeat_timeout:
                    self._lost_contact = self._contact_cause(str(exc))
                    self._found(self._lost_contact)
                    return
            self._stop.wait(interval)  # a period, not a wait for an event

    def _lost_node(self, j: int) -> None:
        cause = RootCause(
            reason=(
                f"{node_label(j, self.hosts)} stopped sending heartbeats for "
                f"{self.heartbeat_timeout:g} s (--heartbeat_timeout): its launcher died or "
                "the network to it failed"
            ),
            host=self.hosts[j] if j < len(self.hosts) else "",
            node_index=j,
            time=time.time(),
        )
        kv = self.heartbeat_kv
        raw = kv.compare_set(self.abort_key, None, encode_cause(cause))
        kv.compare_set(self.end_key(j), None, b"lost")
        kv.compare_set(self.done_key(j), None, b"lost")
        self._found(decode_cause(raw))

    # -- the end of the round --

    def finish(self, ok: bool) -> RootCause | None:
        """Report this node's end; wait for every node's; return the job-wide root cause.

        The wait lasts as long as other nodes still run healthy workers; it ends early
        when this node loses contact with the store (heartbeat timeout).
        """
        if self._lost_contact is not None:
            return self._lost_contact  # nobody to report to
        try:
            self.kv.set(self.end_key(self.node_index), b"ok" if ok else b"failed")
            keys = [self.end_key(j) for j in range(self.nnodes)]
            while True:
                if self._lost_contact is not None:
                    return self._lost_contact
                try:
                    self._wait_all(keys, WATCH_CHUNK)
                    break
                except StoreTimeoutError:
                    continue
            raw = self.kv.try_get(self.abort_key)
            cause = decode_cause(raw) if raw is not None else None
        except StoreError as exc:
            cause = self.root_cause or self._contact_cause(str(exc))
        # Node 0 keeps its store up until every node has said it read the outcome (and the
        # store answers requests in flight before it closes), so this cannot fail unless
        # node 0 died just now; the outcome is known already, so then it changes nothing.
        try:
            self.kv.set(self.done_key(self.node_index), b"1")
        except StoreError as exc:
            _say(f"warning: could not tell node 0 that this node read the job's outcome: {exc}")
        with self._lock:
            if cause is not None:
                self._cause = cause
        return cause

    def _wait_all(self, keys: list[str], timeout: float) -> None:
        wait = getattr(self.kv, "wait", None)
        if wait is not None:
            wait(keys, timeout=timeout)
            return
        for k in keys:
            self.kv.get(k, timeout=timeout)

    def wait_done(self, timeout: float = DONE_GRACE) -> None:
        """Node 0, before closing its store: let every node read the outcome first."""
        deadline = self.clock() + timeout
        for j in range(self.nnodes):
            left = deadline - self.clock()
            if left <= 0:
                return
            with contextlib.suppress(StoreError):
                self.kv.get(self.done_key(j), timeout=left)


def tcp_store_watch(
    *,
    address: tuple[str, int],
    token: bytes | None,
    kv: StoreClient,
    node_index: int,
    nnodes: int,
    hosts: Sequence[str],
    round_: int,
    heartbeat_timeout: float,
) -> JobWatch:
    """A JobWatch on the launchers' TCP store: node 0 monitors heartbeats."""

    # Each call of the watch's own connections gives up after one heartbeat period, so a cut
    # network is noticed within the timeout rather than after a TCP timeout.
    period = heartbeat_timeout / HEARTBEATS_PER_TIMEOUT

    def connect() -> StoreClient:
        return StoreClient(
            *address,
            timeout=heartbeat_timeout,
            token=token,
            reconnect_timeout=period,
            io_timeout=period,
        )

    hb_kv = connect()
    liveness = CounterLiveness(hb_kv, node_index, nnodes, heartbeat_timeout)
    return JobWatch(
        connect=connect,
        kv=kv,
        liveness=liveness,
        node_index=node_index,
        nnodes=nnodes,
        hosts=hosts,
        round_=round_,
        heartbeat_timeout=heartbeat_timeout,
        monitor=node_index == 0,
        heartbeat_kv=hb_kv,
    )


class JobSession:
    """A multi-node launcher's link to the others for the whole job: hosts the store on
    node 0, joins each round's rendezvous, and hands out each round's JobWatch.

        session = JobSession.open(...)
        for round_ in range(max_restarts + 1):
            result = session.rendezvous(round_, entry)    # all nodes' ports, same everywhere
            watch = session.watch(round_)                 # fd/poll/publish for the supervisor
            ... supervisor.run(extra_fds={watch.fd: watch.poll}, on_failure=watch.publish)
            cause = watch.finish(ok)                      # job-wide: None = all nodes fine
        session.close()                                   # node 0 waits for the others first
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
        progress: Callable[[str], None],
        make_watch: Callable[[int], JobWatch],
        server: object | None = None,
        master: tuple[str, int] | None = None,
        token: bytes | None = None,
    ) -> None:
        self.kv = kv
        self.node_index = node_index
        self.nnodes = nnodes
        self.hosts = list(hosts)
        self.rdzv_timeout = rdzv_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.progress = progress
        self._make_watch = make_watch
        self.server = server
        self.master = master
        self.token = token
        # whether this launcher's exit takes away keys the others may still read: node 0's
        # on the TCP store (it hosts it), every node's on etcd (its keys carry its lease)
        self.keeps_keys = server is not None
        self._watches: list[JobWatch] = []

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
        progress: Callable[[str], None],
    ) -> JobSession:
        """Node 0 starts the store at `master`; every node connects (retrying to the timeout)."""
        from paddlike.launch.rendezvous import RendezvousTimeout, host_store, hosts_store

        server = None
        if hosts_store(master[0], hosts, node_index):
            server = host_store(master[0], master[1], allowed_hosts=hosts, token=token)
        try:
            kv = StoreClient(
                *master,
                timeout=rdzv_timeout,
                token=token,
                reconnect_timeout=heartbeat_timeout,
                io_timeout=heartbeat_timeout,
            )
        except StoreTimeoutError as exc:
            if server is not None:
                server.close()
            raise RendezvousTimeout(
                f"rendezvous: node 0 ({hosts[0]}) never opened the launchers' store: {exc}"
            ) from exc
        except StoreError:
            if server is not None:
                server.close()
            raise

        def make_watch(round_: int) -> JobWatch:
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

        return cls(
            kv=kv,
            node_index=node_index,
            nnodes=len(hosts),
            hosts=hosts,
            rdzv_timeout=rdzv_timeout,
            heartbeat_timeout=heartbeat_timeout,
            progress=progress,
            make_watch=make_watch,
            server=server,
            master=master,
            token=token,
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
        progress: Callable[[str], None],
    ) -> JobSession:
        """Every node talks to the etcd cluster; none hosts anything. Each holds a lease
        (TTL --heartbeat_timeout) and marks itself alive under it."""
        from paddlike.launch.etcd import (
            EtcdStore,
            EtcdUnreachable,
            LeaseLiveness,
            parse_etcd_master,
        )
        from paddlike.launch.rendezvous import RendezvousError, RendezvousTimeout

        kv = EtcdStore(
            parse_etcd_master(master),
            job_id=job_id,
            timeout=rdzv_timeout,
            io_timeout=max(0.5, heartbeat_timeout / HEARTBEATS_PER_TIMEOUT),
        )
        deadline, delay = time.monotonic() + rdzv_timeout, 0.05
        while True:
            try:
                if kv.lease is None:
                    kv.grant_lease(heartbeat_timeout)
                kv.set(f"alive/{node_index}", str(os.getpid()))
                break
            except EtcdUnreachable as exc:
                if time.monotonic() + delay > deadline:
                    kv.close()
                    raise RendezvousTimeout(
                        f"rendezvous: etcd at {kv.address} did not answer within "
                        f"{rdzv_timeout:g} s (--rdzv_timeout): {exc}"
                    ) from exc
                time.sleep(delay)  # etcd not up yet: back off and retry until the deadline
                delay = min(delay * 2, 1.0)
            except StoreError as exc:
                kv.close()
                raise RendezvousError(f"--master: cannot use etcd at {kv.address}: {exc}") from exc

        def make_watch(round_: int) -> JobWatch:
            return JobWatch(
                connect=kv.sharing_lease,
                kv=kv,
                liveness=LeaseLiveness(kv, node_index, len(hosts)),
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
        )
        session.keeps_keys = True
        return session

    def rendezvous(self, round_: int, entry: NodeEntry) -> RendezvousResult:
        from paddlike.launch.rendezvous import Rendezvous, find_rival

        def rival_check(round_: int, missing: list[int]) -> str | None:
            if self.server is None or self.master is None:
                return None  # only a store's host can have a rival
            return find_rival(entry, round_, self.hosts, missing, self.master[1], self.token)

        rdzv = Rendezvous(
            kv=self.kv,
            node_index=self.node_index,
            nnodes=self.nnodes,
            hosts=self.hosts,
            timeout=self.rdzv_timeout,
            progress=self.progress,
            rival_check=rival_check,
        )
        try:
            return rdzv.join(entry, round_)
        except Exception:
            if self.keeps_keys:  # the others must read the verdict before it goes
                rdzv.linger(round_, DONE_GRACE)
            raise

    def watch(self, round_: int, log_dir: str | None = None) -> JobWatch:
        for old in self._watches:
            old.stop()
        w = self._make_watch(round_)
        w.log_dir = log_dir
        w.start()
        self._watches.append(w)
        return w

    def close(self) -> None:
        """Stop the watches; node 0 first waits (briefly) until every node read the outcome."""
        if self.keeps_keys and self._watches:
            self._watches[-1].wait_done()
        for w in self._watches:
            w.stop()
        with contextlib.suppress(StoreError):
            self.kv.close()
        if self.server is not None:
            self.server.close()  # type: ignore[attr-defined]


def _say(line: str) -> None:
    import sys

    print(f"paddlike.launch: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class NodeJob:
    """This node's part of a many-node job, as the rounds need it (collective or PS).

    `reserve`: how many ports this node reserves and publishes at each rendezvous
    (collective: one per trainer and the workers' store; PS: none, its ports are given
    or derived from --start_port identically on every node). `plan` builds the round's
    plan from the rendezvous result (every node's ports, the job id in force).
    `servers_wait_for_job`: PS; the servers stop when every trainer of the job is done.
    """

    hosts: tuple[str, ...]  # every node's address, in node order
    index: int
    interface: str
    reason: str  # how this node was matched, for the banner
    master: tuple[str, int]  # the launchers' TCP store (unless --master etcd://...)
    fingerprint: dict[str, str]
    reserve: int
    plan: Callable[[RendezvousResult, JobFacts], LaunchPlan]
    servers_wait_for_job: bool = False


def collective_node_job(options, node, devices) -> NodeJob:
    """Collective mode: ports reserved here and traded at the rendezvous."""
    from paddlike.launch.plan import EndpointLayout, plan_collective
    from paddlike.launch.rendezvous import fingerprint, master_address

    hosts, nproc = tuple(node.hosts), devices.nproc

    def plan(result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        layout = EndpointLayout(
            hosts,
            node.node_index,
            tuple(n.ports[:nproc] for n in result.nodes),
            master_port=result.nodes[0].ports[nproc],
        )
        return plan_collective(options, layout, devices, facts)

    return NodeJob(
        hosts=hosts,
        index=node.node_index,
        interface=node.interface,
        reason=node.reason,
        master=master_address(options.master, options.master_addr, options.master_port, hosts),
        fingerprint=fingerprint(
            ips=hosts,
            devices_per_node=len(options.gpus or ()),
            nproc_per_node=nproc,
            run_mode=options.run_mode,
            job_id=options.job_id,
            script=options.training_script,
            script_args=options.training_script_args,
        ),
        reserve=nproc + 1,
        plan=plan,
    )


def ps_node_job(options, layout, interface: str, reason: str) -> NodeJob:
    """Parameter-server lists on several nodes: the node holding the first server hosts the
    launchers' store (unless --master/--master_addr say otherwise); raises UsageError when
    --master_port is a port the lists give to a server or trainer there."""
    from paddlike.launch.plan import plan_ps
    from paddlike.launch.rendezvous import master_address, ps_fingerprint, ps_master_port

    hosts = tuple(layout.node_hosts)
    master = master_address(options.master, options.master_addr, options.master_port, hosts)
    taken = (*layout.servers, *layout.trainers, layout.gloo_endpoint)
    master = (master[0], ps_master_port(master, options.master_port, taken))

    def plan(result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        return plan_ps(options, layout, facts)

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
        ),
        reserve=0,
        plan=plan,
        servers_wait_for_job=True,
    )


def run_multinode(options, job: NodeJob, environ, *, python: str | None = None) -> int:
    """The launcher's many-node path: rendezvous, supervise, abort job-wide, restart.

    `options` is the LaunchOptions, `job` this node's part (`collective_node_job`,
    `ps_node_job`). Returns the exit code. Each round: reserve ports here, trade them at
    rendezvous, plan with every node's ports, supervise with the watch's hooks, then
    agree on the round's outcome.
    """
    import sys

    from paddlike.launch.logdir import LogDir, LogDirBusy, LogDirError
    from paddlike.launch.rendezvous import RendezvousError

    python = python or sys.executable
    hosts, index = list(job.hosts), job.index
    token = options.job_token.encode() if options.job_token else None
    log_dir = os.path.abspath(options.log_dir)
    try:
        logdir = LogDir.open(log_dir, overwrite=options.log_overwrite, host=hosts[index])
    except (LogDirBusy, LogDirError) as exc:
        _say(f"error: --log_dir: {exc}")
        return 2
    with logdir:
        try:
            if options.master and options.master.startswith("etcd://"):
                session = JobSession.open_etcd(
                    master=options.master,
                    job_id=options.job_id,
                    node_index=index,
                    hosts=hosts,
                    rdzv_timeout=options.rdzv_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    progress=_say,
                )
            else:
                session = JobSession.open_tcp(
                    master=job.master,
                    node_index=index,
                    hosts=hosts,
                    token=token,
                    rdzv_timeout=options.rdzv_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    progress=_say,
                )
        except (RendezvousError, StoreError) as exc:
            _say(f"error: {exc}")
            return getattr(exc, "exit_code", 1)
        try:
            return _rounds(session, options, job, environ, python, logdir)
        finally:
            session.close()


def _rounds(session, options, job: NodeJob, environ, python, logdir) -> int:
    """Rounds (`rounds.run_rounds`) until one succeeds on every node, or restarts run out."""
    import socket
    import sys

    from paddlike.launch.console import format_banner
    from paddlike.launch.main import new_job_id
    from paddlike.launch.plan import JobFacts
    from paddlike.launch.ports import PortError, reserve_ports
    from paddlike.launch.rendezvous import RendezvousError
    from paddlike.launch.rounds import RoundEnd, run_rounds
    from paddlike.launch.supervisor import Supervisor

    hostname = socket.gethostname()
    hosts, index = list(job.hosts), job.index
    generated_job_id = options.job_id or new_job_id()

    def one_round(round_: int) -> RoundEnd:
        try:
            ports = reserve_ports(job.reserve, hosts[index]) if job.reserve else ()
            entry = NodeEntry(
                index,
                hosts[index],
                hostname,
                os.getpid(),
                tuple(ports),
                job.fingerprint,
                job_id=generated_job_id,
            )
            result = session.rendezvous(round_, entry)
        except (RendezvousError, PortError) as exc:
            _say(f"error: {exc}")
            return RoundEnd(getattr(exc, "exit_code", 1), RootCause(reason=str(exc)))
        facts = JobFacts(
            result.job_id, python, str(logdir.path), environ, job.interface, restart_count=round_
        )
        plan = job.plan(result, facts)
        logdir.write_endpoints(plan.trainer_endpoints, plan.server_endpoints)
        if round_ == 0:
            _say(
                f"rendezvous with {len(hosts)} nodes at {session.kv.address} took "
                f"{result.elapsed:.2f} s"
            )
            banner = format_banner(plan, logdir.path, interface=job.interface, why=job.reason)
            print(banner, file=sys.stderr, flush=True)
        watch = session.watch(round_, log_dir=str(logdir.path))
        supervisor = Supervisor(
            plan, logdir, base_env=environ, kill_timeout=options.kill_timeout, tee=options.tee
        )
        outcome = supervisor.run(
            extra_fds={watch.fd: watch.poll},
            on_failure=watch.publish,
            restart_count=round_,
            services_stop=watch.services_stop() if job.servers_wait_for_job else None,
        )
        cause = watch.finish(outcome.exit_code == 0)
        if cause is None:
            return RoundEnd(outcome.exit_code, None)
        _record_job_cause(logdir.path, cause)
        if outcome.exit_code == 0:  # else the supervisor already reported the cause
            _say(
                f"the job failed on another node: {cause.reason}"
                + (f" (host {cause.host}, log {cause.log_file})" if cause.log_file else "")
            )
            for line in cause.tail[-20:]:
                _say(f"  | {line}")
        return RoundEnd(outcome.exit_code or cause_exit_code(cause), cause)

    return run_rounds(options.max_restarts, one_round, _say)


def cause_exit_code(cause: RootCause) -> int:
    """What a launcher exits with for a job-wide root cause found elsewhere: the failed
    process's own code (128+N for signal N), as where it failed; 1 when none applies."""
    import signal

    if cause.exit_code:
        return cause.exit_code
    if cause.signal:
        with contextlib.suppress(KeyError):
            return 128 + int(signal.Signals[cause.signal])
    return 1


def _record_job_cause(log_dir, cause: RootCause) -> None:
    """The run summary of every node records the job-wide root cause."""
    from paddlike.summary import read_summary, write_summary

    summary = read_summary(log_dir)
    if summary is None:
        return
    summary.root_cause = cause
    if summary.status == "succeeded":
        summary.status = "failed"
        summary.exit_code = cause_exit_code(cause)
    write_summary(log_dir, summary)
