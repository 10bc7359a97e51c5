"""This machine's addresses, IPv4 and IPv6: loopback, spelling, the bind probe, routes.

The probes here touch loopback only (binding ::1 or 127.0.0.1; a route's source is the
kernel's answer to a UDP connect(), which sends nothing)."""

from __future__ import annotations

import socket

import pytest

from paddlike.launch.context.addresses import LocalAddresses, resolve_host, route_source


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback (::1) here")


@pytest.mark.parametrize(
    ("given", "address"),
    [
        ("198.18.0.1", "198.18.0.1"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("FD00:198:18:0::1", "fd00:198:18::1"),
        ("[fd00:198:18::0:1]", "fd00:198:18::1"),
    ],
)
def test_an_address_is_its_own_answer_in_one_spelling(given, address):
    assert resolve_host(given) == address


def test_a_name_takes_its_ipv4_address_first(monkeypatch):
    both = [
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00:198:18::5", 0, 0, 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("198.18.0.5", 0)),
    ]
    only6 = both[:1]
    answers = {"both": both, "only6": only6}
    monkeypatch.setattr(socket, "getaddrinfo", lambda name, *a, **k: answers[name])
    assert resolve_host("both") == "198.18.0.5"
    assert resolve_host("only6") == "fd00:198:18::5"


def test_loopback_of_both_families_is_local_on_lo():
    local = LocalAddresses({}, bind_probe=False)
    for addr in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "0:0::1"):
        assert local.is_local(addr), addr
        assert local.interface_of(addr) == "lo", addr
    assert not local.is_local("fd00:198:18::1")


def test_an_ipv6_address_of_an_interface_matches_in_any_spelling():
    local = LocalAddresses({"fd00:198:18::2": "eth0"}, bind_probe=False)
    assert local.is_local("FD00:198:18:0:0::2")
    assert local.interface_of("fd00:198:18::2") == "eth0"


@needs_ipv6
def test_the_scan_lists_ipv6_addresses_and_the_route_to_ipv6_loopback():
    local = LocalAddresses.scan()
    assert local.by_addr.get("::1") == "lo"
    assert route_source("::1", 80) == "::1"
    assert LocalAddresses({}, bind_probe=True).is_local("::1")
