"""A launcher started by the cluster stage ends its job when its stdin closes (the ssh
session that started it went away), as on a hang-up: exit 129, no worker left."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paddlike.contract import STDIN_EOF_ENDS

WORKER = f"""
import os, sys, time
print("PID", os.getpid(), flush=True)
print("INHERITED", os.environ.get("{STDIN_EOF_ENDS}"), flush=True)
time.sleep(120)
"""


@pytest.mark.timeout(60)
def test_the_launcher_ends_its_workers_and_exits_129_when_its_stdin_closes(tmp_path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp_path / "log"), str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, STDIN_EOF_ENDS: "1"},
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        pid = None
        inherited = None
        for line in proc.stdout:
            if line.startswith(b"PID "):
                pid = int(line.split()[1])
            if line.startswith(b"INHERITED "):
                inherited = line.split()[1]
                break
        assert pid is not None and inherited == b"None"  # workers never see the variable
        proc.stdin.close()
        out = proc.stdout.read().decode()
        assert proc.wait(timeout=30) == 129, out
        assert "SIGHUP" in out
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.timeout(60)
def test_without_the_variable_a_closed_stdin_changes_nothing(tmp_path) -> None:
    script = tmp_path / "worker.py"
    script.write_text("print('done')")
    env = {k: v for k, v in os.environ.items() if k != STDIN_EOF_ENDS}
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp_path / "log"), str(script)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
