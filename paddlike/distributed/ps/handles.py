"""What a worker holds for each table: pull / push / assign through the servers.

`DenseTable` and `SparseTable` talk to the servers on every call (sync and async
modes). In geo mode `GeoDenseTable` and `GeoSparseTable` keep a local copy, run the
table's optimizer on it, and every k pushes send the change since their last sync
(the servers add the mean of the workers' changes) and take the merged values back.
"""

from __future__ import annotations

import numpy as np

from paddlike.distributed.ps import optimizers
from paddlike.distributed.ps.client import Client
from paddlike.distributed.ps.sharding import dense_ranges, sparse_servers
from paddlike.distributed.ps.tables import SparseShard, TableSpec, merge_rows
from paddlike.distributed.ps.wire import ArrayParts, Message, Op


def _as_keys(keys: object, name: str) -> np.ndarray:
    k = np.asarray(keys)
    if k.ndim != 1 or not np.issubdtype(k.dtype, np.integer):
        raise ValueError(
            f"table {name!r}: keys must be a 1-D integer array, got {k.dtype} {k.shape}"
        )
    return np.ascontiguousarray(k, dtype=np.int64)


class DenseTable:
    """A dense table split by element ranges across the servers."""

    def __init__(self, client: Client, spec: TableSpec) -> None:
        self.client, self.spec = client, spec
        self.name, self.shape = spec.name, spec.shape
        self.ranges = dense_ranges(spec.size, len(client.endpoints))
        self.pushes = 0  # sync mode: the step of this worker's next push

    def _flat(self, values: object, what: str) -> np.ndarray:
        a = np.asarray(values, dtype=np.float32)
        if a.shape != self.shape:
            raise ValueError(
                f"table {self.name!r}: {what} has shape {a.shape}, expected {self.shape}"
            )
        return np.ascontiguousarray(a).reshape(-1)

    def _out(self, out: np.ndarray | None) -> np.ndarray:
        if out is None:
            return np.empty(self.shape, dtype=np.float32)
        if out.shape != self.shape or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(
                f"table {self.name!r}: out= must be a C-contiguous float32 array of shape "
                f"{self.shape}, got {out.dtype} {out.shape}"
            )
        return out

    def _fetch(self, out: np.ndarray | None = None) -> np.ndarray:
        dest = self._out(out)
        flat = dest.reshape(-1)
        reqs = [
            (i, Message(Op.PULL_DENSE, step=self.pushes, text=self.name))
            for i, (a, b) in enumerate(self.ranges)
            if b > a
        ]
        for (i, _), rep in zip(reqs, self.client.call(reqs), strict=True):
            start = self.ranges[i][0]
            parts = rep.arrays[0]
            assert isinstance(parts, ArrayParts)
            for off, part in parts.flat_parts():
                flat[start + off : start + off + part.size] = part
        return dest

    def _send(self, op: Op, flat: np.ndarray, step: int = 0) -> None:
        reqs = [
            (i, Message(op, step=step, text=self.name, arrays=[flat[a:b]]))
            for i, (a, b) in enumerate(self.ranges)
            if b > a
        ]
        self.client.call(reqs)

    def pull(self, out: np.ndarray | None = None) -> np.ndarray:
        """The current values (sync mode: after every trainer's pushes so far are applied).

        With `out` (float32, the table's shape) the values are written there: for large
        tables that saves allocating (and page-faulting) a fresh array on every pull.
        """
        return self._fetch(out)

    def push(self, grad: object) -> None:
        """Send a gradient; the servers' optimizer applies it (sync: the mean of all workers')."""
        self._send(Op.PUSH_DENSE, self._flat(grad, "the gradient"), self.pushes)
        self.pushes += 1

    def assign(self, values: object) -> None:
        """Overwrite the table (worker 0 sets initial values; then call barrier_worker())."""
        self._send(Op.ASSIGN_DENSE, self._flat(values, "the value"))

    def flush(self) -> None:
        """Nothing is held back outside geo mode."""


class SparseTable:
    """Rows of dimension `dim` keyed by int64 ids, hashed across the servers."""

    def __init__(self, client: Client, spec: TableSpec) -> None:
        self.client, self.spec = client, spec
        self.name, self.dim = spec.name, spec.dim
        self.n = len(client.endpoints)
        self.pushes = 0

    def _split(self, keys: np.ndarray) -> list[tuple[int, np.ndarray | None]]:
        """(server, positions of its keys in increasing order) for every server with keys.

        None stands for "all positions" (one server). Increasing positions keep sorted
        keys sorted, which lets the server skip merging duplicates.
        """
        if self.n == 1:
            return [(0, None)]
        owner = sparse_servers(keys, self.n)
        if self.n <= 16:  # a comparison per server beats sorting 64 K owners
            groups = [(s, np.flatnonzero(owner == s)) for s in range(self.n)]
        else:
            order = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[order], np.arange(self.n + 1))
            groups = [(s, order[bounds[s] : bounds[s + 1]]) for s in range(self.n)]
        return [(s, pos) for s, pos in groups if len(pos)]

    def _fetch(self, keys: np.ndarray, step: int) -> np.ndarray:
        if len(keys) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        groups = self._split(keys)
        reqs = [
            (
                s,
                Message(
                    Op.PULL_SPARSE,
                    step=step,
                    text=self.name,
                    arrays=[keys if pos is None else keys[pos]],
                ),
            )
            for s, pos in groups
        ]
        replies = self.client.call(reqs)
        if self.n == 1:
            return np.array(replies[0].array(0))  # a writable copy the caller owns
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        for (_, pos), rep in zip(groups, replies, strict=True):
            out[pos] = rep.array(0)
        return out

    def _send(self, op: Op, keys: np.ndarray, rows: np.ndarray, step: int) -> None:
        groups = self._split(keys)
        reqs = [
            (
                s,
                Message(
                    op,
                    step=step,
                    text=self.name,
                    arrays=[keys, rows] if pos is None else [keys[pos], np.take(rows, pos, axis=0)],
                ),
            )
            for s, pos in groups
        ]
        if op is Op.PUSH_SPARSE and self.spec.mode == "sync":
            # every server takes part in every step, even with no keys for it this time
            present = {s for s, _ in groups}
            empty = [np.empty(0, np.int64), np.empty((0, self.dim), np.float32)]
            reqs += [
                (s, Message(op, step=step, text=self.name, arrays=empty))
                for s in range(self.n)
                if s not in present
            ]
        self.client.call(reqs)

    def _rows(self, keys: np.ndarray, grads: object, what: str) -> np.ndarray:
        g = np.asarray(grads, dtype=np.float32)
        if g.shape != (len(keys), self.dim):
            raise ValueError(
                f"table {self.name!r}: {what} has shape {g.shape}, "
                f"expected ({len(keys)}, {self.dim})"
            )
        return g

    def pull(self, keys: object) -> np.ndarray:
        """Rows of `keys` as a (len(keys), dim) float32 array; new keys get initial rows."""
        return self._fetch(_as_keys(keys, self.name), self.pushes)

    def push(self, keys: object, grads: object) -> None:
        """Gradients of the rows of `keys` (duplicate keys add up, as in an embedding)."""
        k = _as_keys(keys, self.name)
        mk, mg = merge_rows(k, self._rows(k, grads, "the gradient"))
        self._send(Op.PUSH_SPARSE, mk, mg, self.pushes)
        self.pushes += 1

    def flush(self) -> None:
        """Nothing is held back outside geo mode."""


class GeoDenseTable(DenseTable):
    """Geo mode: train a local copy, merge with the servers every `k_steps` pushes."""

    def __init__(self, client: Client, spec: TableSpec, k_steps: int) -> None:
        super().__init__(client, spec)
        self.k_steps = k_steps
        self.optimizer = optimizers.from_config(spec.optimizer)
        self.local: np.ndarray | None = None
        self.base: np.ndarray | None = None
        self.slots = self.optimizer.init_slots((spec.size,))
        self.local_steps = 0

    def _sync_in(self) -> None:
        merged = self._fetch().reshape(-1)
        self.local, self.base = merged.copy(), merged

    def pull(self, out: np.ndarray | None = None) -> np.ndarray:
        if self.local is None:
            self._sync_in()
        assert self.local is not None
        dest = self._out(out)
        np.copyto(dest, self.local.reshape(self.shape))
        return dest

    def push(self, grad: object) -> None:
        g = self._flat(grad, "the gradient")
        if self.local is None:
            self._sync_in()
        assert self.local is not None
        self.local_steps += 1
        self.optimizer.apply(self.local, g, self.slots, self.local_steps)
        self.pushes += 1
        if self.pushes % self.k_steps == 0:
            self.flush()

    def assign(self, values: object) -> None:
        super().assign(values)
        self.local = None

    def flush(self) -> None:
        """Send the change since the last sync and take the merged values."""
        if self.local is None or self.base is None:
            return
        self._send(Op.DELTA_DENSE, self.local - self.base)
        self._sync_in()


class GeoSparseTable(SparseTable):
    """Geo mode for sparse rows: local rows, merged with the servers every `k_steps` pushes."""

    def __init__(self, client: Client, spec: TableSpec, k_steps: int) -> None:
        super().__init__(client, spec)
        self.k_steps = k_steps
        self.local = SparseShard(spec)  # the worker's copy, with its own optimizer state
        self.base = SparseShard(spec)  # the values at the last sync
        self.touched: list[np.ndarray] = []

    def _ensure(self, keys: np.ndarray) -> None:
        missing = keys[self.local.index.lookup(keys) < 0]
        if len(missing):
            self._sync_keys(np.unique(missing))

    def _sync_keys(self, keys: np.ndarray) -> None:
        rows = self._fetch(keys, 0)
        for shard in (self.local, self.base):
            idx = shard.rows_of(keys)  # may replace shard.values: index after it
            shard.values[idx] = rows

    def pull(self, keys: object) -> np.ndarray:
        k = _as_keys(keys, self.name)
        self._ensure(k)
        return self.local.pull(k)

    def push(self, keys: object, grads: object) -> None:
        k = _as_keys(keys, self.name)
        mk, mg = merge_rows(k, self._rows(k, grads, "the gradient"))
        self._ensure(mk)
        self.local.apply(mk, mg)
        self.touched.append(mk)
        self.pushes += 1
        if self.pushes % self.k_steps == 0:
            self.flush()

    def flush(self) -> None:
        if not self.touched:
            return
        keys = np.unique(np.concatenate(self.touched))
        self.touched = []
        delta = self.local.pull(keys) - self.base.pull(keys)
        self._send(Op.DELTA_SPARSE, keys, delta, 0)
        self._sync_keys(keys)
