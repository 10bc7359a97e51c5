"""The log directory: created before any worker starts, locked for the launcher's life.

    endpoints.log   "PADDLE_TRAINER_ENDPOINTS: " then one endpoint a line (Paddle's
                    bytes exactly: no newline after the last one); PS mode adds
                    "\\nPADDLE_PSERVERS_IP_PORT_LIST: " and the servers the same way
    workerlog.N     a worker's stdout and stderr; one header line per run
    .paddlike.lock  the lock (flock) two launchers on one directory contend for
    .paddlike.owner who holds it: pid, host, hostname, start time, and for a job of
                    several nodes the job it runs (JSON)
    <host>/         a node of the same job that found the directory held (a shared
                    home over NFS): the same files, its own lock (docs/logdir.md)

Another user may share the directory and plant links, FIFOs or files of their own in it:
no file here is opened through a link, none but a regular file is written, none of
another user's is appended to (`run.logdir_trust`). What is refused is refused before
anything starts (`LogDir.checked`: one line naming it, exit 2); endpoints.log,
summary.json and the owner file are replaced by a rename, which replaces a link rather
than writing through.

The lock is what keeps a second launcher from interleaving its workers' output
with ours; its message names the holder so the user can find and stop it. Nodes of
one job are not rivals: the first takes the directory, each later one a directory of
its own inside it, named by its address, found by `python -m paddlike.logs`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from paddlike import logformat
from paddlike.contract import STAGE_ID
from paddlike.launch import NamedTuple
from paddlike.launch.plan.plan import LaunchPlan, ProcessSpec, Role
from paddlike.launch.run.logdir_trust import (
    LogDirError,
    cannot_open,
    check_log_dir_path,
    check_replaceable,
    check_writable,
    foreign,
    open_log_file,
    user_name,
)
from paddlike.logformat import (  # the formats, shared with paddlike.logs
    ENDPOINTS_FILE,
    HEADER_PREFIX,
    LOCK_FILE,
    OWNER_FILE,
    endpoints_text,
)
from paddlike.summary import SUMMARY_FILE

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ENDPOINTS_FILE",
    "HEADER_PREFIX",
    "LOCK_FILE",
    "OWNER_FILE",
    "LogDirError",
    "endpoints_text",
]
# How many nodes of one job on one host may share a directory (loopback test clusters):
# the second takes <host>.2, and so on.
MAX_SAME_HOST = 64


class JobClaim(NamedTuple):
    """Which job of several nodes a launcher runs, as it can tell before the rendezvous.

    `key` is equal on every node of one job and differs between jobs: derived from the
    job id when one was given, else from where the launchers meet and the configuration
    every node must share (the rendezvous's fingerprint). `what` names it for messages.
    """

    key: str
    what: str

    @classmethod
    def of(cls, *, job_id: str | None, meeting: str, fingerprint: dict[str, str]) -> JobClaim:
        """job_id given: that names the job. Else the meeting address and the
        fingerprint: two concurrent jobs cannot meet at one address, and one job's nodes
        must agree on the fingerprint (a node that disagrees is another job to us)."""
        if job_id:
            basis: object = {"job_id": job_id}
            what = f"job {job_id}"
        else:
            basis = {"meeting": meeting, "fingerprint": fingerprint}
            script = fingerprint.get("training script", "")
            what = f"the job meeting at {meeting}" + (f" running {script}" if script else "")
        digest = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()
        return cls(digest[:32], what)


class LogDirBusy(Exception):
    """Another launcher holds the directory's lock; the message names its pid and host."""


class WorkerLog:
    """The open log file(s) of one process: fds to hand to the child, and where its run begins.

    `start`/`err_start` are byte offsets just past this run's header: the console's
    tee and the failure report read from there, never earlier runs' output.
    """

    __slots__ = ("err_path", "err_start", "path", "start", "stderr", "stdout")

    def __init__(
        self,
        path: Path,
        stdout: int,
        stderr: int,
        start: int,
        err_path: Path | None = None,
        err_start: int = 0,
    ) -> None:
        self.path = path
        self.stdout = stdout
        self.stderr = stderr
        self.start = start
        self.err_path = err_path
        self.err_start = err_start

    def close(self) -> None:
        """Close the launcher's copies (the child keeps its own). Idempotent."""
        for fd in {self.stdout, self.stderr}:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.stdout = self.stderr = -1


def format_header(
    spec: ProcessSpec, *, job_id: str, restart: int, when: float, round_: int | None = None
) -> str:
    """One line that opens a run in a log file (time, job id, role and rank, command).

    ==== paddlike run 2026-11-22 10:58:01 job job-x trainer rank 1 local 1 restart 0:
         python -u train.py --lr 0.1 ====   (on one line)

    A heter trainer's says its stage after the restart count (`restart 0 stage 2:`), for
    `paddlike.logs`, which shows it; an elastic job's says its round (`restart 0 round 3:`).
    The format is `paddlike.logformat`'s, which the reader parses.
    """
    return logformat.format_header(
        role=spec.role.value,
        rank=spec.rank,
        local_index=spec.local_index,
        job_id=job_id,
        restart=restart,
        when=when,
        command=" ".join(spec.argv),
        round_=round_,
        stage=spec.env.get(STAGE_ID) if spec.role is Role.HETER else None,
    )


class LogDir:
    """A locked log directory. Use as a context manager: `with LogDir.open(...) as logdir:`."""

    def __init__(
        self,
        path: Path,
        lock: int,
        *,
        overwrite: bool,
        shared_with: dict[str, Any] | None = None,
    ) -> None:
        self.path = path
        self._lock = lock
        self._overwrite = overwrite
        self._opened: set[str] = set()  # files already truncated/headed by this launcher
        # The owner of the directory given, when it is a launcher of the same job and
        # this one took a directory of its own inside it (None: we hold the one given).
        self.shared_with = shared_with

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        overwrite: bool,
        host: str,
        job: JobClaim | None = None,
        logs: Sequence[str] = (),
    ) -> LogDir:
        """Create `path` if needed and take its lock, or raise LogDirBusy naming the holder.

        With `job` (a job of several nodes): when the holder is a launcher of the same
        job, take `<path>/<host>/` (`<host>.2` ... when nodes of the job share a host)
        with its own lock instead; a holder of another job is still refused.
        `logs`: the log file names this node will open; each must be openable for
        writing (LogDirError otherwise, the lock released), so that a bad file ends the
        launch before anything starts or is written."""
        root = Path(path).absolute()
        taken = _try_lock(root, host, job)
        if isinstance(taken, int):
            return cls(root, taken, overwrite=overwrite).checked(logs)
        holder = taken
        if job is None or holder is None or holder.get("job") != job.key:
            raise LogDirBusy(_busy_message(root, holder, job))
        base = _dir_name(host)
        for n in range(1, MAX_SAME_HOST + 1):
            sub = root / (base if n == 1 else f"{base}.{n}")
            inner = _try_lock(sub, host, job)
            if isinstance(inner, int):
                return cls(sub, inner, overwrite=overwrite, shared_with=holder).checked(logs)
            if inner is None or inner.get("job") != job.key:  # not one of ours: say whose
                raise LogDirBusy(_busy_message(sub, inner, job))
        raise LogDirBusy(
            f"log directory {root} and {MAX_SAME_HOST} node directories in it for host "
            f"{host} are in use by launchers of {job.what}; pass another --log_dir"
        )

    def checked(self, logs: Sequence[str]) -> LogDir:
        """This directory, once every file in `logs` can be opened for writing; else the
        lock is released and LogDirError says which file and why. Nothing is created or
        changed: an existing file is opened for append and closed, a missing one needs
        only the directory's write permission (checked when the lock was taken)."""
        try:
            for name in (ENDPOINTS_FILE, SUMMARY_FILE):
                check_replaceable(self.path / name)
            for name in logs:
                check_writable(self.path / name)
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> LogDir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the lock (the owner file goes first, so no one reads a stale owner)."""
        if self._lock is None:
            return
        with contextlib.suppress(OSError):
            (self.path / OWNER_FILE).unlink()
        os.close(self._lock)  # closing the descriptor releases the flock
        self._lock = None

    def write_endpoints(
        self,
        trainer_endpoints: Sequence[str],
        server_endpoints: Sequence[str] = (),
        heter_endpoints: Sequence[str] = (),
        *,
        header: str = "",
    ) -> Path:
        """endpoints.log in Paddle's format (see the module docstring for the exact bytes);
        an elastic job's starts with a `header` line naming the round."""
        text = endpoints_text(trainer_endpoints, server_endpoints, heter_endpoints)
        if header:
            text = f"{header}\n{text}"
        target = self.path / ENDPOINTS_FILE
        logformat.write_atomically(target, text)
        return target

    def open_log(self, spec: ProcessSpec, header: str) -> WorkerLog:
        """Open the process's log file(s) for append (truncated once per launch with
        overwrite), write `header`, and return fds for the child's stdout and stderr."""
        out_path = self.path / spec.log_name
        out_fd, out_start = self._open_one(out_path, header)
        if spec.err_log_name is None:
            return WorkerLog(out_path, out_fd, out_fd, out_start)
        err_path = self.path / spec.err_log_name
        try:
            err_fd, err_start = self._open_one(err_path, header)
        except BaseException:
            os.close(out_fd)
            raise
        return WorkerLog(out_path, out_fd, err_fd, out_start, err_path, err_start)

    def _open_one(self, path: Path, header: str) -> tuple[int, int]:
        fd = open_log_file(path, os.O_CREAT)
        if path.name not in self._opened and self._overwrite:
            # Truncated once the open file is known to be a regular file of ours: O_TRUNC
            # in the open would empty another user's file before its owner is seen.
            try:
                os.ftruncate(fd, 0)
            except OSError as exc:
                os.close(fd)
                raise LogDirError(f"cannot truncate log file {path}: {exc.strerror}") from exc
        self._opened.add(path.name)
        try:
            size = os.fstat(fd).st_size
            prefix = "\n" if size and not _ends_with_newline(path, size) else ""
            data = (prefix + header.rstrip("\n") + "\n").encode()
            os.write(fd, data)
            return fd, size + len(data)
        except BaseException:
            os.close(fd)
            raise


def log_files(plan: LaunchPlan) -> list[str]:
    """Every log file name this node's processes write (for `LogDir.open(logs=...)`)."""
    names = [spec.log_name for spec in plan.processes]
    names += [spec.err_log_name for spec in plan.processes if spec.err_log_name]
    return names


def read_tail_since(path: str | os.PathLike[str], start: int, lines: int = 20) -> list[str]:
    """The last `lines` lines of a file written after byte `start` (this run's output only)."""
    return logformat.read_tail(path, lines, start=start)


def _try_lock(root: Path, host: str, job: JobClaim | None) -> int | dict[str, Any] | None:
    """Create `root` and take its lock: the lock's fd; else the holder's owner record
    (None when it cannot be read)."""
    check_log_dir_path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LogDirError(f"cannot create log directory {root}: {exc.strerror}") from exc
    if not os.access(root, os.W_OK | os.X_OK):
        raise LogDirError(f"log directory {root} is not writable")
    # fcntl.flock rather than the filelock package: the same kernel lock, released by
    # the kernel when the launcher dies however it dies, without the ~40 ms that
    # importing filelock adds to every launch (start-up time is a feature here).
    lock = _open_lock(root / LOCK_FILE)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return _read_owner(root)
    except OSError as exc:  # NFS: an exclusive lock needs a writable descriptor
        os.close(lock)
        raise cannot_open(root / LOCK_FILE, exc) from exc
    try:
        _write_owner(root, host, job)
    except OSError as exc:
        os.close(lock)
        raise cannot_open(root / OWNER_FILE, exc) from exc
    except BaseException:
        os.close(lock)
        raise
    return lock


def _open_lock(path: Path) -> int:
    """The lock's fd. One we create is this user's alone (0600: another user who could
    flock it would hold the directory against us); one left behind by an earlier launcher
    of ours is reused, read-only where we may only read it (flock needs no write). One
    of another user's is refused naming them: the directory is theirs to hold.
    LogDirError names the file when it cannot be used."""
    try:
        fd = logformat.open_regular(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise cannot_open(path, exc) from exc
    else:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
        except OSError:
            os.close(fd)
            raise
        return fd
    for mode in (os.O_RDWR, os.O_RDONLY):
        try:
            fd = logformat.open_regular(path, mode)
        except PermissionError as exc:
            denied = exc
            continue
        except OSError as exc:
            raise cannot_open(path, exc) from exc
        owner = os.fstat(fd).st_uid
        if foreign(owner):
            os.close(fd)
            raise LogDirError(_held_by(path, owner))
        return fd
    with contextlib.suppress(OSError):  # not even readable: whose is it?
        if foreign(owner := os.lstat(path).st_uid):
            raise LogDirError(_held_by(path, owner))
    raise cannot_open(path, denied) from denied


def _held_by(path: Path, owner: int) -> str:
    return (
        f"log directory {path.parent} is held by {user_name(owner)}: its lock file "
        f"{path} is theirs, not this user's; pass another --log_dir"
    )


def _dir_name(host: str) -> str:
    """A node's directory name: its address, with anything a path cannot hold replaced.
    An IPv6 address's colons become "_" (fd00:198:18::1 -> fd00_198_18__1): scp and make
    read a colon as a host or a target separator."""
    name = "".join(c if c.isalnum() or c in ".-_" else "_" for c in host)
    return name if name.strip(".") else "node"


def _ends_with_newline(path: Path, size: int) -> bool:
    try:
        fd = logformat.open_regular(path, os.O_RDONLY)
    except OSError:
        return False  # unreadable: a blank line more before the header
    try:
        return os.pread(fd, 1, size - 1) == b"\n"
    except OSError:
        return False
    finally:
        os.close(fd)


def _write_owner(root: Path, host: str, job: JobClaim | None) -> None:
    if job is None:
        logformat.write_owner(root, logformat.owner_record(host))
    else:
        logformat.write_owner(root, logformat.owner_record(host, job.key, job.what))


def _read_owner(root: Path, wait: float = 1.0) -> dict[str, Any] | None:
    """The holder's owner record. It appears right after the holder takes the lock:
    allow a moment; None when it cannot be read by then."""
    deadline = time.monotonic() + wait
    while True:
        owner = logformat.read_owner(root)
        if owner is not None or time.monotonic() >= deadline:
            return owner
        time.sleep(0.01)  # the holder is between flock and its owner-file rename


def _busy_message(root: Path, owner: dict[str, Any] | None, job: JobClaim | None) -> str:
    """Name the holder (and, for a job of several nodes, that it runs another job)."""
    if owner is None:
        return (
            f"log directory {root} is in use by another launcher (its pid is unknown); "
            f"wait for it to finish or pass another --log_dir"
        )
    since = time.strftime("%H:%M:%S", time.localtime(owner.get("since", 0)))
    other = ""
    if job is not None:
        theirs = owner.get("job_what")
        if theirs == job.what:  # same address and script: another option differs
            other = (
                f", for {theirs} but with another configuration than this node's "
                "(compare the two command lines)"
            )
        else:
            other = f", for another job ({theirs})" if theirs else ", for another job"
    return (
        f"log directory {root} is in use by launcher pid {owner.get('pid')} on host "
        f"{owner.get('host')} ({owner.get('hostname')}), running since {since}{other}; "
        f"wait for it to finish or pass another --log_dir"
    )
