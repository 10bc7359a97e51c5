"""A preemption's outcome in one line (`format_preemption`), from one node's summary or
every node's: each node's part counts once (its own, else the copy another node read),
and a node whose part nobody read is named as unknown, never counted as stopped."""

from __future__ import annotations

from paddlike.logs.report import format_preemption

NOTICE = {"signal": "SIGTERM", "node_index": 1, "host": "198.18.0.2", "time": 0.0,
          "reason": "launcher on 198.18.0.2 received SIGTERM"}  # fmt: skip
KILLED = [{"rank": 1, "status": "killed", "exit_code": None, "signal": "SIGKILL"}]


def part(node: int, not_stopped=(), last: float = 1.0, **extra) -> dict:
    return {**NOTICE, "node": node, "node_host": f"198.18.0.{node + 1}", "stop_step": 102,
            "not_stopped": list(not_stopped), "seconds_to_last_exit": last, **extra}  # fmt: skip


def test_a_node_says_another_nodes_ranks_that_did_not_stop():
    node0 = part(0, other_nodes=[part(1, KILLED, 0.1), part(2)])
    text = format_preemption([node0])
    assert "; stop step 102: rank 1 (killed) did not stop at it; " in text, text
    assert "every rank" not in text


def test_every_nodes_summaries_count_each_node_once():
    node0 = part(0, other_nodes=[part(1, KILLED), part(2)])
    node1 = part(1, KILLED, other_nodes=[part(0), part(2)])
    node2 = part(2, other_nodes=[part(0), part(1, KILLED)])
    text = format_preemption([node0, node1, node2])
    assert "; stop step 102: rank 1 (killed) did not stop at it; the last exited " in text


def test_a_node_whose_outcome_no_node_read_is_unknown_not_stopped():
    lost = {"node": 2, "node_host": "198.18.0.3", "unknown": "its launcher was lost"}
    text = format_preemption([part(0, other_nodes=[part(1), lost])])
    assert (
        "; stop step 102: node 2 (198.18.0.3): unknown whether its ranks stopped at it "
        "(its launcher was lost); "
    ) in text, text
    assert "every rank" not in text


def test_a_node_unknown_to_one_node_but_read_by_another_counts_as_read():
    late = {"node": 2, "node_host": "198.18.0.3", "unknown": "no word from its launcher"}
    node0 = part(0, other_nodes=[part(1), late])
    node1 = part(1, other_nodes=[part(0), part(2)])
    assert "every rank stopped after step 102" in format_preemption([node0, node1])


def test_a_one_node_summary_without_other_nodes_reads_as_before():
    text = format_preemption([{**NOTICE, "stop_step": 7, "not_stopped": [],
                               "seconds_to_last_exit": 0.5}])  # fmt: skip
    assert text.endswith(
        "; every rank stopped after step 7; the last exited 0.50 s after the notice"
    )


def test_without_should_stop_the_line_says_no_step_was_agreed_not_that_none_saved():
    """A script with a SIGTERM handler of its own may have saved (a trial's did, at one
    step on every rank): the line does not say that none saved."""
    text = format_preemption([{**NOTICE, "stop_step": None, "not_stopped": [],
                               "seconds_to_last_exit": 0.5}])  # fmt: skip
    assert "; no rank called should_stop(), so no common step was agreed (a rank's own " in text
    assert "none saved" not in text and "every rank" not in text
