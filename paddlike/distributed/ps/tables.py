"""Table declarations and the shards a server holds.

A `TableSpec` is what every worker declares; the first declaration creates the
shard on each server, later ones must match it field for field. A `DenseShard` is
one server's element range of a dense table, a `SparseShard` the rows of the keys
that hash to that server, created on first use from the table's initializer.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from paddlike.distributed.ps import initializers, optimizers
from paddlike.distributed.ps.keyindex import KeyIndex

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
MODES = ("sync", "async", "geo")


class TableError(ValueError):
    """A request that does not fit the table (wrong shape, unknown table, bad declaration)."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    kind: str  # "dense" | "sparse"
    shape: tuple[int, ...]  # dense: the table's shape; sparse: (dim,)
    optimizer: dict[str, Any]
    initializer: dict[str, Any]
    mode: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise TableError(f"table name {self.name!r}: use 1-64 of A-Z a-z 0-9 _ . -")
        if self.kind not in ("dense", "sparse"):
            raise TableError(f"table {self.name!r}: kind {self.kind!r} is not dense or sparse")
        if not self.shape or any(int(d) < 1 for d in self.shape):
            raise TableError(f"table {self.name!r}: shape {self.shape} needs positive sizes")
        if self.mode not in MODES:
            raise TableError(f"table {self.name!r}: mode {self.mode!r} is not one of {MODES}")

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def dim(self) -> int:
        return int(self.shape[-1])

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TableSpec:
        try:
            d = json.loads(text)
            d["shape"] = tuple(int(x) for x in d["shape"])
            return cls(**d)
        except (ValueError, KeyError, TypeError) as exc:
            raise TableError(f"bad table declaration {text[:200]!r}: {exc}") from None

    def differing_field(self, other: TableSpec) -> str | None:
        """The first field in which `other` differs from this spec, or None."""
        for field in ("kind", "shape", "optimizer", "initializer", "mode"):
            if getattr(self, field) != getattr(other, field):
                return field
        return None

    def mismatch(self, other: TableSpec) -> str | None:
        """None when equal, else a sentence naming the first field that differs."""
        field = self.differing_field(other)
        if field is None:
            return None
        return (
            f"table {self.name!r} is already declared with {field}={getattr(self, field)}, "
            f"this worker declares {field}={getattr(other, field)}; every worker must declare "
            "the same tables"
        )


def merge_rows(keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and the sum of the rows of each (what duplicate keys mean)."""
    if len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1])):
        return keys, rows  # already sorted and unique (what workers send): no sort needed
    order = np.argsort(keys)
    sk = keys[order]
    first = np.empty(len(sk), dtype=bool)
    first[0] = True
    np.not_equal(sk[1:], sk[:-1], out=first[1:])
    sorted_rows = np.take(rows, order, axis=0)  # faster than rows[order] for 2-D rows
    if first.all():
        return sk, sorted_rows
    starts = np.flatnonzero(first)
    return sk[starts], np.add.reduceat(sorted_rows, starts, axis=0)


class DenseShard:
    """Elements [start, stop) of a dense table, with the optimizer's per-element state."""

    def __init__(self, spec: TableSpec, start: int, stop: int) -> None:
        self.spec = spec
        self.start, self.stop = start, stop
        self.optimizer = optimizers.from_config(spec.optimizer)
        init = initializers.from_config(spec.initializer)
        self.values = init.rows(np.arange(start, stop, dtype=np.int64), 1).reshape(-1)
        self.slots = self.optimizer.init_slots((stop - start,))
        self.step = 0
        self._senders: list[Any] = []  # zmq MessageTrackers of replies that view `values`

    @property
    def size(self) -> int:
        return self.stop - self.start

    def lend(self, tracker: Any) -> None:
        """`values` is being sent without a copy; don't write into it while that lasts."""
        self._senders = [t for t in self._senders if not t.done]
        self._senders.append(tracker)

    def _writable(self) -> np.ndarray:
        # Copy-on-write: a pull reply still in ZeroMQ's hands keeps the old buffer.
        if any(not t.done for t in self._senders):
            self.values = self.values.copy()
        self._senders = []
        return self.values

    def check_size(self, n: int, what: str) -> None:
        if n != self.size:
            raise TableError(
                f"table {self.spec.name!r}: {what} has {n} elements, this server's shard "
                f"[{self.start}, {self.stop}) has {self.size}"
            )

    def apply(self, parts: list[tuple[int, np.ndarray]], total: int) -> None:
        """One optimizer step from a gradient given as (offset, flat chunk) pieces."""
        self.check_size(total, "the gradient")
        values = self._writable()
        self.step += 1
        for off, g in parts:
            end = off + g.size
            slots = {k: s[off:end] for k, s in self.slots.items()}
            self.optimizer.apply(values[off:end], g, slots, self.step)

    def add(self, parts: list[tuple[int, np.ndarray]], total: int, scale: float) -> None:
        """values += scale * delta (geo mode merges the workers' changes this way)."""
        self.check_size(total, "the delta")
        values = self._writable()
        for off, d in parts:
            values[off : off + d.size] += np.float32(scale) * d

    def assign(self, parts: list[tuple[int, np.ndarray]], total: int) -> None:
        self.check_size(total, "the assigned value")
        values = self._writable()
        for off, v in parts:
            values[off : off + v.size] = v

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {"start": self.start, "stop": self.stop, "step": self.step}
        return meta, {"values": self.values, **{f"slot_{k}": v for k, v in self.slots.items()}}

    def check_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Raise TableError unless (meta, arrays) from a checkpoint fit this shard."""
        if (meta.get("start"), meta.get("stop")) != (self.start, self.stop):
            raise TableError(
                f"table {self.spec.name!r}: the checkpoint holds elements "
                f"[{meta.get('start')}, {meta.get('stop')}) for this server, the job's shard is "
                f"[{self.start}, {self.stop}) (another shape or server count)"
            )
        want = {"values", *(f"slot_{k}" for k in self.slots)}
        if set(arrays) != want or any(a.shape != (self.size,) for a in arrays.values()):
            raise TableError(f"table {self.spec.name!r}: checkpoint arrays do not fit the shard")

    def load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.check_state(meta, arrays)
        self._writable()
        self.values = arrays["values"].astype(np.float32).copy()
        self.slots = {k: arrays[f"slot_{k}"].astype(np.float32).copy() for k in self.slots}
        self.step = int(meta.get("step", 0))


class SparseShard:
    """The rows of the keys this server owns; a row appears on its first pull or push."""

    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self.dim = spec.dim
        self.optimizer = optimizers.from_config(spec.optimizer)
        self.initializer = initializers.from_config(spec.initializer)
        self.index = KeyIndex()
        self.n = 0
        self._alloc(1024)

    def _alloc(self, cap: int) -> None:
        self.keys = np.empty(cap, dtype=np.int64)
        self.values = np.empty((cap, self.dim), dtype=np.float32)
        self.slots = {k: np.empty((cap, self.dim), np.float32) for k in self.optimizer.slots}
        self.steps = np.zeros(cap, dtype=np.int64)

    def _grow(self, need: int) -> None:
        cap = len(self.keys)
        if need <= cap:
            return
        new = max(need, cap * 2)
        old = (self.keys, self.values, self.slots, self.steps)
        self._alloc(new)
        self.keys[: self.n] = old[0][: self.n]
        self.values[: self.n] = old[1][: self.n]
        for k in self.slots:
            self.slots[k][: self.n] = old[2][k][: self.n]
        self.steps[: self.n] = old[3][: self.n]

    def _check_rows(self, keys: np.ndarray, rows: np.ndarray | None, what: str) -> None:
        if keys.ndim != 1:
            raise TableError(f"table {self.spec.name!r}: keys must be 1-D, got {keys.shape}")
        if rows is not None and rows.shape != (len(keys), self.dim):
            raise TableError(
                f"table {self.spec.name!r}: {what} has shape {rows.shape}, expected "
                f"({len(keys)}, {self.dim}) for {len(keys)} keys of dim {self.dim}"
            )

    def rows_of(self, keys: np.ndarray) -> np.ndarray:
        """Row indices of `keys`, creating the missing rows from the initializer."""
        idx = self.index.lookup(keys)
        missing = idx < 0
        if missing.any():
            new = np.unique(keys[missing])
            m, n0 = len(new), self.n
            self._grow(n0 + m)
            self.keys[n0 : n0 + m] = new
            self.values[n0 : n0 + m] = self.initializer.rows(new, self.dim)
            fresh = self.optimizer.init_slots((m, self.dim))
            for k, s in self.slots.items():
                s[n0 : n0 + m] = fresh[k]
            self.steps[n0 : n0 + m] = 0
            self.index.insert(new, np.arange(n0, n0 + m, dtype=np.int64))
            self.n = n0 + m
            idx[missing] = n0 + np.searchsorted(new, keys[missing])
        return idx

    def pull(self, keys: np.ndarray) -> np.ndarray:
        self._check_rows(keys, None, "")
        idx = self.rows_of(keys)  # may grow (replace) self.values: index after it
        return np.take(self.values, idx, axis=0)

    def apply(self, keys: np.ndarray, grads: np.ndarray) -> None:
        """One optimizer step on the rows of `keys` (unique keys; merge duplicates first)."""
        self._check_rows(keys, grads, "the gradient")
        idx = self.rows_of(keys)
        p = np.take(self.values, idx, axis=0)
        slots = {k: np.take(s, idx, axis=0) for k, s in self.slots.items()}
        step: np.ndarray | int = 1
        if self.optimizer.uses_step:
            self.steps[idx] += 1
            step = self.steps[idx][:, None]
        self.optimizer.apply(p, grads, slots, step)
        self.values[idx] = p
        for k, s in slots.items():
            self.slots[k][idx] = s

    def add(self, keys: np.ndarray, delta: np.ndarray, scale: float) -> None:
        self._check_rows(keys, delta, "the delta")
        idx = self.rows_of(keys)  # unique keys: the server merges duplicates first
        self.values[idx] += np.float32(scale) * delta

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        n = self.n
        arrays = {"keys": self.keys[:n], "values": self.values[:n], "steps": self.steps[:n]}
        arrays.update({f"slot_{k}": s[:n] for k, s in self.slots.items()})
        return {"rows": n, "dim": self.dim}, arrays

    def check_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Raise TableError unless (meta, arrays) from a checkpoint fit this shard."""
        n = int(meta.get("rows", -1))
        if meta.get("dim") != self.dim:
            raise TableError(
                f"table {self.spec.name!r}: the checkpoint has dim {meta.get('dim')}, "
                f"the job declares dim {self.dim}"
            )
        want = {"keys", "values", "steps", *(f"slot_{k}" for k in self.slots)}
        if set(arrays) != want or len(arrays["keys"]) != n:
            raise TableError(f"table {self.spec.name!r}: checkpoint arrays do not fit the shard")
        if any(len(a) != n for a in arrays.values()):
            raise TableError(f"table {self.spec.name!r}: checkpoint arrays differ in length")

    def load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.check_state(meta, arrays)
        n = int(meta["rows"])
        self.n = 0
        self.index = KeyIndex(2 * n)
        self._alloc(max(1024, n))
        self.keys[:n] = arrays["keys"]
        self.values[:n] = arrays["values"]
        self.steps[:n] = arrays["steps"]
        for k in self.slots:
            self.slots[k][:n] = arrays[f"slot_{k}"]
        self.index.insert(self.keys[:n], np.arange(n, dtype=np.int64))
        self.n = n
