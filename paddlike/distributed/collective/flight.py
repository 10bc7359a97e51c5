"""The flight record: the last `progress.CAPACITY` collective operations of this rank.

`ops._run` calls `begin` when an operation is issued (in issue order, which is the
order every rank must follow) and `end` when it finished or failed. Both write into
the ring of this rank's progress file (see `paddlike.distributed.progress` for the
layout), so a launcher can read what every rank was doing while the job hangs, and tell
"rank 2's 1,204th collective was broadcast; the others' was all_reduce".

Each entry: operation number on this rank, sequence number within its group (what
ranks compare), group id, operation, bytes, dtype, root/peer, start and end time
(monotonic), state. An asynchronous operation's start is when it was issued.

Cost: two monotonic clock reads and two packed stores per operation (the ring entry
at the start, its end time and state at the end), about half a microsecond; readers
derive the operation count and the last activity from the ring.
`PADDLIKE_FLIGHT_RECORD=0` turns it off (benchmarks compare both). Outside a launch
(no PADDLE_LOG_DIR) there is no file and nothing is recorded.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

from .. import progress as P

__all__ = ["ENABLE_ENV", "begin", "end"]

ENABLE_ENV = "PADDLIKE_FLIGHT_RECORD"

_enabled = os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
_numbers = itertools.count(1)  # next() is atomic under the GIL: threads get distinct numbers
_group_seq: dict[int, int] = {}
_dtype_codes: dict[Any, int] = {}
_monotonic = time.monotonic
_OP_CODES = P.OP_CODES
_START_PACK = P.ENTRY_START.pack_into
_HEADER, _MASK, _SHIFT = P.HEADER_BYTES, P.CAPACITY - 1, P.ENTRY.size.bit_length() - 1
assert P.CAPACITY & _MASK == 0 and P.ENTRY.size == 1 << _SHIFT  # powers of two
_END_OFFSET, _STATE_OFFSET = P.ENTRY_END_OFFSET, P.ENTRY_STATE_OFFSET


def _dtype_code(dtype: Any) -> int:
    code = _dtype_codes.get(dtype)
    if code is None:
        try:
            code = (ord(dtype.kind) << 8) | (int(dtype.itemsize) & 0xFF)
        except (AttributeError, TypeError):
            code = 0
        _dtype_codes[dtype] = code
    return code


def begin(op: str, group_id: int, tensor: Any = None, peer: int = -1) -> tuple[int, float] | None:
    """Record that this rank issued `op` on group `group_id`; the token for `end`, or None
    when nothing is recorded."""
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
    seq = _group_seq.get(group_id, 0) + 1
    _group_seq[group_id] = seq
    if tensor is not None:
        nbytes, dtype = tensor.nbytes, tensor.dtype
        code = _dtype_codes.get(dtype)
        if code is None:
            code = _dtype_code(dtype)
    else:
        nbytes = code = 0
    now = _monotonic()
    off = _HEADER + ((n & _MASK) << _SHIFT)  # slot n % CAPACITY, 64 bytes each
    # The slot's end time and state stay the previous occupant's until end(): an end
    # before this start reads as "running" (see progress.read_progress).
    _START_PACK(w.buf, off, n, seq, group_id, _OP_CODES.get(op, 0), nbytes, code, peer, now)
    return off, now


def end(token: tuple[int, float] | None, ok: bool) -> None:
    """Record that the operation `begin` returned `token` for finished (or failed)."""
    if token is None:
        return
    w = P._writer
    if w is None:
        return
    off, start = token
    now = _monotonic()
    w.doubles[(off + _END_OFFSET) >> 3] = now  # end_mono, then the state that validates it
    w.ints[(off + _STATE_OFFSET) >> 2] = 2 if ok else 3
    w.coll_time += now - start  # published by the next heartbeat (busy time per step)


def set_enabled(on: bool) -> None:
    """Turn recording on or off in this process (benchmarks; tests)."""
    global _enabled
    _enabled = on
