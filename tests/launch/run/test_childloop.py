"""The one child-process loop (the supervisor's and the cluster starter's): a child's exit
is an event the moment it happens, exits come first in a batch, a signal wakes it, and a
wait ends by its nearest deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from paddlike.launch.run.childloop import EXIT, WAKE, ChildLoop, until
from paddlike.launch.run.signals import SignalPolicy, signals_to_pipe

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _child(started: list[subprocess.Popen[bytes]], code: str) -> tuple[int, int]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
    started.append(proc)
    return proc.pid, os.pidfd_open(proc.pid)


def test_a_childs_exit_is_one_event_with_what_was_registered(children) -> None:
    pid, pidfd = _child(children, "import sys; sys.exit(3)")
    try:
        with ChildLoop() as loop:
            loop.add_child(pidfd, "worker 0")
            events = loop.wait(time.monotonic() + 30)
            assert [(e.kind, e.payload, e.fd) for e in events] == [(EXIT, "worker 0", pidfd)]
            assert pidfd in loop
            loop.remove(pidfd)
            assert pidfd not in loop
        # not reaped by the loop: the owner reads the status
        assert os.waitpid(pid, 0)[1] >> 8 == 3
    finally:
        os.close(pidfd)


def test_exits_come_before_the_other_fds_of_the_same_batch(children) -> None:
    r, w = os.pipe()
    _, pidfd = _child(children, "pass")
    try:
        os.write(w, b"x")
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        with ChildLoop() as loop:
            loop.add(r, "out", None)  # registered first
            loop.add_child(pidfd, "child")
            kinds = [e.kind for e in loop.wait(time.monotonic() + 30)]
        assert kinds == [EXIT, "out"]
    finally:
        for fd in (r, w, pidfd):
            os.close(fd)


def test_a_wait_ends_by_its_nearest_deadline_with_nothing_ready(children) -> None:
    _, pidfd = _child(children, "import time; time.sleep(60)")
    try:
        with ChildLoop() as loop:
            loop.add_child(pidfd, "sleeper")
            start = time.monotonic()
            assert loop.wait(None, start + 30, start + 0.2) == []
            assert time.monotonic() - start < 25  # the nearest one, not the later one
    finally:
        os.close(pidfd)


def test_a_signal_to_this_process_wakes_the_loop(children) -> None:
    _, pidfd = _child(children, "import time; time.sleep(60)")
    policy = SignalPolicy(ending=(signal.SIGUSR2,), stacks=())
    try:
        with signals_to_pipe(policy) as wake_fd, ChildLoop(wake_fd) as loop:
            loop.add_child(pidfd, "sleeper")
            signal.raise_signal(signal.SIGUSR2)
            events = loop.wait(time.monotonic() + 30)
            assert [e.kind for e in events] == [WAKE]
            assert os.read(events[0].fd, 64) == bytes([signal.SIGUSR2])
    finally:
        os.close(pidfd)


def test_until_is_the_time_left_to_the_nearest_deadline() -> None:
    assert until() is None
    assert until(None, None) is None
    assert until(time.monotonic() - 5) == 0.0
    assert 9 < until(time.monotonic() + 10, None, time.monotonic() + 20) <= 10  # type: ignore[operator]
