"""Strangers at the store's handshake (issue 31): whoever can reach the port may send
junk, a huge length, nothing at all, or open many connections. Each such connection is
refused or dropped on its own, the store's memory stays bounded before authentication,
and the job's own clients are served all along."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from paddlike.distributed.store import StoreClient, StoreServer, loop, wire

pytestmark = pytest.mark.timeout(60)

TOKEN = b"s3cret"
REFUSED = wire.verdict(accepted=False)


@pytest.fixture
def server() -> Iterator[StoreServer]:
    with StoreServer(token=TOKEN).start() as srv:
        yield srv


def _stranger(server: StoreServer) -> socket.socket:
    """A raw connection that has read the store's HELLO (a challenge it cannot answer)."""
    sock = socket.create_connection(server.address, timeout=10)
    wire.Hello(wire.read_frame(sock, 10))
    return sock


def _rest(sock: socket.socket) -> bytes:
    """What the store sends until it closes the connection (a 10 s read timeout)."""
    out = b""
    while chunk := sock.recv(4096):
        out += chunk
    return out


def _served(server: StoreServer) -> None:
    with StoreClient(*server.address, token=TOKEN, timeout=10) as c:
        c.set("k", b"v")
        assert c.get("k") == b"v"


def test_sixteen_zero_bytes_are_refused_on_their_own_connection(server: StoreServer) -> None:
    with StoreClient(*server.address, token=TOKEN, timeout=10) as member:
        with _stranger(server) as junk:
            junk.sendall(bytes(16))  # an empty AUTH frame, then more empty frames
            assert _rest(junk) == REFUSED
        member.set("after", b"1")  # a member's connection outlives the stranger's
        assert member.get("after") == b"1"
    _served(server)
    assert server.refused == {"127.0.0.1": "wrong or missing job token"}


@pytest.mark.parametrize("length", [wire.MAX_AUTH + 1, 60 << 20, 0xFFFFFFFF])
def test_a_big_frame_before_auth_is_refused_at_once_not_buffered(
    server: StoreServer, length: int
) -> None:
    with _stranger(server) as junk:
        junk.sendall(struct.pack(">I", length) + bytes(16))  # the rest never comes
        assert _rest(junk) == REFUSED  # not waited for (the read timeout is 10 s)
    _served(server)


def test_a_stranger_that_never_finishes_its_handshake_is_dropped_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loop, "HANDSHAKE_TIMEOUT", 1.0)
    monkeypatch.setattr(loop, "SWEEP", 0.1)
    with StoreServer(token=TOKEN).start() as srv, _stranger(srv) as slow:
        started = time.monotonic()
        slow.sendall(struct.pack(">I", wire.MAX_AUTH) + b"\0")  # 31 bytes never come
        _served(srv)  # the serving thread is not held by it
        assert _rest(slow) == b""  # dropped without an answer
        assert time.monotonic() - started < 5  # at the deadline, not at the read timeout


def test_many_open_handshakes_cost_a_bounded_number_of_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loop, "MAX_HANDSHAKES", 8)
    monkeypatch.setattr(loop, "HANDSHAKE_GRACE", 0.0)  # (launchers get 2 s to answer)
    with StoreServer(token=TOKEN).start() as srv:
        strangers = [_stranger(srv) for _ in range(10)]
        try:
            assert [_rest(s) for s in strangers[:2]] == [b"", b""]  # the oldest went first
            _served(srv)  # a launcher answers at once: it gets in
        finally:
            for s in strangers:
                s.close()
