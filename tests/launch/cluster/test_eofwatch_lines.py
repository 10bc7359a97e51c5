"""The starter's signals reach a host's launcher as lines on its stdin (`eofwatch`): a
`signal N` line is that signal to the launcher; the end of the stdin is one SIGHUP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from paddlike.launch.cluster.eofwatch import SENT_SIGNALS, parse_signal_line, signal_line

# a process with the watch on: says which signals it got, in order
WATCHED = """
import os, signal, sys, time
from paddlike.launch.cluster import eofwatch
got = []
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
    signal.signal(s, lambda n, f: got.append(signal.Signals(n).name))
eofwatch.end_on_stdin_eof()
print("ready", flush=True)
deadline = time.monotonic() + 20
while "SIGHUP" not in got and time.monotonic() < deadline:
    time.sleep(0.05)
print(" ".join(got), flush=True)
"""


def test_a_signal_line_round_trips_and_anything_else_is_ignored() -> None:
    assert parse_signal_line(signal_line(signal.SIGUSR1)) == signal.SIGUSR1
    assert parse_signal_line(signal_line(signal.SIGRTMIN + 4)) == signal.SIGRTMIN + 4
    for other in (b"go", b"signal", b"signal x", b"signal 0", b"signal 99", b"kill 9"):
        assert parse_signal_line(other) is None


def test_only_the_signals_the_starter_sends_are_taken() -> None:
    for sent in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        assert parse_signal_line(signal_line(sent)) == sent
    for never in (signal.SIGKILL, signal.SIGSTOP, signal.SIGSEGV, signal.SIGCHLD, signal.SIGQUIT):
        assert parse_signal_line(signal_line(never)) is None
    assert parse_signal_line(signal_line(signal.SIGRTMIN + 5)) is None
    # a --signals_to_handle signal of this launcher is passed on too
    winch = signal_line(signal.SIGWINCH)
    assert parse_signal_line(winch) is None
    assert parse_signal_line(winch, {*SENT_SIGNALS, signal.SIGWINCH}) == signal.SIGWINCH


@pytest.mark.timeout(30)
def test_signal_lines_are_raised_in_order_and_the_end_of_stdin_is_one_sighup() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WATCHED],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == b"ready\n"
        proc.stdin.write(
            signal_line(signal.SIGUSR1)
            + b"noise\n"
            + signal_line(signal.SIGSTOP)  # refused: it would stop the launcher
            + signal_line(signal.SIGUSR2)
        )
        proc.stdin.close()
        # each once (Python runs pending handlers by signal number, whatever the order)
        assert sorted(proc.stdout.read().split()) == [b"SIGHUP", b"SIGUSR1", b"SIGUSR2"]
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        assert proc.stderr.read() == (
            f"paddlike.launch: ignored 'signal {int(signal.SIGSTOP)}' on stdin: not a signal "
            "the cluster starter sends\n"
        ).encode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
