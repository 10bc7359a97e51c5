"""One event loop over child processes: each child's pidfd (readable once it exited, seen
the moment the kernel reports it), the signal wake-up pipe (`run.signals.signals_to_pipe`),
the caller's other fds, and deadlines. No sleep loop, and no wait without a deadline
where one is due.

Shared by the supervisor (a round's workers, `run.supervisor`) and the cluster starter
(each host's ssh session or pdsh, `cluster.stream`, `cluster.start`): what each event
means is theirs; the loop only says which fds are ready, children's exits first.
"""

from __future__ import annotations

import selectors
import time

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any

EXIT = "exit"  # a child's pidfd: the child exited (not reaped: the owner decides when)
WAKE = "wake"  # the signal wake-up pipe: a byte per signal caught


class Event(NamedTuple):
    """A ready fd, as the caller registered it (`ChildLoop.add`)."""

    kind: str
    payload: Any  # what the caller registered with the fd
    fd: int


class ChildLoop:
    """A selector whose keys carry (kind, payload); `wait` until the nearest deadline.

    `selector` is open to code that registers its own fds with the same (kind, payload)
    data (`run.teewatch`'s inotify descriptor)."""

    def __init__(self, wake_fd: int | None = None) -> None:
        self.selector = selectors.DefaultSelector()
        if wake_fd is not None:
            self.add(wake_fd, WAKE)

    def add(self, fd: int, kind: str, payload: object = None) -> None:
        self.selector.register(fd, selectors.EVENT_READ, (kind, payload))

    def add_child(self, pidfd: int, payload: object) -> None:
        """Watch a child's pidfd (opened by its owner, who also closes it)."""
        self.add(pidfd, EXIT, payload)

    def remove(self, fd: int) -> None:
        self.selector.unregister(fd)

    def __contains__(self, fd: int) -> bool:
        return fd in self.selector.get_map()

    def wait(self, *deadlines: float | None) -> list[Event]:
        """The fds ready by the nearest of `deadlines` (`time.monotonic()` times; None is
        no deadline, and with none at all the wait lasts until an fd is ready), children's
        exits first and the rest in the selector's order."""
        ready = [Event(*key.data, key.fd) for key, _ in self.selector.select(until(*deadlines))]
        return [e for e in ready if e.kind == EXIT] + [e for e in ready if e.kind != EXIT]

    def close(self) -> None:
        """Stop watching every fd (closing them is their owners')."""
        self.selector.close()

    def __enter__(self) -> ChildLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def until(*deadlines: float | None) -> float | None:
    """Seconds from now to the nearest deadline (0 when it passed), None when none is set."""
    due = [d for d in deadlines if d is not None]
    return max(min(due) - time.monotonic(), 0.0) if due else None
