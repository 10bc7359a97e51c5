"""The launchers' rendezvous and round watch over an in-memory store, with injected clocks:
what every node concludes, from what the others published. No processes, no sleeps."""

from __future__ import annotations

import os
import select
import threading

import pytest

from paddlike.distributed.store import StoreError
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.one_node import LocalPeers
from paddlike.launch.peers.rendezvous import Rendezvous
from paddlike.launch.peers.rendezvous_errors import FingerprintMismatch, RendezvousTimeout
from paddlike.launch.peers.watch import JobWatch, WatchSpec
from paddlike.launch.plan.membership import ElasticSpec
from paddlike.launch.plan.nodejob import fingerprint
from paddlike.launch.plan.world import NodeEntry
from paddlike.summary import RootCause
from tests.launch.peers.memory_link import memory_watch
from tests.support.fakes import MemoryKV, StepClock

HOSTS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]  # text only: nothing connects anywhere


def _fp(**changes: object) -> dict[str, str]:
    args: dict = dict(
        ips=HOSTS,
        devices_per_node="cpu",
        nproc_per_node=2,
        run_mode="collective",
        job_id=None,
        script="train.py",
        script_args=[],
    )
    args.update(changes)
    return fingerprint(**args)


def _entry(i: int, **fp: object) -> NodeEntry:
    return NodeEntry(i, HOSTS[i], f"node{i}", 100 + i, (4000 + i, 5000 + i), _fp(**fp), f"gen{i}")


def _join_all(kv: MemoryKV, entries: list[NodeEntry], timeout: float = 5.0) -> list:
    """Every node joins in its own thread (they block until the last one arrives)."""
    results: list = [None] * len(entries)

    def join(i: int) -> None:
        rdzv = Rendezvous(kv, entries[i].index, len(entries), HOSTS, timeout)
        try:
            results[i] = rdzv.join(entries[i])
        except Exception as exc:  # the verdict is the result
            results[i] = exc

    threads = [threading.Thread(target=join, args=(i,)) for i in range(len(entries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return results


def test_every_node_gets_every_nodes_ports_and_node_0s_job_id():
    results = _join_all(MemoryKV(), [_entry(i) for i in range(3)])
    assert all(r.ports == ((4000, 5000), (4001, 5001), (4002, 5002)) for r in results)
    assert {r.job_id for r in results} == {"gen0"}  # node 0's generated id is adopted


def test_a_disagreeing_node_fails_every_node_with_the_same_message():
    results = _join_all(MemoryKV(), [_entry(0), _entry(1, nproc_per_node=4), _entry(2)])
    assert all(isinstance(r, FingerprintMismatch) for r in results)
    assert len({str(r) for r in results}) == 1
    assert "node 1 (node1, 10.0.0.2) disagrees on nproc_per_node: it has '4'" in str(results[0])


def test_a_missing_node_is_named_by_the_deadline_of_the_injected_clock():
    kv = MemoryKV(patience=0)
    rdzv = Rendezvous(kv, 0, 2, HOSTS[:2], timeout=300, clock=StepClock(step=50.0))
    with pytest.raises(RendezvousTimeout, match=r"node 1 \(10.0.0.2\) never joined"):
        rdzv.join(_entry(0))
    # the verdict stays in the store: a node arriving late reads the same failure
    assert kv.try_get(p.complete_key(0)).startswith(p.FAILED_PREFIX)


def test_a_last_arrival_that_died_before_the_verdict_is_said_so_not_none_never_joined():
    kv = MemoryKV(patience=0)
    for i in range(2):  # both came; the last one died before it wrote the world
        kv.set(p.node_key(0, i), p.encode_entry(_entry(i)))
    kv.set(p.count_key(0), b"2")
    rdzv = Rendezvous(kv, 0, 2, HOSTS[:2], timeout=300, clock=StepClock(step=50.0))
    message = str(rdzv._timeout(0))
    assert "all 2 nodes came, but the last to arrive never wrote the round's world" in message
    assert "None" not in message


def test_a_waiting_node_shows_who_is_missing_once_a_second():
    seen: list[str] = []
    rdzv = Rendezvous(
        MemoryKV(patience=0),
        0,
        3,
        HOSTS,
        timeout=10,
        clock=StepClock(step=0.6),
        progress=lambda what, elapsed, timeout: seen.append(what),
    )
    with pytest.raises(RendezvousTimeout):
        rdzv.join(_entry(0))
    assert seen and all(
        s == "rendezvous at 10.0.0.1:6170: waiting for node 1 (10.0.0.2), node 2 (10.0.0.3)"
        for s in seen
    )


def test_two_launchers_claiming_one_node_index_are_both_named():
    kv = MemoryKV()
    kv.set(p.node_key(0, 0), p.encode_entry(_entry(0)))
    twin = NodeEntry(0, HOSTS[0], "elsewhere", 999, (1, 2), _fp())
    with pytest.raises(FingerprintMismatch, match="two launchers claim node index 0: node0"):
        Rendezvous(kv, 0, 2, HOSTS, 5).join(twin)
    assert kv.try_get(p.complete_key(0)).startswith(p.MISMATCH_PREFIX)


def test_the_protocols_keys_are_the_ones_the_launchers_write():
    kv = MemoryKV()
    _join_all(kv, [_entry(0), _entry(1)])
    assert kv.keys() == [
        "rdzv/0/arrived",
        "rdzv/0/complete",
        "rdzv/0/count",
        "rdzv/0/left/1",
        "rdzv/0/left/2",
        "rdzv/0/node/0",
        "rdzv/0/node/1",
        "rdzv/0/world",
    ]


class ReadCountingKV(MemoryKV):
    """Counts the reads of each key, to show what a round costs the store."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def get(self, key: str, timeout: float | None = None) -> bytes:
        self.reads[key] = self.reads.get(key, 0) + 1
        return super().get(key, timeout)


def test_each_node_reads_one_world_value_rather_than_every_nodes_entry():
    kv = ReadCountingKV()
    results = _join_all(kv, [_entry(i) for i in range(3)])
    assert [r.ports for r in results] == [((4000, 5000), (4001, 5001), (4002, 5002))] * 3
    assert kv.reads[p.world_key(0)] == 3
    # only the last arrival reads the entries, to write the world
    assert [kv.reads.get(p.node_key(0, i), 0) for i in range(3)] == [1, 1, 1]


def _watch(
    kv: MemoryKV, node: int, clock: StepClock | None = None, log_dir: str | None = None
) -> JobWatch:
    spec = WatchSpec(0, HOSTS[:2], node, log_dir or "", services=False, elastic=None)
    return memory_watch(kv, spec, clock=clock)


def _failure(node: int) -> RootCause:
    return RootCause(reason=f"trainer on node {node} failed", node_index=node, role="trainer",
                     exit_code=3, log_file="workerlog.0")  # fmt: skip


def test_the_first_failure_published_is_every_nodes_root_cause():
    kv = MemoryKV()
    w0, w1 = _watch(kv, 0, log_dir="/logs/a"), _watch(kv, 1, log_dir="/logs/b")
    try:
        w1.publish(_failure(1))
        w0.publish(_failure(0))  # too late: node 1's was first
        assert w0.root_cause.node_index == 1 == w1.root_cause.node_index
        assert w0.root_cause.log_file == "/logs/b/workerlog.0"  # absolute: another host
        assert w1.poll() is None  # its own supervisor is ending the round already
    finally:
        w0.stop()
        w1.stop()


def test_a_node_silent_past_the_heartbeat_timeout_is_lost_and_ends_the_round():
    kv, clock = MemoryKV(), StepClock()
    watch = _watch(kv, 0, clock)
    try:
        assert watch.liveness.silent(clock()) == []  # first sighting of node 1's counter
        kv.add(p.heartbeat_key(1))
        clock.advance(9.0)
        assert watch.liveness.silent(clock()) == []  # it beat: seen anew
        clock.advance(11.0)
        assert watch.liveness.silent(clock()) == [1]
        watch._lost_node(1)
        cause = watch.poll()
        assert "node 1 (10.0.0.2) stopped sending heartbeats for 10 s" in cause.reason
        # nobody waits for a lost node's end of round
        assert kv.try_get(p.end_key(0, 1)) == p.END_LOST
    finally:
        watch.stop()


@pytest.mark.parametrize(
    ("node_1_failed", "expected"), [(False, None), (True, "trainer on node 1 failed")]
)
def test_the_round_ends_with_the_jobs_cause_once_every_node_reported_its_end(
    node_1_failed, expected
):
    kv = MemoryKV()
    w0, w1 = _watch(kv, 0), _watch(kv, 1)
    try:
        if node_1_failed:
            w1.publish(_failure(1))
        kv.set(p.end_key(0, 1), p.END_FAILED if node_1_failed else p.END_OK)
        cause = w0.finish(True)
        assert (cause.reason if cause else None) == expected
        assert kv.try_get(p.done_key(0, 0)) == b"1"  # node 0 read the outcome
    finally:
        w0.stop()
        w1.stop()


def test_a_one_node_jobs_peers_are_itself():
    peers = LocalPeers()
    entry = _entry(0)
    world = peers.rendezvous(0, entry)
    assert world.nodes == (entry,) and world.job_id == "gen0"
    watch = peers.watch(0, "/logs", services=True)
    assert watch.fd is None and watch.services is None
    watch.publish(_failure(0))
    assert peers.finish(watch, ok=False).node_index == 0
    assert peers.finish(peers.watch(1, "/logs", services=False), ok=True) is None


def test_a_watch_stopped_twice_leaves_descriptors_that_reused_its_numbers_alone():
    """Elastic jobs stop a watch every round; a second close of its pipe's numbers once
    closed the store's own sockets, which had taken them."""
    watch = _watch(MemoryKV(), 1)
    numbers = {watch.fd, watch._write_fd}
    watch.stop()
    reader, writer = os.pipe()  # the lowest free numbers: most likely the watch's old ones
    try:
        watch.stop()
        os.write(writer, b"x")
        assert os.read(reader, 1) == b"x"
        assert numbers & {reader, writer}  # (the case this test is about did happen)
    finally:
        os.close(reader)
        os.close(writer)


def test_a_workers_failure_after_a_lost_nodes_word_is_put_down_to_the_lost_node():
    """A lost node's guardian writes its cause first; the failure its peers' collectives
    see a moment later is a consequence, not the job's cause."""
    kv = MemoryKV()
    lost = RootCause(reason="node 1 (10.0.0.2) was lost: its launcher (pid 7) died", node_index=1)
    kv.set(p.abort_key(0), p.encode_cause(lost))
    watch = _watch(kv, 0)
    try:
        watch.publish(_failure(0))
        assert watch.root_cause.reason == lost.reason
    finally:
        watch.stop()


def test_a_failure_that_finds_the_store_gone_is_put_down_to_lost_contact_with_node_0():
    """Node 0 died: its workers' peers fail, and publishing finds no store. The cause is
    the lost contact (named once the heartbeat timeout passed on the injected clock)."""

    class GoneKV(MemoryKV):
        def compare_set(self, key: str, expected: bytes | None, desired: bytes) -> bytes:
            raise StoreError("connection refused")

        def get(self, key: str, timeout: float | None = None) -> bytes:
            raise StoreError("connection refused")

    kv, clock = GoneKV(), StepClock(step=0.3)  # past --heartbeat_timeout within 3 readings
    spec = WatchSpec(0, HOSTS[:2], 1, "", services=False, elastic=None)
    watch = memory_watch(kv, spec, heartbeat_timeout=0.5, clock=clock)
    try:
        watch.publish(_failure(1))
        assert "node 1 (10.0.0.2) lost contact with node 0 (10.0.0.1)" in watch.root_cause.reason
        assert watch.lost_contact
        assert watch.finish(ok=False).reason == watch.root_cause.reason  # nobody to wait for
    finally:
        watch.stop()


def test_a_signal_to_node_0_of_an_elastic_job_on_its_store_ends_the_job_not_just_node_0():
    kv = MemoryKV()
    spec = ElasticSpec(min_nodes=1, max_nodes=3)
    for hosts_store, membership in ((True, None), (False, "left")):
        round_ = WatchSpec(int(hosts_store), HOSTS[:2], 0, "", services=False, elastic=spec)
        watch = memory_watch(kv, round_, monitor=False, hosts_store=hosts_store)
        try:
            watch.publish(
                RootCause(reason="launcher on 10.0.0.1 received SIGTERM", signal="SIGTERM")
            )
            assert watch.root_cause.membership == membership
            assert watch.leaving is not hosts_store
            assert ("it hosts the launchers' store" in watch.root_cause.reason) is hosts_store
        finally:
            watch.stop()


@pytest.mark.timeout(30)
def test_a_ps_jobs_servers_stop_once_every_nodes_trainers_are_done_not_just_their_own():
    kv = MemoryKV()
    specs = [WatchSpec(0, HOSTS[:2], i, "", services=True, elastic=None) for i in range(2)]
    watches = [memory_watch(kv, spec).start() for spec in specs]
    try:
        stops = [w.services for w in watches]
        stops[0].local_trainers_done()
        assert select.select([stops[0].fd], [], [], 0.2)[0] == []  # node 1's trainers still run
        stops[1].local_trainers_done()
        for stop in stops:
            assert select.select([stop.fd], [], [], 10.0)[0] == [stop.fd]
            assert stop.stop_now()
    finally:
        for w in watches:
            w.stop()
