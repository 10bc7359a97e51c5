"""Issue 31: a team's log folder (mode 1777) where another user (uid 4242, setpriv) plants
a FIFO, a link as the log directory itself, their own directory, lock or log file. Each is
refused with one line naming it, exit 2, nothing started; no launch blocks on a FIFO."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.plan.plan import ProcessSpec, Role
from paddlike.launch.run.logdir import LogDir, LogDirError
from tests.support.second_user import (
    SECOND_UID,
    as_second_user,
    run_as_second_user,
    shared_temp_dir,
)

pytestmark = pytest.mark.timeout(60)

PREFIX = "paddlike.launch: error: --log_dir: "
# The launcher must end by itself within this; a FIFO used to block it without end.
DEADLINE = 30.0


@pytest.fixture
def shared() -> Path:
    with shared_temp_dir() as path:
        yield path


@pytest.fixture
def shared_log(shared: Path) -> Path:
    log = shared / "logs"
    log.mkdir()
    log.chmod(0o1777)
    return log


def _launch(
    log: Path, *extra: str, script_text: str = "", home: Path | None = None
) -> subprocess.Popen[str]:
    script = (home or log.parent) / "train.py"
    script.write_text(script_text or "open(__file__ + '.STARTED', 'a').close()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "1", *extra,
         "--log_dir", str(log), str(script)],
        cwd=script.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(launcher: subprocess.Popen[str]) -> tuple[int, str]:
    """The launcher's exit code and stderr; it must end by itself before DEADLINE (the
    caller's `finally` kills it when it does not)."""
    _, err = launcher.communicate(timeout=DEADLINE)
    return launcher.returncode, err


def _run(
    log: Path, *extra: str, script_text: str = "", home: Path | None = None
) -> tuple[int, str]:
    launcher = _launch(log, *extra, script_text=script_text, home=home)
    try:
        return _finish(launcher)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def _started(log: Path) -> bool:
    return (log.parent / "train.py.STARTED").exists()


@pytest.mark.parametrize("overwrite", [False, True], ids=["append", "log_overwrite"])
def test_a_fifo_planted_at_workerlog_ends_the_launch_at_once_naming_it(shared_log, overwrite):
    run_as_second_user(["mkfifo", "-m", "666", str(shared_log / "workerlog.0")])
    code, err = _run(shared_log, *(["--log_overwrite"] if overwrite else []))
    assert code == 2, err
    assert err.splitlines() == [
        f"{PREFIX}log file {shared_log}/workerlog.0: it is a FIFO, not a regular file: the "
        "launcher writes only regular files; remove it, or pass another --log_dir"
    ]
    assert not _started(shared_log)


def test_a_fifo_with_a_reader_at_workerlog_is_refused_and_the_reader_reads_nothing(shared_log):
    fifo = shared_log / "workerlog.0"
    run_as_second_user(["mkfifo", "-m", "666", str(fifo)])
    reader = subprocess.Popen(  # holds the FIFO open (read-write: no wait) and reads it
        [*as_second_user(), "sh", "-c", f'exec 3<>"{fifo}"; echo ready; exec cat <&3'],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert reader.stdout.readline() == b"ready\n"
        code, err = _run(shared_log)
    finally:
        reader.kill()
        read, _ = reader.communicate(timeout=10)
    assert code == 2, err
    assert "it is a FIFO, not a regular file" in err
    assert read == b""
    assert not _started(shared_log)


def test_a_fifo_planted_as_the_lock_is_one_line_and_exit_2(shared_log):
    run_as_second_user(["mkfifo", "-m", "666", str(shared_log / ".paddlike.lock")])
    code, err = _run(shared_log)
    assert code == 2, err
    assert err.splitlines() == [
        f"{PREFIX}cannot open {shared_log}/.paddlike.lock: it is a FIFO, not a regular file "
        "(make it writable, remove it, or pass another --log_dir)"
    ]


PLANT_FIFO_THEN_FAIL = """
import os, sys
if os.environ["PADDLIKE_RESTART_COUNT"] == "0":
    log = os.path.join(os.environ["PADDLE_LOG_DIR"], "workerlog.0")
    os.remove(log)
    os.mkfifo(log)
    sys.exit(3)
open(__file__ + ".RESTARTED", "a").close()
"""


def test_a_fifo_planted_before_a_restart_ends_the_job_with_its_failed_line(shared_log):
    code, err = _run(shared_log, "--max_restarts", "1", script_text=PLANT_FIFO_THEN_FAIL)
    assert code == 1, err
    assert "Traceback" not in err
    assert (
        f"FAILED: log file {shared_log}/workerlog.0: it is a FIFO, not a regular file: the "
        "launcher writes only regular files; remove it, or pass another --log_dir"
    ) in err.splitlines()
    assert not (shared_log.parent / "train.py.RESTARTED").exists()


def test_a_device_node_at_a_log_file_is_refused_unopened(tmp_path):
    log = tmp_path / "log"
    log.mkdir()
    os.mknod(log / "workerlog.0", 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's
    with pytest.raises(LogDirError, match=r"workerlog\.0: it is a character device"):
        LogDir.open(log, overwrite=True, host="h", logs=["workerlog.0"])


def _root_dir(shared: Path) -> Path:
    victim = shared / "roots"
    victim.mkdir(mode=0o700)
    return victim


def test_another_users_link_as_the_log_dir_is_not_followed(shared, shared_log):
    victim = _root_dir(shared)
    run_as_second_user(["ln", "-s", str(victim), str(shared_log / "atkE")])
    code, err = _run(shared_log / "atkE", home=shared)
    assert code == 2, err
    assert err.splitlines() == [
        f"{PREFIX}log directory {shared_log}/atkE is a symbolic link (to {victim}) that "
        f"belongs to uid {SECOND_UID}, not to this user: the launcher does not follow another "
        "user's links; pass another --log_dir"
    ]
    assert list(victim.iterdir()) == []


def test_another_users_link_on_the_way_to_the_log_dir_is_not_followed(shared, shared_log):
    victim = _root_dir(shared)
    run_as_second_user(["ln", "-s", str(victim), str(shared_log / "team")])
    code, err = _run(shared_log / "team" / "run1", home=shared)
    assert code == 2, err
    assert err.splitlines() == [
        f"{PREFIX}the path to the log directory at {shared_log}/team is a symbolic link (to "
        f"{victim}) that belongs to uid {SECOND_UID}, not to this user: the launcher does not "
        "follow another user's links; pass another --log_dir"
    ]
    assert list(victim.iterdir()) == []


def test_a_users_own_link_as_the_log_dir_keeps_working(shared, shared_log):
    scratch = shared / "scratch-log"
    scratch.mkdir()
    (shared_log / "mine").symlink_to(scratch)
    code, err = _run(shared_log / "mine", home=shared)
    assert code == 0, err
    assert (scratch / "workerlog.0").is_file()


def test_another_users_directory_in_the_shared_folder_is_theirs(shared_log):
    run_as_second_user(["mkdir", "-m", "777", str(shared_log / "theirs")])
    code, err = _run(shared_log / "theirs", home=shared_log)
    assert code == 2, err
    assert err.splitlines() == [
        f"{PREFIX}log directory {shared_log}/theirs belongs to uid {SECOND_UID}, not to this "
        f"user, in the world-writable directory {shared_log}: it is theirs; pass another "
        "--log_dir"
    ]
    assert not _started(shared_log)


def test_a_lock_file_of_another_user_is_refused_naming_them(shared_log):
    run_as_second_user(["sh", "-c", f"umask 0; : > {shared_log}/.paddlike.lock"])
    code, err = _run(shared_log)
    assert code == 2, err
    assert err.splitlines() == [
        f"{PREFIX}log directory {shared_log} is held by uid {SECOND_UID}: its lock file "
        f"{shared_log}/.paddlike.lock is theirs, not this user's; pass another --log_dir"
    ]
    assert not _started(shared_log)


@pytest.mark.parametrize("overwrite", [False, True], ids=["append", "log_overwrite"])
def test_a_log_file_of_another_user_is_not_appended_to(shared_log, overwrite):
    forged = "==== paddlike run 2026-11-27 09:00:00 job forged trainer rank 0 local 0 restart 0\n"
    run_as_second_user(
        ["sh", "-c", f"umask 0; printf '%s' '{forged}' > {shared_log}/workerlog.0"]
    )
    code, err = _run(shared_log, *(["--log_overwrite"] if overwrite else []))
    assert code == 2, err
    assert err.splitlines() == [
        f"{PREFIX}log file {shared_log}/workerlog.0 belongs to uid {SECOND_UID}, not to this "
        "user: the launcher does not write into another user's file; remove it, or pass "
        "another --log_dir"
    ]
    assert (shared_log / "workerlog.0").read_text() == forged
    assert not _started(shared_log)


def _spec(log_name: str) -> ProcessSpec:
    return ProcessSpec(
        role=Role.TRAINER, rank=0, local_index=0, device_ids=(), endpoint="127.0.0.1:1",
        env={}, argv=("python", "t.py"), log_name=log_name,
    )  # fmt: skip


def test_roots_log_file_owned_by_nobody_is_written_as_on_a_root_squash_export(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("root's case")
    log = tmp_path / "log"
    log.mkdir()
    (log / "workerlog.0").write_text("earlier run\n")
    os.chown(log / "workerlog.0", 65534, 65534)
    with LogDir.open(log, overwrite=False, host="h", logs=["workerlog.0"]) as logdir:
        logdir.open_log(_spec("workerlog.0"), "==== header ====").close()
    assert (log / "workerlog.0").read_text() == "earlier run\n==== header ====\n"
