"""The log directory's files as the launcher writes them and `paddlike.logs` reads them.

One module for both sides (the launcher's `run.logdir` writes, `logs.reader` reads), so
that writer and reader cannot drift apart; summary.json has its own (`paddlike.summary`).
Standard library only: the launcher imports it at start-up.

    endpoints.log     "PADDLE_TRAINER_ENDPOINTS: " then one endpoint a line (Paddle's bytes)
    workerlog.N       a worker's output; each run opens with a header line:
                      ==== paddlike run 2026-11-22 10:58:01 job job-x trainer rank 1 local 1
                      restart 0: python -u train.py ====   (on one line)
    serverlog.N, heterlog.N   the same for parameter servers and heter trainers
    .paddlike.lock    the flock a launcher holds on the directory for its life
    .paddlike.owner   who holds it (JSON): pid, host, hostname, since, and for a job of
                      several nodes the job's key and name

Every file that is replaced whole (endpoints.log, summary.json, the job page) goes
through `write_atomically`: a reader sees the old file or the new one, never half.
A log directory may be shared with other users, who can plant links, FIFOs or device
nodes in it: every file is opened with O_NOFOLLOW and O_NONBLOCK and used only when it
is a regular file (`open_regular`), and a temporary one is new (O_EXCL, a random name).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from pathlib import Path

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any

ENDPOINTS_FILE = "endpoints.log"
LOCK_FILE = ".paddlike.lock"
OWNER_FILE = ".paddlike.owner"
TRAINER_ENDPOINTS_LINE = "PADDLE_TRAINER_ENDPOINTS: "
SERVER_ENDPOINTS_LINE = "PADDLE_PSERVERS_IP_PORT_LIST: "
HETER_ENDPOINTS_LINE = "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST: "
# log file prefix -> role, as DESIGN.md names them (Paddle's names too)
LOG_PREFIXES = {"workerlog": "trainer", "serverlog": "server", "heterlog": "heter"}
_LOG_NAME = r"^(workerlog|serverlog|heterlog)\.(\d+)$"
# How many lines of a log a failure report quotes.
TAIL_LINES = 20
# Opening a file in a log directory that other users may write into: never through a
# link (ELOOP instead), never becoming the controlling terminal.
NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY

# --- the run header -----------------------------------------------------------------------

# Every run header in a log starts with this; the reader splits runs on it.
HEADER_PREFIX = "==== paddlike run "
# Patterns are compiled by `re` on first use (and cached there), not at import: the
# launcher imports this module and never parses a header.
_HEADER_FACTS = (
    r"job (?P<job>\S+) (?P<role>trainer|server|heter) rank (?P<rank>\d+) "
    r"local (?P<local>\d+) restart (?P<restart>\d+)(?: round (?P<round>\d+))?"
    r"(?: stage (?P<stage>\d+))?:"
)


def match_log_name(name: str) -> re.Match[str] | None:
    """`workerlog.3` -> groups ("workerlog", "3"); None for any other file name."""
    return re.match(_LOG_NAME, name)


def format_header(
    *,
    role: str,
    rank: int,
    local_index: int,
    job_id: str,
    restart: int,
    when: float,
    command: str,
    round_: int | None = None,
    stage: str | None = None,
) -> str:
    """One line that opens a run in a log file (time, job id, role and rank, command).
    A heter trainer's says its stage after the restart count (`restart 0 stage 2:`), an
    elastic job's its round (`restart 0 round 3:`). The time has milliseconds, so that
    the page can place rounds shorter than a second (readers take it with or without)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    stamp += f".{int(when % 1 * 1000):03d}"
    return (
        f"{HEADER_PREFIX}{stamp} job {job_id} {role} rank {rank} "
        f"local {local_index} restart {restart}"
        + (f" round {round_}" if round_ is not None else "")
        + (f" stage {stage}" if stage else "")
        + f": {command} ===="
    )


def parse_header(line: str) -> re.Match[str] | None:
    """The facts of a header line (groups job, role, rank, local, restart, round, stage);
    None for any other line."""
    return re.search(_HEADER_FACTS, line) if line.startswith(HEADER_PREFIX) else None


def last_run_start(path: str | os.PathLike[str]) -> int:
    """Byte offset of the last run header in a log (0 when there is none). Earlier runs'
    output is history; reads backwards from the end in blocks."""
    needle = b"\n" + HEADER_PREFIX.encode()
    try:
        with _read_regular_file(path) as f:
            pos = f.seek(0, os.SEEK_END)
            block = 65536
            carry = b""
            while pos > 0:
                step = min(block, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + carry
                found = data.rfind(needle)
                if found >= 0:
                    return pos + found + 1
                carry = data[: len(needle)]
            return 0
    except OSError:
        return 0


def last_run_header(path: str | os.PathLike[str]) -> re.Match[str] | None:
    """The facts of the last run header in a log, if paddlike wrote one."""
    try:
        with _read_regular_file(path) as f:
            f.seek(last_run_start(path))
            line = f.readline(65536).decode("utf-8", errors="replace")
    except OSError:
        return None
    return parse_header(line)


# --- the tail -----------------------------------------------------------------------------


def read_tail(path: str | os.PathLike[str], lines: int = TAIL_LINES, start: int = 0) -> list[str]:
    """The last `lines` lines of a file written after byte `start` (this run's output
    only, when `start` is where its header ends), reading only the end: logs can be
    gigabytes. Missing or unreadable files give []; undecodable bytes are replaced."""
    if lines <= 0:
        return []
    try:
        with _read_regular_file(path) as f:
            pos = f.seek(0, os.SEEK_END)
            block = 8192
            data = b""
            while pos > start and data.count(b"\n") <= lines:
                step = min(block, pos - start)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
                block *= 2
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


def read_run_tail(path: str | os.PathLike[str], lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of the log's last run, its header left out: what the
    launcher's report quotes, so that a run that wrote nothing reads as empty, never as
    its own (or an earlier run's) header."""
    start = last_run_start(path)
    try:
        with _read_regular_file(path) as f:
            f.seek(start)
            first = f.readline(65536)
    except OSError:
        return []
    if parse_header(first.decode("utf-8", errors="replace")) is not None:
        start += len(first)
    return read_tail(path, lines, start=start)


# --- the owner file -----------------------------------------------------------------------


def owner_record(host: str, job_key: str | None = None, job_what: str | None = None) -> dict:
    """What the launcher holding a directory says about itself."""
    owner: dict[str, Any] = {
        "pid": os.getpid(),
        "host": host,
        "hostname": os.uname().nodename,
        "since": time.time(),
    }
    if job_key is not None:
        owner["job"] = job_key
        owner["job_what"] = job_what
    return owner


def write_owner(root: Path, owner: dict[str, Any]) -> None:
    """Replace the owner file atomically (a reader never sees half of it)."""
    import json  # here, not at import: a launch's start (a --dry_run) needs none

    write_atomically(root / OWNER_FILE, json.dumps(owner) + "\n")


def read_owner(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The owner record, or None where there is none (no launcher holds the directory,
    or it was written by Paddle's launchers) or it cannot be read."""
    import json

    try:
        owner = json.loads(read_regular(Path(root) / OWNER_FILE))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def read_regular(path: str | os.PathLike[str], limit: int = 1 << 20) -> bytes:
    """A regular file's first `limit` bytes; OSError for a link, a FIFO (another user's, in
    a shared directory: opening a FIFO blocks the reader until someone writes) or a device."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


class NotRegularFile(OSError):
    """A FIFO, a device node, a socket or a directory where the launcher wants a regular
    file: another user of a shared directory may plant one (a FIFO would block an open
    without end, and hand that user what is written). Its strerror says what is there."""


def what_is(mode: int) -> str:
    """A file type in words, for messages ("a FIFO")."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def _not_regular(path: str | os.PathLike[str], mode: int | None) -> NotRegularFile:
    what = "a FIFO" if mode is None else what_is(mode)  # None: ENXIO, a FIFO with no reader
    return NotRegularFile(errno.EINVAL, f"it is {what}, not a regular file", str(path))


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """`path` opened with `flags`, never through a link and never blocking: a FIFO or a
    device node found there (before the open, or after it: a race) raises NotRegularFile
    instead of blocking or being written; a link raises OSError (ELOOP). The fd returned
    is blocking again, as a log's writer (a child's stdout) expects."""
    with contextlib.suppress(FileNotFoundError):
        # Looked at first, so that a device node is never even opened (a tape rewinds).
        found = os.lstat(path).st_mode
        if not (stat.S_ISREG(found) or stat.S_ISLNK(found) or stat.S_ISDIR(found)):
            raise _not_regular(path, found)  # (a directory: the open's EISDIR says it)
    try:
        fd = os.open(path, flags | NO_FOLLOW | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # write-only on a FIFO that nobody reads
            raise _not_regular(path, None) from exc
        raise
    try:
        found = os.fstat(fd).st_mode
        if not stat.S_ISREG(found):
            raise _not_regular(path, found)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_text(path: str | os.PathLike[str], errors: str = "strict") -> str:
    """A regular file's text (UTF-8), never a FIFO's or a device's (`open_regular`)."""
    with open(open_regular(path, os.O_RDONLY), encoding="utf-8", errors=errors) as f:
        return f.read()


def _read_regular_file(path: str | os.PathLike[str]) -> Any:
    """A regular file opened for binary reading (`open_regular`): never a FIFO's reader."""
    return open(open_regular(path, os.O_RDONLY), "rb")


# --- endpoints.log ------------------------------------------------------------------------


def endpoints_text(
    trainer_endpoints: list[str] | tuple[str, ...],
    server_endpoints: list[str] | tuple[str, ...] = (),
    heter_endpoints: list[str] | tuple[str, ...] = (),
) -> str:
    """The exact contents of endpoints.log.

    trainers        servers    text
    ("a:1", "a:2")  ()         "PADDLE_TRAINER_ENDPOINTS: \\na:1\\na:2"
    ("a:1",)        ("a:9",)   "PADDLE_TRAINER_ENDPOINTS: \\na:1\\n"
                               "PADDLE_PSERVERS_IP_PORT_LIST: \\na:9"

    ps-heter adds "\\nPADDLE_ALL_HETER_TRAINER_IP_PORT_LIST: \\n" and the heter trainers,
    one a line, stage 2 first.
    """
    text = TRAINER_ENDPOINTS_LINE + "\n" + "\n".join(trainer_endpoints)
    if server_endpoints:
        text += "\n" + SERVER_ENDPOINTS_LINE + "\n" + "\n".join(server_endpoints)
    if heter_endpoints:
        text += "\n" + HETER_ENDPOINTS_LINE + "\n" + "\n".join(heter_endpoints)
    return text


def parse_endpoints(text: str) -> dict[str, list[str]]:
    """endpoints.log -> {"PADDLE_TRAINER_ENDPOINTS": [...], ...}.

    Paddle's format: a line `NAME: ` then one endpoint per line; a later `NAME:` line
    starts the next list. Values on the heading line (comma-separated) count too; lines
    starting with `#` (an elastic job's round) are comments.
    """
    lists: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"^([A-Z][A-Z0-9_]*):\s*(.*)$", line)
        if match:
            current = lists.setdefault(match.group(1), [])
            current.extend(v for v in match.group(2).split(",") if v.strip())
        elif current is not None:
            current.extend(v.strip() for v in line.split(",") if v.strip())
    return lists


def new_file(path: Path, mode: int = 0o644) -> int:
    """A file created at `path` for writing, its fd; FileExistsError when anything is
    there already, a link or a FIFO included (O_EXCL never follows or opens one)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW | os.O_NONBLOCK, mode)


def append_fd(path: Path, mode: int = 0o644) -> int:
    """`path` opened for append (created when missing), never through a link: OSError
    (ELOOP) when `path` is a symbolic link, NotRegularFile when it is a FIFO or a device."""
    return open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)


def write_atomically(
    path: Path, data: bytes | str, *, in_place_when_full: bool = False
) -> None:
    """Replace `path` with `data` so that readers see the old file or the new one (a
    temporary file, then a rename). Nothing is left behind when it fails: the temporary
    file goes, and OSError is raised naming `path`. `in_place_when_full`: on a full disk
    (ENOSPC) an existing file is overwritten in place when the blocks it holds fit
    `data`, so that a disk that filled up during the job still gets summary.json's last
    word (endpoints.log must fail instead: no round starts on a full disk). Such a file is
    given room beyond its end while the disk has some (`keep_room`): a last word longer
    than the file before it (a restart's, a cause's) fits too."""
    if isinstance(data, str):
        data = data.encode()
    # A new file (never one someone planted, never through a link), renamed over `path`:
    # a rename replaces a link at `path` and never writes through it.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    created = False
    try:
        fd = new_file(tmp)
        created = True
        with open(fd, "wb") as f:
            f.write(data)
            if in_place_when_full:
                f.flush()
                keep_room(f.fileno(), max(ROOM_MIN, 2 * len(data)))
        os.replace(tmp, path)
    except OSError as exc:
        if created:
            with contextlib.suppress(OSError):
                tmp.unlink()
        full = exc.errno == errno.ENOSPC and in_place_when_full
        if not full or not _overwrite_in_place(path, data):
            raise OSError(exc.errno, exc.strerror, str(path)) from exc  # the file it was for


ROOM_MIN = 64 * 1024  # a file rewritten in place on a full disk: room for its last word
_FALLOC_FL_KEEP_SIZE = 1


def keep_room(fd: int, size: int) -> None:
    """Allocate the file's blocks up to `size` bytes without changing its length
    (fallocate's KEEP_SIZE: readers see the same bytes). Best effort: a file system
    without it (or a full one) leaves the file as it is."""
    import ctypes  # the launcher's run.linux loaded it already

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate(ctypes.c_int(fd), ctypes.c_int(_FALLOC_FL_KEEP_SIZE),
                   ctypes.c_long(0), ctypes.c_long(size))  # fmt: skip


def _overwrite_in_place(path: Path, data: bytes) -> bool:
    """Write `data` over `path` when the blocks the file holds already fit it (a full disk
    gives no new ones); False, the file untouched, when they do not."""
    try:
        fd = open_regular(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        room = os.fstat(fd).st_blocks * 512
        if room < len(data):
            return False
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))  # frees the blocks after it: taken back at once, so
        keep_room(fd, room)  # the full disk stays full (and the next last word fits too)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
