"""The log directory: lock, endpoints.log bytes, run headers, overwrite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from paddlike.launch.plan.plan import ProcessSpec, Role
from paddlike.launch.run.logdir import (
    HEADER_PREFIX,
    JobClaim,
    LogDir,
    LogDirBusy,
    LogDirError,
    format_header,
    read_tail_since,
)


def spec(rank: int = 0, *, err: bool = False) -> ProcessSpec:
    return ProcessSpec(
        role=Role.TRAINER,
        rank=rank,
        local_index=rank,
        device_ids=(),
        endpoint=f"127.0.0.1:{6070 + rank}",
        env={},
        argv=(sys.executable, "-u", "train.py", "--lr", "0.1"),
        log_name=f"workerlog.{rank}",
        err_log_name=f"workerlog.{rank}.err" if err else None,
    )


def test_creates_missing_directory_and_releases_lock_on_exit(tmp_path):
    target = tmp_path / "a" / "log"
    with LogDir.open(target, overwrite=False, host="127.0.0.1") as logdir:
        assert logdir.path == target
        assert target.is_dir()
    with LogDir.open(target, overwrite=False, host="127.0.0.1"):
        pass  # the lock was released: a later launcher gets it


def test_second_opener_gets_busy_error_naming_holder_pid_and_host(tmp_path):
    holder = rf"launcher pid {os.getpid()} on host 198\.18\.0\.7"
    with (
        LogDir.open(tmp_path, overwrite=False, host="198.18.0.7"),
        pytest.raises(LogDirBusy, match=holder),
    ):
        LogDir.open(tmp_path, overwrite=False, host="127.0.0.1")


def test_lock_is_held_against_another_process(tmp_path):
    code = textwrap.dedent(
        f"""
        from paddlike.launch.run.logdir import LogDir, LogDirBusy
        try:
            LogDir.open({str(tmp_path)!r}, overwrite=False, host="127.0.0.1")
        except LogDirBusy as exc:
            print(exc)
            raise SystemExit(2)
        """
    )
    with LogDir.open(tmp_path, overwrite=False, host="127.0.0.1"):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert f"pid {os.getpid()}" in result.stdout


def test_unwritable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(LogDirError, match="cannot create log directory"):
        LogDir.open(blocker / "log", overwrite=False, host="127.0.0.1")


def test_endpoints_log_has_paddles_exact_bytes(tmp_path):
    with LogDir.open(tmp_path, overwrite=False, host="127.0.0.1") as logdir:
        logdir.write_endpoints(("127.0.0.1:6070", "127.0.0.1:6071"))
        assert (tmp_path / "endpoints.log").read_bytes() == (
            b"PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:6070\n127.0.0.1:6071"
        )


def test_endpoints_log_in_ps_mode_lists_servers_after_trainers(tmp_path):
    with LogDir.open(tmp_path, overwrite=False, host="127.0.0.1") as logdir:
        logdir.write_endpoints(["a:1", "b:2"], ["a:9", "b:9"])
        assert (tmp_path / "endpoints.log").read_bytes() == (
            b"PADDLE_TRAINER_ENDPOINTS: \na:1\nb:2\nPADDLE_PSERVERS_IP_PORT_LIST: \na:9\nb:9"
        )


def test_header_names_time_job_rank_and_command():
    line = format_header(spec(1), job_id="job-x", restart=2, when=0.0)
    assert line.startswith(HEADER_PREFIX)
    assert "job job-x" in line and "trainer rank 1" in line and "restart 2" in line
    assert line.endswith(f"{sys.executable} -u train.py --lr 0.1 ====")
    assert "\n" not in line


def _write_run(logdir: LogDir, header: str, text: bytes) -> None:
    log = logdir.open_log(spec(0), header)
    os.write(log.stdout, text)
    log.close()


def test_logs_are_appended_with_one_header_per_run(tmp_path):
    with LogDir.open(tmp_path, overwrite=False, host="h") as logdir:
        _write_run(logdir, "HEADER 1", b"first run, no newline")
    with LogDir.open(tmp_path, overwrite=False, host="h") as logdir:
        log = logdir.open_log(spec(0), "HEADER 2")
        os.write(log.stdout, b"second run\n")
        log.close()
    text = (tmp_path / "workerlog.0").read_text()
    assert text == "HEADER 1\nfirst run, no newline\nHEADER 2\nsecond run\n"
    assert read_tail_since(tmp_path / "workerlog.0", log.start) == ["second run"]


def test_overwrite_truncates_once_per_launch_and_appends_restarts(tmp_path):
    with LogDir.open(tmp_path, overwrite=False, host="h") as logdir:
        _write_run(logdir, "OLD", b"old output\n")
    with LogDir.open(tmp_path, overwrite=True, host="h") as logdir:
        _write_run(logdir, "NEW 0", b"round 0\n")
        _write_run(logdir, "NEW 1", b"round 1\n")  # a restart round of the same launch
    assert (tmp_path / "workerlog.0").read_text() == "NEW 0\nround 0\nNEW 1\nround 1\n"


def test_redirect_gives_separate_stdout_and_stderr_files(tmp_path):
    with LogDir.open(tmp_path, overwrite=False, host="h") as logdir:
        log = logdir.open_log(spec(0, err=True), "H")
        assert log.stdout != log.stderr
        os.write(log.stdout, b"out\n")
        os.write(log.stderr, b"err\n")
        log.close()
    assert (tmp_path / "workerlog.0").read_text() == "H\nout\n"
    assert (tmp_path / "workerlog.0.err").read_text() == "H\nerr\n"


def test_tail_reads_only_this_runs_last_lines(tmp_path):
    path = tmp_path / "log"
    earlier = b"".join(b"old %d\n" % i for i in range(100))
    newer = [b"new %d\n" % i for i in range(30)]
    path.write_bytes(earlier + b"".join(newer))
    assert read_tail_since(path, len(earlier), 20) == [f"new {i}" for i in range(10, 30)]
    last_two = len(earlier) + len(b"".join(newer[:28]))
    assert read_tail_since(path, last_two, 20) == ["new 28", "new 29"]
    assert read_tail_since(tmp_path / "missing", 0) == []


def test_owner_file_is_json_and_goes_away_on_close(tmp_path):
    with LogDir.open(tmp_path, overwrite=False, host="h"):
        owner = json.loads((tmp_path / ".paddlike.owner").read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == "h"
    assert not (tmp_path / ".paddlike.owner").exists()


FP = {"ips": "nodea,nodeb", "training script": "train.py"}
JOB = JobClaim.of(job_id=None, meeting="198.18.0.1:6170", fingerprint=FP)


def test_a_node_of_the_same_job_takes_a_directory_of_its_own_named_by_its_address(tmp_path):
    with LogDir.open(tmp_path, overwrite=False, host="198.18.0.1", job=JOB) as first:
        with LogDir.open(tmp_path, overwrite=False, host="198.18.0.2", job=JOB) as second:
            assert first.path == tmp_path and first.shared_with is None
            assert second.path == tmp_path / "198.18.0.2"
            assert second.shared_with is not None
            assert second.shared_with["pid"] == os.getpid()
            assert second.shared_with["host"] == "198.18.0.1"
            assert (second.path / ".paddlike.lock").exists()  # a lock of its own
            # a third node of the job on the same host as the second: the next name
            with LogDir.open(tmp_path, overwrite=False, host="198.18.0.2", job=JOB) as third:
                assert third.path == tmp_path / "198.18.0.2.2"
            _write_run(second, "H", b"node b\n")
        _write_run(first, "H", b"node a\n")
    assert (tmp_path / "workerlog.0").read_text() == "H\nnode a\n"
    assert (tmp_path / "198.18.0.2" / "workerlog.0").read_text() == "H\nnode b\n"


def test_a_launcher_of_another_job_is_refused_naming_the_holder_and_its_job(tmp_path):
    other = JobClaim.of(job_id=None, meeting="198.18.0.1:7000", fingerprint=FP)
    holder = rf"launcher pid {os.getpid()} on host 198\.18\.0\.1 .*for another job"
    with LogDir.open(tmp_path, overwrite=False, host="198.18.0.1", job=JOB):
        with pytest.raises(LogDirBusy, match=holder + r" \(the job meeting at 198\.18\.0\.1:6170"):
            LogDir.open(tmp_path, overwrite=False, host="198.18.0.2", job=other)
        with pytest.raises(LogDirBusy, match=rf"launcher pid {os.getpid()}"):
            LogDir.open(tmp_path, overwrite=False, host="198.18.0.2")  # a one-node job
    assert not (tmp_path / "198.18.0.2").exists()


def test_a_one_node_job_holding_the_directory_refuses_a_many_node_job(tmp_path):
    with (
        LogDir.open(tmp_path, overwrite=False, host="198.18.0.1"),
        pytest.raises(LogDirBusy, match="for another job;"),
    ):
        LogDir.open(tmp_path, overwrite=False, host="198.18.0.2", job=JOB)


def test_a_node_whose_configuration_differs_is_told_so(tmp_path):
    changed = JobClaim.of(job_id=None, meeting="198.18.0.1:6170", fingerprint=FP | {"x": "1"})
    with (
        LogDir.open(tmp_path, overwrite=False, host="198.18.0.1", job=JOB),
        pytest.raises(LogDirBusy, match="with another configuration than this node's"),
    ):
        LogDir.open(tmp_path, overwrite=False, host="198.18.0.2", job=changed)


def test_the_job_id_when_given_names_the_job_and_the_meeting_otherwise():
    again = JobClaim.of(job_id=None, meeting="198.18.0.1:6170", fingerprint=dict(FP))
    assert again == JOB
    assert JOB.key != JobClaim.of(job_id=None, meeting="198.18.0.1:6171", fingerprint=FP).key
    by_id = JobClaim.of(job_id="j1", meeting="a:1", fingerprint=FP)
    assert by_id.key == JobClaim.of(job_id="j1", meeting="a:1", fingerprint={}).key
    assert by_id.key != JobClaim.of(job_id="j2", meeting="a:1", fingerprint=FP).key
    assert by_id.what == "job j1"


# --- a log file the launcher cannot open -------------------------------------------------


def _unwritable_file(path) -> None:  # type: ignore[no-untyped-def]
    """A file this process cannot append to: read-only bits stop a user, not root; an
    immutable file (chattr +i) stops root too, where the filesystem allows it."""
    path.write_text("an earlier run\n")
    if os.geteuid() != 0:
        path.chmod(0o444)
        return
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"running as root and chattr +i is refused here: {done.stderr.strip()}")


@pytest.fixture
def blocked_log(request, tmp_path):  # type: ignore[no-untyped-def]
    """log/workerlog.0 that cannot be opened: a directory in its place, or a read-only file."""
    log = tmp_path / "log"
    log.mkdir()
    target = log / "workerlog.0"
    if request.param == "directory":
        target.mkdir()
        why = "Is a directory"
    else:
        _unwritable_file(target)
        why = "Permission denied" if os.geteuid() != 0 else "Operation not permitted"
    yield log, why
    subprocess.run(["chattr", "-i", str(target)], capture_output=True)  # lets tmp_path go


@pytest.mark.parametrize("blocked_log", ["directory", "read-only file"], indirect=True)
def test_a_log_file_that_cannot_be_opened_is_refused_and_the_lock_released(blocked_log):
    log, why = blocked_log
    with pytest.raises(LogDirError) as caught:
        LogDir.open(log, overwrite=True, host="h", logs=["workerlog.0"])
    assert str(caught.value) == (
        f"cannot open log file {log}/workerlog.0 for writing: {why} (make it writable, "
        "remove it, or pass another --log_dir)"
    )
    assert not (log / ".paddlike.owner").exists()
    with LogDir.open(log, overwrite=False, host="h", logs=["workerlog.1"]):
        pass  # the lock was released; a file that can be created is fine


@pytest.mark.parametrize("blocked_log", ["directory", "read-only file"], indirect=True)
def test_the_launcher_says_so_in_one_line_and_exits_2_with_nothing_started(blocked_log):
    log, why = blocked_log
    script = log.parent / "train.py"
    script.write_text("open('STARTED', 'w').close()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLIKE_")}
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--log_dir", str(log), str(script)],
        cwd=log.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --log_dir: cannot open log file {log}/workerlog.0 for "
        f"writing: {why} (make it writable, remove it, or pass another --log_dir)"
    ]
    assert not (log.parent / "STARTED").exists()
    assert sorted(p.name for p in log.iterdir()) == [".paddlike.lock", "workerlog.0"]


def test_a_node_whose_log_file_cannot_be_opened_tells_the_other_nodes(tmp_path):
    from tests.support.fixed_ports import fixed_ports

    (tmp_path / "l1" / "workerlog.0").mkdir(parents=True)
    script = tmp_path / "train.py"
    script.write_text("open('STARTED', 'w').close()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLIKE_")}
    master = f"127.0.0.1:{fixed_ports()}"
    procs = []
    try:
        for rank in (0, 1):  # two "nodes" on loopback addresses
            argv = ["--ips", "127.0.0.1,127.0.0.2", "--node_rank", str(rank), "--master", master]
            argv += ["--rdzv_timeout", "30", "--log_dir", str(tmp_path / f"l{rank}"), str(script)]
            cmd = [sys.executable, "-m", "paddlike.launch", *argv]
            procs.append(
                subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
            )
        errs = [p.communicate(timeout=60)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    why = (
        f"--log_dir: cannot open log file {tmp_path}/l1/workerlog.0 for writing: Is a "
        "directory (make it writable, remove it, or pass another --log_dir)"
    )
    assert [p.returncode for p in procs] == [2, 2], errs
    assert errs[1] == f"paddlike.launch: error: {why}\n"
    assert f"(node 1, 127.0.0.2) could not start: {why}; fix that there" in errs[0], errs[0]
    assert not (tmp_path / "STARTED").exists()
