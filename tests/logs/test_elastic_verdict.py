"""An elastic job that went on after a node left (--on_straggler exclude, a signal, its
launcher SIGKILLed) ended as its last round's nodes did: `python -m paddlike.logs` over
every node's directory says so, and keeps the node that left in its own section."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from paddlike.summary import ProcessRecord, RootCause, RunSummary, write_summary


def _node(
    path: Path, index: int, status: str, code: int | None, rounds: list[int], **extra: object
) -> Path:
    path.mkdir(parents=True)
    (path / "workerlog.0").write_text("step 1\n")
    proc = "ok" if status == "succeeded" else "killed"
    host = f"10.9.0.{index}"
    record = ProcessRecord("trainer", index, 0, host, "workerlog.0", pid=1, status=proc)
    write_summary(
        path,
        RunSummary(
            job_id="job-e", mode="collective", node_index=index, nnodes=3,
            host=f"10.9.0.{index}", hostname=socket.gethostname(), log_dir=str(path),
            start_time=1.0, end_time=2.0, status=status, exit_code=code, processes=[record],
            rounds=[{"round": r, "restarts": 0, "members": [], "ended": "x"} for r in rounds],
            **extra,  # type: ignore[arg-type]
        ),
    )  # fmt: skip
    return path


def _logs(*dirs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paddlike.logs", *map(str, dirs)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_node_that_left_in_round_0_does_not_decide_a_job_that_succeeded_in_round_1(
    tmp_path: Path,
) -> None:
    why = "node 10.9.0.2 left: excluded as a straggler (--on_straggler exclude)"
    cause = RootCause(reason=why, host="10.9.0.2", node_index=2, signal="SIGTERM", time=1.5)
    notice = {"signal": "SIGTERM", "node_index": 2, "host": "10.9.0.2", "time": 1.5,
              "reason": why, "stop_step": None, "not_stopped": [],
              "seconds_to_last_exit": 0.1}  # fmt: skip
    dirs = [
        _node(tmp_path / "l0", 0, "succeeded", 0, [0, 1]),
        _node(tmp_path / "l1", 1, "succeeded", 0, [0, 1]),
        _node(tmp_path / "l2", 2, "interrupted", 143, [0], root_cause=cause, preemption=notice),
    ]
    out = _logs(*dirs)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "STOPPED" not in out.stdout, out.stdout
    assert out.stdout.rstrip().splitlines()[-1].startswith("job succeeded: "), out.stdout
    assert "node 2 of 3 (" in out.stdout and "interrupted, exit 143" in out.stdout, out.stdout
    alone = _logs(dirs[2])  # the node's own directory: its own end, in the notice's words
    assert alone.returncode == 143, alone.stdout
    assert f"stopped: {why} at " in alone.stdout, alone.stdout


def test_a_node_whose_launcher_died_before_any_round_ended_does_not_decide_either(
    tmp_path: Path,
) -> None:
    dirs = [
        _node(tmp_path / "l0", 0, "succeeded", 0, [0, 1]),
        _node(tmp_path / "l1", 1, "failed", 1, []),  # ended in round 0, none recorded
    ]
    out = _logs(*dirs)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_fixed_job_records_no_rounds_and_every_node_decides(tmp_path: Path) -> None:
    dirs = [
        _node(tmp_path / "l0", 0, "succeeded", 0, []),
        _node(tmp_path / "l1", 1, "failed", 1, []),
    ]
    assert _logs(*dirs).returncode == 1
