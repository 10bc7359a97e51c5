"""The stage channel's wire format: one head frame, then the raw bytes of each array.

A packet is a list of ZeroMQ frames (a ROUTER prepends the peer's identity):

    frame 0   head     HEADER struct: magic, version, kind, sender's stage, array count,
                       flags, sender's index in its stage, batch id;
                       then an ARRAY struct per array: dtype code, ndim, four dimensions;
                       then UTF-8 text to the end (an error message, else nothing)
    frame 1.. data     one frame per array, its raw C-order bytes — never pickle

Kept apart from ps/wire.py (the server protocol) because the two evolve separately: this
one carries activations between trainers, that one requests to servers. Same habits:
arrays go out as views of the caller's memory (`copy=False`) and come in as read-only
`np.frombuffer` views of the frames; every size is checked against the header, so a
truncated or forged packet is a `StageWireError`, never a wrong array.
"""

from __future__ import annotations

import enum
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from paddlike.distributed.ps.wire import DTYPES, frame_buffer

MAGIC = b"PLHS"
VERSION = 1
HEADER = struct.Struct("<4sBBBBBxxxiq")
ARRAY = struct.Struct("<BB6x4q")
MAX_ARRAYS = 8
MAX_DIMS = 4
FLAG_SEQUENCE = 1  # the sender passed a tuple/list: the receiver gets a tuple back


class Kind(enum.IntEnum):
    HELLO = 1  # a sender introduces itself (stage, index) as soon as it connects
    FORWARD = 2  # activations of one batch, previous stage -> next stage
    BACKWARD = 3  # the answer to one forward batch, next stage -> the sender of that batch
    END = 4  # the sender will send no more batches
    END_ACK = 5  # the receiver saw END: the sender may close
    ERROR = 6  # the receiver refuses the sender (text says why)


# the parameter server's codes (`wire.DTYPES`), and two that only stages exchange
_DTYPES: dict[int, np.dtype] = {**DTYPES, 6: np.dtype(np.float16), 7: np.dtype(np.bool_)}
_CODES: dict[np.dtype, int] = {dt: code for code, dt in _DTYPES.items()}


_KINDS = frozenset(int(k) for k in Kind)


class StageWireError(ValueError):
    """A packet that does not follow this format, or an array it cannot carry."""


@dataclass
class Packet:
    kind: int
    stage: int  # the sender's stage
    sender: int  # the sender's index in its stage
    batch_id: int = 0
    arrays: list[np.ndarray] = field(default_factory=list)
    sequence: bool = False  # arrays were given as a tuple/list (else exactly one array)
    text: str = ""

    def payload(self) -> np.ndarray | tuple[np.ndarray, ...]:
        """What the sending side passed: one array, or a tuple of them."""
        return tuple(self.arrays) if self.sequence else self.arrays[0]


def _host(value: object) -> np.ndarray:
    """A NumPy array of `value`: device arrays (CuPy, torch on a GPU) are copied to the host,
    torch tensors lose their autograd history (the gradient is what travels)."""
    if hasattr(value, "__cuda_array_interface__"):
        get = getattr(value, "get", None)  # CuPy
        value = get() if get is not None else value.detach().cpu()  # type: ignore[attr-defined]
    if hasattr(value, "detach"):  # torch
        value = value.detach().numpy()  # type: ignore[attr-defined]
    return np.asarray(value)


def as_arrays(value: object, what: str) -> tuple[list[np.ndarray], bool]:
    """(arrays, was a sequence) for an array or a tuple/list of arrays; checks what can travel."""
    sequence = isinstance(value, (tuple, list))
    items = list(value) if sequence else [value]  # type: ignore[call-overload]
    if not items or len(items) > MAX_ARRAYS:
        raise StageWireError(f"{what}: expected 1..{MAX_ARRAYS} arrays, got {len(items)}")
    arrays = []
    for i, item in enumerate(items):
        a = _host(item)
        name = f"{what}[{i}]" if sequence else what
        if a.dtype not in _CODES:
            raise StageWireError(
                f"{name}: dtype {a.dtype} cannot be sent (use float32, float16, float64, "
                "int64, int32, uint8 or bool)"
            )
        if a.ndim > MAX_DIMS:
            raise StageWireError(f"{name}: at most {MAX_DIMS} dimensions, got shape {a.shape}")
        arrays.append(a if a.flags.c_contiguous else a.copy(order="C"))  # keeps 0-d arrays 0-d
    return arrays, sequence


def encode(p: Packet) -> list[bytes | memoryview]:
    """Frames for `p`; data frames are views of its arrays (send them with copy=False)."""
    head = [
        HEADER.pack(
            MAGIC, VERSION, int(p.kind), p.stage, len(p.arrays), int(p.sequence), p.sender,
            p.batch_id,
        )
    ]  # fmt: skip
    for a in p.arrays:
        head.append(ARRAY.pack(_CODES[a.dtype], a.ndim, *(*a.shape, 0, 0, 0, 0)[:MAX_DIMS]))
    if p.text:
        head.append(p.text.encode())
    # A byte memoryview is the cheapest buffer for pyzmq to take without a copy.
    return [b"".join(head), *(memoryview(a).cast("B") if a.size else b"" for a in p.arrays)]


def decode(frames: Sequence[object]) -> Packet:
    """A `Packet` from received frames; arrays are read-only views on the frames."""
    if not frames:
        raise StageWireError("a stage packet has at least 1 frame, got none")
    head = frame_buffer(frames[0])
    if len(head) < HEADER.size:
        raise StageWireError(f"head frame has {len(head)} bytes, expected {HEADER.size} or more")
    magic, version, kind, stage, narrays, flags, sender, batch_id = HEADER.unpack_from(head)
    if magic != MAGIC:
        raise StageWireError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r} (not a stage peer)")
    if version != VERSION:
        raise StageWireError(f"stage wire version {version}, this side speaks {VERSION}")
    if kind not in _KINDS:
        raise StageWireError(f"unknown packet kind {kind}")
    text_at = HEADER.size + narrays * ARRAY.size
    if narrays > MAX_ARRAYS or len(head) < text_at:
        raise StageWireError(f"head frame has {len(head)} bytes for {narrays} arrays")
    if len(frames) != 1 + narrays:
        raise StageWireError(f"{len(frames) - 1} data frames for {narrays} arrays")
    text = ""
    if len(head) > text_at:
        try:
            text = bytes(head[text_at:]).decode()
        except UnicodeDecodeError:
            raise StageWireError("text is not UTF-8") from None
    arrays = []
    for i in range(narrays):
        code, ndim, *dims = ARRAY.unpack_from(head, HEADER.size + i * ARRAY.size)
        dtype = _DTYPES.get(code)
        if dtype is None or ndim > MAX_DIMS or min(dims) < 0:
            raise StageWireError(f"array {i}: bad descriptor (dtype {code}, ndim {ndim})")
        shape = tuple(dims[:ndim])
        buf = frame_buffer(frames[1 + i])
        want = math.prod(shape) * dtype.itemsize
        if len(buf) != want:
            raise StageWireError(f"array {i}: {len(buf)} data bytes, expected {want}")
        arrays.append(np.frombuffer(buf, dtype=dtype).reshape(shape))
    return Packet(kind, stage, sender, batch_id, arrays, bool(flags & FLAG_SEQUENCE), text)
