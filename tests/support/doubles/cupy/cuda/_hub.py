"""The meeting point of the NCCL double's ranks: one per communicator, in the process that
made the unique id, reached by every rank (that process included) over a Unix socket.

It sees every rank's calls in order and enforces what a GPU would punish: each rank's
n-th collective must be the same collective (name, count, dtype, op, root) as every other
rank's, else every rank gets an error naming both ranks' calls and their numbers; a send
must meet a receive of the same count and dtype; a rank that leaves (abort, exit) fails
the calls that needed it. It computes the results and sends each rank its bytes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import threading
from collections import deque
from multiprocessing.connection import Connection, Listener
from typing import Any

import numpy as np

DTYPES = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64,
          6: np.float16, 7: np.float32, 8: np.float64}  # fmt: skip
OP_NAMES = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}
COLLECTIVES = ("allReduce", "reduce", "broadcast", "reduceScatter", "allGather")


def describe(call: dict[str, Any]) -> str:
    """`allReduce(count 8, float32, sum)`, `send(to rank 1, count 4, int32)`."""
    parts = []
    if call["name"] in ("send", "recv"):
        parts.append(f"{'to' if call['name'] == 'send' else 'from'} rank {call['peer']}")
    parts += [f"count {call['count']}", np.dtype(DTYPES[call["dtype"]]).name]
    if call.get("op") is not None:
        parts.append(OP_NAMES[call["op"]])
    if call.get("root") is not None:
        parts.append(f"root {call['root']}")
    return f"{call['name']}({', '.join(parts)})"


def _describe_item(item: dict[str, Any]) -> str:
    return " + ".join(describe(c) for c in item["calls"]) + f" as call #{item['seq']}"


def _reduce(arrays: list[np.ndarray], op: int) -> np.ndarray:
    if op == 4:
        total = functools.reduce(np.add, arrays)
        if total.dtype.kind == "f":
            return (total / len(arrays)).astype(total.dtype)
        return total // len(arrays)
    ufunc = {0: np.add, 1: np.multiply, 2: np.maximum, 3: np.minimum}[op]
    return functools.reduce(ufunc, arrays)


class Hub:
    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.inbox: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self.conns: dict[int, Connection] = {}
        self.left: set[int] = set()
        self.queues: dict[int, deque[dict[str, Any]]] = {}
        self.size = 0
        self.failed: str | None = None
        self.local: set[int] = set()  # ranks in the hub's own process: told last

    def start(self, size: int) -> None:
        self.size = size
        self.queues = {r: deque() for r in range(size)}
        threading.Thread(target=self._accept, name="nccl-double-accept", daemon=True).start()
        threading.Thread(target=self._loop, name="nccl-double-hub", daemon=True).start()

    def _accept(self) -> None:
        for _ in range(self.size):
            try:
                conn = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()
        self.listener.close()

    def _read(self, conn: Connection) -> None:
        rank = -1
        try:
            while True:
                msg = conn.recv()
                if msg[0] == "hello":
                    rank = msg[1]
                    self.inbox.put((rank, ("hello", conn, msg[2], msg[3])))
                else:
                    self.inbox.put((rank, msg))
        except (EOFError, OSError):
            self.inbox.put((rank, ("gone",)))

    def _send(self, rank: int, msg: Any) -> None:
        conn = self.conns.get(rank)
        if conn is not None and rank not in self.left:
            with contextlib.suppress(OSError, ValueError):
                conn.send(msg)

    def _fail(self, text: str) -> None:
        self.failed = text
        # the other processes first: once a rank of this process hears, it may exit and
        # take the hub with it before the others heard
        for r in sorted(range(self.size), key=lambda r: r in self.local):
            self._send(r, ("fatal", text))

    def _loop(self) -> None:
        while True:
            rank, msg = self.inbox.get()
            kind = msg[0]
            if kind == "hello":
                if rank in self.conns or msg[2] != self.size:
                    with contextlib.suppress(OSError):
                        msg[1].send(("err", f"rank {rank} joined twice, or with another size "
                                            f"({msg[2]} ranks, the communicator has {self.size})"))
                    continue
                self.conns[rank] = msg[1]
                if msg[3] == os.getpid():
                    self.local.add(rank)
                if len(self.conns) == self.size:  # as `_fail`: this process's ranks last,
                    # or one of them may exit (taking the hub) before the others heard
                    for r in sorted(range(self.size), key=lambda r: r in self.local):
                        self._send(r, ("ready",))
            elif kind == "item":
                if self.failed:
                    self._send(rank, ("fatal", self.failed))
                    continue
                self.queues[rank].append(msg[1])
                self._progress()
            elif kind in ("gone", "bye"):
                if rank < 0:
                    continue
                self.left.add(rank)
                stuck = [r for r, q in self.queues.items() if q and r not in self.left]
                if kind == "gone" and stuck and not self.failed:
                    self._fail(f"rank {rank} aborted its communicator or exited while rank "
                               f"{stuck[0]} waited in {_describe_item(self.queues[stuck[0]][0])}")
                if len(self.left) == self.size:
                    return

    def _progress(self) -> None:
        moved = True
        while moved and not self.failed:
            moved = self._collective() or self._point_to_point()
        if not self.failed and all(self.queues[r] for r in range(self.size)):
            self._fail(self._mismatch())  # every rank waits, and none can go on

    def _collective(self) -> bool:
        heads = [self.queues[r][0] if self.queues[r] else None for r in range(self.size)]
        if any(h is None or h["kind"] != "coll" for h in heads):
            return False
        first = heads[0]["calls"][0]
        key = ("name", "count", "dtype", "op", "root")
        for r, h in enumerate(heads):
            call = h["calls"][0]
            if any(call.get(k) != first.get(k) for k in key):
                self._fail(f"rank 0 called {_describe_item(heads[0])} but rank {r} called "
                           f"{_describe_item(h)}: the ranks called different collectives")
                return False
        for r in range(self.size):
            self.queues[r].popleft()
        self._compute([h["calls"][0] for h in heads], [h["id"] for h in heads])
        return True

    def _compute(self, calls: list[dict[str, Any]], ids: list[int]) -> None:
        c0, n = calls[0], self.size
        dtype = DTYPES[c0["dtype"]]
        data = [np.frombuffer(c["data"], dtype) if c["data"] is not None else None for c in calls]
        name = c0["name"]
        outs: list[bytes | None]
        if name == "allReduce":
            outs = [_reduce(data, c0["op"]).tobytes()] * n  # type: ignore[arg-type]
        elif name == "reduce":
            total = _reduce(data, c0["op"]).tobytes()  # type: ignore[arg-type]
            outs = [total if r == c0["root"] else None for r in range(n)]
        elif name == "broadcast":
            outs = [data[c0["root"]].tobytes()] * n  # type: ignore[union-attr]
        elif name == "reduceScatter":
            total = _reduce(data, c0["op"])  # type: ignore[arg-type]
            k = c0["count"]
            outs = [total[r * k : (r + 1) * k].tobytes() for r in range(n)]
        else:  # allGather
            outs = [b"".join(d.tobytes() for d in data)] * n  # type: ignore[union-attr]
        for r in range(n):
            self._send(r, ("done", ids[r], [outs[r]]))

    def _point_to_point(self) -> bool:
        for r in range(self.size):
            if self.queues[r] and self.queues[r][0]["kind"] == "p2p" and self._match(r):
                return True
        return False

    def _match(self, start: int) -> bool:
        """Complete the p2p items at the heads of `start` and every peer they reach, if
        each pair's sends and receives pair up; False to wait."""
        members, todo = {start}, [start]
        while todo:
            r = todo.pop()
            head = self.queues[r][0] if self.queues[r] else None
            if head is None or head["kind"] != "p2p":
                return False
            for c in head["calls"]:
                if c["peer"] not in members:
                    members.add(c["peer"])
                    todo.append(c["peer"])
        heads = {r: self.queues[r][0] for r in members}
        for a in members:
            for b in members:
                sends = [(c["count"], c["dtype"]) for c in heads[a]["calls"]
                         if c["name"] == "send" and c["peer"] == b]  # fmt: skip
                recvs = [(c["count"], c["dtype"]) for c in heads[b]["calls"]
                         if c["name"] == "recv" and c["peer"] == a]  # fmt: skip
                if sends != recvs:
                    if len(sends) == len(recvs):
                        self._fail(f"rank {a} sends {sends} (count, dtype) to rank {b}, which "
                                   f"receives {recvs}: {_describe_item(heads[a])} against "
                                   f"{_describe_item(heads[b])}")
                    return False
        for r in members:
            self.queues[r].popleft()
        for b in members:
            payloads = []
            for c in heads[b]["calls"]:
                if c["name"] == "recv":
                    a = c["peer"]
                    k = sum(1 for d in heads[b]["calls"][: heads[b]["calls"].index(c)]
                            if d["name"] == "recv" and d["peer"] == a)  # fmt: skip
                    sends = [d for d in heads[a]["calls"] if d["name"] == "send" and d["peer"] == b]
                    payloads.append(sends[k]["data"])
            self._send(b, ("done", heads[b]["id"], payloads))
        return True

    def _mismatch(self) -> str:
        heads = {r: self.queues[r][0] for r in range(self.size)}
        for r, h in heads.items():
            for c in h["calls"]:
                if c["name"] in ("send", "recv"):
                    peer = heads[c["peer"]]
                    return (f"rank {r} called {_describe_item(h)} but rank {c['peer']} called "
                            f"{_describe_item(peer)}: the ranks called different operations "
                            f"(a send or receive with no match)")
        return "every rank waits and none can go on"
