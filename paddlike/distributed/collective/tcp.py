"""A full mesh of TCP connections between the ranks of one group, and the engine that moves
many messages at once over it (sends and receives overlapped, one deadline).

Setup: every rank listens on its own host, publishes host:port and a nonce through the
store; the higher rank of each pair connects to the lower one and proves it belongs to
the job by sending the group's nonce (read from the authenticated store).

Each message is a 16-byte header, then the payload. The header carries the operation,
the pair's message count and the payload size, so two ranks that called different
collectives (or with different sizes) get an error naming both calls instead of garbage.
"""

from __future__ import annotations

import contextlib
import errno
import secrets
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from paddlike import netaddr

from ..store import StoreClient, StoreError, StoreTimeoutError
from ..store.server import listen
from . import keys as K
from .errors import (
    EXIT_BARRIER,
    CollectiveError,
    CollectiveTimeoutError,
    PeerExitedError,
    peer_left,
    size_mismatch,
)

__all__ = ["Mesh", "Recv", "Send"]

HEADER = struct.Struct("<IIQ")  # opcode, per-pair sequence number, payload bytes
_HELLO = struct.Struct("<16sI")  # nonce, rank
SOCK_BUF = 4 << 20
IO_CHUNK = 4 << 20

OPCODES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
    "reduce_scatter", "all_to_all", "send", "barrier", EXIT_BARRIER,
)  # fmt: skip
OPCODE = {name: i + 1 for i, name in enumerate(OPCODES)}
OPCODE["recv"] = OPCODE["send"]


@dataclass
class Send:
    """A message to `peer` (group rank): header then `payload`."""

    peer: int
    payload: memoryview
    op: str


@dataclass
class Recv:
    """A message from `peer` into `into`; `chunk` is called with (offset, nbytes) as data lands,
    so a reduction can run while the rest is still arriving."""

    peer: int
    into: memoryview
    op: str
    chunk: Callable[[int, int], None] | None = None
    chunk_bytes: int = IO_CHUNK


@dataclass
class _Out:
    bufs: list[memoryview] = field(default_factory=list)


@dataclass
class _In:
    items: list[Recv] = field(default_factory=list)
    header: bytearray = field(default_factory=lambda: bytearray(HEADER.size))
    got_header: int = 0
    got: int = 0
    reported: int = 0


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCK_BUF)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCK_BUF)


class Mesh:
    """Connections from this rank to every other rank of a group (indexed by group rank)."""

    def __init__(self, rank: int, global_ranks: Sequence[int], socks: dict[int, socket.socket]):
        self.rank = rank
        self.global_ranks = list(global_ranks)
        self.size = len(self.global_ranks)
        self.socks = socks
        self._send_seq = dict.fromkeys(socks, 0)
        self._recv_seq = dict.fromkeys(socks, 0)
        for sock in socks.values():
            sock.setblocking(False)

    # --- setup -------------------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        store: StoreClient,
        prefix: str,
        rank: int,
        global_ranks: Sequence[int],
        host: str,
        deadline: float,
    ) -> Mesh:
        """Build the mesh; every rank of the group calls this with the same prefix."""
        n = len(global_ranks)
        if n == 1:
            return cls(rank, global_ranks, {})
        listener = listen(host, 0, backlog=n)  # in the host's family: IPv4 or IPv6
        socks: dict[int, socket.socket] = {}
        try:
            return cls._connect(store, prefix, rank, global_ranks, host, deadline, listener, socks)
        except StoreError as exc:
            for s in socks.values():
                s.close()
            hint = (
                "did every rank of the world call new_group / init_parallel_env in the same order?"
                if isinstance(exc, StoreTimeoutError)
                else "the runtime store on rank 0 went away (did rank 0 exit or destroy the "
                "process group?)"
            )
            raise CollectiveTimeoutError(
                f"setting up group {prefix.rsplit('/', 1)[-1]} (ranks {list(global_ranks)}): "
                f"{exc}; {hint}"
            ) from None
        finally:
            listener.close()

    @classmethod
    def _connect(cls, store: StoreClient, prefix: str, rank: int, global_ranks: Sequence[int],
                 host: str, deadline: float, listener: socket.socket,
                 socks: dict[int, socket.socket]) -> Mesh:  # fmt: skip
        n = len(global_ranks)
        try:
            port = listener.getsockname()[1]
            if rank == 0:
                store.set(K.mesh_nonce(prefix), secrets.token_bytes(16))
            nonce = store.get(K.mesh_nonce(prefix), timeout=_left(deadline))
            store.set(K.mesh_address(prefix, rank), netaddr.join(host, port))
            for peer in range(rank):
                addr = store.get(K.mesh_address(prefix, peer), timeout=_left(deadline)).decode()
                socks[peer] = _dial(addr, nonce, rank, deadline, global_ranks[peer])
            while len(socks) < n - 1:
                listener.settimeout(_left(deadline))
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    missing = [global_ranks[p] for p in range(rank + 1, n) if p not in socks]
                    raise CollectiveTimeoutError(
                        f"init: ranks {missing} did not connect to rank {global_ranks[rank]} "
                        f"before the deadline"
                    ) from None
                peer = _accept_hello(conn, nonce, n, deadline)
                if peer is None or peer <= rank or peer in socks:
                    conn.close()
                    continue
                socks[peer] = conn
        except BaseException:
            for s in socks.values():
                s.close()
            raise
        for s in socks.values():
            _tune(s)
        return cls(rank, global_ranks, socks)

    def close(self) -> None:
        for sock in self.socks.values():
            with contextlib.suppress(OSError):
                sock.close()
        self.socks = {}

    # --- liveness ----------------------------------------------------------------------

    def peer_closed(self, peer: int) -> bool:
        """True when `peer`'s end is closed (its process exited); pending data means alive."""
        sock = self.socks.get(peer)
        if sock is None:
            return False
        try:
            return sock.recv(1, socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    # --- moving bytes ------------------------------------------------------------------

    def exchange(self, sends: Sequence[Send], recvs: Sequence[Recv], deadline: float, what: str):
        """Run all `sends` and `recvs` concurrently; per peer, in list order. Raises an error
        naming the peer on EOF, a wrong header, or the deadline."""
        outs: dict[int, _Out] = {}
        for s in sends:
            seq = self._send_seq[s.peer]
            self._send_seq[s.peer] = seq + 1
            hdr = HEADER.pack(OPCODE[s.op], seq & 0xFFFFFFFF, s.payload.nbytes)
            bufs = outs.setdefault(s.peer, _Out()).bufs
            if s.payload.nbytes <= 65536:
                bufs.append(memoryview(hdr + s.payload.cast("B").tobytes()))
            else:
                bufs.append(memoryview(hdr))
                bufs.append(s.payload.cast("B"))
        ins: dict[int, _In] = {}
        for r in recvs:
            ins.setdefault(r.peer, _In()).items.append(r)
        poller: select.poll | None = None
        while outs or ins:
            for peer in list(outs):
                if self._pump_out(peer, outs[peer], what):
                    del outs[peer]
            for peer in list(ins):
                if self._pump_in(peer, ins[peer], what):
                    del ins[peer]
            if not (outs or ins):
                break
            if poller is None:
                poller = select.poll()
            events: dict[int, int] = {}
            for peer in outs:
                events[self.socks[peer].fileno()] = select.POLLOUT
            for peer in ins:
                fd = self.socks[peer].fileno()
                events[fd] = events.get(fd, 0) | select.POLLIN
            registered = dict(events)
            for fd, ev in registered.items():
                poller.register(fd, ev)
            left = deadline - time.monotonic()
            timed_out = left <= 0 or not poller.poll(min(left, 3600.0) * 1000.0)
            if timed_out and deadline - time.monotonic() <= 0:
                waiting = sorted({self.global_ranks[p] for p in [*outs, *ins]})
                who = ("rank " if len(waiting) == 1 else "ranks ") + ", ".join(map(str, waiting))
                raise CollectiveTimeoutError(
                    f"{what}: timed out waiting for {who} "
                    f"(the operation's deadline passed; did they call {what} too?)"
                )
            for fd in registered:
                poller.unregister(fd)

    def _peer_gone(self, peer: int, what: str, exc: BaseException | None = None) -> CollectiveError:
        detail = f" ({exc})" if exc else ""
        return PeerExitedError(
            f"{what}: rank {self.global_ranks[peer]} closed its connection{detail}; "
            f"its process exited or failed — see its log",
            peer=self.global_ranks[peer],
        )

    def _pump_out(self, peer: int, out: _Out, what: str) -> bool:
        sock = self.socks[peer]
        while out.bufs:
            buf = out.bufs[0]
            try:
                n = sock.send(buf[:IO_CHUNK])
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as exc:
                raise self._peer_gone(peer, what, exc) from None
            if n == len(buf):
                out.bufs.pop(0)
            else:
                out.bufs[0] = buf[n:]
        return True

    def _pump_in(self, peer: int, st: _In, what: str) -> bool:
        sock = self.socks[peer]
        while st.items:
            item = st.items[0]
            try:
                if st.got_header < HEADER.size:
                    n = sock.recv_into(memoryview(st.header)[st.got_header :])
                    if n == 0:
                        raise self._peer_gone(peer, what)
                    st.got_header += n
                    if st.got_header == HEADER.size:
                        self._check_header(peer, item, what, st.header)
                    continue
                total = item.into.nbytes
                if st.got < total:
                    view = item.into.cast("B")
                    n = sock.recv_into(view[st.got : st.got + IO_CHUNK])
                    if n == 0:
                        raise self._peer_gone(peer, what)
                    st.got += n
                    if item.chunk is not None:
                        self._report(item, st, final=st.got == total)
                    if st.got < total:
                        continue
            except (BlockingIOError, InterruptedError):
                return False
            except ConnectionError as exc:
                raise self._peer_gone(peer, what, exc) from None
            st.items.pop(0)
            st.got_header = st.got = st.reported = 0
        return True

    @staticmethod
    def _report(item: Recv, st: _In, final: bool) -> None:
        step = item.chunk_bytes
        while st.got - st.reported >= step or (final and st.got > st.reported):
            n = min(step, st.got - st.reported)
            assert item.chunk is not None
            item.chunk(st.reported, n)
            st.reported += n

    def _check_header(self, peer: int, item: Recv, what: str, raw: bytearray) -> None:
        opcode, seq, nbytes = HEADER.unpack(raw)
        expected_seq = self._recv_seq[peer] & 0xFFFFFFFF
        self._recv_seq[peer] += 1
        want = OPCODE[item.op]
        if opcode != want and opcode == OPCODE[EXIT_BARRIER]:
            raise peer_left(what, self.global_ranks[peer], item.op)
        if opcode != want or seq != expected_seq or nbytes != item.into.nbytes:
            theirs = OPCODES[opcode - 1] if 0 < opcode <= len(OPCODES) else f"opcode {opcode}"
            note = "" if seq == expected_seq else f" (message #{seq}, expected #{expected_seq})"
            raise size_mismatch(
                what, self.global_ranks[peer], theirs, nbytes, item.op, item.into.nbytes, note
            )


def _left(deadline: float) -> float:
    return max(0.001, deadline - time.monotonic())


def _dial(addr: str, nonce: bytes, rank: int, deadline: float, peer_global: int) -> socket.socket:
    host, port = netaddr.split(addr)
    delay = 0.01
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=_left(deadline))
            sock.settimeout(_left(deadline))
            sock.sendall(_HELLO.pack(nonce, rank))
            sock.settimeout(None)
            return sock
        except OSError as exc:
            if time.monotonic() + delay >= deadline:
                raise CollectiveTimeoutError(
                    f"init: could not connect to rank {peer_global} at {addr} before the "
                    f"deadline ({exc})"
                ) from None
            if exc.errno not in (errno.ECONNREFUSED, errno.ECONNRESET, None) and not isinstance(
                exc, TimeoutError
            ):
                raise CollectiveError(
                    f"init: connecting to rank {peer_global} at {addr}: {exc}"
                ) from None
            time.sleep(delay)  # the peer's listener is published before it accepts; retry
            delay = min(delay * 2, 0.2)


def _accept_hello(conn: socket.socket, nonce: bytes, n: int, deadline: float) -> int | None:
    try:
        conn.settimeout(min(_left(deadline), 10.0))
        raw = b""
        while len(raw) < _HELLO.size:
            chunk = conn.recv(_HELLO.size - len(raw))
            if not chunk:
                return None
            raw += chunk
        conn.settimeout(None)
    except OSError:
        return None
    got_nonce, peer = _HELLO.unpack(raw)
    if not secrets.compare_digest(got_nonce, nonce) or not 0 <= peer < n:
        return None
    return peer
