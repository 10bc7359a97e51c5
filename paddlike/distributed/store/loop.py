"""The store's connections, served from one thread: a selector over the listening socket
and every connection. A request that waits for keys (get, wait, get_many) is parked on
the table until they are written or its time is over, not on a thread of its own.

Why one thread: with a thread per connection, a few hundred launchers were served well,
but thousands of threads of one interpreter queue for its lock, and answers came after
the callers' I/O timeouts (`bench/rendezvous.py --simulated 4096`). Here each request
costs one pass of the loop, whatever the number of connections.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import heapq
import itertools
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

from . import wire
from .commands import Command, Table, parse_request
from .wire import FRAME_TIMEOUT, HANDSHAKE_TIMEOUT, NONCE_SIZE, U32, ProtocolError

WRONG_TOKEN = "wrong or missing job token"  # the reason given to `Gate.turned_away`
SWEEP = 1.0  # seconds between looks for stalled handshakes and frames
RECV = 1 << 18
# Handshakes in progress at once. Beyond it the oldest is dropped once it is older than
# HANDSHAKE_GRACE: a stranger holding connections open costs a bounded number of
# descriptors, while thousands of launchers connecting at once (each answers the challenge
# within a round trip) are not cut off; one that is retries, as on any lost connection.
MAX_HANDSHAKES = 256
HANDSHAKE_GRACE = 2.0


class Gate(Protocol):
    """What the server decides about a peer (the loop only carries the bytes)."""

    token_required: bool
    max_connections: int

    def refusal(self, addr: str) -> str | None:
        """Why `addr` may not connect; None: it may."""
        ...

    def authentic(self, nonce: bytes, mac: bytes) -> bool: ...

    def turned_away(self, addr: str, reason: str) -> None:
        """Log a refused peer (its connection closes; nobody else is affected)."""
        ...


class _Conn:
    """One connection's state: bytes in and out, and the request parked for it, if any."""

    __slots__ = (
        "addr",
        "authed",
        "closing",
        "inbuf",
        "nonce",
        "out",
        "parked",
        "since",
        "sock",
        "writing",
    )

    def __init__(self, sock: socket.socket, addr: str, nonce: bytes) -> None:
        self.sock, self.addr, self.nonce = sock, addr, nonce
        self.inbuf = bytearray()
        self.out = bytearray()
        self.authed = False
        self.writing = False  # registered for EVENT_WRITE: `out` did not go at once
        self.closing = False  # close once `out` is sent (a refusal, an error)
        self.parked: _Parked | None = None
        self.since = time.monotonic()  # the handshake's start, or the partial frame's


class _Parked:
    """A request waiting for its keys: woken by a write to the first one still missing."""

    __slots__ = ("command", "conn", "deadline", "done", "first", "keys", "wake")

    def __init__(self, conn: _Conn, command: Command, wake: Callable[[], None]) -> None:
        self.conn, self.command = conn, command
        self.keys = list(command.awaited())
        self.first = 0
        self.deadline = time.monotonic() + command.wait
        self.done = False
        self.wake = wake


class ServeLoop:
    """Accept, authenticate and serve every connection of one store from one thread."""

    def __init__(self, listener: socket.socket, table: Table, gate: Gate, name: str) -> None:
        self._listener, self._table, self._gate = listener, table, gate
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._conns: dict[socket.socket, _Conn] = {}
        self._shaking: dict[socket.socket, _Conn] = {}  # not authenticated yet, oldest first
        self._ready: collections.deque[_Parked] = collections.deque()  # woken by writes
        self._timers: list[tuple[float, int, _Parked]] = []
        self._seq = itertools.count()
        self._stop_grace: float | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._listener.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, "accept")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread.start()

    def stop(self, grace: float) -> None:
        """Stop accepting and reading; replies already due go out for up to `grace` s
        (parked requests answer at once, as at their deadline). Returns when done, unless
        called from the loop's own thread: then it ends after this pass."""
        self._stop_grace = grace
        self._kick()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=grace + 5)

    # -- the loop --

    def _run(self) -> None:
        next_sweep = time.monotonic() + SWEEP
        try:
            while self._stop_grace is None:
                timeout = next_sweep - time.monotonic()
                if self._timers:
                    timeout = min(timeout, self._timers[0][0] - time.monotonic())
                for key, mask in self._sel.select(max(0.0, timeout)):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        conn = key.data
                        if mask & selectors.EVENT_WRITE:
                            self._flush(conn)
                        if mask & selectors.EVENT_READ and conn.sock in self._conns:
                            self._read(conn)
                self._answer_ready()
                self._expire()
                if time.monotonic() >= next_sweep:
                    self._sweep()
                    next_sweep = time.monotonic() + SWEEP
        finally:
            self._shut_down()

    def _kick(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
            self._wake_w.send(b"\0")

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._shaking:
                    self._drop(next(iter(self._shaking.values())))  # a descriptor for a launcher
                    continue
                return  # closed, or out of descriptors: the next pass tries again
            addr = str(peer[0])
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._bound_handshakes()
            conn = _Conn(sock, addr, os.urandom(NONCE_SIZE))
            self._conns[sock] = self._shaking[sock] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)
            why = self._gate.refusal(addr)
            if why is None and len(self._conns) > self._gate.max_connections:
                why = f"more than {self._gate.max_connections} connections"
            if why is not None:
                self._send(conn, wire.refusal(why), closing=True)
                self._gate.turned_away(addr, why)
            else:
                self._send(conn, wire.hello(conn.nonce, token_required=self._gate.token_required))

    def _bound_handshakes(self) -> None:
        """Make room for one more handshake: beyond MAX_HANDSHAKES, drop the oldest if it
        had its grace (unauthenticated connections keep their accept time in `since`)."""
        if len(self._shaking) >= MAX_HANDSHAKES:
            oldest = next(iter(self._shaking.values()))
            if time.monotonic() - oldest.since > HANDSHAKE_GRACE:
                self._drop(oldest)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the peer went: its parked request with it
            self._drop(conn)
            return
        if conn.closing:
            return  # refused or failed: what else it sends is never read
        if conn.authed and not conn.inbuf:  # (a handshake's deadline counts from accept)
            conn.since = time.monotonic()
        conn.inbuf += data
        self._frames(conn)

    def _frames(self, conn: _Conn) -> None:
        """Handle the complete frames received, one request at a time (a client waits for
        each answer; a parked request holds the ones after it)."""
        buf = conn.inbuf
        while conn.parked is None and not conn.closing and len(buf) >= 4:
            (length,) = U32.unpack_from(buf, 0)
            if not conn.authed and length > wire.MAX_AUTH:
                # a stranger's bytes, not a launcher's answer: no buffering before auth
                self._refuse(conn, f"{WRONG_TOKEN} (a frame of {length} bytes)")
                return
            if length > wire.MAX_FRAME:
                self._fail(conn, f"frame of {length} bytes is larger than {wire.MAX_FRAME}")
                return
            if len(buf) < 4 + length:
                return
            payload = bytes(buf[4 : 4 + length])
            del buf[: 4 + length]
            if conn.authed:
                conn.since = time.monotonic()
                self._request(conn, payload)
            else:
                self._auth(conn, payload)
            if conn.sock not in self._conns:
                return

    def _auth(self, conn: _Conn, mac: bytes) -> None:
        if self._gate.token_required and not self._gate.authentic(conn.nonce, mac):
            self._refuse(conn, WRONG_TOKEN)
            return
        conn.authed = True
        conn.since = time.monotonic()
        del self._shaking[conn.sock]
        self._send(conn, wire.verdict(accepted=True))

    def _refuse(self, conn: _Conn, reason: str) -> None:
        """A failed handshake: logged, answered (a launcher with the wrong token must learn
        why rather than see a closed socket), closed; nobody else is affected."""
        self._gate.turned_away(conn.addr, reason)
        self._send(conn, wire.verdict(accepted=False), closing=True)

    def _request(self, conn: _Conn, payload: bytes) -> None:
        try:
            command = parse_request(payload)
        except ProtocolError as exc:
            self._fail(conn, str(exc))
            return
        if command.wait > 0 and command.awaited():
            parked = _Parked(conn, command, lambda: None)
            parked.wake = lambda: self._woken(parked)
            if not self._settle(parked):
                conn.parked = parked
                heapq.heappush(self._timers, (parked.deadline, next(self._seq), parked))
            return
        self._reply(conn, command)

    def _reply(self, conn: _Conn, command: Command) -> None:
        try:
            reply = command.apply(self._table)
        except Exception as exc:  # a command's bug must not take the store down
            self._fail(conn, f"internal error: {exc}")
            return
        self._send(conn, wire.frame(reply))

    def _settle(self, parked: _Parked) -> bool:
        """Answer `parked` if its keys are all there now (True), else wait on the first
        missing one (False)."""
        table = self._table
        with table.lock:
            parked.first = table.first_missing(parked.keys, parked.first)
            if parked.first == len(parked.keys):
                parked.first = table.first_missing(parked.keys)  # one deleted since?
            if parked.first < len(parked.keys):
                table.notify(parked.keys[parked.first], parked.wake)
                return False
        self._finish(parked)
        return True

    def _finish(self, parked: _Parked) -> None:
        """Answer a request whose keys came or whose time is over; a connection it held
        goes on with the requests after it."""
        parked.done = True
        conn = parked.conn
        held = conn.parked is parked
        if held:
            conn.parked = None
        if conn.sock in self._conns:
            self._reply(conn, parked.command)
            if held:
                self._frames(conn)

    def _woken(self, parked: _Parked) -> None:
        """From whichever thread wrote the key (under the table's lock): hand it over."""
        self._ready.append(parked)
        if threading.current_thread() is not self._thread:
            self._kick()

    def _answer_ready(self) -> None:
        while self._ready:
            parked = self._ready.popleft()
            if not parked.done:
                self._settle(parked)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            parked = heapq.heappop(self._timers)[2]
            if not parked.done:
                self._table.forget(parked.keys[parked.first], parked.wake)
                self._finish(parked)  # TIMEOUT, naming what is still missing

    def _sweep(self) -> None:
        """Drop connections stalled in the handshake or in the middle of a frame."""
        now = time.monotonic()
        for conn in list(self._conns.values()):
            shaking = not conn.authed and now - conn.since > HANDSHAKE_TIMEOUT
            if shaking or (conn.inbuf and conn.parked is None and now - conn.since > FRAME_TIMEOUT):
                self._drop(conn)

    # -- bytes out --

    def _send(self, conn: _Conn, data: bytes, closing: bool = False) -> None:
        conn.out += data
        conn.closing = conn.closing or closing
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            while conn.out:
                sent = conn.sock.send(conn.out)
                del conn.out[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(conn)
            return
        if not conn.out and conn.closing:
            self._drop(conn)
        elif bool(conn.out) != conn.writing:
            conn.writing = bool(conn.out)
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.writing else 0)
            self._sel.modify(conn.sock, events, conn)

    def _fail(self, conn: _Conn, message: str) -> None:
        """A malformed request: ERROR with the reason, then close."""
        self._send(conn, wire.frame(wire.error_reply(message)), closing=True)

    def _drop(self, conn: _Conn) -> None:
        self._shaking.pop(conn.sock, None)
        if self._conns.pop(conn.sock, None) is None:
            return
        parked, conn.parked = conn.parked, None
        if parked is not None and not parked.done:
            parked.done = True
            self._table.forget(parked.keys[parked.first], parked.wake)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _shut_down(self) -> None:
        """Close: parked requests answer now (TIMEOUT where their keys are missing), what
        is due goes out for up to the grace, then every connection closes."""
        grace = self._stop_grace or 0.0
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(self._listener)
        with contextlib.suppress(OSError):
            self._listener.close()
        for parked in [c.parked for c in self._conns.values() if c.parked is not None]:
            parked.done = True
            self._table.forget(parked.keys[parked.first], parked.wake)
            parked.conn.parked = None
            parked.conn.closing = True
            self._reply(parked.conn, parked.command)
        deadline = time.monotonic() + grace
        while any(c.out for c in self._conns.values()) and time.monotonic() < deadline:
            for key, mask in self._sel.select(max(0.0, deadline - time.monotonic())):
                if isinstance(key.data, _Conn) and mask & selectors.EVENT_WRITE:
                    self._flush(key.data)
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()
