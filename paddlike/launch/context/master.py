"""Where the launchers of a many-node job meet: node 0's store address, or etcd.

Pure: options, the node list and a scheduler's word in; an address out, or a
`UsageError` naming the options that contradict each other.
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike.launch.context.options import DEFAULT_MASTER_PORT, LaunchOptions, UsageError


def master_address(
    master: str | None, master_addr: str | None, master_port: int | None, hosts: Sequence[str]
) -> tuple[str, int]:
    """Where the launchers meet.

    --master 10.0.0.5:7000                    -> ("10.0.0.5", 7000)
    --master_addr 10.0.0.5 --master_port 7000 -> ("10.0.0.5", 7000)
    --ips a,b (neither given)                 -> (hosts[0], 6170)
    """
    if master and not master.startswith("etcd://"):
        host, _, port = master.rpartition(":")
        return host, int(port)
    return (master_addr or hosts[0], master_port or DEFAULT_MASTER_PORT)


def launchers_master(
    options: LaunchOptions, hosts: Sequence[str], scheduler_master: str | None
) -> tuple[str, int]:
    """`master_address`, except that a scheduler's PADDLE_MASTER (PaddleCloud) is used when
    neither --master nor --master_addr is given; an explicit option that contradicts it is
    a UsageError naming both.

    PADDLE_MASTER=10.0.0.5:7000                        -> ("10.0.0.5", 7000)
    PADDLE_MASTER=10.0.0.5:7000, --master_port 7000    -> ("10.0.0.5", 7000)
    PADDLE_MASTER=10.0.0.5:7000, --master 10.0.0.6:7000 -> UsageError (--master)
    """
    given = master_address(options.master, options.master_addr, options.master_port, hosts)
    if not scheduler_master or (options.master and options.master.startswith("etcd://")):
        return given
    host, sep, port_text = scheduler_master.rpartition(":")
    if not sep or not port_text.isdigit() or not host:
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
    if options.master_addr and options.master_addr != host:
        raise UsageError(
            f"--master_addr: {options.master_addr!r} contradicts PADDLE_MASTER="
            f"{scheduler_master} set by the scheduler; drop one of them",
            "--master_addr",
        )
    if options.master_port not in (DEFAULT_MASTER_PORT, theirs[1]):
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
    used = {int(e.rpartition(":")[2]) for e in taken if e and e.rpartition(":")[0] == host}
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
