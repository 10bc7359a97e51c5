"""Which node am I: matching --ips entries against this machine's addresses.

`LocalAddresses` is given as a fake table (address -> interface) so that each case
states the machine it runs on; names resolve through a fake table too, so no test
asks a DNS server anything. Addresses in 10.x are text only: nothing connects.
"""

from __future__ import annotations

import socket

import pytest

from paddlike.launch.context.node import (
    LocalAddresses,
    match_node,
    match_node_by_rank,
    match_ps_node,
    resolve_ipv4,
)
from paddlike.launch.context.options import UsageError, parse_options

NAMES = {"nodea": "10.0.0.1", "nodeb": "10.0.0.2", "nodec": "10.0.0.3", "alias-a": "10.0.0.1"}


def fake_resolve(name: str) -> str:
    if name in NAMES:
        return NAMES[name]
    try:
        return str(socket.inet_aton(name) and name)
    except OSError:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None


def machine(*addrs: tuple[str, str]) -> LocalAddresses:
    return LocalAddresses(dict([("127.0.0.1", "lo"), *addrs]), bind_probe=False)


NODE_B = machine(("10.0.0.2", "eth0"))


def match(*argv: str, local: LocalAddresses = NODE_B, env: dict | None = None):
    options = parse_options([*argv, "t.py"], env or {})
    return match_node(options, env or {}, local=local, resolve=fake_resolve)


def test_default_is_one_node_on_loopback():
    node = match_node(parse_options(["t.py"], {}), {})
    assert (node.hosts, node.node_index, node.interface) == (("127.0.0.1",), 0, "lo")
    # the banner's words: nothing was matched against an --ips nobody gave (issue 32)
    assert node.reason == "one node (no --ips given)"
    given = match_node(parse_options(["--ips", "127.0.0.1", "t.py"], {}), {})
    assert given.reason == "matched --ips entry 0 (127.0.0.1), an address of this node"


def test_hostnames_resolve_and_the_local_one_is_this_node():
    node = match("--ips", "nodea,nodeb,nodec")
    assert node.hosts == ("10.0.0.1", "10.0.0.2", "10.0.0.3")
    assert node.node_index == 1
    assert node.address == "10.0.0.2"
    assert node.interface == "eth0"
    assert "entry 1 (nodeb)" in node.reason


def test_interface_is_reported_for_the_matched_address():
    node = match("--ips", "10.0.0.1,10.0.0.2", local=machine(("10.0.0.1", "ib0")))
    assert (node.node_index, node.interface) == (0, "ib0")


def test_no_local_entry_lists_the_local_addresses_seen():
    with pytest.raises(UsageError) as err:
        match("--ips", "nodea,nodec")
    text = str(err.value)
    assert text.startswith("--ips: no entry of 'nodea,nodec' is an address of this node")
    assert "10.0.0.2 (eth0)" in text and "127.0.0.1 (lo)" in text


def test_two_local_entries_are_an_error():
    both = machine(("10.0.0.1", "eth0"), ("10.0.0.2", "eth1"))
    with pytest.raises(UsageError, match=r"^--ips: 'nodea' \(10.0.0.1\) and 'nodeb' \(10.0.0.2\)"):
        match("--ips", "nodea,nodeb", local=both)


def test_node_rank_chooses_among_several_local_entries():
    both = machine(("10.0.0.1", "eth0"), ("10.0.0.2", "eth1"))
    assert match("--ips", "nodea,nodeb", "--node_rank", "1", local=both).node_index == 1


def test_a_repeated_entry_is_an_error():
    with pytest.raises(UsageError, match=r"^--ips: entry 'nodeb' appears twice"):
        match("--ips", "nodeb,nodea,nodeb")


def test_two_names_for_one_address_are_an_error():
    with pytest.raises(UsageError, match=r"^--ips: 'nodea' and 'alias-a' are the same node"):
        match("--ips", "nodea,alias-a,nodeb")


def test_a_name_that_does_not_resolve_is_an_error():
    with pytest.raises(UsageError, match=r"^--ips: 'nodez' does not resolve"):
        match("--ips", "nodea,nodez")


def test_node_rank_that_contradicts_the_local_address():
    with pytest.raises(UsageError, match=r"^--node_rank: 0 names 'nodea' \(10.0.0.1\), which is"):
        match("--ips", "nodea,nodeb", "--node_rank", "0")


def test_nnodes_without_ips_needs_the_node_rank_and_the_master_address():
    with pytest.raises(UsageError, match=r"^--node_rank: needed with --nnodes 2 when --ips is"):
        match("--nnodes", "2")
    with pytest.raises(UsageError, match=r"^--master_addr: needed with --nnodes 2 when --ips is"):
        match("--nnodes", "2", "--node_rank", "1")


def by_rank(*argv: str, local: LocalAddresses = NODE_B, env: dict | None = None):
    """torchrun style; the route to the master leaves from 10.0.0.2 (no socket is opened)."""
    options = parse_options([*argv, "t.py"], env or {})
    return match_node_by_rank(
        options, env or {}, local=local, resolve=fake_resolve, route=lambda a, p: "10.0.0.2"
    )


@pytest.mark.parametrize(
    ("argv", "local", "env", "address", "why"),
    [
        (("--node_rank", "1"), NODE_B, {}, "10.0.0.2", "reaches --master_addr nodea from"),
        (("--node_rank", "0"), machine(("10.0.0.1", "eth1")), {}, "10.0.0.1", "--master_addr"),
        (("--node_rank", "1", "--host", "10.0.0.3"), NODE_B, {}, "10.0.0.3", "--host"),
        (("--node_rank", "1"), NODE_B, {"POD_IP": "10.0.0.3"}, "10.0.0.3", "POD_IP"),
    ],
)
def test_torchrun_style_nodes_know_their_rank_and_own_address_only(argv, local, env, address, why):
    node = by_rank("--nnodes", "3", "--master_addr", "nodea", *argv, local=local, env=env)
    rank = int(argv[1])
    assert node.discovered
    assert node.node_index == rank
    assert node.hosts == tuple(address if i == rank else "" for i in range(3))
    assert why in node.reason


def test_torchrun_style_node_rank_0_must_be_the_master_address():
    with pytest.raises(
        UsageError, match=r"^--node_rank: 0 hosts the launchers' store at --master_addr nodea "
    ):
        by_rank("--nnodes", "2", "--node_rank", "0", "--master_addr", "nodea")
    with pytest.raises(UsageError, match=r"^--host: '10.0.0.2' \(10.0.0.2\) is not --master_addr"):
        by_rank(
            "--nnodes",
            "2",
            "--node_rank",
            "0",
            "--master_addr",
            "nodea",
            "--host",
            "10.0.0.2",
            local=machine(("10.0.0.1", "eth1"), ("10.0.0.2", "eth0")),
        )


def test_host_overrides_matching():
    node = match("--ips", "nodea,nodec", "--host", "nodec")
    assert node.node_index == 1
    assert "named by --host" in node.reason


def test_pod_ip_overrides_matching():
    node = match("--ips", "nodea,nodec", env={"POD_IP": "10.0.0.1"})
    assert node.node_index == 0
    assert "named by POD_IP" in node.reason


def test_host_not_in_ips_is_an_error():
    with pytest.raises(UsageError, match=r"^--host: 'nodeb' is not one of --ips 'nodea,nodec'"):
        match("--ips", "nodea,nodec", "--host", "nodeb")


def test_host_and_node_rank_must_agree():
    with pytest.raises(UsageError, match=r"^--node_rank: 0 contradicts --host 'nodec'"):
        match("--ips", "nodea,nodec", "--host", "nodec", "--node_rank", "0")


def test_slurm_supplies_the_node_list_and_index():
    env = {"SLURM_JOB_NODELIST": "nodea,nodeb", "SLURM_NODEID": "1", "SLURM_NNODES": "2"}
    node = match(env=env)
    assert (node.hosts, node.node_index, node.scheduler) == (("10.0.0.1", "10.0.0.2"), 1, "slurm")


def test_explicit_ips_that_contradict_the_scheduler_are_an_error():
    env = {"SLURM_JOB_NODELIST": "nodea,nodeb", "SLURM_NODEID": "1"}
    with pytest.raises(UsageError, match=r"^--ips: 'nodeb,nodea' contradicts SLURM_JOB_NODELIST"):
        match("--ips", "nodeb,nodea", env=env)


def test_node_rank_that_contradicts_the_scheduler_is_an_error():
    env = {"PADDLE_TRAINERS": "nodea,nodeb", "PADDLE_TRAINER_ID": "1"}
    with pytest.raises(UsageError, match=r"^--node_rank: 0 contradicts PADDLE_TRAINER_ID=1"):
        match("--node_rank", "0", env=env)


def test_paddlecloud_pod_ip_names_this_node():
    env = {"PADDLE_TRAINERS": "10.0.0.1,10.0.0.3", "POD_IP": "10.0.0.3", "PADDLE_TRAINER_ID": "1"}
    node = match(env=env)
    assert (node.node_index, node.scheduler) == (1, "paddlecloud")


def test_resolve_ipv4_returns_ips_unchanged_and_resolves_localhost():
    assert resolve_ipv4("10.1.2.3") == "10.1.2.3"
    assert resolve_ipv4("localhost") == "127.0.0.1"


def test_real_scan_finds_loopback():
    assert LocalAddresses.scan().interface_of("127.0.0.1") == "lo"


def test_ps_lists_find_this_nodes_roles():
    options = parse_options(["--servers", "nodea:7000,nodeb:7000", "--workers", "nodea,nodeb,nodeb",
                             "t.py"], {})  # fmt: skip
    node = match_ps_node(options, {}, local=NODE_B, resolve=fake_resolve)
    assert node.host == "10.0.0.2" and node.interface == "eth0"
    assert node.servers == (("10.0.0.1", 7000), ("10.0.0.2", 7000))
    assert node.trainers == (("10.0.0.1", None), ("10.0.0.2", None), ("10.0.0.2", None))


def test_a_node_with_no_ps_role_is_an_error():
    options = parse_options(["--servers", "nodea:7000", "--workers", "nodea", "t.py"], {})
    with pytest.raises(UsageError, match=r"^--servers/--workers: this node has no role"):
        match_ps_node(options, {}, local=NODE_B, resolve=fake_resolve)


def test_pod_ip_outside_the_node_list_is_ignored_without_a_scheduler():
    node = match("--ips", "nodea,nodeb", env={"POD_IP": "10.9.9.9"})
    assert node.node_index == 1  # matched by local address instead


def test_host_outside_the_node_list_is_still_an_error_with_pod_ip_set():
    with pytest.raises(UsageError, match=r"^--host: 'nodec' is not one of"):
        match("--ips", "nodea,nodeb", "--host", "nodec", env={"POD_IP": "10.0.0.2"})
