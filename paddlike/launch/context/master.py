"""Where the launchers of a many-node job meet: node 0's store address, or etcd.

Pure: options, the node list and a scheduler's word in; an address out, or a
`UsageError` naming the options that contradict each other.
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike import netaddr
from paddlike.launch.context.options.record import DEFAULT_MASTER_PORT, LaunchOptions, UsageError


def workers_port(options: LaunchOptions) -> int | None:
    """The workers' MASTER_PORT on node 0 when the user chose it, else None (picked free).

    torchrun and OneFlow give --master_port that meaning (the port of rank 0's host the
    workers' store listens on: the one a firewall or a Kubernetes service opens), and so
    does paddlike for collective jobs. Parameter-server workers have no MASTER_PORT:
    there --master_port stays where the launchers meet.
    """
    if options.master_port_given and not options.is_ps:
        return options.master_port
    return None


def master_address(
    master: str | None,
    master_addr: str | None,
    master_port: int | None,
    hosts: Sequence[str],
    *,
    workers: int | None = None,
) -> tuple[str, int]:
    """Where the launchers meet. `workers`: the workers' port when --master_port gave it
    (`workers_port`); the launchers then take the next one, unless --master says where.

    --master 10.0.0.5:7000                          -> ("10.0.0.5", 7000)
    --master_addr 10.0.0.5 --master_port 7000, PS   -> ("10.0.0.5", 7000)
    --master_addr 10.0.0.5 --master_port 7000       -> ("10.0.0.5", 7001)  (workers: 7000)
    --ips a,b (neither given)                       -> (hosts[0], 6170)
    --master [fd00::1]:7000                         -> ("fd00::1", 7000)
    """
    if master and not master.startswith("etcd://"):
        host, port = netaddr.split(master)  # [fd00::1]:7000 -> ("fd00::1", 7000)
        return host, int(port)
    host = netaddr.bare(master_addr) if master_addr else hosts[0]
    if workers is None:
        return host, master_port or DEFAULT_MASTER_PORT
    if workers >= 65535:
        raise UsageError(
            f"--master_port: {workers} is the workers' port, and the launchers meet at the "
            "port after it, which does not exist; give a lower --master_port, or --master "
            "ip:port for the launchers",
            "--master_port",
        )
    return host, workers + 1


def launchers_master(
    options: LaunchOptions, hosts: Sequence[str], scheduler_master: str | None
) -> tuple[str, int]:
    """`master_address`, except that a scheduler's PADDLE_MASTER (PaddleCloud) is used when
    neither --master nor --master_addr is given; an explicit option that contradicts it is
    a UsageError naming both. A --master_port that is also where the launchers meet
    (collective jobs: the workers' port) is a UsageError: one port cannot host both stores.

    PADDLE_MASTER=10.0.0.5:7000                        -> ("10.0.0.5", 7000)
    PADDLE_MASTER=10.0.0.5:7000, --master_port 7100    -> ("10.0.0.5", 7000) (workers: 7100)
    PADDLE_MASTER=10.0.0.5:7000, --master 10.0.0.6:7000 -> UsageError (--master)
    """
    workers = workers_port(options)
    meet = _launchers_master(options, hosts, scheduler_master, workers)
    if workers is not None and meet[1] == workers and not uses_etcd(options):
        where = (
            f"--master {options.master}" if options.master else f"PADDLE_MASTER={scheduler_master}"
        )
        raise UsageError(
            f"--master_port: {workers} is the workers' port on node 0, but the launchers "
            f"meet there too ({where}); give the launchers another port, or drop --master_port "
            "(the workers' port is then picked free)",
            "--master_port",
        )
    return meet


def _launchers_master(
    options: LaunchOptions,
    hosts: Sequence[str],
    scheduler_master: str | None,
    workers: int | None,
) -> tuple[str, int]:
    given = master_address(
        options.master, options.master_addr, options.master_port, hosts, workers=workers
    )
    if not scheduler_master or uses_etcd(options):
        return given
    try:
        host, port_text = netaddr.split(scheduler_master)
    except ValueError:
        host, port_text = "", ""
    if not port_text.isdigit() or not host:
        raise UsageError(
            f"PADDLE_MASTER: expected ip:port, got {scheduler_master!r}", "PADDLE_MASTER"
        )
    theirs = (host, int(port_text))
    if options.master and given != theirs:
        raise UsageError(
            f"--master: {options.master!r} contradicts PADDLE_MASTER={scheduler_master} set by "
            "the scheduler; drop one of them",
            "--master",
        )
    if options.master_addr and netaddr.bare(options.master_addr) != host:
        raise UsageError(
            f"--master_addr: {options.master_addr!r} contradicts PADDLE_MASTER="
            f"{scheduler_master} set by the scheduler; drop one of them",
            "--master_addr",
        )
    if workers is None and options.master_port not in (DEFAULT_MASTER_PORT, theirs[1]):
        raise UsageError(
            f"--master_port: {options.master_port} contradicts PADDLE_MASTER="
            f"{scheduler_master} set by the scheduler; drop one of them",
            "--master_port",
        )
    return theirs


def ps_master_port(master: tuple[str, int], master_port: int, taken: Sequence[str]) -> int:
    """The launchers' store port in PS lists mode, where the lists give ports away.

    The default --master_port (6170, also Paddle's usual server port) moves up past the
    endpoints the lists put on the store's host, identically on every node; any other
    port that a listed endpoint there uses is the user's clash: UsageError naming both.

    master ("a", 6170), taken ["a:6170", "b:6170"]   -> 6171
    master ("a", 6170), taken ["b:6170"]             -> 6170
    master ("a", 7000) given, taken ["a:7000"]       -> UsageError
    """
    host, port = master
    pairs = [netaddr.split(e) for e in taken if e]
    used = {int(p) for h, p in pairs if h == netaddr.bare(host) and p}
    if port not in used:
        return port
    if port != master_port or master_port != DEFAULT_MASTER_PORT:
        raise UsageError(
            f"--master_port: {port} on {host} is also a server or trainer port in "
            f"--servers/--workers; pick another port for the launchers' store",
            "--master_port",
        )
    while port in used:
        port += 1
    return port


def uses_etcd(options: LaunchOptions) -> bool:
    return bool(options.master and options.master.startswith("etcd://"))



def cannot_host_line(
    options: LaunchOptions, scheduler_master: str | None, address: str, reason: str
) -> str:
    """Node 0's line when it cannot host the launchers' store at `address` (`reason`: the
    bind's error): the option that chose that port, as the user gave it, how the port came
    from it, and what to change. With torchrun's --master_port P the launchers meet at
    P+1, a port the user never typed, so the line says so:

    --master_port 29500     -> "--master_port: 29500 is the workers' MASTER_PORT, and the
                                launchers meet at the port after it: node 0 cannot host
                                their store at h:29501 (...); pick a --master_port whose
                                next port is free too, or give the launchers a port ..."
    --rdzv_endpoint h:7100  -> "--master (from --rdzv_endpoint): cannot host the launchers'
                                store at h:7100: ..."
    neither                 -> "--master: cannot host ... at h:6170 (the default port ...)"
    """
    host = address.rpartition(":")[0]
    head = f"cannot host the launchers' store at {address}"
    taken = f"{reason}; another job's store may hold it"
    own_port = f"give the launchers a port of their own with --master {host}:PORT"
    workers = workers_port(options)
    if options.master and not uses_etcd(options):
        return f"{options.label('master')}: {head}: {taken}, pick another port"
    if scheduler_master:
        return f"PADDLE_MASTER={scheduler_master} (set by the scheduler): {head}: {taken}"
    if workers is not None:
        return (
            f"{options.label('master_port')}: {workers} is the workers' MASTER_PORT, and the "
            f"launchers meet at the port after it: node 0 {head} ({reason}); pick a "
            f"--master_port whose next port is free too, or {own_port} (torchrun's "
            "--rdzv_endpoint)"
        )
    if options.master_port_given:  # parameter-server jobs: the launchers' port itself
        return f"{options.label('master_port')}: {head}: {taken}, pick another --master_port"
    return f"--master: {head} (the default port, no --master given): {taken}; {own_port}"
