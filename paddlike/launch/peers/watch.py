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
  (node 0 gone, network cut) aborts with that as the cause; at once when node 0's
  host refuses a new connection to the store (`peers.storegone`). Each call on the
  watch's own connections gives up after one beat period, so a cut network is
  seen within the timeout rather than after TCP's;
- parameter-server jobs: `services` is the supervisor's `ServicesStop`, from
  `peers.trainers_ok`: the servers stop everywhere once every node's trainers are done;
- `stacks` (`peers.stackreq.StackChannel`): job-wide stack requests, with their own
  thread blocked on the next request key and their own `fd`;
- elastic jobs (`elastic` set): a lost node's cause is a membership change (a new
  round follows), a signal to this launcher makes this node leave (`leaving`, its end
  "left"), and below MAX the monitors end the round for a node waiting in the next one
  (`_check_joining`); `finish` keeps every node's end mark (`ends`) for the survivors;
- `finish(ok)` reports this node's end and waits until every node has ended (or
  was lost); it returns the job-wide root cause, None when the round succeeded
  everywhere. Node 0 keeps its store up until everyone has read the outcome
  (`StorePeers.close`; on etcd every node waits so, as its keys go with its lease).

`run.job.JobRun` runs the rounds; `session.StorePeers` makes one JobWatch per round from
what the round is (`WatchSpec`) and how its link reaches the store (`WatchTransport`,
from `peers.links`: node 0's TCP store or etcd).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from paddlike import netaddr
from paddlike.distributed.store import StoreError, StoreTimeoutError
from paddlike.launch import NamedTuple
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers import storegone
from paddlike.launch.peers.kv import KV, wait_keys
from paddlike.launch.peers.services import ServicesStop
from paddlike.launch.peers.stopstep import (
    OUTCOME_TIMEOUT,
    StopStep,
    agree_stop_step,
    gather_outcomes,
    share_outcome,
)
from paddlike.launch.peers.trainers_ok import JobTrainersOk
from paddlike.launch.plan.membership import LEFT, LOST, ElasticSpec, joined_cause
from paddlike.launch.plan.policy import (
    JobCause,
    as_seen_from,
    lost_node_cause,
    store_contact_cause,
)
from paddlike.launch.plan.world import store_host_label
from paddlike.summary import RootCause

if TYPE_CHECKING:
    from paddlike.launch.peers.liveness import Liveness
    from paddlike.launch.peers.stackreq import StackChannel

HEARTBEATS_PER_TIMEOUT = 5
WATCH_CHUNK = 2.0  # seconds per blocking wait on a key (to notice `stop()`)
DONE_GRACE = 5.0  # how long node 0 waits for the others to read the outcome
# how long a process's failure waits for a lost node's word first (its guardian writes
# it within milliseconds; in chaos trials it won even without this wait)
LOSS_GRACE = 0.05
# said when node 0 of an elastic job on its own store gets a signal: it cannot just leave
STORE_HOST_ENDS = (
    ": it hosts the launchers' store, so the elastic job ends on every node (with --master "
    "etcd://... an elastic job goes on without any one node)"
)


class WatchSpec(NamedTuple):
    """What one round's watch is for: the round's members and this node's place in them."""

    round: int
    hosts: tuple[str, ...]
    node_index: int
    log_dir: str
    services: bool  # PS on several nodes: the servers stop with the job's trainers
    elastic: ElasticSpec | None


class WatchTransport(NamedTuple):
    """How one round's watch reaches the job's store, as its link's backend provides it
    (`peers.links`: node 0's TCP store or etcd)."""

    kv: KV  # the link's connection: publishing, the round's end
    connect: Callable[[], KV]  # a connection of its own, for each thread that blocks on one
    liveness: Liveness  # this node's heartbeats, and which nodes fell silent
    heartbeat_timeout: float
    monitor: bool  # this node names the silent nodes lost (node 0 on the TCP store; all on etcd)
    heartbeat_kv: KV | None = None  # the heartbeat thread's own connection (default: `kv`)
    # this node hosts the launchers' store: it cannot leave an elastic job alone (its store
    # goes with it), so a signal to it ends the job everywhere
    hosts_store: bool = False
    stacks: StackChannel | None = None  # job-wide stack requests (SIGUSR1, --hang_timeout)
    # what this node's guardian writes to the store if the launcher dies (`run.guardian`),
    # so that the others name the lost node at once; None: nobody to tell
    death_notice: bytes | None = None
    clock: Callable[[], float] = time.monotonic  # the watch's time (a test moves it)


class JobWatch:
    """One node's failure handling for one round (see the module docstring): what the
    round is (`WatchSpec`) and how it reaches the store (`WatchTransport`)."""

    def __init__(
        self,
        spec: WatchSpec,
        transport: WatchTransport,
        *,
        warn: Callable[[str], None] = lambda line: None,
    ) -> None:
        """`spec.elastic`: lost nodes and nodes leaving on a signal are membership changes,
        and a node waiting in the next round below MAX ends this one; `spec.log_dir`: for
        the log files named in published causes; `spec.services`: PS on several nodes (the
        servers stop with the job's trainers); `transport.stacks` is started and stopped
        with the watch."""
        self.kv = transport.kv
        self.warn = warn  # the console's warning line
        self.heartbeat_kv = transport.heartbeat_kv or transport.kv
        self._connect = transport.connect
        self.liveness = transport.liveness
        self.node_index = spec.node_index
        self.nnodes = len(spec.hosts)
        self.hosts = list(spec.hosts)
        self.round = spec.round
        self.heartbeat_timeout = transport.heartbeat_timeout
        self.monitor = transport.monitor
        self.clock = transport.clock
        self.abort_key = p.abort_key(spec.round)
        self.elastic = spec.elastic
        self.log_dir = spec.log_dir
        self.hosts_store = transport.hosts_store
        self.death_notice = transport.death_notice
        self._read_fd, self._write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._cause = JobCause()  # the job-wide root cause, once known (under the lock)
        self._lost_contact: RootCause | None = None
        self._threads: list[threading.Thread] = []
        self._trainers_ok: JobTrainersOk | None = None
        self.services: ServicesStop | None = None
        if spec.services:
            keys = [p.trainers_ok_key(self.round, j) for j in range(self.nnodes)]
            self._trainers_ok = JobTrainersOk(
                self.kv, self._connect, keys=keys, node_index=self.node_index, warn=warn
            )
            self.services = self._trainers_ok
        self._fds_open = True  # until stop() closes them
        self.stacks = transport.stacks
        self.leaving = False  # elastic: this node's launcher got a signal and leaves
        self.ends: dict[int, bytes] = {}  # each node's end mark, once `finish` read them
        self._sharing = False  # a preemption's outcome shared: `finish` reads the others'
        self._others_outcomes: list[dict] | None = None

    @property
    def on_etcd(self) -> bool:
        return self.kv.address.startswith("etcd://")

    @property
    def store_host_label(self) -> str:
        """Who this node loses when the store goes: node 0 on the TCP store, else the store."""
        host = netaddr.split(self.kv.address)[0]  # [fd00::1]:6170 -> fd00::1
        label = store_host_label(self.node_index, self.hosts, host, self.hosts_store)
        return label or f"the store ({self.kv.address})"

    @property
    def fd(self) -> int:
        """Readable when the job must end for a cause found by a thread of this watch."""
        return self._read_fd

    def connect(self) -> KV:
        """A connection of its own to the job's store (for a thread that blocks on it)."""
        return self._connect()

    def agree_stop_step(self, position: int, timeout: float) -> StopStep:
        """A preemption notice: the job's stop step (`peers.stopstep`), own connection."""
        keys = [p.stop_step_key(self.round, j) for j in range(self.nnodes)]
        return agree_stop_step(self._connect, keys, self.node_index, position, timeout)

    def share_stop_outcome(self, part: dict) -> None:
        """A preemption's outcome on this node (`run.preempt`), before `finish`'s end mark;
        `finish` then reads the others' before it says it read the round's outcome (node 0
        closes its store, an etcd node's keys go, once every node said so)."""
        share_outcome(self.kv, p.stop_outcome_key(self.round, self.node_index), part)
        self._sharing = True

    def stop_outcomes(self, timeout: float = OUTCOME_TIMEOUT) -> list[dict]:
        """After `finish`: the other nodes' outcomes, or why one is unknown (`peers.stopstep`)."""
        if self._others_outcomes is not None:  # read by `finish`
            return self._others_outcomes
        keys = [p.stop_outcome_key(self.round, j) for j in range(self.nnodes)]
        ends = [self.end_key(j) for j in range(self.nnodes)]
        marks = (ends, p.END_LOST)
        cut = "this node lost contact with the launchers' store" if self.lost_contact else ""
        return gather_outcomes(self.kv, keys, marks, self.hosts, self.node_index, timeout, cut)

    def end_key(self, node: int) -> str:
        return p.end_key(self.round, node)

    def done_key(self, node: int) -> str:
        return p.done_key(self.round, node)

    def start(self) -> JobWatch:
        threads = [(self._watch, "abort-watch"), (self._heartbeat, "heartbeat")]
        for target, name in threads:
            t = threading.Thread(target=target, name=f"{name}-r{self.round}", daemon=True)
            t.start()
            self._threads.append(t)
        if self._trainers_ok is not None:
            self._threads.append(self._trainers_ok.start(f"trainers-ok-r{self.round}"))
        if self.stacks is not None:
            self.stacks.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self.stacks is not None:
            self.stacks.stop()
        if self._trainers_ok is not None:
            self._trainers_ok.stop()
        with self._lock:  # the threads write to these fds under the lock, never after this
            if not self._fds_open:
                # stopped already: closing the numbers again would close whatever new
                # descriptors took them (the store's sockets, a later round's pipes)
                return
            fds, self._fds_open = (self._read_fd, self._write_fd), False
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- the supervisor's hooks --

    def publish(self, cause: RootCause) -> None:
        """`on_failure`: make `cause` the job's root cause unless another node's came first."""
        if cause.time is None:
            cause.time = time.time()
        if cause.log_file and self.log_dir and not os.path.isabs(cause.log_file):
            # the other nodes cannot join a relative name to our log directory
            cause = cause.replace(log_file=os.path.join(self.log_dir, cause.log_file))
        if self.elastic is not None and cause.signal and cause.role is None:
            if self.hosts_store:
                # node 0 hosts the launchers' store: the others cannot go on without it
                cause = cause.replace(reason=cause.reason + STORE_HOST_ENDS)
            else:
                # a signal to this launcher (a preemption's SIGTERM): this node leaves the job
                self.leaving = True
                cause = cause.replace(membership=LEFT)
        try:
            winner = self._first_cause(cause)
        except StoreError as exc:
            winner = self._store_gone(cause, str(exc))
        with self._lock:
            self._cause.published(winner)

    def _first_cause(self, cause: RootCause) -> RootCause:
        """The round's first cause, ours unless one came before. A process's failure waits
        LOSS_GRACE for one first: when a node is lost its workers die with its launcher,
        and their peers' collectives fail at once (a consequence); the lost node's
        guardian says so within milliseconds (`run.guardian`)."""
        if cause.role is not None and self.nnodes > 1:
            with contextlib.suppress(StoreTimeoutError):
                return p.decode_cause(self.kv.get(self.abort_key, timeout=LOSS_GRACE))
        return p.decode_cause(self.kv.compare_set(self.abort_key, None, p.encode_cause(cause)))

    def _store_gone(self, cause: RootCause, detail: str) -> RootCause:
        """Publishing failed: the store did not answer (node 0 lost, or the network). This
        node's failure is then most likely a consequence (its peers went with node 0): the
        cause is the lost contact, once the heartbeats say so (within one timeout); our own
        cause only if the store answers again. The timeout counts from the failure: one held
        back as a consequence of a peer's exit (`run.consequence`) has waited already."""
        waited = max(0.0, time.time() - cause.time) if cause.time is not None else 0.0
        deadline = self.clock() + max(0.0, self.heartbeat_timeout - waited)
        first = True
        while first or self.clock() < deadline:
            first = False
            # a cause this watch learned meanwhile (the lost contact, by its heartbeats or its
            # abort watcher) wins: the supervisor is blocked here and cannot act on its fd
            known = self._lost_contact or self.root_cause or self._refused()
            if known is not None:
                return known
            try:
                return p.decode_cause(
                    self.kv.compare_set(self.abort_key, None, p.encode_cause(cause))
                )
            except StoreError as exc:
                detail = str(exc)
            self._stop.wait(self.heartbeat_timeout / HEARTBEATS_PER_TIMEOUT)  # no event: a retry
        self._lost_contact = self._lost_contact or self._contact_cause(detail)
        return self._lost_contact

    @property
    def lost_contact(self) -> bool:
        """Whether this node lost contact with the store (nobody is left to tell anything)."""
        return self._lost_contact is not None

    def poll(self) -> RootCause | None:
        """`extra_fds` callback: the cause that ends the job, unless it is our own."""
        with contextlib.suppress(OSError):
            os.read(self._read_fd, 4096)
        with self._lock:
            cause = self._cause.to_act_on()
        return None if cause is None else as_seen_from(cause, self.node_index, self.hosts)

    @property
    def root_cause(self) -> RootCause | None:
        with self._lock:
            return self._cause.cause

    def _found(self, cause: RootCause) -> None:
        with self._lock:
            self._cause.learned(cause)
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
                    if (refused := self._refused()) is not None:
                        self._found(refused)
                        return
                    # the connection broke: the heartbeat thread decides when it is fatal
                    time.sleep(0.1)  # no event to wait on: the peer is gone; retry shortly
                    with contextlib.suppress(StoreError):
                        kv.close()
                        kv = self._connect()
                    continue
                self._found(p.decode_cause(raw))
                return
        finally:
            kv.close()

    def _refused(self) -> RootCause | None:
        """The lost contact, at once, when node 0's store refuses connections (`storegone`)."""
        if storegone.refuses_us(self.kv.address, self.hosts_store):
            self._lost_contact = self._lost_contact or self._contact_cause("", refused=True)
            return self._lost_contact
        return None

    def _contact_cause(self, detail: str, refused: bool = False) -> RootCause:
        return store_contact_cause(
            self.kv.address, self.node_index, self.hosts, self.store_host_label,
            self.hosts_store, self.heartbeat_timeout, detail, time.time(), refused=refused,
        )  # fmt: skip

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
                    if self.elastic is not None and self.nnodes < self.elastic.max_nodes:
                        self._check_joining()
            except StoreError as exc:
                if self._refused() or self.clock() - last_ok > self.heartbeat_timeout:
                    self._lost_contact = self._lost_contact or self._contact_cause(str(exc))
                    self._found(self._lost_contact)
                    return
            self._stop.wait(interval)  # a period, not a wait for an event

    def _check_joining(self) -> None:
        """Elastic, below MAX: a node waiting in the next round ends this one (once) —
        unless a node's processes all succeeded already: the job is ending, and the
        waiting node gets no place rather than every node redoing its last steps."""
        kv, nxt = self.heartbeat_kv, self.round + 1
        arrived = kv.try_get(p.arrived_key(nxt)) if self.root_cause is None else None
        if arrived is None:
            return
        if any(kv.try_get(self.end_key(j)) == p.END_OK for j in range(self.nnodes)):
            return
        for t in range(1, int(arrived) + 1):
            if kv.try_get(p.gone_key(nxt, t)) is not None:
                continue
            raw = kv.try_get(p.ticket_key(nxt, t))
            host = p.decode_entry(raw).host if raw is not None else ""
            cause = joined_cause(host, time.time())
            self._found(p.decode_cause(kv.compare_set(self.abort_key, None, p.encode_cause(cause))))
            return

    def _lost_node(self, j: int) -> None:
        cause = lost_node_cause(
            j, self.hosts, self.heartbeat_timeout, time.time(), ends_job=self.elastic is None
        )
        if self.elastic is not None:
            cause.membership = LOST
        kv = self.heartbeat_kv
        raw = kv.compare_set(self.abort_key, None, p.encode_cause(cause))
        kv.compare_set(self.end_key(j), None, p.END_LOST)
        kv.compare_set(self.done_key(j), None, p.END_LOST)
        self._found(p.decode_cause(raw))

    # -- the end of the round --

    def finish(self, ok: bool) -> RootCause | None:
        """Report this node's end; wait for every node's; return the job-wide root cause.

        The wait lasts as long as other nodes still run healthy workers; it ends early
        when this node loses contact with the store (heartbeat timeout).
        """
        if self._lost_contact is not None:
            return self._lost_contact  # nobody to report to
        try:
            mark = p.END_LEFT if self.leaving else p.END_OK if ok else p.END_FAILED
            self.kv.set(self.end_key(self.node_index), mark)
            keys = [self.end_key(j) for j in range(self.nnodes)]
            while True:
                if self._lost_contact is not None:
                    return self._lost_contact
                try:
                    wait_keys(self.kv, keys, WATCH_CHUNK)
                    break
                except StoreTimeoutError:
                    self._mark_silent_lost()
            if self.elastic is not None:  # who may come back in the next round
                self.ends = {j: self.kv.try_get(k) or b"" for j, k in enumerate(keys)}
            raw = self.kv.try_get(self.abort_key)
            cause = p.decode_cause(raw) if raw is not None else None
            if self._sharing:  # before "done": the others' parts are still there
                self._others_outcomes = self.stop_outcomes()
        except StoreError as exc:
            cause = self.root_cause or self._contact_cause(str(exc))
        # Node 0 keeps its store up until every node has said it read the outcome (and the
        # store answers requests in flight before it closes), so this cannot fail unless
        # node 0 died just now; the outcome is known already, so then it changes nothing.
        try:
            self.kv.set(self.done_key(self.node_index), b"1")
        except StoreError as exc:
            self.warn(f"could not tell node 0 that this node read the job's outcome: {exc}")
        with self._lock:
            self._cause.settled(cause)
        return cause

    def _mark_silent_lost(self) -> None:
        """While waiting for every node's end: a silent node's end is "lost" again. On
        etcd a key goes with its writer's lease, so the mark a monitor wrote for a lost
        node vanishes if that monitor goes too; without this the wait would never end."""
        if not self.monitor or not self.on_etcd:  # node 0's store keeps every key
            return
        with contextlib.suppress(StoreError):
            for j in self.liveness.silent(self.clock()):
                self.kv.compare_set(self.end_key(j), None, p.END_LOST)

    def wait_done(self, timeout: float = DONE_GRACE) -> None:
        """Node 0, before closing its store: let every node read the outcome first."""
        deadline = self.clock() + timeout
        for j in range(self.nnodes):
            left = deadline - self.clock()
            if left <= 0:
                return
            with contextlib.suppress(StoreError):
                self.kv.get(self.done_key(j), timeout=left)
