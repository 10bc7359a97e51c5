"""`should_stop(step)` in one rank, against the launcher's side of the progress file
(`distributed.preempt`): False until a notice, waits while the launchers agree, then True
from the agreed step on; positions that never let a rank pass the stop step."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from paddlike.distributed import preempt, progress

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def rank_1(tmp_path, monkeypatch):
    """This process as rank 1 of a launch whose log directory is tmp_path."""
    monkeypatch.setenv("PADDLE_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    progress._reset_for_tests()
    preempt._reset_for_tests()
    yield tmp_path
    progress._reset_for_tests()
    preempt._reset_for_tests()


def test_should_stop_is_false_until_a_notice_and_is_a_heartbeat(rank_1):
    assert [preempt.should_stop(s) for s in range(5)] == [False] * 5
    snap = progress.read_progress(progress.progress_path(rank_1, 1), flight=False)
    assert (snap.step, snap.beats) == (4, 5)


def test_a_rank_that_returned_false_at_step_k_is_placed_past_it(rank_1):
    for s in range(8):
        preempt.should_stop(s)
    # rank 1 reported step 7 (and was told False): the smallest step it has not passed is 8;
    # rank 0 has no progress file yet: 0
    assert preempt.mark_pending(rank_1, [0, 1]) == {0: 0, 1: 8}


def test_after_the_decision_it_is_true_from_the_stop_step_on_and_false_before(rank_1):
    preempt.should_stop(0)
    preempt.mark_pending(rank_1, [1])
    preempt.decide(rank_1, [1], 3)
    assert [preempt.should_stop(s) for s in (1, 2, 3, 4)] == [False, False, True, True]


def test_a_rank_at_pending_waits_for_the_decision_and_is_placed_where_it_waits(rank_1):
    preempt.should_stop(0)
    preempt.mark_pending(rank_1, [1])
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(preempt.should_stop(1)))
    waiter.start()
    path = progress.progress_path(rank_1, 1)
    # it waits at step 1 (the launcher reads that it has not passed step 1)
    deadline = threading.Event()
    while preempt._position_of(path) != 1 and not deadline.wait(0.005):
        assert waiter.is_alive(), got
    assert not got
    preempt.decide(rank_1, [1], 1)
    waiter.join(10)
    assert got == [True]


def test_outside_a_launch_it_is_false_and_cheap(monkeypatch):
    monkeypatch.delenv("PADDLE_LOG_DIR", raising=False)
    progress._reset_for_tests()
    preempt._reset_for_tests()
    try:
        assert not preempt.should_stop(0)
    finally:
        preempt._reset_for_tests()


def test_a_rank_that_starts_after_the_decision_takes_the_node_s_stop_step(rank_1, monkeypatch):
    preempt.mark_pending(rank_1, [0, 1])  # neither had a progress file yet
    preempt.decide(rank_1, [0, 1], 4)
    monkeypatch.setattr(os, "getppid", os.getpid)  # this process plays its own launcher
    assert [preempt.should_stop(s) for s in (3, 4)] == [False, True]


def test_a_notice_left_by_another_launcher_or_round_is_not_taken(rank_1):
    preempt.mark_pending(rank_1, [1])
    preempt.decide(rank_1, [1], 4)  # written by this process: not this rank's launcher
    assert preempt.should_stop(5) is False
    preempt.clear_node_notice(rank_1)
    assert not (progress.progress_dir(rank_1) / preempt.NOTICE_FILE).exists()


# A rank whose SIGTERM comes from Slurm itself (cgroup tracking), perhaps before its
# launcher marked it: argv[1] the log directory, argv[2] "mark" (the test marks it meanwhile)
SLURM_RANK = """
import os, signal, sys, time
os.environ.update(PADDLE_LOG_DIR=sys.argv[1], PADDLE_TRAINER_ID="0", SLURM_JOB_ID="7")
from paddlike.distributed import preempt
preempt.should_stop(0)
os.kill(os.getpid(), signal.SIGTERM)
print("alive", flush=True)
end = time.monotonic() + 20
while time.monotonic() < end:
    if preempt.should_stop(1):
        print("stopped", flush=True)
        sys.exit(0)
    time.sleep(0.01)
"""


@pytest.mark.parametrize("marked", [True, False])
def test_under_slurm_a_sigterm_before_the_mark_waits_for_it_else_ends_the_rank(marked, tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    rank = subprocess.Popen([sys.executable, "-c", SLURM_RANK, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert rank.stdout is not None and rank.stdout.readline() == "alive\n"
        if marked:  # the launcher's mark and decision, within Slurm's wait
            preempt.mark_pending(tmp_path, [0])
            preempt.decide(tmp_path, [0], 1)
        out, _ = rank.communicate(timeout=20)
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait()
    if marked:
        assert (rank.returncode, out) == (0, "stopped\n")
    else:  # no notice: a teardown's SIGTERM ends it, as without should_stop
        assert rank.returncode == -signal.SIGTERM
