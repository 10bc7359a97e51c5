"""A link's figures, measured for a bounded time over the job's own network: round trip
(the fastest of a few one-byte echoes) and bandwidth both ways (bytes moved in a fixed
time, not a fixed size, so that a slow link costs no more time than a fast one).

`ProbeServer` answers on this node's job address while the check runs; `measure_link`
is the client. One connection per direction:

    "U" + duration: the client sends for `duration`, shuts its side; the server answers
                    with the rate it received at (`_receive_rate`, 8 bytes)
    "D" + duration: the server sends for `duration` and closes; the client measures
    "P" + count:    `count` one-byte echoes

A sender's socket buffer is kept small (`SEND_BUFFER`) so that what is queued when its
time is up drains in a moment even on a slow link. The receiver's figure is the best
10 ms window's rate (`_receive_rate`). Only the job's hosts are served.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Collection

from paddlike.launch import NamedTuple

SEND_BUFFER = 128 * 1024  # bytes a sender may have queued when its time is up
CHUNK = 64 * 1024
PINGS = 5
_HEADER = struct.Struct("!cd")  # kind, seconds (or a count for "P")
_RATE = struct.Struct("!d")
WINDOW = 0.01  # seconds: the receiver's figure is the best window's rate
IO_GRACE = 5.0  # seconds a probe waits beyond its own duration before it gives up


class LinkFigure(NamedTuple):
    """One measured link: from node `a` (which measured) to node `b`."""

    a: int
    b: int
    up: float  # bytes/s from a to b
    down: float  # bytes/s from b to a
    rtt: float  # seconds, the fastest echo (waiting for a CPU only ever adds)

    @property
    def bandwidth(self) -> float:
        """The slower direction: a link is as good as its worse way."""
        return min(self.up, self.down)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _bare(address: str) -> str:
    """An IPv4-mapped IPv6 peer address as its IPv4 form."""
    return address[7:] if address.startswith("::ffff:") else address


def _addresses(hosts: Collection[str]) -> set[str]:
    """The hosts' addresses: literals as they are, names resolved (a name that does not
    resolve serves nobody)."""
    out = set()
    for host in hosts:
        bare = host.strip("[]")
        out.add(bare)
        if not all(c in "0123456789abcdefABCDEF.:" for c in bare):
            with contextlib.suppress(OSError, UnicodeError):
                out.update(str(a[4][0]) for a in socket.getaddrinfo(bare, None))
    return out


class ProbeServer:
    """Answers the other nodes' probes on (`host`, any free port) until `close`, serving
    only connections from `allowed` addresses."""

    def __init__(self, host: str, allowed: Collection[str]) -> None:
        self.allowed = frozenset(_addresses(allowed))
        self.sock = socket.socket(_family(host), socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.port: int = self.sock.getsockname()[1]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="preflight-probe", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            if _bare(peer[0]) not in self.allowed:
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError, struct.error):
            conn.settimeout(IO_GRACE)
            kind, value = _HEADER.unpack(_read_exact(conn, _HEADER.size))
            if kind == b"P":
                for _ in range(min(int(value), 100)):
                    conn.sendall(_read_exact(conn, 1))
            elif kind == b"U":
                conn.sendall(_RATE.pack(_receive_rate(conn)))
            elif kind == b"D":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
                _send_for(conn, min(value, 2.0))

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=1.0)


def _read_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        data = conn.recv(n - len(buf))
        if not data:
            raise OSError("the peer closed the connection")
        buf += data
    return buf


def _receive_rate(conn: socket.socket) -> float:
    """Read to the end; the highest rate over any `WINDOW` of wall-clock time (the whole
    transfer's when shorter). On a machine whose CPUs are busy, a sender or receiver that
    waits for a CPU makes the average a figure of the CPUs, not the link: the best window
    is what the link carried while both ends ran. A window is timed from its start, so
    bytes that piled up while the receiver waited count over the time they took to come."""
    best = 0.0
    first = start = time.perf_counter()
    total = window = 0
    while data := conn.recv(CHUNK):
        now = time.perf_counter()
        total += len(data)
        window += len(data)
        if now - start >= WINDOW:
            best = max(best, window / (now - start))
            start, window = now, 0
    whole = total / max(time.perf_counter() - first, 1e-9)
    return max(best, whole) if best else whole


def _send_for(conn: socket.socket, duration: float) -> int:
    payload = bytes(CHUNK)
    sent = 0
    end = time.monotonic() + duration
    while time.monotonic() < end:
        sent += conn.send(payload)
    return sent


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    conn = socket.socket(_family(host), socket.SOCK_STREAM)
    conn.settimeout(timeout)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.connect((host, port))
    return conn


def measure_link(a: int, b: int, host: str, port: int, duration: float) -> LinkFigure:
    """Node `a`'s figures to node `b` at `host`:`port`: `duration` seconds in all, half
    each way, plus the echoes. OSError when the peer cannot be reached or stops answering
    (the caller records the link as unmeasured)."""
    timeout = duration + IO_GRACE
    with _connect(host, port, timeout) as conn:
        conn.sendall(_HEADER.pack(b"P", PINGS))
        rtts = []
        for _ in range(PINGS):
            t = time.perf_counter()
            conn.sendall(b"x")
            _read_exact(conn, 1)
            rtts.append(time.perf_counter() - t)
    half = duration / 2
    with _connect(host, port, timeout) as conn:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        conn.sendall(_HEADER.pack(b"U", half))
        _send_for(conn, half)
        conn.shutdown(socket.SHUT_WR)
        (up,) = _RATE.unpack(_read_exact(conn, _RATE.size))
    with _connect(host, port, timeout) as conn:
        conn.sendall(_HEADER.pack(b"D", half))
        down = _receive_rate(conn)
    return LinkFigure(a, b, up, down, min(rtts))
