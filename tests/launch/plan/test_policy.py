"""The job's causes, as tables: how an exit counts, which cause is the job's, how each
kind of cause is named. No processes, no store, no clock. (Exit codes: test_exitcode.py;
what follows a round: test_next_round.py.)"""

from __future__ import annotations

import pytest

from paddlike.launch.plan.policy import (
    JobCause,
    as_seen_from,
    exit_verdict,
    launcher_signal_cause,
    lost_contact_cause,
    lost_node_cause,
)
from paddlike.summary import RootCause

HOSTS = ["10.0.0.1", "10.0.0.2"]  # text only


@pytest.mark.parametrize(
    ("code", "stop_sent", "kill_sent", "stopping", "tearing", "status", "failure"),
    [
        (0, False, False, False, False, "ok", None),
        (3, False, False, False, False, "failed", "trainer rank 1 exited with code 3"),
        (-9, False, False, False, False, "failed", "trainer rank 1 was killed by SIGKILL"),
        (3, False, False, False, True, "failed", None),  # after the teardown began
        (0, True, False, True, False, "ok", None),  # a server asked to stop
        (-15, True, False, True, False, "ok", None),
        (143, True, False, True, False, "ok", None),
        (1, True, False, True, False, "failed", "trainer rank 1 exited with code 1 after"),
        (-11, True, False, True, False, "failed", "trainer rank 1 exited with SIGSEGV after"),
        (-9, True, True, True, False, "killed", None),  # ignored SIGTERM, got SIGKILL
        (-15, True, False, False, True, "killed", None),  # stopped by the teardown
        (0, True, False, False, True, "killed", None),
    ],
)
def test_an_exit_counts_by_who_asked_for_it_and_when(
    code, stop_sent, kill_sent, stopping, tearing, status, failure
):
    verdict = exit_verdict(
        "trainer rank 1",
        code,
        stop_sent=stop_sent,
        kill_sent=kill_sent,
        stopping_services=stopping,
        tearing_down=tearing,
    )
    assert verdict.status == status
    if failure is None:
        assert verdict.failure is None
    else:
        assert verdict.failure is not None and verdict.failure.startswith(failure)


def _cause(node: int, reason: str = "trainer rank 0 exited with code 3") -> RootCause:
    return RootCause(reason=reason, node_index=node, role="trainer", exit_code=3)


def test_the_first_cause_written_is_the_jobs_and_our_own_is_not_acted_on_again():
    book = JobCause()
    ours, winner = _cause(1), _cause(0)
    book.published(winner)  # we failed, but node 0's cause was in the store first
    assert book.cause == winner
    assert book.to_act_on() is None  # our own supervisor is tearing down already
    book.learned(_cause(2))
    assert book.cause == winner
    book.settled(None)  # the store said nothing new
    assert book.cause == winner and ours != winner


def test_a_cause_learned_from_elsewhere_ends_the_round():
    book = JobCause()
    assert book.to_act_on() is None
    book.learned(lost_node_cause(1, HOSTS, 10.0, now=5.0))
    assert book.to_act_on() is not None
    assert "node 1 (10.0.0.2) stopped sending heartbeats for 10 s" in book.to_act_on().reason


def test_the_end_of_the_round_settles_on_the_stores_cause():
    book = JobCause()
    book.learned(_cause(1, "ours, guessed while the store was away"))
    book.settled(_cause(0))
    assert book.cause.node_index == 0


def test_another_nodes_log_file_is_named_with_its_node():
    cause = RootCause(reason="x", node_index=1, log_file="/home/u/log/workerlog.0")
    seen = as_seen_from(cause, 0, HOSTS)
    assert seen.log_file == "/home/u/log/workerlog.0 on node 1 (10.0.0.2)"
    assert as_seen_from(cause, 1, HOSTS).log_file == "/home/u/log/workerlog.0"


@pytest.mark.parametrize(
    ("store", "says", "never"),
    [
        ("etcd://10.0.0.9:2379", "lost contact with etcd at 10.0.0.9:2379 (--master)", "died"),
        ("10.0.0.1:6170", "lost contact with node 0 (10.0.0.1), which hosts the job's", "etcd"),
    ],
)
def test_losing_the_store_names_what_stopped_answering(store, says, never):
    cause = lost_contact_cause(1, HOSTS, store, "node 0 (10.0.0.1)", 10.0, "timed out", now=1.0,
                               store_node=0)  # fmt: skip
    assert says in cause.reason and never not in cause.reason
    assert cause.role is None  # not restartable
    # node 0's store lost: node 0 is where the job failed; etcd lost: this node is cut off
    lost = (0, "10.0.0.1") if store == "10.0.0.1:6170" else (1, HOSTS[1])
    assert (cause.node_index, cause.host) == lost


def test_a_launcher_signal_names_the_host_and_what_it_was_doing():
    cause = launcher_signal_cause("10.0.0.2", 1, 15, "waiting for node 0", now=1.0)
    assert cause.reason == "launcher on 10.0.0.2 received SIGTERM while waiting for node 0"
    assert cause.signal == "SIGTERM" and cause.stopped
