"""Every session's output comes back a line at a time with its host's name in front."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from paddlike.launch.cluster.stream import Consoles, Session


def _session(host: str, code: str) -> Session:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    return Session(host, proc)


def test_lines_are_prefixed_split_writes_joined_and_a_last_partial_line_ended() -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wake_r, wake_w = os.pipe()
    sessions = [
        _session("a", "import sys,time; sys.stdout.write('he'); sys.stdout.flush(); "
                 "time.sleep(0.1); print('llo'); sys.stderr.write('oops'); sys.exit(3)"),
        _session("b", "print('one'); print('two')"),
    ]  # fmt: skip
    consoles = Consoles(sessions, wake_r, out=out_w, err=err_w)
    exited = []
    while consoles.running:
        exited += consoles.wait(time.monotonic() + 10).exited
    consoles.close()
    for fd in (out_w, err_w, wake_w):
        os.close(fd)
    out = os.read(out_r, 65536).decode().splitlines()
    err = os.read(err_r, 65536).decode()
    assert sorted(out) == ["[a] hello", "[b] one", "[b] two"]
    assert err == "[a] oops\n"
    assert {s.host: s.returncode for s in exited} == {"a": 3, "b": 0}
    for fd in (out_r, err_r, wake_r):
        os.close(fd)


def test_a_session_that_exited_with_its_pipes_closed_in_one_batch_is_ended_once() -> None:
    """Its exit and its pipes' end of file come in the same select() batch (Ctrl-C, or
    one host's ssh killed): its output is shown once and the loop does not crash."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wake_r, wake_w = os.pipe()
    session = _session("a", "import sys; sys.stdout.write('last'); sys.stderr.write('words')")
    os.waitid(os.P_PID, session.proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
    consoles = Consoles([session], wake_r, out=out_w, err=err_w)
    events = consoles.wait(time.monotonic() + 10)  # the exit first (`ChildLoop`), then EOFs
    assert [s.host for s in events.exited] == ["a"]
    assert consoles.running == []
    consoles.close()
    for fd in (out_w, err_w, wake_w):
        os.close(fd)
    assert os.read(out_r, 65536) == b"[a] last\n"
    assert os.read(err_r, 65536) == b"[a] words\n"
    for fd in (out_r, err_r, wake_r):
        os.close(fd)


def test_the_first_root_cause_report_of_any_host_is_kept_in_one_line() -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wake_r, wake_w = os.pipe()
    report = (
        "import sys; sys.stderr.write('note\\nFAILED: trainer rank 3 exited with code 7\\n"
        "  where    node 1 (h1), trainer rank 3\\n  exit     code 7\\n"
        "  log      /l/workerlog.1\\nnext\\n')"
    )
    consoles = Consoles([_session("a", report)], wake_r, out=out_w, err=err_w)
    while consoles.running:
        consoles.wait(time.monotonic() + 10)
    consoles.close()
    for fd in (out_r, out_w, err_r, err_w, wake_r, wake_w):
        os.close(fd)
    assert consoles.root_cause == (
        "FAILED: trainer rank 3 exited with code 7 (where node 1 (h1), trainer rank 3; "
        "log /l/workerlog.1)"
    )
