"""This node's entry in a node list: --ips, or the one a scheduler supplies.

Every node runs the same command, so each launcher must find itself in the list. An
entry is this node when its address is assigned to a local interface or can be bound
here; ``--host`` or ``POD_IP`` names this node's address directly and ``--node_rank``
its index. A scheduler (Slurm, PaddleCloud; `paddlike.launch.context.schedulers`) may
supply the list and the index; explicit flags that contradict it are errors, never a
silent rank 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from paddlike import netaddr
from paddlike.contract import POD_IP
from paddlike.launch.context.addresses import (
    LocalAddresses,
    resolve_for,
    resolve_host,
    resolve_or_none,
    route_source,
)
from paddlike.launch.context.names import NameWait, check_one_family, resolve_names
from paddlike.launch.context.nodematch import NodeMatch
from paddlike.launch.context.options.record import LaunchOptions, UsageError
from paddlike.launch.context.schedulers import SchedulerInfo


def _check_twice(entries: Sequence[str], option: str) -> None:
    seen: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e in seen:
            raise UsageError(
                f"{option}: entry {e!r} appears twice (positions {seen[e]} and {i}), got "
                f"{','.join(entries)!r}",
                option,
            )
        seen[e] = i


def _check_distinct(entries: Sequence[str], hosts: Sequence[str], option: str) -> None:
    by_addr: dict[str, str] = {}
    for e, h in zip(entries, hosts, strict=True):
        if h in by_addr:
            raise UsageError(
                f"{option}: {by_addr[h]!r} and {e!r} are the same node ({h}), got "
                f"{','.join(entries)!r}",
                option,
            )
        by_addr[h] = e


def _meeting_name(options: LaunchOptions) -> tuple[str, str] | None:
    """(host, option) of --master / --master_addr when given (not etcd): a name the
    launchers need to resolve too, waited for with the node list."""
    if options.master and not options.master.startswith("etcd://"):
        return netaddr.split(options.master)[0], "--master"
    if options.master_addr:
        return netaddr.bare(options.master_addr), "--master_addr"
    return None


def _merge_scheduler(
    options: LaunchOptions, sched: SchedulerInfo | None
) -> tuple[tuple[str, ...], str, int | None, str | None]:
    """(entries, option name for messages, node_rank, host) after merging a scheduler's view."""
    if sched is None:
        return options.ips, "--ips", options.node_rank, options.host
    where = f"{sched.source} ({sched.name})"
    if options.ips_given and tuple(options.ips) != sched.hosts:
        raise UsageError(
            f"--ips: {','.join(options.ips)!r} contradicts {where}, which lists "
            f"{','.join(sched.hosts)!r}; drop --ips or run outside the scheduler's environment",
            "--ips",
        )
    if options.nnodes is not None and options.nnodes != len(sched.hosts):
        raise UsageError(
            f"--nnodes: {options.nnodes} contradicts {where}, which lists {len(sched.hosts)}",
            "--nnodes",
        )
    node_rank = options.node_rank
    if sched.node_index is not None:
        if node_rank is not None and node_rank != sched.node_index:
            var = "SLURM_NODEID" if sched.name == "slurm" else "PADDLE_TRAINER_ID"
            raise UsageError(
                f"--node_rank: {node_rank} contradicts {var}={sched.node_index}", "--node_rank"
            )
        node_rank = sched.node_index
    host = options.host if options.host is not None else sched.host
    return sched.hosts, f"--ips (from {where})", node_rank, host


def match_node_in_list(
    options: LaunchOptions,
    environ: Mapping[str, str],
    sched: SchedulerInfo | None,
    *,
    local: LocalAddresses | None = None,
    resolve: Callable[[str], str] = resolve_host,
    wait: NameWait | None = None,
    route: Callable[[str, int], str] = route_source,
) -> NodeMatch:
    """Find this node in --ips or `sched`'s node list; raise `UsageError` (one line) when
    it cannot. `paddlike.launch.context.node.match_node` decides that a list applies.

    With `wait`, names that do not resolve yet are waited for (`names.resolve_names`),
    except this node's own entry when other facts say which entry and which address it
    is: --node_rank with --host / POD_IP, or --host / POD_IP naming an address that no
    resolved entry has while one entry alone is missing, or --node_rank alone (the
    address is then the one this node reaches node 0, or another entry, from)."""
    entries, option, node_rank, host = _merge_scheduler(options, sched)
    # POD_IP alone (no scheduler list, no --host) is only a hint: many Kubernetes pods
    # set it for every container, including single-node jobs on 127.0.0.1.
    hint_only = host is None and sched is None
    if hint_only and environ.get(POD_IP):
        host = environ[POD_IP]
    host_option = "--host" if options.host is not None else POD_IP
    if options.nnodes is not None and options.nnodes != len(entries):
        raise UsageError(
            f"--nnodes: {options.nnodes} contradicts {option}, which lists {len(entries)} "
            f"({','.join(entries)}); give --ips with one entry per node",
            "--nnodes",
        )
    if node_rank is not None and node_rank >= len(entries):
        raise UsageError(
            f"--node_rank: {node_rank} is out of range for {option} {','.join(entries)!r}",
            "--node_rank",
        )
    _check_twice(entries, option)
    local = local if local is not None else LocalAddresses.scan()
    hosts = _resolve_entries(entries, option, node_rank, host, options, wait, resolve, route, local)
    _check_distinct(entries, hosts, option)
    check_one_family(entries, hosts, option)

    def found(index: int, why: str) -> NodeMatch:
        # without --ips (or a scheduler's list) there is nothing to match: one node
        matched = options.ips_given or option != "--ips"
        return NodeMatch(
            entries=tuple(entries),
            hosts=hosts,
            node_index=index,
            interface=local.interface_of(hosts[index]),
            reason=f"matched {option} entry {index} ({entries[index]}), {why}"
            if matched
            else "one node (no --ips given)",
            scheduler=sched.name if sched else None,
            scheduler_master=sched.master if sched else None,
        )

    if host is not None and hint_only and resolve_or_none(host, resolve) not in hosts:
        host = None
    if host is not None:
        addr = resolve_for(host_option, host, resolve)
        if addr not in hosts:
            raise UsageError(
                f"{host_option}: {host!r} is not one of {option} {','.join(entries)!r}",
                host_option,
            )
        index = hosts.index(addr)
        if node_rank is not None and node_rank != index:
            raise UsageError(
                f"--node_rank: {node_rank} contradicts {host_option} {host!r}, which is entry "
                f"{index} of {option}",
                "--node_rank",
            )
        return found(index, f"named by {host_option}")
    if node_rank is not None:
        if not local.is_local(hosts[node_rank]):
            raise UsageError(
                f"--node_rank: {node_rank} names {entries[node_rank]!r} ({hosts[node_rank]}), "
                f"which is not an address of this node (local addresses: {local.listing()}); "
                "pass --host if this node is reached through another address",
                "--node_rank",
            )
        by = "SLURM_NODEID" if sched and sched.name == "slurm" else "the node rank"
        return found(node_rank, f"chosen by {by}")
    mine = [i for i, h in enumerate(hosts) if local.is_local(h)]
    if not mine:
        raise UsageError(
            f"{option}: no entry of {','.join(entries)!r} is an address of this node "
            f"(local addresses: {local.listing()}); pass --host to name this node",
            option.split(" ")[0],
        )
    if len(mine) > 1:
        both = " and ".join(f"{entries[i]!r} ({hosts[i]})" for i in mine)
        raise UsageError(
            f"{option}: {both} are all addresses of this node; pass --node_rank or --host to "
            "choose one",
            option.split(" ")[0],
        )
    return found(mine[0], "an address of this node")


def _resolve_entries(
    entries: Sequence[str],
    option: str,
    node_rank: int | None,
    host: str | None,
    options: LaunchOptions,
    wait: NameWait | None,
    resolve: Callable[[str], str],
    route: Callable[[str, int], str],
    local: LocalAddresses,
) -> tuple[str, ...]:
    """The entries' addresses, same order; this node's own entry may be filled in from
    --host / POD_IP or the route (see `match_node_in_list`) when its name does not
    resolve (yet)."""
    names = dict.fromkeys(entries, option)
    meeting = _meeting_name(options)
    if meeting is not None and meeting[0] not in names:
        names[meeting[0]] = meeting[1]
    host_addr = None
    if host is not None and wait is not None:
        host_addr = resolve_or_none(host, resolve)

    def missing_entries(found: Mapping[str, str]) -> list[int]:
        return [i for i, e in enumerate(entries) if e not in found]

    def enough(found: Mapping[str, str]) -> bool:
        """Only this node's own entry is missing, and other facts say it is ours."""
        missing = missing_entries(found)
        if len(missing) != 1 or any(n not in found for n in names if n not in entries):
            return False
        if node_rank is not None:
            return missing[0] == node_rank and (host_addr is not None or len(entries) > 1)
        # --host / POD_IP alone: the missing entry is ours only if no resolved one is
        # (an own name may resolve to another address of this node than POD_IP)
        return (
            host_addr is not None
            and host_addr not in found.values()
            and not any(local.is_local(found[e]) for e in entries if e in found)
        )

    found = resolve_names(names, resolve, wait, enough=enough)
    missing = missing_entries(found)
    if not missing:
        return tuple(found[e] for e in entries)
    (own,) = missing  # `enough` let one entry, this node's, go unresolved
    if host_addr is not None:
        addr = host_addr
    else:  # --node_rank alone: the address this node reaches another entry from
        other = found[entries[1 if own == 0 else 0]]
        try:
            addr = route(other, 9)
        except OSError as err:
            raise UsageError(
                f"{option}: {entries[own]!r} (entry {own}, this node by --node_rank) does "
                f"not resolve, and no route from this node to {other}: {err.strerror or err}; "
                f"pass --host with this node's address",
                option.split(" ")[0],
            ) from None
    return tuple(addr if i == own else found[e] for i, e in enumerate(entries))
