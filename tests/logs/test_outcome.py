"""`python -m paddlike.logs DIR` as a check: its exit status is the job's outcome, and it
says what happened in words that fit (stopped, not failed; launcher gone; hung)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlike.logs.outcome import EXIT_RUNNING, EXIT_UNKNOWN, HUNG_AFTER
from paddlike.summary import ProcessRecord, RunSummary, write_summary
from tests.support.logwait import wait_exited, wait_until

LOGS = [sys.executable, "-m", "paddlike.logs"]
SLEEPER = """\
import os, time
print(f"rank {os.environ['PADDLE_TRAINER_ID']} ready", flush=True)
time.sleep(120)
"""


def logs(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOGS, *map(str, argv)], capture_output=True, text=True, timeout=60, check=False
    )


def summary_dir(path: Path, status: str, exit_code: int | None) -> Path:
    path.mkdir(parents=True)
    (path / "workerlog.0").write_text("epoch 0\n")
    record = ProcessRecord("trainer", 0, 0, "127.0.0.1", "workerlog.0", pid=1, status="ok")
    write_summary(
        path,
        RunSummary(
            job_id="job-o",
            mode="collective",
            node_index=0,
            nnodes=1,
            host="127.0.0.1",
            hostname=socket.gethostname(),
            log_dir=str(path),
            start_time=1.0,
            end_time=2.0,
            status=status,
            exit_code=exit_code,
            processes=[record],
        ),
    )
    return path


@pytest.mark.parametrize(
    ("status", "exit_code", "expected"),
    [
        ("succeeded", 0, 0),
        ("failed", 3, 3),
        ("failed", 1, 1),
        ("interrupted", 130, 130),
        ("failed", 124, 124),  # --on_hang abort
    ],
)
def test_the_exit_status_is_the_jobs_outcome(tmp_path, status, exit_code, expected):
    done = logs(summary_dir(tmp_path / "log", status, exit_code))
    assert done.returncode == expected, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith(f"job {status}: ")


def test_no_summary_and_no_error_is_an_unknown_outcome_and_no_directory_exits_2(tmp_path):
    paddle = tmp_path / "paddle"
    paddle.mkdir()
    (paddle / "workerlog.0").write_text("step 1\n")
    assert logs(paddle).returncode == EXIT_UNKNOWN
    done = logs(tmp_path / "missing")
    assert done.returncode == 2
    assert done.stderr == f"paddlike.logs: {tmp_path / 'missing'}: no such directory\n"


def test_help_documents_the_exit_status():
    out = logs("--help").stdout
    text = " ".join(out.split())
    assert "exit status: the job's outcome, for CI scripts: 0 it succeeded;" in text
    assert f"{EXIT_RUNNING} it is still running; {EXIT_UNKNOWN} no summary.json" in text
    assert "--stacks shows where each rank is" in text


# --- a real launcher ----------------------------------------------------------------------


@pytest.fixture
def running_job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A launcher whose two workers say "ready" and sleep; killed at the end whatever
    happens (its workers die with it: the guardian's doing)."""
    script = tmp_path / "sleep.py"
    script.write_text(SLEEPER)
    log = tmp_path / "log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLIKE_")}
    argv = ["--nproc_per_node", "2", "--log_dir", str(log), "--tee", "none", str(script)]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "paddlike.launch", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # a Ctrl-C of our own, not the test runner's
    )
    try:
        ready = wait_until(
            lambda: all(_ready(log / f"workerlog.{i}") for i in (0, 1)),
            under=log,
            timeout=30,
            what="both workers ready",
            writer=launcher,
        )
        assert ready, launcher.communicate()[1]
        yield launcher, log
    finally:
        if launcher.poll() is None:
            launcher.kill()
        launcher.communicate(timeout=30)
        for name in ("workerlog.0", "workerlog.1"):  # no worker outlives the test
            for pid in _pids(log, name):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)


def _ready(path: Path) -> bool:
    try:
        return "ready" in path.read_text()
    except OSError:
        return False


def _pids(log: Path, name: str) -> list[int]:
    try:
        data = json.loads((log / "summary.json").read_text())
    except (OSError, ValueError):
        return []
    return [p["pid"] for p in data["processes"] if p["log_file"] == name and p["pid"]]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_ctrl_c_is_a_stop_not_a_failure_for_the_launcher_and_for_the_reader(running_job):
    launcher, log = running_job
    launcher.send_signal(signal.SIGINT)
    _, err = launcher.communicate(timeout=30)
    assert launcher.returncode == 130, err
    assert "FAILED" not in err, err
    assert "STOPPED: launcher on 127.0.0.1 received SIGINT\n" in err, err
    done = logs(log)
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stdout.startswith("STOPPED: launcher on 127.0.0.1 received SIGINT\n")
    assert done.stdout.endswith(
        "job interrupted: 2 processes on 1 node (2 killed); killed = stopped because the "
        "launcher on 127.0.0.1 received SIGINT\n"
    ), done.stdout


def test_a_sigkilled_launcher_and_its_workers_are_said_to_be_gone(running_job):
    launcher, log = running_job
    pid = launcher.pid
    launcher.kill()
    launcher.wait(timeout=30)
    workers = [pid for name in ("workerlog.0", "workerlog.1") for pid in _pids(log, name)]
    # the guardian's SIGKILL: moments
    assert wait_exited(workers, timeout=10) == [], "the workers outlived their launcher by 10 s"
    assert not any(_alive(pid) for pid in workers)
    done = logs(log, "--json")  # at once: the workers may not even be reaped yet (zombies)
    data = json.loads(done.stdout)
    assert done.returncode == 1, done.stdout + done.stderr
    assert data["status"] == "gone"
    assert [p["status"] for p in data["nodes"][0]["processes"]] == ["gone", "gone"]
    assert data["nodes"][0]["notes"] == [
        f"the launcher (pid {pid}) is gone without recording how the job ended (why cannot "
        "be read here: a signal it does not handle, such as SIGKILL or the OOM killer's, or "
        "a restart of its machine); its processes are gone too"
    ]
    started = time.monotonic()
    followed = logs(log, "--follow", "--tail", "1")
    assert time.monotonic() - started < 5  # no grace to wait out: nobody can record the end
    assert followed.returncode == 1, followed.stderr
    assert followed.stdout.splitlines() == ["[trainer 0] rank 0 ready", "[trainer 1] rank 1 ready"]
    assert "stopped following: the summary says running but no process" in followed.stderr
    text = logs(log).stdout
    assert ": launcher gone, started " in text.splitlines()[0], text
    assert text.endswith(
        "job launcher gone: 2 processes on 1 node (2 gone); gone = its launcher died before "
        "recording how it ended\n"
    ), text


def test_a_running_job_exits_75_and_a_quiet_one_is_called_hung_pointing_at_stacks(running_job):
    _, log = running_job
    done = logs(log)
    assert done.returncode == EXIT_RUNNING, done.stdout + done.stderr
    assert "hung" not in done.stdout
    quiet = time.time() - HUNG_AFTER - 60  # as if no rank had written for three minutes
    for name in ("workerlog.0", "workerlog.1"):
        os.utime(log / name, (quiet, quiet))
    done = logs(log)
    assert done.returncode == EXIT_RUNNING, done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("the job looks hung: no output or progress from any rank for 3m0")
    assert last.endswith(f"; see where each rank is: python -m paddlike.logs --stacks {log}")
    assert json.loads(logs(log, "--json").stdout)["hung_for"] >= HUNG_AFTER + 60
