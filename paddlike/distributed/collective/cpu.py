"""The CPU backend: numpy arrays moved over TCP between hosts and through shared memory
between ranks of one host.

Algorithm choice, per operation:
- all ranks of the group on one host (the usual single-node job): shared memory. Each
  array is cut into chunks the size of one buffer, every rank writes its buffer, one
  step, the ranks read what they need; two buffers alternate so a fast rank never
  overwrites data a slow one is still reading. all_reduce and reduce: shm_reduce.py.
- otherwise TCP: direct exchanges, which move no more bytes per rank than a ring does;
  all_reduce and reduce: tcp_reduce.py.
- a group spanning hosts, some with several of its ranks: all_reduce goes in two levels
  (reduce to one leader per host through shared memory, all_reduce between leaders over
  TCP, broadcast back through shared memory); the other operations use TCP directly.

Reductions always combine contributions in one fixed order (rank order, or ring order
for the TCP ring), so results are the same bits on every rank and every run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Sequence

import numpy as np

from ..store import StoreClient, StoreError
from . import keys as K
from .backend import Communicator
from .errors import EXIT_BARRIER, CollectiveError, CollectiveTimeoutError, size_mismatch
from .reduce_op import ReduceOp, reduce_into
from .shm import ShmArena, shm_available
from .shm_reduce import shm_reduce, small_bytes
from .slicing import byte_view, copy_rows, fingerprint, flat_bytes, ranges, shm_buffer_bytes
from .tcp import OPCODE, OPCODES, Mesh, Recv, Send
from .tcp_reduce import allreduce_direct, allreduce_ring, reduce_to_root

__all__ = ["CpuCommunicator", "host_key"]

TRANSPORT_ENV = "PADDLIKE_CPU_TRANSPORT"  # auto (default) | tcp: force TCP even on one host
SMALL_ALLREDUCE_BYTES = 256 << 10


def host_key() -> str:
    """Ranks with equal keys share /dev/shm and a kernel: same boot, same network namespace
    (network-namespace "nodes" of the tests count as different hosts)."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        parts.append(f.read().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/net"))
    return "|".join(parts)


class CpuCommunicator(Communicator):
    """One group's connections (and shared memory, when all its ranks share a host)."""

    def __init__(
        self,
        store: StoreClient,
        prefix: str,
        rank: int,
        global_ranks: Sequence[int],
        host: str,
        timeout: float,
    ) -> None:
        self.name = prefix
        self.rank, self.size = rank, len(global_ranks)
        self.global_ranks = list(global_ranks)
        deadline = time.monotonic() + timeout
        self.mesh = Mesh.connect(store, prefix, rank, global_ranks, host, deadline)
        self.arena: ShmArena | None = None
        self.small_bytes = 0
        # Groups spanning hosts with several ranks on one host reduce hierarchically: within
        # each host through shared memory, then across hosts between one leader per host.
        self.local: CpuCommunicator | None = None
        self.leaders: CpuCommunicator | None = None
        try:
            if self.size > 1:
                self._shared_memory(store, prefix, host, deadline)
        except BaseException as exc:
            self.close()
            if isinstance(exc, StoreError):
                raise CollectiveTimeoutError(
                    f"setting up group {prefix.rsplit('/', 1)[-1]} (ranks {self.global_ranks}): "
                    f"{exc}"
                ) from None
            raise
        self._uses = 0
        if self.local is not None:
            self.transport = "shm+tcp"
        else:
            self.transport = "shm" if self.arena else ("tcp" if self.size > 1 else "none")

    def _shared_memory(self, store: StoreClient, prefix: str, host: str, deadline: float) -> None:
        """Shared memory for the group when every rank is on this host and agrees on the
        layout (a peer mapping a segment larger than the file would crash on access);
        else, for hosts with several of the group's ranks, the two-level communicators."""
        mode = os.environ.get(TRANSPORT_ENV, "auto").strip().lower() or "auto"
        buffer_bytes = shm_buffer_bytes(self.size)
        self.small_bytes = small_bytes()  # every rank must take the same path: in the key
        key = f"{host_key()}|{mode}|{int(shm_available())}|{buffer_bytes}|{self.small_bytes}"
        store.set(K.host_of(prefix, self.rank), key)
        keys = [
            store.get(
                K.host_of(prefix, k), timeout=max(0.001, deadline - time.monotonic())
            ).decode()
            for k in range(self.size)
        ]
        if mode == "tcp" or not shm_available():
            return
        if all(k == keys[0] for k in keys):
            self.arena = ShmArena(
                store, prefix, self.rank, self.global_ranks, buffer_bytes, deadline,
                self.mesh.peer_closed,
            )  # fmt: skip
            return
        hosts = list(dict.fromkeys(keys))  # in order of their lowest rank
        if len(hosts) == len(keys):
            return  # one rank per host: nothing to share
        mine = [k for k in range(self.size) if keys[k] == keys[self.rank]]
        leaders = [keys.index(h) for h in hosts]
        left = max(0.001, deadline - time.monotonic())
        self.local = CpuCommunicator(
            store, K.host_ranks(prefix, hosts.index(keys[self.rank])), mine.index(self.rank),
            [self.global_ranks[k] for k in mine], host, left,
        )  # fmt: skip
        if self.rank in leaders:
            self.leaders = CpuCommunicator(
                store, K.leaders(prefix), leaders.index(self.rank),
                [self.global_ranks[k] for k in leaders], host, left,
            )  # fmt: skip

    def close(self) -> None:
        for sub in (self.local, self.leaders):
            if sub is not None:
                sub.close()
        self.local = self.leaders = None
        if self.arena is not None:
            self.arena.close()
            self.arena = None
        self.mesh.close()

    # --- helpers -------------------------------------------------------------------------

    def _buf(self) -> int:
        b = self._uses & 1
        self._uses += 1
        return b

    def _shm_steps(
        self, opname: str, nbytes: int, deadline: float, what: str, pieces: int,
        before: Callable[[int, int], None], after: Callable[[int, int], None],
        sources: Sequence[int] | None = None,
        extra: tuple[int, int] | None = None,
        verify: Callable[[int], None] | None = None,
    ) -> None:  # fmt: skip
        """The common shape: for each piece, `before(i, buf)` writes this rank's buffer, a
        step, `after(i, buf)` reads the buffers of `sources` (default: every rank), having
        waited only for those. The first step also checks that they called the same op
        with the same size, then calls `verify(parity)` (which may read the `extra` the
        ranks published) before any data is read."""
        arena = self.arena
        assert arena is not None
        opcode = OPCODE[opname]
        parity = 0
        for i in range(pieces):
            buf = self._buf()
            if i == 0:
                parity = arena.begin(opcode, nbytes, deadline, what, extra)
            else:
                arena.begin_use(deadline, what)
            before(i, buf)
            arena.sync(deadline, what, peers=sources)
            if i == 0:
                arena.check(parity, opcode, nbytes, what, OPCODES, ranks=sources)
                if verify is not None:
                    verify(parity)
            after(i, buf)

    # --- all_reduce / reduce --------------------------------------------------------------

    def all_reduce(
        self, x: np.ndarray, op: ReduceOp, deadline: float, out: np.ndarray | None = None
    ) -> None:
        """In place, or into `out` (same shape and dtype, not overlapping x) leaving x alone."""
        if out is None or out is x:
            self._reduce(x, op, deadline, root=None)
        elif self.arena is not None:
            shm_reduce(
                self.arena, self._buf, x, op, deadline, None, "all_reduce", out, self.small_bytes
            )
        else:  # the TCP paths reduce in place: on a copy
            out[...] = x
            self._reduce(out, op, deadline, root=None)

    def reduce(self, x: np.ndarray, root: int, op: ReduceOp, deadline: float) -> None:
        self._reduce(x, op, deadline, root=root)

    def _reduce(self, x: np.ndarray, op: ReduceOp, deadline: float, root: int | None) -> None:
        what = "all_reduce" if root is None else "reduce"
        if self.size == 1:
            return  # a group of one: x is the result (an average over one is x)
        if self.arena is not None:
            shm_reduce(self.arena, self._buf, x, op, deadline, root, what, None, self.small_bytes)
        elif self.local is not None and root is None:
            self._two_level_allreduce(x, op, deadline)
        elif root is not None:
            reduce_to_root(self.mesh, x, op, deadline, root)
        elif x.nbytes <= SMALL_ALLREDUCE_BYTES or self.size == 1:
            allreduce_direct(self.mesh, x, op, deadline)
        else:
            allreduce_ring(self.mesh, x, op, deadline)

    def _two_level_allreduce(self, x: np.ndarray, op: ReduceOp, deadline: float) -> None:
        """Reduce onto each host's leader (shared memory), all_reduce between the leaders
        (TCP), broadcast back on each host. The order of combination is fixed: the same
        bits every run."""
        assert self.local is not None
        inner = ReduceOp.SUM if op is ReduceOp.AVG else op
        self.local.reduce(x, 0, inner, deadline)
        if self.leaders is not None:
            self.leaders.all_reduce(x, inner, deadline)
            if op is ReduceOp.AVG:
                np.divide(x, self.size, out=x, casting="unsafe")
        self.local.broadcast(x, 0, deadline)

    # --- data movement ---------------------------------------------------------------------

    def broadcast(self, x: np.ndarray, root: int, deadline: float) -> None:
        xb = flat_bytes(x)
        if self.arena is not None:
            arena, r = self.arena, self.rank
            chunks = ranges(xb.size, arena.buffer_bytes)

            def before(i: int, buf: int) -> None:
                if r == root:
                    a, b = chunks[i]
                    arena.data(r, buf)[: b - a] = xb[a:b]

            def after(i: int, buf: int) -> None:
                if r != root:
                    a, b = chunks[i]
                    xb[a:b] = arena.data(root, buf)[: b - a]

            sources = [] if r == root else [root]
            self._shm_steps(
                "broadcast", x.nbytes, deadline, "broadcast", len(chunks), before, after, sources
            )
        elif self.rank == root:
            peers = [k for k in range(self.size) if k != root]
            self.mesh.exchange(
                [Send(k, byte_view(x), "broadcast") for k in peers], [], deadline, "broadcast"
            )
        else:
            self.mesh.exchange([], [Recv(root, byte_view(x), "broadcast")], deadline, "broadcast")

    def all_gather(self, outs: list[np.ndarray], x: np.ndarray, deadline: float) -> None:
        self._gather(outs, x, deadline, root=None)

    def gather(
        self, x: np.ndarray, outs: list[np.ndarray] | None, root: int, deadline: float
    ) -> None:
        self._gather(outs, x, deadline, root=root)

    def _gather(
        self, outs: list[np.ndarray] | None, x: np.ndarray, deadline: float, root: int | None
    ) -> None:
        what = "all_gather" if root is None else "gather"
        r = self.rank
        receives = root is None or r == root
        if receives:
            assert outs is not None
            flat_bytes(outs[r])[:] = flat_bytes(x)
        if self.arena is not None:
            arena = self.arena
            sizes = [o.nbytes for o in outs] if root is None else [x.nbytes] * self.size  # type: ignore[union-attr]
            xb = flat_bytes(x)
            chunks = ranges(max(sizes), arena.buffer_bytes)

            def before(i: int, buf: int) -> None:
                a, _ = chunks[i]
                take = max(0, min(arena.buffer_bytes, xb.size - a))
                arena.data(r, buf)[:take] = xb[a : a + take]

            def after(i: int, buf: int) -> None:
                if not receives:
                    return
                a, _ = chunks[i]
                for k in range(self.size):
                    if k != r:
                        ob = flat_bytes(outs[k])  # type: ignore[index]
                        take = max(0, min(arena.buffer_bytes, ob.size - a))
                        ob[a : a + take] = arena.data(k, buf)[:take]

            nbytes = sum(sizes)
            sources = None if receives else []
            if root is None:  # sizes may differ by rank: _check_slots compares them
                self._shm_steps(
                    what, 0, deadline, what, len(chunks), before, after, sources,
                    extra=(x.nbytes, fingerprint(sizes)),
                    verify=lambda parity: self._check_slots(sizes, parity, what),
                )  # fmt: skip
            else:
                self._shm_steps(what, nbytes, deadline, what, len(chunks), before, after, sources)
            return
        peers = [k for k in range(self.size) if k != r]
        if root is None:
            sends = [Send(k, byte_view(x), what) for k in peers]
            recvs = [Recv(k, byte_view(outs[k]), what) for k in peers]  # type: ignore[index]
        elif r == root:
            sends, recvs = [], [Recv(k, byte_view(outs[k]), what) for k in peers]  # type: ignore[index]
        else:
            sends, recvs = [Send(root, byte_view(x), what)], []
        self.mesh.exchange(sends, recvs, deadline, what)

    def _check_slots(self, slots: Sequence[int], parity: int, what: str) -> None:
        """Every rank's output slot k must hold exactly what rank k sends (copying
        min(slot, data) would truncate silently, or leave stale bytes): each rank checks its
        own slots, then every rank's fingerprint, so a mistake on any rank fails on all."""
        arena = self.arena
        assert arena is not None
        published = [arena.extra_of(k, parity) for k in range(self.size)]
        sent = [p[0] for p in published]
        for k in range(self.size):
            if k != self.rank and sent[k] != slots[k]:
                raise size_mismatch(
                    what, self.global_ranks[k], what, sent[k], what, slots[k],
                    f" (its slot, tensor_list[{k}])",
                )  # fmt: skip
        expected = fingerprint(sent)
        for k in range(self.size):
            if published[k][1] != expected:
                raise CollectiveError(
                    f"{what}: rank {self.global_ranks[k]}'s tensor_list does not match the sizes "
                    f"the ranks sent ({sent} bytes); the ranks passed different shapes/dtypes"
                )

    def scatter(
        self, x: np.ndarray, ins: list[np.ndarray] | None, root: int, deadline: float
    ) -> None:
        r = self.rank
        if r == root:
            assert ins is not None
            flat_bytes(x)[:] = flat_bytes(ins[r])
        if self.arena is not None:
            arena = self.arena
            region = arena.buffer_bytes // self.size
            xb = flat_bytes(x)
            chunks = ranges(xb.size, region)

            def before(i: int, buf: int) -> None:
                if r == root:
                    a, b = chunks[i]
                    data = arena.data(r, buf)
                    for k in range(self.size):
                        data[k * region : k * region + b - a] = flat_bytes(ins[k])[a:b]  # type: ignore[index]

            def after(i: int, buf: int) -> None:
                if r != root:
                    a, b = chunks[i]
                    xb[a:b] = arena.data(root, buf)[r * region : r * region + b - a]

            sources = [] if r == root else [root]
            self._shm_steps(
                "scatter", x.nbytes, deadline, "scatter", len(chunks), before, after, sources
            )
        elif r == root:
            sends = [Send(k, byte_view(ins[k]), "scatter") for k in range(self.size) if k != r]  # type: ignore[index]
            self.mesh.exchange(sends, [], deadline, "scatter")
        else:
            self.mesh.exchange([], [Recv(root, byte_view(x), "scatter")], deadline, "scatter")

    def all_to_all(self, outs: list[np.ndarray], ins: list[np.ndarray], deadline: float) -> None:
        """ins may also be 2-D views with contiguous rows (ops.all_to_all_rows): shared
        memory copies them straight from their rows; TCP sends packed copies."""
        r = self.rank
        if ins[r].flags.c_contiguous:
            flat_bytes(outs[r])[:] = flat_bytes(ins[r])
        else:
            np.copyto(outs[r], ins[r])
        if self.arena is not None:
            arena = self.arena
            region = arena.buffer_bytes // self.size
            nb = ins[0].nbytes
            chunks = ranges(nb, region)
            srcs = [a if a.flags.c_contiguous else a.view(np.uint8) for a in ins]

            def before(i: int, buf: int) -> None:
                a, b = chunks[i]
                data = arena.data(r, buf)
                for k in range(self.size):
                    if k != r and srcs[k] is ins[k]:
                        data[k * region : k * region + b - a] = flat_bytes(ins[k])[a:b]
                    elif k != r:
                        copy_rows(data[k * region : k * region + b - a], srcs[k], a)

            def after(i: int, buf: int) -> None:
                a, b = chunks[i]
                for k in range(self.size):
                    if k != r:
                        got = arena.data(k, buf)[r * region : r * region + b - a]
                        flat_bytes(outs[k])[a:b] = got

            total = nb * self.size
            self._shm_steps("all_to_all", total, deadline, "all_to_all", len(chunks), before, after)
            return
        peers = [k for k in range(self.size) if k != r]
        self.mesh.exchange(
            [Send(k, byte_view(np.ascontiguousarray(ins[k])), "all_to_all") for k in peers],
            [Recv(k, byte_view(outs[k]), "all_to_all") for k in peers],
            deadline,
            "all_to_all",
        )

    def reduce_scatter(
        self, out: np.ndarray, ins: list[np.ndarray], op: ReduceOp, deadline: float
    ) -> None:
        n, r = self.size, self.rank
        outf = out.reshape(-1)
        dt = outf.dtype
        if self.arena is not None:
            arena = self.arena
            region = arena.buffer_bytes // n // dt.itemsize
            chunks = ranges(outf.size, region)
            flats = [a.reshape(-1) for a in ins]

            def before(i: int, buf: int) -> None:
                a, b = chunks[i]
                data = arena.data(r, buf, dt)
                for k in range(n):
                    data[k * region : k * region + b - a] = flats[k][a:b]

            def after(i: int, buf: int) -> None:
                a, b = chunks[i]
                parts = [arena.data(j, buf, dt)[r * region : r * region + b - a] for j in range(n)]
                reduce_into(op, outf[a:b], parts, n)

            total = out.nbytes * n
            self._shm_steps(
                "reduce_scatter", total, deadline, "reduce_scatter", len(chunks), before, after
            )
            return
        peers = [k for k in range(n) if k != r]
        tmps = {k: np.empty_like(outf) for k in peers}
        self.mesh.exchange(
            [Send(k, byte_view(ins[k]), "reduce_scatter") for k in peers],
            [Recv(k, byte_view(tmps[k]), "reduce_scatter") for k in peers],
            deadline,
            "reduce_scatter",
        )
        parts = [ins[r].reshape(-1) if j == r else tmps[j] for j in range(n)]
        res = np.empty_like(outf)
        reduce_into(op, res, parts, n)
        outf[...] = res

    def send(self, x: np.ndarray, peer: int, deadline: float) -> None:
        self.mesh.exchange([Send(peer, byte_view(x), "send")], [], deadline, "send")

    def recv(self, x: np.ndarray, peer: int, deadline: float) -> None:
        self.mesh.exchange([], [Recv(peer, byte_view(x), "recv")], deadline, "recv")

    def barrier(self, deadline: float, leaving: bool = False) -> None:
        name = EXIT_BARRIER if leaving else "barrier"
        if self.size == 1:
            return  # a group of one: nobody to wait for
        if self.arena is not None:
            arena = self.arena
            parity = arena.begin(OPCODE[name], 0, deadline, name)
            arena.sync(deadline, name)
            arena.check(parity, OPCODE[name], 0, name, OPCODES)
            return
        empty = memoryview(b"")
        peers = [k for k in range(self.size) if k != self.rank]
        self.mesh.exchange(
            [Send(k, empty, name) for k in peers],
            [Recv(k, memoryview(bytearray()), name) for k in peers],
            deadline,
            name,
        )
