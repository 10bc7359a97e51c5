"""The key-value store the launchers share, behind one interface (`KV`): node 0's
`StoreServer` through `StoreClient`, or etcd through `peers.etcd.EtcdStore`.

Also the one way to wait for several keys under one deadline (`wait_keys`) and the
one way to connect to node 0's store (`connect_with_progress`); `peers.links` hosts it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from paddlike.distributed.store import StoreClient, StoreTimeoutError

CONNECT_CHUNK = 1.0  # seconds per connection attempt to node 0's store, between progress lines

# progress(what, elapsed, timeout): one status line while waiting (`console.progress`)
Progress = Callable[[str, float, float], None]


class KV(Protocol):
    """The key-value operations the rendezvous and the round's watch need."""

    address: str

    def set(self, key: str, value: bytes | str) -> None: ...
    def get(self, key: str, timeout: float | None = None) -> bytes: ...
    def try_get(self, key: str) -> bytes | None: ...
    def add(self, key: str, amount: int = 1) -> int: ...
    def compare_set(self, key: str, expected: bytes | None, desired: bytes) -> bytes: ...
    def close(self) -> None: ...


def wait_keys(kv: KV, keys: Sequence[str], timeout: float) -> None:
    """Until every key exists; StoreTimeoutError once `timeout` seconds passed, counted
    once for all keys. One `wait` call where the backend has it, else one waiting `get`
    per key under the same deadline."""
    wait = getattr(kv, "wait", None)
    if wait is not None:
        wait(list(keys), timeout=timeout)
        return
    deadline = time.monotonic() + timeout
    for k in keys:
        kv.get(k, timeout=max(0.001, deadline - time.monotonic()))


def get_all(kv: KV, keys: Sequence[str], timeout: float) -> list[bytes]:
    """Every key's value, in order, waiting up to `timeout` (once for all keys) for those
    not there yet: one `get_many` call where the backend has it (node 0's store, etcd: a
    rendezvous's last arrival reads N entries in one call), else one waiting `get` per key."""
    get_many = getattr(kv, "get_many", None)
    if get_many is not None:
        return get_many(list(keys), timeout=timeout)
    deadline = time.monotonic() + timeout
    return [kv.get(k, timeout=max(0.001, deadline - time.monotonic())) for k in keys]


def arrive_and_claim(
    kv: KV, arrived: str, key: str, value: bytes, count: str
) -> tuple[int, bytes, int | None]:
    """A rendezvous arrival: count it (`arrived`), put `value` under `key` create-only and,
    when that succeeded, count it again (`count`). Returns (the arrival's number, the value
    `key` holds now, `count` after this arrival or None when `key` was taken already). One
    request where the backend has it (etcd: one transaction, not three commits)."""
    together = getattr(kv, "arrive_and_claim", None)
    if together is not None:
        return together(arrived, key, value, count)
    ticket = kv.add(arrived, 1)
    stored = kv.compare_set(key, None, value)
    return ticket, stored, kv.add(count, 1) if stored == value else None


def connect_with_progress(
    master: tuple[str, int],
    token: bytes | None,
    timeout: float,
    heartbeat_timeout: float,
    what: str,
    progress: Progress,
    look: Callable[[], None] | None = None,
) -> StoreClient:
    """Connect to node 0's store, retrying until `timeout`; after each second without it,
    a progress line ("waiting for node 0 (...) to host the launchers' store (3 s of 300 s)")
    and `look` (it raises when node 0 said elsewhere why it cannot start)."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            kv = StoreClient(
                *master,
                timeout=max(0.01, min(CONNECT_CHUNK, left)),
                token=token,
                reconnect_timeout=heartbeat_timeout,
                io_timeout=heartbeat_timeout,
            )
        except StoreTimeoutError as exc:
            if time.monotonic() >= deadline:
                raise StoreTimeoutError(
                    f"no answer at {master[0]}:{master[1]} within {timeout:g} s "
                    f"(last attempt: {exc})"
                ) from exc
            if look is not None:
                look()
            progress(what, time.monotonic() - started, timeout)
            continue
        kv.timeout = timeout  # the default deadline of its waiting calls
        return kv
