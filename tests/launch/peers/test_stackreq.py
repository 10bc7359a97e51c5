"""Job-wide stack requests through a real store (`peers.stackreq`): every node hears a
request at once (a blocked watch thread, no polling), answers, and gathers every node's
answer; a node that does not answer is named; two nodes that see the same hang ask once."""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Iterator

import pytest

from paddlike.distributed.store import StoreClient, StoreServer
from paddlike.launch.peers.stackreq import StackChannel


@contextlib.contextmanager
def channels(nnodes: int) -> Iterator[list[StackChannel]]:
    with StoreServer().start() as srv:

        def connect() -> StoreClient:
            return StoreClient(*srv.address, timeout=10)

        made = [
            StackChannel(connect=connect, kv=connect(), round_=0, node_index=i, nnodes=nnodes)
            for i in range(nnodes)
        ]
        for c in made:
            c.start()
        try:
            yield made
        finally:
            for c in made:
                c.stop()
                c.kv.close()


def wait_readable(fd: int, timeout: float = 10.0) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


@pytest.mark.timeout(30)
def test_a_request_reaches_every_node_and_every_answer_is_gathered():
    with channels(2) as (a, b):
        assert a.request("received SIGUSR1 on node 0")
        for c in (a, b):
            assert wait_readable(c.fd), f"node {c.node_index} never heard the request"
            ((n, body),) = c.take()
            assert (n, body) == (1, {"by": 0, "why": "received SIGUSR1 on node 0", "hang": 0})
            c.answer(n, {"stacks": [], "node": c.node_index})
        reports, silent = a.gather(1, timeout=5)
    assert [r["node"] for r in reports] == [0, 1]
    assert silent == []


@pytest.mark.timeout(30)
def test_a_node_that_does_not_answer_is_named_at_the_deadline():
    with channels(2) as (a, _b):
        assert a.request("a hang")
        assert wait_readable(a.fd)
        (n, _), = a.take()
        a.answer(n, {"node": 0})
        reports, silent = a.gather(n, timeout=0.3)
    assert [r["node"] for r in reports] == [0]
    assert silent == [1]


@pytest.mark.timeout(30)
def test_two_nodes_that_see_the_same_hang_ask_once():
    with channels(2) as (a, b):
        assert a.request_hang("no progress for 5 s on any rank")
        assert not b.request_hang("no progress for 5 s on any rank")
        assert wait_readable(b.fd)
        assert [body["hang"] for _, body in b.take()] == [1]
        # the next stall is hang 2 for both; its first asker asks
        assert b.request_hang("no progress for 5 s on any rank")
        seen: list[tuple[int, int]] = []
        while len(seen) < 2 and wait_readable(a.fd):
            seen += [(n, body["by"]) for n, body in a.take()]
        assert seen == [(1, 0), (2, 1)]  # (request, asking node)


def test_a_stopped_channel_closes_its_descriptors():
    with channels(1) as (a,):
        fd = a.fd
    with pytest.raises(OSError):
        os.fstat(fd)
