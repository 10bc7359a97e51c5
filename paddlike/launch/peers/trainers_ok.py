"""Parameter-server jobs on several nodes: the servers stop once every trainer of the
job is done, not when one node's own trainers are (`JobTrainersOk`).

Each node stores ``job/<round>/trainers-ok/<i>`` once its trainers have all exited 0 (at
once when it has none); a thread waiting for every node's key, on a connection of its
own, makes `fd` readable then, and the supervisor stops this node's servers. A lost
node or an abort ends the round through the round's watch instead.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from paddlike.distributed.store import StoreError, StoreTimeoutError
from paddlike.launch.peers.kv import KV, wait_keys

WAIT_CHUNK = 2.0  # seconds per blocking wait on the keys (to notice `stop()`)


class JobTrainersOk:
    """One round's say in when this node's servers stop (a `services.ServicesStop`, for the
    supervisor)."""

    def __init__(
        self,
        kv: KV,
        connect: Callable[[], KV],
        *,
        keys: list[str],
        node_index: int,
        warn: Callable[[str], None],
    ) -> None:
        """`kv`: the round's connection (this node's key); `connect`: a connection of its
        own for the waiting thread; `keys`: every node's ``trainers-ok`` key of the round;
        `warn`: the console's warning line."""
        self.kv = kv
        self._connect = connect
        self.keys = keys
        self.own_key = keys[node_index]
        self.warn = warn
        self._read_fd, self._write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._fds_open = True  # until stop() closes them

    def start(self, name: str) -> threading.Thread:
        """The waiting thread, started (`name`: the thread's)."""
        thread = threading.Thread(target=self._wait, name=name, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
        with self._lock:  # the thread writes under the lock, never after this
            if not self._fds_open:
                return  # closed already: the numbers may belong to new descriptors now
            self._fds_open = False
            for fd in (self._read_fd, self._write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)

    @property
    def fd(self) -> int:
        """Readable once every node's trainers are done."""
        return self._read_fd

    def local_trainers_done(self) -> None:
        """This node's trainers all exited 0 (or it has none): say so to the others."""
        try:
            self.kv.set(self.own_key, b"1")
        except StoreError as exc:  # the heartbeat thread decides whether the store is gone
            self.warn(f"could not tell the other nodes that its trainers are done: {exc}")

    def stop_now(self) -> bool:
        """Whether the servers stop now (consumes the readiness of `fd`)."""
        try:
            return bool(os.read(self._read_fd, 4096))
        except OSError:
            return False

    def _wait(self) -> None:
        kv: KV | None = None
        while not self._stop.is_set():
            try:
                if kv is None:
                    kv = self._connect()
                wait_keys(kv, self.keys, WAIT_CHUNK)
            except StoreTimeoutError:
                continue
            except StoreError:
                # the connection broke: the round's heartbeats decide when it is fatal
                if kv is not None:
                    with contextlib.suppress(StoreError):
                        kv.close()
                kv = None
                self._stop.wait(0.1)  # no event to wait on: the peer is gone; retry shortly
                continue
            with self._lock, contextlib.suppress(OSError):
                if self._fds_open:
                    os.write(self._write_fd, b"!")
            break
        if kv is not None:
            with contextlib.suppress(StoreError):
                kv.close()
