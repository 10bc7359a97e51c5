"""A preemption notice on one node (issue 34): SIGTERM to the launcher gives every rank the
same stop step (`should_stop`), SIGTERM to each main process only, and --kill_timeout from
the notice; the outcome is said on the console, in summary.json and by paddlike.logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.collective_workers.launching import REPO, launch, logs

pytestmark = pytest.mark.timeout(120)
SAVER = REPO / "tests" / "support" / "signal_workers" / "save_at_stop.py"


def _launch_and_notice(
    tmp: Path, *args: str, launcher: tuple[str, ...] = (), script: Path = SAVER
) -> tuple[int, str]:
    """Start 2 ranks of `script`, send SIGTERM to the launcher once both ran a step (each
    wrote out/ready.<rank>); return its exit code and output."""
    out = tmp / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2",
           "--log_dir", str(tmp / "log"), *launcher, str(script), str(out), *args]  # fmt: skip
    # a TMPDIR of the job's own: multiprocessing's directories (torch DataLoader workers
    # ended by the signal leave theirs) go with the test's
    (tmp / "t").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp / "t")}
    proc = subprocess.Popen(cmd, env=env, text=True, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not all((out / f"ready.{r}").exists() for r in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.02)  # the ranks' files are all there is to wait on
        proc.send_signal(signal.SIGTERM)
        text, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, text


def _saved(tmp: Path) -> dict[int, int]:
    return {int(p.suffix[1:]): int(p.read_text()) for p in (tmp / "out").glob("saved.*")}


def test_sigterm_to_the_launcher_makes_every_rank_save_the_same_step_and_exit_0(tmp_path):
    code, out = _launch_and_notice(tmp_path)
    saved = _saved(tmp_path)
    assert sorted(saved) == [0, 1], out + logs(tmp_path)
    assert len(set(saved.values())) == 1, saved
    step = saved[0]
    assert code == 143  # 128 + SIGTERM: the job was preempted, not done (requeue it)
    assert "preemption notice: SIGTERM on node 0 (127.0.0.1) at " in out
    last = out.strip().splitlines()[-1]
    assert f"every rank stopped after step {step}; the last exited " in last, out
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    assert summary["preemption"]["stop_step"] == step
    assert summary["preemption"]["not_stopped"] == []
    assert {p["status"] for p in summary["processes"]} == {"ok"}
    view = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(tmp_path / "log")],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert "preempted by SIGTERM on node 0 (127.0.0.1) at " in view.stdout
    assert f"every rank stopped after step {step}" in view.stdout
    page = tmp_path / "job.html"
    subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(tmp_path / "log"), "--html", str(page)],
        capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert f"every rank stopped after step {step}" in page.read_text()


def test_a_rank_whose_save_outlives_the_grace_is_named_and_killed(tmp_path):
    # each save takes 30 s; the grace is 1 s from the notice
    code, out = _launch_and_notice(tmp_path, "0.02", "30", launcher=("--kill_timeout", "1"))
    assert _saved(tmp_path) == {}
    assert code == 143
    for rank in (0, 1):
        assert (
            f"trainer rank {rank} (node 0, 127.0.0.1) was still running 1 s after the notice: "
            f"killed, its checkpoint may be partial (workerlog.{rank})"
        ) in out
    assert "rank 0 (killed), rank 1 (killed) did not stop at it" in out.strip().splitlines()[-1]


FAILS = """
import os, sys, time
import paddlike.distributed as dist
rank = int(os.environ["PADDLE_TRAINER_ID"])
for step in range(10**9):
    time.sleep(0.02)
    if dist.should_stop(step):
        break
    if rank == 1 and step == 5:
        sys.exit(3)
"""


def test_a_sigterm_that_is_no_notice_still_ends_a_rank_that_calls_should_stop(tmp_path):
    # rank 1 fails: rank 0 gets the teardown's SIGTERM, which should_stop's handler must
    # not swallow (else it would run on to the SIGKILL 30 s later)
    script = tmp_path / "fails.py"
    script.write_text(FAILS)
    run = launch(tmp_path, script, timeout=60)
    assert run.returncode == 3, run.stdout
    assert "did not exit within" not in run.stdout, run.stdout
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    rank0 = next(p for p in summary["processes"] if p["rank"] == 0)
    assert (rank0["status"], rank0["signal"]) == ("killed", "SIGTERM")
    assert summary["preemption"] is None


NO_STOP = """
import os, sys, time
from pathlib import Path
Path(sys.argv[1], f"ready.{os.environ['PADDLE_TRAINER_ID']}").write_text("")
time.sleep(120)
"""


def test_a_notice_to_ranks_that_never_call_should_stop_says_there_is_no_common_step(tmp_path):
    script = tmp_path / "no_stop.py"
    script.write_text(NO_STOP)
    code, out = _launch_and_notice(tmp_path, script=script)
    assert code == 143, out
    assert (
        "no rank on this node has called should_stop() (or heartbeat()): they end on their "
        "SIGTERM (a script's own SIGTERM handler may save)"
    ) in out, out
    assert "stop step 0" not in out, out
    last = out.strip().splitlines()[-1]
    assert "no rank called should_stop(), so no common step was agreed" in last, out


SAVE_RAISES = """
import os, sys, time
from pathlib import Path
import paddlike.distributed as dist
rank = os.environ["PADDLE_TRAINER_ID"]
for step in range(10**9):
    time.sleep(0.02)
    if step == 2:
        Path(sys.argv[1], f"ready.{rank}").write_text("")
    if dist.should_stop(step):
        raise RuntimeError("Parent directory ckpt does not exist.")  # torch.save's, say
"""


def test_a_rank_whose_save_raises_is_named_by_its_exit_code_not_as_killed(tmp_path):
    script = tmp_path / "save_raises.py"
    script.write_text(SAVE_RAISES)
    code, out = _launch_and_notice(tmp_path, script=script)
    assert code == 143, out
    last = out.strip().splitlines()[-1]
    assert "rank 0 (exited 1), rank 1 (exited 1) did not stop at it" in last, out
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    assert [r["status"] for r in summary["preemption"]["not_stopped"]] == ["exited 1"] * 2
