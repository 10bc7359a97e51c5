"""Issue 31: `python -m paddlike.logs` on a shared log directory where another user put
FIFOs at the files it reads ends by itself, saying what it could not read; opening a FIFO
for reading used to block it until someone wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

DEADLINE = 30.0


def test_the_reader_does_not_block_on_fifos_and_says_what_it_skipped(tmp_path: Path):
    log = tmp_path / "log"
    log.mkdir()
    for name in ("summary.json", "endpoints.log", ".paddlike.owner", "workerlog.0"):
        os.mkfifo(log / name)
    reader = subprocess.Popen(
        [sys.executable, "-m", "paddlike.logs", str(log)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = reader.communicate(timeout=DEADLINE)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert "Traceback" not in err
    assert "summary.json unreadable (it is a FIFO, not a regular file)" in out
    assert f"{log.name}/workerlog.0" in out
