"""A round's world as the rendezvous agreed it: every node's entry, in node order.

Data only; the launchers' protocol (`peers.protocol`) encodes it, the rendezvous
(`peers.rendezvous`) produces it, and the node job (`plan.nodejob`) plans from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paddlike.launch import NamedTuple


class NodeEntry(NamedTuple):
    """What one node publishes at the rendezvous."""

    index: int
    host: str  # the node's matched address; its endpoints use it
    hostname: str
    pid: int
    ports: tuple[int, ...]
    fingerprint: Mapping[str, str]
    job_id: str = ""
    # collective on GPUs: this node's workers' devices as PADDLE_WORLD_DEVICE_IDS spells
    # them ("0,1"; "0:1,2:3" with two GPUs a worker), "" on CPUs. Nodes may differ in their
    # worker counts and devices, so every node learns each node's from its entry.
    devices: str = ""

    @property
    def label(self) -> str:
        if self.hostname and self.hostname != self.host:
            return f"node {self.index} ({self.hostname}, {self.host})"
        return f"node {self.index} ({self.host})"


class RendezvousResult(NamedTuple):
    """All nodes' entries, in node order; identical on every node."""

    round: int
    nodes: tuple[NodeEntry, ...]
    job_id: str  # the job id in force: the common one, or node 0's generated one
    elapsed: float
    index: int = -1  # this node's place in `nodes` (-1: its entry's own index)

    def own_index(self, default: int) -> int:
        """This node's index: assigned at the rendezvous, else `default` (its own)."""
        return self.index if self.index >= 0 else default

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(n.host for n in self.nodes)

    @property
    def ports(self) -> tuple[tuple[int, ...], ...]:
        return tuple(n.ports for n in self.nodes)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(n.devices for n in self.nodes)


def node_label(index: int, hosts: Sequence[str]) -> str:
    """Like "node 1 (10.0.0.2)"; "node 1" while its address is unknown (torchrun style)."""
    if index < len(hosts) and hosts[index]:
        return f"node {index} ({hosts[index]})"
    return f"node {index}"


def store_node(
    node_index: int, hosts: Sequence[str], store_host: str, hosts_store: bool
) -> int | None:
    """Which node of the job hosts the launchers' TCP store at `store_host`, as node
    `node_index` can tell. Several launchers may share one address (``--master [::1]:6391
    --nnodes 2`` on one machine), so the address alone is not enough: this node when it
    hosts the store, else another node at that address (node 0 first: it hosts the store
    of a fixed job); None when no node of the job is there (etcd, an outside store).

    | node_index | hosts          | store_host | hosts_store | -> |
    | ---------- | -------------- | ---------- | ----------- | -- |
    | 1          | (a, b)         | a          | False       | 0  |
    | 0          | (::1, ::1)     | ::1        | True        | 0  |
    | 0          | (::1, ::1)     | ::1        | False       | 1  |
    | 1          | (::1, ::1)     | ::1        | False       | 0  |
    | 0          | (a, b)         | c          | False       | None |
    """
    if hosts_store:
        return node_index
    others = [i for i, h in enumerate(hosts) if h == store_host and i != node_index]
    return others[0] if others else None


def store_host_label(
    node_index: int, hosts: Sequence[str], store_host: str, hosts_store: bool
) -> str | None:
    """Who hosts the store, for "lost contact with ...": "its own store (this launcher)"
    when this node hosts it (never "node 0 (::1) lost contact with node 0 (::1)"), else
    `node_label` of the node there, told apart from this one when both share an address
    ("node 1 (::1, another launcher on this host)"); None when no node is there."""
    index = store_node(node_index, hosts, store_host, hosts_store)
    if index is None:
        return None
    if index == node_index:
        return "its own store (this launcher)"
    label = node_label(index, hosts)
    if index < len(hosts) and node_index < len(hosts) and hosts[index] == hosts[node_index]:
        return f"{label[:-1]}, another launcher on this host)"
    return label


def describe_missing(missing: Sequence[int], hosts: Sequence[str]) -> str:
    return ", ".join(node_label(i, hosts) for i in missing)


def address_key(host: str) -> tuple[int, ...]:
    """IPv4 addresses in numeric order (10.0.0.9 before 10.0.0.10); others after them."""
    parts = host.split(".")
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        return (0, *map(int, parts))
    return (1, *map(ord, host))
