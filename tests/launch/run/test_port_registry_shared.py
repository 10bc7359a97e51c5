"""The port registry on a shared machine: each user's launchers keep their own registry
in the temp directory, and what another user left at its place (a directory made first,
links planted in it, a lock held) neither redirects a write nor stalls a launch.
The other user is a real one: uid 4242 through setpriv (tests/support/second_user.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.run.ports import PortError, claim_ports, reserve_ports
from tests.support.fixed_ports import fixed_ports
from tests.support.second_user import (
    SECOND_UID,
    root_only_file,
    run_as_second_user,
    second_user_python,
    shared_temp_dir,
)

pytestmark = pytest.mark.timeout(60)

HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == "shared" else fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()  # hold it until the test closes stdin
"""


@pytest.fixture
def shared(monkeypatch) -> Path:
    """A shared temp directory (1777), this process's TMPDIR for the test."""
    with shared_temp_dir() as path:
        monkeypatch.setenv("TMPDIR", str(path))
        yield path


def _registry_files(directory: Path) -> set[int]:
    return {int(p.name) for p in directory.rglob("*") if p.name.isdigit()}


def _made_first_by_second_user(shared: Path) -> Path:
    """uid 4242 makes root's registry path first, open to everyone (as the old 0777)."""
    ours = shared / f"paddlike-ports-{os.geteuid()}"
    run_as_second_user(["mkdir", "-m", "0777", str(ours)])
    return ours


def test_a_registry_made_first_by_another_user_with_links_is_never_written_through(shared):
    victim = root_only_file(shared)
    theirs = _made_first_by_second_user(shared)
    port = fixed_ports(1)  # a --master_port, the name the other user can predict
    for name in ("lock", str(port), str(port + 1)):
        run_as_second_user(["ln", "-s", str(victim), str(theirs / name)])
    warnings: list[str] = []

    claimed = claim_ports(port, 1, "127.0.0.1", source="--master_port", warn=warnings.append)
    reserved = reserve_ports(2, "127.0.0.1", warn=warnings.append)

    assert claimed == (port,)
    assert victim.read_text() == "root's secret\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert warnings == [
        f"port registry {theirs} belongs to uid {SECOND_UID}: not used; this launcher "
        f"uses {theirs}.1 (remove {theirs} if no one needs it)"
    ]  # once per launcher, not once per reservation
    mine = Path(f"{theirs}.1")
    st = mine.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o700)
    assert _registry_files(mine) == {port, *reserved}
    assert sorted(p.name for p in theirs.iterdir()) == sorted(["lock", str(port), str(port + 1)])


def test_a_launcher_with_master_port_leaves_a_file_the_other_user_linked_to_intact(
    shared, tmp_path
):
    victim = root_only_file(shared)
    theirs = _made_first_by_second_user(shared)
    port = fixed_ports(1)
    run_as_second_user(["ln", "-s", str(victim), str(theirs / str(port))])
    run_as_second_user(["ln", "-s", str(victim), str(theirs / "lock")])
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--master_port", str(port),
         "--nproc_per_node", "1", "--log_dir", str(tmp_path / "log"), str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "root's secret\n"
    assert done.stderr.count(f"warning: port registry {theirs} belongs to uid {SECOND_UID}") == 1
    assert "Traceback" not in done.stderr


def test_a_lock_the_other_user_holds_does_not_stall_this_users_launcher(shared):
    theirs = _made_first_by_second_user(shared)
    python, env = second_user_python(shared)
    holder = subprocess.Popen(
        [*python, "-c", HOLD_LOCK, str(theirs / "lock"), "shared"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        warnings: list[str] = []
        ports = reserve_ports(2, "127.0.0.1", lock_timeout=0.5, warn=warnings.append)
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert len(ports) == 2
    assert not [w for w in warnings if "lock" in w], warnings  # it never waited for theirs
    assert len(warnings) == 1 and warnings[0].startswith(f"port registry {theirs} belongs")


def test_a_lock_held_past_its_deadline_is_one_warning_and_the_ports_are_still_reserved(
    tmp_path,
):
    registry = tmp_path / "registry"
    reserve_ports(1, registry_dir=registry)  # makes the registry and its lock
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(registry / "lock"), "exclusive"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        warnings: list[str] = []
        ports = reserve_ports(3, registry_dir=registry, lock_timeout=0.2, warn=warnings.append)
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert warnings == [
        f"the port registry's lock {registry}/lock was held by another process for 0.2 s; "
        "going on without it (ports are still checked free)"
    ]
    assert set(ports) <= _registry_files(registry)


def test_a_second_user_reserves_ports_beside_roots_registry_without_a_traceback(shared):
    reserve_ports(1)  # root's registry, with its lock, exists first
    python, env = second_user_python(shared)
    done = subprocess.run(
        [*python, "-c", "from paddlike.launch.run.ports import reserve_ports\n"
         "print(len(reserve_ports(2, '127.0.0.1')))"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "2\n", "")
    st = (shared / f"paddlike-ports-{SECOND_UID}").lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (SECOND_UID, 0o700)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p.symlink_to("/"), "is a symbolic link"),
        (lambda p: p.write_text(""), "is not a directory"),
        (lambda p: p.mkdir(mode=0o777) or p.chmod(0o777), "is writable by other users (mode 0777)"),
    ],
)
def test_a_registry_path_that_is_not_a_closed_directory_of_ours_is_passed_over(tmp_path, make, why):
    registry = tmp_path / "registry"
    make(registry)
    warnings: list[str] = []
    ports = reserve_ports(1, registry_dir=registry, warn=warnings.append)
    assert warnings == [
        f"port registry {registry} {why}: not used; this launcher uses {registry}.1 "
        f"(remove {registry} if no one needs it)"
    ]
    assert _registry_files(tmp_path / "registry.1") == set(ports)


def test_a_temp_directory_that_does_not_exist_is_one_line_not_a_traceback(tmp_path):
    missing = tmp_path / "missing" / "registry"
    with pytest.raises(PortError) as raised:
        reserve_ports(1, registry_dir=missing, warn=pytest.fail)
    assert str(raised.value) == (
        f"port registry {missing} cannot be created (No such file or directory), and neither "
        "registry.1 to .7 nor a fresh one beside it could be made (set TMPDIR to a directory "
        "of your own)"
    )


def test_a_second_users_launch_after_roots_runs_without_a_traceback(shared, tmp_path):
    """The reviewer's case: root's launcher made the registry first; uid 4242's launcher,
    with a --master_port of its own, used to end in a PermissionError traceback."""
    script = shared / "train.py"
    script.write_text("print('trained')\n")
    script.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    first = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "1",
         "--log_dir", str(tmp_path / "log"), str(script)],
        env=env, capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    python, theirs = second_user_python(shared)
    second = subprocess.run(
        [*python, "-m", "paddlike.launch", "--master_port", str(fixed_ports(1)),
         "--nproc_per_node", "1", "--log_dir", str(shared / "log4242"), str(script)],
        cwd=shared, env=theirs, capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in second.stderr and "warning" not in second.stderr
    assert second.stderr.splitlines()[-1].startswith("OK: 1 worker finished in ")
