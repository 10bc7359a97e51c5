"""The store's server: one key-value table served from daemon threads of its host process.

Security, checked before a peer is served:
- `allowed_hosts`: only peers whose address is one of the job's nodes (and loopback);
  anyone else is refused and logged to stderr;
- `token`: with a job token the server sends a random challenge and serves only
  clients that answer with HMAC-SHA256(token, challenge).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType

from paddlike import netaddr

from . import wire
from .commands import CompareSet, Table, TryGet, serve
from .wire import HANDSHAKE_TIMEOUT, NONCE_SIZE, ProtocolError, read_frame

MAX_CONNECTIONS = 4096
CLOSE_GRACE = 1.0  # seconds `StoreServer.close` lets replies to requests in flight go out
WRONG_TOKEN = "wrong or missing job token"  # the reason given to `StoreServer.on_refused`


def _log(message: str) -> None:
    # stderr rather than `logging`: the launcher imports this module and counts the import time.
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"paddlike store: {message}\n")
        sys.stderr.flush()


def _resolve_all(hosts: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for host in hosts:
        host = netaddr.bare(host.strip())
        if not host:
            continue
        out.add(host)
        try:
            for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP):
                out.add(str(info[4][0]))
        except OSError as exc:
            _log(f"allowed host {host!r} does not resolve ({exc}); peers from it will be refused")
    return out


def _is_loopback(addr: str) -> bool:
    if addr.startswith("::ffff:"):
        addr = addr[7:]
    return addr.startswith("127.") or addr == "::1"


def _normalize(addr: str) -> str:
    return addr[7:] if addr.startswith("::ffff:") else addr


def _still_connected(conn: socket.socket) -> bool:
    """False once the peer has closed (EOF pending) or the socket failed."""
    try:
        poller = select.poll()
        poller.register(conn, select.POLLIN)
        if not poller.poll(0):
            return True
        return conn.recv(1, socket.MSG_PEEK) != b""  # readable: returns at once
    except (OSError, ValueError):
        return False


def listen(host: str, port: int, backlog: int | None = None) -> socket.socket:
    """A TCP socket bound to (host, port) in the host's own family: IPv4, or IPv6 for an
    IPv6 address (bracketed or not) or a name that resolves only to one. Each address
    `getaddrinfo` gives is tried in turn, so a name with both kinds binds where it can.
    Listening already when `backlog` is given (the store listens in `start`)."""
    last: OSError | None = None
    infos = socket.getaddrinfo(netaddr.bare(host), port, type=socket.SOCK_STREAM)
    for family, kind, proto, _, sockaddr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
            if backlog is not None:
                sock.listen(backlog)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        return sock
    raise last or OSError(f"{host!r} resolves to no address to listen on")


class StoreServer:
    """Serve one key-value table from daemon threads of this process.

    One thread accepts; each connection gets a thread, so a client blocked in `get`
    or `wait` never delays another. `close()` wakes every waiter and drops every
    connection.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        allowed_hosts: Iterable[str] | None = None,
        token: bytes | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self._sock = sock if sock is not None else listen(host, port)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        name = self._sock.getsockname()
        self.address: tuple[str, int] = (str(name[0]), int(name[1]))
        self._allowed = None if allowed_hosts is None else _resolve_all(allowed_hosts)
        self._token = token or None
        self._table = Table()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when a request's reply is out
        self._busy: set[socket.socket] = set()  # connections between a request and its reply
        self._accept_thread: threading.Thread | None = None
        self._closed = False
        self.refused: list[str] = []  # peers refused so far (address: reason), for diagnostics
        # Called (from a connection thread) with (address, reason) for each refused peer, so
        # the host can act on it, e.g. node 0 ending a rendezvous that peer would never join.
        self.on_refused: Callable[[str, str], None] | None = None

    @property
    def address_str(self) -> str:
        return netaddr.join(*self.address)

    def start(self) -> StoreServer:
        self._sock.listen(256)
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"store-accept-{self.address[1]}", daemon=True
        )
        self._accept_thread.start()
        return self

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Stop serving. Requests already received get their replies first (for up to
        `grace` s; waiting gets and waits answer TIMEOUT at once): a client whose last
        write was applied must not see "connection closed" instead of its answer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._table.close()
        deadline = time.monotonic() + grace
        with self._idle:
            while self._busy and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)

    def compare_set(self, key: str, expected: bytes | None, desired: bytes) -> bytes | None:
        """`StoreClient.compare_set` from the hosting process itself, without a connection
        (for a verdict only the host can give, even while its own clients are busy)."""
        return CompareSet(key, expected, desired).swap(self._table)

    def peek(self, key: str) -> bytes | None:
        """The value of `key` now, read by the hosting process itself (None: absent)."""
        return TryGet(key).look_up(self._table)

    def __enter__(self) -> StoreServer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- accepting and serving --

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                crowded = len(self._conns) >= MAX_CONNECTIONS
                if not crowded:
                    self._conns.add(conn)
            if crowded:
                self._refuse(conn, str(peer[0]), f"more than {MAX_CONNECTIONS} connections")
                continue
            threading.Thread(
                target=self._serve_connection, args=(conn, str(peer[0])), daemon=True
            ).start()

    def _peer_allowed(self, addr: str) -> bool:
        if self._allowed is None or _is_loopback(addr):
            return True
        return addr in self._allowed or _normalize(addr) in self._allowed

    def _refused(self, addr: str, reason: str) -> None:
        self.refused.append(f"{addr}: {reason}")
        _log(f"{self.address_str} refused peer {addr}: {reason}")
        if self.on_refused is not None:
            try:
                self.on_refused(addr, reason)
            except Exception as exc:  # the host's reaction must not take the server down
                _log(f"reacting to the refusal of {addr} failed: {exc}")

    def _refuse(self, conn: socket.socket, addr: str, reason: str) -> None:
        with contextlib.suppress(OSError):  # answer first, as in `_handshake`
            conn.settimeout(1.0)
            conn.sendall(wire.refusal(reason))
        conn.close()
        self._refused(addr, reason)

    def _handshake(self, conn: socket.socket, addr: str) -> bool:
        if not self._peer_allowed(addr):
            self._refuse(conn, addr, "its address is not one of the job's hosts")
            return False
        nonce = os.urandom(NONCE_SIZE)
        conn.settimeout(HANDSHAKE_TIMEOUT)
        conn.sendall(wire.hello(nonce, token_required=bool(self._token)))
        mac = read_frame(conn, HANDSHAKE_TIMEOUT)
        if self._token:
            good = hmac.new(self._token, nonce, hashlib.sha256).digest()
            if not hmac.compare_digest(mac, good):
                # Answer first: reacting to the refusal may end the host's job and close
                # this store, and the client must learn why rather than see a closed socket.
                with contextlib.suppress(OSError):
                    conn.sendall(wire.verdict(accepted=False))
                self._refused(addr, WRONG_TOKEN)
                return False
        conn.sendall(wire.verdict(accepted=True))
        return True

    def _serve_connection(self, conn: socket.socket, addr: str) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self._handshake(conn, addr):
                return
            while True:
                payload = read_frame(conn, None)
                with self._lock:
                    if self._closed:
                        return  # came after close(): no answer
                    self._busy.add(conn)
                try:
                    reply = serve(self._table, payload, lambda: _still_connected(conn))
                except ProtocolError as exc:
                    conn.sendall(wire.frame(wire.error_reply(str(exc))))
                    return
                conn.sendall(wire.frame(reply))
                with self._idle:
                    self._busy.discard(conn)
                    self._idle.notify_all()
        except (OSError, EOFError, ProtocolError):
            return
        finally:
            with self._idle:
                self._busy.discard(conn)
                self._idle.notify_all()
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()
