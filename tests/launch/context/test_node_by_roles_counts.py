"""Counts mode (--server_num/--worker_num, no lists) is the node-list rule's answer: a
caller that matched the node already passes it in, and it is not matched twice."""

from __future__ import annotations

from paddlike.launch.context.node import NodeMatch, match_ps_node
from paddlike.launch.context.options import parse_options


def test_counts_mode_takes_the_node_the_caller_matched():
    options = parse_options(["--server_num", "1", "--worker_num", "1", "t.py"], {})
    # 10.0.0.7 is no address of this machine: matching again would fail
    node = NodeMatch(("10.0.0.7",), ("10.0.0.7",), 0, "eth9", "matched by the caller")
    got = match_ps_node(options, {}, node=node)
    assert (got.host, got.interface, got.reason) == ("10.0.0.7", "eth9", "matched by the caller")
    assert got.servers is None and got.trainers is None  # counts: every role on this node
