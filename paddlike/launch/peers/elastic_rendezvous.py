"""The elastic rendezvous (``--nnodes MIN:MAX``): a round whose members are whoever came.

Each launcher, in round r (the newest round of the job, ``elastic/round``, for a node
that joins late):

1. takes an arrival ticket (``rdzv/<r>/arrived``) and publishes its entry under it;
2. waits for the round's verdict while checking, about five times a second, whether
   the round may close (`plan.membership.may_close`: MAX arrived; every survivor of the
   previous round arrived; MIN arrived and none new for --rdzv_last_call). The first
   node to find it so writes the members' tickets create-only (``rdzv/<r>/closed``),
   then the rank order, the world and ``complete`` (so one node decides, everyone reads);
3. a node whose ticket is not among the members came late: it waits in round r+1, and
   the running round's watch sees it there and starts that round (`peers.watch`).

A round closes only once the previous one ended on every node (``job/<r-1>/over``):
nodes waiting for a place never start a job of their own beside the running one.
A waiting node whose deadline passes while the job runs leaves alone
(``rdzv/<r>/gone/<ticket>``); one whose deadline passes while the round could have
closed fails the round for everyone, as a fixed job's rendezvous does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection

from paddlike.distributed.store import StoreError, StoreTimeoutError
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.kv import KV
from paddlike.launch.peers.rendezvous_errors import (
    FingerprintMismatch,
    RendezvousError,
    RendezvousTimeout,
)
from paddlike.launch.plan.agreement import check_fingerprints, job_id_in_force
from paddlike.launch.plan.membership import ElasticSpec, elastic_order, may_close
from paddlike.launch.plan.world import NodeEntry, RendezvousResult

PROGRESS_FIRST = 1.0  # seconds before the first "waiting for" line
POLL = 0.2  # seconds between looks at the round (arrivals, whether it may close)
ENTRY_GRACE = 2.0  # seconds a closer waits for an entry whose ticket was just taken


class JobEnded(RendezvousError):
    """The elastic job ended before this node got a place in it."""


class ElasticRendezvous:
    """One node's side of an elastic round. `survivors`: (host, pid) of the previous
    round's members that may come back (known to those members only); `after`: why a new
    round is held, for the timeout's message ("after node 2 (10.0.0.3) was lost")."""

    def __init__(
        self,
        kv: KV,
        spec: ElasticSpec,
        *,
        timeout: float,
        progress: Callable[[str, float, float], None],
        survivors: Collection[tuple[str, int]] | None = None,
        after: str = "",
        clock: Callable[[], float] = time.monotonic,
        poll: float = POLL,
    ) -> None:
        self.kv = kv
        self.spec = spec
        self.timeout = timeout
        self.progress = progress
        self.survivors = set(survivors) if survivors is not None else None
        self.after = after
        self.clock = clock
        self.poll = poll
        self.ticket: int | None = None
        self.round: int | None = None
        self.missing: list[int] = []  # (nodes are not known by rank before they come)

    # -- the round a node joins --

    def join(self, entry: NodeEntry, round_: int) -> RendezvousResult:
        """This node's place in round `round_` or, for a node whose round closed without it
        (or a newcomer to a running job), in the first later round that takes it."""
        started = self.clock()
        deadline = started + self.timeout
        try:
            r = max(round_, int(self.kv.try_get(p.ELASTIC_ROUND_KEY) or b"0"))
            while True:
                while self._taken(r):
                    r += 1  # closed, or running: this node can only wait for the next
                if r > 0 and self.survivors is None:  # a newcomer to a running job
                    self._check_fits(entry, r - 1)
                self._enter(r)
                self._check_not_ended(r)
                ticket = self.kv.add(p.arrived_key(r), 1)
                self.ticket, self.round = ticket, r
                self.kv.set(p.ticket_key(r, ticket), p.encode_entry(entry))
                try:
                    members = self._wait_closed(r, ticket, started, deadline)
                finally:
                    with contextlib.suppress(StoreError):
                        self.kv.set(p.left_key(r, ticket), b"1")
                if ticket in members:
                    return self._result(r, ticket, started, deadline)
                r += 1  # came late: wait for the next round, which the running job will start
        except StoreError as exc:
            if isinstance(exc, StoreTimeoutError) and self.clock() >= deadline:
                raise self._timeout_error() from exc
            raise RendezvousError(
                f"rendezvous: lost the store at {self.kv.address} (node 0's launcher gone?): {exc}"
            ) from exc

    def _enter(self, r: int) -> None:
        """Make ``elastic/round`` at least r (compare-and-set: it never goes back)."""
        want = str(r).encode()
        cur = self.kv.try_get(p.ELASTIC_ROUND_KEY)
        while cur is None or int(cur) < r:
            got = self.kv.compare_set(p.ELASTIC_ROUND_KEY, cur, want)
            if got == want:
                return
            cur = got

    def _taken(self, r: int) -> bool:
        """Round r closed already (its members run it, or ran it). On etcd a key goes with
        the lease of the launcher that wrote it, so a closed round whose closer died shows
        only by what its living members wrote: ``job/<r>/over`` once it ended, its
        liveness keys (``alive/<r>/<i>``) while it runs."""
        if self.kv.try_get(p.closed_key(r)) is not None:
            return True
        if not self.kv.address.startswith("etcd://"):
            return False
        if self.kv.try_get(p.over_key(r)) is not None:  # ended (a member lives to say so)
            return True
        return any(
            self.kv.try_get(p.round_alive_key(r, j)) is not None
            for j in range(self.spec.max_nodes)
        )

    def _check_fits(self, entry: NodeEntry, r: int) -> None:
        """A newcomer whose configuration differs from the running nodes' is refused
        alone (exit 2), before it takes a place: it must not end their job."""
        raw = self.kv.try_get(p.world_key(r))
        if raw is None:
            return  # (on etcd it may have gone with its writer: the round checks then)
        theirs, mine = p.decode_world(raw)[0].fingerprint, entry.fingerprint
        for field in [*theirs, *(f for f in mine if f not in theirs)]:
            have, want = mine.get(field, "<unset>"), theirs.get(field, "<unset>")
            if have != want:
                raise FingerprintMismatch(
                    f"rendezvous: this node ({entry.host}) cannot join the elastic job at "
                    f"{self.kv.address}: it has {field} {have!r}, the running nodes have "
                    f"{want!r}; run the same command on every node"
                )

    def _check_not_ended(self, r: int) -> None:
        raw = self.kv.try_get(p.ELASTIC_END_KEY)
        if raw is not None:
            raise JobEnded(
                f"rendezvous: the elastic job at {self.kv.address} ended before this node got "
                f"a place in it ({raw.decode(errors='replace')}); start a new job"
            )

    def _wait_closed(self, r: int, ticket: int, started: float, deadline: float) -> list[int]:
        """The round's member tickets once it closed (this node's among them or not)."""
        complete = p.complete_key(r)
        last_count, last_change = 0, self.clock()
        previous_over = r == 0
        seen: dict[int, NodeEntry] = {}
        next_progress = started + PROGRESS_FIRST
        looked = False
        while True:
            now = self.clock()
            if now >= deadline:
                left = self._expired(r, ticket, previous_over)
                if left is not None:
                    return left
                deadline = now + ENTRY_GRACE  # closed with us in it just now: read on
            if looked:  # the first look goes straight to the checks: the last arrival
                try:  # may be the one that closes the round
                    wait = max(0.001, min(self.poll, deadline - now))
                    status = self.kv.get(complete, timeout=wait)
                except StoreTimeoutError:
                    status = None
            else:
                status, looked = self.kv.try_get(complete), True
            if status is not None:
                p.check_verdict(status)
                return p.decode_order(self.kv.get(p.closed_key(r), timeout=ENTRY_GRACE))
            count = int(self.kv.try_get(p.arrived_key(r)) or b"0")
            now = self.clock()
            if count != last_count:
                last_count, last_change = count, now
            if not previous_over:
                previous_over = self.kv.try_get(p.over_key(r - 1)) is not None
                if not previous_over:
                    self._check_not_ended(r)
            missing = None
            if self.survivors is not None and r > 0:
                for t in range(1, count + 1):
                    if t not in seen:
                        raw = self.kv.try_get(p.ticket_key(r, t))
                        if raw is not None:
                            seen[t] = p.decode_entry(raw)
                here = {(e.host, e.pid) for e in seen.values()}
                missing = len(self.survivors - here)
            if may_close(
                self.spec,
                arrived=count,
                quiet_for=now - last_change,
                previous_over=previous_over,
                survivors_missing=missing,
            ):
                self._close(r, count)
            elif now >= next_progress:
                next_progress = now + 1.0
                self.progress(self._waiting_line(count, previous_over), now - started, self.timeout)

    def _waiting_line(self, count: int, previous_over: bool) -> str:
        s = self.spec
        if not previous_over:
            return (
                f"rendezvous at {self.kv.address}: waiting for the running round of the elastic "
                f"job to end (it has {s.max_nodes} nodes, --nnodes {s.range_text}, or is ending)"
            )
        if count < s.min_nodes:
            return (
                f"rendezvous at {self.kv.address}: {count} of at least {s.min_nodes} nodes "
                f"(--nnodes {s.range_text}) here"
            )
        return (
            f"rendezvous at {self.kv.address}: {count} nodes here (--nnodes {s.range_text}); "
            f"the round starts {s.last_call:g} s after the last arrival (--rdzv_last_call)"
        )

    def _close(self, r: int, count: int) -> None:
        """Try to close round r with the first MAX tickets that did not leave; the first
        node to write ``closed`` decides the members and writes the world."""
        entries: dict[int, NodeEntry] = {}
        for t in range(1, count + 1):
            if len(entries) == self.spec.max_nodes:
                break
            if self.kv.try_get(p.gone_key(r, t)) is not None:
                continue
            try:  # a ticket taken just now: its entry follows at once
                entries[t] = p.decode_entry(self.kv.get(p.ticket_key(r, t), timeout=ENTRY_GRACE))
            except StoreTimeoutError:
                continue  # its launcher died between the two calls
        if len(entries) < self.spec.min_nodes:
            return
        mine = p.encode_order(list(entries))
        if self.kv.compare_set(p.closed_key(r), None, mine) != mine:
            return  # another node closed it first
        order = elastic_order(list(entries.items()))
        ranked = [entries[t]._replace(index=i) for i, t in enumerate(order)]
        self.kv.set(p.order_key(r), p.encode_order(order))
        self.kv.set(p.world_key(r), p.encode_world(ranked))
        self.kv.compare_set(p.complete_key(r), None, p.COMPLETE_OK)

    def _expired(self, r: int, ticket: int, previous_over: bool) -> list[int] | None:
        """This node's deadline passed in round r. While the previous round still runs,
        leave alone (unless the round closed with this node in it: None, go on); else
        the round fails for everyone waiting in it."""
        if not previous_over:
            self.kv.set(p.gone_key(r, ticket), b"1")
            closed = self.kv.try_get(p.closed_key(r))
            if closed is not None and ticket in p.decode_order(closed):
                return None
            s = self.spec
            raise RendezvousTimeout(
                f"rendezvous: no place opened in the elastic job at {self.kv.address} within "
                f"{self.timeout:g} s (--rdzv_timeout): its running round did not end to let "
                f"this node in; it runs with its maximum of {s.max_nodes} nodes (--nnodes "
                f"{s.range_text}), and a node joins when one leaves"
            )
        failure = self._timeout_error()
        self.kv.compare_set(p.complete_key(r), None, p.FAILED_PREFIX + str(failure).encode())
        p.check_verdict(self.kv.get(p.complete_key(r), timeout=1.0))
        return p.decode_order(self.kv.get(p.closed_key(r), timeout=ENTRY_GRACE))

    def _timeout_error(self) -> RendezvousTimeout:
        s = self.spec
        r = self.round if self.round is not None else 0
        came = 0
        with contextlib.suppress(StoreError, ValueError):
            came = int(self.kv.try_get(p.arrived_key(r)) or b"0")
        after = f" {self.after}" if self.after else ""
        return RendezvousTimeout(
            f"rendezvous timed out after {self.timeout:g} s (--rdzv_timeout) at the store "
            f"{self.kv.address}{after}: {came} node{'s' if came != 1 else ''} came, fewer than "
            f"the {s.min_nodes} that --nnodes {s.range_text} needs; start the launcher on more "
            "nodes with the same command"
        )

    def _result(self, r: int, ticket: int, started: float, deadline: float) -> RendezvousResult:
        left = max(1.0, deadline - self.clock())
        order = p.decode_order(self.kv.get(p.order_key(r), timeout=left))
        entries = p.decode_world(self.kv.get(p.world_key(r), timeout=left))
        problem = check_fingerprints(entries)
        if problem:
            raise FingerprintMismatch(problem)
        return RendezvousResult(
            r, entries, job_id_in_force(entries), self.clock() - started, order.index(ticket)
        )
