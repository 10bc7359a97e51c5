"""`nohup python -m paddlike.launch ... &`, the way Paddle users start a long job: the
launcher starts with SIGHUP ignored and leaves it so, and so do its workers (cold or
forked from --preload's zygote); the hang-up of a closed terminal ends nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[3]
WORKER = """
import os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
hup = signal.getsignal(signal.SIGHUP)
(out / f"hup.{os.environ['PADDLE_TRAINER_ID']}").write_text(str(int(hup)))
while not (out / "go").exists():
    time.sleep(0.02)  # the test's file is all there is to wait on
"""


def _nohup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.parametrize("preload", [False, True], ids=["cold", "preload"])
def test_a_launcher_started_under_nohup_outlives_the_hang_up(tmp_path: Path, preload: bool):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2",
           "--log_dir", str(tmp_path / "log"), *(["--preload", "os"] if preload else []),
           str(script), str(out)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, text=True, preexec_fn=_nohup,
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not all((out / f"hup.{r}").exists() for r in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.02)  # the workers' files are all there is to wait on
        os.killpg(proc.pid, signal.SIGHUP)  # the terminal closes: its session gets SIGHUP
        (out / "go").write_text("")
        text, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, text
    assert "SIGHUP" not in text, text
    assert [(out / f"hup.{r}").read_text() for r in (0, 1)] == [str(int(signal.SIG_IGN))] * 2
