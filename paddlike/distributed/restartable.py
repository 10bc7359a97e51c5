"""In-process restarts: `restartable(fn)` runs `fn()` again in the same process when a
peer failed, instead of the launcher starting this process anew.

    python -m paddlike.launch --max_restarts 1 train.py     (train.py:)
        def main():
            init_parallel_env()          # or before restartable(main)
            load_checkpoint(); train()
        paddlike.distributed.restartable(main)

What happens, with paddlike's launcher (PADDLIKE_WARM_DIR set; outside it, or with no
restart left to take, `restartable(fn)` is just `fn()`):

    enter          bind <dir>/<pid>.sock: "this process may be kept"
    a peer fails   the launcher sends PARK_SIGNAL (SIGRTMIN+5) to this process only (its
                   children, a data loader's, keep theirs): RoundInterrupted is raised in
                   the main thread, in the collective in flight or the wait
                   fn() raised: ask the launcher ("raised"); the round's first failure
                   is told "own" (re-raised at once; many nodes: after "wait"), a later
                   one (its collective broke) gets the signal; none within PARK_GRACE:
                   the exception is re-raised
    park           paddlike's groups closed without a last barrier (a peer is gone), torch's
                   process group destroyed (aborted for NCCL); "parked" to the launcher
    adopted        the next round's whole environment arrives as one datagram: os.environ
                   replaced (clear + update, as a fresh process would see it), groups formed
                   before `restartable` formed again for the new round, fn() called again
                   nothing within PADDLIKE_WARM_WAIT seconds: exit 1, one line saying why

The kept process keeps its pid, its imports, its log file (the launcher writes the new
round's header into it) and whatever `fn` left in memory; `fn` should reload its checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from paddlike import contract as C

__all__ = ["PARK_GRACE", "PARK_SIGNAL", "RoundInterrupted", "restartable"]

T = TypeVar("T")
# the groups formed before `restartable`: init_parallel_env's arguments, torch's backend
Formed = tuple[tuple[str, float | None] | None, str | None]

PARK_SIGNAL = signal.SIGRTMIN + C.WARM_PARK_SIGNAL_OFFSET
# fn() raised on its own (a peer's exit broke a collective): how long it waits for the
# launcher's word that the round ends for another process's failure, before it fails itself
PARK_GRACE = 3.0
DEFAULT_WAIT = 600.0  # for the next round's environment, when the launcher gives none
MAX_DATAGRAM = 4 << 20


class RoundInterrupted(BaseException):
    """The launcher ends this round for another process's failure: this process is kept.
    A BaseException, so that a script's `except Exception` does not swallow it."""


class _Parking:
    """This process's side of the launcher's protocol (its socket, the signal)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.path = os.path.join(directory, f"{os.getpid()}.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.sock.bind(self.path)  # the launcher sees this file: the process may be kept
        self.armed = False
        self.previous = signal.signal(PARK_SIGNAL, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.armed:
            self.armed = False  # once: the teardown that follows must not be interrupted
            raise RoundInterrupted(f"the launcher ends the round (signal {signum})")

    def close(self) -> None:
        self.armed = False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # first: the launcher parks only registered processes
        # a park signal already on its way must not end the process (SIGRTMIN+5's default)
        keep = self.previous if self.previous not in (signal.SIG_DFL, None) else signal.SIG_IGN
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(PARK_SIGNAL, keep)
        self.sock.close()

    def parked(self) -> None:
        """Tell the launcher: torn down, waiting for the next round."""
        self.say({"parked": os.getpid()})

    def say(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendto(
                json.dumps(message).encode(), os.path.join(self.directory, "launcher.sock")
            )

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The launcher's next message within `timeout` s (None: none came)."""
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(MAX_DATAGRAM)
        except (TimeoutError, OSError):
            return None
        try:
            message = json.loads(data)
        except ValueError:
            return {}
        return message if isinstance(message, dict) else {}

    def next_environment(self, wait: float) -> dict[str, str]:
        """The next round's environment (SystemExit with one line when none comes)."""
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SystemExit(
                    f"paddlike.distributed.restartable: kept for a restart, but no next round "
                    f"came within {wait:g} s ({C.WARM_WAIT}); exiting"
                )
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(MAX_DATAGRAM)
            except TimeoutError:
                continue
            try:
                env = json.loads(data).get("env")
            except (ValueError, AttributeError):
                continue  # not the launcher's word
            if isinstance(env, dict):
                return {str(k): str(v) for k, v in env.items()}


def _formed() -> Formed:
    """The groups formed now: init_parallel_env's arguments, torch.distributed's backend
    (None: not formed)."""
    ours = theirs = None
    parallel = sys.modules.get("paddlike.distributed.parallel")
    if parallel is not None and parallel.is_initialized():
        ours = parallel.formed_with
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        theirs = str(dist.get_backend())
    return ours, theirs


def _tear_down() -> None:
    """Close this round's groups: paddlike's without a last barrier (a peer is gone),
    torch's destroyed (NCCL's aborted first where torch can: a communicator whose peer died
    cannot be destroyed cleanly)."""
    parallel = sys.modules.get("paddlike.distributed.parallel")
    if parallel is not None and parallel.is_initialized():
        parallel.abandon()
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        abort = getattr(c10d, "_abort_process_group", None)
        if str(dist.get_backend()) == "nccl" and abort is not None:
            with contextlib.suppress(Exception):
                abort()
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def _adopt(env: dict[str, str], formed: Formed) -> None:
    """Become the next round's process: its environment, and the groups formed before
    `restartable` formed again (`fn` forms the others itself)."""
    os.environ.clear()
    os.environ.update(env)
    for name in ("paddlike.distributed.progress", "paddlike.distributed.preempt"):
        module = sys.modules.get(name)
        if module is not None:  # the next heartbeat opens the new round's file
            module._reset_for_tests()
    parallel = sys.modules.get("paddlike.distributed.parallel")
    if parallel is not None:
        parallel.runtime.incarnation = 0  # as a fresh process's: every rank's keys agree
    ours, theirs = formed
    if ours is not None:
        from paddlike.distributed.parallel import init_parallel_env

        init_parallel_env(*ours)  # as the script called it (a new process calls it alike)
    if theirs is not None:
        import torch.distributed as dist

        dist.init_process_group(theirs)


def restartable(fn: Callable[[], T]) -> T:
    """Run `fn()`; when another process of the job fails and the launcher restarts the job,
    run it again in this process for the next round (module docstring). Returns what the
    last `fn()` returned; an exception of `fn`'s own is raised as without `restartable`."""
    if not callable(fn):
        raise TypeError(
            f"restartable(fn): fn must be callable, got {type(fn).__name__} "
            "(pass the function, restartable(main), not its result, restartable(main()))"
        )
    directory = os.environ.get(C.WARM_DIR, "")
    if not directory or not _on_main_thread():
        return fn()
    try:
        parking = _Parking(directory)
    except OSError:  # a path too long for a socket, the directory gone: no in-process restart
        return fn()
    try:
        wait = float(os.environ.get(C.WARM_WAIT, "") or DEFAULT_WAIT)
    except ValueError:
        wait = DEFAULT_WAIT
    formed = _formed()
    try:
        while True:
            try:
                return _run_once(fn, parking)
            except RoundInterrupted as interrupted:
                parking.armed = False
                _forget(interrupted)
            # outside the except clause: no frame of fn's is referenced any more, so that
            # what its collectives held (torch's gloo pairs) is freed with the group
            _tear_down()
            parking.parked()
            _adopt(parking.next_environment(wait), formed)
    finally:
        parking.close()


def _run_once(fn: Callable[[], T], parking: _Parking) -> T:
    """fn() under the park signal; an exception of its own waits for it (`_await_park`)."""
    parking.armed = True
    try:
        result = fn()
    except RoundInterrupted:
        raise
    except (SystemExit, KeyboardInterrupt, GeneratorExit):
        parking.armed = False
        raise
    except BaseException as own:
        _await_park(parking, own)
        raise  # (never reached: _await_park raises)
    parking.armed = False
    return result


def _forget(exc: BaseException | None) -> None:
    """Drop the tracebacks of `exc` and what it was raised in the middle of: their frames
    hold fn's locals (tensors, the collective's work and its process group)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = None
        exc = exc.__context__


def _await_park(parking: _Parking, own: BaseException) -> Any:
    """fn() raised: asks the launcher whether another process failed first. Its park
    signal (RoundInterrupted, raised in the wait), or its answer: "own" (one node, no other
    failure: `own` is raised again at once) or "wait" (many nodes: that long for another
    node's failure to reach it); no answer within PARK_GRACE: `own` raised again."""
    deadline = time.monotonic() + PARK_GRACE
    parking.say({"raised": os.getpid()})
    while (left := deadline - time.monotonic()) > 0:
        answer = parking.receive(left)  # the signal's handler raises RoundInterrupted here
        if answer is None or answer.get("own"):
            break
        wait = answer.get("wait")
        if isinstance(wait, (int, float)):
            deadline = min(deadline, time.monotonic() + float(wait))
    parking.armed = False
    raise own


def _on_main_thread() -> bool:
    """Signals reach only the main thread: elsewhere `restartable` is plain `fn()`."""
    import threading

    return threading.current_thread() is threading.main_thread()
