"""A log directory shared with another user, who plants links where the launcher will
write: a link at a log file is refused before anything starts (one line, exit 2), the
files replaced whole (endpoints.log, summary.json, the owner file) replace the link, and
nothing is ever written through one. The other user is uid 4242 (setpriv)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.plan.plan import ProcessSpec, Role
from paddlike.launch.run.logdir import LogDir, LogDirError
from paddlike.logformat import write_atomically
from tests.support.second_user import (
    as_second_user,
    root_only_file,
    run_as_second_user,
    shared_temp_dir,
)

pytestmark = pytest.mark.timeout(60)

SECRET = "root's secret\n"


@pytest.fixture
def shared_log() -> Path:
    """log/ in a shared temp directory, world-writable as a team's shared log folder."""
    with shared_temp_dir() as shared:
        log = shared / "log"
        log.mkdir()
        log.chmod(0o1777)
        yield log


def _plant(link: Path, target: Path) -> None:
    run_as_second_user(["ln", "-s", str(target), str(link)])


def _launch(log: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    script = log.parent / "train.py"
    script.write_text("open(__file__ + '.STARTED', 'a').close()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "1", *extra,
         "--log_dir", str(log), str(script)],
        cwd=log.parent, env=env, capture_output=True, text=True, timeout=45,
    )  # fmt: skip


@pytest.mark.parametrize("overwrite", [False, True], ids=["append", "log_overwrite"])
def test_a_link_planted_at_workerlog_is_refused_before_anything_starts(shared_log, overwrite):
    victim = root_only_file(shared_log.parent)
    _plant(shared_log / "workerlog.0", victim)
    done = _launch(shared_log, *(["--log_overwrite"] if overwrite else []))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --log_dir: log file {shared_log}/workerlog.0 is a symbolic "
        f"link (to {victim}): the launcher does not write through links; remove it, or pass "
        "another --log_dir"
    ]
    assert victim.read_text() == SECRET
    assert not (shared_log.parent / "train.py.STARTED").exists()


def test_links_at_the_files_replaced_whole_are_replaced_not_written_through(shared_log):
    victim = root_only_file(shared_log.parent)
    for name in ("endpoints.log", "summary.json", ".paddlike.owner"):
        _plant(shared_log / name, victim)
    done = _launch(shared_log)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == SECRET
    assert (shared_log / "endpoints.log").read_text().startswith("PADDLE_TRAINER_ENDPOINTS: ")
    assert not (shared_log / "endpoints.log").is_symlink()
    assert not (shared_log / "summary.json").is_symlink()


def test_a_lock_file_planted_as_a_link_is_one_line_and_exit_2(shared_log):
    victim = root_only_file(shared_log.parent)
    _plant(shared_log / ".paddlike.lock", victim)
    done = _launch(shared_log)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --log_dir: cannot open {shared_log}/.paddlike.lock: it is "
        "a symbolic link (make it writable, remove it, or pass another --log_dir)"
    ]
    assert victim.read_text() == SECRET


def _spec(log_name: str) -> ProcessSpec:
    return ProcessSpec(
        role=Role.TRAINER, rank=0, local_index=0, device_ids=(), endpoint="127.0.0.1:1",
        env={}, argv=("python", "t.py"), log_name=log_name,
    )  # fmt: skip


def test_a_link_planted_after_the_check_is_still_not_opened(tmp_path):
    victim = root_only_file(tmp_path)
    log = tmp_path / "log"
    with LogDir.open(log, overwrite=True, host="127.0.0.1", logs=["workerlog.0"]) as logdir:
        (log / "workerlog.0").symlink_to(victim)  # between the check and a restart's open
        with pytest.raises(LogDirError, match=r"workerlog\.0 is a symbolic link"):
            logdir.open_log(_spec("workerlog.0"), "==== header ====")
    assert victim.read_text() == SECRET


def test_a_replaced_file_whose_temporary_name_is_planted_is_still_written(tmp_path):
    victim = root_only_file(tmp_path)
    target = tmp_path / "endpoints.log"
    for n in range(8):  # whatever a neighbour guesses, the temporary file is a new one
        (tmp_path / f".endpoints.log.{os.getpid() + n}.tmp").symlink_to(victim)
    write_atomically(target, "PADDLE_TRAINER_ENDPOINTS: 127.0.0.1:1")
    assert target.read_text() == "PADDLE_TRAINER_ENDPOINTS: 127.0.0.1:1"
    assert victim.read_text() == SECRET


# Round 0 plants the link in its own log's place (as another user could between rounds),
# then fails so that the launcher restarts it.
PLANT_THEN_FAIL = """
import os, sys
if os.environ["PADDLIKE_RESTART_COUNT"] == "0":
    log = os.path.join(os.environ["PADDLE_LOG_DIR"], "workerlog.0")
    os.remove(log)
    os.symlink(sys.argv[1], log)
    sys.exit(3)
open(sys.argv[1] + ".RESTARTED", "a").close()
"""


def test_a_link_planted_before_a_restart_ends_the_job_naming_it_without_a_traceback(tmp_path):
    victim = root_only_file(tmp_path)
    script = tmp_path / "plant.py"
    script.write_text(PLANT_THEN_FAIL)
    log = tmp_path / "log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "1", "--max_restarts",
         "1", "--log_dir", str(log), str(script), str(victim)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        f"FAILED: log file {log}/workerlog.0 is a symbolic link (to {victim}): the launcher "
        "does not write through links; remove it, or pass another --log_dir"
    ) in done.stderr.splitlines()
    assert victim.read_text() == SECRET
    assert not Path(f"{victim}.RESTARTED").exists()


def test_a_fifo_planted_as_the_owner_file_of_a_held_directory_does_not_hang_the_launcher(
    shared_log,
):
    """uid 4242 holds the shared directory's lock and puts a FIFO where the holder's
    record is read: the launcher says the directory is busy instead of blocking on it.
    The lock is root's (left by an earlier launch), which uid 4242 may flock read-only."""
    (shared_log / ".paddlike.lock").touch(0o644)
    run_as_second_user(["mkfifo", str(shared_log / ".paddlike.owner")])
    holder = subprocess.Popen(
        [*as_second_user(), "flock", "--shared", str(shared_log / ".paddlike.lock"),
         "sh", "-c", "echo held; exec cat"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        done = _launch(shared_log)
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --log_dir: log directory {shared_log} is in use by another "
        "launcher (its pid is unknown); wait for it to finish or pass another --log_dir"
    ]


def test_a_log_directory_under_a_world_writable_directory_without_the_sticky_bit_is_refused():
    """There the second user can rename log/ and put a link to root's directory in its
    place between the launcher's check and its opens (seen once in 15 runs): refused first,
    one line, exit 2, nothing started or written."""
    with shared_temp_dir() as shared:
        open_dir = shared / "team"
        open_dir.mkdir()
        open_dir.chmod(0o777)  # writable by every user, no sticky bit
        log = open_dir / "log"
        done = _launch(log)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"paddlike.launch: error: --log_dir: log directory {log}: {open_dir} on its path "
            "can be written by every user and has no sticky bit (mode 0777), so another user "
            f"could put a link in place of the log directory; chmod +t {open_dir}, or pass "
            "another --log_dir"
        ]
        assert not log.exists()
        assert not (open_dir / "train.py.STARTED").exists()
        open_dir.chmod(0o1777)  # the advice taken: the same launch runs
        done = _launch(log)
        assert done.returncode == 0, done.stderr
