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

When another program holds the launchers' port on node 0 (torchrun's --master_port P:
the launchers meet at P+1, a port the user never chose), node 0 can host nothing there
and the others, connected to that program, would wait out --rdzv_timeout. So node 0 also
hosts its verdict at its `Meeting.spare` address, the workers' port P (claimed by node 0
before the rendezvous, so free then), and a node waiting for the launchers' store looks
there once a second (`read_spare_verdict`).

A node started after that (node 0's brief store is gone, or it never came up) times
out as before; its message says which nodes never contacted the store.

Where the store is and who this node is come in a `StartFailure`, worked out from the
options by `peers.startfail`.
"""

from __future__ import annotations

import contextlib
import socket
import time

from paddlike.distributed.store import StoreClient, StoreError, StoreServer
from paddlike.launch import NamedTuple
from paddlike.launch.peers import protocol as p

REACH_TIMEOUT = 3.0  # seconds a failing node tries to reach the store (node 0 may not be up)
HOST_LINGER = 5.0  # seconds a failing node 0 keeps its store up for the others to read why
POLL = 0.02  # seconds between looks at the store while lingering
SPARE_LOOK = 0.2  # seconds a waiting node tries node 0's spare address each time


class Meeting(NamedTuple):
    """Where the launchers of a many-node job meet, as a failing node can tell."""

    address: str  # "ip:port", or the etcd master "etcd://..."
    nnodes: int
    store_host: bool  # this node hosts the TCP store (node 0)
    # node 0's workers' port ("ip:port", --master_port): where node 0 tells when another
    # program holds the launchers' port; None without --master_port
    spare: str | None = None


class StartFailure(NamedTuple):
    """What a node that cannot start needs to tell the others: where they meet and who it is."""

    meeting: Meeting
    token: bytes | None  # --job_token: node 0's store refuses a launcher without it
    job_id: str | None  # --job_id: the job's keys on etcd
    node_index: int | None  # None: not known (ranks assigned at the rendezvous)
    address: str  # this node's address as the others know it ("" when not known)


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


def tell_start_failure(failure: StartFailure, error: str, *, exit_code: int = 2) -> bool:
    """Publish this node's start failure (`error`), and the code it exits with, to the
    others (see the module docstring); True when it reached the store. Bounded: at most
    REACH_TIMEOUT (+ HOST_LINGER) seconds."""
    meeting = failure.meeting
    message = failure_message(
        error, address=failure.address, hostname=socket.gethostname(),
        node_index=failure.node_index,
    )  # fmt: skip
    verdict = p.failed_start_verdict(message, exit_code)
    token = failure.token
    if meeting.address.startswith("etcd://"):
        return _tell_etcd(meeting, failure.job_id, verdict)
    host, _, port = meeting.address.rpartition(":")
    spare = None
    if meeting.store_host:
        server = _host_verdict(meeting.address, token, verdict)
        if server is not None:
            try:
                _linger(server.peek, meeting.nnodes)
            finally:
                server.close()
            return True
        # the port is taken: a store may be there already (tell it as a client), or
        # another program: the others look at the spare address too
        if meeting.spare is not None:
            spare = _host_verdict(meeting.spare, token, verdict)
    try:
        # a store there answers at once (it is on this host); a program that is not one
        # never does: while the spare is up, give it a second rather than REACH_TIMEOUT
        reach = REACH_TIMEOUT if spare is None else 1.0
        told = _tell_as_client(host, int(port), token, verdict, reach)
        if spare is not None and not told:
            _linger(spare.peek, meeting.nnodes)
    finally:
        if spare is not None:
            spare.close()
    return told or spare is not None


def _host_verdict(address: str, token: bytes | None, verdict: bytes) -> StoreServer | None:
    """A store at `address` holding the verdict; None when the port is taken."""
    host, _, port = address.rpartition(":")
    try:
        server = StoreServer(host, int(port), token=token).start()
    except OSError:
        return None
    server.compare_set(p.complete_key(0), None, verdict)
    return server


def _tell_as_client(
    host: str, port: int, token: bytes | None, verdict: bytes, reach: float
) -> bool:
    try:
        kv = StoreClient(host, port, timeout=reach, token=token, reconnect_timeout=0)
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


def read_spare_verdict(spare: tuple[str, int], token: bytes | None) -> None:
    """Raise node 0's start failure (NodeFailedToStart) when it left one at its spare
    address (the workers' port: see the module docstring); else return at once. Marks
    it read (``left/<ticket>``) so that node 0 need not linger."""
    try:
        kv = StoreClient(*spare, timeout=SPARE_LOOK, token=token, reconnect_timeout=0)
    except StoreError:
        return  # nothing there (node 0 not failing, or not up yet), or not node 0's store
    try:
        verdict = kv.try_get(p.complete_key(0))
        if verdict is None or not verdict.startswith(p.FAILED_START_PREFIX):
            return
        kv.set(p.left_key(0, kv.add(p.arrived_key(0), 1)), b"1")
    except StoreError:
        return
    finally:
        with contextlib.suppress(StoreError):
            kv.close()
    p.check_verdict(verdict)


def _tell_etcd(meeting: Meeting, job_id: str | None, verdict: bytes) -> bool:
    """etcd keeps keys: the verdict carries a lease, revoked after the others read it (or
    HOST_LINGER), so that the same --job_id started again is not refused by it."""
    from paddlike.launch.peers.etcd import EtcdStore, parse_etcd_master

    try:
        kv = EtcdStore(
            parse_etcd_master(meeting.address),
            job_id=job_id,
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
