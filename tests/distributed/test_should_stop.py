"""`should_stop(step)` in one rank, against the launcher's side of the progress file
(`distributed.preempt`): False until a notice, waits while the launchers agree, then True
from the agreed step on; positions that never let a rank pass the stop step."""

from __future__ import annotations

import os
import threading

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
