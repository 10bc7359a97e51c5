"""The one command's loop over its sessions: what ends the job and the line it says."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paddlike.launch.cluster.start import _watch
from paddlike.launch.cluster.stream import Consoles, Session

pytestmark = pytest.mark.timeout(60)

# a host's launcher: ends when its stdin closes (the starter's end of the job)
UNTIL_EOF = "import sys; sys.stdin.read()"


def _session(host: str, code: str) -> Session:
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return Session(host, proc)


def _run(sessions: list[Session]) -> int:
    wake_r, wake_w = os.pipe()
    out_r, out_w = os.pipe()
    consoles = Consoles(sessions, wake_r, out=out_w, err=out_w)
    try:
        return _watch(consoles, kill_timeout=5)
    finally:
        consoles.close()
        for fd in (wake_r, wake_w, out_r, out_w):
            os.close(fd)


def test_an_ssh_client_killed_by_a_signal_is_a_lost_host_not_its_launchers_exit(capfd) -> None:
    """SIGKILL to one host's ssh client: the job ends on the others and the command exits
    255 naming the host as lost (it said "its launcher exited with 137" before)."""
    killed = _session("b", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    code = _run([_session("a", UNTIL_EOF), killed])
    assert code == 255
    assert "host b: the ssh connection failed or was lost; ending the job" in capfd.readouterr().err


def test_a_failing_launcher_is_named_as_the_first_to_end_not_as_the_cause(capfd) -> None:
    code = _run([_session("a", UNTIL_EOF), _session("c", "import sys; sys.exit(7)")])
    assert code == 7
    assert "host c: its launcher ended first (exit 7); ending the others" in capfd.readouterr().err
