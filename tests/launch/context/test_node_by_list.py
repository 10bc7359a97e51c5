"""This node in --ips when names resolve late, and when the nodes are IPv6.

Facts are injected: a fake table of local addresses, a resolver that answers from its
k-th try on, a fake clock. Addresses are from 198.18.0.0/24 and fd00:198:18::/64, text
only: nothing connects.
"""

from __future__ import annotations

import socket

import pytest

from paddlike import netaddr
from paddlike.launch.context.addresses import LocalAddresses, resolve_host
from paddlike.launch.context.names import NamesUnresolved, NameWait
from paddlike.launch.context.node import match_node
from paddlike.launch.context.node_by_list import match_node_in_list
from paddlike.launch.context.options import UsageError, parse_options

V4 = {"node-0": "198.18.0.1", "node-1": "198.18.0.2"}
V6 = {"node6-0": "fd00:198:18::1", "node6-1": "fd00:198:18::2"}


class Late:
    """`table`'s names resolve from try `after` on; others never; addresses at once."""

    def __init__(self, table: dict[str, str], after: int = 1):
        self.table, self.after, self.tries = table, after, 0

    def __call__(self, name: str) -> str:
        if netaddr.is_ipv4(name) or netaddr.is_ipv6(name):
            return resolve_host(name)  # an address: no lookup, canonical spelling
        self.tries += 1
        if name in self.table and self.tries >= self.after:
            return self.table[name]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def fake_wait(timeout: float = 60.0) -> NameWait:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    return NameWait(timeout, clock=lambda: now[0], sleep=sleep)


def machine(*addrs: tuple[str, str]) -> LocalAddresses:
    return LocalAddresses(dict([("127.0.0.1", "lo"), ("::1", "lo"), *addrs]), bind_probe=False)


def match(argv, *, resolve, local, env=None, wait=None, route=None):
    options = parse_options([*argv, "t.py"], env or {})
    return match_node(options, env or {}, local=local, resolve=resolve, wait=wait)


def test_peers_names_that_resolve_late_are_waited_for_and_this_node_found():
    resolve = Late(V4, after=6)
    node = match(
        ["--ips", "node-0,node-1"],
        resolve=resolve,
        local=machine(("198.18.0.2", "eth0")),
        wait=fake_wait(),
    )
    assert (node.hosts, node.node_index, node.interface) == (
        ("198.18.0.1", "198.18.0.2"),
        1,
        "eth0",
    )


def test_a_peer_that_never_resolves_ends_the_launch_naming_it():
    resolve = Late({"node-0": "198.18.0.1"})
    with pytest.raises(NamesUnresolved, match=r"^--ips: 'node-1' still does not resolve after 5 s"):
        match(
            ["--ips", "node-0,node-1"],
            resolve=resolve,
            local=machine(("198.18.0.1", "eth0")),
            wait=fake_wait(5),
        )


def test_this_nodes_own_name_unresolved_is_fine_when_node_rank_and_host_say_which():
    resolve = Late({"node-0": "198.18.0.1"})
    node = match(
        ["--ips", "node-0,node-1", "--node_rank", "1", "--host", "198.18.0.2"],
        resolve=resolve,
        local=machine(("198.18.0.2", "eth0")),
        wait=fake_wait(),
    )
    assert (node.hosts, node.node_index) == (("198.18.0.1", "198.18.0.2"), 1)


def test_this_nodes_own_name_unresolved_is_fine_when_pod_ip_is_no_resolved_entry():
    resolve = Late({"node-0": "198.18.0.1"})
    node = match(
        ["--ips", "node-0,node-1"],
        resolve=resolve,
        local=machine(("198.18.0.2", "eth0")),
        env={"POD_IP": "198.18.0.2"},
        wait=fake_wait(),
    )
    assert (node.hosts, node.node_index) == (("198.18.0.1", "198.18.0.2"), 1)


def test_the_master_addr_name_is_waited_for_with_the_list():
    resolve = Late({**V4, "meet": "198.18.0.1"}, after=3)
    node = match(
        ["--ips", "node-0,node-1", "--master_addr", "meet"],
        resolve=resolve,
        local=machine(("198.18.0.1", "eth0")),
        wait=fake_wait(),
    )
    assert node.node_index == 0


def test_ipv6_entries_and_names_match_this_nodes_ipv6_address():
    node = match(
        ["--ips", "node6-0,node6-1"],
        resolve=Late(V6),
        local=machine(("fd00:198:18::2", "eth0")),
    )
    assert (node.hosts, node.node_index, node.interface) == (
        ("fd00:198:18::1", "fd00:198:18::2"),
        1,
        "eth0",
    )
    node = match(
        ["--ips", "[fd00:198:18::1],fd00:198:18:0::2"],
        resolve=Late({}),
        local=machine(("fd00:198:18::2", "eth0")),
    )
    assert node.hosts == ("fd00:198:18::1", "fd00:198:18::2")  # canonical, bare
    assert node.node_index == 1


def test_ipv6_loopback_alone_is_this_node():
    node = match(["--ips", "::1"], resolve=Late({}), local=machine())
    assert (node.hosts, node.node_index, node.interface) == (("::1",), 0, "lo")


def test_a_list_of_ipv4_and_ipv6_nodes_is_refused_naming_one_of_each():
    with pytest.raises(
        UsageError,
        match=r"^--ips: mixes IPv4 entries \(node-0 \(198.18.0.1\)\) "
        r"and IPv6 entries \(node6-1 \(fd00:198:18::2\)\)",
    ):
        match(["--ips", "node-0,node6-1"], resolve=Late({**V4, **V6}), local=machine())


def test_host_names_this_nodes_ipv6_address():
    node = match(
        ["--ips", "node6-0,node6-1", "--host", "fd00:198:18::1"],
        resolve=Late(V6),
        local=machine(),
    )
    assert node.node_index == 0


def test_node_rank_alone_takes_the_route_towards_another_node_for_its_own_missing_name():
    routes: list[str] = []

    def route(addr: str, port: int) -> str:
        routes.append(addr)
        return "198.18.0.2"

    options = parse_options(["--ips", "node-0,node-1", "--node_rank", "1", "t.py"], {})
    node = match_node_in_list(
        options,
        {},
        None,
        local=machine(("198.18.0.2", "eth0")),
        resolve=Late({"node-0": "198.18.0.1"}),
        wait=fake_wait(),
        route=route,
    )
    assert (node.hosts, node.node_index, node.interface) == (
        ("198.18.0.1", "198.18.0.2"),
        1,
        "eth0",
    )
    assert routes == ["198.18.0.1"]


def test_torchrun_style_waits_for_the_master_name_and_reads_brackets():
    resolve = Late({"meet6": "fd00:198:18::1"}, after=4)
    node = match(
        ["--nnodes", "2", "--node_rank", "0", "--master_addr", "meet6"],
        resolve=resolve,
        local=machine(("fd00:198:18::1", "eth0")),
        wait=fake_wait(),
    )
    assert (node.address, node.interface) == ("fd00:198:18::1", "eth0")
    node = match(
        ["--nnodes", "2", "--node_rank", "1", "--master", "[fd00:198:18::1]:7000"],
        resolve=Late({}),
        local=machine(("fd00:198:18::2", "eth0")),
        env={"POD_IP": "fd00:198:18::2"},
    )
    assert node.address == "fd00:198:18::2"


def test_pod_ip_does_not_claim_a_missing_peer_when_this_nodes_own_name_resolved():
    # this node's name resolves to another of its addresses than POD_IP: the missing
    # entry is a peer, still waited for
    resolve = Late({"node-0": "198.18.0.1"})
    with pytest.raises(NamesUnresolved, match=r"^--ips: 'node-1' still does not resolve"):
        match(
            ["--ips", "node-0,node-1"],
            resolve=resolve,
            local=machine(("198.18.0.1", "eth0"), ("198.18.0.9", "eth1")),
            env={"POD_IP": "198.18.0.9"},
            wait=fake_wait(5),
        )
