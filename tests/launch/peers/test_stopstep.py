"""The job's stop step at a preemption notice (`peers.stopstep`): the largest of every
node's position, so that no rank of any node has passed it; a node that does not answer
is left out and named."""

from __future__ import annotations

import threading

import pytest

from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.stopstep import (
    StopStep,
    agree_stop_step,
    gather_outcomes,
    share_outcome,
)
from tests.support.fakes import MemoryKV

pytestmark = pytest.mark.timeout(30)
KEYS = [p.stop_step_key(0, j) for j in range(3)]


def test_every_node_gets_the_largest_position_of_all():
    kv = MemoryKV(patience=1.0)
    got: dict[int, StopStep] = {}

    def node(j: int, position: int) -> None:
        got[j] = agree_stop_step(lambda: kv, KEYS, j, position, timeout=10)

    nodes = [threading.Thread(target=node, args=a) for a in ((0, 12), (1, 14), (2, 13))]
    for t in nodes:
        t.start()
    for t in nodes:
        t.join(20)
    assert got == {0: StopStep(14), 1: StopStep(14), 2: StopStep(14)}
    assert kv.try_get("job/0/stop-step/1") == b"14"


def test_a_node_that_does_not_answer_is_left_out_and_named():
    kv = MemoryKV(patience=0.0)  # its wait times out at once
    kv.set(KEYS[0], b"20")
    assert agree_stop_step(lambda: kv, KEYS, 1, 17, timeout=1) == StopStep(20, (2,))


OUTCOMES = [p.stop_outcome_key(0, j) for j in range(3)]
ENDS = [p.end_key(0, j) for j in range(3)]
LOST = (ENDS, p.END_LOST)
HOSTS = ["198.18.0.1", "198.18.0.2", "198.18.0.3"]


def test_each_node_reads_the_others_outcomes():
    kv = MemoryKV(patience=0.0)
    killed = {"not_stopped": [{"rank": 1, "status": "killed"}], "stop_step": 102}
    assert share_outcome(kv, OUTCOMES[1], killed)
    assert share_outcome(kv, OUTCOMES[2], {"not_stopped": [], "stop_step": 102})
    got = gather_outcomes(kv, OUTCOMES, LOST, HOSTS, 0, timeout=2)
    assert got == [
        {**killed, "node": 1, "node_host": "198.18.0.2"},
        {"not_stopped": [], "stop_step": 102, "node": 2, "node_host": "198.18.0.3"},
    ]


def test_an_outcome_that_does_not_come_in_time_is_unknown():
    kv = MemoryKV(patience=0.0)  # its wait times out at once
    kv.set(ENDS[2], p.END_LOST)  # node 2 was lost: not waited for
    got = gather_outcomes(kv, OUTCOMES, LOST, HOSTS, 0, timeout=2)
    assert got == [
        {"node": 1, "node_host": "198.18.0.2", "unknown": "no word from its launcher within 2 s"},
        {"node": 2, "node_host": "198.18.0.3", "unknown": "its launcher was lost"},
    ]


def test_an_outcome_written_within_the_deadline_is_read():
    kv = MemoryKV(patience=1.0)
    late = threading.Timer(0.2, kv.set, (OUTCOMES[1], b'{"not_stopped":[]}'))
    late.start()
    try:
        got = gather_outcomes(kv, OUTCOMES[:2], LOST, HOSTS, 0, timeout=10)
    finally:
        late.join()
    assert got == [{"not_stopped": [], "node": 1, "node_host": "198.18.0.2"}]


def test_a_node_that_lost_the_store_says_every_other_outcome_is_unknown():
    got = gather_outcomes(MemoryKV(), OUTCOMES, LOST, HOSTS, 1, timeout=2, unreachable="cut")
    assert got == [
        {"node": 0, "node_host": "198.18.0.1", "unknown": "cut"},
        {"node": 2, "node_host": "198.18.0.3", "unknown": "cut"},
    ]


def test_a_node_reads_the_others_outcomes_before_it_says_it_read_the_rounds_end():
    # node 0 closes its store (an etcd node's keys go) once every node said "done": the
    # others' parts must be read before that, not after
    from paddlike.launch.peers.watch import WatchSpec
    from tests.launch.peers.memory_link import memory_watch

    kv = MemoryKV(patience=1.0)
    hosts = tuple(HOSTS[:2])
    watches = [memory_watch(kv, WatchSpec(0, hosts, j, "/nowhere", False, None)) for j in (0, 1)]
    killed = {"not_stopped": [{"rank": 1, "status": "killed"}], "stop_step": 102}
    watches[1].share_stop_outcome(killed)
    watches[0].share_stop_outcome({"not_stopped": [], "stop_step": 102})
    ended = threading.Thread(target=watches[1].finish, args=(False,))
    ended.start()
    watches[0].finish(True)
    ended.join(20)
    assert kv.try_get(p.done_key(0, 0)) == b"1" and kv.try_get(p.done_key(0, 1)) == b"1"
    for w in watches:
        w.kv = MemoryKV(patience=0.0)  # the store closed once both said "done"
    assert watches[0].stop_outcomes() == [{**killed, "node": 1, "node_host": "198.18.0.2"}]
    assert watches[1].stop_outcomes()[0]["not_stopped"] == []
