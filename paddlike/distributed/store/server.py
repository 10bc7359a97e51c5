"""The store's server: one key-value table served from a daemon thread of its host process
(`loop.ServeLoop`: one thread for every connection).

Security, checked before a peer is served:
- `allowed_hosts`: only peers whose address is one of the job's nodes (and loopback);
  anyone else is refused and logged to stderr;
- `token`: with a job token the server sends a random challenge and serves only
  clients that answer with HMAC-SHA256(token, challenge).

A refused peer is closed and affects nobody else: anyone who can reach the port can
fail a handshake on purpose, so a refusal never ends the host's job (issue 31). Each
refused address is logged once.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import socket
import sys
import threading
from collections.abc import Iterable
from types import TracebackType

from paddlike import netaddr

from .commands import CompareSet, Table, TryGet
from .loop import WRONG_TOKEN, ServeLoop

# Connections served at once: a few per launcher, for jobs of thousands of nodes (each costs
# a descriptor and a few hundred bytes, no thread).
MAX_CONNECTIONS = 65536
BACKLOG = 4096  # connections the kernel queues before accepting (capped by net.core.somaxconn)
CLOSE_GRACE = 1.0  # seconds `StoreServer.close` lets replies to requests in flight go out
MAX_LOGGED = 4096  # distinct refused addresses logged; after that, one line says so
__all__ = ["CLOSE_GRACE", "MAX_CONNECTIONS", "WRONG_TOKEN", "StoreServer", "listen"]


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
    """Serve one key-value table from a daemon thread of this process.

    The thread (`loop.ServeLoop`) accepts and serves every connection; a client waiting
    in `get` or `wait` is parked on the table, so it never delays another. `close()`
    answers every waiter and drops every connection.
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
        self._lock = threading.Lock()
        self._loop: ServeLoop | None = None
        self._closed = False
        self.max_connections = MAX_CONNECTIONS
        self.refused: dict[str, str] = {}  # address -> first reason (bounded by MAX_LOGGED)
        self._overflowed = False

    @property
    def address_str(self) -> str:
        return netaddr.join(*self.address)

    def start(self) -> StoreServer:
        self._sock.listen(BACKLOG)
        self._loop = ServeLoop(self._sock, self._table, self, f"store-{self.address[1]}")
        self._loop.start()
        return self

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Stop serving. Requests already received get their replies first (for up to
        `grace` s; waiting gets and waits answer TIMEOUT at once): a client whose last
        write was applied must not see "connection closed" instead of its answer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._loop is not None:
            self._loop.stop(grace)
        else:
            self._sock.close()

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

    # -- the gate: what the loop asks about each peer (`loop.Gate`) --

    @property
    def token_required(self) -> bool:
        return bool(self._token)

    def refusal(self, addr: str) -> str | None:
        if self._allowed is None or _is_loopback(addr):
            return None
        if addr in self._allowed or _normalize(addr) in self._allowed:
            return None
        return "its address is not one of the job's hosts"

    def authentic(self, nonce: bytes, mac: bytes) -> bool:
        assert self._token is not None
        return hmac.compare_digest(mac, hmac.new(self._token, nonce, hashlib.sha256).digest())

    def turned_away(self, addr: str, reason: str) -> None:
        """Log `addr` the first time it is refused (many connections: one line). Nothing
        more: whoever can reach the port can be refused at will."""
        if addr in self.refused:
            return
        if len(self.refused) >= MAX_LOGGED:
            if not self._overflowed:
                self._overflowed = True
                _log(f"{self.address_str}: over {MAX_LOGGED} addresses refused; no more logged")
            return
        self.refused[addr] = reason
        _log(f"{self.address_str} refused peer {addr}: {reason} (logged once per address)")
