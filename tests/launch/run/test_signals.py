"""The launcher's signal table (`run.signals.signal_policy`): which signals end the job,
which go on to the workers, which take stacks; and the --signals_to_handle option."""

from __future__ import annotations

import signal
import subprocess

import pytest

from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.run.signals import (
    STACKS_SIGNAL,
    forward_signal,
    signal_label,
    signal_policy,
    slurm_reaches_workers,
)
from paddlike.logs import ask

INT, TERM, HUP, QUIT = signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT
USR1, USR2 = signal.SIGUSR1, signal.SIGUSR2
SLURM = {"SLURM_JOB_ID": "7"}
PGID_STEP = "0::/\n"  # proctrack/pgid: the launcher's cgroup says nothing of the step
CGROUP_STEP = "4:freezer:/slurm/uid_0/job_7/step_0/task_0\n"


@pytest.mark.parametrize(
    ("handled", "environ", "ending", "forward", "stacks"),
    [
        # torchrun's default: SIGQUIT ends the job too; SIGUSR1 still takes stacks
        (None, {}, (INT, TERM, HUP, QUIT), (), (STACKS_SIGNAL, USR1)),
        # under Slurm, SIGUSR1 (`--signal=USR1@90`) is a preemption notice, as SIGTERM;
        # SIGUSR2 is the workers'
        (None, SLURM, (INT, TERM, HUP, QUIT, USR1), (USR2,), (STACKS_SIGNAL,)),
        # a list without the ending ones does not turn them off (SIGQUIT included: its
        # default action would dump the launcher's core with no report)
        ((USR1,), {}, (INT, TERM, HUP, QUIT), (USR1,), (STACKS_SIGNAL,)),
        ((USR2,), {}, (INT, TERM, HUP, QUIT), (USR2,), (STACKS_SIGNAL, USR1)),
        # a list given under Slurm is the list: SIGUSR1 stays a stack trigger
        ((TERM, INT), SLURM, (INT, TERM, HUP, QUIT), (), (STACKS_SIGNAL, USR1)),
    ],
)
def test_signal_policy_table(handled, environ, ending, forward, stacks):
    policy = signal_policy(handled, environ, cgroup_text=PGID_STEP)
    assert (policy.ending, policy.forward, policy.stacks) == (ending, forward, stacks)
    assert not policy.slurm_delivers


def test_under_slurm_s_cgroup_tracking_the_workers_get_slurm_s_signal_from_slurm_only():
    policy = signal_policy(None, SLURM, cgroup_text=CGROUP_STEP)
    assert policy.slurm_delivers  # the supervisor then passes nothing on
    assert slurm_reaches_workers(SLURM, CGROUP_STEP)
    assert not slurm_reaches_workers(SLURM, PGID_STEP)
    assert not slurm_reaches_workers({}, CGROUP_STEP)
    assert not slurm_reaches_workers({"SLURM_JOB_ID": "8"}, CGROUP_STEP)  # another job's


def test_the_stack_trigger_is_the_one_paddlike_logs_sends_and_collides_with_nothing():
    assert ask.STACKS_SIGNAL == STACKS_SIGNAL
    assert signal_label(STACKS_SIGNAL) == ask.STACKS_SIGNAL_NAME == "SIGRTMIN+4"
    assert STACKS_SIGNAL not in {int(s) for s in signal.Signals if not s.name.startswith("SIGRT")}


def test_forward_signal_reaches_the_live_and_skips_the_gone():
    child = subprocess.Popen(["sleep", "30"])
    gone = subprocess.Popen(["true"])
    gone.wait(timeout=10)
    try:
        assert forward_signal([gone.pid, child.pid], signal.SIGUSR2) == [child.pid]
        assert child.wait(timeout=10) == -signal.SIGUSR2  # sleep's default: it ends
    finally:
        child.kill()
        child.wait(timeout=10)


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["--signals_to_handle", "SIGUSR1"], {}, (USR1,)),
        (["--signals-to-handle", "SIGTERM,usr2, SIGUSR1"], {}, (TERM, USR2, USR1)),
        ([], {"PET_SIGNALS_TO_HANDLE": "SIGUSR2"}, (USR2,)),
        ([], {"PADDLIKE_SIGNALS_TO_HANDLE": "SIGHUP,SIGUSR1"}, (HUP, USR1)),
        ([], {}, None),
    ],
)
def test_signals_to_handle_from_the_flag_torchrun_s_spelling_and_variables(argv, environ, expected):
    assert parse_options([*argv, "t.py"], environ).signals_to_handle == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("SIGFOO", r"^--signals_to_handle: SIGFOO is not a signal name; expected a comma-"),
        ("SIGTERM,,SIGINT", r"^--signals_to_handle: an empty entry is not a signal name"),
        ("SIGKILL", r"^--signals_to_handle: SIGKILL cannot be handled by the launcher"),
        ("SIGRTMIN", r"^--signals_to_handle: real-time signals are not handled \(SIGRTMIN\+4 "),
        (
            "SIGRTMIN+4",
            r"^--signals_to_handle: real-time signals are not handled \(SIGRTMIN\+4 takes "
            r"stacks\), got 'SIGRTMIN\+4'$",
        ),
        ("rtmax-1", r"^--signals_to_handle: real-time signals are not handled"),
    ],
)
def test_a_bad_signal_list_is_one_line_naming_the_option_and_the_value(value, message):
    with pytest.raises(UsageError, match=message) as err:
        parse_options(["--signals_to_handle", value, "t.py"], {})
    assert f"got {value!r}" in str(err.value)
