"""The progress file: each worker's heartbeat and flight record, readable from outside.

Every worker that calls `heartbeat()` or runs a paddlike collective maps one small file,

    <PADDLE_LOG_DIR>/.progress/rank.<N>        N = the global rank (PADDLE_TRAINER_ID)

and writes its progress into it with plain memory stores: no system call, no lock, no
thread on the hot path. The launcher, `python -m paddlike.logs --stacks` or anyone
with read access reads the file while the worker runs, hangs or after it died, without
the worker's cooperation. Outside a launch (no PADDLE_LOG_DIR) nothing is written and
`heartbeat()` costs one attribute check.

The layout (little endian) lives in this module only; `flight.py` writes the ring:

    0     static header (STATIC): magic, version, ring capacity, rank, world size, pid,
          restart count, creation time (wall and monotonic), job id, hostname
    256   live fields (LIVE), rewritten by every heartbeat
    4096  flight ring: CAPACITY entries of ENTRY (64 bytes each), entry k of the ring
          holds operation number n with n % CAPACITY == k; an entry whose end time is
          before its start still carries its slot's previous end: it is running

Readers read the file twice and read the live fields again when the copies differ (a
beat landed mid-read), and take ring entries from the later copy. Monotonic times
compare only on the same node (same boot); `RankProgress.to_wall` and the `*_wall`
properties convert them with the file's creation anchor.

Stdlib only: the launcher imports the reader and must not pull in numpy.
"""

from __future__ import annotations

import errno
import mmap
import os
import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paddlike import contract as C
from paddlike.distributed.envint import env_int
from paddlike.logformat import open_regular

__all__ = [
    "CAPACITY",
    "FlightEntry",
    "RankProgress",
    "heartbeat",
    "progress_dir",
    "progress_path",
    "read_all",
    "read_progress",
]

MAGIC = b"PDLKPRG1"
VERSION = 1
CAPACITY = 256  # flight-record entries kept per rank
PROGRESS_DIR = ".progress"
HEADER_BYTES = 4096

STATIC = struct.Struct("<8sIIqqqqdd64s64s")  # at 0
LIVE_OFFSET = 256
# beats, step, last_beat_mono, coll_time_total, step_time_ema, busy_time_ema: one pack per
# beat. Collectives write only their ring entry: readers take the operation count and the
# last activity from the ring; coll_time_total is as of the last beat.
LIVE = struct.Struct("<qqdddd")

# One ring entry: n (operation number, 0 = empty), group_seq, group_id, op code, nbytes,
# dtype code, peer (global rank of root/peer, -1 = none), start_mono, end_mono, state.
ENTRY = struct.Struct("<qqiiqiiddii")
ENTRY_START = struct.Struct("<qqiiqiid")  # what begin() writes: all but end_mono and state
ENTRY_END_OFFSET = 48  # end_mono (double) and state (int32): what end() rewrites
ENTRY_STATE_OFFSET = 56
FILE_BYTES = HEADER_BYTES + CAPACITY * ENTRY.size

RUNNING, DONE, FAILED = 1, 2, 3
STATES = {RUNNING: "running", DONE: "done", FAILED: "failed"}

# Operation codes of the flight record (append only: the file format depends on them).
OPS = (
    "?",
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "gather",
    "scatter",
    "reduce_scatter",
    "all_to_all",
    "send",
    "recv",
    "barrier",
)
OP_CODES = {name: i for i, name in enumerate(OPS)}

_DTYPE_NAMES = {"f": "float", "i": "int", "u": "uint", "b": "bool", "c": "complex"}

EMA = 0.2  # weight of the newest step in the step-time averages

assert ENTRY.size == 64 and STATIC.size <= LIVE_OFFSET


def dtype_name(code: int) -> str:
    """'float32' from the code kind<<8 | itemsize that flight.py stores."""
    if code <= 0:
        return ""
    kind, size = chr(code >> 8), code & 0xFF
    base = _DTYPE_NAMES.get(kind)
    if base == "bool":
        return "bool"
    return f"{base}{size * 8}" if base else f"{kind}{size}"


def progress_dir(log_dir: str | os.PathLike[str]) -> Path:
    """Where the progress files of the workers whose log directory is `log_dir` live."""
    return Path(log_dir) / PROGRESS_DIR


def progress_path(log_dir: str | os.PathLike[str], rank: int) -> Path:
    return progress_dir(log_dir) / f"rank.{rank}"


# --- the writer (in the worker) -----------------------------------------------------------


class ProgressWriter:
    """This process's mapped progress file. Created on first use; one per process."""

    __slots__ = (
        "beats",
        "buf",
        "busy_ema",
        "coll_time",
        "doubles",
        "ints",
        "mm",
        "path",
        "step",
        "step_coll",
        "step_ema",
        "step_mono",
    )

    def __init__(self, path: Path, environ: Mapping[str, str]) -> None:
        """Create the file under a temporary name, fill its header, then rename it, so a
        reader sees either the previous incarnation's file or a complete new one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent.is_symlink():  # a shared log directory: another user's link
            raise OSError(errno.ELOOP, "it is a symbolic link", str(path.parent))
        # a new file, never one planted there (O_EXCL does not follow a link either)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644)
        try:
            os.ftruncate(fd, FILE_BYTES)
            self.mm = mmap.mmap(fd, FILE_BYTES)
        finally:
            os.close(fd)
        self.path = path
        self.buf = self.mm
        # Item stores into these cost less than a pack for one or two fields (flight.end).
        self.doubles = memoryview(self.mm).cast("d")
        self.ints = memoryview(self.mm).cast("i")
        now_wall, now_mono = time.time(), time.monotonic()
        STATIC.pack_into(
            self.mm,
            0,
            MAGIC,
            VERSION,
            CAPACITY,
            _int(environ, (C.TRAINER_ID, C.RANK), 0),
            _int(environ, (C.TRAINERS_NUM, C.WORLD_SIZE), 1),
            os.getpid(),
            _int(environ, (C.RESTART_COUNT,), 0),
            now_wall,
            now_mono,
            environ.get(C.JOB_ID, "").encode()[:64],
            socket.gethostname().encode()[:64],
        )
        self.beats = self.step = 0
        self.coll_time = self.step_coll = 0.0
        self.step_mono = now_mono
        self.step_ema = self.busy_ema = 0.0
        LIVE.pack_into(self.mm, LIVE_OFFSET, 0, 0, 0.0, 0.0, 0.0, 0.0)
        os.replace(tmp, path)

    def beat(self, step: int | None) -> None:
        now = _monotonic()
        beats = self.beats = self.beats + 1
        old = self.step
        new = old + 1 if step is None else int(step)
        if new != old:
            if beats > 1:  # the first beat only starts the clock
                # Seconds per step, and per step outside paddlike's collectives ("busy"): in
                # a synchronous job every rank's step takes as long as the slowest rank's;
                # only the busy time tells which rank is slow.
                steps = abs(new - old)
                dt = (now - self.step_mono) / steps
                busy = dt - (self.coll_time - self.step_coll) / steps
                ema = self.step_ema
                if ema:
                    self.step_ema = ema + EMA * (dt - ema)
                    self.busy_ema += EMA * (busy - self.busy_ema)
                else:
                    self.step_ema, self.busy_ema = dt, busy
            self.step, self.step_mono, self.step_coll = new, now, self.coll_time
        _LIVE_PACK(
            self.buf, LIVE_OFFSET, beats, new, now, self.coll_time, self.step_ema, self.busy_ema
        )

    def close(self) -> None:
        self.doubles.release()
        self.ints.release()
        self.buf = None  # type: ignore[assignment]
        self.mm.close()


_monotonic = time.monotonic
_LIVE_PACK = LIVE.pack_into
_writer: ProgressWriter | None = None
_disabled = False
_parent_path: Path | None = None  # in a forked child: the parent's file, never ours


def _int(environ: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    """The heartbeat never stops the training it watches: a bad value gives `default`."""
    return env_int(environ, names, default, strict=False)


def writer() -> ProgressWriter | None:
    """This process's progress file, created on first call; None outside a launch (no
    PADDLE_LOG_DIR) or when the directory cannot be written (the job runs on, unobserved)."""
    global _writer, _disabled
    if _writer is not None or _disabled:
        return _writer
    log_dir = os.environ.get(C.PADDLE_LOG_DIR, "").strip()
    if not log_dir:
        _disabled = True
        return None
    rank = _int(os.environ, (C.TRAINER_ID, C.RANK), 0)
    path = progress_path(log_dir, rank)
    if path == _parent_path:
        _disabled = True
        return None
    try:
        _writer = ProgressWriter(path, os.environ)
    except OSError as exc:
        _disabled = True
        import sys

        print(
            f"paddlike: progress heartbeat off: cannot write {path} "
            f"({exc}); hang detection falls back to log activity",
            file=sys.stderr,
        )
    return _writer


def heartbeat(step: int | None = None) -> None:
    """Tell the launcher this rank made progress: call it once per training step.

    `step` is the step number (default: the previous one plus 1). Costs well under a
    microsecond (memory stores into a mapped file, no I/O); the launcher reads it to
    notice a job that stopped (`--hang_timeout`) and ranks that lag (stragglers).
    Every paddlike collective counts as activity too, without a call.
    """
    w = _writer
    if w is None:
        if _disabled:
            return
        w = writer()
        if w is None:
            return
    w.beat(step)


def _forget_in_child() -> None:
    """A process forked from a worker (a data-loader worker) is not that rank: it must not
    write into the rank's file, neither through the inherited mapping nor by replacing the
    file. A forked child given another rank's environment gets its own file."""
    global _writer, _disabled, _parent_path
    if _writer is not None:
        _parent_path = _writer.path
    _writer, _disabled = None, False


os.register_at_fork(after_in_child=_forget_in_child)


def _reset_for_tests() -> None:
    global _writer, _disabled
    if _writer is not None:
        _writer.close()
    _writer, _disabled = None, False


# --- the reader (launcher, logs) -----------------------------------------------------------


@dataclass(frozen=True)
class FlightEntry:
    """One collective operation as a rank recorded it."""

    n: int  # this rank's operation number, all groups (1 = the first)
    group_seq: int  # the operation's number within its group: comparable across ranks
    group_id: int
    op: str
    nbytes: int
    dtype: str
    peer: int  # global rank of the root / peer, -1 when the operation has none
    start_mono: float
    end_mono: float  # 0.0 while running
    state: str  # "running" | "done" | "failed"

    def describe(self) -> str:
        size = f" {self.nbytes} B {self.dtype}".rstrip() if self.nbytes else ""
        peer = f" peer {self.peer}" if self.peer >= 0 else ""
        return f"#{self.group_seq} {self.op}{size}{peer} (group {self.group_id}, {self.state})"


@dataclass(frozen=True)
class RankProgress:
    """A snapshot of one rank's progress file."""

    path: str
    rank: int
    world_size: int
    pid: int
    restart_count: int
    job_id: str
    hostname: str
    created_wall: float
    created_mono: float
    beats: int
    step: int
    ops: int  # collectives issued (the newest flight-record entry's number)
    last_beat_mono: float  # 0.0 before the first beat
    last_activity_mono: float  # last beat, or start/end of a collective; else creation
    coll_time_total: float
    step_time: float  # seconds per step (moving average), 0.0 before two steps
    busy_time: float  # the same, less the time inside paddlike collectives
    flight: list[FlightEntry] = field(default_factory=list)  # oldest first

    def to_wall(self, mono: float) -> float:
        """A monotonic time of this file as Unix time (0.0 stays 0.0: never)."""
        return self.created_wall + (mono - self.created_mono) if mono else 0.0

    @property
    def last_beat_wall(self) -> float:
        return self.to_wall(self.last_beat_mono)

    @property
    def last_activity_wall(self) -> float:
        return self.to_wall(self.last_activity_mono)

    def age(self, now_mono: float) -> float:
        """Seconds since the last sign of progress (same node only: monotonic clock)."""
        return now_mono - self.last_activity_mono

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types, to send to another node (see from_json)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankProgress:
        fields = dict(data)
        fields["flight"] = [FlightEntry(**e) for e in data.get("flight", [])]
        return cls(**fields)


class ProgressFileError(ValueError):
    """A file under .progress/ that is not a progress file of a known version."""


def read_progress(path: str | os.PathLike[str], flight: bool | int = True) -> RankProgress:
    """Snapshot one progress file (raises OSError when missing, ProgressFileError when it
    is not one). `flight=False` skips decoding the ring's entries (cheaper polling), an
    int K decodes only the newest K (a page of 512 ranks); the operation count and last
    activity still include the collectives."""
    with open(open_regular(path, os.O_RDONLY), "rb") as f:  # never a FIFO: it blocks
        first = f.read(FILE_BYTES)
        f.seek(0)
        second = f.read(FILE_BYTES)
    if len(first) < FILE_BYTES or first[:8] != MAGIC:
        raise ProgressFileError(
            f"{path}: not a paddlike progress file (expected {FILE_BYTES} bytes starting "
            f"{MAGIC!r}); delete it, the worker recreates it"
        )
    _magic, version, capacity, rank, world, pid, restarts, c_wall, c_mono, job, host = (
        STATIC.unpack_from(first, 0)
    )
    if version != VERSION or capacity != CAPACITY:
        raise ProgressFileError(
            f"{path}: progress file version {version} with {capacity} entries; this reader "
            f"reads version {VERSION} with {CAPACITY}: use one paddlike version per job"
        )
    live = LIVE.unpack_from(second, LIVE_OFFSET)
    if live != LIVE.unpack_from(first, LIVE_OFFSET):  # written between the copies: again
        with open(open_regular(path, os.O_RDONLY), "rb") as f:
            live = LIVE.unpack_from(f.read(FILE_BYTES), LIVE_OFFSET)
    beats, step, lb_mono, coll, step_ema, busy_ema = live
    ops, act = 0, lb_mono
    # An entry written between the two copies: the second copy is the newer one.
    rows = [row for row in ENTRY.iter_unpack(second[HEADER_BYTES:]) if row[0] > 0]
    for row in rows:
        ops = max(ops, row[0])
        act = max(act, row[7], row[8])  # a previous occupant's end is older than the start
    act = act or c_mono
    entries = []
    if flight:
        newest = sorted(rows) if flight is True else sorted(rows)[-int(flight) :]
        for n, gseq, gid, op, nbytes, dt, peer, start, end, state, _ in newest:
            if end < start:  # the end and state are still the previous occupant's
                end, state = 0.0, RUNNING
            entries.append(
                FlightEntry(
                    n=n,
                    group_seq=gseq,
                    group_id=gid,
                    op=OPS[op] if 0 <= op < len(OPS) else f"op{op}",
                    nbytes=nbytes,
                    dtype=dtype_name(dt),
                    peer=peer,
                    start_mono=start,
                    end_mono=end,
                    state=STATES.get(state, "?"),
                )
            )
    return RankProgress(
        path=str(path),
        rank=rank,
        world_size=world,
        pid=pid,
        restart_count=restarts,
        job_id=job.rstrip(b"\0").decode(errors="replace"),
        hostname=host.rstrip(b"\0").decode(errors="replace"),
        created_wall=c_wall,
        created_mono=c_mono,
        beats=beats,
        step=step,
        ops=ops,
        last_beat_mono=lb_mono,
        last_activity_mono=act,
        coll_time_total=coll,
        step_time=step_ema,
        busy_time=busy_ema,
        flight=entries,
    )


def read_all(
    log_dir: str | os.PathLike[str], job_id: str | None = None, flight: bool | int = True
) -> dict[int, RankProgress]:
    """Every rank's progress under `log_dir` (this node's workers), by global rank.
    With `job_id`, files another job left in the same directory are skipped. Unreadable
    or foreign files are skipped too: progress is a hint, never a reason to fail."""
    found: dict[int, RankProgress] = {}
    d = progress_dir(log_dir)
    try:
        names = sorted(p for p in d.iterdir() if p.name.startswith("rank."))
    except OSError:
        return found
    for p in names:
        try:
            snap = read_progress(p, flight)
        except (OSError, ProgressFileError, struct.error):
            continue
        if job_id is not None and snap.job_id and snap.job_id != job_id:
            continue
        found[snap.rank] = snap
    return found
