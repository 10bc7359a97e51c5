"""A CPU double of CuPy's NCCL binding (`cupy.cuda.nccl`), for tests without a GPU.

CuPy's names, argument order and types (checked against CuPy's source by
tests/distributed/collective/test_nccl_double.py), on host memory given by address. The ranks of a
communicator
are real processes: they meet at a hub (`_hub`) in the process that made the unique id.
Calls return at once and run on the stream they name (`streams`); results land in the
receive buffers when that stream is synchronized. What a GPU would punish with a hang or
an error is an error here: different collectives on different ranks (both ranks' calls
and numbers named, through `check_async_error`), a send without its receive, unbalanced
groupStart/groupEnd, a dtype NCCL lacks, any call after abort or destroy.

With CUPY_DOUBLE_NCCL=0 this module is what CuPy gives when libnccl cannot be loaded:
`available = False` and none of NCCL's names. CUPY_DOUBLE_LOG names a file that gets a
line per abort and destroy ("<rank> abort"), so tests can tell the two apart.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import threading
import time
from multiprocessing.connection import Client, Listener
from typing import Any

available = os.environ.get("CUPY_DOUBLE_NCCL", "1") != "0"

if available:
    from . import _hub, memory, streams
    from . import get_device_id as _current_device

    NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = 0, 1, 2, 3, 4
    NCCL_INT8 = NCCL_CHAR = 0
    NCCL_UINT8 = 1
    NCCL_INT32 = NCCL_INT = 2
    NCCL_UINT32 = 3
    NCCL_INT64 = 4
    NCCL_UINT64 = 5
    NCCL_FLOAT16 = NCCL_HALF = 6
    NCCL_FLOAT32 = NCCL_FLOAT = 7
    NCCL_FLOAT64 = NCCL_DOUBLE = 8
    NCCL_BFLOAT16 = 9
    NCCL_UNIQUE_ID_BYTES = 128
    _ERRORS = {1: "NCCL_ERROR_UNHANDLED_CUDA_ERROR", 2: "NCCL_ERROR_SYSTEM_ERROR",
               3: "NCCL_ERROR_INTERNAL_ERROR", 4: "NCCL_ERROR_INVALID_ARGUMENT",
               5: "NCCL_ERROR_INVALID_USAGE", 6: "NCCL_ERROR_REMOTE_ERROR"}  # fmt: skip
    _local = threading.local()
    _listeners: dict[str, tuple[int, Listener]] = {}  # address -> (pid that made it, socket)
    CONNECT_SECONDS = 300.0

    class NcclError(RuntimeError):
        def __init__(self, status: int, detail: str = "") -> None:
            self.status = status
            super().__init__(f"{_ERRORS.get(status, status)}: {detail or 'error'}")

    def get_version() -> int:
        return 22805

    def get_build_version() -> int:
        return 22805

    def _address(uid: tuple[int, ...]) -> str:
        return "\0cupy-nccl-double-" + bytes(v & 0xFF for v in uid[:16]).hex()

    def get_unique_id() -> tuple[int, ...]:
        """128 signed chars, as CuPy returns them; the first 16 name the hub's socket,
        which this process listens on (its communicator of that id runs the hub)."""
        token = secrets.token_bytes(16)
        uid = tuple(b - 256 if b > 127 else b for b in token) + (0,) * 112
        _listeners[_address(uid)] = (os.getpid(), Listener(_address(uid), family="AF_UNIX",
                                                           backlog=256))
        return uid

    def _group() -> list[tuple[NcclCommunicator, dict[str, Any], int]]:
        calls = getattr(_local, "calls", None)
        if calls is None:
            calls = _local.calls = []
            _local.depth = 0
        return calls

    def groupStart() -> None:
        _group()
        _local.depth += 1

    def groupEnd() -> None:
        calls = _group()
        if _local.depth == 0:
            raise NcclError(5, "groupEnd() without groupStart()")
        _local.depth -= 1
        if _local.depth:
            return
        _local.calls = []
        by_comm: dict[int, list[tuple[NcclCommunicator, dict[str, Any], int]]] = {}
        for entry in calls:
            by_comm.setdefault(id(entry[0]), []).append(entry)
        for entries in by_comm.values():
            comm, stream = entries[0][0], entries[0][2]
            p2p = [c for _, c, _ in entries if c["name"] in ("send", "recv")]
            for _, c, s in entries:
                if c["name"] not in ("send", "recv"):
                    comm._submit("coll", [c], s)
            if p2p:
                comm._submit("p2p", p2p, stream)

    class NcclCommunicator:
        """One rank of a communicator; `NcclCommunicator(ndev, commId, rank)` waits, as
        ncclCommInitRank does, until all `ndev` ranks have joined."""

        def __init__(self, ndev: int, commId: tuple, rank: int) -> None:
            if not isinstance(ndev, int) or not isinstance(rank, int):
                raise TypeError("an integer is required")
            if not isinstance(commId, tuple):
                raise TypeError(f"Argument 'commId' has incorrect type (expected tuple, got "
                                f"{type(commId).__name__})")  # fmt: skip
            assert len(commId) == NCCL_UNIQUE_ID_BYTES
            if not 0 <= rank < ndev:
                raise NcclError(4, f"rank {rank} is outside 0..{ndev - 1}")
            address = _address(commId)
            maker, listener = _listeners.pop(address, (0, None))
            if listener is not None and maker == os.getpid():  # not a forked copy
                hub = _hub.Hub(listener)
                hub.start(ndev)
            self._rank, self._size, self._device = rank, ndev, _current_device()
            self._lock = threading.Lock()
            self._inflight: dict[int, tuple[streams.Work, list[dict[str, Any]]]] = {}
            self._ids = 0
            self._seq = 0
            self._error: str | None = None
            self._closed: str | None = None
            deadline = time.monotonic() + CONNECT_SECONDS
            while True:
                try:
                    self._conn = Client(address, family="AF_UNIX")
                    break
                except (FileNotFoundError, ConnectionRefusedError, BlockingIOError):
                    if time.monotonic() > deadline:
                        raise NcclError(2, "no rank made this unique id's hub") from None
                    time.sleep(0.01)
            self._conn.send(("hello", rank, ndev, os.getpid()))
            reply = self._conn.recv()
            if reply[0] != "ready":
                raise NcclError(5, reply[1])
            threading.Thread(target=self._read, name="nccl-double-reader", daemon=True).start()

        @property
        def comm(self) -> int:
            return 0 if self._closed else id(self)

        def device_id(self) -> int:
            return self._device

        def rank_id(self) -> int:
            return self._rank

        def size(self) -> int:
            return self._size

        # --- the calls -----------------------------------------------------------------

        def allReduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int,
                      op: int, stream: int) -> None:  # fmt: skip
            self._call("allReduce", stream, count, datatype, op=op, send=sendbuf, recv=recvbuf)

        def reduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int,
                   root: int, stream: int) -> None:  # fmt: skip
            recv = recvbuf if self._rank == root else None
            self._call("reduce", stream, count, datatype, op=op, root=root, send=sendbuf,
                       recv=recv)  # fmt: skip

        def broadcast(self, sendbuff: int, recvbuff: int, count: int, datatype: int, root: int,
                      stream: int) -> None:  # fmt: skip
            send = sendbuff if self._rank == root else None
            self._call("broadcast", stream, count, datatype, root=root, send=send, recv=recvbuff)

        def bcast(self, buff: int, count: int, datatype: int, root: int, stream: int) -> None:
            self.broadcast(buff, buff, count, datatype, root, stream)

        def reduceScatter(self, sendbuf: int, recvbuf: int, recvcount: int,
                          datatype: int, op: int, stream: int) -> None:  # fmt: skip
            self._call("reduceScatter", stream, recvcount, datatype, op=op, send=sendbuf,
                       recv=recvbuf, send_count=recvcount * self._size)  # fmt: skip

        def allGather(self, sendbuf: int, recvbuf: int, count: int, datatype: int,
                      stream: int) -> None:  # fmt: skip
            self._call("allGather", stream, count, datatype, send=sendbuf, recv=recvbuf,
                       recv_count=count * self._size)  # fmt: skip

        def send(self, sendbuf: int, count: int, datatype: int, peer: int, stream: int) -> None:
            self._call("send", stream, count, datatype, peer=peer, send=sendbuf)

        def recv(self, recvbuf: int, count: int, datatype: int, peer: int, stream: int) -> None:
            self._call("recv", stream, count, datatype, peer=peer, recv=recvbuf)

        def check_async_error(self) -> None:
            if self._error is not None:
                raise NcclError(6, self._error)

        def abort(self) -> None:
            """Drops the calls in flight (their buffers are never written)."""
            self._close("abort")

        def destroy(self) -> None:
            """Lets the calls in flight finish, then leaves."""
            if self._closed:
                return
            for work, _ in list(self._inflight.values()):
                work.done.wait()
            self._close("destroy")

        # --- the machinery -------------------------------------------------------------

        def _call(self, name: str, stream: int, count: int, datatype: int, *, op: Any = None,
                  root: Any = None, peer: Any = None, send: Any = None, recv: Any = None,
                  send_count: int | None = None,
                  recv_count: int | None = None) -> None:  # fmt: skip
            if self._closed:
                raise NcclError(4, f"{name}: the communicator was {self._closed}ed")
            for arg, value in (("count", count), ("datatype", datatype), ("stream", stream)):
                if not isinstance(value, int):
                    raise TypeError(f"{name}: {arg} must be an int, got {type(value).__name__}")
            if datatype not in _hub.DTYPES:
                raise NcclError(4, f"{name}: datatype {datatype} is not one this double reduces "
                                   f"(NCCL's int8..float64)")  # fmt: skip
            if op is not None and op not in _hub.OP_NAMES:
                raise NcclError(4, f"{name}: op {op} is not an NCCL reduction")
            for arg, value in (("root", root), ("peer", peer)):
                if value is not None and not 0 <= value < self._size:
                    last = self._size - 1
                    raise NcclError(4, f"{name}: {arg} {value} is not a rank of 0..{last}")
            if peer == self._rank:
                raise NcclError(4, f"{name}: peer {peer} is this rank")
            for arg, ptr in (("sendbuf", send), ("recvbuf", recv)):
                where = None if ptr is None else memory.device_of(ptr)
                if where is not None and where != self._device:
                    raise NcclError(4, f"{name}: {arg} is on GPU {where} but the communicator "
                                       f"is on GPU {self._device} (on a GPU: invalid argument, "
                                       f"or an illegal memory access in the kernel)")  # fmt: skip
            try:
                target = streams.by_handle(stream)
            except ValueError as exc:
                raise NcclError(1, f"{name}: {exc}") from None
            size = _hub.np.dtype(_hub.DTYPES[datatype]).itemsize
            data = None
            if send is not None:
                data = ctypes.string_at(send, (send_count or count) * size) if count else b""
            call = {"name": name, "count": count, "dtype": datatype, "op": op, "root": root,
                    "peer": peer, "data": data, "recv": recv,
                    "recv_bytes": (recv_count or count) * size}  # fmt: skip
            if getattr(_local, "depth", 0):
                _group().append((self, call, target))
                return
            self._submit("p2p" if name in ("send", "recv") else "coll", [call], target)

        def _submit(self, kind: str, calls: list[dict[str, Any]], stream: Any) -> None:
            with self._lock:
                self._ids += 1
                self._seq += 1
                ident, seq = self._ids, self._seq
            wire = [{k: v for k, v in c.items() if k not in ("recv", "recv_bytes")} for c in calls]
            item = {"id": ident, "seq": seq, "kind": kind, "calls": wire}

            def start(work: streams.Work) -> None:
                if self._error is not None or self._closed:
                    work.finish(self._error or "aborted")
                    return
                try:
                    with self._lock:
                        self._conn.send(("item", item))
                except (OSError, ValueError):
                    work.finish("the communicator's connection closed")

            work = streams.Work(start, calls[0]["name"])
            self._inflight[ident] = (work, calls)
            stream.enqueue(work)

        def _read(self) -> None:
            try:
                while True:
                    msg = self._conn.recv()
                    if msg[0] == "done":
                        entry = self._inflight.pop(msg[1], None)
                        if entry is None:
                            continue
                        work, calls = entry
                        work.finish(apply=_writer(calls, msg[2]))
                    elif msg[0] == "fatal":
                        self._error = msg[1]
                        self._fail_all(msg[1])
            except (EOFError, OSError, ValueError, TypeError):  # TypeError: closed by abort()
                if not self._closed and self._error is None:
                    # the process that hosts the meeting point exited: NCCL reports a peer
                    # that vanished as an asynchronous error too (ncclRemoteError)
                    self._error = "the rank that made the unique id exited (remote error)"
                self._fail_all((self._closed and f"communicator {self._closed}ed") or "hub gone")

        def _fail_all(self, why: str) -> None:
            for ident in list(self._inflight):
                entry = self._inflight.pop(ident, None)
                if entry is not None:
                    entry[0].finish(why)

        def _close(self, mode: str) -> None:
            if self._closed:
                return
            self._closed = mode
            log = os.environ.get("CUPY_DOUBLE_LOG")
            if log:
                with open(log, "a") as f:
                    f.write(f"{self._rank} {mode}\n")
            if mode == "destroy":
                with self._lock, contextlib.suppress(OSError, ValueError):
                    self._conn.send(("bye",))
            self._conn.close()
            self._fail_all(f"communicator {mode}ed")

        def __del__(self) -> None:
            pass

    def _writer(calls: list[dict[str, Any]], payloads: list[Any]) -> Any:
        receiving = [c for c in calls if c["recv"] is not None]
        if calls[0]["name"] not in ("send", "recv"):
            payloads = payloads if receiving else []

        def write() -> None:
            for c, data in zip(receiving, payloads, strict=False):
                if data is not None:
                    ctypes.memmove(c["recv"], data, min(len(data), c["recv_bytes"]))

        return write
