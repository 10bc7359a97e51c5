"""Streams and events of the CuPy stand-in, modelled where NCCL's correctness depends on it.

Work on a stream (an NCCL call of the double, a `busy` stand-in for a long kernel) runs in
issue order: an item starts only when the one before it on the same stream has finished,
as kernels do. Its results reach memory only when the stream, or an event recorded after
it, is synchronized, or when this thread's current stream is touched by a cupy operation:
so reading a buffer through another stream than the one the collective ran on sees the
old bytes, as it may on a GPU. Stream handle 0 is the legacy default stream (one for the
process); 2 (`runtime.streamPerThread`) is the calling thread's own default stream; the
default is the latter when CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1, as in CuPy.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from typing import Any

from . import runtime

_ids = itertools.count(0x1000, 0x10)
_registry: dict[int, Stream] = {}
_local = threading.local()


class Work:
    """One item of stream work; `start` is called once the item before it has finished."""

    def __init__(self, start: Callable[[Work], None], what: str) -> None:
        self.what = what
        self._start = start
        self._lock = threading.Lock()
        self._then: list[Callable[[], None]] = []
        self.done = threading.Event()
        self.error: str | None = None
        self._apply: Callable[[], None] | None = None

    def begin(self) -> None:
        self._start(self)

    def finish(self, error: str | None = None, apply: Callable[[], None] | None = None) -> None:
        with self._lock:
            if self.done.is_set():
                return
            self.error, self._apply = error, apply
            self.done.set()
            then, self._then = self._then, []
        for fn in then:
            fn()

    def after(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if not self.done.is_set():
                self._then.append(fn)
                return
        fn()

    def land(self) -> None:
        """Wait for the item and write its results to memory (once)."""
        self.done.wait()
        with self._lock:
            apply, self._apply = self._apply, None
        if apply is not None:
            apply()


class Stream:
    """A CUDA stream of the stand-in (`ptr` is its handle)."""

    null: Stream
    ptds: Stream

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False) -> None:
        self.ptr = 0 if null else runtime.streamPerThread if ptds else next(_ids)
        self.non_blocking = non_blocking
        self._lock = threading.Lock()
        self._pending: list[Work] = []
        self._issued = threading.Condition()
        self._count = 0
        self._records = 0
        if not (null or ptds):
            _registry[self.ptr] = self

    def concrete(self) -> Stream:
        """This stream, or for the per-thread default stream the calling thread's own."""
        if self.ptr != runtime.streamPerThread:
            return self
        own = getattr(_local, "ptds", None)
        if own is None:
            own = _local.ptds = Stream()
        return own

    def enqueue(self, work: Work) -> None:
        s = self.concrete()
        with s._lock:
            before = s._pending[-1] if s._pending else None
            s._pending.append(work)
        with s._issued:
            s._count += 1
            s._issued.notify_all()
        if before is None:
            work.begin()
        else:
            before.after(work.begin)

    def pending(self) -> list[Work]:
        s = self.concrete()
        with s._lock:
            return list(s._pending)

    def land(self, items: list[Work] | None = None) -> None:
        s = self.concrete()
        items = s.pending() if items is None else items
        for w in items:
            w.land()
        with s._lock:
            s._pending = [w for w in s._pending if w not in items]

    def synchronize(self) -> None:
        self.land()

    def query(self) -> bool:
        return all(w.done.is_set() for w in self.pending())

    def wait_event(self, event: Event) -> None:
        items = list(event._items)

        def start(work: Work) -> None:
            left = [len(items)]
            lock = threading.Lock()

            def one() -> None:
                with lock:
                    left[0] -= 1
                    last = left[0] == 0
                if last:
                    work.finish(apply=lambda: [w.land() for w in items] and None)

            if not items:
                work.finish()
            for w in items:
                w.after(one)

        self.enqueue(Work(start, "wait_event"))

    def record(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def use(self) -> Stream:
        stack = _stack()
        if stack:
            stack[-1] = self
        else:
            stack.append(self)
        return self

    def __enter__(self) -> Stream:
        _stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _stack().pop()


Stream.null = Stream(null=True)
Stream.ptds = Stream(ptds=True)


class Event:
    """Marks the work issued on a stream so far; synchronize() waits for that work only."""

    def __init__(self, block: bool = False, disable_timing: bool = False,
                 interprocess: bool = False) -> None:  # fmt: skip
        self._items: list[Work] = []
        self._stream: Stream | None = None

    def record(self, stream: Stream | None = None) -> None:
        s = (stream or get_current_stream()).concrete()
        self._stream, self._items = s, s.pending()
        with s._issued:
            s._records += 1
            s._issued.notify_all()

    def synchronize(self) -> None:
        if self._stream is not None:
            self._stream.land(self._items)

    def query(self) -> bool:
        return all(w.done.is_set() for w in self._items)

    @property
    def done(self) -> bool:
        return self.query()


def _stack() -> list[Stream]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def get_current_stream(device_id: int = -1) -> Stream:
    stack = _stack()
    if stack:
        return stack[-1]
    per_thread = os.environ.get("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM") == "1"
    return Stream.ptds if per_thread else Stream.null


def by_handle(ptr: int) -> Stream:
    """The stream an NCCL call names by handle, as the calling thread sees it."""
    if ptr == 0:
        return Stream.null
    if ptr == runtime.streamPerThread:
        return Stream.ptds.concrete()
    stream = _registry.get(int(ptr))
    if stream is None:
        raise ValueError(f"stream handle {ptr:#x} is not a stream of this process")
    return stream


def flush_current() -> None:
    """Land the work of this thread's current stream (a cupy operation touches memory)."""
    s = get_current_stream().concrete()
    if s._pending:
        s.land()


def busy(seconds: float, stream: Stream | None = None) -> None:
    """A kernel that runs `seconds` on `stream` (the current one by default)."""

    def start(work: Work) -> None:
        threading.Timer(seconds, work.finish).start()

    (stream or get_current_stream()).enqueue(Work(start, f"busy {seconds} s"))


def wait_issued(stream: Stream, count: int, timeout: float, records: int = 0) -> bool:
    """Whether, within `timeout`, `count` items were issued to `stream` and `records` events
    recorded on it (a test awaits another thread's issue instead of sleeping)."""
    s = stream.concrete()
    with s._issued:
        return s._issued.wait_for(lambda: s._count >= count and s._records >= records, timeout)
