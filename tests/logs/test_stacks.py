"""Progress files and stack collection on real processes, without the launcher: a worker's
heartbeat read from outside, py-spy's stacks of a sleeping process, and the one-line
fallback when py-spy cannot attach."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlike.distributed import progress
from paddlike.logs import hang
from paddlike.logs import stacks as S
from paddlike.logs.hang import locate, summarize

REPO = Path(__file__).resolve().parents[2]

SLEEPER = textwrap.dedent(
    """
    import sys, time
    import paddlike.distributed as dist

    def load_batch():
        print("ready", flush=True)
        sys.stdin.read()  # until the test closes our stdin

    for step in range(1, 6):
        dist.heartbeat()
    load_batch()
    """
)


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A python process that beat five times and now waits in `load_batch`."""
    script = tmp_path / "train.py"
    script.write_text(SLEEPER)
    env = dict(os.environ, PYTHONPATH=str(REPO), PADDLE_LOG_DIR=str(tmp_path / "log"))
    env.update(PADDLE_TRAINER_ID="2", PADDLE_TRAINERS_NUM="4", PADDLIKE_JOB_ID="job-x")
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.communicate()


def test_a_workers_heartbeat_is_read_from_outside_while_it_runs(tmp_path, sleeper):
    snap = progress.read_progress(tmp_path / "log" / ".progress" / "rank.2")
    assert (snap.rank, snap.world_size, snap.pid, snap.job_id) == (2, 4, sleeper.pid, "job-x")
    assert (snap.step, snap.beats, snap.ops) == (5, 5, 0)
    assert snap.last_beat_wall >= snap.created_wall
    assert progress.read_all(tmp_path / "log").keys() == {2}
    assert progress.read_all(tmp_path / "log", job_id="another-job") == {}


def test_outside_a_launch_heartbeat_writes_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PADDLE_LOG_DIR"}
    env["PYTHONPATH"] = str(REPO)
    code = "import paddlike.distributed as d; [d.heartbeat(i) for i in range(3)]; print('ok')"
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.stdout == "ok\n", run.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_progress_file_is_refused_by_name(tmp_path):
    bad = tmp_path / "rank.0"
    bad.write_bytes(b"hello")
    with pytest.raises(progress.ProgressFileError, match=r"rank.0: not a paddlike progress file"):
        progress.read_progress(bad)


def test_py_spy_takes_the_stack_of_a_process_that_does_not_cooperate(tmp_path, sleeper):
    if S.find_py_spy() is None:
        pytest.skip("py-spy is not installed (pip install py-spy)")
    got = S.collect([S.Target(2, sleeper.pid, "nodea", "workerlog.2")], timeout=20)
    stack = got[2]
    assert stack.error == "", stack
    loc = locate(stack)
    assert (loc.function, loc.where) == ("load_batch", "train.py:7")
    assert summarize(got) == ["rank 2 (nodea, workerlog.2) is in `load_batch` at train.py:7"]


def test_without_py_spy_each_rank_gets_the_kernels_view_and_one_line_why(tmp_path, sleeper):
    got = S.collect([S.Target(2, sleeper.pid)], timeout=10, py_spy="/bin/false")
    stack = got[2]
    assert stack.threads == ()
    assert stack.error == "py-spy: exit code 1"
    assert stack.kernel.startswith("kernel: main thread sleeping")


def test_a_process_that_is_gone_is_named_as_not_running(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    got = S.collect([S.Target(0, dead.pid)], timeout=10)
    assert got[0].error == f"process {dead.pid} is not running"


def test_the_dump_has_a_file_per_rank_a_summary_and_json_that_round_trips(tmp_path, sleeper):
    if S.find_py_spy() is None:
        pytest.skip("py-spy is not installed (pip install py-spy)")
    got = S.collect([S.Target(2, sleeper.pid, "nodea", "workerlog.2")], timeout=20)
    snaps = progress.read_all(tmp_path / "log")
    lines = summarize(got)
    out = S.write_dump(tmp_path / "log", got, lines, snaps)
    assert out.parent == tmp_path / "log" / "stacks"
    assert sorted(p.name for p in out.iterdir()) == ["rank.2.txt", "stacks.json", "summary.txt"]
    rank_file = (out / "rank.2.txt").read_text()
    assert rank_file.startswith(f"rank 2  host nodea  pid {sleeper.pid}  log workerlog.2\n")
    assert "load_batch (" in rank_file and "progress: step 5, 5 heartbeats" in rank_file
    assert (out / "summary.txt").read_text() == "\n".join(lines) + "\n"
    data = json.loads((out / "stacks.json").read_text())
    assert S.stacks_from_json(data["stacks"]) == got
    assert data["progress"]["2"]["step"] == 5


def test_a_stacks_link_in_a_shared_log_directory_is_not_written_through(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "stacks").symlink_to(elsewhere)  # planted by another user
    S.write_dump(tmp_path / "log", {}, ["rank 0 stuck"], {})
    assert list(elsewhere.iterdir()) == []
    # "paddlike.logs: " or "paddlike.launch: ", as the process that writes the dump is named
    assert capsys.readouterr().err.endswith(
        f": warning: cannot write the stacks to {tmp_path}/log/stacks: it is a "
        "symbolic link; the report is from the stacks in memory\n"
    )


def test_a_progress_file_is_never_made_through_a_planted_link(tmp_path):
    victim = tmp_path / "root-only"
    victim.write_text("root's secret\n")
    log = tmp_path / "log"
    path = progress.progress_path(log, 0)
    path.parent.mkdir(parents=True)
    for n in range(8):  # the temporary names a neighbour would guess
        (path.parent / f".rank.0.{os.getpid() + n}.tmp").symlink_to(victim)
    progress.ProgressWriter(path, {}).beat(1)
    assert victim.read_text() == "root's secret\n"
    assert progress.read_all(log)[0].pid == os.getpid()
    (path.parent).rename(tmp_path / "moved")
    (log / ".progress").symlink_to(tmp_path / "moved")  # the directory itself a link
    with pytest.raises(OSError, match="it is a symbolic link"):
        progress.ProgressWriter(path, {})


def test_py_spy_json_is_parsed_into_threads_innermost_frame_first():
    text = json.dumps(
        [
            {
                "pid": 7, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 7,
                "active": False, "owns_gil": False,
                "frames": [
                    {"name": "clock_nanosleep", "filename": "/lib/libc.so.6",
                     "module": "/lib/libc.so.6", "short_filename": "libc.so.6", "line": 0},
                    {"name": "load_batch", "filename": "/home/u/train.py", "module": None,
                     "short_filename": "train.py", "line": 3},
                ],
            }
        ]
    )  # fmt: skip
    (thread,) = S.parse_py_spy(text)
    assert (thread.name, thread.os_thread_id, thread.idle) == ("MainThread", 7, True)
    assert [(f.function, f.native) for f in thread.frames] == [
        ("clock_nanosleep", True),
        ("load_batch", False),
    ]


FORKER = textwrap.dedent(
    """
    import os
    import paddlike.distributed as dist

    dist.heartbeat(7)
    child = os.fork()
    if child == 0:  # a data-loader worker: same environment, not the rank
        dist.heartbeat(1000)
        os._exit(0)
    os.waitpid(child, 0)
    print("done", flush=True)
    """
)


def test_a_forked_child_does_not_beat_for_its_parent_rank(tmp_path):
    script = tmp_path / "fork.py"
    script.write_text(FORKER)
    env = dict(os.environ, PYTHONPATH=str(REPO), PADDLE_LOG_DIR=str(tmp_path / "log"))
    env["PADDLE_TRAINER_ID"] = "0"
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert run.stdout == "done\n", run.stderr
    snap = progress.read_progress(tmp_path / "log" / ".progress" / "rank.0")
    assert (snap.step, snap.beats) == (7, 1)


def test_a_nodes_report_crosses_as_json_and_merges_with_the_others(tmp_path, sleeper):
    got = S.collect([S.Target(2, sleeper.pid, "nodea", "workerlog.2")], timeout=20)
    snaps = progress.read_all(tmp_path / "log")
    other = {5: hang.RankStack(5, host="nodeb", error="py-spy: Permission denied")}
    reports = [json.loads(json.dumps(S.node_report(got, snaps))), S.node_report(other, {})]
    stacks, merged = S.merge_reports(reports)
    assert stacks == {**got, **other}
    assert merged == snaps


def test_signs_of_life_are_the_log_write_and_the_heartbeat(tmp_path, sleeper):
    log_dir = tmp_path / "log"
    (log_dir / "workerlog.2").write_text("epoch 1\n")
    os.utime(log_dir / "workerlog.2", (1000.0, 1000.0))
    snaps = progress.read_all(log_dir)
    (alive,) = S.signs_of_life(log_dir, {2: "workerlog.2"}, snaps)
    assert alive.rank == 2 and alive.last_log == 1000.0 and alive.uses_heartbeat
    assert alive.last_progress == pytest.approx(snaps[2].last_beat_wall, abs=0.01)
    (quiet,) = S.signs_of_life(log_dir, {3: "workerlog.3"}, snaps)
    assert (quiet.last_log, quiet.last_progress, quiet.uses_heartbeat) == (None, None, False)


def test_heartbeat_is_exported_lazily_from_paddlike_distributed():
    code = (
        "import sys, paddlike.distributed as d; "
        "assert 'paddlike.distributed.progress' not in sys.modules; "
        "from paddlike.distributed import progress; "
        "assert d.heartbeat is progress.heartbeat and 'heartbeat' in d.__all__; print('ok')"
    )
    env = {k: v for k, v in os.environ.items() if k != "PADDLE_LOG_DIR"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.stdout == "ok\n", run.stderr


def test_the_flight_ring_keeps_the_last_operations_and_marks_the_unfinished_one(
    tmp_path, monkeypatch
):
    np = pytest.importorskip("numpy")
    from paddlike.distributed.collective import flight

    monkeypatch.setenv("PADDLE_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    progress._reset_for_tests()
    try:
        x = np.zeros(8, np.float64)
        for _ in range(300):
            flight.end(flight.begin("all_reduce", 0, x), True)
        flight.begin("broadcast", 0, x, 0)  # never finishes
        snap = progress.read_progress(progress.progress_path(tmp_path, 1))
    finally:
        progress._reset_for_tests()
    assert len(snap.flight) == progress.CAPACITY
    first, last = snap.flight[0], snap.flight[-1]
    assert last.group_seq - first.group_seq == progress.CAPACITY - 1 and snap.ops == last.n
    assert (last.op, last.state, last.end_mono, last.peer) == ("broadcast", "running", 0.0, 0)
    assert (last.nbytes, last.dtype) == (64, "float64")
    assert {e.state for e in snap.flight[:-1]} == {"done"}
    assert all(e.end_mono >= e.start_mono for e in snap.flight[:-1])


def test_stacks_of_a_directory_without_a_summary_say_why_in_one_line(tmp_path, capsys):
    from paddlike.logs.__main__ import main

    (tmp_path / "workerlog.0").write_text("hello\n")  # Paddle's launcher writes no summary
    assert main([str(tmp_path), "--stacks"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"paddlike.logs: --stacks: {tmp_path}: no summary.json, so no process ids to take "
        "stacks of\n"
    )


def test_py_spy_without_ptrace_permission_is_named_in_one_line_with_the_fix(tmp_path, sleeper):
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None or S.find_py_spy() is None:
        pytest.skip("needs root, setpriv and py-spy to run py-spy as an unprivileged user")
    unprivileged = tmp_path / "py-spy-as-nobody"
    unprivileged.write_text(
        f"#!/bin/sh\nexec {setpriv} --reuid=65534 --regid=65534 --clear-groups "
        f'{S.find_py_spy()} "$@"\n'
    )
    unprivileged.chmod(0o755)
    got = S.collect([S.Target(2, sleeper.pid)], timeout=20, py_spy=str(unprivileged))
    assert got[2].threads == ()
    assert got[2].error == f"py-spy: {S.PTRACE_DENIED}"
    assert locate(got[2]).unknown.startswith("py-spy: no permission to attach (ptrace)")
    assert "; kernel: main thread sleeping" in locate(got[2]).unknown


def test_a_py_spy_that_never_answers_is_killed_at_the_deadline(tmp_path, sleeper):
    stuck = tmp_path / "py-spy-stuck"
    stuck.write_text("#!/bin/sh\nexec sleep 60\n")
    stuck.chmod(0o755)
    targets = [S.Target(2, sleeper.pid), S.Target(3, sleeper.pid)]
    start = time.monotonic()
    got = S.collect(targets, timeout=0.5, py_spy=str(stuck))
    assert time.monotonic() - start < 5.0
    for rank in (2, 3):
        assert got[rank].error == "py-spy did not answer before the deadline"
        assert got[rank].kernel.startswith("kernel: main thread sleeping")


def test_a_stopped_process_is_named_stopped_and_not_given_to_py_spy(tmp_path, sleeper):
    os.kill(sleeper.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10  # the signal is delivered when the kernel gets to it
        while S.main_thread_state(sleeper.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        # a py-spy that would fail the test if it were run: a stopped process is not asked
        got = S.collect([S.Target(2, sleeper.pid)], timeout=10, py_spy="/nonexistent/py-spy")
    finally:
        os.kill(sleeper.pid, signal.SIGCONT)
    assert got[2].stopped
    assert got[2].error == "stopped (state T): py-spy cannot read a stopped process"
    assert locate(got[2]).stopped
