"""This node in parameter-server mode: its address among the role lists (--servers,
--workers, --heter_workers), matched like an --ips entry.

Apart from the node-list rule because a host may repeat here (several roles on one
node) and a node may hold no role at all; counts mode (--server_num/--worker_num, no
lists) is matched by the node-list rule instead (`paddlike.launch.context.node`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from paddlike import netaddr
from paddlike.contract import POD_IP
from paddlike.launch.context.addresses import (
    LocalAddresses,
    resolve_for,
    resolve_ipv4,
    resolve_or_none,
)
from paddlike.launch.context.nodematch import PsNode
from paddlike.launch.context.options.record import LaunchOptions, UsageError


def _split_entry(entry: str) -> tuple[str, int | None]:
    host, port = netaddr.split(entry)  # [fd00::1]:6170, or fd00::1 with no port
    return (host, int(port)) if port else (host, None)


def match_role_lists(
    options: LaunchOptions,
    environ: Mapping[str, str],
    servers_given: Sequence[str],
    workers_given: Sequence[str],
    *,
    local: LocalAddresses | None = None,
    resolve: Callable[[str], str] = resolve_ipv4,
) -> PsNode:
    """Find this node among --servers / --workers / --heter_workers (same local matching
    as --ips). A node that appears in no list has nothing to run: an error."""
    local = local if local is not None else LocalAddresses.scan()
    resolved: dict[str, str] = {}
    parsed: dict[str, list[tuple[str, int | None]]] = {"--servers": [], "--workers": []}
    for option, entries in (("--servers", servers_given), ("--workers", workers_given)):
        for entry in entries:
            name, port = _split_entry(entry)
            if name not in resolved:
                resolved[name] = resolve_for(option, name, resolve)
            parsed[option].append((resolved[name], port))
    servers = tuple((h, p) for h, p in parsed["--servers"] if p is not None)
    if len(set(servers)) != len(servers):
        raise UsageError(
            f"--servers: two entries name the same endpoint, got {','.join(servers_given)!r}",
            "--servers",
        )
    stages = _heter_stages(options, resolved, resolve)
    all_hosts = [h for h, _ in (*servers, *parsed["--workers"], *(e for s in stages for e in s))]
    host_opt = options.host if options.host is not None else environ.get(POD_IP) or None
    host_option = "--host" if options.host is not None else POD_IP
    host = None
    if options.host is None and host_opt is not None:
        host = resolve_or_none(host_opt, resolve)
        if host not in all_hosts:  # POD_IP is only a hint (see match_node)
            host_opt = host = None
    if host_opt is not None and host is None:
        host = resolve_for(host_option, host_opt, resolve)
    mine = match_local_entries(all_hosts, local=local, host=host)
    if mine is None:
        seen = (
            f"{host_option} {host_opt!r}"
            if host is not None
            else (f"local addresses: {local.listing()}")
        )
        heters = (
            f", heter trainers {';'.join(','.join(s) for s in options.heter_workers)!r}"
            if options.heter_workers
            else ""
        )
        raise UsageError(
            f"--servers/--workers: this node has no role: no entry is an address of this node "
            f"({seen}); servers {','.join(servers_given)!r}, workers "
            f"{','.join(workers_given)!r}{heters}",
            "--servers",
        )
    how = f"named by {host_option}" if host is not None else "an address of this node"
    return PsNode(
        host=mine,
        interface=local.interface_of(mine),
        reason=f"matched --servers/--workers host {mine}, {how}",
        servers=servers,
        trainers=tuple(parsed["--workers"]),
        heter_stages=stages,
    )


def _heter_stages(
    options: LaunchOptions, resolved: dict[str, str], resolve: Callable[[str], str]
) -> tuple[tuple[tuple[str, int], ...], ...]:
    """--heter_workers resolved like the other lists: per stage, (address, port)."""
    stages = []
    for stage in options.heter_workers or ():
        members = []
        for entry in stage:
            name, port = _split_entry(entry)
            if name not in resolved:
                resolved[name] = resolve_for("--heter_workers", name, resolve)
            assert port is not None  # options require ports in --heter_workers
            members.append((resolved[name], port))
        stages.append(tuple(members))
    taken = [*(e for s in stages for e in s)]
    if len(set(taken)) != len(taken):
        raise UsageError(
            "--heter_workers: two entries name the same endpoint, got "
            f"{';'.join(','.join(s) for s in options.heter_workers or ())!r}",
            "--heter_workers",
        )
    return tuple(stages)


def match_local_entries(
    hosts: Sequence[str], *, local: LocalAddresses, host: str | None
) -> str | None:
    """This node's address among `hosts` (may repeat), or None: for PS role lists.

    Raises `UsageError` when two different local addresses appear (ambiguous).
    """
    distinct = list(dict.fromkeys(hosts))
    if host is not None:
        return host if host in distinct else None
    mine = [h for h in distinct if local.is_local(h)]
    if len(mine) > 1:
        raise UsageError(
            f"--servers/--workers: {' and '.join(mine)} are all addresses of this node; "
            "pass --host to choose one",
            "--servers",
        )
    return mine[0] if mine else None
