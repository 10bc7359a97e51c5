"""What follows a round, as tables: one loop for fixed and elastic jobs (a fixed job is
one whose membership cannot change), one restart rule. No processes, no store, no clock."""

from __future__ import annotations

import pytest

from paddlike.launch.plan.membership import JOINED, LOST, ElasticSpec, below_min_cause
from paddlike.launch.plan.next_round import RoundEnd, may_restart, run_rounds
from paddlike.summary import RootCause

SPEC = ElasticSpec(min_nodes=2, max_nodes=4, last_call=30.0)


def _rounds(
    ends: list[RoundEnd], max_restarts: int, spec: ElasticSpec | None = None
) -> tuple[int, list[tuple[int, int]], list[str]]:
    calls: list[tuple[int, int]] = []
    said: list[str] = []

    def run_round(round_: int, restarts: int) -> RoundEnd:
        calls.append((round_, restarts))
        end = ends[len(calls) - 1]
        return end if spec is not None else end._replace(round=round_)

    return run_rounds(spec, max_restarts, run_round, said.append), calls, said


def _failed(node: int = 0) -> RootCause:
    return RootCause(
        reason="trainer rank 0 exited with code 3", node_index=node, role="trainer", exit_code=3
    )


def _membership(kind: str) -> RootCause:
    return RootCause(reason=f"node {kind}", membership=kind)


# --- a fixed job ------------------------------------------------------------------------

FAILED = RoundEnd(3, _failed())
OK = RoundEnd(0, None)
SIGNALLED = RoundEnd(143, RootCause(reason="launcher on a received SIGTERM", signal="SIGTERM"))
LOST_NODE = RoundEnd(1, RootCause(reason="node 1 stopped sending heartbeats"))


@pytest.mark.parametrize(
    ("ends", "max_restarts", "code", "ran"),
    [
        ([OK], 0, 0, [0]),
        ([FAILED], 0, 3, [0]),
        ([FAILED, OK], 1, 0, [0, 1]),
        ([FAILED, FAILED, FAILED], 2, 3, [0, 1, 2]),
        ([SIGNALLED], 3, 143, [0]),  # a restart cannot fix what the user asked for
        ([LOST_NODE], 3, 1, [0]),
        ([FAILED, LOST_NODE], 3, 1, [0, 1]),
    ],
)
def test_rounds_follow_while_a_process_failed_and_restarts_remain(ends, max_restarts, code, ran):
    got_code, calls, said = _rounds(ends, max_restarts)
    assert (got_code, [r for r, _ in calls]) == (code, ran)
    assert all(r == restarts for r, restarts in calls)  # a fixed job's rounds are its restarts
    restarts = [s for s in said if s.startswith("restart ")]
    assert len(restarts) == len(ran) - 1


def test_giving_up_names_the_last_root_cause():
    _, _, said = _rounds([FAILED, FAILED], 1)
    assert said[-1] == "giving up after 1 restart(s); last root cause: " + FAILED.cause.reason


def test_a_hang_whose_cause_names_its_odd_rank_is_not_restarted():
    cause = RootCause(
        "rank 1 (vm, workerlog.1) is in `load_batch` at train.py:41", role="trainer", rank=1,
        exit_code=124, log_file="workerlog.1", stacks="stacks/20261125-215905/summary.txt",
    )  # fmt: skip
    assert cause.hung
    code, calls, said = _rounds([RoundEnd(124, cause)], 2)
    assert (code, calls, said) == (124, [(0, 0)], [])  # --max_restarts restarts failures only


@pytest.mark.parametrize(
    ("cause", "restarts", "max_restarts", "may"),
    [
        (_failed(), 0, 1, True),
        (_failed(), 1, 1, False),  # used up
        (_failed(), 0, 0, False),
        (SIGNALLED.cause, 0, 3, False),  # a launcher's signal
        (LOST_NODE.cause, 0, 3, False),  # a node, not a process
        (RootCause("hung", role="trainer", stacks="s/summary.txt"), 0, 3, False),
    ],
)
def test_one_rule_says_whether_a_restart_follows(cause, restarts, max_restarts, may):
    assert may_restart(cause, restarts, max_restarts) is may


# --- an elastic job ---------------------------------------------------------------------


def test_membership_changes_do_not_use_up_max_restarts_but_failures_do() -> None:
    ends = [
        RoundEnd(1, _membership(JOINED), 0, 2),
        RoundEnd(3, _failed(1), 1, 3),
        RoundEnd(1, _membership(LOST), 2, 2),
        RoundEnd(3, _failed(1), 3, 2),
    ]
    code, calls, said = _rounds(ends, 1, SPEC)
    assert calls == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert code == 3
    assert said[0].startswith("new round (membership change)")
    assert said[1].startswith("restart 1 of 1")
    assert said[-1].startswith("giving up after 1 restart")


def test_a_late_node_placed_in_a_later_round_continues_from_that_round() -> None:
    ends = [RoundEnd(1, _membership(JOINED), 5, 3), RoundEnd(0, None, 6, 3)]
    code, calls, _ = _rounds(ends, 0, SPEC)
    assert (code, calls) == (0, [(0, 0), (6, 0)])


def test_fewer_survivors_than_min_end_the_job_naming_who_went() -> None:
    lost = RootCause(reason="node 2 (10.0.0.3) stopped sending heartbeats", membership=LOST)
    cause = below_min_cause(lost, 1, SPEC)
    assert cause.membership is None
    assert "node 2 (10.0.0.3)" in cause.reason
    assert "1 node left, fewer than the 2 that --nnodes 2:4 needs" in cause.reason
    code, calls, _ = _rounds([RoundEnd(1, lost, 0, 1)], 3, SPEC)
    assert (code, calls) == (1, [(0, 0)])


def test_a_fixed_job_never_takes_a_new_round_for_a_change_of_nodes() -> None:
    # a fixed job's membership cannot change: a cause marked so still ends it
    code, calls, said = _rounds([RoundEnd(1, _membership(LOST)), OK], 3)
    assert (code, calls, said) == (1, [(0, 0)], [])
