"""`should_stop(step)`: one stop step for every rank of the job after a preemption notice.

A notice (SIGTERM to any node's launcher, Slurm's warning signal) reaches every node's
launcher through the job's store. Each launcher then, for its ranks:

    1. marks their progress files PENDING, then sends each its SIGTERM (which
       `should_stop`'s handler takes as the notice only when the file is marked);
    2. reads where each rank is: the step it waits at in `should_stop`, else one past the
       step it last reported (it may already have passed that one);
    3. publishes its node's furthest position; every node takes the maximum over all nodes:
       the smallest step that no rank of the job has passed;
    4. writes that step into the files and marks them DECIDED (after the SIGTERMs: a rank
       that stopped and exited before its SIGTERM came could die of it at exit).

A rank's `should_stop(step)` (also its heartbeat for `step`) is False while nothing was
marked; at PENDING it waits for the decision; at DECIDED it is `step >= stop step`. So
every rank returns True first at the same step, and False before it.

Both sides put a full memory barrier (a lock's atomic instruction) between their store and
their load: without it a rank's step and the launcher's mark could each miss the other's
store (x86 lets a load pass an earlier store), and that rank would stop one step late.

The fields live in the rank's own progress file (`distributed.progress`), after its live
fields; the file starts zeroed:

    512  int32  state: 0 none, 1 PENDING, 2 DECIDED       (the launcher writes)
    520  int64  stop step                                   (the launcher, before DECIDED)
    528  int64  the step this rank waits at, plus 1; 0: not waiting   (the rank)

A rank whose progress file did not exist yet at the notice (it had not called
`should_stop` or `heartbeat`) reads the node's notice file, `.progress/notice` ("pending",
then the stop step; its launcher's pid), once, when it creates its file.

Stdlib only: the launcher imports it (lazily, at a notice).
"""

from __future__ import annotations

import contextlib
import mmap
import operator
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from paddlike.distributed import progress as _progress

__all__ = ["should_stop"]

NOTICE_OFFSET = 512
STATE_INDEX = NOTICE_OFFSET // 4  # in the writer's int32 view
STOP_OFFSET = NOTICE_OFFSET + 8
WAITING_OFFSET = NOTICE_OFFSET + 16
NONE, PENDING, DECIDED = 0, 1, 2
# in the progress directory: "pending <launcher pid>", then "stop <step> <launcher pid>"
NOTICE_FILE = "notice"
_I64 = struct.Struct("<q")
# How long a rank waits at PENDING for the launchers' decision before it stops on its
# own (a launcher that could not reach the others decides alone well before this).
DECISION_WAIT = 10.0
# Under Slurm: how long a SIGTERM that came before the launcher's mark waits for it.
SLURM_MARK_WAIT = 2.0

assert _progress.LIVE_OFFSET + _progress.LIVE.size <= NOTICE_OFFSET

# A full memory barrier (a lock's atomic instruction): the step stored before the state is
# read, on the rank's side as on the launcher's (`mark_pending`).
_FENCE = threading.Lock()


_lock, _unlock = _FENCE.acquire, _FENCE.release


def _fence() -> None:
    _lock()
    _unlock()


_armed = False  # the first call installed the SIGTERM note (or left the script's own)
_sigterm_seen = False
_no_notice = False  # under Slurm: a SIGTERM was waited on and was no notice


def should_stop(step: int) -> bool:
    """Whether this rank should save `step`'s checkpoint and stop: False until a
    preemption notice reaches the job; then True on every rank at the same step (the
    smallest that no rank has passed when the notice came), False before it.

        for step in range(start, steps):
            train_one_step()
            if dist.should_stop(step):
                save(step)
                break

    Also the heartbeat for `step` (`heartbeat(step)`). Costs about what a heartbeat costs
    while no notice came (one more read of the mapped file). The first call, in the main
    thread, makes SIGTERM (the notice's signal to each rank) a note instead of the end of
    the process, unless the script handles SIGTERM itself. Outside a launch (or without
    a progress file) a SIGTERM this process received makes it True at the next call.
    """
    w = _progress._writer
    if w is not None and _armed:
        w.beat(step)
        _lock()  # the fence, inline: a call less on every step
        _unlock()
        return w.ints[STATE_INDEX] != NONE and _at_notice(w, step)
    return _first_call(step)


def _first_call(step: int) -> bool:
    global _armed
    if not _armed:
        _check_step(step)
        _armed = True
        _note_sigterm()
    w = _progress.writer()
    if w is None:
        return _sigterm_seen
    _adopt_node_notice(w)
    w.beat(step)
    _fence()
    return w.ints[STATE_INDEX] != NONE and _at_notice(w, step)


def _check_step(step: object) -> None:
    """Once, at the first call: a step that is no whole number >= 0 would fail (or never
    match) only when a notice comes, the worst moment to find out."""
    try:
        index = operator.index(step)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"should_stop(step): step must be an int (the training step), got {step!r}"
        ) from None
    if index < 0:
        raise ValueError(f"should_stop(step): step must be 0 or more, got {index}")


def _note_sigterm() -> None:
    """SIGTERM notes the notice instead of killing the rank mid-step (only where the
    script left SIGTERM to its default); under Slurm SIGUSR1 too (`--signal=USR1@N`
    reaches every process of the step where Slurm tracks them by cgroup)."""
    if threading.current_thread() is not threading.main_thread():
        return
    notices = [signal.SIGTERM, *([signal.SIGUSR1] if os.environ.get("SLURM_JOB_ID") else [])]
    for sig in notices:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _on_sigterm)


def _on_sigterm(signum: int, frame: object) -> None:
    """A notice (the launcher marked this rank's file before it sent the signal): note it,
    the rank stops at the stop step. Any other SIGTERM (a teardown after a failure) ends
    the process as it would have without `should_stop`. Under Slurm, whose `scancel` may
    signal every process of the step at once (cgroup tracking), the rank's SIGTERM can come
    before its launcher marked it: it waits SLURM_MARK_WAIT for the mark first. A SIGUSR1
    (Slurm's warning, only ever from Slurm itself) is always a note."""
    global _sigterm_seen
    if _no_notice:  # Slurm's wait found no mark (`_end_unless_marked`)
        _end_by(signum)
        return
    _sigterm_seen = True
    w = _progress._writer
    if signum != signal.SIGTERM or w is None or w.ints[STATE_INDEX] != NONE:
        return
    if not os.environ.get("SLURM_JOB_ID"):
        _end_by(signum)
        return
    threading.Thread(target=_end_unless_marked, args=(w, signum), daemon=True).start()


def _end_by(signum: int) -> None:
    """End this process by `signum`, as without a handler."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _end_unless_marked(w: _progress.ProgressWriter, signum: int) -> None:
    deadline = time.monotonic() + SLURM_MARK_WAIT
    while time.monotonic() < deadline:
        if w.ints[STATE_INDEX] != NONE:
            return  # a notice: the rank stops at the stop step
        time.sleep(0.005)  # a shared-memory word: nothing to block on
    global _no_notice
    _no_notice = True  # the handler, in the main thread, ends the process on it
    os.kill(os.getpid(), signum)


def _adopt_node_notice(w: _progress.ProgressWriter) -> None:
    """A file created after the launcher marked the others: take the node's notice."""
    try:
        text = (w.path.parent / NOTICE_FILE).read_text()
    except OSError:
        return
    what, _, launcher = text.rpartition(" ")
    if launcher != str(os.getppid()):  # another launcher's (a job that ended uncleanly)
        return
    if what.startswith("stop "):
        _I64.pack_into(w.mm, STOP_OFFSET, int(what[5:]))
        w.ints[STATE_INDEX] = DECIDED
    elif w.ints[STATE_INDEX] == NONE:
        w.ints[STATE_INDEX] = PENDING


def _at_notice(w: _progress.ProgressWriter, step: int) -> bool:
    """A notice came: wait for the stop step (PENDING), then compare."""
    mm = w.mm
    if w.ints[STATE_INDEX] == PENDING:
        _I64.pack_into(mm, WAITING_OFFSET, step + 1)
        deadline = time.monotonic() + DECISION_WAIT
        while w.ints[STATE_INDEX] == PENDING:
            if time.monotonic() >= deadline:
                print(
                    f"paddlike: rank at step {step}: no stop step from the launcher within "
                    f"{DECISION_WAIT:g} s of the preemption notice; stopping here",
                    file=sys.stderr,
                )
                return True
            time.sleep(0.001)  # a shared-memory word: nothing to block on
        _I64.pack_into(mm, WAITING_OFFSET, 0)
    return step >= _I64.unpack_from(mm, STOP_OFFSET)[0]


# --- the launcher's side ------------------------------------------------------------------


def _open(path: Path) -> mmap.mmap | None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size < _progress.FILE_BYTES:
            return None
        return mmap.mmap(fd, _progress.FILE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def mark_pending(log_dir: str | os.PathLike[str], ranks: Iterable[int]) -> dict[int, int]:
    """Mark each rank's progress file PENDING; return where each rank is (the smallest step
    it has not passed). A rank without a file has not reported a step yet: 0."""
    positions: dict[int, int] = {}
    for rank in ranks:
        mm = _open(_progress.progress_path(log_dir, rank))
        if mm is None:
            positions[rank] = 0
            continue
        with mm:
            if struct.unpack_from("<i", mm, NOTICE_OFFSET)[0] == NONE:
                struct.pack_into("<i", mm, NOTICE_OFFSET, PENDING)
            _fence()  # the mark stored before the rank's step is read
            positions[rank] = _position(mm)
    return positions


def reported(log_dir: str | os.PathLike[str], ranks: Iterable[int]) -> set[int]:
    """The ranks that have reported a step (should_stop or heartbeat called at least once)."""
    done: set[int] = set()
    for rank in ranks:
        mm = _open(_progress.progress_path(log_dir, rank))
        if mm is None:
            continue
        with mm:
            if struct.unpack_from("<q", mm, _progress.LIVE_OFFSET)[0]:
                done.add(rank)
    return done


def _position_of(path: Path) -> int | None:
    """One rank's position, without marking anything (None: no file)."""
    mm = _open(path)
    if mm is None:
        return None
    with mm:
        return _position(mm)


def _position(mm: mmap.mmap) -> int:
    waiting = _I64.unpack_from(mm, WAITING_OFFSET)[0]
    if waiting > 0:
        return waiting - 1
    beats, step = struct.unpack_from("<qq", mm, _progress.LIVE_OFFSET)
    return step + 1 if beats else 0


def decide(log_dir: str | os.PathLike[str], ranks: Iterable[int], stop_step: int) -> None:
    """Write the job's stop step into each rank's file and mark it DECIDED."""
    _write_node_notice(log_dir, f"stop {stop_step}")
    for rank in ranks:
        mm = _open(_progress.progress_path(log_dir, rank))
        if mm is None:
            continue
        with mm:
            _I64.pack_into(mm, STOP_OFFSET, stop_step)
            struct.pack_into("<i", mm, NOTICE_OFFSET, DECIDED)


def _write_node_notice(log_dir: str | os.PathLike[str], text: str) -> None:
    d = _progress.progress_dir(log_dir)
    tmp = d / f".{NOTICE_FILE}.{os.getpid()}.tmp"
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp.write_text(f"{text} {os.getpid()}")
        os.replace(tmp, d / NOTICE_FILE)
    except OSError:
        pass  # the ranks with files were told; a later one stops on its SIGTERM


def clear_node_notice(log_dir: str | os.PathLike[str]) -> None:
    """The round is over: the next round's ranks must not take this notice."""
    with contextlib.suppress(OSError):
        os.unlink(_progress.progress_dir(log_dir) / NOTICE_FILE)


def _reset_for_tests() -> None:
    global _armed, _sigterm_seen, _no_notice
    _armed = _sigterm_seen = _no_notice = False
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        if signal.getsignal(sig) is _on_sigterm:
            signal.signal(sig, signal.SIG_DFL)
