"""Job-wide stack requests through the launchers' store (many nodes).

Keys, per round ``r`` (see `protocol`):

| key                            | written by                        | value                      |
| ------------------------------ | --------------------------------- | -------------------------- |
| ``stacks/<r>/seq``             | a requester, add                  | the last request number    |
| ``stacks/<r>/hang/<k>``        | a node that saw its k-th hang,    | its node index: the first  |
|                                | create-only                       | one asks, the others don't |
| ``stacks/<r>/<n>/request``     | the requester (SIGUSR1 or a hang) | JSON ``{"by", "why",       |
|                                |                                   | "hang": k or 0}``          |
| ``stacks/<r>/<n>/node/<i>``    | node i                            | its `stacks.node_report`   |
|                                |                                   | plus ``activity`` (ages)   |

A thread blocks on the next request key (a waiting `get`, no polling) and makes `fd`
readable when it appears; the supervisor's loop then calls the hang watch, which
collects this node's stacks, answers, and gathers every node's answer (`gather`, with
a deadline: a node that does not answer in time is named as not answering).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from paddlike.distributed.store import StoreError, StoreTimeoutError
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.kv import KV

WAIT_CHUNK = 2.0  # seconds per blocking wait (to notice `stop()`)


class StackChannel:
    """One node's end of the round's stack requests."""

    def __init__(
        self, *, connect: Callable[[], KV], kv: KV, round_: int, node_index: int, nnodes: int
    ) -> None:
        self._connect = connect
        self.kv = kv
        self.round = round_
        self.node_index = node_index
        self.nnodes = nnodes
        self._read_fd, self._write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pending: list[tuple[int, dict[str, Any]]] = []
        self._open = True
        self._thread: threading.Thread | None = None
        self.hangs = 0  # the last hang this node asked about or answered (``hang/<k>``)

    def connect(self) -> KV:
        """A store connection of the caller's own, for another thread (the straggler
        check's, `peers.stragglers`)."""
        return self._connect()

    @property
    def fd(self) -> int:
        """Readable when a request came in (`take` returns it)."""
        return self._read_fd

    def start(self) -> StackChannel:
        self._thread = threading.Thread(
            target=self._watch, name=f"stacks-watch-r{self.round}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if not self._open:  # twice: the numbers may belong to new descriptors by now
                return
            self._open = False
            for fd in (self._read_fd, self._write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- asking --

    def request(self, why: str, hang: int = 0) -> bool:
        """Ask every node (this one included) for its stacks; False when the store is gone.
        `hang`: the k of the hang it is about (0: SIGUSR1)."""
        try:
            n = self.kv.add(p.stacks_seq_key(self.round), 1)
            body = json.dumps({"by": self.node_index, "why": why, "hang": hang}).encode()
            self.kv.set(p.stacks_request_key(self.round, n), body)
        except StoreError:
            return False
        return True

    def request_hang(self, why: str) -> bool:
        """A hang seen here: ask, unless another node asked about this hang first."""
        self.hangs += 1
        try:
            key = p.stacks_hang_key(self.round, self.hangs)
            mine = str(self.node_index).encode()
            if self.kv.compare_set(key, None, mine) != mine:
                return False
        except StoreError:
            return False
        return self.request(why, self.hangs)

    # -- answering --

    def take(self) -> list[tuple[int, dict[str, Any]]]:
        """The requests that arrived, oldest first: (number, {"by", "why", "hang"})."""
        with contextlib.suppress(OSError):
            os.read(self._read_fd, 4096)
        with self._lock:
            out, self._pending = self._pending, []
        return out

    def answer(self, n: int, report: dict[str, Any]) -> None:
        with contextlib.suppress(StoreError):
            self.kv.set(p.stacks_node_key(self.round, n, self.node_index), json.dumps(report))

    def gather(self, n: int, timeout: float) -> tuple[list[dict[str, Any]], list[int]]:
        """Every node's answer to request `n` within `timeout` s: (reports, silent nodes)."""
        deadline = time.monotonic() + timeout
        reports, silent = [], []
        for j in range(self.nnodes):
            left = max(0.01, deadline - time.monotonic())
            try:
                raw = self.kv.get(p.stacks_node_key(self.round, n, j), timeout=left)
            except StoreError:
                silent.append(j)
                continue
            reports.append(json.loads(raw))
        return reports, silent

    # -- the thread --

    def _watch(self) -> None:
        try:
            kv = self._connect()
        except StoreError:
            return  # the job watch's heartbeat decides whether the store is gone
        n = 1
        try:
            while not self._stop.is_set():
                try:
                    raw = kv.get(p.stacks_request_key(self.round, n), timeout=WAIT_CHUNK)
                except StoreTimeoutError:
                    continue
                except StoreError:
                    if self._stop.is_set():
                        return
                    self._stop.wait(0.1)  # the connection broke: retry shortly
                    with contextlib.suppress(StoreError):
                        kv.close()
                        kv = self._connect()
                    continue
                n += 1
                try:
                    body = json.loads(raw)
                except ValueError:
                    continue  # not a request this version can read
                with self._lock, contextlib.suppress(OSError):
                    self._pending.append((n - 1, body))
                    if self._open:
                        os.write(self._write_fd, b"!")
        finally:
            with contextlib.suppress(StoreError):
                kv.close()
