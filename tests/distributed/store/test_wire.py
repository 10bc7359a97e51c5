"""The store's wire bytes, pinned: what each command sends, what each answer is, both ways.

The launchers of one job may come from different installs of paddlike, so the bytes are
a contract, not an implementation detail. Every case is a client call, the request frame
it must send, the reply frame the server must give, and what the call then returns.
The expected bytes are spelled here by hand (big-endian, u32 length prefixes), not
computed with the module's own encoders.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from paddlike.distributed.store import StoreClient, StoreError, StoreServer, StoreTimeoutError


def _u32(n: int) -> bytes:
    return struct.pack(">I", n)


def _i64(n: int) -> bytes:
    return struct.pack(">q", n)


def _f(data: bytes) -> bytes:
    """A length-prefixed field (and the framing of a whole payload: the same layout)."""
    return _u32(len(data)) + data


class Raises:
    def __init__(self, error: type[BaseException], match: str) -> None:
        self.error, self.match = error, match


# (name, the call, request payload, reply payload, the call's result) — in order: each
# reply is what a fresh server answers after the cases before it.
Case = tuple[str, Callable[[StoreClient], Any], bytes, bytes, Any]
CASES: list[Case] = [
    ("set", lambda c: c.set("k", b"v"), b"\x01" + _f(b"k") + _f(b"v"), b"\x00", None),
    ("set str", lambda c: c.set("s", "é"), b"\x01" + _f(b"s") + _f("é".encode()), b"\x00", None),
    (
        "get",
        lambda c: c.get("k", timeout=1.5),
        b"\x02" + _f(b"k") + _u32(1500),
        b"\x00" + _f(b"v"),
        b"v",
    ),
    ("try_get absent", lambda c: c.try_get("nope"), b"\x03" + _f(b"nope"), b"\x02", None),
    ("try_get", lambda c: c.try_get("k"), b"\x03" + _f(b"k"), b"\x00" + _f(b"v"), b"v"),
    ("add", lambda c: c.add("n", 5), b"\x04" + _f(b"n") + _i64(5), b"\x00" + _i64(5), 5),
    (
        "add negative",
        lambda c: c.add("n", -7),
        b"\x04" + _f(b"n") + _i64(-7),
        b"\x00" + _i64(-2),
        -2,
    ),
    (
        "compare_set create",
        lambda c: c.compare_set("c", None, b"x"),
        b"\x05" + _f(b"c") + b"\x00" + _f(b"") + _f(b"x"),
        b"\x00" + _f(b"x"),
        b"x",
    ),
    (
        "compare_set other",
        lambda c: c.compare_set("c", "y", "z"),
        b"\x05" + _f(b"c") + b"\x01" + _f(b"y") + _f(b"z"),
        b"\x00" + _f(b"x"),
        b"x",
    ),
    (
        "compare_set swap",
        lambda c: c.compare_set("c", b"x", b"w"),
        b"\x05" + _f(b"c") + b"\x01" + _f(b"x") + _f(b"w"),
        b"\x00" + _f(b"w"),
        b"w",
    ),
    (
        "compare_set absent",
        lambda c: c.compare_set("gone", b"y", b"z"),
        b"\x05" + _f(b"gone") + b"\x01" + _f(b"y") + _f(b"z"),
        b"\x02",
        b"",
    ),
    ("delete", lambda c: c.delete("c"), b"\x06" + _f(b"c"), b"\x00\x01", True),
    ("delete again", lambda c: c.delete("c"), b"\x06" + _f(b"c"), b"\x00\x00", False),
    (
        "wait",
        lambda c: c.wait(["k", "n"], timeout=2),
        b"\x07" + _u32(2000) + _u32(2) + _f(b"k") + _f(b"n"),
        b"\x00",
        None,
    ),
    (
        "missing",
        lambda c: c.missing(["k", "m1", "m2"]),
        b"\x07" + _u32(0) + _u32(3) + _f(b"k") + _f(b"m1") + _f(b"m2"),
        b"\x01" + _f(b"m1,m2"),
        ["m1", "m2"],
    ),
    (
        "missing none",
        lambda c: c.missing(["k"]),
        b"\x07" + _u32(0) + _u32(1) + _f(b"k"),
        b"\x00",
        [],
    ),
    ("ping", lambda c: c.ping(), b"\x08", b"\x00", None),
    (
        "get_many",
        lambda c: c.get_many(["k", "n"], timeout=2),
        b"\x09" + _u32(2000) + _u32(2) + _f(b"k") + _f(b"n"),
        b"\x00" + _u32(2) + _f(b"v") + _f(b"-2"),
        [b"v", b"-2"],
    ),
    (
        "get_many none",
        lambda c: c.get_many([], timeout=0),
        b"\x09" + _u32(0) + _u32(0),
        b"\x00" + _u32(0),
        [],
    ),
    (
        "get times out",
        lambda c: c.get("absent", timeout=0.05),
        b"\x02" + _f(b"absent") + _u32(50),
        b"\x01",
        Raises(StoreTimeoutError, r"key 'absent' did not appear .* within 0.05 s"),
    ),
    (
        "wait times out",
        lambda c: c.wait(["k", "absent"], timeout=0.05),
        b"\x07" + _u32(50) + _u32(2) + _f(b"k") + _f(b"absent"),
        b"\x01" + _f(b"absent"),
        Raises(StoreTimeoutError, r"keys absent did not appear .* within 0.05 s"),
    ),
    (
        "get_many times out",
        lambda c: c.get_many(["k", "absent", "gone"], timeout=0.05),
        b"\x09" + _u32(50) + _u32(3) + _f(b"k") + _f(b"absent") + _f(b"gone"),
        b"\x01" + _f(b"absent,gone"),
        Raises(StoreTimeoutError, r"keys absent,gone did not appear .* within 0.05 s"),
    ),
    (
        "add to text",
        lambda c: c.add("k"),
        b"\x04" + _f(b"k") + _i64(1),
        b"\x03" + _f(b"value is not an integer counter"),
        Raises(StoreError, r"rejected add to key 'k': value is not an integer counter"),
    ),
]
HELLO_HEAD = b"PLKS\x01"  # magic, protocol version; then flags and the 32-byte nonce


def _recv_frame(sock: socket.socket) -> bytes:
    (n,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
    return sock.recv(n, socket.MSG_WAITALL) if n else b""


class RecordingServer:
    """A hand-written server: the handshake, then the scripted replies; records the requests."""

    def __init__(self, replies: list[bytes], token: bytes | None = None) -> None:
        self.replies, self.token = replies, token
        self.requests: list[bytes] = []
        self.macs: list[bytes] = []
        self.nonce = bytes(range(32))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(10)
            flags = b"\x01" if self.token else b"\x00"
            conn.sendall(_f(HELLO_HEAD + flags + self.nonce))
            self.macs.append(_recv_frame(conn))
            conn.sendall(_f(b"\x00"))
            for reply in self.replies:
                self.requests.append(_recv_frame(conn))
                conn.sendall(_f(reply))

    def close(self) -> None:
        self.thread.join(timeout=10)
        self.listener.close()


def _check(call: Callable[[StoreClient], Any], client: StoreClient, expected: Any) -> None:
    if isinstance(expected, Raises):
        with pytest.raises(expected.error, match=expected.match):
            call(client)
    else:
        assert call(client) == expected


def test_the_client_sends_the_pinned_request_bytes_and_decodes_the_pinned_replies() -> None:
    server = RecordingServer([reply for _, _, _, reply, _ in CASES])
    try:
        with StoreClient(*server.address, timeout=10) as client:
            for name, call, _, _, expected in CASES:
                _check(call, client, expected)
                assert client.connected, name
    finally:
        server.close()
    assert server.macs == [b""]  # no token: an empty AUTH frame
    for (name, _, request, _, _), sent in zip(CASES, server.requests, strict=True):
        assert sent == request, name


def test_a_client_with_a_token_answers_the_nonce_with_its_hmac() -> None:
    server = RecordingServer([b"\x00"], token=b"s3cret")
    try:
        with StoreClient(*server.address, timeout=10, token=b"s3cret") as client:
            client.ping()
    finally:
        server.close()
    assert server.macs == [hmac.new(b"s3cret", server.nonce, hashlib.sha256).digest()]
    assert server.requests == [b"\x08"]


@pytest.fixture
def raw_client() -> Iterator[socket.socket]:
    with StoreServer().start() as srv, socket.create_connection(srv.address, timeout=10) as sock:
        hello = _recv_frame(sock)
        assert hello[:6] == HELLO_HEAD + b"\x00" and len(hello) == 6 + 32
        sock.sendall(_f(b""))
        assert _recv_frame(sock) == b"\x00"
        yield sock


def test_the_server_answers_the_pinned_requests_with_the_pinned_replies(
    raw_client: socket.socket,
) -> None:
    for name, _, request, reply, _ in CASES:
        raw_client.sendall(_f(request))
        assert _recv_frame(raw_client) == reply, name


def test_the_server_answers_an_unknown_command_with_error_and_closes(
    raw_client: socket.socket,
) -> None:
    raw_client.sendall(_f(b"\x7f"))
    assert _recv_frame(raw_client) == b"\x03" + _f(b"unknown command 127")
    assert raw_client.recv(1) == b""


def test_a_wrong_token_is_answered_with_status_1() -> None:
    with (
        StoreServer(token=b"s3cret").start() as srv,
        socket.create_connection(srv.address, timeout=10) as sock,
    ):
        hello = _recv_frame(sock)
        assert hello[:6] == HELLO_HEAD + b"\x01" and len(hello) == 38
        sock.sendall(_f(b"guess"))
        assert _recv_frame(sock) == b"\x01"
