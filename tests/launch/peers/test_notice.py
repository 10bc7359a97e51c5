"""A death notice (`peers.notice`): what a dying launcher's guardian writes to node 0's
store, delivered to a real store on loopback."""

from __future__ import annotations

from paddlike.distributed.store import StoreClient, StoreServer
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.notice import deliver_notice
from paddlike.launch.peers.protocol import encode_notice
from paddlike.summary import RootCause

LOST = RootCause(reason="node 2 (10.0.0.3) was lost: its launcher (pid 7) died", node_index=2)


def _notice(port: int, token: bytes | None) -> bytes:
    marks = [(p.end_key(0, 2), p.END_LOST), (p.done_key(0, 2), p.END_LOST)]
    return encode_notice(("127.0.0.1", port), token, (p.abort_key(0), p.encode_cause(LOST)), marks)


def test_a_notice_makes_the_lost_node_the_rounds_cause_and_marks_its_end():
    server = StoreServer("127.0.0.1", 0, token=b"secret").start()
    try:
        assert deliver_notice(_notice(server.address[1], b"secret"))
        kv = StoreClient("127.0.0.1", server.address[1], timeout=5, token=b"secret")
        try:
            cause = p.decode_cause(kv.get(p.abort_key(0)))
            assert cause.reason == LOST.reason and cause.time is not None  # stamped now
            assert kv.get(p.end_key(0, 2)) == p.END_LOST == kv.get(p.done_key(0, 2))
        finally:
            kv.close()
    finally:
        server.close()


def test_a_notice_never_replaces_the_rounds_first_cause():
    server = StoreServer("127.0.0.1", 0).start()
    try:
        first = RootCause(reason="trainer rank 0 exited with code 3", role="trainer")
        kv = StoreClient("127.0.0.1", server.address[1], timeout=5)
        try:
            kv.set(p.abort_key(0), p.encode_cause(first))
            assert deliver_notice(_notice(server.address[1], None))
            assert p.decode_cause(kv.get(p.abort_key(0))).reason == first.reason
        finally:
            kv.close()
    finally:
        server.close()


def test_a_notice_for_a_store_that_is_gone_gives_up_within_its_second_without_raising():
    server = StoreServer("127.0.0.1", 0).start()
    port = server.address[1]
    server.close()  # node 0 went first
    assert deliver_notice(_notice(port, None)) is False
    assert deliver_notice(b"") is False  # (the guardian's dry run)


def test_an_etcd_notice_names_the_endpoints_and_the_job_instead_of_a_store():
    import json

    notice = encode_notice(
        None, None, (p.abort_key(3), p.encode_cause(LOST)), [], etcd=[("10.0.0.9", 2379)],
        job_id="j1",
    )  # fmt: skip
    data = json.loads(notice)
    assert data["etcd"] == [["10.0.0.9", 2379]] and data["job_id"] == "j1"
    assert "store" not in data and data["cause"][0] == "job/3/abort"
