"""A signal while the starter prepares ends the start-up, and never while a child is being
started: the child is kept (so ended after), then the signal is raised."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from paddlike.launch.cluster.stopping import Stopped, spawning, stop_on_signals


def test_a_signal_while_a_child_starts_is_raised_once_the_child_is_kept() -> None:
    kept: list[subprocess.Popen[bytes]] = []
    try:
        with stop_on_signals(), pytest.raises(Stopped) as stopped:
            with spawning():
                os.kill(os.getpid(), signal.SIGTERM)  # as if between exec and Popen's return
                kept.append(subprocess.Popen(["sleep", "30"]))
            pytest.fail("the signal was not raised after the block")
    finally:
        for proc in kept:
            proc.kill()
            proc.wait()
    assert stopped.value.signum == signal.SIGTERM
    assert len(kept) == 1


def test_a_signal_elsewhere_is_raised_at_once_and_the_handler_is_restored_after() -> None:
    before = signal.getsignal(signal.SIGHUP)
    with stop_on_signals(), pytest.raises(Stopped) as stopped:
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(1000):  # the handler runs at the next instruction
            pass
    assert stopped.value.signum == signal.SIGHUP
    assert signal.getsignal(signal.SIGHUP) is before  # as it was, after
