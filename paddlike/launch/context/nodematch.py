"""What the node rules find: which node this is, as the plan reads it.

A module of its own so that every rule (`node_by_list`, `node_by_rank`, `node_by_roles`)
returns the same records without importing another rule, and the plan imports the
records (for its types) without the rules.
"""

from __future__ import annotations

from paddlike.launch import NamedTuple


class NodeMatch(NamedTuple):
    """The job's nodes and which one is this: the input of the plan."""

    entries: tuple[str, ...]  # the node list as given (hostnames or IPs)
    hosts: tuple[str, ...]  # their IPv4 addresses, same order
    node_index: int
    interface: str  # interface holding hosts[node_index]; "" if unknown
    reason: str  # how the match was made, for the start banner
    scheduler: str | None = None  # "slurm" | "paddlecloud" when it supplied the list
    scheduler_master: str | None = None  # PADDLE_MASTER from PaddleCloud
    # torchrun style (--nnodes N --node_rank R --master_addr A, no --ips): only this node's
    # address is known here (the others are ""); every launcher publishes its own at the
    # rendezvous, which then gives the node list
    discovered: bool = False
    # no --node_rank: the rendezvous assigns it (`node_index` is 0 until then, a placeholder)
    rank_known: bool = True
    # ... and this node is not at --master's address: that address is node 0's (it hosts the
    # launchers' store), so --dry_run shows this node as another one; "" otherwise
    node0_host: str = ""

    @property
    def address(self) -> str:
        return self.hosts[self.node_index]

    @property
    def nnodes(self) -> int:
        return len(self.hosts)


class PsNode(NamedTuple):
    """This node in parameter-server mode: the role lists (resolved) and our address.

    `servers` / `trainers` are None in counts mode (--server_num/--worker_num), where
    every role runs on this node.
    """

    host: str
    interface: str
    reason: str
    servers: tuple[tuple[str, int], ...] | None = None
    trainers: tuple[tuple[str, int | None], ...] | None = None
    heter_stages: tuple[tuple[tuple[str, int], ...], ...] = ()  # ps-heter: --heter_workers
