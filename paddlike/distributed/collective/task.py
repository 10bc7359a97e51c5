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


class OpQueue:
    """Runs one communicator's operations in submission order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], Task] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._last: Task | None = None  # the latest queued operation, until it is done
        self._lock = threading.Lock()

    def wait_idle(self) -> bool:
        """Before a synchronous operation runs in the caller's thread: wait for the
        operations queued before it; whether there were any."""
        last = self._last  # one read: None (the common case) or a task that may be done
        if last is None or last._done.is_set():
            return False
        last._done.wait()
        return True

    def submit(self, fn: Callable[[], None], what: str) -> Task:
        """Queue an asynchronous operation; its Task says when it is done."""
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
            with self._lock:
                if self._last is task:
                    self._last = None

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=5.0)
