"""python -m paddlike.logs on hand-written dirs: paddlike's, Paddle's, running, multi-node."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlike.logs.__main__ import main
from paddlike.logs.follow_logs import Follower
from paddlike.summary import ProcessRecord, RootCause, RunSummary, write_summary
from tests.support.logwait import wait_until
from tests.support.synthetic_job import write_paddle_job

HEADER = (
    "==== paddlike run 2026-01-01 10:00:00 job job-t {role} rank {rank} local {local} "
    "restart 0: python -u train.py ===="
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 7, in <module>\n'
    "    sys.exit(fail())\n"
    '  File "train.py", line 4, in fail\n'
    "    raise RuntimeError('rank 1 cannot read shard 1')\n"
    "RuntimeError: rank 1 cannot read shard 1\n"
)
T0 = 1_790_000_000.0


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = main([str(a) for a in argv], out=out)
    return code, out.getvalue()


def record(rank: int, status: str, **kw: object) -> ProcessRecord:
    fields: dict[str, object] = dict(
        role="trainer",
        rank=rank,
        local_index=rank,
        host="127.0.0.1",
        log_file=f"workerlog.{rank}",
        pid=40000 + rank,
        start_time=T0,
        end_time=T0 + 2.0,
        exit_code=0,
        status=status,
    )
    fields.update(kw)
    return ProcessRecord(**fields)  # type: ignore[arg-type]


def failed_job_dir(path: Path, *, node_index: int = 0, nnodes: int = 1) -> Path:
    """A 2-trainer job whose rank 1 exited 3 and whose rank 0 the launcher stopped."""
    path.mkdir(parents=True)
    (path / "endpoints.log").write_text(
        "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:6070\n127.0.0.1:6071"
    )
    (path / "workerlog.0").write_text(
        HEADER.format(role="trainer", rank=0, local=0) + "\nepoch 0\nepoch 1\n"
    )
    (path / "workerlog.1").write_text(
        HEADER.format(role="trainer", rank=1, local=1) + "\nepoch 0\n" + TRACEBACK
    )
    cause = RootCause(
        reason="trainer rank 1 exited with code 3",
        host="127.0.0.1",
        node_index=node_index,
        role="trainer",
        rank=1,
        local_index=1,
        exit_code=3,
        log_file="workerlog.1",
        tail=["epoch 0", *TRACEBACK.splitlines()],
        time=T0 + 1.5,
        duration=1.5,
    )
    summary = RunSummary(
        job_id="job-t",
        mode="collective",
        node_index=node_index,
        nnodes=nnodes,
        host="127.0.0.1",
        hostname=socket.gethostname(),
        log_dir=str(path),
        start_time=T0,
        end_time=T0 + 2.0,
        status="failed",
        exit_code=3,
        processes=[
            record(0, "killed", exit_code=None, signal="SIGTERM"),
            record(1, "failed", exit_code=3, end_time=T0 + 1.5),
        ],
        root_cause=cause,
    )
    write_summary(path, summary)
    return path


def test_default_view_puts_the_root_cause_above_a_table_of_every_process(tmp_path):
    log = failed_job_dir(tmp_path / "log")
    code, out = run([log])
    assert code == 3  # the job's exit code
    lines = out.splitlines()
    assert lines[0] == "FAILED: trainer rank 1 exited with code 3"
    assert "    | RuntimeError: rank 1 cannot read shard 1" in lines
    assert out.index("FAILED:") < out.index("ROLE")
    header = next(x for x in lines if "ROLE" in x)
    for column in ("RANK", "LOCAL", "HOST", "PID", "STATUS", "EXIT", "TIME", "RESTARTS", "LOG"):
        assert column in header
    row0 = next(x for x in lines if x.strip().startswith("trainer  0"))
    row1 = next(x for x in lines if x.strip().startswith("trainer  1"))
    assert "killed" in row0 and "SIGTERM" in row0
    assert "failed" in row1 and " 3 " in row1 and "2.00 s" not in row1 and "1.50 s" in row1
    assert row1.rstrip().endswith("RuntimeError: rank 1 cannot read shard 1")
    assert out.endswith(
        "job failed: 2 processes on 1 node (1 killed, 1 failed); "
        "killed = stopped by the launcher after another process failed\n"
    )


def test_json_has_the_same_facts(tmp_path):
    log = failed_job_dir(tmp_path / "log")
    code, out = run([log, "--json"])
    data = json.loads(out)
    assert code == 3 and data["status"] == "failed" and data["exit_code"] == 3
    assert data["root_cause"]["rank"] == 1 and data["root_cause"]["exit_code"] == 3
    procs = data["nodes"][0]["processes"]
    assert [(p["rank"], p["status"]) for p in procs] == [(0, "killed"), (1, "failed")]
    assert procs[1]["first_error"] == "RuntimeError: rank 1 cannot read shard 1"
    assert procs[1]["duration"] == pytest.approx(1.5)


def test_rank_shows_the_end_of_that_process_log(tmp_path):
    log = failed_job_dir(tmp_path / "log")
    code, out = run([log, "--rank", "1", "--tail", "2"])
    assert code == 0
    assert out.splitlines()[-2:] == [
        "    raise RuntimeError('rank 1 cannot read shard 1')",
        "RuntimeError: rank 1 cannot read shard 1",
    ]
    assert "trainer rank 1" in out and "code 3" in out


def test_unknown_rank_or_role_is_one_line_and_exit_2(tmp_path, capsys):
    log = failed_job_dir(tmp_path / "log")
    assert run([log, "--rank", "7"])[0] == 2
    assert capsys.readouterr().err.strip() == (
        "paddlike.logs: --rank 7: no trainer rank 7 in these logs (trainer ranks: 0, 1)"
    )
    assert run([log, "--role", "server"])[0] == 2
    assert "no server process" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["missing", "empty", "file", "unrelated"])
def test_a_directory_without_logs_is_one_clear_line_and_exit_2(tmp_path, kind):
    target = tmp_path / "log"
    if kind == "empty":
        target.mkdir()
    elif kind == "file":
        target.write_text("x")
    elif kind == "unrelated":
        target.mkdir()
        (target / "notes.txt").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(target)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(f"paddlike.logs: {target}: ")


def test_paddle_written_directory_is_inferred_from_file_names_and_contents(tmp_path):
    log = write_paddle_job(tmp_path / "log")
    code, out = run([log])
    assert code == 1  # failed, its exit code unknown
    assert out.startswith("FAILED: trainer rank 1 (workerlog.1) logged: ExternalError: NCCL")
    data = json.loads(run([log, "--json"])[1])
    procs = data["nodes"][0]["processes"]
    assert [(p["rank"], p["host"], p["status"]) for p in procs] == [
        (0, "10.0.0.1", "unknown"),
        (1, "10.0.0.1", "failed"),
    ]
    assert procs[1]["first_error"].startswith("ExternalError: NCCL error")
    assert data["nodes"][0]["has_summary"] is False


def test_paddle_ps_directory_shows_servers_and_trainers(tmp_path):
    log = tmp_path / "log"
    log.mkdir()
    (log / "endpoints.log").write_text(
        "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:6072\n"
        "PADDLE_PSERVERS_IP_PORT_LIST: \n127.0.0.1:6070\n127.0.0.1:6071"
    )
    for name in ("serverlog.0", "serverlog.1", "workerlog.0"):
        (log / name).write_text("ok\n")
    data = json.loads(run([log, "--json"])[1])
    procs = data["nodes"][0]["processes"]
    assert data["status"] == "unknown" and data["exit_code"] == 3
    assert [(p["role"], p["rank"], p["endpoint"]) for p in procs] == [
        ("server", 0, "127.0.0.1:6070"),
        ("server", 1, "127.0.0.1:6071"),
        ("trainer", 0, "127.0.0.1:6072"),
    ]
    assert run([log, "--role", "server", "--tail", "1"])[1].count("==> ") == 2


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def running_job_dir(path: Path, live_pid: int, dead_pid: int, launcher: int | None = None) -> Path:
    """A summary that says running; the owner file names `launcher` (default: `live_pid`),
    as a launcher's does while it holds the directory."""
    path.mkdir(parents=True)
    owner = {"pid": live_pid if launcher is None else launcher, "host": "127.0.0.1"}
    (path / ".paddlike.owner").write_text(json.dumps(owner | {"since": time.time()}))
    started = time.time() - 5
    (path / "workerlog.0").write_text("epoch 0\n")
    (path / "workerlog.1").write_text("epoch 0\n")
    write_summary(
        path,
        RunSummary(
            job_id="job-r",
            mode="collective",
            node_index=0,
            nnodes=1,
            host="127.0.0.1",
            hostname=socket.gethostname(),
            log_dir=str(path),
            start_time=time.time() - 5,
            processes=[
                record(
                    0, "running", pid=live_pid, start_time=started, end_time=None, exit_code=None
                ),
                record(
                    1, "running", pid=dead_pid, start_time=started, end_time=None, exit_code=None
                ),
            ],
        ),
    )
    return path


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_running_job_shows_live_processes_as_running_and_gone_ones_as_gone(tmp_path, sleeper):
    log = running_job_dir(tmp_path / "log", sleeper.pid, dead_pid())
    code, out = run([log, "--json"])
    data = json.loads(out)
    assert code == 75 and data["status"] == "running" and data["exit_code"] == 75
    assert [p["status"] for p in data["nodes"][0]["processes"]] == ["running", "gone"]
    assert data["root_cause"] is None and data["hung_for"] is None
    code, out = run([log])
    assert code == 75
    assert out.splitlines()[0].startswith("node 0 of 1 (")
    assert ": running, ran " in out.splitlines()[0]
    assert out.endswith(
        "job running: 2 processes on 1 node (1 running, 1 gone); gone = its launcher died "
        "before recording how it ended\n"
    )


def test_multi_node_parent_directory_shows_each_node(tmp_path):
    failed_job_dir(tmp_path / "job" / "nodeb", node_index=1, nnodes=2)
    a = failed_job_dir(tmp_path / "job" / "nodea", node_index=0, nnodes=2)
    summary = json.loads((a / "summary.json").read_text())
    summary["processes"] = [
        dict(p, rank=p["rank"] + 2, status="killed", signal="SIGTERM", exit_code=None)
        for p in summary["processes"]
    ]
    (a / "summary.json").write_text(json.dumps(summary))
    code, out = run([tmp_path / "job"])
    assert code == 3
    assert out.index("node 0 of 2") < out.index("node 1 of 2")
    assert out.count("FAILED:") == 1
    data = json.loads(run([tmp_path / "job" / "nodeb", tmp_path / "job" / "nodea", "--json"])[1])
    assert [n["node_index"] for n in data["nodes"]] == [0, 1]
    assert run([tmp_path / "job", "--rank", "3"])[0] == 0


def test_follow_prefixes_aligned_lines_and_stops_when_the_summary_says_the_job_ended(
    tmp_path, sleeper
):
    log = running_job_dir(tmp_path / "log", sleeper.pid, sleeper.pid)
    out = io.StringIO()
    follower = Follower([log], out, tail=1)
    follower.poll()
    with open(log / "workerlog.1", "a") as f:
        f.write("epoch 1\nhalf a li")
    follower.poll()
    assert out.getvalue().splitlines() == [
        "[trainer 0] epoch 0",
        "[trainer 1] epoch 0",
        "[trainer 1] epoch 1",
    ]
    summary = json.loads((log / "summary.json").read_text())
    summary["status"] = "succeeded"
    (log / "summary.json").write_text(json.dumps(summary))
    assert follower.run(deadline=time.monotonic() + 30) == "ended"
    assert out.getvalue().splitlines()[-1] == "[trainer 1] half a li"


def test_follow_ends_cleanly_on_ctrl_c(tmp_path, sleeper):
    log = running_job_dir(tmp_path / "log", sleeper.pid, sleeper.pid)
    proc = subprocess.Popen(
        [sys.executable, "-m", "paddlike.logs", "--follow", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "[trainer 0] epoch 0\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130
    assert "Traceback" not in err


def test_follow_has_no_colour_when_not_a_terminal(tmp_path, sleeper):
    log = running_job_dir(tmp_path / "log", sleeper.pid, sleeper.pid)
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    summary = json.loads((log / "summary.json").read_text())
    summary["status"] = "succeeded"
    (log / "summary.json").write_text(json.dumps(summary))
    proc = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", "--follow", str(log)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert proc.returncode == 0
    assert proc.stdout == "[trainer 0] epoch 0\n[trainer 1] epoch 0\n"


# --- log_samples/: directories written by paddlike's own launcher (make log-samples) ------

SAMPLES = Path(__file__).resolve().parents[2] / "log_samples"


def sample(name: str) -> Path:
    path = SAMPLES / name
    if not path.is_dir():
        pytest.skip(f"log_samples/{name} not generated (run make log-samples)")
    return path


def test_sample_success_shows_every_worker_ok():
    data = json.loads(run([sample("success"), "--json"])[1])
    assert data["status"] == "succeeded" and data["root_cause"] is None
    procs = data["nodes"][0]["processes"]
    assert [(p["rank"], p["status"], p["exit_code"]) for p in procs] == [(0, "ok", 0), (1, "ok", 0)]


def test_sample_failed_names_rank_1_its_exit_code_and_its_traceback():
    code, out = run([sample("failed")])
    assert code == 3
    assert out.startswith("FAILED: trainer rank 1 exited with code 3\n")
    assert "    | RuntimeError: rank 1 cannot read shard data/part-00001" in out
    data = json.loads(run([sample("failed"), "--json"])[1])
    by_rank = {p["rank"]: p for p in data["nodes"][0]["processes"]}
    assert by_rank[1]["status"] == "failed" and by_rank[1]["exit_code"] == 3
    assert by_rank[1]["first_error"] == "RuntimeError: rank 1 cannot read shard data/part-00001"
    assert by_rank[0]["status"] == "killed"


def test_sample_restarted_ends_ok_after_one_restart():
    data = json.loads(run([sample("restarted"), "--json"])[1])
    assert data["status"] == "succeeded"
    assert data["nodes"][0]["restarts"] == 1


def test_sample_ps_shows_the_server_and_the_trainers():
    data = json.loads(run([sample("ps"), "--json"])[1])
    roles = [(p["role"], p["rank"]) for p in data["nodes"][0]["processes"]]
    assert roles == [("server", 0), ("trainer", 0), ("trainer", 1)]
    assert data["status"] == "succeeded"


def test_sample_two_node_parent_shows_both_nodes_with_global_ranks():
    data = json.loads(run([sample("two_node"), "--json"])[1])
    assert [n["node_index"] for n in data["nodes"]] == [0, 1]
    ranks = [[p["rank"] for p in n["processes"]] for n in data["nodes"]]
    assert ranks == [[0, 1], [2, 3]]
    assert data["nodes"][0]["trainer_endpoints"] == data["nodes"][1]["trainer_endpoints"]
    assert run([sample("two_node"), "--rank", "3", "--tail", "1"])[1].endswith("rank 3 done\n")


@pytest.mark.parametrize("name", ["success", "failed", "ps", "two_node/nodea"])
def test_sample_read_without_its_summary_is_inferred_like_a_paddle_directory(tmp_path, name):
    import shutil

    copy = tmp_path / "log"
    shutil.copytree(sample(name), copy)
    (copy / "summary.json").unlink()
    data = json.loads(run([copy, "--json"])[1])
    procs = data["nodes"][0]["processes"]
    assert procs and all(p["rank"] is not None for p in procs)
    failed = [p["rank"] for p in procs if p["status"] == "failed"]
    assert failed == ([1] if name == "failed" else [])


# --- a real launcher ---------------------------------------------------------------------

WAITING_WORKER = """\
import os, signal
print(f"rank {os.environ['PADDLE_TRAINER_ID']} ready", flush=True)
signal.pause()  # until the launcher stops the job
"""


def test_running_job_of_the_real_launcher_is_followed_until_the_launcher_ends_it(tmp_path):
    script = tmp_path / "wait.py"
    script.write_text(WAITING_WORKER)
    log = tmp_path / "log"
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "paddlike.launch",
            "--nproc_per_node",
            "2",
            "--log_dir",
            str(log),
            "--tee",
            "none",
            str(script),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    follow = None
    try:
        # The summary appears before the workers start; the log files follow.
        wrote = wait_until(
            lambda: (log / "workerlog.1").exists() and (log / "summary.json").exists(),
            under=log,
            timeout=30,
            what="the launcher's logs",
            writer=launcher,
        )
        assert wrote, launcher.stderr.read() if launcher.stderr else ""
        follow = subprocess.Popen(
            [sys.executable, "-m", "paddlike.logs", "--follow", "--tail", "5", str(log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert follow.stdout is not None
        seen = set()
        while len(seen) < 2:
            line = follow.stdout.readline()
            assert line, "paddlike.logs --follow ended before the workers were ready"
            if line.rstrip().endswith("ready"):
                seen.add(line.split("]")[0] + "]")
        assert seen == {"[trainer 0]", "[trainer 1]"}
        data = json.loads(run([log, "--json"])[1])
        assert data["status"] == "running"
        assert [p["status"] for p in data["nodes"][0]["processes"]] == ["running", "running"]
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=30) == 143
        follow.communicate(timeout=30)  # stops by itself: the summary says the job ended
        assert follow.returncode == 143  # the job's outcome: stopped by SIGTERM
        data = json.loads(run([log, "--json"])[1])
        assert data["status"] == "interrupted"
        assert data["root_cause"] is not None and "SIGTERM" in data["root_cause"]["reason"]
    finally:
        for proc in (launcher, follow):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_follow_with_rank_shows_only_that_process(tmp_path):
    log = failed_job_dir(tmp_path / "log")
    code, out = run([log, "--follow", "--rank", "0", "--tail", "1"])
    assert code == 3  # the job's outcome
    assert out == "[trainer 0] epoch 1\n"
