"""Ordering of operations on one communicator, and the Task handle of `sync_op=False`.

Every rank must run a communicator's operations in the same order, so each
communicator has one FIFO: asynchronous operations run on its worker thread in
submission order, and a synchronous one first waits for those still queued, then runs
in the caller's thread (no thread hop on the latency path).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from .errors import CollectiveError, CollectiveTimeoutError

__all__ = ["OpQueue", "Task"]


class Task:
    """The handle of an asynchronous operation: `wait()` blocks until it is done."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._done = threading.Event()
        self._error: BaseException | None = None

    def _finish(self, error: BaseException | None) -> None:
        self._error = error
        self._done.set()

    def is_completed(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the operation; re-raises its error. The operation has its own deadline,
        so waiting without `timeout` ends too."""
        if not self._done.wait(timeout):
            raise CollectiveTimeoutError(f"{self.what}: not finished after waiting {timeout} s")
        if self._error is not None:
            raise self._error
        return True

    def __repr__(self) -> str:
        state = "done" if self.is_completed() else "pending"
        return f"<Task {self.what} {state}>"


class _Done(Task):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self._done.set()


# A finished synchronous operation's handle never changes: one per name, not an Event per call.
_DONE: dict[str, _Done] = {}


class OpQueue:
    """Runs one communicator's operations in submission order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], Task] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._last: Task | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], None], what: str, sync: bool) -> Task:
        if sync:
            with self._lock:
                last = self._last
            if last is not None and not last.is_completed():
                last._done.wait()
            fn()  # errors propagate to the caller directly
            done = _DONE.get(what)
            if done is None:
                done = _DONE[what] = _Done(what)
            return done
        task = Task(what)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"collective-{self.name}", daemon=True
                )
                self._thread.start()
            self._last = task
            self._queue.put((fn, task))
        return task

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, task = item
            try:
                fn()
            except BaseException as exc:  # handed to the waiter; the thread keeps serving
                task._finish(exc if isinstance(exc, Exception) else CollectiveError(str(exc)))
            else:
                task._finish(None)

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=5.0)
