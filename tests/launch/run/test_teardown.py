"""Teardown as a user meets it: a SIGKILLed launcher leaves no grandchild behind, and a
console that stops reading never stalls the teardown or the launcher's signals.

Each test runs the real launcher (`python -m paddlike.launch`) with small worker
scripts written into tmp_path, and cleans up every process it started by pid,
even when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.support.fixed_ports import fixed_ports
from tests.support.logwait import wait_until

DEADLINE = 20.0

# Writes its pid, starts a grandchild in its own process group (like `bash train.sh`
# running python, or a DataLoader worker), writes the grandchild's pid, then sleeps.
GRANDCHILD_WORKER = """
import os, subprocess, sys, time
out, rank = sys.argv[1], os.environ["PADDLE_TRAINER_ID"]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
for name, value in (("grandchild", child.pid), ("pid", os.getpid())):
    with open(os.path.join(out, f".{name}.{rank}"), "w") as f:
        f.write(str(value))
    os.replace(os.path.join(out, f".{name}.{rank}"), os.path.join(out, f"{name}.{rank}"))
time.sleep(60)
"""

# Rank 0 floods stdout (echoed by --tee 0) and sleeps; rank 1 exits 3 once rank 0
# has written everything.
FLOOD_WORKER = """
import os, sys, time
out, rank = sys.argv[1], int(os.environ["PADDLE_TRAINER_ID"])
with open(os.path.join(out, f"pid.{rank}"), "w") as f:
    f.write(str(os.getpid()))
flooded = os.path.join(out, "flooded")
if rank == 0:
    for i in range(20000):
        print(f"line {i} " + "x" * 60)
    sys.stdout.flush()
    open(flooded, "w").close()
    time.sleep(60)
end = time.monotonic() + 20
while not os.path.exists(flooded) and time.monotonic() < end:
    time.sleep(0.01)
time.sleep(0.3)
sys.exit(3)
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _wait_for(files: list[Path], proc: subprocess.Popen) -> None:
    """Until every one of `files` exists (they are made in one directory)."""
    ready = lambda: all(f.exists() for f in files)  # noqa: E731
    done = wait_until(ready, under=files[0].parent, timeout=DEADLINE, what=f"{files}", writer=proc)
    assert done, f"launcher exited {proc.returncode} early"


def _kill_pids_in(work: Path, *patterns: str) -> None:
    """Whatever a failed test left behind goes (our own scripts only, by pid file)."""
    for pattern in patterns:
        for pid_file in work.glob(pattern):
            with contextlib.suppress(psutil.Error, ValueError, OSError):
                victim = psutil.Process(int(pid_file.read_text()))
                if victim.ppid() in (1, os.getpid()) or "python" in victim.name():
                    victim.kill()


def _alive(pids: list[int], deadline: float) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(procs, timeout=deadline)
    return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_a_sigkilled_launcher_leaves_no_grandchild_behind(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    script = _write(tmp_path, "gc.py", GRANDCHILD_WORKER)
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2"]
    cmd += ["--log_dir", str(tmp_path / "log"), "--tee", "none", str(script), str(work)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for([work / f"{n}.{r}" for n in ("pid", "grandchild") for r in (0, 1)], proc)
        grandchildren = [int((work / f"grandchild.{r}").read_text()) for r in (0, 1)]
        proc.kill()
        proc.wait(timeout=DEADLINE)
        survivors = _alive(grandchildren, 5.0)
        assert not survivors, f"grandchildren outlived their SIGKILLed launcher: {survivors}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_pids_in(work, "grandchild.*", "pid.*")


@pytest.mark.parametrize("trigger", ["worker_exit_3", "sigterm_to_launcher"])
def test_a_console_that_stops_reading_does_not_stall_the_teardown(tmp_path, trigger):
    work = tmp_path / "work"
    work.mkdir()
    script = _write(tmp_path, "flood.py", FLOOD_WORKER)
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2"]
    cmd += ["--log_dir", str(tmp_path / "log"), "--kill_timeout", "1", str(script), str(work)]
    # stdout is a pipe nobody reads: it fills after 64 KiB, like a paused terminal.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        _wait_for([work / "flooded"], proc)
        expected = 3
        if trigger == "sigterm_to_launcher":
            proc.send_signal(signal.SIGTERM)
            expected = 128 + signal.SIGTERM
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pytest.fail(f"launcher still running 5 s after {trigger} while its stdout is full")
        assert code == expected
    finally:
        if proc.poll() is None:
            proc.kill()
        assert proc.stdout is not None
        proc.stdout.close()
        proc.wait()
        _kill_pids_in(work, "pid.*")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal, whatever pytest inherited


@pytest.mark.parametrize("node_rank", [0, 1])
def test_ctrl_c_while_waiting_for_the_other_nodes_exits_130_without_a_traceback(
    tmp_path, node_rank
):
    # Two "nodes" on loopback; the other one never comes, so this launcher waits.
    script = _write(tmp_path, "ok.py", "print('never started')\n")
    cmd = [sys.executable, "-m", "paddlike.launch", "--ips", "127.0.0.1,127.0.0.2"]
    cmd += ["--node_rank", str(node_rank), "--master", f"127.0.0.1:{fixed_ports()}"]
    cmd += ["--rdzv_timeout", "30", "--log_dir", str(tmp_path / "log"), str(script)]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        seen = ""
        if node_rank == 0:
            # Node 0 says when it waits for the missing node: await that line.
            assert proc.stdout is not None
            seen = proc.stdout.readline()
            assert "waiting for" in seen, seen
        else:
            # Node 1 prints nothing while it retries node 0's store (another finding),
            # so there is nothing to await: give it time to be inside that retry loop.
            time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
        out = seen + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in out, out
    assert proc.returncode == 130, out


NESTED = """#!/bin/sh
cd "$1" && exec "$2" -m paddlike.launch --tee none inner.py
"""


def test_a_launcher_started_from_a_worker_uses_its_own_default_log_dir(tmp_path):
    inner_dir = tmp_path / "inner"
    inner_dir.mkdir()
    _write(inner_dir, "inner.py", "print('inner ran')\n")
    outer = _write(tmp_path, "outer.sh", NESTED)
    outer.chmod(0o755)
    cmd = [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp_path / "log")]
    cmd += ["--no_python", str(outer), str(inner_dir), sys.executable]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "inner ran" in (inner_dir / "log" / "workerlog.0").read_text()


@pytest.mark.netns
def test_a_sigkilled_many_node_launcher_leaves_no_grandchild_behind(tmp_path):
    """Node 0's launcher runs the store's and the watch's threads while its workers run;
    its guardian, forked before any of them, still kills the workers' children."""
    from tests.support.netns import netns_cluster

    script = _write(tmp_path, "gc.py", GRANDCHILD_WORKER)
    work = tmp_path / "work"  # rank r writes pid.r and grandchild.r; node i runs rank i
    work.mkdir()
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        ips = ",".join(n.addr for n in cluster.nodes)
        procs = []
        for i, node in enumerate(cluster.nodes):
            cmd = [sys.executable, "-m", "paddlike.launch", "--ips", ips, "--nproc_per_node", "1"]
            cmd += ["--log_dir", str(tmp_path / f"log{i}"), "--tee", "none"]
            cmd += ["--heartbeat_timeout", "2", str(script), str(work)]
            procs.append(node.popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        try:
            for i in range(2):
                _wait_for([work / f"pid.{i}", work / f"grandchild.{i}"], procs[i])
            grandchild = int((work / "grandchild.0").read_text())
            procs[0].kill()
            procs[0].wait(timeout=DEADLINE)
            survivors = _alive([grandchild], 5.0)
            assert not survivors, (
                f"node 0's grandchild outlived its SIGKILLed launcher: {survivors}"
            )
            # node 1 notices the lost node and ends its own job
            assert procs[1].wait(timeout=DEADLINE) != 0
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            _kill_pids_in(work, "grandchild.*", "pid.*")
