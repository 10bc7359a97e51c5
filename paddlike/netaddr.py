"""A host and a port as one text, for IPv4 addresses, IPv6 addresses and names.

One spelling everywhere a host goes with a port (endpoints, --master, the stores, the
collectives, the parameter servers): ``198.18.0.1:6170``, ``node-0:6170`` and, for IPv6,
the address in brackets, ``[fd00::1]:6170`` (RFC 3986's form; the one torch's and etcd's
clients parse). A host alone is never bracketed (MASTER_ADDR, --ips): ``fd00::1``.

Stdlib only: the launcher and the workers both import it.
"""

from __future__ import annotations

import socket


def is_ipv6(host: str) -> bool:
    """`host` (bracketed or not) is an IPv6 address, not a name or an IPv4 address."""
    text = bare(host).split("%", 1)[0]  # a zone (fe80::1%eth0) is not part of the address
    try:
        socket.inet_pton(socket.AF_INET6, text)
    except OSError:
        return False
    return True


def is_ipv4(host: str) -> bool:
    """`host` is a dotted-quad IPv4 address (strict, unlike inet_aton)."""
    try:
        socket.inet_pton(socket.AF_INET, host)
    except OSError:
        return False
    return True


def bare(host: str) -> str:
    """The host without brackets: "[fd00::1]" -> "fd00::1"; anything else as it is."""
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host


def join(host: str, port: int | str) -> str:
    """"host:port", the host bracketed when it is an IPv6 address."""
    host = bare(host)
    return f"[{host}]:{port}" if is_ipv6(host) else f"{host}:{port}"


def split(text: str) -> tuple[str, str]:
    """"host:port" -> (host, port text); the host comes back without brackets, the port
    as "" when there is none. ``[fd00::1]:80``, ``[fd00::1]``, ``h:80``, ``h`` and a bare
    IPv6 address (``fd00::1``: a host, no port) are all read; ValueError for an opening
    bracket never closed or text after the closing one that is not ``:port``."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: '[' without ']'")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected ':port' after ']'")
        return host, rest[1:]
    if text.count(":") > 1:  # an IPv6 address without brackets and so without a port
        return text, ""
    host, sep, port = text.rpartition(":")
    return (host, port) if sep else (text, "")


def family(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 address, AF_INET for anything else (IPv4, or a name whose
    address the caller resolves with this family)."""
    return socket.AF_INET6 if is_ipv6(host) else socket.AF_INET
