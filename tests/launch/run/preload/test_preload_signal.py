"""A preemption's SIGTERM while the zygote still imports (the round placed, no worker
started): the node's log directory says STOPPED by that signal, as without --preload."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.summary import read_summary
from tests.support.logwait import wait_until

pytestmark = pytest.mark.timeout(120)


def test_sigterm_while_the_zygote_imports_leaves_a_stopped_summary(scripts: Path) -> None:
    log = scripts / "log"
    cmd = [sys.executable, "-m", "paddlike.launch", "--log_dir", str(log), "--nproc_per_node",
           "2", "--preload", "heavy", "probe.py", str(scripts / "out")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HEAVY_SECONDS"] = "60"  # the zygote imports until the signal
    proc = subprocess.Popen(cmd, cwd=scripts, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_until((log / "endpoints.log").exists, under=log.parent, timeout=60,
                   what="the round's endpoints.log")  # fmt: skip
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "received SIGTERM while running round 0: stopping" in err
    summary = read_summary(log)
    assert summary is not None, err  # it was missing: the reader said "job unknown"
    assert (summary.status, summary.exit_code, summary.processes) == ("interrupted", 143, [])
    assert summary.end_time is not None and summary.end_time >= summary.start_time
    assert summary.root_cause is not None and "received SIGTERM" in summary.root_cause.reason
    read = subprocess.run([sys.executable, "-m", "paddlike.logs", str(log)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert read.returncode == 143, read.stdout + read.stderr
    assert "STOPPED: launcher on 127.0.0.1 received SIGTERM" in read.stdout
    assert not list((scripts / "out").glob("probe.*"))  # no worker ran
