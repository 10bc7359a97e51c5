"""Ctrl-C reaches a training script as Ctrl-C (issue 32): the workers run in sessions of
their own, so the terminal's SIGINT reaches only the launcher, which passes it on as SIGINT
before SIGTERM and SIGKILL. Real torch (gloo, 2 ranks), as a torchrun user's script."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from paddlike.summary import read_summary

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[3]
WORKER = REPO / "tests" / "support" / "signal_workers" / "torch_interrupt.py"
DEADLINE = 60.0


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal, whatever pytest inherited


def _interrupt(tmp_path: Path, how: str, kill_timeout: str = "2") -> tuple[int, str]:
    """Launch 2 ranks of WORKER, SIGINT the launcher once both are ready; its exit code
    and console."""
    pytest.importorskip("torch.distributed", reason="torch is not installed (make torch-env)")
    work = tmp_path / "work"
    work.mkdir()
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2",
           "--kill_timeout", kill_timeout, "--log_dir", str(tmp_path / "log"), str(WORKER),
           str(work), how]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=_default_sigint)  # fmt: skip
    try:
        end = time.monotonic() + DEADLINE
        while not all((work / f"ready.{r}").exists() for r in (0, 1)):
            assert proc.poll() is None, f"launcher exited {proc.returncode}: {proc.stdout.read()}"
            assert time.monotonic() < end, "the ranks never became ready"
            time.sleep(0.02)  # the workers' files: nothing to wait on
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for ready in work.glob("ready.*"):  # a failed test leaves no rank behind
            with contextlib.suppress(psutil.Error, ValueError):
                psutil.Process(int(ready.read_text())).kill()
    return proc.returncode, out


def _logs(tmp_path: Path) -> dict[int, str]:
    return {r: (tmp_path / "log" / f"workerlog.{r}").read_text() for r in (0, 1)}


def test_ctrl_c_runs_every_rank_s_keyboard_interrupt_cleanup(tmp_path):
    # the longest first step (a loaded machine may take seconds to run torch's cleanup)
    code, out = _interrupt(tmp_path, "catch", kill_timeout="30")
    assert code == 130, out
    for rank, log in _logs(tmp_path).items():
        assert f"rank {rank}: cleanup ran" in log, log
    how = "(SIGINT, SIGTERM after 5 s, SIGKILL 30 s later; Ctrl-C again kills them at once)"
    assert how in out, out
    assert "sending SIGTERM" not in out and "sending SIGKILL" not in out, out


def test_a_script_that_ignores_sigint_still_ends_by_sigterm(tmp_path):
    code, out = _interrupt(tmp_path, "ignore_int")
    assert code == 130, out
    assert "did not exit within 2 s of SIGINT; sending SIGTERM" in out, out
    assert "sending SIGKILL" not in out, out
    summary = read_summary(tmp_path / "log")
    assert summary is not None
    assert [p.signal for p in summary.processes] == ["SIGTERM", "SIGTERM"], summary
    assert all("cleanup ran" not in log for log in _logs(tmp_path).values())


def test_a_script_that_ignores_sigint_and_sigterm_ends_by_sigkill(tmp_path):
    code, out = _interrupt(tmp_path, "ignore_all")
    assert code == 130, out
    assert "did not exit within 2 s of SIGINT; sending SIGTERM" in out, out
    assert "did not exit within 2 s of SIGTERM; sending SIGKILL" in out, out
    summary = read_summary(tmp_path / "log")
    assert summary is not None
    assert [p.signal for p in summary.processes] == ["SIGKILL", "SIGKILL"], summary
