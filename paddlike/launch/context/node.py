"""Which node this launcher is: which rule finds it, and every name of that answer.

Three rules, one module each, over the facts of `addresses` (this machine's
interfaces, the bind test, names resolved):

- `node_by_list`: this node's entry in --ips or a scheduler's list (--host/POD_IP,
  --node_rank, the local addresses);
- `node_by_rank`: torchrun / OneFlow style, --nnodes N --node_rank R --master_addr A
  and no list, or the identical command on every node (ranks from the rendezvous);
- `node_by_roles`: parameter-server role lists (--servers, --workers, --heter_workers).

The interface holding the matched address is reported too (`nodematch`): workers get
it as GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME (a wrong NCCL interface is the most
reported multi-node hang), and the start banner says what was matched and why.

Callers import everything from here (`match_node`, `NodeMatch`, `LocalAddresses`, ...);
the rules are apart so that each reads whole on one screen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from paddlike.launch.context.addresses import LocalAddresses, resolve_ipv4, route_source
from paddlike.launch.context.names import NameWait
from paddlike.launch.context.node_by_list import match_node_in_list
from paddlike.launch.context.node_by_rank import match_node_by_rank
from paddlike.launch.context.node_by_roles import match_local_entries, match_role_lists
from paddlike.launch.context.nodematch import NodeMatch, PsNode
from paddlike.launch.context.options.record import LaunchOptions, UsageError
from paddlike.launch.context.schedulers import detect_scheduler

__all__ = [
    "LocalAddresses",
    "NodeMatch",
    "PsNode",
    "match_local_entries",
    "match_node",
    "match_node_by_rank",
    "match_ps_node",
    "resolve_ipv4",
    "route_source",
]


def match_node(
    options: LaunchOptions,
    environ: Mapping[str, str],
    *,
    local: LocalAddresses | None = None,
    resolve: Callable[[str], str] = resolve_ipv4,
    wait: NameWait | None = None,
) -> NodeMatch:
    """Find this node in the node list; raise `UsageError` (one line) when it cannot.
    `wait`: how long names that do not resolve yet are waited for (`names`); None: not.

    An elastic job (--nnodes MIN:MAX, --elastic_level 0|1) has no node list: it is
    matched like the identical command on every node, ranks from each round's
    rendezvous, whatever a scheduler lists (its allocation is not the job's range)."""
    if options.min_nnodes is not None:
        return match_node_by_rank(options, environ, local=local, resolve=resolve, wait=wait)
    sched = detect_scheduler(environ)
    if sched is None and not options.ips_given and (options.nnodes or 1) > 1:
        return match_node_by_rank(options, environ, local=local, resolve=resolve, wait=wait)
    return match_node_in_list(options, environ, sched, local=local, resolve=resolve, wait=wait)


def match_ps_node(
    options: LaunchOptions,
    environ: Mapping[str, str],
    *,
    local: LocalAddresses | None = None,
    resolve: Callable[[str], str] = resolve_ipv4,
    node: NodeMatch | None = None,
) -> PsNode:
    """Find this node among the PS role lists (same local matching as --ips).

    A node that appears in neither list has nothing to run: an error. Counts mode (no
    lists) is `match_node`'s answer (`node`, when the caller has it already); on several
    nodes the caller plans it as one job (`plan.nodejob.ps_counts_node_job`).
    """
    if options.servers is None or options.workers is None:
        node = node or match_node(options, environ, local=local, resolve=resolve)
        if not node.rank_known:  # ranks at the rendezvous are for collective jobs only
            raise UsageError(
                f"--node_rank: needed with --nnodes {node.nnodes} in parameter-server mode "
                "when --ips is not given; or give --ips with one entry per node",
                "--node_rank",
            )
        return PsNode(node.address, node.interface, node.reason)
    return match_role_lists(
        options, environ, options.servers, options.workers, local=local, resolve=resolve
    )
