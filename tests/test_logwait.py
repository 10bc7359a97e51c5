"""tests.support.logwait: a wait for a log's words ends when they are written (also into a
directory made after the wait began), when the writer exits, or at its deadline."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.logwait import wait_exited, wait_for_text

pytestmark = pytest.mark.timeout(60)

# Writes its words once its stdin closes (the test decides when), then exits.
WRITER = """
import os, sys
sys.stdin.read()
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
with open(sys.argv[1], "a") as f:
    f.write(sys.argv[2])
"""


def _writer(path, words: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), words], stdin=subprocess.PIPE, text=True
    )


def test_the_wait_ends_with_the_text_written_into_a_directory_made_meanwhile(tmp_path):
    log = tmp_path / "not" / "yet" / "workerlog.0"
    writer = _writer(log, "PeerExitedError: rank 1 left\n")
    try:
        writer.stdin.close()  # it writes now, maybe before the wait starts: both must work
        text = wait_for_text(log, "PeerExitedError", timeout=30)
    finally:
        writer.wait(30)
    assert text == "PeerExitedError: rank 1 left\n"


def test_the_wait_ends_when_the_writer_exits_without_the_text(tmp_path):
    log = tmp_path / "workerlog.0"
    writer = _writer(log, "Traceback (most recent call last):\n")
    writer.stdin.close()
    text = wait_for_text(log, "PeerExitedError", timeout=30, writer=writer)
    writer.wait(30)
    assert text == "Traceback (most recent call last):\n"


def test_at_the_deadline_the_error_names_the_file_and_shows_its_end(tmp_path):
    log = tmp_path / "workerlog.0"
    log.write_text("Traceback (most recent call last):\n")
    with pytest.raises(AssertionError) as failed:
        wait_for_text(log, "PeerExitedError", timeout=0.2)
    assert f"'PeerExitedError' in {log}" in str(failed.value)
    assert str(failed.value).endswith("it ends:\nTraceback (most recent call last):")


def test_wait_exited_returns_once_the_processes_exit_and_names_those_left_at_the_deadline():
    ends = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE, text=True)
    stays = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE, text=True)
    try:
        ends.stdin.close()
        assert wait_exited([ends.pid], timeout=30) == []
        assert wait_exited([stays.pid], timeout=0.2) == [stays.pid]
    finally:
        stays.kill()
        for p in (ends, stays):
            p.wait(30)
