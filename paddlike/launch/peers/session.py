"""A many-node launcher's link to the other nodes for the whole job (`StorePeers`).

It runs each round's rendezvous over a `links.Link` (node 0's store or etcd, opened by
`peers.links.open_link` from the peers' spec), the way the job's strategy says
(`rounds.FixedRounds` or `rounds.ElasticRounds`), and hands out each round's `JobWatch`.
It also knows what the launcher is waiting for at any moment (`waiting_for`, from its
`PeersState`), so that an interrupt can say so, and tells the other nodes that this
launcher stops (`publish_stop`: nothing before it connected, else what
`protocol.stop_writes` says).

Node 0's store refuses clients with a wrong or missing job token and logs each address
once; the refused launcher exits 2 saying so. Node 0 does not end the rendezvous for it:
anyone who can reach the port can fail a handshake on purpose (issue 31).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Sequence

from paddlike.distributed.store import WRONG_TOKEN, StoreError
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.rendezvous import Rendezvous, linger
from paddlike.launch.peers.rendezvous_errors import RendezvousError, RendezvousTimeout
from paddlike.launch.peers.watch import DONE_GRACE, JobWatch, WatchSpec
from paddlike.launch.plan.world import NodeEntry, RendezvousResult, describe_missing
from paddlike.summary import RootCause

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.peers.elastic_rendezvous import ElasticRendezvous
    from paddlike.launch.peers.links import Link
    from paddlike.launch.peers.rounds import ElasticRounds, FixedRounds


class PeersState(enum.Enum):
    """What a many-node launcher waits for, as an interrupt's line says it.

    CONNECTED -> RENDEZVOUS -> RUNNING -> FINISHING -> RENDEZVOUS (the next round) ...;
    FINISHING -> READING_OUTCOME (`close`) | READING_END (`end_elastic`, then `close`);
    any -> READING_STOP (`wait_readers`, after a signal's `publish_stop`).
    """

    CONNECTED = "joining the rendezvous at {address}"
    RENDEZVOUS = "waiting for the other nodes at the rendezvous at {address}"
    RUNNING = "running round {round}"
    FINISHING = "waiting for the other nodes to finish round {round}"
    READING_STOP = "waiting for the other nodes to read why this launcher stopped"
    READING_OUTCOME = "waiting for the other nodes to read the job's outcome"
    READING_END = "waiting for the nodes waiting to join to read the job's end"


class StorePeers:
    """A many-node launcher's link to the others for the whole job (see `peers.Peers`).

    link = open_link(spec, job, ...)               # node 0's store or etcd
    peers = StorePeers(link, rounds_for(link, ...), ...)
    for round_ in range(max_restarts + 1):
        result = peers.rendezvous(round_, entry)    # all nodes' ports, same everywhere
        watch = peers.watch(round_, log_dir, ...)   # fd/poll/publish for the supervisor
        ... supervisor.run(extra_fds={watch.fd: watch.poll}, on_failure=watch.publish)
        cause = peers.finish(watch, ok)             # job-wide: None = all nodes fine
    peers.close()                                   # node 0 waits for the others first
    """

    def __init__(
        self,
        link: Link,
        rounds: FixedRounds | ElasticRounds,
        *,
        node_index: int,
        hosts: Sequence[str],
        heartbeat_timeout: float,
    ) -> None:
        """`link`: node 0's store or etcd (`peers.links`); `rounds`: the job's strategy
        (`peers.rounds.rounds_for`)."""
        self.link = link
        self.kv = link.kv
        # `node_index` is this node's from round 0 on (before it: the rank asked for, or
        # a placeholder when round 0 assigns the ranks)
        self.node_index = node_index
        self.hosts = list(hosts)
        self.heartbeat_timeout = heartbeat_timeout
        self.rounds = rounds
        self.elastic = rounds.elastic
        self._watches: list[JobWatch] = []
        self._rdzv: Rendezvous | ElasticRendezvous | None = None  # the one in progress
        self._round: int | None = None  # the round of the rendezvous or of the watch
        self.state = PeersState.CONNECTED

    @property
    def waiting_for(self) -> str:
        """What this launcher waits for now, for the line an interrupt prints."""
        rdzv = self._rdzv
        if rdzv is not None and rdzv.missing:
            return (
                f"waiting for {describe_missing(rdzv.missing, self.hosts)} at the rendezvous "
                f"at {self.kv.address}"
            )
        return self.state.value.format(address=self.kv.address, round=self._round)

    @property
    def address(self) -> str:
        return self.kv.address

    @property
    def keeps_keys(self) -> bool:
        return self.link.keeps_keys

    @property
    def survivors(self) -> set[tuple[str, int]] | None:
        """Elastic: the last round's members that may come back; else None."""
        return self.rounds.survivors

    # -- the rounds --

    def rendezvous(self, round_: int, entry: NodeEntry) -> RendezvousResult:
        """Round `round_`'s rendezvous (an elastic job's may place this node in a later
        round: the result says which)."""
        rdzv, entry = self.rounds.rendezvous(round_, entry, self.hosts, self.node_index)
        self._rdzv, self._round = rdzv, round_
        self.state = PeersState.RENDEZVOUS
        try:
            result = rdzv.join(entry, round_)
        except StoreError as exc:  # the store went while waiting (node 0 lost)
            self._rdzv = None
            raise RendezvousError(
                f"rendezvous: lost the launchers' store at {self.kv.address}: {exc}"
            ) from exc
        except Exception as exc:
            self._rdzv = None
            if self.keeps_keys and self.rounds.stop_aborts_rendezvous:
                rdzv.linger(round_, DONE_GRACE)  # type: ignore[union-attr]  (read the verdict)
            if isinstance(exc, RendezvousTimeout) and (note := self._refusals()):
                raise RendezvousTimeout(f"{exc}; {note}") from exc
            raise
        except BaseException:
            # a LauncherSignal: `publish_stop` aborts the rendezvous for every node, or
            # (elastic) this node leaves it alone
            if not self.rounds.stop_aborts_rendezvous:
                self._rdzv = None
            raise
        self._rdzv = None
        self._round = result.round
        self.rounds.joined(result)
        self.hosts = list(result.hosts)
        self.node_index = result.own_index(self.node_index)
        self.state = PeersState.RUNNING
        return result

    def _refusals(self) -> str:
        """For node 0's timeout: the addresses its store refused for their token, if any
        (a node's launcher given another token; or a stranger, so only a hint)."""
        if self.link.server is None:
            return ""
        refused = [a for a, why in self.link.server.refused.items() if why.startswith(WRONG_TOKEN)]
        if not refused:
            return ""
        more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
        return (
            f"this node's store refused {', '.join(refused[:3])}{more} for a {WRONG_TOKEN}: "
            "a launcher there may have another --job_token than this node's"
        )

    def watch(self, round_: int, log_dir: str, *, services: bool) -> JobWatch:
        """This round's watch, whole and started (`services`: PS on several nodes, whose
        servers stop when every trainer of the job is done)."""
        if self._watches:
            self._watches[-1].stop()  # (the earlier ones were stopped in their turn)
        spec = WatchSpec(
            round_, tuple(self.hosts), self.node_index, log_dir, services, self.elastic
        )
        w = JobWatch(spec, self.link.transport(spec)).start()
        self._watches.append(w)
        self._round = round_
        self.state = PeersState.RUNNING
        return w

    def finish(self, watch: JobWatch, ok: bool) -> RootCause | None:
        """`watch.finish`, saying meanwhile that this launcher waits for the other nodes."""
        self.state = PeersState.FINISHING
        cause = watch.finish(ok)
        return self.rounds.round_cause(watch, cause, self.hosts, self.heartbeat_timeout)

    def publish_stop(self, cause: RootCause) -> bool:
        """This launcher stops outside a supervised round (a signal): tell the other nodes,
        so that they stop too (then `wait_readers`). False when there was no one to tell
        (not connected, or the only launcher at the rendezvous so far)."""
        round_ = self._round
        if round_ is None:
            return False
        if self._rdzv is not None and not self.rounds.stop_aborts_rendezvous:
            return self._withdraw(self._rdzv)  # type: ignore[arg-type]
        cause = self.rounds.stop_cause(cause)  # elastic, between rounds: this node leaves
        rdzv = self._rdzv
        writes = p.stop_writes(
            round_,
            p.encode_cause(cause),
            in_rendezvous=rdzv is not None,
            ticket=rdzv.ticket if rdzv is not None else None,
            node=self.node_index,
        )
        try:
            kv = self.link.connect()  # (node 0: straight into its own store's table)
            try:
                # Count the arrivals before publishing: once our "left" key is there, node 0
                # may read the verdict, see everyone gone and close its store at once.
                count = kv.try_get(p.arrived_key(round_))
                for key, value in writes:
                    kv.compare_set(key, None, value)
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
        if not self.rounds.nodes_may_wait or (self._watches and self._watches[-1].lost_contact):
            return  # (nobody waits to join; or no store to tell anything)
        waiting = self.rounds.waiting_round()
        with contextlib.suppress(StoreError):
            if self.keeps_keys:  # node 0's store, etcd: the others may still be reading
                self.kv.compare_set(p.ELASTIC_END_KEY, None, how.encode())
                if waiting is not None:
                    self.state = PeersState.READING_END
                    linger(self.kv, waiting, DONE_GRACE)
                return
            kv = self.link.connect()  # short-lived: node 0 may have closed its store already
            try:
                kv.compare_set(p.ELASTIC_END_KEY, None, how.encode())
            finally:
                kv.close()

    def wait_readers(self) -> None:
        """After `publish_stop`: where this launcher's exit takes the keys away (node 0, etcd),
        wait (up to DONE_GRACE) until the others have read why it stopped."""
        if not self.keeps_keys or self._round is None:
            return
        self.state = PeersState.READING_STOP
        if self._rdzv is not None:
            linger(self.kv, self._round, DONE_GRACE)
        elif self._watches:
            self._watches[-1].wait_done()

    def close(self, linger: bool = True) -> None:
        """Stop the watches; node 0 first waits (briefly) until every node read the outcome
        (unless `linger` is False: `publish_stop` waited already, or was cut short)."""
        if linger and self.keeps_keys and self._watches:
            self.state = PeersState.READING_OUTCOME
            self._watches[-1].wait_done()
        for w in self._watches:
            w.stop()
        self.link.close()

