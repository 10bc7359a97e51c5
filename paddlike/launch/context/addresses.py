"""This machine's IPv4 addresses and names resolved: the facts every node rule reads.

Apart from the rules (`node_by_list`, `node_by_rank`, `node_by_roles`) so that those stay
decisions over injected facts: tests give a `LocalAddresses` table and a `resolve`
function, and no rule scans interfaces, binds or resolves by itself. Reading the
interfaces (psutil) and the bind test happen here only, and only when first needed.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping

from paddlike.launch.context.options.record import UsageError


def _is_ipv4(text: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET, text)  # strict dotted quad, unlike inet_aton
    except OSError:
        return False
    return True


def _is_loopback(addr: str) -> bool:
    return addr.startswith("127.")


def resolve_ipv4(name: str) -> str:
    """The first IPv4 address of `name` (an IP is returned as is); OSError if none.

    The first address, not any: every node must derive the same endpoint list.
    """
    if _is_ipv4(name):
        return name
    infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"no IPv4 address for {name!r}")
    return str(infos[0][4][0])


class LocalAddresses:
    """This machine's IPv4 addresses and the interface holding each.

    Scanned (psutil) on first need only: loopback-only jobs never pay for it.
    """

    def __init__(self, by_addr: Mapping[str, str] | None = None, *, bind_probe: bool = True):
        self._by_addr = dict(by_addr) if by_addr is not None else None
        self.bind_probe = bind_probe  # also count addresses that can be bound (tests: off)

    @classmethod
    def scan(cls) -> LocalAddresses:
        return cls()

    @property
    def by_addr(self) -> Mapping[str, str]:
        """address -> interface name."""
        if self._by_addr is None:
            import psutil

            found: dict[str, str] = {}
            for ifname, addrs in psutil.net_if_addrs().items():
                for a in addrs:
                    if a.family == socket.AF_INET:
                        found.setdefault(a.address, ifname)
            self._by_addr = found
        return self._by_addr

    def interface_of(self, addr: str) -> str:
        """The interface holding `addr`; "lo" for all of 127.0.0.0/8 (Linux); "" if unknown."""
        if _is_loopback(addr):
            return "lo"
        return self.by_addr.get(addr, "")

    def is_local(self, addr: str) -> bool:
        """Assigned here, or bindable here (e.g. a floating address not listed per interface)."""
        if _is_loopback(addr) or addr in self.by_addr:
            return True
        if not self.bind_probe:
            return False
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, 0))
            except OSError:
                return False
        return True

    def listing(self) -> str:
        return ", ".join(f"{a} ({i})" for a, i in sorted(self.by_addr.items())) or "none"


def route_source(addr: str, port: int) -> str:
    """The local address this machine would send from to reach `addr` (the kernel's route
    choice). A UDP socket's connect() only picks the route: no packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((addr, port or 9))
        return str(s.getsockname()[0])


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
