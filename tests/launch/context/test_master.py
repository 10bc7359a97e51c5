"""Where the launchers meet, for IPv6 hosts: brackets in, a bare host out."""

from __future__ import annotations

import pytest

from paddlike.launch.context.master import launchers_master, master_address, ps_master_port
from paddlike.launch.context.options import UsageError, parse_options


def test_master_in_brackets_gives_the_bare_ipv6_host():
    assert master_address("[fd00:198:18::1]:7000", None, None, ["x"]) == ("fd00:198:18::1", 7000)


def test_master_addr_bare_or_bracketed():
    assert master_address(None, "fd00::1", 7000, ["x"]) == ("fd00::1", 7000)
    assert master_address(None, "[fd00::1]", 7000, ["x"]) == ("fd00::1", 7000)


def test_paddlecloud_master_in_brackets():
    options = parse_options(["--ips", "fd00::1,fd00::2", "t.py"], {})
    assert launchers_master(options, ["fd00::1", "fd00::2"], "[fd00::1]:7100") == ("fd00::1", 7100)
    with pytest.raises(UsageError, match=r"^PADDLE_MASTER: expected ip:port"):
        launchers_master(options, ["fd00::1"], "fd00::1")


def test_ps_master_port_moves_past_an_ipv6_servers_port():
    taken = ["[fd00::1]:6170", "[fd00::2]:6170"]
    assert ps_master_port(("fd00::1", 6170), 6170, taken) == 6171


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--master", "fd00::1:6170", r"expected \[ipv6\]:port"),
        ("--master", "[fd00::1", r"an IPv6 address in brackets"),
        ("--ips", "[node-a],b", r"expected an IPv6 address inside \[ \]"),
    ],
)
def test_ipv6_spellings_that_cannot_be_read_name_the_form(flag, value, message):
    with pytest.raises(UsageError, match=message):
        parse_options([flag, value, "t.py"], {})


def test_etcd_with_an_ipv6_endpoint_is_accepted():
    options = parse_options(["--master", "etcd://[fd00::1]:2379", "--nnodes", "2", "t.py"], {})
    assert options.master == "etcd://[fd00::1]:2379"
