"""The parameter-server wire format: one fixed binary header, a text frame, raw array frames.

A message is a list of ZeroMQ frames (a ROUTER prepends the peer's identity):

    frame 0   header   HEADER struct: magic, version, op, status, array count,
                       request id, trainer id, step, two integer arguments
    frame 1   text     UTF-8: a table name, an error message, or a JSON document for
                       control requests (declare, save, load) — never pickle
    frame 2   arrays   ARRAY struct per array: dtype code, ndim, two dimensions
    frame 3.. chunks   each array's raw bytes in CHUNK_BYTES pieces, array after array

Arrays travel as their own bytes so that the sender can hand ZeroMQ a view
(`copy=False`) and the receiver can `np.frombuffer` the frames without a copy.
Decoding checks every size against the header, so a truncated or forged message
is a `WireError`, not a crash or a wrong answer; a declared array beyond
MAX_ARRAY_BYTES is refused before its size is used for anything.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"PLPS"
VERSION = 1
# Large arrays are cut into frames of this size: small enough that one frame never
# pins a huge buffer, large enough that per-frame overhead is invisible.
CHUNK_BYTES = 4 << 20

HEADER = struct.Struct("<4sBBBBIiqqq")
ARRAY = struct.Struct("<BB6xqq")
MAX_ARRAYS = 8
# No request or reply carries one array this big (a 16 GiB dense shard is the server's
# own table limit); a larger declared size is a forged or corrupt header.
MAX_ARRAY_BYTES = 1 << 34


class Op(enum.IntEnum):
    """Request kinds; a reply carries the op of its request."""

    HELLO = 1
    DECLARE = 2
    PULL_DENSE = 3
    PUSH_DENSE = 4
    ASSIGN_DENSE = 5
    PULL_SPARSE = 6
    PUSH_SPARSE = 7
    DELTA_DENSE = 8
    DELTA_SPARSE = 9
    BARRIER = 10
    SAVE = 11
    LOAD = 12
    STOP = 13
    STAT = 14
    PING = 15  # liveness: answered at once, even while the server holds a pull back


class Status(enum.IntEnum):
    OK = 0
    ERROR = 1


DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32),
    2: np.dtype(np.float64),
    3: np.dtype(np.int64),
    4: np.dtype(np.int32),
    5: np.dtype(np.uint8),
}
_CODES: dict[np.dtype, int] = {dt: code for code, dt in DTYPES.items()}


class WireError(ValueError):
    """A message that does not follow this format; the text says what is wrong."""


@dataclass
class ArrayParts:
    """A received array as views on its frames: no copy until `array()` needs one."""

    dtype: np.dtype
    shape: tuple[int, ...]
    parts: list[np.ndarray]  # flat views, in order

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def array(self) -> np.ndarray:
        """The whole array: a zero-copy view when it came in one frame, else one copy."""
        if len(self.parts) == 1:
            return self.parts[0].reshape(self.shape)
        if not self.parts:
            return np.empty(self.shape, self.dtype)
        return np.concatenate(self.parts).reshape(self.shape)

    def flat_parts(self) -> Iterator[tuple[int, np.ndarray]]:
        """(element offset, flat view) per frame, for consumers that work chunk by chunk."""
        offset = 0
        for part in self.parts:
            yield offset, part
            offset += part.size


@dataclass
class Message:
    op: int
    req_id: int = 0
    trainer: int = -1
    step: int = 0
    arg0: int = 0
    arg1: int = 0
    text: str = ""
    arrays: Sequence[np.ndarray | ArrayParts] = field(default_factory=list)
    status: int = Status.OK

    def array(self, i: int) -> np.ndarray:
        a = self.arrays[i]
        return a.array() if isinstance(a, ArrayParts) else a


def _chunks(arr: np.ndarray) -> list[memoryview]:
    raw = memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    return [raw[i : i + CHUNK_BYTES] for i in range(0, len(raw), CHUNK_BYTES)]


def encode(msg: Message) -> list[bytes | memoryview]:
    """Frames for `msg`; array frames are views of the caller's arrays (send with copy=False)."""
    arrays = [a.array() if isinstance(a, ArrayParts) else a for a in msg.arrays]
    if len(arrays) > MAX_ARRAYS:
        raise WireError(f"a message carries at most {MAX_ARRAYS} arrays, got {len(arrays)}")
    header = HEADER.pack(
        MAGIC,
        VERSION,
        int(msg.op),
        int(msg.status),
        len(arrays),
        msg.req_id & 0xFFFFFFFF,
        msg.trainer,
        msg.step,
        msg.arg0,
        msg.arg1,
    )
    descs = bytearray()
    chunks: list[bytes | memoryview] = []
    for a in arrays:
        code = _CODES.get(a.dtype)
        if code is None:
            raise WireError(f"dtype {a.dtype} cannot be sent (use float32, float64, int64, ...)")
        if a.ndim > 2:
            raise WireError(f"arrays of at most 2 dimensions can be sent, got shape {a.shape}")
        dims = (*a.shape, 0, 0)[:2]
        descs += ARRAY.pack(code, a.ndim, dims[0], dims[1])
        chunks.extend(_chunks(a))
    return [header, msg.text.encode(), bytes(descs), *chunks]


def frame_buffer(frame: object) -> memoryview:
    """A received frame's bytes without a copy (a zmq.Frame's buffer, or the bytes)."""
    buf = getattr(frame, "buffer", None)  # zmq.Frame received with copy=False
    return buf if buf is not None else memoryview(frame)  # type: ignore[arg-type]


def decode_header(frame: object) -> Message:
    """The header alone (for replying to a message whose body is malformed)."""
    raw = frame_buffer(frame)
    if len(raw) != HEADER.size:
        raise WireError(f"header frame has {len(raw)} bytes, expected {HEADER.size}")
    magic, version, op, status, narrays, req_id, trainer, step, a0, a1 = HEADER.unpack(raw)
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise WireError(f"wire version {version}, this side speaks {VERSION}")
    msg = Message(op=op, req_id=req_id, trainer=trainer, step=step, arg0=a0, arg1=a1)
    msg.status = status
    msg.arrays = [None] * narrays  # type: ignore[list-item]  # filled by decode
    return msg


def decode(frames: Sequence[object]) -> Message:
    """A `Message` from received frames; arrays are read-only views on the frames."""
    if len(frames) < 3:
        raise WireError(
            f"a message has at least 3 frames (header, text, arrays), got {len(frames)}"
        )
    msg = decode_header(frames[0])
    narrays = len(msg.arrays)
    try:
        msg.text = bytes(frame_buffer(frames[1])).decode()
    except UnicodeDecodeError as exc:
        raise WireError("text frame is not UTF-8") from exc
    descs = frame_buffer(frames[2])
    if len(descs) != narrays * ARRAY.size:
        raise WireError(
            f"array frame has {len(descs)} bytes, expected {narrays * ARRAY.size} "
            f"for {narrays} arrays"
        )
    arrays: list[ArrayParts] = []
    pos = 3
    for i in range(narrays):
        code, ndim, d0, d1 = ARRAY.unpack_from(descs, i * ARRAY.size)
        dtype = DTYPES.get(code)
        if dtype is None:
            raise WireError(f"array {i}: unknown dtype code {code}")
        if ndim > 2 or d0 < 0 or d1 < 0:
            raise WireError(f"array {i}: bad shape (ndim {ndim}, dims {d0}, {d1})")
        shape = (d0, d1)[:ndim]
        nbytes = dtype.itemsize
        for d in shape:  # Python integers: a forged size cannot overflow
            nbytes *= d
        if nbytes > MAX_ARRAY_BYTES:
            raise WireError(
                f"array {i}: declared shape {shape} of {dtype} is {nbytes} bytes, beyond the "
                f"limit of {MAX_ARRAY_BYTES}"
            )
        nchunks = -(-nbytes // CHUNK_BYTES)
        if pos + nchunks > len(frames):
            raise WireError(f"array {i}: expected {nchunks} data frames, message is too short")
        parts: list[np.ndarray] = []
        for k in range(nchunks):
            buf = frame_buffer(frames[pos + k])
            want = min(CHUNK_BYTES, nbytes - k * CHUNK_BYTES)
            if len(buf) != want:
                raise WireError(f"array {i}: data frame {k} has {len(buf)} bytes, expected {want}")
            parts.append(np.frombuffer(buf, dtype=dtype))
        pos += nchunks
        arrays.append(ArrayParts(dtype, shape, parts))
    if pos != len(frames):
        raise WireError(f"{len(frames) - pos} unexpected frames after the arrays")
    msg.arrays = arrays
    return msg
