"""The store's client: one connection to a StoreServer, the commands as methods."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import socket
import threading
import time
from collections.abc import Sequence
from types import TracebackType

from paddlike import netaddr

from . import wire
from .commands import (
    Add,
    Command,
    CompareSet,
    Delete,
    Get,
    GetMany,
    Lookup,
    Ping,
    Reply,
    Set,
    TryGet,
    Wait,
)
from .wire import (
    ERROR,
    FRAME_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    ProtocolError,
    Reader,
    StoreAuthError,
    StoreError,
    StoreTimeoutError,
    read_frame,
)


def _to_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


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
        self.host, self.port = netaddr.bare(host), int(port)  # "[fd00::1]" works too
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
        return netaddr.join(self.host, self.port)

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
        hello = wire.Hello(read_frame(sock, min(timeout, HANDSHAKE_TIMEOUT)))
        if hello.refused:
            raise StoreAuthError(f"the store at {self.address} refused this client: {hello.reason}")
        if hello.token_required and self._token is None:
            sock.sendall(wire.frame(b""))
            raise StoreAuthError(
                f"the store at {self.address} requires a job token; pass the job's "
                "--job_token (or PADDLIKE_JOB_TOKEN)"
            )
        mac = hmac.new(self._token, hello.nonce, hashlib.sha256).digest() if self._token else b""
        sock.sendall(wire.frame(mac))
        if not wire.accepted(read_frame(sock, min(timeout, HANDSHAKE_TIMEOUT))):
            raise StoreAuthError(f"the store at {self.address} rejected this client's job token")

    def _call(self, command: Command) -> Reply:
        """Send one command, return its response (the server may hold it `command.wait` s)."""
        what, wait = command.what, command.wait
        with self._lock:
            if self._closed:
                raise StoreError(f"store client for {self.address} is closed ({what})")
            if self._sock is None:  # broken earlier: reconnect (the server may be back)
                self._sock = self._connect(time.monotonic() + self.reconnect_timeout)
            sock = self._sock
            try:
                sock.settimeout(wait + self.io_timeout)
                sock.sendall(wire.frame(command.request()))
                r = Reader(read_frame(sock, wait + self.io_timeout))
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
        return Reply(status, r, self.address)

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    # -- operations --

    def set(self, key: str, value: bytes | str) -> None:
        command = Set(key, _to_bytes(value))
        command.result(self._call(command))

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of `key`, waiting up to `timeout` (default: the client's) for it to appear."""
        command = Get(key, self.timeout if timeout is None else timeout)
        return command.result(self._call(command))

    def try_get(self, key: str) -> bytes | None:
        command = TryGet(key)
        return command.result(self._call(command))

    def add(self, key: str, amount: int = 1) -> int:
        command = Add(key, amount)
        return command.result(self._call(command))

    def compare_set(self, key: str, expected: bytes | str | None, desired: bytes | str) -> bytes:
        """Set `desired` iff the value is `expected` (None: absent); return the value now stored.

        When the key is absent and `expected` was not None, nothing is stored and b"" is
        returned (there is no value to return).
        """
        exp = None if expected is None else _to_bytes(expected)
        command = CompareSet(key, exp, _to_bytes(desired))
        return command.result(self._call(command))

    def delete(self, key: str) -> bool:
        command = Delete(key)
        return command.result(self._call(command))

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        """Return once every key exists; StoreTimeoutError names the missing ones."""
        command = Wait(keys, self.timeout if timeout is None else timeout)
        command.result(self._call(command))

    def get_many(self, keys: Sequence[str], timeout: float | None = None) -> list[bytes]:
        """Every key's value in one call, waiting up to `timeout` (default: the client's)
        until all exist; StoreTimeoutError names the missing ones."""
        command = GetMany(keys, self.timeout if timeout is None else timeout)
        return command.result(self._call(command))

    def missing(self, keys: Sequence[str]) -> list[str]:
        """Which of `keys` the store lacks right now, in one call instead of one per key.
        Keys must not contain ","."""
        keys = list(keys)
        if not keys:
            return []
        command = Lookup(keys)
        return command.result(self._call(command))

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
        command = Ping()
        command.result(self._call(command))

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
