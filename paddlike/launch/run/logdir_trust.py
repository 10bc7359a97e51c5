"""What the launcher refuses in a log directory that other users may share.

A team's log folder (/shared/logs, mode 1777) lets every user plant things where the
launcher will write. Refused, each with one line naming the path (LogDirError: exit 2
before anything starts, the job's FAILED line between rounds):

- a link at a log file or the lock (never written through);
- a FIFO, a device node or a socket where a file goes (a FIFO would block the launcher
  without end and hand its reader what the launcher writes; `logformat.open_regular`);
- a log file or the lock that belongs to another user (their lines would sit above
  ours; their lock would be theirs to hold);
- a `--log_dir` that is, or passes through, another user's link in a world-writable
  directory (the kernel's protected_symlinks rule, whether or not it is switched on),
  or that is another user's directory in a world-writable directory (theirs).

"Another user" is neither this user nor root; root's own files on an NFS export with
root_squash belong to nobody (65534), which root therefore accepts.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from paddlike import logformat

# The uid an NFS server with root_squash gives to what root creates.
NFS_NOBODY = 65534


class LogDirError(Exception):
    """The directory cannot be created or written (message names the path and why)."""


def foreign(uid: int) -> bool:
    """Whether a file owned by `uid` is another user's: not ours, not root's, and (for
    root) not nobody's, which is what root's own files are on a root_squash export."""
    me = os.geteuid()
    return uid not in (me, 0) and not (me == 0 and uid == NFS_NOBODY)


def user_name(uid: int) -> str:
    """`alice (uid 1001)`, or `uid 4242` for a uid with no passwd entry."""
    import pwd  # small, and needed only for a message

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_log_dir_path(root: Path) -> None:
    """LogDirError when `root` (absolute) leads through another user's link in a
    world-writable directory, is another user's link, or is another user's directory in
    a world-writable directory. A user's own link (log -> /scratch/me/log) is followed."""
    here = Path(root.anchor)
    parts = root.parts[1:]
    for index, part in enumerate(parts):
        _check_guarded(here, root)
        path = here / part
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return  # the rest is made by the launcher (mkdir), as this user
        except OSError:
            return  # mkdir says why, naming the path
        if stat.S_ISLNK(found.st_mode):
            _check_link(path, found, here, last=index == len(parts) - 1)
            here = Path(os.path.realpath(path))
        else:
            here = path if part != ".." else Path(os.path.realpath(path))
    try:
        found = os.stat(here)
    except OSError:
        return
    owner = found.st_uid
    if stat.S_ISDIR(found.st_mode) and foreign(owner) and _world_writable(here.parent):
        raise LogDirError(
            f"log directory {root} belongs to {user_name(owner)}, not to this user, in the "
            f"world-writable directory {here.parent}: it is theirs; pass another --log_dir"
        )


def _check_link(path: Path, found: os.stat_result, parent: Path, *, last: bool) -> None:
    """Refuse another user's link: at the log directory itself anywhere, and on the way
    to it where the kernel's protected_symlinks would (a world-writable directory, the
    link's owner neither the follower nor the directory's owner)."""
    if not foreign(found.st_uid):
        return
    try:
        shared = _world_writable(parent) and os.stat(parent).st_uid != found.st_uid
    except OSError:
        shared = True
    if last or shared:
        what = "log directory" if last else "the path to the log directory at"
        raise LogDirError(
            f"{what} {path} is a symbolic link (to {_target(path)}) that belongs to "
            f"{user_name(found.st_uid)}, not to this user: the launcher does not follow "
            "another user's links; pass another --log_dir"
        )


def _check_guarded(directory: Path, root: Path) -> None:
    """Refuse a path through a directory that any user may write without the sticky bit:
    there another user can rename what the launcher checked and put a link in its place
    before the files are opened (the kernel's protected_symlinks guards only sticky ones)."""
    try:
        mode = os.stat(directory).st_mode
    except OSError:
        return
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise LogDirError(
            f"log directory {root}: {directory} on its path can be written by every user "
            f"and has no sticky bit (mode {stat.S_IMODE(mode):04o}), so another user could "
            f"put a link in place of the log directory; chmod +t {directory}, or pass "
            "another --log_dir"
        )


def _world_writable(directory: Path) -> bool:
    try:
        return bool(os.stat(directory).st_mode & stat.S_IWOTH)
    except OSError:
        return False


def _target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def check_own_file(path: Path, fd: int) -> None:
    """LogDirError when the open file `fd` (at `path`) belongs to another user."""
    owner = os.fstat(fd).st_uid
    if foreign(owner):
        raise LogDirError(
            f"log file {path} belongs to {user_name(owner)}, not to this user: the launcher "
            "does not write into another user's file; remove it, or pass another --log_dir"
        )


def open_log_file(path: Path, flags: int) -> int:
    """A log file opened for writing (`flags` add to O_WRONLY|O_APPEND): a regular file of
    this user's, never through a link; else LogDirError naming it and what is there."""
    try:
        fd = logformat.open_regular(path, os.O_WRONLY | os.O_APPEND | flags, 0o644)
    except logformat.NotRegularFile as exc:
        raise LogDirError(not_regular_message(path, exc)) from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LogDirError(symlink_message(path)) from exc
        raise LogDirError(
            f"cannot open log file {path} for writing: {exc.strerror} (make it writable, "
            "remove it, or pass another --log_dir)"
        ) from exc
    try:
        check_own_file(path, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def not_regular_message(path: Path, exc: OSError) -> str:
    return (
        f"log file {path}: {exc.strerror}: the launcher writes only regular files; "
        "remove it, or pass another --log_dir"
    )


def cannot_open(path: Path, exc: OSError) -> LogDirError:
    """The one line for a file of the log directory the launcher cannot use."""
    why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
    return LogDirError(
        f"cannot open {path}: {why} (make it writable, remove it, or pass another --log_dir)"
    )


def check_replaceable(path: Path) -> None:
    """LogDirError when `path`, replaced by a rename later, is a directory (too late then)."""
    try:
        is_dir = path.is_dir() and not path.is_symlink()
    except OSError:
        return
    if is_dir:
        raise LogDirError(
            f"cannot write {path}: it is a directory (remove it, or pass another --log_dir)"
        )


def check_writable(path: Path) -> None:
    """LogDirError unless `path` is missing or a regular file of this user's that this
    process may append to. As root, permission bits do not stop a write, but a directory
    or an immutable file does: opening is the one test that asks the kernel what the
    launch will ask. Nothing is created or changed."""
    try:
        fd = open_log_file(path, 0)
    except LogDirError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            return  # created at the launch
        raise
    os.close(fd)


def symlink_message(path: Path) -> str:
    """A link where a log file goes: in a shared directory, another user may have planted
    it to make the launcher write into a file of its choice. Refused, never followed."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return (
        f"log file {path} is a symbolic link{target}: the launcher does not write through "
        "links; remove it, or pass another --log_dir"
    )
