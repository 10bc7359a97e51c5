"""This machine's addresses (IPv4 and IPv6) and names resolved: the facts every node rule
reads.

Apart from the rules (`node_by_list`, `node_by_rank`, `node_by_roles`) so that those stay
decisions over injected facts: tests give a `LocalAddresses` table and a `resolve`
function, and no rule scans interfaces, binds or resolves by itself. Reading the
interfaces (psutil) and the bind test happen here only, and only when first needed.

A name with both kinds of address takes its IPv4 one (`resolve_host`): the choice must
not depend on the node that makes it, since every node derives the same endpoint list.
An IPv6 job gives IPv6 addresses, or names with AAAA records only.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping

from paddlike import netaddr
from paddlike.launch.context.options.record import UsageError

_LOOPBACK6 = bytes(15) + b"\x01"
_MAPPED4 = bytes(10) + b"\xff\xff"  # ::ffff:a.b.c.d, an IPv4 address seen through IPv6


def _is_loopback(addr: str) -> bool:
    """127.0.0.0/8 and ::1 (and ::ffff:127.x.y.z)."""
    addr = netaddr.bare(addr)
    if addr.startswith("127."):
        return True
    try:
        packed = socket.inet_pton(socket.AF_INET6, addr.split("%", 1)[0])
    except OSError:
        return False
    return packed == _LOOPBACK6 or (packed[:12] == _MAPPED4 and packed[12] == 127)


def _canonical(addr: str) -> str:
    """One spelling per IPv6 address ("FD00:0::1" -> "fd00::1"), so that equal addresses
    compare equal whichever way the user or the resolver wrote them. (Not `ipaddress`:
    the launcher's start-up time is a feature.)"""
    text = netaddr.bare(addr)
    if not netaddr.is_ipv6(text):
        return text
    plain, pct, zone = text.partition("%")
    packed = socket.inet_pton(socket.AF_INET6, plain)
    return socket.inet_ntop(socket.AF_INET6, packed) + pct + zone


def resolve_host(name: str) -> str:
    """The address of `name`: its first IPv4 address, else its first IPv6 one (an IP,
    bracketed or not, comes back as it is, IPv6 in its canonical spelling); OSError if
    it has none.

    The first address, not any: every node must derive the same endpoint list.
    """
    name = netaddr.bare(name)
    if netaddr.is_ipv4(name) or netaddr.is_ipv6(name):
        return _canonical(name)
    infos = socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    for want in (socket.AF_INET, socket.AF_INET6):
        for family, _, _, _, sockaddr in infos:
            if family == want:
                return _canonical(str(sockaddr[0]))
    raise OSError(f"no IPv4 or IPv6 address for {name!r}")


# The name this function had while the launcher knew IPv4 only; callers outside `context`
# (run.job, peers.startfail) still use it.
resolve_ipv4 = resolve_host


class LocalAddresses:
    """This machine's IPv4 and IPv6 addresses and the interface holding each.

    Scanned (psutil) on first need only: loopback-only jobs never pay for it.
    """

    def __init__(self, by_addr: Mapping[str, str] | None = None, *, bind_probe: bool = True):
        self._by_addr = (
            {_canonical(a): i for a, i in by_addr.items()} if by_addr is not None else None
        )
        self.bind_probe = bind_probe  # also count addresses that can be bound (tests: off)

    @classmethod
    def scan(cls) -> LocalAddresses:
        return cls()

    @property
    def by_addr(self) -> Mapping[str, str]:
        """address -> interface name (IPv6 link-local addresses keep their "%zone")."""
        if self._by_addr is None:
            import psutil

            found: dict[str, str] = {}
            for ifname, addrs in psutil.net_if_addrs().items():
                for a in addrs:
                    if a.family in (socket.AF_INET, socket.AF_INET6):
                        found.setdefault(_canonical(a.address), ifname)
            self._by_addr = found
        return self._by_addr

    def interface_of(self, addr: str) -> str:
        """The interface holding `addr`; "lo" for all of 127.0.0.0/8 and ::1 (Linux); ""
        if unknown."""
        if _is_loopback(addr):
            return "lo"
        return self.by_addr.get(_canonical(addr), "")

    def is_local(self, addr: str) -> bool:
        """Assigned here, or bindable here (e.g. a floating address not listed per interface)."""
        addr = _canonical(addr)
        if _is_loopback(addr) or addr in self.by_addr:
            return True
        if not self.bind_probe:
            return False
        with socket.socket(netaddr.family(addr), socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, 0))
            except OSError:
                return False
        return True

    def listing(self) -> str:
        return ", ".join(f"{a} ({i})" for a, i in sorted(self.by_addr.items())) or "none"


def route_source(addr: str, port: int) -> str:
    """The local address this machine would send from to reach `addr` (the kernel's route
    choice), in `addr`'s family. A UDP socket's connect() only picks the route: no packet
    is sent."""
    addr = netaddr.bare(addr)
    with socket.socket(netaddr.family(addr), socket.SOCK_DGRAM) as s:
        s.connect((addr, port or 9))
        return _canonical(str(s.getsockname()[0]))


def resolve_or_none(name: str, resolve: Callable[[str], str]) -> str | None:
    """`resolve(name)`, or None: for an address that is only a hint (POD_IP)."""
    try:
        return resolve(name)
    except (OSError, UnicodeError):
        return None


def resolve_for(option: str, name: str, resolve: Callable[[str], str]) -> str:
    """`resolve(name)`, or the UsageError naming the option the name came from."""
    try:
        return resolve(name)
    except (OSError, UnicodeError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise UsageError(f"{option}: {name!r} does not resolve ({why})", option) from None
