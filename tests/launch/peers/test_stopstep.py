"""The job's stop step at a preemption notice (`peers.stopstep`): the largest of every
node's position, so that no rank of any node has passed it; a node that does not answer
is left out and named."""

from __future__ import annotations

import threading

import pytest

from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.stopstep import StopStep, agree_stop_step
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
