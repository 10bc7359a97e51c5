"""The store's commands: one class per opcode, holding its request encoder, its effect on
the server's table and its reply decoder side by side.

A client builds a command from its arguments, sends `request()` and reads the answer
with `result(reply)`; the server rebuilds the command from the request with `parse_request`
and answers with `apply(table)`, which never blocks: a command that may wait for keys
names them (`awaited`), and the server parks it until they are there or its `wait` is
over, then applies it. Each class's docstring gives its fields.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from .wire import (
    I64,
    MAX_FRAME,
    MISSING,
    OK,
    TIMEOUT,
    U8,
    U32,
    ProtocolError,
    Reader,
    StoreTimeoutError,
    error_reply,
    field,
    status,
)

Wake = Callable[[], None]  # told that a key a parked request waits for was written


class Table:
    """Keys to values. A request that waits for keys is parked on the first one missing and
    woken by a write to that key only, not by every write: with thousands of launchers
    waiting on one store, waking each waiter on each write cost O(N²) wake-ups a round."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self._waiters: dict[str, set[Wake]] = {}

    def put(self, key: str, value: bytes) -> None:
        """Store `value` and wake the key's waiters (the caller holds `lock`; a `wake`
        must not take it)."""
        self.data[key] = value
        for wake in self._waiters.pop(key, ()):
            wake()

    def first_missing(self, keys: Sequence[str], start: int = 0) -> int:
        """The index of the first of `keys[start:]` not stored; len(keys) if none is
        (the caller holds `lock`)."""
        data = self.data
        while start < len(keys) and keys[start] in data:
            start += 1
        return start

    def notify(self, key: str, wake: Wake) -> None:
        """Call `wake` once `key` is written (the caller holds `lock`)."""
        self._waiters.setdefault(key, set()).add(wake)

    def forget(self, key: str, wake: Wake) -> None:
        """A waiter that gives up (deadline, client gone) leaves its key's set."""
        with self.lock:
            wakes = self._waiters.get(key)
            if wakes is not None:
                wakes.discard(wake)
                if not wakes:
                    del self._waiters[key]


class Reply:
    """A response as the client reads it: its status, then its fields (ERROR never gets here)."""

    __slots__ = ("address", "fields", "status")

    def __init__(self, status: int, fields: Reader, address: str) -> None:
        self.status, self.fields, self.address = status, fields, address


def _ms(seconds: float) -> int:
    return max(0, min(int(seconds * 1000), 2**32 - 1))


def _key(key: str) -> bytes:
    return field(key.encode())


class Command:
    """One request of the wire; `wait` is how long the server may hold it before answering,
    parked until the keys it `awaited` are all stored."""

    opcode: int = -1
    wait: float = 0.0

    def awaited(self) -> Sequence[str]:
        """The keys whose arrival the reply waits for (up to `wait` s)."""
        return ()

    @property
    def what(self) -> str:
        """The call, as error messages name it ("get of key 'x'")."""
        raise NotImplementedError

    def request(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def parse(cls, r: Reader) -> Command:
        raise NotImplementedError

    def apply(self, table: Table) -> bytes:
        """Act on `table` now; the response payload."""
        raise NotImplementedError


class Set(Command):
    """request: key, value. reply: OK."""

    opcode = 1

    def __init__(self, key: str, value: bytes) -> None:
        self.key, self.value = key, value

    @property
    def what(self) -> str:
        return f"set of key {self.key!r}"

    def request(self) -> bytes:
        return U8.pack(self.opcode) + _key(self.key) + field(self.value)

    @classmethod
    def parse(cls, r: Reader) -> Set:
        return cls(r.key(), r.bytes_())

    def apply(self, table: Table) -> bytes:
        with table.lock:
            table.put(self.key, self.value)
        return status(OK)

    def result(self, reply: Reply) -> None:
        return None


class Get(Command):
    """Wait up to `timeout` s for the key. request: key, u32 timeout_ms.
    reply: OK, value | TIMEOUT (it never came)."""

    opcode = 2

    def __init__(self, key: str, timeout: float) -> None:
        self.key, self.timeout = key, timeout
        self.wait = timeout

    @property
    def what(self) -> str:
        return f"get of key {self.key!r}"

    def request(self) -> bytes:
        return U8.pack(self.opcode) + _key(self.key) + U32.pack(_ms(self.timeout))

    @classmethod
    def parse(cls, r: Reader) -> Get:
        return cls(r.key(), r.u32() / 1000.0)

    def awaited(self) -> Sequence[str]:
        return (self.key,)

    def apply(self, table: Table) -> bytes:
        with table.lock:
            value = table.data.get(self.key)
        return status(TIMEOUT) if value is None else status(OK) + field(value)

    def result(self, reply: Reply) -> bytes:
        if reply.status == TIMEOUT:
            raise StoreTimeoutError(
                f"key {self.key!r} did not appear in the store at {reply.address} "
                f"within {self.timeout:g} s"
            )
        return reply.fields.bytes_()


class _OneKey(Command):
    """A command whose request is its opcode and one key."""

    verb = ""

    def __init__(self, key: str) -> None:
        self.key = key

    @property
    def what(self) -> str:
        return f"{self.verb} of key {self.key!r}"

    def request(self) -> bytes:
        return U8.pack(self.opcode) + _key(self.key)

    @classmethod
    def parse(cls, r: Reader) -> _OneKey:
        return cls(r.key())


class TryGet(_OneKey):
    """The value now, without waiting. request: key. reply: OK, value | MISSING."""

    opcode = 3
    verb = "get"

    def look_up(self, table: Table) -> bytes | None:
        with table.lock:
            return table.data.get(self.key)

    def apply(self, table: Table) -> bytes:
        value = self.look_up(table)
        return status(MISSING) if value is None else status(OK) + field(value)

    def result(self, reply: Reply) -> bytes | None:
        return None if reply.status == MISSING else reply.fields.bytes_()


class Add(Command):
    """Atomic counter, stored as ASCII decimal (what torch's store does).
    request: key, i64 amount. reply: OK, i64 the new value | ERROR (not a counter, overflow)."""

    opcode = 4

    def __init__(self, key: str, amount: int) -> None:
        self.key, self.amount = key, amount

    @property
    def what(self) -> str:
        return f"add to key {self.key!r}"

    def request(self) -> bytes:
        return U8.pack(self.opcode) + _key(self.key) + I64.pack(self.amount)

    @classmethod
    def parse(cls, r: Reader) -> Add:
        return cls(r.key(), r.i64())

    def apply(self, table: Table) -> bytes:
        with table.lock:
            old = table.data.get(self.key, b"0")
            try:
                now = int(old) + self.amount
            except ValueError:
                return error_reply("value is not an integer counter")
            if not -(2**63) <= now < 2**63:
                return error_reply("counter overflow")
            table.put(self.key, str(now).encode())
        return status(OK) + I64.pack(now)

    def result(self, reply: Reply) -> int:
        return reply.fields.i64()


class CompareSet(Command):
    """Set `desired` iff the value is `expected` (None: the key is absent).
    request: key, u8 has_expected, expected (empty when absent), desired.
    reply: OK, the value now stored | MISSING (absent, and `expected` was not None)."""

    opcode = 5

    def __init__(self, key: str, expected: bytes | None, desired: bytes) -> None:
        self.key, self.expected, self.desired = key, expected, desired

    @property
    def what(self) -> str:
        return f"compare_set of key {self.key!r}"

    def request(self) -> bytes:
        has = U8.pack(0 if self.expected is None else 1)
        return (
            U8.pack(self.opcode)
            + _key(self.key)
            + has
            + field(self.expected or b"")
            + field(self.desired)
        )

    @classmethod
    def parse(cls, r: Reader) -> CompareSet:
        key, has, expected, desired = r.key(), r.u8(), r.bytes_(), r.bytes_()
        return cls(key, expected if has else None, desired)

    def swap(self, table: Table) -> bytes | None:
        """The effect, also run by the hosting process itself: the value now stored."""
        with table.lock:
            current = table.data.get(self.key)
            if current == self.expected:
                table.put(self.key, self.desired)
                current = self.desired
            return current

    def apply(self, table: Table) -> bytes:
        current = self.swap(table)
        return status(MISSING) if current is None else status(OK) + field(current)

    def result(self, reply: Reply) -> bytes:
        return b"" if reply.status == MISSING else reply.fields.bytes_()


class Delete(_OneKey):
    """request: key. reply: OK, u8 whether it existed."""

    opcode = 6
    verb = "delete"

    def apply(self, table: Table) -> bytes:
        with table.lock:  # no waiter to wake: waits are for keys to appear
            existed = table.data.pop(self.key, None) is not None
        return status(OK) + U8.pack(int(existed))

    def result(self, reply: Reply) -> bool:
        return bool(reply.fields.u8())


class Wait(Command):
    """Wait up to `timeout` s until every key exists.
    request: u32 timeout_ms, u32 count, `count` keys.
    reply: OK | TIMEOUT, the keys still missing joined by ","."""

    opcode = 7

    def __init__(self, keys: Sequence[str], timeout: float) -> None:
        self.keys, self.timeout = list(keys), timeout
        self.wait = timeout

    @property
    def what(self) -> str:
        return f"wait for keys {self.keys!r}"

    def request(self) -> bytes:
        return _keys_request(self.opcode, self.keys, self.timeout)

    @classmethod
    def parse(cls, r: Reader) -> Wait:
        return cls(*_parse_keys(r))

    def awaited(self) -> Sequence[str]:
        return self.keys

    def apply(self, table: Table) -> bytes:
        with table.lock:
            missing = [k for k in self.keys if k not in table.data]
        if not missing:
            return status(OK)
        return status(TIMEOUT) + field(",".join(missing).encode())

    def result(self, reply: Reply) -> None:
        _raise_missing(reply, self.timeout)


def _keys_request(opcode: int, keys: Sequence[str], timeout: float) -> bytes:
    """`Wait`'s and `GetMany`'s request: u32 timeout_ms, u32 count, `count` keys."""
    head = U8.pack(opcode) + U32.pack(_ms(timeout)) + U32.pack(len(keys))
    return head + b"".join(_key(k) for k in keys)


def _parse_keys(r: Reader) -> tuple[list[str], float]:
    """`_keys_request`'s keys and timeout (seconds), read back by the server."""
    ms, count = r.u32(), r.u32()
    if count > MAX_FRAME // 4:
        raise ProtocolError(f"{count} keys cannot fit in one frame")
    return [r.key() for _ in range(count)], ms / 1000.0


def _raise_missing(reply: Reply, timeout: float) -> None:
    """A TIMEOUT reply (the keys still missing, joined by ","): StoreTimeoutError."""
    if reply.status == TIMEOUT:
        missing = reply.fields.bytes_().decode()
        raise StoreTimeoutError(
            f"keys {missing} did not appear in the store at {reply.address} within {timeout:g} s"
        )


class Lookup(Command):
    """Which keys are missing now: a `Wait` with no time to wait, whose TIMEOUT reply lists
    them, so any server of this protocol answers it (as a `Wait`). Keys must not contain ","."""

    opcode = Wait.opcode

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = list(keys)

    @property
    def what(self) -> str:
        return f"look-up of {len(self.keys)} keys"

    def request(self) -> bytes:
        return Wait(self.keys, 0.0).request()

    def result(self, reply: Reply) -> list[str]:
        if reply.status == OK:
            return []
        listed = reply.fields.bytes_().decode()
        return listed.split(",") if listed else []


class GetMany(Command):
    """Wait up to `timeout` s until every key exists, then answer every value at once: a
    rendezvous's last arrival reads N nodes' entries in one call rather than N.
    request: u32 timeout_ms, u32 count, `count` keys.
    reply: OK, u32 count, `count` values in the keys' order | TIMEOUT, the keys still
    missing joined by "," (as `Wait`)."""

    opcode = 9

    def __init__(self, keys: Sequence[str], timeout: float) -> None:
        self.keys, self.timeout = list(keys), timeout
        self.wait = timeout

    @property
    def what(self) -> str:
        return f"get of {len(self.keys)} keys"

    def request(self) -> bytes:
        return _keys_request(self.opcode, self.keys, self.timeout)

    @classmethod
    def parse(cls, r: Reader) -> GetMany:
        return cls(*_parse_keys(r))

    def awaited(self) -> Sequence[str]:
        return self.keys

    def apply(self, table: Table) -> bytes:
        with table.lock:
            values = [table.data.get(k) for k in self.keys]
        found = [v for v in values if v is not None]
        if len(found) == len(values):
            return status(OK) + U32.pack(len(found)) + b"".join(field(v) for v in found)
        missing = [k for k, v in zip(self.keys, values, strict=True) if v is None]
        return status(TIMEOUT) + field(",".join(missing).encode())

    def result(self, reply: Reply) -> list[bytes]:
        _raise_missing(reply, self.timeout)
        return [reply.fields.bytes_() for _ in range(reply.fields.u32())]


class Ping(Command):
    """request: nothing. reply: OK."""

    opcode = 8

    @property
    def what(self) -> str:
        return "ping"

    def request(self) -> bytes:
        return U8.pack(self.opcode)

    @classmethod
    def parse(cls, r: Reader) -> Ping:
        return cls()

    def apply(self, table: Table) -> bytes:
        return status(OK)

    def result(self, reply: Reply) -> None:
        return None


_BY_OPCODE: dict[int, type[Command]] = {
    c.opcode: c for c in (Set, Get, TryGet, Add, CompareSet, Delete, Wait, Ping, GetMany)
}


def parse_request(payload: bytes) -> Command:
    """The server's side of one request: the command it asks for (ProtocolError if none)."""
    r = Reader(payload)
    opcode = r.u8()
    command = _BY_OPCODE.get(opcode)
    if command is None:
        raise ProtocolError(f"unknown command {opcode}")
    parsed = command.parse(r)
    r.end()
    return parsed
