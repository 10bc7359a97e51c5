"""The launcher's exit code, decided in one place (plan/exitcode.py), as tables."""

from __future__ import annotations

import signal

import pytest

from paddlike.launch.plan.exitcode import cause_exit_code, round_exit_code, signal_exit_code
from paddlike.summary import RootCause


@pytest.mark.parametrize(
    ("cause", "code"),
    [
        (RootCause(reason="x", exit_code=3), 3),
        (RootCause(reason="x", signal="SIGKILL"), 137),
        (RootCause(reason="x", signal="SIGTERM"), 143),  # a launcher that got SIGTERM
        (RootCause(reason="x", signal="SIGINT"), 130),
        (RootCause(reason="x", signal="SIGHUP"), 129),
        (RootCause(reason="x", signal="SIGBOGUS"), 1),
        (RootCause(reason="node 1 stopped sending heartbeats"), 1),
    ],
)
def test_a_cause_gives_the_same_exit_code_on_every_node(cause, code):
    assert cause_exit_code(cause) == code


def test_a_launchers_signal_gives_128_plus_its_number():
    assert signal_exit_code(signal.SIGTERM) == 143
    assert signal_exit_code(2) == 130


THEIRS = RootCause(reason="trainer rank 3 exited with code 7", role="trainer", exit_code=7)


@pytest.mark.parametrize(
    ("own_code", "cause", "consequence", "code"),
    [
        (0, None, False, 0),  # success everywhere
        (3, THEIRS, False, 3),  # our failure is the job's cause: our process's code
        (1, THEIRS, True, 7),  # ours came after theirs: the job's cause's code
        (0, THEIRS, False, 7),  # our workers succeeded, another node's failed
        (0, RootCause(reason="x", signal="SIGTERM"), False, 143),
    ],
)
def test_a_rounds_exit_code_is_the_job_causes_unless_ours_is_that_cause(
    own_code, cause, consequence, code
):
    assert round_exit_code(own_code, cause, consequence=consequence) == code


def test_an_error_gives_its_own_code_else_1():
    from paddlike.launch.peers.rendezvous_errors import RendezvousError
    from paddlike.launch.plan.exitcode import error_exit_code

    class Coded(RendezvousError):
        exit_code = 3

    assert error_exit_code(Coded("x")) == 3
    assert error_exit_code(OSError("x")) == 1
