"""Rendezvous: every node's launcher meets the others, trades ports and checks agreement.

With more than one node, node 0's launcher hosts a `StoreServer` at the master
address (``--master ip:port``, else ``--master_addr:--master_port``, default the
first ``--ips`` entry and port 6170). Each launcher, node 0 included, then:

1. connects (retrying until ``--rdzv_timeout``);
2. publishes its `NodeEntry` (host, the ports it reserved locally, a fingerprint of
   its configuration) create-only: a second launcher claiming the same node index is
   an error naming both;
3. counts itself in; the last to arrive reads every entry, writes them all as one
   value (the round's "world") and marks the round complete. Everyone waits for that
   one key, printing one progress line naming the nodes still missing;
4. reads the world (one key, not one per node: a round costs the store O(N) calls, not
   O(N²)) and decides, identically on every node, whether the fingerprints agree
   (`plan.agreement`). The endpoints then come from the published ports, so no port
   is ever assumed free on another host.

Two launchers that each believe they are node 0 (``--ips`` in another order, no
``--master``) each host a store of their own and would wait for each other until the
timeout. So while nodes are missing, the store's host looks for a rendezvous at the
missing nodes' store port (`find_rival`) and, finding one, fails both with exit 2.
A failing store host keeps its store up until every launcher that arrived has read
the verdict (`Rendezvous.linger`). Keys and payloads: `peers.protocol`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence

from paddlike.distributed.store import StoreError, StoreTimeoutError
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.kv import KV, arrive_and_claim, get_all, wait_keys
from paddlike.launch.peers.rendezvous_errors import (
    FingerprintMismatch,
    RendezvousError,
    RendezvousFull,
    RendezvousTimeout,
)
from paddlike.launch.plan.agreement import (
    assign_ranks,
    check_fingerprints,
    claim_message,
    job_id_in_force,
    missing_nodes,
    rival_message,
    same_job,
    who,
)
from paddlike.launch.plan.world import NodeEntry, RendezvousResult, describe_missing

PROGRESS_FIRST = 1.0  # seconds before the first "waiting for" line (fast joins print nothing)
# jobs up to this many nodes name the missing ones in every progress line; larger ones
# count them while nodes still arrive (naming reads every entry: O(N) per node a second)
ALWAYS_NAMED = 64
RIVAL_PROBE_TIMEOUT = 0.2  # seconds per connection attempt to a missing node's store port


def _no_progress(what: str, elapsed: float, timeout: float) -> None:
    pass


class Rendezvous:
    """One node's side of the meeting. `kv` is a connection to the master store (or etcd).

    `hosts`: every node's address, for messages about nodes that never came.
    `progress(what, elapsed, timeout)`: about once a second while nodes are missing
    (`console.progress.ProgressLine.show` decides what reaches the console).
    `rival_check(round, missing nodes)`: a mismatch message when a missing node turns out
    to run a rendezvous of its own (it read --ips in another order and believes it is node 0).
    """

    def __init__(
        self,
        kv: KV,
        node_index: int,
        nnodes: int,
        hosts: Sequence[str],
        timeout: float,
        progress: Callable[[str, float, float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rival_check: Callable[[int, list[int]], str | None] | None = None,
        assign: bool = False,
    ) -> None:
        self.kv = kv
        # ranks assigned here (the identical command on every node): entries go under
        # arrival tickets, the N-th arrival orders them (`agreement.assign_ranks`)
        self.assign = assign
        self.node_index = node_index
        self.nnodes = nnodes
        self.hosts = hosts
        self.timeout = timeout
        self.progress = progress if progress is not None else _no_progress
        self.clock = clock
        self.rival_check = rival_check
        self.missing: list[int] = []  # last seen missing, for messages
        self.ticket: int | None = None  # this launcher's arrival number (``left/<ticket>``)
        self._unseen: tuple[int, list[int]] | None = None  # (round, nodes not seen yet)
        self._last_count: tuple[int, int] | None = None  # (round, entries at the last look)

    def join(self, entry: NodeEntry, round_: int = 0) -> RendezvousResult:
        """Meet the others; every launcher that arrived marks when it has read the verdict
        (`left/<ticket>`), so that the store's host can stay up until all have read it."""
        self.ticket = None
        try:
            if self.assign:
                self.ticket = self.kv.add(p.arrived_key(round_), 1)
                return self._join_by_ticket(entry, round_, self.ticket)
            return self._join(entry, round_)  # (takes the ticket as it publishes the entry)
        except StoreError as exc:
            raise RendezvousError(
                f"rendezvous: lost the store at {self.kv.address} (node 0's launcher gone?): {exc}"
            ) from exc
        finally:
            if self.ticket is not None and getattr(self.kv, "connected", True):
                with contextlib.suppress(StoreError):
                    self.kv.set(p.left_key(round_, self.ticket), b"1")

    def linger(self, round_: int, timeout: float) -> None:
        """The store's host, failing: wait (up to `timeout`) until every launcher that
        arrived has read the verdict, so that all of them print it rather than "store gone"."""
        linger(self.kv, round_, timeout)

    def _join(self, entry: NodeEntry, round_: int) -> RendezvousResult:
        started = self.clock()
        deadline = started + self.timeout
        mine = p.encode_entry(entry)
        complete = p.complete_key(round_)
        try:
            self.ticket, stored, counted = arrive_and_claim(
                self.kv,
                p.arrived_key(round_),
                p.node_key(round_, entry.index),
                mine,
                p.count_key(round_),
            )
            if counted is None:
                message = claim_message(p.decode_entry(stored), entry)
                # Fail the whole round, so that the launcher already waiting says the same.
                self.kv.compare_set(complete, None, p.MISMATCH_PREFIX + message.encode())
                raise FingerprintMismatch(message)
            self._last_count = (round_, counted)
            if counted == self.nnodes:
                left = max(1.0, deadline - self.clock())
                keys = [p.node_key(round_, i) for i in range(self.nnodes)]
                everyone = [p.decode_entry(raw) for raw in get_all(self.kv, keys, left)]
                self.kv.set(p.world_key(round_), p.encode_world(everyone))
                self.kv.compare_set(complete, None, p.COMPLETE_OK)
            p.check_verdict(self._wait_complete(round_, started, deadline))
            left = max(1.0, deadline - self.clock())
            entries, problem = _agreement(self.kv.get(p.world_key(round_), timeout=left))
        except StoreError as exc:
            raise self._store_failed(exc, round_, deadline) from exc
        if problem:
            raise FingerprintMismatch(problem)
        return RendezvousResult(
            round_, entries, job_id_in_force(entries), self.clock() - started, entry.index
        )

    def _join_by_ticket(self, entry: NodeEntry, round_: int, ticket: int) -> RendezvousResult:
        """Ranks assigned here: publish under the arrival ticket; the N-th arrival writes
        the order (one key), the entries in that order (the world) and the verdict; every
        node reads the order (its place) and the world."""
        started = self.clock()
        deadline = started + self.timeout
        complete = p.complete_key(round_)
        if ticket > self.nnodes:
            raise RendezvousFull(self._full_message(round_, ticket, entry))
        try:
            self.kv.set(p.ticket_key(round_, ticket), p.encode_entry(entry))
            if self.kv.add(p.count_key(round_), 1) == self.nnodes:
                tickets = range(1, self.nnodes + 1)
                raws = get_all(self.kv, [p.ticket_key(round_, t) for t in tickets], 5.0)
                arrivals = [(t, p.decode_entry(raw)) for t, raw in zip(tickets, raws, strict=True)]
                order = assign_ranks(arrivals, self.nnodes)
                if isinstance(order, str):
                    self.kv.compare_set(complete, None, p.MISMATCH_PREFIX + order.encode())
                else:
                    by_ticket = dict(arrivals)
                    ranked = [by_ticket[t]._replace(index=i) for i, t in enumerate(order)]
                    self.kv.set(p.order_key(round_), p.encode_order(order))
                    self.kv.set(p.world_key(round_), p.encode_world(ranked))
                    self.kv.compare_set(complete, None, p.COMPLETE_OK)
            p.check_verdict(self._wait_complete(round_, started, deadline))
            left = max(1.0, deadline - self.clock())
            order = p.decode_order(self.kv.get(p.order_key(round_), timeout=left))
            entries, problem = _agreement(self.kv.get(p.world_key(round_), timeout=left))
        except StoreError as exc:
            raise self._store_failed(exc, round_, deadline) from exc
        if problem:
            raise FingerprintMismatch(problem)
        return RendezvousResult(
            round_,
            entries,
            job_id_in_force(entries),
            self.clock() - started,
            order.index(ticket),
        )

    def _full_message(self, round_: int, ticket: int, entry: NodeEntry) -> str:
        n = self.nnodes
        if self.kv.try_get(p.complete_key(round_)) == p.COMPLETE_OK:
            why = f"the job there is complete already: its {n} nodes (--nnodes {n}) have met"
        else:
            why = f"{ticket} launchers arrived for --nnodes {n}: this one is one too many"
        return (
            f"rendezvous: {who(entry)} was refused at the store {self.kv.address}: {why}; "
            "start it together with the job's other nodes, or give it a --master (or "
            "--nnodes) of its own"
        )

    def _absent(self, round_: int, named: bool = False) -> str | None:
        """Who is still missing, for the progress line and the timeout (`named`: by name
        whatever their number); None: nobody."""
        if self.assign:
            came = int(self.kv.try_get(p.count_key(round_)) or b"0")
            return None if came >= self.nnodes else f"{self.nnodes - came} of {self.nnodes} nodes"
        present = self._present(round_, named)
        if isinstance(present, int):  # nodes still arriving: how many are missing, not who
            self.missing = []
            return f"{self.nnodes - present} of {self.nnodes} nodes"
        self.missing = missing_nodes(self.nnodes, present)
        return describe_missing(self.missing, self.hosts) if self.missing else None

    def _store_failed(self, exc: StoreError, round_: int, deadline: float) -> RendezvousError:
        """A store error while meeting: the rendezvous's timeout once the deadline passed,
        else the store is gone."""
        if isinstance(exc, StoreTimeoutError) and self.clock() >= deadline:
            return self._timeout(round_)
        return RendezvousError(
            f"rendezvous: lost the store at {self.kv.address} (node 0's launcher gone?): {exc}"
        )

    def _present(self, round_: int, named: bool = False) -> list[int] | int:
        """The nodes whose entry is in the store. One read of the count when all are (the
        usual case), or, in a job of more than ALWAYS_NAMED nodes, while nodes still arrive
        (the count then, not who: each node naming the missing each second cost etcd
        O(N²) while 1024 nodes arrived; they are named once no one came for a second);
        else a look at the nodes
        not seen before only (entries never go), so a node waiting for a straggler does
        not read every entry each second."""
        count = int(self.kv.try_get(p.count_key(round_)) or b"0")
        if count >= self.nnodes:
            return list(range(self.nnodes))
        last, self._last_count = self._last_count, (round_, count)
        arriving = last is not None and last[0] == round_ and last[1] < count
        if arriving and not named and self.nnodes > ALWAYS_NAMED:
            return count
        unseen = self._unseen[1] if self._unseen and self._unseen[0] == round_ else None
        candidates = range(self.nnodes) if unseen is None else unseen
        still = self._lacking(round_, list(candidates))
        self._unseen = (round_, still)
        gone = set(still)
        return [i for i in range(self.nnodes) if i not in gone]

    def _lacking(self, round_: int, nodes: list[int]) -> list[int]:
        """The nodes among `nodes` without an entry: one store call where the store can
        look up many keys at once (node 0's store), else one per node (etcd)."""
        missing = getattr(self.kv, "missing", None)
        if missing is None:
            return [i for i in nodes if self.kv.try_get(p.node_key(round_, i)) is None]
        by_key = {p.node_key(round_, i): i for i in nodes}
        return sorted(by_key[k] for k in missing(list(by_key)))

    def _timeout(self, round_: int) -> RendezvousTimeout:
        absent = self._absent(round_, named=True)
        if absent is None:  # everyone came, yet no verdict: the last one stopped writing it
            return RendezvousTimeout(
                f"rendezvous timed out after {self.timeout:g} s (--rdzv_timeout) at the store "
                f"{self.kv.address}: all {self.nnodes} nodes came, but the last to arrive "
                "never wrote the round's world (its launcher died or lost the store during "
                "the rendezvous); start the job again"
            )
        return RendezvousTimeout(
            f"rendezvous timed out after {self.timeout:g} s (--rdzv_timeout) at the store "
            f"{self.kv.address}: {absent} never joined: no "
            "launcher there contacted the store (one that fails to start says why here when "
            "it can reach the store); start the launcher there with the same command"
        )

    def _wait_complete(self, round_: int, started: float, deadline: float) -> bytes:
        """The value of the round's complete key: "ok", or "failed:<why>" set by a node whose
        deadline passed first (so every node prints the same verdict)."""
        complete = p.complete_key(round_)
        next_check = started + PROGRESS_FIRST
        while True:
            now = self.clock()
            if now >= deadline:
                failure = self._timeout(round_)
                self.kv.compare_set(complete, None, p.FAILED_PREFIX + str(failure).encode())
                return self.kv.get(complete, timeout=1.0)
            try:
                return self.kv.get(complete, timeout=max(0.001, min(deadline, next_check) - now))
            except StoreTimeoutError:
                pass
            now = self.clock()
            if now < next_check:
                continue
            next_check = now + 1.0
            absent = self._absent(round_)
            if absent is None:  # all came (for good): only the verdict is left to wait for,
                next_check = deadline  # so stop looking, which costs the store N calls a second
            missing = self.missing if not self.assign else []
            rival = self.rival_check(round_, missing) if missing and self.rival_check else None
            if rival:
                self.kv.compare_set(complete, None, p.MISMATCH_PREFIX + rival.encode())
                return self.kv.get(complete, timeout=1.0)
            if absent:
                self.progress(
                    f"rendezvous at {self.kv.address}: waiting for {absent}",
                    now - started,
                    self.timeout,
                )


def linger(kv: KV, round_: int, timeout: float) -> None:
    """Wait (up to `timeout`) until every launcher that arrived in round `round_` marked
    that it read the round's verdict (``left/<ticket>``): for a launcher whose exit takes
    the keys away, before it exits."""
    with contextlib.suppress(StoreError, ValueError):
        arrived = int(kv.try_get(p.arrived_key(round_)) or b"0")
        keys = [p.left_key(round_, t) for t in range(1, arrived + 1)]
        wait_keys(kv, keys, timeout)


_AGREEING = threading.Lock()


def _agreement(world: bytes) -> tuple[tuple[NodeEntry, ...], str | None]:
    """The round's entries and the fingerprint verdict on them (None: they agree), the
    same pure function of the same bytes on every node. Cached, like `decode_world`: N
    launchers simulated in one process check one world once; under a lock, or hundreds
    of threads that read the world together would all decode it before the first is done."""
    with _AGREEING:
        return _agreement_of(world)


@functools.lru_cache(maxsize=8)
def _agreement_of(world: bytes) -> tuple[tuple[NodeEntry, ...], str | None]:
    entries = p.decode_world(world)
    return entries, check_fingerprints(entries)


def find_rival(
    mine: NodeEntry,
    round_: int,
    hosts: Sequence[str],
    missing: Sequence[int],
    port: int,
    token: bytes | None,
) -> str | None:
    """The store's host, while nodes are missing: does one of them host a rendezvous too?

    One quick connection attempt per missing node at the launchers' store port. When a
    paddlike store answers there and holds a node 0 entry for this round, both launchers
    believe they are node 0: put the verdict into that store as well, so that its launcher
    stops with the same message, and return it.
    """
    import socket

    from paddlike.distributed.store import StoreClient

    for j in missing:
        host = hosts[j] if j < len(hosts) else ""
        if not host or host == mine.host:
            continue  # unknown yet (torchrun style), or ourselves
        try:
            socket.create_connection((host, port), timeout=RIVAL_PROBE_TIMEOUT).close()
        except OSError:
            continue  # nothing listens there: that node is simply not up yet
        try:
            kv = StoreClient(host, port, timeout=1.0, token=token, reconnect_timeout=0.0)
        except StoreError:
            continue  # not our kind of store, or another job's token: not a rival
        with kv:
            try:
                theirs = p.decode_entry(kv.try_get(p.node_key(round_, 0)) or b"")
            except (StoreError, ValueError, KeyError):
                continue
            if theirs.host == mine.host or not same_job(mine, theirs):
                continue  # another job that happens to use this port: none of our business
            message = rival_message(mine, theirs, f"{host}:{port}")
            # The rival may have found us first and be closing its store: then this
            # write fails, but it has its verdict already.
            with contextlib.suppress(StoreError):
                kv.compare_set(p.complete_key(round_), None, p.MISMATCH_PREFIX + message.encode())
            return message
    return None
