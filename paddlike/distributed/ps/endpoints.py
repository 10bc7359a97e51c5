"""The parameter servers' and heter trainers' endpoints as text and as ZeroMQ addresses.

Endpoints come from the launcher as ``host:port``, an IPv6 host in brackets
(``[fd00::1]:6170``, see paddlike.netaddr). ZeroMQ wants ``tcp://IP:port`` to bind, the
same bracketed form for IPv6, and a socket that allows IPv6 (`zmq.IPV6`, off by default:
without it a v6 address fails with "Invalid argument"). Stdlib only, so the role parsers
stay free of zmq.
"""

from __future__ import annotations

import socket

from paddlike import netaddr

__all__ = ["host", "is_ipv6_address", "port", "same", "tcp_address", "well_formed"]


def well_formed(endpoint: str) -> bool:
    """A host and a numeric port: ``h:80``, ``1.2.3.4:80``, ``[fd00::1]:80``; not a bare
    IPv6 address (``fd00::1:80`` is ambiguous: the port must follow brackets)."""
    try:
        h, p = netaddr.split(endpoint)
    except ValueError:
        return False
    return bool(h) and p.isdigit()


def host(endpoint: str) -> str:
    """The host of ``host:port``, without brackets."""
    return netaddr.split(endpoint)[0]


def port(endpoint: str) -> str:
    """The port of ``host:port`` as text ("" when there is none)."""
    return netaddr.split(endpoint)[1]


def same(a: str, b: str) -> bool:
    """Two endpoints name the same address and port (``[::1]:80`` and ``[0::1]:80`` do)."""
    try:
        (ha, pa), (hb, pb) = netaddr.split(a), netaddr.split(b)
    except ValueError:
        return a == b
    return pa == pb and _canonical(ha) == _canonical(hb)


def _canonical(h: str) -> str:
    if netaddr.is_ipv6(h):
        return socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, h))
    return h


def tcp_address(endpoint: str) -> str:
    """``tcp://IP:port`` (``tcp://[IP]:port`` for IPv6) with the host resolved now; a name
    with addresses of both families gives its IPv4 one (servers and clients resolve alike,
    so they meet). OSError when it does not resolve. Binding the resolved address (not a
    wildcard) keeps a server on the interface its endpoint names."""
    h, p = netaddr.split(endpoint)
    infos = socket.getaddrinfo(h, int(p), type=socket.SOCK_STREAM)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # stable: resolver order kept
    return f"tcp://{netaddr.join(str(infos[0][4][0]), p)}"


def is_ipv6_address(address: str) -> bool:
    """A ``tcp://`` address from `tcp_address` is IPv6: its socket needs zmq.IPV6 set."""
    return address.startswith("tcp://[")
