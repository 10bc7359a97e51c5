"""Ask every worker's probe (`worker_probe`) for its Python stack and torch's flight
record, and read torch's record in the shape `flights.py` compares.

`ask(targets, timeout)` connects to every worker's socket at once and reads the
answers in one selectors loop, all before one deadline; a worker that cannot answer
(stopped, started without the probe, its interpreter wedged) gets a one-line reason.
Imported only when a hang is looked for: the launcher's start-up never loads it.

torch's record, one entry per collective (torch 2.13's JSON, `_dump_fr_trace_json`):
`collective_seq_id` (the number within its process group, what ranks agree on),
`profiling_name` ("gloo:all_reduce", "nccl:barrier"), `process_group` ([name, desc]),
`input_sizes`/`input_dtypes`, `retired` (finished), `time_created_ns` (when the rank
entered it, Unix time in ns: the page's "last sign of life"). Point-to-point entries are numbered
per pair of ranks and are left out of the comparison.
"""

from __future__ import annotations

import contextlib
import json
import math
import selectors
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from paddlike.logs.hang import Frame, RankStack, ThreadStack
from paddlike.logs.worker_probe import socket_name

__all__ = [
    "ProbeAnswer",
    "TorchOp",
    "ask",
    "fill_stacks",
    "format_record",
    "parse_record",
    "records_from_json",
    "records_to_json",
]

TIMEOUT = 3.0  # seconds for every probe's answer (a stopped worker never answers)
_READ = 1 << 16
# torch's dtype names and their sizes in bytes
_DTYPES = {
    "Float": ("float32", 4), "Double": ("float64", 8), "Half": ("float16", 2),
    "BFloat16": ("bfloat16", 2), "Long": ("int64", 8), "Int": ("int32", 4),
    "Short": ("int16", 2), "Char": ("int8", 1), "Byte": ("uint8", 1), "Bool": ("bool", 1),
}  # fmt: skip


@dataclass(frozen=True)
class TorchOp:
    """One collective of torch's flight record; satisfies `flights.FlightOp`."""

    group_seq: int
    group_id: int
    op: str
    nbytes: int
    dtype: str
    peer: int = -1
    state: str = "running"  # "running" | "done"
    # when the rank entered it (Unix time; None: not recorded). Not part of its identity:
    # two recorders listing one collective agree on everything but this.
    created: float | None = field(default=None, compare=False)

    def describe(self) -> str:
        size = f" {self.nbytes} B {self.dtype}".rstrip() if self.nbytes else ""
        return f"#{self.group_seq} {self.op}{size} (group {self.group_id}, {self.state})"


@dataclass(frozen=True)
class ProbeAnswer:
    """What one worker's probe said, or why it said nothing (`error`)."""

    rank: int
    stack: tuple[Frame, ...] = ()  # the main thread, innermost first
    torch: bool = False  # the script imported torch.distributed
    initialized: bool = False  # ... and made its default process group
    record: tuple[TorchOp, ...] = ()
    error: str = ""


class Worker(Protocol):
    """What `ask` needs of a target (paddlike.logs.stacks.Target has it)."""

    rank: int
    pid: int


def ask(targets: Sequence[Worker], timeout: float = TIMEOUT) -> dict[int, ProbeAnswer]:
    """Every target's probe answer by rank, all within `timeout`."""
    deadline = time.monotonic() + timeout
    out: dict[int, ProbeAnswer] = {}
    sel = selectors.DefaultSelector()
    chunks: dict[int, list[bytes]] = {}
    try:
        for t in targets:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(socket_name(t.pid))
                sock.sendall(b"dump\n")
            except OSError as exc:
                sock.close()
                out[t.rank] = ProbeAnswer(t.rank, error=_no_probe(exc))
                continue
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ, t.rank)
            chunks[t.rank] = []
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in sel.select(left):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(_READ)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    chunks[key.data].append(data)
                    continue
                sel.unregister(sock)
                sock.close()
                out[key.data] = _parse_answer(key.data, b"".join(chunks[key.data]))
        for key in list(sel.get_map().values()):
            out[key.data] = ProbeAnswer(
                key.data, error=f"its probe did not answer within {timeout:g} s"
            )
    finally:
        for key in list(sel.get_map().values()):
            sel.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        sel.close()
    return {r: out[r] for r in sorted(out)}


def _no_probe(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "no probe in it (started without --hang_timeout, or not a Python worker)"
    return f"could not reach its probe ({exc.strerror or exc})"


def _parse_answer(rank: int, raw: bytes) -> ProbeAnswer:
    try:
        data = json.loads(raw)
        stack = tuple(Frame(str(fn), str(path), int(line)) for path, line, fn in data["stack"])
        torch = data.get("torch")
    except (ValueError, KeyError, TypeError) as exc:
        return ProbeAnswer(rank, error=f"its probe's answer is unreadable ({exc})")
    if not torch:
        return ProbeAnswer(rank, stack)
    ops = parse_record(torch.get("record") or {}) + parse_record(torch.get("nccl_record") or {})
    record = tuple(dict.fromkeys(ops))  # a collective both recorders list counts once
    initialized = bool(torch.get("initialized"))
    if initialized and not any(op.group_id == 0 for op in record):
        # a member of the default group that entered none of its collectives yet
        record = (TorchOp(0, 0, "none", 0, "", state="done"), *record)
    return ProbeAnswer(rank, stack, True, initialized, record, str(torch.get("error") or ""))


def parse_record(data: Mapping[str, Any]) -> list[TorchOp]:
    """torch's JSON flight record as TorchOps, oldest first (collectives only)."""
    ops = []
    for e in data.get("entries", []):
        if e.get("is_p2p"):
            continue
        name = str(e.get("profiling_name", "?"))
        group = e.get("process_group") or [str(e.get("pg_id", 0))]
        gid = int(group[0]) if str(group[0]).isdigit() else int(e.get("pg_id", 0))
        nbytes, dtype = _size(e.get("input_sizes") or [], e.get("input_dtypes") or [])
        finished = bool(e.get("retired")) or e.get("state") == "completed"
        ops.append(
            TorchOp(
                group_seq=int(e.get("collective_seq_id", 0)),
                group_id=gid,
                op=name.split(":", 1)[-1],
                nbytes=nbytes,
                dtype=dtype,
                state="done" if finished else "running",
                created=_seconds(e.get("time_created_ns")),
            )
        )
    return ops


def _seconds(ns: Any) -> float | None:
    """torch's nanoseconds as Unix seconds; None when missing or 0 (never recorded)."""
    return ns / 1e9 if isinstance(ns, int) and ns > 0 else None


def _size(sizes: Sequence[Sequence[int]], dtypes: Sequence[str]) -> tuple[int, str]:
    total, names = 0, []
    for shape, dt in zip(sizes, dtypes, strict=False):
        name, item = _DTYPES.get(dt, (dt.lower(), 0))
        total += math.prod(shape) * item
        names.append(name)
    return total, ",".join(dict.fromkeys(names))


def fill_stacks(
    stacks: Mapping[int, RankStack], answers: Mapping[int, ProbeAnswer]
) -> dict[int, RankStack]:
    """py-spy's stacks, with the probe's Python stack for a rank py-spy could not read
    (not installed, no ptrace permission, out of time)."""
    out = dict(stacks)
    for rank, stack in stacks.items():
        a = answers.get(rank)
        if stack.threads or stack.stopped or a is None or not a.stack:
            continue
        thread = ThreadStack("MainThread", a.stack, os_thread_id=stack.pid or 0)
        note = f"Python frames from paddlike's probe in the worker ({stack.error})"
        out[rank] = RankStack(
            rank, stack.host, stack.log_file, stack.pid, (thread,), note=note, kernel=stack.kernel
        )
    return out


def format_record(record: Sequence[TorchOp]) -> str:
    """The rank file's lines for torch's record (stacks.write_dump)."""
    real = [op for op in record if op.group_seq > 0]
    if not real:
        return "torch flight record: no collective yet\n"
    lines = [f"torch flight record (last {len(real)} collectives, oldest first):"]
    lines += [f"    {op.describe()}" for op in real]
    return "\n".join(lines) + "\n"


def records_to_json(records: Mapping[int, Sequence[TorchOp]]) -> dict[str, list[dict[str, Any]]]:
    """Plain JSON types, for another node or stacks.json."""
    return {str(r): [asdict(op) for op in ops] for r, ops in sorted(records.items())}


def records_from_json(data: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[int, list[TorchOp]]:
    out: dict[int, list[TorchOp]] = {}
    for rank, ops in data.items():
        with contextlib.suppress(TypeError, ValueError):
            out[int(rank)] = [TorchOp(**op) for op in ops]
    return out
