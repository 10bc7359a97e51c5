"""A vectorised int64 -> row hash map (open addressing, linear probing) for sparse shards.

A Python dict costs a boxed int and a cache miss per key, about 0.5 µs; a pull of
65,536 keys would spend 30 ms there. Here each probe round is a handful of numpy
operations over all the keys still unresolved, and at a load factor <= 1/2 almost
every key resolves in the first round or two.
"""

from __future__ import annotations

import numpy as np

from paddlike.distributed.ps.sharding import mix64


class KeyIndex:
    def __init__(self, capacity: int = 1024) -> None:
        self._alloc(max(16, 1 << (capacity - 1).bit_length()))
        self.size = 0

    def _alloc(self, cap: int) -> None:
        self.mask = cap - 1
        self.slot_keys = np.zeros(cap, dtype=np.int64)
        self.slot_rows = np.full(cap, -1, dtype=np.int64)  # -1: empty slot

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return (mix64(keys.view(np.uint64)) & np.uint64(self.mask)).astype(np.int64)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """The row of every key, -1 where the key is absent. The first probe is done for
        every key at once without index bookkeeping (at load <= 1/2 it resolves most);
        `np.take` gathers faster than fancy indexing."""
        h = self._home(keys)
        rows = np.take(self.slot_rows, h)
        hit = np.take(self.slot_keys, h) == keys
        out = np.where(hit, rows, -1)
        pending = np.flatnonzero(~hit & (rows >= 0))  # another key sits there: probe on
        k, h = keys[pending], (h[pending] + 1) & self.mask
        while pending.size:
            rows = np.take(self.slot_rows, h)
            empty = rows < 0
            hit = ~empty & (np.take(self.slot_keys, h) == k)
            out[pending[hit]] = rows[hit]
            go_on = ~(empty | hit)
            pending, k, h = pending[go_on], k[go_on], (h[go_on] + 1) & self.mask
        return out

    def insert(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Add keys that are unique and absent, mapping each to its row."""
        if (self.size + len(keys)) * 2 > self.mask + 1:
            self._rehash(self.size + len(keys))
        k, r, h = keys, rows, self._home(keys)
        while k.size:
            free = np.flatnonzero(self.slot_rows[h] < 0)
            if free.size:
                # several keys may want one free slot: the first of each slot wins this round
                _, first = np.unique(h[free], return_index=True)
                won = free[first]
                self.slot_keys[h[won]] = k[won]
                self.slot_rows[h[won]] = r[won]
                lost = np.ones(k.size, dtype=bool)
                lost[won] = False
                k, r, h = k[lost], r[lost], h[lost]
            h = (h + 1) & self.mask
        self.size += len(keys)

    def _rehash(self, need: int) -> None:
        used = self.slot_rows >= 0
        keys, rows = self.slot_keys[used], self.slot_rows[used]
        self._alloc(1 << (need * 2 - 1).bit_length())
        self.size = 0
        self.insert(keys, rows)
