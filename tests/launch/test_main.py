"""The launcher end to end: `python -m paddlike.launch` as a user runs it.

Signals to the launcher, a SIGKILLed launcher, two launchers at once. Each test
waits for files the workers write (with deadlines) and checks exit codes, the
console, and that no worker outlives its launcher.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from paddlike.summary import read_summary
from tests.support.logwait import wait_until

WORKERS = Path(__file__).resolve().parents[1] / "support" / "workers"
BEHAVE = str(WORKERS / "behave.py")
DEADLINE = 30.0


def launch(log_dir: Path, *args: str, nproc: int = 2) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", str(nproc)]
    cmd += ["--log_dir", str(log_dir), "--kill_timeout", "2", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_files(files: list[Path], proc: subprocess.Popen[str]) -> None:
    """Until every file exists (or fail early if the launcher already ended)."""
    under = Path(os.path.commonpath([f.parent for f in files]))
    try:
        done = wait_until(
            lambda: all(f.exists() for f in files),
            under=under,
            timeout=DEADLINE,
            what=str(files),
            writer=proc,
        )
    except AssertionError:
        pytest.fail(f"timed out waiting for {files}")
    if not done:
        out, err = proc.communicate()
        pytest.fail(f"launcher exited {proc.returncode} early:\n{out}\n{err}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"launcher did not exit:\n{out}\n{err}")
    return proc.returncode, out, err


def worker_pids(work: Path, n: int) -> list[int]:
    return [int((work / f"pid.{r}").read_text()) for r in range(n)]


def assert_gone(pids: list[int], deadline: float = 10.0) -> None:
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(procs, timeout=deadline)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"workers outlived their launcher: {alive}"


@pytest.fixture
def work(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    yield path
    # Whatever a failed test left behind goes (only our own worker scripts, by pid file).
    for pid_file in path.rglob("pid.*"):
        with contextlib.suppress(psutil.Error, ValueError):
            victim = psutil.Process(int(pid_file.read_text()))
            if any(str(WORKERS) in part for part in victim.cmdline()):
                victim.kill()


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_signal_to_the_launcher_stops_every_worker(tmp_path, work, sig, code):
    proc = launch(tmp_path / "log", BEHAVE, str(work), "wait", "wait")
    try:
        wait_for_files([work / "ready.0", work / "ready.1"], proc)
        proc.send_signal(sig)
        rc, _, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == code, err
    assert f"received {signal.Signals(sig).name}" in err
    assert_gone(worker_pids(work, 2))
    summary = read_summary(tmp_path / "log")
    assert summary.status == "interrupted" and summary.exit_code == code


def test_sigkilled_launcher_leaves_no_worker_behind(tmp_path, work):
    proc = launch(tmp_path / "log", BEHAVE, str(work), "wait", "ignore_term")
    try:
        wait_for_files([work / "ready.0", work / "ready.1"], proc)
        proc.kill()
        proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_gone(worker_pids(work, 2))


def test_failing_worker_exit_code_is_the_launchers(tmp_path, work):
    proc = launch(tmp_path / "log", BEHAVE, str(work), "wait", "exit:3")
    rc, _, err = finish(proc)
    assert rc == 3, err
    assert "FAILED: trainer rank 1 exited with code 3" in err
    assert "RuntimeError: rank 1 failed on purpose" in err
    assert_gone(worker_pids(work, 2))


def test_two_launchers_at_once_both_succeed_with_disjoint_ports(tmp_path, work):
    (work / "a").mkdir()
    (work / "b").mkdir()
    a = launch(tmp_path / "a", str(WORKERS / "dump_env.py"), str(work / "a"))
    b = launch(tmp_path / "b", str(WORKERS / "dump_env.py"), str(work / "b"))
    results = [finish(a), finish(b)]
    assert [r[0] for r in results] == [0, 0], results
    ports = []
    for name in ("a", "b"):
        lines = (tmp_path / name / "endpoints.log").read_text().splitlines()
        assert lines[0] == "PADDLE_TRAINER_ENDPOINTS: "
        ports += [line.rsplit(":", 1)[1] for line in lines[1:]]
    assert len(ports) == 4 and len(set(ports)) == 4


def test_second_launcher_on_the_same_log_dir_exits_2_naming_the_holder(tmp_path, work):
    first = launch(tmp_path / "log", BEHAVE, str(work), "wait", "wait")
    try:
        wait_for_files([work / "ready.0", work / "ready.1"], first)
        second = launch(tmp_path / "log", str(WORKERS / "dump_env.py"), str(work))
        rc, _, err = finish(second)
        assert rc == 2
        assert f"launcher pid {first.pid}" in err
        assert len(err.strip().splitlines()) == 1, err
        first.send_signal(signal.SIGTERM)
        assert finish(first)[0] == 143
    finally:
        if first.poll() is None:
            first.kill()
