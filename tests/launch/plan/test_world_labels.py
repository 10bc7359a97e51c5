"""Who hosts the launchers' store, as a node names it when it loses contact: two launchers
on one host ("::1", "::1") are told apart, and a node never says it lost contact with
itself as if it were another node."""

from __future__ import annotations

import pytest

from paddlike.launch.plan.policy import lost_contact_cause
from paddlike.launch.plan.world import store_host_label, store_node

V6 = ("::1", "::1")


@pytest.mark.parametrize(
    ("node_index", "hosts", "store_host", "hosts_store", "index", "label"),
    [
        (1, ("10.0.0.1", "10.0.0.2"), "10.0.0.1", False, 0, "node 0 (10.0.0.1)"),
        (0, V6, "::1", True, 0, "its own store (this launcher)"),
        (1, V6, "::1", False, 0, "node 0 (::1, another launcher on this host)"),
        (0, V6, "::1", False, 1, "node 1 (::1, another launcher on this host)"),
        (1, V6, "::1", True, 1, "its own store (this launcher)"),
        (0, ("10.0.0.1", "10.0.0.2"), "10.0.0.9", False, None, None),
    ],
)
def test_the_store_host_is_told_apart_from_this_node(
    node_index, hosts, store_host, hosts_store, index, label
):
    assert store_node(node_index, hosts, store_host, hosts_store) == index
    assert store_host_label(node_index, hosts, store_host, hosts_store) == label


@pytest.mark.parametrize(
    ("node_index", "hosts_store", "expected"),
    [
        (0, True, "node 0 (::1) lost contact with the job's store it hosts itself at "
                  "[::1]:6391 for 10 s (--heartbeat_timeout): this launcher is stuck"),
        (1, False, "node 1 (::1) lost contact with node 0 (::1, another launcher on this "
                   "host), which hosts the job's store at [::1]:6391"),
        (0, False, "node 0 (::1) lost contact with node 1 (::1, another launcher on this "
                   "host), which hosts"),
    ],
)  # fmt: skip
def test_a_lost_contact_on_one_host_never_names_the_node_twice(node_index, hosts_store, expected):
    label = store_host_label(node_index, V6, "::1", hosts_store)
    index = store_node(node_index, V6, "::1", hosts_store)
    assert label is not None
    cause = lost_contact_cause(
        node_index, V6, "[::1]:6391", label, 10.0, "timed out", 1.0, store_node=index
    )
    assert cause.reason.startswith(expected), cause.reason
    assert cause.reason.count("node 0 (::1)") <= 1
