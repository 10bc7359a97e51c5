"""Many "nodes" on one machine: Linux network namespaces on a private bridge.

Each node is a namespace with one veth into a bridge, an address in 198.18.0.0/24
(the range set aside for network tests) and hostnames from /etc/netns/NAME/hosts,
which `ip netns exec` mounts over /etc/hosts. Nothing here routes to the outside:
the bridge has no address in the root namespace and no uplink.

With `ipv6=True` each node also gets a ULA IPv6 address, fd00:198:18::<host>/64 (added
``nodad``: usable at once, without duplicate address detection's wait), and the hosts
files name it ``<hostname>-v6`` (a name with an AAAA record only). Each cluster has its
own bridge, so these addresses never meet another cluster's either.

`Cluster.write_hosts` rewrites the nodes' hosts files while they run: a file that
`ip netns exec` bind-mounted over /etc/hosts is rewritten in place (same inode), so the
running processes' next lookup reads the new text (glibc reopens /etc/hosts per lookup).

Names carry a per-cluster tag so that parallel tests (pytest-xdist) never share a
namespace, bridge or hosts file. `netns_cluster` removes everything it made,
including the processes still running inside, when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SUBNET = "198.18.0"
SUBNET6 = "fd00:198:18:"  # + ":<host>": a unique local (ULA) /64, never routed anywhere


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def netns_unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"plk-probe-{os.getpid()}-{secrets.token_hex(2)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


_REASON: list[str | None] = []


def _reason() -> str | None:
    if not _REASON:
        _REASON.append(netns_unavailable_reason())
    return _REASON[0]


requires_netns = pytest.mark.netns


def skip_without_netns() -> None:
    """Call at the start of a test (or fixture) that needs namespaces."""
    reason = _reason()
    if reason:
        pytest.skip(reason)


@dataclass
class Node:
    """One namespace: a host of the test cluster."""

    netns: str
    addr: str
    hostname: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    addr6: str | None = None  # with ipv6=True: fd00:198:18::<host>

    @property
    def hostname6(self) -> str:
        """The name that resolves to `addr6` only (AAAA only)."""
        return f"{self.hostname}-v6"

    @property
    def hosts_path(self) -> Path:
        """This node's hosts file, which `ip netns exec` mounts over /etc/hosts."""
        return Path("/etc/netns") / self.netns / "hosts"

    def argv(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen[bytes]:
        """Start `argv` inside this node; the cluster kills it at the end if still alive."""
        proc = subprocess.Popen(self.argv(argv), **kwargs)
        self.procs.append(proc)
        return proc

    def run(
        self, argv: Sequence[str], timeout: float = 60, **kwargs
    ) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv), timeout=timeout, **kwargs)


@dataclass
class Cluster:
    tag: str
    bridge: str
    nodes: list[Node]

    def hosts_file(self) -> str:
        """Every node's name, and its -v6 name where it has an IPv6 address."""
        lines = [f"{n.addr} {n.hostname}\n" for n in self.nodes]
        lines += [f"{n.addr6} {n.hostname6}\n" for n in self.nodes if n.addr6]
        return "".join(lines)

    def all_names(self) -> str:
        """The hosts files' text: localhost, and every node's names."""
        v6 = "::1 ip6-localhost\n" if any(n.addr6 for n in self.nodes) else ""
        return LOCALHOST + v6 + self.hosts_file()

    def write_hosts(self, text: str | None = None) -> None:
        """Write every node's hosts file (default: `all_names()`), in place:
        the same inode, which a running `ip netns exec` has mounted, so that processes
        already running see the new names."""
        text = text if text is not None else self.all_names()
        for node in self.nodes:
            node.hosts_path.parent.mkdir(parents=True, exist_ok=True)
            with open(node.hosts_path, "r+" if node.hosts_path.exists() else "w") as f:
                f.write(text)
                f.truncate()


LOCALHOST = "127.0.0.1 localhost\n"


def _kill_namespace_processes(netns: str) -> None:
    pids = _ip("netns", "pids", netns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


@contextlib.contextmanager
def netns_cluster(
    n: int,
    hostnames: Sequence[str] | None = None,
    first_host: int = 1,
    *,
    ipv6: bool = False,
    hosts: str | None = None,
) -> Iterator[Cluster]:
    """Make `n` nodes at 198.18.0.<first_host..>, named `hostnames` (default node0..);
    `ipv6`: each also at fd00:198:18::<first_host..>, named <hostname>-v6. `hosts`: the
    hosts files' first text instead of every node's names (a test that adds names later
    writes them with `Cluster.write_hosts`)."""
    skip_without_netns()
    tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
    names = list(hostnames) if hostnames else [f"node{i}" for i in range(n)]
    bridge = f"plkbr{tag}"[:15]
    cluster = Cluster(tag=tag, bridge=bridge, nodes=[])
    made_ns: list[str] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "up")
        for i in range(n):
            netns = f"plk{tag}n{i}"
            addr = f"{SUBNET}.{first_host + i}"
            node = Node(netns=netns, addr=addr, hostname=names[i])
            if ipv6:
                node.addr6 = f"{SUBNET6}:{first_host + i:x}"
            _ip("netns", "add", netns)
            made_ns.append(netns)
            host_end, ns_end = f"plk{tag}h{i}"[:15], f"plk{tag}c{i}"[:15]
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", host_end, "master", bridge)
            _ip("link", "set", host_end, "up")
            _ip("link", "set", ns_end, "netns", netns)
            _ip("-n", netns, "link", "set", "lo", "up")
            _ip("-n", netns, "link", "set", ns_end, "name", "eth0")
            _ip("-n", netns, "addr", "add", f"{addr}/24", "dev", "eth0")
            if node.addr6:
                _ip("-n", netns, "-6", "addr", "add", f"{node.addr6}/64", "dev", "eth0", "nodad")
            _ip("-n", netns, "link", "set", "eth0", "up")
            cluster.nodes.append(node)
        cluster.write_hosts(hosts if hosts is not None else cluster.all_names())
        yield cluster
    finally:
        for node in cluster.nodes:
            for proc in node.procs:
                if proc.poll() is None:
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
        for netns in made_ns:
            _kill_namespace_processes(netns)
            _ip("netns", "del", netns, check=False)
            shutil.rmtree(Path("/etc/netns") / netns, ignore_errors=True)
        _ip("link", "del", bridge, check=False)
