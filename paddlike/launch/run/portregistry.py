"""Where one user's launchers on a host record the ports they hand out (`run.ports`):
a directory of the user's own in the temp directory, checked on every use.

    <tmp>/paddlike-ports-<uid>/               0700, owned by the user
    <tmp>/paddlike-ports-<uid>/lock           the flock that guards it (0600)
    <tmp>/paddlike-ports-<uid>/<port>         "<pid> <pid start time> <unix time>" (0600)
    <tmp>/paddlike-ports-<uid>/netns-<inode>/ the same, for a network namespace of its own

Why one per user: the temp directory is shared. A registry that every user may write lets
any of them plant links that the next (root) launcher writes through, or hold its lock
and stall every launch. One user's launchers still never share a port; two users'
launchers are kept apart only by the bind check, as any two programs are.

A path at the registry's place that is not a real directory of ours closed to others
(made first by someone else, a link, mode 0777) is left alone: the launcher warns once
and takes `<name>.1` ... `<name>.7`, else a fresh `<name>.<random>`. A lock not obtained
within its deadline is a warning too: the launcher goes on without it (its ports are
still checked free, and entries are never written through links).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from paddlike.launch.console.output import PREFIX

Warn = Callable[[str], None]

# Opening anything in the registry: never through a link, never blocking on a FIFO.
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
ALTERNATES = 7
_warned: set[str] = set()  # one warning per bad path per process (rounds reuse the choice)


def warn_on_stderr(line: str) -> None:
    """The launcher's warning line, for callers without a console."""
    print(f"{PREFIX} warning: {line}", file=sys.stderr, flush=True)


def base_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """`<tmp>/paddlike-ports-<uid>`: TMPDIR or /tmp, as the temp directory is found."""
    # Not tempfile.gettempdir(): importing tempfile costs more than the whole reservation.
    return Path(environ.get("TMPDIR") or "/tmp") / f"paddlike-ports-{os.geteuid()}"


def netns_name() -> str | None:
    """`netns-<inode>` inside a network namespace of its own, else None: ports belong to a
    network namespace, so "nodes" that are namespaces of one machine must not block each
    other's ports (a fixed --master_port above all)."""
    try:
        ns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return None
    return f"netns-{ns}" if _own_network_namespace(ns) else None


def _own_network_namespace(ns: int) -> bool:
    """Whether this process's network namespace is not the machine's: pid 1's differs or,
    where pid 1's cannot be read (some containers), it is one that `ip netns` named."""
    try:
        return os.stat("/proc/1/ns/net").st_ino != ns
    except OSError:
        pass
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return False
    for name in names:
        with contextlib.suppress(OSError):
            if os.stat(f"/run/netns/{name}").st_ino == ns:
                return True
    return False


def unsafe_because(path: Path) -> str | None:
    """Why `path` cannot be this user's registry (None: it can), after creating it 0700
    when missing:

        missing, or ours with mode 0700/0755   -> None
        a symbolic link                        -> "is a symbolic link"
        a file                                 -> "is not a directory"
        owned by uid 4242                      -> "belongs to uid 4242"
        ours, mode 0777                        -> "is writable by other users (mode 0777)"
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot be created ({exc.strerror})"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def checked_dir(path: Path, warn: Warn = warn_on_stderr) -> Path:
    """`path` when it is (or can be made) a registry of this user's; else the first of its
    alternates that is, saying once why `path` was passed over."""
    why = unsafe_because(path)
    if why is None:
        return path
    candidates = [path.with_name(f"{path.name}.{n}") for n in range(1, ALTERNATES + 1)]
    candidates += [path.with_name(f"{path.name}.{os.urandom(6).hex()}") for _ in range(3)]
    for candidate in candidates:
        if unsafe_because(candidate) is None:
            if str(path) not in _warned:
                _warned.add(str(path))
                warn(
                    f"port registry {path} {why}: not used; this launcher uses {candidate} "
                    f"(remove {path} if no one needs it)"
                )
            return candidate
    raise OSError(
        f"port registry {path} {why}, and neither {path.name}.1 to .{ALTERNATES} nor a fresh "
        f"one beside it could be made (set TMPDIR to a directory of your own)"
    )


def registry_dir(given: Path | None = None, warn: Warn = warn_on_stderr) -> Path:
    """The checked registry: `given`, or this user's in the temp directory (and in it the
    network namespace's own)."""
    if given is not None:
        return checked_dir(given, warn)
    registry = checked_dir(base_dir(), warn)
    sub = netns_name()
    return checked_dir(registry / sub, warn) if sub else registry


@contextlib.contextmanager
def locked(registry: Path, timeout: float, warn: Warn = warn_on_stderr) -> Iterator[bool]:
    """Hold the registry's flock for the block; yields whether it was obtained. Not
    obtained within `timeout` seconds (or not openable): one warning, and the block runs
    unguarded rather than the launch failing on another process's lock."""
    path = registry / "lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NO_FOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        warn(f"cannot open the port registry's lock {path} ({exc.strerror}); going on without it")
        yield False
        return
    try:
        held = _flock_within(fd, timeout)
        if not held:
            warn(
                f"the port registry's lock {path} was held by another process for "
                f"{timeout:g} s; going on without it (ports are still checked free)"
            )
        yield held
    finally:
        os.close(fd)  # releases the flock


def _flock_within(fd: int, timeout: float) -> bool:
    """flock `fd` exclusively within `timeout` seconds. fcntl directly rather than the
    filelock package: the same kernel lock, without the ~20 ms its import costs. The lock
    is held for microseconds, so a short retry interval is cheap."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)


def entry_names(registry: Path) -> list[str]:
    """The registry's port entries (names that are port numbers); none when it cannot be
    read (removed under us: a temp-directory cleaner)."""
    try:
        return [name for name in os.listdir(registry) if name.isdigit()]
    except OSError:
        return []


def read_entry(path: Path) -> str | None:
    """An entry's text; None when it is missing, not a regular file (a link, a FIFO) or
    unreadable: not a valid claim."""
    try:
        fd = os.open(path, os.O_RDONLY | _NO_FOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, 256).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def write_entry(registry: Path, port: int, text: str) -> None:
    """Replace `<registry>/<port>` by `text`: written to a new file (O_EXCL, no link
    followed) and renamed over the entry (a rename replaces a link, never writes through)."""
    tmp = registry / f".{port}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, 0o600)
    try:
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(tmp, registry / str(port))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_entry(registry: Path, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(registry / name)  # unlink removes a link itself, never its target
