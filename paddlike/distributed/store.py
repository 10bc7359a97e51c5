"""The TCP key-value store shared by the launchers (rendezvous, abort) and the workers' runtime.

One server runs in daemon threads of its host process (node 0's launcher, or rank 0's
worker); clients connect from any process. The protocol is a compact binary framing
of length-prefixed byte strings: no pickle, no eval, so a hostile or broken peer can
at worst get an error frame back. Every call carries a deadline.

Security, checked before a peer is served:
- `allowed_hosts`: only peers whose address is one of the job's nodes (and loopback);
  anyone else is refused and logged to stderr;
- `token`: with a job token the server sends a random challenge and serves only
  clients that answer with HMAC-SHA256(token, challenge).

Wire format (all integers big-endian), in one place:

    frame     = u32 length, then `length` bytes of payload (length <= MAX_FRAME)
    field     = u32 length, then bytes                       ("bytes" below)
    handshake: server -> HELLO frame: b"PLKS" u8 version u8 flags [32-byte nonce | reason]
                   flags: 1 = token required, 2 = refused (reason follows, then close)
               client -> AUTH frame: mac bytes (32 bytes, or empty without token)
               server -> u8 status frame: 0 ok, 1 bad token (then close)
    request  = u8 opcode, then the command's fields
    response = u8 status (OK, TIMEOUT, MISSING, ERROR), then the command's fields
               (ERROR: one field, the message)

Each command below (a `_Command` subclass) keeps its request encoder, its effect on
the server's table and its response decoder side by side.

This module imports only the standard library: the launcher imports it, and its
import time counts toward every launch.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType

__all__ = [
    "StoreAuthError",
    "StoreClient",
    "StoreError",
    "StoreServer",
    "StoreTimeoutError",
]

MAX_FRAME = 64 << 20  # 64 MiB: far above any key/value the runtime or launcher sends
MAX_KEY = 4096
PROTOCOL_VERSION = 1
MAGIC = b"PLKS"
HANDSHAKE_TIMEOUT = 10.0  # seconds a fresh connection gets to authenticate
FRAME_TIMEOUT = 30.0  # seconds between the first and last byte of one frame
MAX_CONNECTIONS = 4096
CLOSE_GRACE = 1.0  # seconds `StoreServer.close` lets replies to requests in flight go out
_MAC_SIZE = 32
WRONG_TOKEN = "wrong or missing job token"  # the reason given to `StoreServer.on_refused`
_FLAG_TOKEN = 1
_FLAG_REFUSED = 2

_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

# Response status codes.
OK, TIMEOUT, MISSING, ERROR = 0, 1, 2, 3


class StoreError(RuntimeError):
    """A store call failed; the message names the store address and the key."""


class StoreTimeoutError(StoreError, TimeoutError):
    """A key (or a connection) did not come before the deadline."""


class StoreAuthError(StoreError):
    """The store refused this client: wrong or missing job token, or not a job host."""


class ProtocolError(ValueError):
    """A malformed frame: the server answers ERROR and drops the connection."""


# --- framing -----------------------------------------------------------------------


def _field(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _frame(payload: bytes) -> bytes:
    return _U32.pack(len(payload)) + payload


class _Reader:
    """Parse fields out of one payload; every short read is a ProtocolError, never a crash."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"truncated frame: wanted {n} bytes at offset {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return _U8.unpack(self._take(1))[0]

    def u32(self) -> int:
        return _U32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def bytes_(self) -> bytes:
        return self._take(self.u32())

    def key(self) -> str:
        raw = self.bytes_()
        if len(raw) > MAX_KEY:
            raise ProtocolError(f"key of {len(raw)} bytes is longer than {MAX_KEY}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("key is not UTF-8") from exc

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"{len(self.data) - self.pos} unexpected bytes after the fields")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """n bytes, or EOFError when the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket, first_byte_timeout: float | None) -> bytes:
    """One frame: waits up to `first_byte_timeout` for it to begin, then FRAME_TIMEOUT for it."""
    sock.settimeout(first_byte_timeout)
    head = _recv_exact(sock, 1)
    sock.settimeout(FRAME_TIMEOUT if first_byte_timeout is None else first_byte_timeout)
    head += _recv_exact(sock, 3)
    (length,) = _U32.unpack(head)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes is larger than {MAX_FRAME}")
    return _recv_exact(sock, length)


# --- the table the server serves ---------------------------------------------------------


class _Table:
    """Keys to values, with one condition variable that every change notifies."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.changed = threading.Condition()
        self.closed = False

    def wait_for(self, keys: Sequence[str], deadline: float, alive: Callable[[], bool]) -> bool:
        """True once every key exists; False at the deadline, when the server closes, or when
        the waiting client went away (checked each second, so abandoned waits free their thread).
        """
        with self.changed:
            while not all(k in self.data for k in keys):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return False
                if not self.changed.wait(min(left, 1.0)) and not alive():
                    return False
            return True


def _ms_deadline(ms: int) -> float:
    return time.monotonic() + ms / 1000.0


# --- the commands: request encoder, effect, response decoder side by side ----------------


class _Command:
    opcode: int = -1

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        """Decode the request from `r`, apply it to `table`, return the response payload."""
        raise NotImplementedError


class _Set(_Command):
    opcode = 1

    @staticmethod
    def request(key: str, value: bytes) -> bytes:
        return _U8.pack(_Set.opcode) + _field(key.encode()) + _field(value)

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        key, value = r.key(), r.bytes_()
        r.end()
        with table.changed:
            table.data[key] = value
            table.changed.notify_all()
        return _U8.pack(OK)


class _Get(_Command):
    """Wait up to timeout_ms for the key; TIMEOUT if it never came."""

    opcode = 2

    @staticmethod
    def request(key: str, timeout_ms: int) -> bytes:
        return _U8.pack(_Get.opcode) + _field(key.encode()) + _U32.pack(timeout_ms)

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        key, ms = r.key(), r.u32()
        r.end()
        if not table.wait_for([key], _ms_deadline(ms), alive):
            return _U8.pack(TIMEOUT)
        with table.changed:
            value = table.data.get(key)
        if value is None:  # deleted between the wake-up and now
            return _U8.pack(TIMEOUT)
        return _U8.pack(OK) + _field(value)


class _TryGet(_Command):
    opcode = 3

    @staticmethod
    def request(key: str) -> bytes:
        return _U8.pack(_TryGet.opcode) + _field(key.encode())

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        key = r.key()
        r.end()
        with table.changed:
            value = table.data.get(key)
        return _U8.pack(MISSING) if value is None else _U8.pack(OK) + _field(value)


class _Add(_Command):
    """Atomic counter: the value is stored as ASCII decimal (what torch's store does)."""

    opcode = 4

    @staticmethod
    def request(key: str, amount: int) -> bytes:
        return _U8.pack(_Add.opcode) + _field(key.encode()) + _I64.pack(amount)

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        key, amount = r.key(), r.i64()
        r.end()
        with table.changed:
            old = table.data.get(key, b"0")
            try:
                now = int(old) + amount
            except ValueError:
                return _U8.pack(ERROR) + _field(b"value is not an integer counter")
            if not -(2**63) <= now < 2**63:
                return _U8.pack(ERROR) + _field(b"counter overflow")
            table.data[key] = str(now).encode()
            table.changed.notify_all()
        return _U8.pack(OK) + _I64.pack(now)


class _CompareSet(_Command):
    """Set `desired` iff the current value is `expected` (absent when has_expected is 0)."""

    opcode = 5

    @staticmethod
    def request(key: str, expected: bytes | None, desired: bytes) -> bytes:
        has = 0 if expected is None else 1
        return (
            _U8.pack(_CompareSet.opcode)
            + _field(key.encode())
            + _U8.pack(has)
            + _field(expected or b"")
            + _field(desired)
        )

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        key, has, expected, desired = r.key(), r.u8(), r.bytes_(), r.bytes_()
        r.end()
        with table.changed:
            current = table.data.get(key)
            if (current is None and has == 0) or (has and current == expected):
                table.data[key] = desired
                table.changed.notify_all()
                current = desired
        # An absent key after a failed swap answers MISSING (the caller's expected differed).
        return _U8.pack(MISSING) if current is None else _U8.pack(OK) + _field(current)


class _Delete(_Command):
    opcode = 6

    @staticmethod
    def request(key: str) -> bytes:
        return _U8.pack(_Delete.opcode) + _field(key.encode())

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        key = r.key()
        r.end()
        with table.changed:
            existed = table.data.pop(key, None) is not None
            table.changed.notify_all()
        return _U8.pack(OK) + _U8.pack(int(existed))


class _Wait(_Command):
    """Wait until every key exists; TIMEOUT lists the keys still missing."""

    opcode = 7

    @staticmethod
    def request(keys: Sequence[str], timeout_ms: int) -> bytes:
        body = b"".join(_field(k.encode()) for k in keys)
        return _U8.pack(_Wait.opcode) + _U32.pack(timeout_ms) + _U32.pack(len(keys)) + body

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        ms, count = r.u32(), r.u32()
        if count > MAX_FRAME // 4:
            raise ProtocolError(f"{count} keys cannot fit in one frame")
        keys = [r.key() for _ in range(count)]
        r.end()
        if table.wait_for(keys, _ms_deadline(ms), alive):
            return _U8.pack(OK)
        with table.changed:
            missing = [k for k in keys if k not in table.data]
        return _U8.pack(TIMEOUT) + _field(",".join(missing).encode())


class _Ping(_Command):
    opcode = 8

    @staticmethod
    def request() -> bytes:
        return _U8.pack(_Ping.opcode)

    @staticmethod
    def serve(table: _Table, r: _Reader, alive: Callable[[], bool]) -> bytes:
        r.end()
        return _U8.pack(OK)


_COMMANDS: dict[int, Callable[[_Table, _Reader, Callable[[], bool]], bytes]] = {
    c.opcode: c.serve for c in (_Set, _Get, _TryGet, _Add, _CompareSet, _Delete, _Wait, _Ping)
}


# --- the server ----------------------------------------------------------------------


def _log(message: str) -> None:
    # stderr rather than `logging`: the launcher imports this module and counts the import time.
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"paddlike store: {message}\n")
        sys.stderr.flush()


def _resolve_all(hosts: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for host in hosts:
        host = host.strip()
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


def _bind(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock


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
        self._sock = sock if sock is not None else _bind(host, port)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        name = self._sock.getsockname()
        self.address: tuple[str, int] = (str(name[0]), int(name[1]))
        self._allowed = None if allowed_hosts is None else _resolve_all(allowed_hosts)
        self._token = token or None
        self._table = _Table()
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
        return f"{self.address[0]}:{self.address[1]}"

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
        with self._table.changed:
            self._table.closed = True
            self._table.changed.notify_all()
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
        with self._table.changed:
            current = self._table.data.get(key)
            if current == expected:
                self._table.data[key] = desired
                self._table.changed.notify_all()
                current = desired
            return current

    def peek(self, key: str) -> bytes | None:
        """The value of `key` now, read by the hosting process itself (None: absent)."""
        with self._table.changed:
            return self._table.data.get(key)

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
            hello = MAGIC + _U8.pack(PROTOCOL_VERSION) + _U8.pack(_FLAG_REFUSED)
            conn.sendall(_frame(hello + reason.encode()))
        conn.close()
        self._refused(addr, reason)

    def _handshake(self, conn: socket.socket, addr: str) -> bool:
        if not self._peer_allowed(addr):
            self._refuse(conn, addr, "its address is not one of the job's hosts")
            return False
        nonce = secrets.token_bytes(32)
        flags = _FLAG_TOKEN if self._token else 0
        conn.settimeout(HANDSHAKE_TIMEOUT)
        conn.sendall(_frame(MAGIC + _U8.pack(PROTOCOL_VERSION) + _U8.pack(flags) + nonce))
        mac = _read_frame(conn, HANDSHAKE_TIMEOUT)
        if self._token:
            good = hmac.new(self._token, nonce, hashlib.sha256).digest()
            if not hmac.compare_digest(mac, good):
                # Answer first: reacting to the refusal may end the host's job and close
                # this store, and the client must learn why rather than see a closed socket.
                with contextlib.suppress(OSError):
                    conn.sendall(_frame(_U8.pack(1)))
                self._refused(addr, WRONG_TOKEN)
                return False
        conn.sendall(_frame(_U8.pack(0)))
        return True

    def _serve_connection(self, conn: socket.socket, addr: str) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self._handshake(conn, addr):
                return
            while True:
                payload = _read_frame(conn, None)
                with self._lock:
                    if self._closed:
                        return  # came after close(): no answer
                    self._busy.add(conn)
                try:
                    reply = self._dispatch(payload, lambda: _still_connected(conn))
                except ProtocolError as exc:
                    conn.sendall(_frame(_U8.pack(ERROR) + _field(str(exc).encode())))
                    return
                conn.sendall(_frame(reply))
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

    def _dispatch(self, payload: bytes, alive: Callable[[], bool]) -> bytes:
        r = _Reader(payload)
        opcode = r.u8()
        serve = _COMMANDS.get(opcode)
        if serve is None:
            raise ProtocolError(f"unknown command {opcode}")
        return serve(self._table, r, alive)


# --- the client ----------------------------------------------------------------------


def _to_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _ms(seconds: float) -> int:
    return max(0, min(int(seconds * 1000), 2**32 - 1))


class StoreClient:
    """A connection to a StoreServer. Thread-safe: one request at a time, under a lock.

    The constructor retries connecting until `timeout` (the server may not be up yet);
    `timeout` is also the default deadline of `get`, `wait` and `barrier`. A call after
    the connection broke reconnects for at most `reconnect_timeout` (default `timeout`):
    a server that was up and is gone is a different thing from one not up yet.
    `io_timeout` bounds how long the server may take to answer beyond the wait a call
    asks for (default FRAME_TIMEOUT); a caller that must notice a cut network soon (the
    launchers' heartbeats) sets it low.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = 300.0,
        token: bytes | None = None,
        reconnect_timeout: float | None = None,
        io_timeout: float = FRAME_TIMEOUT,
    ) -> None:
        self.host, self.port = host, int(port)
        self.timeout = float(timeout)
        self.reconnect_timeout = self.timeout if reconnect_timeout is None else reconnect_timeout
        self.io_timeout = float(io_timeout)
        self._token = token or None
        self._lock = threading.Lock()
        self._closed = False
        self._sock: socket.socket | None = None
        self._sock = self._connect(time.monotonic() + self.timeout)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        """False after a call broke the connection (the next call reconnects first)."""
        return self._sock is not None and not self._closed

    def _connect(self, deadline: float) -> socket.socket:
        started = time.monotonic()
        delay = 0.02
        last: BaseException | None = None
        while True:
            left = deadline - time.monotonic()
            try:
                sock = socket.create_connection(
                    (self.host, self.port), timeout=min(max(0.05, left), 5.0)
                )
            except OSError as exc:
                last = exc
            else:
                try:
                    self._authenticate(sock, max(0.05, left))
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    return sock
                except StoreAuthError:
                    sock.close()
                    raise
                except (OSError, EOFError, ProtocolError) as exc:
                    sock.close()
                    last = exc
            if time.monotonic() + delay > deadline:
                waited = time.monotonic() - started
                raise StoreTimeoutError(
                    f"could not connect to the store at {self.address} within {waited:.1f} s "
                    f"(last error: {last}); is the process hosting it running and reachable?"
                )
            time.sleep(delay)  # the server is not up yet: back off and retry until the deadline
            delay = min(delay * 2, 0.1)

    def _authenticate(self, sock: socket.socket, timeout: float) -> None:
        hello = _Reader(_read_frame(sock, min(timeout, HANDSHAKE_TIMEOUT)))
        if hello._take(4) != MAGIC:
            raise ProtocolError("not a paddlike store")
        hello.u8()  # protocol version
        flags = hello.u8()
        if flags & _FLAG_REFUSED:
            reason = hello.data[hello.pos :].decode("utf-8", "replace")
            raise StoreAuthError(f"the store at {self.address} refused this client: {reason}")
        nonce = hello._take(32)
        if flags & _FLAG_TOKEN and self._token is None:
            sock.sendall(_frame(b""))
            raise StoreAuthError(
                f"the store at {self.address} requires a job token; pass the job's "
                "--job_token (or PADDLIKE_JOB_TOKEN)"
            )
        mac = hmac.new(self._token, nonce, hashlib.sha256).digest() if self._token else b""
        sock.sendall(_frame(mac))
        status = _Reader(_read_frame(sock, min(timeout, HANDSHAKE_TIMEOUT))).u8()
        if status != 0:
            raise StoreAuthError(f"the store at {self.address} rejected this client's job token")

    def _call(self, request: bytes, what: str, wait: float = 0.0) -> _Reader:
        """Send one request, return the response; `wait` is how long the server may hold it."""
        with self._lock:
            if self._closed:
                raise StoreError(f"store client for {self.address} is closed ({what})")
            if self._sock is None:  # broken earlier: reconnect (the server may be back)
                self._sock = self._connect(time.monotonic() + self.reconnect_timeout)
            sock = self._sock
            try:
                sock.settimeout(wait + self.io_timeout)
                sock.sendall(_frame(request))
                r = _Reader(_read_frame(sock, wait + self.io_timeout))
            except (OSError, EOFError, ProtocolError) as exc:
                # The stream is out of step after a failure mid-request: never reuse it.
                self._drop()
                if isinstance(exc, TimeoutError):
                    raise StoreTimeoutError(
                        f"store at {self.address} did not answer {what} in time"
                    ) from exc
                raise StoreError(f"store at {self.address} failed during {what}: {exc}") from exc
            except BaseException:
                self._drop()  # interrupted mid-request (a signal): the stream is out of step
                raise
        status = r.u8()
        if status == ERROR:
            message = r.bytes_().decode("utf-8", "replace")
            raise StoreError(f"store at {self.address} rejected {what}: {message}")
        r.status = status  # type: ignore[attr-defined]
        return r

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    # -- operations --

    def set(self, key: str, value: bytes | str) -> None:
        self._call(_Set.request(key, _to_bytes(value)), f"set of key {key!r}")

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of `key`, waiting up to `timeout` (default: the client's) for it to appear."""
        t = self.timeout if timeout is None else timeout
        r = self._call(_Get.request(key, _ms(t)), f"get of key {key!r}", wait=t)
        if r.status == TIMEOUT:  # type: ignore[attr-defined]
            raise StoreTimeoutError(
                f"key {key!r} did not appear in the store at {self.address} within {t:g} s"
            )
        return r.bytes_()

    def try_get(self, key: str) -> bytes | None:
        r = self._call(_TryGet.request(key), f"get of key {key!r}")
        return None if r.status == MISSING else r.bytes_()  # type: ignore[attr-defined]

    def add(self, key: str, amount: int = 1) -> int:
        return self._call(_Add.request(key, amount), f"add to key {key!r}").i64()

    def compare_set(self, key: str, expected: bytes | str | None, desired: bytes | str) -> bytes:
        """Set `desired` iff the value is `expected` (None: absent); return the value now stored.

        When the key is absent and `expected` was not None, nothing is stored and b"" is
        returned (there is no value to return).
        """
        exp = None if expected is None else _to_bytes(expected)
        r = self._call(
            _CompareSet.request(key, exp, _to_bytes(desired)), f"compare_set of key {key!r}"
        )
        return b"" if r.status == MISSING else r.bytes_()  # type: ignore[attr-defined]

    def delete(self, key: str) -> bool:
        return bool(self._call(_Delete.request(key), f"delete of key {key!r}").u8())

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        """Return once every key exists; StoreTimeoutError names the missing ones."""
        t = self.timeout if timeout is None else timeout
        keys = list(keys)
        r = self._call(_Wait.request(keys, _ms(t)), f"wait for keys {keys!r}", wait=t)
        if r.status == TIMEOUT:  # type: ignore[attr-defined]
            missing = r.bytes_().decode()
            raise StoreTimeoutError(
                f"keys {missing} did not appear in the store at {self.address} within {t:g} s"
            )

    def missing(self, keys: Sequence[str]) -> list[str]:
        """Which of `keys` the store lacks right now, in one call instead of one per key:
        a `wait` with no time to wait, whose TIMEOUT reply lists them (so any server of
        this protocol answers it). Keys must not contain ","."""
        keys = list(keys)
        if not keys:
            return []
        r = self._call(_Wait.request(keys, 0), f"look-up of {len(keys)} keys")
        if r.status == OK:  # type: ignore[attr-defined]
            return []
        listed = r.bytes_().decode()
        return listed.split(",") if listed else []

    def barrier(self, name: str, world_size: int, timeout: float | None = None) -> None:
        """Block until `world_size` callers reached barrier `name`. Reusable: the n-th use of a
        name waits for the n-th group of arrivals."""
        t = self.timeout if timeout is None else timeout
        arrived = self.add(f"__barrier/{name}/count", 1)
        generation = (arrived - 1) // world_size
        done = f"__barrier/{name}/done/{generation}"
        if arrived % world_size == 0:
            self.set(done, b"1")
        try:
            self.get(done, timeout=t)
        except StoreTimeoutError as exc:
            now = self.try_get(f"__barrier/{name}/count") or b"0"
            came = int(now) - generation * world_size
            raise StoreTimeoutError(
                f"barrier {name!r} on the store at {self.address}: {min(came, world_size)} of "
                f"{world_size} arrived within {t:g} s"
            ) from exc

    def ping(self) -> None:
        self._call(_Ping.request(), "ping")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
