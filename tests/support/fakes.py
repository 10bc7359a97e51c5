"""In-memory fakes of paddlike's own interfaces, for the pure logic around them.

`MemoryKV` implements `paddlike.launch.peers.kv.KV` (what the rendezvous and the
round's watch need from node 0's store or etcd) in one process: several "launchers"
share one `MemoryKV` the way they share a store. Waiting calls wait on a condition
(with a real, short timeout), never sleep.
"""

from __future__ import annotations

import threading

from paddlike.distributed.store import StoreTimeoutError


class MemoryKV:
    def __init__(self, address: str = "10.0.0.1:6170", *, patience: float = 1.0) -> None:
        """`patience`: the share of a call's timeout really waited; 0 with a fake clock,
        so that a waiting call that would time out returns at once."""
        self.address = address
        self.patience = patience
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()

    def set(self, key: str, value: bytes | str) -> None:
        with self._cond:
            self._data[key] = value.encode() if isinstance(value, str) else value
            self._cond.notify_all()

    def get(self, key: str, timeout: float | None = None) -> bytes:
        with self._cond:
            if not self._cond.wait_for(
                lambda: key in self._data, timeout=(timeout or 0.0) * self.patience
            ):
                raise StoreTimeoutError(f"no key {key!r} within {timeout} s")
            return self._data[key]

    def wait(self, keys: list[str], timeout: float | None = None) -> None:
        with self._cond:
            if not self._cond.wait_for(
                lambda: all(k in self._data for k in keys),
                timeout=(timeout or 0.0) * self.patience,
            ):
                raise StoreTimeoutError(f"keys missing after {timeout} s")

    def try_get(self, key: str) -> bytes | None:
        with self._cond:
            return self._data.get(key)

    def add(self, key: str, amount: int = 1) -> int:
        with self._cond:
            value = int(self._data.get(key, b"0")) + amount
            self._data[key] = str(value).encode()
            self._cond.notify_all()
            return value

    def compare_set(self, key: str, expected: bytes | None, desired: bytes) -> bytes:
        with self._cond:
            if self._data.get(key) == expected:
                self._data[key] = desired
                self._cond.notify_all()
            return self._data.get(key, b"")

    def keys(self) -> list[str]:
        with self._cond:
            return sorted(self._data)

    def close(self) -> None:
        pass


class StepClock:
    """A monotonic clock that moves only when told (or by `step` on every reading)."""

    def __init__(self, start: float = 1000.0, step: float = 0.0) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
