"""`peers.session.StorePeers` over an in-memory store (`MemoryKV`) with an injected clock:
what a launcher says it waits for, what the rounds return, what a stop tells the others.
No processes, no sockets, no sleeps."""

from __future__ import annotations

import threading

import pytest

from paddlike.distributed.store import StoreClient, StoreServer
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.links import OwnTable, StoreLink
from paddlike.launch.peers.rendezvous_errors import RendezvousError, RendezvousTimeout
from paddlike.launch.peers.rounds import rounds_for
from paddlike.launch.peers.session import PeersState, StorePeers
from paddlike.launch.plan.membership import ElasticSpec
from paddlike.launch.plan.nodejob import fingerprint
from paddlike.launch.plan.world import NodeEntry
from paddlike.summary import RootCause
from tests.launch.peers.memory_link import MemoryLink
from tests.support.fakes import MemoryKV, StepClock

HOSTS = ("10.0.0.1", "10.0.0.2")  # text only: nothing connects anywhere


def _entry(i: int) -> NodeEntry:
    fp = fingerprint(
        ips=list(HOSTS), devices_per_node="cpu", nproc_per_node=1, run_mode="collective",
        job_id=None, script="train.py", script_args=[],
    )  # fmt: skip
    return NodeEntry(i, HOSTS[i], f"node{i}", 100 + i, (4000 + i,), fp, f"gen{i}")


def _peers(
    kv: MemoryKV,
    node: int,
    *,
    clock: StepClock | None = None,
    elastic: ElasticSpec | None = None,
    timeout: float = 5.0,
) -> StorePeers:
    clock = clock or StepClock()
    link = MemoryLink(kv, keeps_keys=node == 0, clock=clock)
    rounds = rounds_for(
        link,
        elastic,
        timeout=timeout,
        progress=lambda what, elapsed, timeout: None,
        assign=False,
        clock=clock,
    )
    return StorePeers(link, rounds, node_index=node, hosts=HOSTS, heartbeat_timeout=10.0)


def _both(call) -> list:  # type: ignore[no-untyped-def]
    """`call(i)` for both nodes at once (a rendezvous blocks until the last one comes)."""
    results: list = [None, None]

    def one(i: int) -> None:
        try:
            results[i] = call(i)
        except Exception as exc:  # the verdict is the result
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results


def test_a_launcher_says_what_it_waits_for_at_each_step_of_a_round():
    kv = MemoryKV()
    peers = [_peers(kv, 0), _peers(kv, 1)]
    assert peers[1].waiting_for == "joining the rendezvous at 10.0.0.1:6170"
    results = _both(lambda i: peers[i].rendezvous(0, _entry(i)))
    assert [r.ports for r in results] == [((4000,), (4001,))] * 2
    assert peers[1].waiting_for == "running round 0"
    watches = [peers[i].watch(0, f"/logs/{i}", services=False) for i in range(2)]
    try:
        assert watches[1].log_dir == "/logs/1" and watches[1].elastic is None
        assert _both(lambda i: peers[i].finish(watches[i], ok=True)) == [None, None]
        assert peers[0].state is PeersState.FINISHING
        assert peers[0].waiting_for == "waiting for the other nodes to finish round 0"
        peers[0].close()
        assert peers[0].waiting_for == "waiting for the other nodes to read the job's outcome"
    finally:
        for w in watches:
            w.stop()


def test_a_rendezvous_names_the_missing_node_while_waiting_and_at_its_deadline():
    kv = MemoryKV(patience=0)
    peers = _peers(kv, 0, clock=StepClock(step=2.0), timeout=5.0)
    with pytest.raises(RendezvousTimeout, match=r"node 1 \(10.0.0.2\) never joined"):
        peers.rendezvous(0, _entry(0))
    assert peers.waiting_for == "waiting for the other nodes at the rendezvous at 10.0.0.1:6170"


def test_a_stop_between_rounds_ends_the_round_for_the_others_with_its_cause():
    kv = MemoryKV()
    peers = [_peers(kv, 0), _peers(kv, 1)]
    _both(lambda i: peers[i].rendezvous(0, _entry(i)))
    cause = RootCause(reason="launcher on 10.0.0.2 received SIGTERM", node_index=1)
    assert peers[1].publish_stop(cause)
    assert p.decode_cause(kv.try_get(p.abort_key(0))).reason == cause.reason
    # nobody waits for its end of the round
    assert kv.try_get(p.end_key(0, 1)) == p.STOPPED == kv.try_get(p.done_key(0, 1))


def test_an_elastic_stop_between_rounds_is_this_node_leaving():
    kv = MemoryKV()
    spec = ElasticSpec(min_nodes=1, max_nodes=2, last_call=0.0)
    peers = _peers(kv, 1, elastic=spec)
    peers._round = 0  # past round 0's rendezvous
    peers.publish_stop(RootCause(reason="launcher on 10.0.0.2 received SIGTERM", node_index=1))
    assert p.decode_cause(kv.try_get(p.abort_key(0))).membership == "left"


def test_an_elastic_round_in_which_a_node_was_lost_ends_as_a_membership_change():
    kv = MemoryKV()
    spec = ElasticSpec(min_nodes=1, max_nodes=2, last_call=0.0)
    peers = _peers(kv, 0, elastic=spec)
    peers.rounds.world = (_entry(0), _entry(1))
    watch = peers.watch(0, "/logs/0", services=False)
    try:
        kv.set(p.end_key(0, 1), p.END_LOST)  # node 0's monitor marked it
        cause = peers.finish(watch, ok=True)
    finally:
        watch.stop()
    assert cause.membership == "lost" and "node 1 (10.0.0.2)" in cause.reason
    assert peers.survivors == {("10.0.0.1", 100)}


def test_an_elastic_rendezvous_that_lost_the_store_is_a_rendezvous_error_not_a_traceback():
    class GoneKV(MemoryKV):
        def set(self, key: str, value: bytes | str) -> None:
            from paddlike.distributed.store import StoreError

            raise StoreError("connection refused")

    peers = _peers(GoneKV(), 1, elastic=ElasticSpec(min_nodes=1, max_nodes=2))
    peers.rounds.ended_round = 0  # it ran round 0; node 0 went since
    with pytest.raises(RendezvousError, match=r"lost the launchers' store at 10\.0\.0\.1:6170"):
        peers.rendezvous(1, _entry(1))


def test_a_stop_is_written_create_only_so_a_stop_elsewhere_that_came_first_wins():
    kv = MemoryKV()
    peers = [_peers(kv, 0), _peers(kv, 1)]
    _both(lambda i: peers[i].rendezvous(0, _entry(i)))
    first = RootCause(reason="launcher on 10.0.0.1 received SIGINT", node_index=0)
    assert peers[0].publish_stop(first)
    peers[1].publish_stop(RootCause(reason="launcher on 10.0.0.2 received SIGTERM", node_index=1))
    assert p.decode_cause(kv.try_get(p.abort_key(0))).reason == first.reason
    assert kv.try_get(p.end_key(0, 1)) == p.STOPPED  # its own marks are written all the same


def test_a_stop_in_the_rendezvous_aborts_it_and_marks_the_verdict_read():
    assert p.stop_writes(3, b"cause", in_rendezvous=True, ticket=2, node=1) == [
        (p.complete_key(3), p.ABORTED_PREFIX + b"cause"),
        (p.left_key(3, 2), p.STOPPED),
    ]
    assert p.stop_writes(3, b"cause", in_rendezvous=True, ticket=None, node=1) == [
        (p.complete_key(3), p.ABORTED_PREFIX + b"cause")
    ]


def test_node_0_writes_its_stop_straight_into_the_store_it_hosts():
    """Node 0 hosts the launchers' store: its stop goes into the store's own table (no
    connection that a busy or closing store could refuse), and the others read it there."""
    server = StoreServer("127.0.0.1", 0).start()
    try:
        master = ("127.0.0.1", server.address[1])
        client = StoreClient(*master, timeout=5.0)
        link = StoreLink(client, master=master, token=None, heartbeat_timeout=10.0, server=server)
        assert isinstance(link.connect(), OwnTable) and link.keeps_keys
        rounds = rounds_for(link, None, timeout=5.0, progress=lambda *a: None, assign=False)
        peers = StorePeers(link, rounds, node_index=0, hosts=HOSTS, heartbeat_timeout=10.0)
        peers._round = 0  # past round 0's rendezvous
        cause = RootCause(reason="launcher on 10.0.0.1 received SIGTERM", node_index=0)
        assert peers.publish_stop(cause)
        assert p.decode_cause(server.peek(p.abort_key(0))).reason == cause.reason
        assert server.peek(p.end_key(0, 0)) == p.STOPPED == server.peek(p.done_key(0, 0))
        peers.close(linger=False)
    finally:
        server.close()
