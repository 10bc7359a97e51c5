"""The flight record: the last `progress.CAPACITY` collective operations of this rank.

`ops._run` calls `begin` when an operation is issued (in issue order, which is the
order every rank must follow) and `end` when it finished or failed. Both write into
the ring of this rank's progress file (see `paddlike.distributed.progress` for the
layout), so a launcher can read what every rank was doing while the job hangs, and tell
"rank 2's 1,204th collective was broadcast; the others' was all_reduce".

Each entry: operation number on this rank, sequence number within its group (what
ranks compare), group id, operation, bytes, dtype, root/peer, start and end time
(monotonic), state. An asynchronous operation's start is when it was issued.

Cost per operation: one pack of the ring entry at the start (its start time is the clock
read the call path makes for its deadline anyway; its end time 0 reads as "running" and
its state is already "done"), one clock read and one store at the end (a failure stores
its state first); readers derive the operation count and the last activity from the ring.
`PADDLIKE_FLIGHT_RECORD=0` turns it off (benchmarks compare both). Outside a launch
(no PADDLE_LOG_DIR) there is no file and nothing is recorded.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

from .. import progress as P

__all__ = ["ENABLE_ENV", "begin", "end"]

ENABLE_ENV = "PADDLIKE_FLIGHT_RECORD"

_enabled = os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
_numbers = itertools.count(1)  # next() is atomic under the GIL: threads get distinct numbers
_group_seq: dict[int, Iterator[int]] = {}  # group id -> its sequence numbers, from 1
_dtype_codes: dict[Any, int] = {}
_monotonic = time.monotonic
_OP_CODES = P.OP_CODES
_ENTRY_PACK = P.ENTRY.pack_into
_DONE, _FAILED = P.DONE, P.FAILED
_HEADER, _MASK, _SHIFT = P.HEADER_BYTES, P.CAPACITY - 1, P.ENTRY.size.bit_length() - 1
assert P.CAPACITY & _MASK == 0 and P.ENTRY.size == 1 << _SHIFT  # powers of two
_END_OFFSET, _STATE_OFFSET = P.ENTRY_END_OFFSET, P.ENTRY_STATE_OFFSET
assert _END_OFFSET & 7 == 0 and _STATE_OFFSET & 3 == 0


def _dtype_code(dtype: Any) -> int:
    code = _dtype_codes.get(dtype)
    if code is None:
        try:
            code = (ord(dtype.kind) << 8) | (int(dtype.itemsize) & 0xFF)
        except (AttributeError, TypeError):
            code = 0
        _dtype_codes[dtype] = code
    return code


def _sequence(group_id: int) -> Iterator[int]:
    seq = _group_seq[group_id] = itertools.count(1)
    return seq


def begin(
    op: str, group_id: int, tensor: Any = None, peer: int = -1, now: float | None = None
) -> tuple[int, float] | None:
    """Record that this rank issued `op` on group `group_id`; the token for `end`, or None
    when nothing is recorded. `now`: the caller's own monotonic reading, if it has one
    (the call path reads the clock for its deadline anyway: one read serves both)."""
    if not _enabled:
        return None
    w = P._writer
    if w is None:
        if P._disabled:
            return None
        w = P.writer()
        if w is None:
            return None
    n = next(_numbers)
    seq = next(_group_seq.get(group_id) or _sequence(group_id))
    if tensor is not None:
        nbytes, dtype = tensor.nbytes, tensor.dtype
        code = _dtype_codes.get(dtype)
        if code is None:
            code = _dtype_code(dtype)
    else:
        nbytes = code = 0
    if now is None:
        now = _monotonic()
    off = _HEADER + ((n & _MASK) << _SHIFT)  # slot n % CAPACITY, 64 bytes each
    # End time 0 (before the start: readers see "running", see progress.read_progress)
    # and state "done", so that a success needs one store at the end: its end time.
    _ENTRY_PACK(
        w.buf, off, n, seq, group_id, _OP_CODES.get(op, 0), nbytes, code, peer, now, 0.0,
        _DONE, 0,
    )  # fmt: skip
    return off, now


def end(token: tuple[int, float] | None, ok: bool) -> None:
    """Record that the operation `begin` returned `token` for finished (or failed)."""
    if token is None:
        return
    w = P._writer
    if w is None:
        return
    off, start = token
    if not ok:  # the state first: the end time is what makes readers believe it
        w.ints[(off + _STATE_OFFSET) >> 2] = _FAILED
    now = _monotonic()
    w.doubles[(off + _END_OFFSET) >> 3] = now
    w.coll_time += now - start  # published by the next heartbeat (busy time per step)


def set_enabled(on: bool) -> None:
    """Turn recording on or off in this process (benchmarks; tests)."""
    global _enabled
    _enabled = on
