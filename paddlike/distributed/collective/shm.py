"""Shared-memory segments for ranks on one host, and the step counters that order access to them.

Each rank owns one segment (a file in /dev/shm, mapped by every rank of the group and
unlinked as soon as all have mapped it, so a crash leaves nothing behind): a small
header, then two data buffers used alternately. Synchronisation is one counter per
rank: a rank posts step s after its writes for s, and reads a peer's data for s after
the peer's counter reached s. Waiting spins for a few microseconds (both ranks usually
arrive together), then sleeps on a futex with short slices, between which it checks
that the peers are still alive and the deadline has not passed.

A busy step never enters the kernel: a rank about to sleep on a peer's counter raises its
own flag in that peer's header first, and a rank posting a step calls futex_wake only when
one of the flags in its header is up. Both sides put a full memory barrier between their
store and their load (Dekker's pattern), so a sleeper that missed the counter is always
woken: no lost wake-up, and no system call per step while every rank is running.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import platform
import secrets
import struct
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from ..store import StoreClient
from . import keys as K
from .errors import (
    EXIT_BARRIER,
    CollectiveError,
    CollectiveTimeoutError,
    PeerExitedError,
    peer_left,
)

__all__ = ["ShmArena", "shm_available"]

SHM_DIR = "/dev/shm"
HEADER_BYTES = 4096
# Op descriptor slots in the header (2, used alternately by consecutive ops): opcode u32, pad,
# nbytes u64 at offsets 64 and 80.
_DESC = struct.Struct("<IIQ")
_DESC_OFFSETS = (64, 80)
# Two u64 an op may publish beside its descriptor (all_gather: the bytes this rank sends and a
# fingerprint of its output slots' sizes), by the same parity, at offsets 96 and 112.
_EXTRA = struct.Struct("<QQ")
_EXTRA_OFFSETS = (96, 112)
# One byte per rank from offset 1024: rank j sleeps on this segment's counter.
_SLEEPERS = 1024
MAX_SLEEPER_FLAGS = HEADER_BYTES - _SLEEPERS
SPIN_SECONDS = 30e-6  # the most a wait spins
MIN_SPIN_SECONDS = 2e-6
SLICE_SECONDS = 0.05

# Acquiring and releasing an uncontended lock is a locked read-modify-write (a full barrier on
# x86, acquire+release elsewhere) for ~50 ns: the fence between a store and the next load.
_FENCE = threading.Lock()


def _fence() -> None:
    _FENCE.acquire()
    _FENCE.release()


_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _syscall = _libc.syscall
    _syscall.restype = ctypes.c_long
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms poll instead
    _syscall = None


def _futex_wait(addr: int, expected: int, seconds: float) -> None:
    if _syscall is None or _SYS_FUTEX is None:
        time.sleep(min(seconds, 0.001))
        return
    ts = _Timespec(int(seconds), int((seconds % 1.0) * 1e9))
    _syscall(
        ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(_FUTEX_WAIT),
        ctypes.c_uint(expected), ctypes.byref(ts), None, ctypes.c_int(0),
    )  # fmt: skip


def _futex_wake(addr: int) -> None:
    if _syscall is None or _SYS_FUTEX is None:
        return
    _syscall(
        ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(_FUTEX_WAKE),
        ctypes.c_int(0x7FFFFFFF), None, None, ctypes.c_int(0),
    )  # fmt: skip


def shm_available() -> bool:
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


class _Segment:
    def __init__(self, path: str, size: int, create: bool) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.path = path
        self.bytes = np.frombuffer(self.mm, dtype=np.uint8)
        self.counter = memoryview(self.mm).cast("I")[:1]  # type: ignore[index]
        self.sleepers = memoryview(self.mm)[_SLEEPERS:HEADER_BYTES]
        # The first 8 flags as one word: ranks 0-7 ask for a wake-up in one load, not a compare.
        self.first_sleepers = memoryview(self.mm)[_SLEEPERS : _SLEEPERS + 8].cast("Q")  # type: ignore[index]
        self.addr = self.bytes.ctypes.data

    def close(self) -> None:
        self.counter.release()
        self.sleepers.release()
        self.first_sleepers.release()
        del self.bytes
        with contextlib.suppress(BufferError):
            self.mm.close()


class ShmArena:
    """The group's segments: `data(k, b)` is rank k's buffer b; `sync()` is one step."""

    def __init__(
        self,
        store: StoreClient,
        prefix: str,
        rank: int,
        global_ranks: Sequence[int],
        buffer_bytes: int,
        deadline: float,
        peer_closed: Callable[[int], bool],
    ) -> None:
        self.rank, self.size = rank, len(global_ranks)
        self.global_ranks = list(global_ranks)
        self.buffer_bytes = buffer_bytes
        self._peer_closed = peer_closed
        self.step = 0
        self.ops = 0
        self._use_step: int | None = None  # first step posted in the latest use
        # How long a wait spins before it sleeps: doubled after a wait shorter than
        # SPIN_SECONDS, halved after a longer one, so ranks that share their cores with others
        # (oversubscribed) stop burning the time their peers need, and ranks on cores of
        # their own keep spinning.
        self._spin = SPIN_SECONDS
        self._no_sleepers = bytes(min(self.size, MAX_SLEEPER_FLAGS))
        self._always_wake = self.size > MAX_SLEEPER_FLAGS  # ranks past the flags share one
        self._few = self.size <= 8  # every flag in the header's first word
        self._use_seen = False  # every peer is known to have posted the use's first step
        seg_bytes = HEADER_BYTES + 2 * buffer_bytes
        path = os.path.join(SHM_DIR, f"paddlike-{os.getpid()}-{secrets.token_hex(6)}")
        own = _Segment(path, seg_bytes, create=True)
        self.segs: list[_Segment | None] = [None] * self.size
        self.segs[rank] = own
        try:
            store.set(K.shm_file(prefix, rank), path)
            for k in range(self.size):
                if k != rank:
                    left = max(0.001, deadline - time.monotonic())
                    peer_path = store.get(K.shm_file(prefix, k), timeout=left).decode()
                    self.segs[k] = _Segment(peer_path, seg_bytes, create=False)
            # Everyone has mapped everything: the names can go (no leak if a rank crashes).
            store.barrier(
                K.shm_mapped(prefix), self.size, timeout=max(0.001, deadline - time.monotonic())
            )
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._views = [
            [s.bytes[HEADER_BYTES + b * buffer_bytes : HEADER_BYTES + (b + 1) * buffer_bytes]
             for b in (0, 1)]
            for s in self.segs if s is not None
        ]  # fmt: skip
        self._typed: dict[tuple[int, int, np.dtype], np.ndarray] = {}
        self._own = own
        self._counters = [s.counter for s in self.segs if s is not None]
        self._peers = [k for k in range(self.size) if k != rank]
        # Per buffer, the latest (dtype, elements, every rank's view of that many): a small
        # operation repeated on arrays of one size slices nothing.
        self._parts: list[tuple[np.dtype | None, int, list[np.ndarray]]] = [(None, 0, [])] * 2

    def close(self) -> None:
        self._views = []
        self._typed.clear()
        self._parts = [(None, 0, [])] * 2
        self._counters = []
        for seg in self.segs:
            if seg is not None:
                seg.close()
        self.segs = []

    def data(self, k: int, buf: int, dtype: np.dtype | None = None) -> np.ndarray:
        view = self._views[k][buf]
        if dtype is None:
            return view
        key = (k, buf, dtype)
        typed = self._typed.get(key)
        if typed is None:  # made once per dtype: small operations call this per rank
            typed = view[: len(view) // dtype.itemsize * dtype.itemsize].view(dtype)
            self._typed[key] = typed
        return typed

    def parts(self, buf: int, dtype: np.dtype, m: int) -> list[np.ndarray]:
        """Every rank's buffer `buf` as its first `m` elements of `dtype`, by rank."""
        cached_dtype, cached_m, views = self._parts[buf]
        if cached_dtype is not dtype or cached_m != m:
            views = [self.data(k, buf, dtype)[:m] for k in range(self.size)]
            self._parts[buf] = (dtype, m, views)
        return views

    # --- ordering ----------------------------------------------------------------------

    # A "use" is one round of a buffer: write it, post, read the peers' buffers. A rank may
    # write its buffer b again (two uses later) only when every peer has finished reading
    # it, i.e. has begun the use in between (posted that use's first step): `begin_use`
    # waits for that, so ranks need not meet at every step, only where they read.
    # Every rank posts the same number of steps per use, so step numbers line up.

    def begin_use(self, deadline: float, what: str) -> None:
        """Before writing this rank's next buffer."""
        use = self._use_step
        if use is not None and not self._use_seen:
            for k in self._peers:
                self._wait(k, use, deadline, what)
        self._use_step = None

    def begin(
        self, opcode: int, nbytes: int, deadline: float, what: str,
        extra: tuple[int, int] | None = None, kind: int = 0,
    ) -> int:  # fmt: skip
        """Start an op (and its first use): publish its descriptor (and `extra`, two u64 the
        peers read with `extra_of`: only an op that publishes them reads them) in one of two
        slots, used alternately; returns the slot. After begin_use, so no peer still reads
        that slot."""
        self.begin_use(deadline, what)
        parity = self.ops & 1
        self.ops += 1
        mm = self._own.mm
        _DESC.pack_into(mm, _DESC_OFFSETS[parity], opcode, kind, nbytes)
        if extra is not None:
            _EXTRA.pack_into(mm, _EXTRA_OFFSETS[parity], *extra)
        return parity

    def extra_of(self, k: int, parity: int) -> tuple[int, int]:
        """What rank k published as `extra` for the op in slot `parity` (after the first sync)."""
        seg = self.segs[k]
        assert seg is not None
        return _EXTRA.unpack_from(seg.mm, _EXTRA_OFFSETS[parity])  # type: ignore[return-value]

    def check(
        self, parity: int, opcode: int, nbytes: int, what: str, names: Sequence[str],
        ranks: Sequence[int] | None = None, kind: int = 0,
    ) -> None:  # fmt: skip
        """After the op's first wait: the ranks waited for published the same descriptor
        (the op, the bytes and, where given, the dtype's code `kind`). A rank that published
        the runtime's exit barrier instead left the job."""
        offset, mine = _DESC_OFFSETS[parity], (opcode, kind, nbytes)
        for k in self._peers if ranks is None else ranks:
            seg = self.segs[k]
            assert seg is not None
            theirs_desc = _DESC.unpack_from(seg.mm, offset)
            if theirs_desc == mine:
                continue
            their_op, _, their_bytes = theirs_desc
            theirs = names[their_op - 1] if 0 < their_op <= len(names) else "?"
            if their_op != opcode and theirs == EXIT_BARRIER:
                raise peer_left(what, self.global_ranks[k], names[opcode - 1])
            if (their_op, their_bytes) != (opcode, nbytes):
                raise CollectiveError(
                    f"{what}: rank {self.global_ranks[k]} called {theirs} with {their_bytes} "
                    f"bytes where this rank called {names[opcode - 1]} with {nbytes} bytes; "
                    f"the ranks called different operations or passed different shapes/dtypes"
                )
            from .checks import dtype_name

            raise CollectiveError(
                f"{what}: rank {self.global_ranks[k]} passed {dtype_name(theirs_desc[1])} data "
                f"where this rank passed {dtype_name(kind)} ({nbytes} bytes each); the ranks "
                "must pass the same dtype (the bytes would be combined as another type)"
            )

    def sync(self, deadline: float, what: str, peers: Sequence[int] | None = None) -> None:
        """Post the next step and wait until `peers` (default: all) have posted it."""
        step = self.step = (self.step + 1) & 0xFFFFFFFF
        if self._use_step is None:
            self._use_step, self._use_seen = step, False
        own = self._own
        own.counter[0] = step
        self._wake_sleepers(own)
        counters = self._counters
        for k in self._peers if peers is None else peers:
            if k != self.rank and ((counters[k][0] - step) & 0xFFFFFFFF) >= 0x80000000:
                self._wait(k, step, deadline, what)
        if peers is None:
            self._use_seen = True  # every peer posted this step, so the use's first too

    def _wake_sleepers(self, own: _Segment) -> None:
        """futex_wake only when a peer has said it sleeps (or may sleep) on our counter."""
        _fence()
        if self._few:
            if own.first_sleepers[0]:
                _futex_wake(own.addr)
        elif self._always_wake or own.sleepers[: len(self._no_sleepers)] != self._no_sleepers:
            _futex_wake(own.addr)

    def _wait(self, k: int, target: int, deadline: float, what: str) -> None:
        seg = self.segs[k]
        assert seg is not None
        ctr = seg.counter

        def reached(v: int) -> bool:
            return ((v - target) & 0xFFFFFFFF) < 0x80000000

        if reached(ctr[0]):
            return
        spin = min(self._spin, SPIN_SECONDS)
        start = time.perf_counter()
        spin_end = start + spin
        while time.perf_counter() < spin_end:
            if reached(ctr[0]):
                self._spin = min(SPIN_SECONDS, spin * 2)
                return
        flag = min(self.rank, MAX_SLEEPER_FLAGS - 1)
        seg.sleepers[flag] = 1
        try:
            self._sleep(seg, reached, k, deadline, what)
        finally:
            seg.sleepers[flag] = 0
        # A wait a full spin would have covered: spin longer; a long one: sleep sooner.
        short = time.perf_counter() - start < SPIN_SECONDS
        self._spin = min(SPIN_SECONDS, spin * 2) if short else max(MIN_SPIN_SECONDS, spin / 2)

    def _sleep(
        self, seg: _Segment, reached: Callable[[int], bool], k: int, deadline: float, what: str
    ) -> None:  # fmt: skip
        """Sleep on rank k's counter (our flag in its header is up) until it is reached."""
        ctr = seg.counter
        while True:
            _fence()
            v = ctr[0]
            if reached(v):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise CollectiveTimeoutError(
                    f"{what}: timed out waiting for rank {self.global_ranks[k]} "
                    f"(the operation's deadline passed; did it call {what.split()[0]} too?)"
                )
            _futex_wait(seg.addr, v, min(left, SLICE_SECONDS))
            if not reached(ctr[0]) and self._peer_closed(k):
                raise PeerExitedError(
                    f"{what}: rank {self.global_ranks[k]} exited (its connection closed) "
                    f"before reaching this step; see its log",
                    peer=self.global_ranks[k],
                )
