"""--max_restarts on one node: a failed round is followed by a new one, up to N times.

(The many-node restart round is in test_many_nodes_failures.py; the decision table is
in test_launch_policy.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from paddlike.summary import read_summary

# Rank 1 fails with exit code 3 in every round before --fail_rounds; the rest succeed.
WORKER = """
import os, sys, time
rank, restart = int(os.environ["PADDLE_TRAINER_ID"]), int(os.environ["PADDLIKE_RESTART_COUNT"])
print("RANK", rank, "RESTART", restart, flush=True)
open(f"{sys.argv[2]}/printed.{rank}.{restart}", "w").close()
if rank == 1 and restart < int(sys.argv[1]):
    # fail only once rank 0 has printed this round (else its line may never be written)
    end = time.monotonic() + 30
    while not os.path.exists(f"{sys.argv[2]}/printed.0.{restart}") and time.monotonic() < end:
        time.sleep(0.01)
    sys.exit(3)
"""


def _launch(tmp_path: Path, max_restarts: int, fail_rounds: int) -> subprocess.CompletedProcess:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2"]
    cmd += ["--log_dir", str(tmp_path / "log"), "--max_restarts", str(max_restarts)]
    cmd += [str(script), str(fail_rounds), str(tmp_path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _restarts_seen(log: Path) -> list[str]:
    return [ln.split()[-1] for ln in log.read_text().splitlines() if ln.startswith("RANK ")]


def test_one_node_job_whose_worker_fails_once_succeeds_in_a_second_round(tmp_path: Path) -> None:
    done = _launch(tmp_path, max_restarts=1, fail_rounds=1)
    assert done.returncode == 0, done.stderr
    assert "restart 1 of 1 after: trainer rank 1 exited with code 3" in done.stderr
    for i in range(2):
        text = (tmp_path / "log" / f"workerlog.{i}").read_text()
        assert _restarts_seen(tmp_path / "log" / f"workerlog.{i}") == ["0", "1"]
        headers = [ln for ln in text.splitlines() if ln.startswith("==== paddlike run")]
        assert [h.split(" restart ")[1].split(":")[0] for h in headers] == ["0", "1"]
    summary = read_summary(tmp_path / "log")
    assert summary is not None and summary.status == "succeeded" and summary.restarts == 1


def test_one_node_job_that_keeps_failing_gives_up_with_the_last_root_cause(tmp_path: Path) -> None:
    done = _launch(tmp_path, max_restarts=2, fail_rounds=99)
    assert done.returncode == 3, done.stderr
    assert "giving up after 2 restart(s); last root cause: trainer rank 1 exited with code 3" in (
        done.stderr
    )
    assert _restarts_seen(tmp_path / "log" / "workerlog.1") == ["0", "1", "2"]


def test_without_max_restarts_a_failure_ends_the_job_after_one_round(tmp_path: Path) -> None:
    done = _launch(tmp_path, max_restarts=0, fail_rounds=1)
    assert done.returncode == 3
    assert "paddlike.launch: restart" not in done.stderr
    assert "giving up" not in done.stderr
    assert _restarts_seen(tmp_path / "log" / "workerlog.1") == ["0"]
