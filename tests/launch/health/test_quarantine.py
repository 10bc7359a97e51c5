"""Quarantine: the rounds held against a node, kept in a real store (node 0's, on
loopback) by every member at once, and which nodes are left out."""

from __future__ import annotations

import threading

import pytest

from paddlike.distributed.store import StoreClient, StoreServer
from paddlike.launch.health.quarantine import (
    counts_against,
    note_round_end,
    quarantined,
    read_rounds,
)
from paddlike.summary import RootCause

WORKER_EXIT = RootCause(reason="trainer rank 3 exited with code 3", host="10.0.0.4",
                        node_index=3, role="trainer", rank=3, exit_code=3)  # fmt: skip
LOST = RootCause(reason="node 2 (10.0.0.3) was lost", host="10.0.0.3", node_index=2,
                 membership="lost")  # fmt: skip
LEFT = RootCause(reason="node 2 left the job", host="10.0.0.3", node_index=2, membership="left")


@pytest.fixture
def store():
    server = StoreServer("127.0.0.1", 0).start()
    clients = []

    def connect() -> StoreClient:
        clients.append(StoreClient("127.0.0.1", server.address[1], timeout=5))
        return clients[-1]

    try:
        yield connect
    finally:
        for c in clients:
            c.close()
        server.close()


@pytest.mark.parametrize(
    ("cause", "held"),
    [(WORKER_EXIT, True), (LOST, True), (LEFT, False), (None, False),
     (RootCause(reason="pre-flight check left out node 2", host="10.0.0.3", node_index=2,
                membership="left"), False),
     (RootCause(reason="rendezvous timed out"), False)],
)  # fmt: skip
def test_which_causes_are_held_against_their_node(cause, held):
    assert counts_against(cause) is held


def test_every_member_noting_the_same_round_holds_it_once(store):
    clients = [store() for _ in range(4)]
    threads = [threading.Thread(target=note_round_end, args=(c, 0, WORKER_EXIT)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    note_round_end(clients[0], 1, WORKER_EXIT)
    note_round_end(clients[1], 1, LEFT)  # not held
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert read_rounds(clients[2], hosts) == {"10.0.0.4": [0, 1]}


ENDED = "node 1 (b): quarantined: its processes or launcher ended {} rounds ({})"


@pytest.mark.parametrize(
    ("rounds", "limit", "out"),
    [({"b": [0, 1]}, 2, [(1, ENDED.format(2, "0, 1"))]),
     ({"b": [0]}, 2, []),
     ({"b": [0, 1]}, 0, []),
     ({"b": [4]}, 1, [(1, ENDED.format(1, "4"))])],
)  # fmt: skip
def test_a_node_is_quarantined_after_the_limits_rounds(rounds, limit, out):
    assert quarantined(rounds, ["a", "b", "c"], limit) == out
