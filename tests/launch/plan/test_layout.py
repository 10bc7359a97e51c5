"""Ports arithmetic for nodes that differ: each node's worker count is its own, PS counts
on several nodes are one job, PaddleCloud's given ports are used on every node."""

from __future__ import annotations

import pytest

from paddlike.launch.plan.layout import (
    collective_layout,
    port_request,
    ps_counts_world_layout,
)
from paddlike.launch.plan.world import NodeEntry, RendezvousResult

HOSTS = ("10.0.0.1", "10.0.0.2", "10.0.0.3")


def world(*ports: tuple[int, ...], devices: tuple[str, ...] = ()) -> RendezvousResult:
    nodes = tuple(
        NodeEntry(i, HOSTS[i], "", 0, p, {}, devices=devices[i] if devices else "")
        for i, p in enumerate(ports)
    )
    return RendezvousResult(0, nodes, "j", 0.0)


def test_each_nodes_trainers_are_its_own_ports_but_the_last_node_major():
    w = world((4001, 4002), (5001, 5002, 5003), (6001, 6002, 6003, 6004))
    layouts = [collective_layout(w, i, n) for i, n in enumerate((1, 2, 3))]
    expected = (
        "10.0.0.1:4001",
        "10.0.0.2:5001", "10.0.0.2:5002",
        "10.0.0.3:6001", "10.0.0.3:6002", "10.0.0.3:6003",
    )  # fmt: skip
    assert all(layout.trainer_endpoints() == expected for layout in layouts)
    assert {layout.master for layout in layouts} == {"10.0.0.1:4002"}  # node 0's last port


def test_a_node_whose_entry_has_another_count_than_its_own_is_a_bug_not_a_plan():
    with pytest.raises(ValueError, match=r"node 1 \(10.0.0.2\) published 2 trainer ports, not 3"):
        collective_layout(world((4001, 4002), (5001, 5002, 5003)), 1, 3)


def test_each_nodes_published_devices_travel_into_the_layout():
    w = world((4001, 4002), (5001, 5002, 5003), devices=("3", "0,1"))
    assert collective_layout(w, 0, 1).devices == ("3", "0,1")


@pytest.mark.parametrize(
    ("servers", "trainers", "expected"),
    [
        (1, 1, ("a:1,b:1", "a:2,b:2", "a:3")),
        (2, 1, ("a:1,a:2,b:1,b:2", "a:3,b:3", "a:4")),
        (1, 3, ("a:1,b:1", "a:2,a:3,a:4,b:2,b:3,b:4", "a:5")),
    ],
)
def test_ps_counts_on_several_nodes_list_every_nodes_roles_node_major(servers, trainers, expected):
    n = servers + trainers + 1
    nodes = tuple(
        NodeEntry(i, h, "", 0, tuple(range(1, n + 1)), {}) for i, h in enumerate(("a", "b"))
    )
    w = RendezvousResult(0, nodes, "j", 0.0)
    layouts = [ps_counts_world_layout(w, i, servers, trainers) for i in range(2)]
    for i, layout in enumerate(layouts):
        got = (",".join(layout.servers), ",".join(layout.trainers), layout.gloo_endpoint)
        assert got == expected
        assert (layout.host, layout.node_index, layout.nnodes) == ("ab"[i], i, 2)


def test_ps_counts_refuse_an_entry_of_another_shape():
    w = world((1, 2, 3), (1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"node 1 \(10.0.0.2\) published 4 ports, not 3"):
        ps_counts_world_layout(w, 0, 1, 1)


@pytest.mark.parametrize(
    ("nnodes", "source", "start", "limit"),
    [
        (1, "--start_port", 7000, None),
        (2, "--start_port", None, None),  # many nodes trade free ports
        (1, "PADDLE_PORT", 7000, 4),
        (2, "PADDLE_PORT", 7000, 4),  # PaddleCloud opened these on every node
        (3, "PADDLE_START_PORT", None, None),
    ],
)
def test_given_ports_are_used_on_many_nodes_only_when_paddlecloud_gave_them(
    nnodes, source, start, limit
):
    request = port_request(
        reserve=3,
        nnodes=nnodes,
        workers_port=None,
        hosts_workers_store=True,
        start_port=7000,
        start_port_from=source,
        ports_num=4 if source == "PADDLE_PORT" else None,
    )
    assert (request.count, request.start, request.limit) == (3, start, limit)
    assert request.source == (source if start is not None else "")


@pytest.mark.parametrize(
    ("workers_port", "hosts_it", "count", "claimed", "unused"),
    [
        (None, True, 3, None, None),  # node 0: its trainers' 2 and the workers' store
        (None, False, 2, None, 7002),  # another node: its trainers' 2 only
        (6170, True, 2, 6170, None),  # node 0 claims the given --master_port
        (6170, False, 2, None, 6170),  # another node: its trainers' only (issue 31, 11)
    ],
)
def test_paddlecloud_given_ports_count_the_workers_store_only_where_it_is(
    workers_port, hosts_it, count, claimed, unused
):
    request = port_request(
        reserve=3,  # 2 trainers and the workers' store
        nnodes=2,
        workers_port=workers_port,
        hosts_workers_store=hosts_it,
        start_port=7000,
        start_port_from="PADDLE_PORT",
        ports_num=2,
    )
    assert (request.count, request.start, request.limit) == (count, 7000, 2)
    assert (request.workers_port, request.unused_slot) == (claimed, unused)
