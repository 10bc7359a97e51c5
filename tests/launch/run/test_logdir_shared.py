"""A log directory's own files the launcher cannot use: the lock left by another user of a
shared directory, an owner file or endpoints.log/summary.json that cannot be replaced.
Each is one line naming the path and exit 2, nothing started, or (a lock we may read)
no error at all. "Another user" is root without its file-permission override (setpriv)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.run.logdir import LogDir
from tests.support.second_user import SECOND_UID

pytestmark = pytest.mark.timeout(60)

NO_OVERRIDE = "-dac_override,-dac_read_search,-fowner"
REMEDY = "(make it writable, remove it, or pass another --log_dir)"


def _as_a_user() -> list[str]:
    """The prefix that runs a command as root without the permission override."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop the permission override")
    return ["setpriv", f"--inh-caps={NO_OVERRIDE}", f"--bounding-set={NO_OVERRIDE}"]


def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' to own the other user's files")
    return entry.pw_uid, entry.pw_gid


def _launch(log: Path, prefix: list[str] = ()) -> subprocess.CompletedProcess[str]:  # type: ignore[assignment]
    script = log.parent / "train.py"
    script.write_text("open('STARTED', 'a').close()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2",
         "--log_dir", str(log), str(script)],
        cwd=log.parent, env=env, capture_output=True, text=True, timeout=45,
    )  # fmt: skip


@pytest.fixture
def shared_log(tmp_path: Path) -> Path:
    """A world-writable log/ whose .paddlike.lock belongs to nobody (0644): root's own
    lock as an NFS export with root_squash shows it."""
    uid, gid = _nobody()
    log = tmp_path / "log"
    log.mkdir()
    log.chmod(0o777)
    lock = log / ".paddlike.lock"
    lock.touch(0o644)
    lock.chmod(0o644)
    os.chown(lock, uid, gid)
    tmp_path.chmod(0o755)
    return log


def test_a_lock_file_of_nobody_does_not_stop_root_as_on_a_root_squash_export(shared_log):
    """Root's own files on an NFS export with root_squash belong to nobody (65534)."""
    done = _launch(shared_log, _as_a_user())
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("OK: 2 workers finished in ")
    assert (shared_log.parent / "STARTED").exists()


def test_a_lock_file_the_user_cannot_open_is_one_line_and_exit_2(shared_log):
    (shared_log / ".paddlike.lock").chmod(0o600)
    done = _launch(shared_log, _as_a_user())
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --log_dir: cannot open {shared_log}/.paddlike.lock: "
        f"Permission denied {REMEDY}"
    ]
    assert not (shared_log.parent / "STARTED").exists()


def test_the_lock_made_in_a_shared_directory_is_this_users_alone_whatever_the_umask(tmp_path):
    """Issue 31: a lock made 0666 in a world-writable directory let another user flock it
    and hold the directory against the launcher ("its pid is unknown")."""
    old = os.umask(0)
    try:
        for mode in (0o1777, 0o777, 0o775, 0o755):
            log = tmp_path / f"log{mode:o}"
            log.mkdir()
            log.chmod(mode)
            with LogDir.open(log, overwrite=False, host="h"):
                pass
            assert (log / ".paddlike.lock").stat().st_mode & 0o777 == 0o600, oct(mode)
    finally:
        os.umask(old)


def test_an_owner_file_that_cannot_be_written_is_one_line_and_exit_2(tmp_path):
    log = tmp_path / "log"
    (log / ".paddlike.owner" / "x").mkdir(parents=True)  # no rename replaces it
    done = _launch(log)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --log_dir: cannot open {log}/.paddlike.owner: "
        f"Is a directory {REMEDY}"
    ]
    assert not (tmp_path / "STARTED").exists()


@pytest.mark.parametrize("name", ["endpoints.log", "summary.json"])
def test_a_directory_in_place_of_a_file_the_launcher_replaces_is_refused_first(tmp_path, name):
    log = tmp_path / "log"
    (log / name / "x").mkdir(parents=True)
    done = _launch(log)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --log_dir: cannot write {log}/{name}: it is a directory "
        "(remove it, or pass another --log_dir)"
    ]
    assert not (tmp_path / "STARTED").exists()
    assert sorted(p.name for p in log.iterdir()) == [".paddlike.lock", name]


def test_another_users_lock_this_user_cannot_even_read_names_them_not_a_chmod(tmp_path):
    """Not "make it writable" (their lock is theirs to keep): the holder, and another
    --log_dir."""
    log = tmp_path / "log"
    log.mkdir()
    log.chmod(0o1777)
    tmp_path.chmod(0o755)
    lock = log / ".paddlike.lock"
    lock.touch(0o600)
    lock.chmod(0o600)
    os.chown(lock, SECOND_UID, SECOND_UID)
    done = _launch(log, _as_a_user())
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --log_dir: log directory {log} is held by uid {SECOND_UID}: "
        f"its lock file {lock} is theirs, not this user's; pass another --log_dir"
    ]
    assert not (tmp_path / "STARTED").exists()
