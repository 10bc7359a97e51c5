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


class Meeting(NamedTuple):
    """Where the launchers of a many-node job meet, as a failing node can tell."""

    address: str  # "ip:port", or the etcd master "etcd://..."
    nnodes: int
    store_host: bool  # this node hosts the TCP store (node 0)


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
    if meeting.store_host:
        try:
            server = StoreServer(host, int(port), token=token).start()
        except OSError:
            pass  # the port is taken: a store may be there already, tell it as a client
        else:
            try:
                server.compare_set(p.complete_key(0), None, verdict)
                _linger(server.peek, meeting.nnodes)
            finally:
                server.close()
            return True
    try:
        kv = StoreClient(host, int(port), timeout=REACH_TIMEOUT, token=token, reconnect_timeout=0)
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
