"""Free ports for this node's processes, reserved so concurrent launchers never share one.

Asking the kernel for a free port (bind to port 0) and closing the socket leaves a
window until the worker binds it; two launchers starting at the same moment can get
the same port in that window. So every port handed out is also written into a
registry of the user's launchers on the host, under a file lock (`run.portregistry`:
where it is, why one per user, and how it is kept safe in a shared temp directory):

    /tmp/paddlike-ports-<uid>/lock          the flock that guards the registry
    /tmp/paddlike-ports-<uid>/<port>        "<pid> <pid start time> <unix time>"

An entry blocks its port for `TTL` seconds (enough for workers to bind it) or until
the launcher that took it is gone, whichever comes first. A port is handed out only
when it is not in the registry and can be bound right now.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from paddlike import netaddr
from paddlike.launch import NamedTuple
from paddlike.launch.plan.layout import port_span
from paddlike.launch.run import portregistry
from paddlike.launch.run.portregistry import Warn, warn_on_stderr

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.jobspec import GivenPorts
    from paddlike.launch.plan.nodejob import NodeJob

TTL = 60.0
LOCK_TIMEOUT = 10.0
MAX_TRIES_PER_PORT = 200


class PortError(RuntimeError):
    """No free port could be reserved (the message says why and where)."""


class _Owner(NamedTuple):
    pid: int
    started: float  # the owner's process start time (guards against pid reuse)


def _process_start_time(pid: int) -> float | None:
    """Start time of `pid` in clock ticks since boot, from /proc; None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return float(fields[19])  # field 22: starttime


def _owner_alive(owner: _Owner, seen: dict[int, float | None]) -> bool:
    """`seen` remembers each pid's start time for one scan: a launcher owns several ports."""
    if owner.pid not in seen:
        seen[owner.pid] = _process_start_time(owner.pid)
    return seen[owner.pid] == owner.started


def _kernel_free_port(host: str) -> int:
    with socket.socket(netaddr.family(host), socket.SOCK_STREAM) as s:  # IPv6 hosts too
        s.bind((host, 0))
        return s.getsockname()[1]


class _Session(NamedTuple):
    registry: Path
    me: int
    started: float | None  # this process's start time, for its entries


@contextlib.contextmanager
def _session(given: Path | None, lock_timeout: float, warn: Warn) -> Iterator[_Session]:
    """The checked registry, locked (or, past `lock_timeout`, not: a warning) for the block."""
    try:
        registry = portregistry.registry_dir(given, warn)
    except OSError as exc:
        raise PortError(str(exc)) from None
    with portregistry.locked(registry, lock_timeout, warn):
        yield _Session(registry, os.getpid(), _process_start_time(os.getpid()))


def _write_entries(session: _Session, ports: tuple[int, ...] | list[int], now: float) -> None:
    try:
        for port in ports:
            portregistry.write_entry(
                session.registry, port, f"{session.me} {session.started} {now}\n"
            )
    except OSError as exc:
        raise PortError(
            f"cannot write the port registry {session.registry}: {exc.strerror}"
        ) from None


def _entry_expired(path: Path, now: float, ttl: float, seen: dict[int, float | None]) -> bool:
    try:
        pid, started, stamp = (portregistry.read_entry(path) or "").split()
        owner = _Owner(int(pid), float(started))
        age = now - float(stamp)
    except ValueError:
        return True  # unreadable or half-written by a crashed launcher: not a valid claim
    return not (0 <= age < ttl) or not _owner_alive(owner, seen)


def reserve_ports(
    n: int,
    host: str = "",
    *,
    registry_dir: Path | None = None,
    ttl: float = TTL,
    lock_timeout: float = LOCK_TIMEOUT,
    warn: Warn = warn_on_stderr,
) -> tuple[int, ...]:
    """Reserve `n` distinct free TCP ports on `host` ("" = every address) for this process.

    The reservation needs no release: it lapses after `ttl` seconds or when this
    process exits. Raises `PortError` if no free port is found or the registry cannot be
    used; a registry lock not obtained within `lock_timeout`, or a registry path that is
    not safe to use, is one line to `warn` and the reservation goes on.
    """
    with _session(registry_dir, lock_timeout, warn) as session:
        registry = session.registry
        now = time.time()
        taken: set[int] = set()
        seen: dict[int, float | None] = {session.me: session.started}
        for name in portregistry.entry_names(registry):
            if _entry_expired(registry / name, now, ttl, seen):
                portregistry.remove_entry(registry, name)
            else:
                taken.add(int(name))
        ports: list[int] = []
        tries = 0
        while len(ports) < n:
            tries += 1
            if tries > MAX_TRIES_PER_PORT * n:
                raise PortError(
                    f"no free port found on {host or '*'} after {tries - 1} tries "
                    f"({len(taken)} reserved in {registry})"
                )
            port = _kernel_free_port(host)
            # Just bound by the kernel's choice, so bindable; skip ports another launcher's
            # workers have not bound yet.
            if port in taken or port in ports:
                continue
            ports.append(port)
        _write_entries(session, ports, now)
        return tuple(ports)


def free_ports(n: int, host: str = "") -> tuple[int, ...]:
    """Ports free right now, without reserving them (for --dry_run, which creates nothing)."""
    ports: list[int] = []
    while len(ports) < n:
        port = _kernel_free_port(host)
        if port not in ports:
            ports.append(port)
    return tuple(ports)


class PortTakenError(PortError):
    """A port the user gave (--start_port, PADDLE_START_PORT, PADDLE_PORT) cannot be used:
    bad input rather than bad luck, so exit 2 like every other bad option."""

    exit_code = 2


def _bindable(host: str, port: int) -> OSError | None:
    """None when `port` can be bound on `host` now; else the error (as a worker would get it)."""
    with socket.socket(netaddr.family(host), socket.SOCK_STREAM) as s:
        # As servers bind (SO_REUSEADDR): a port in TIME_WAIT after the last job is usable.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc
    return None


def _held_by_other(
    entry: Path, me: int, now: float, ttl: float, seen: dict[int, float | None]
) -> bool:
    """A live claim of another launcher (this launcher's own, from an earlier restart
    round, is no obstacle: its workers are gone)."""
    try:
        owner = int((portregistry.read_entry(entry) or "").split()[0])
    except (ValueError, IndexError):
        return False
    return owner != me and not _entry_expired(entry, now, ttl, seen)


def claim_ports(
    start: int,
    n: int,
    host: str = "",
    *,
    source: str = "--start_port",
    limit: int | None = None,
    registry_dir: Path | None = None,
    ttl: float = TTL,
    lock_timeout: float = LOCK_TIMEOUT,
    warn: Warn = warn_on_stderr,
) -> tuple[int, ...]:
    """Claim the `n` consecutive ports from `start` on `host`, as `reserve_ports` reserves
    free ones: each must be bindable now and not held by another launcher's registry entry.

    `source` names where `start` came from (for the message); `limit`, when the platform
    opened only so many ports from `start` (PaddleCloud's TRAINER_PORTS_NUM), caps `n`.
    Raises `PortTakenError` (exit 2) naming the first port that cannot be used:

        claim_ports(6070, 3)  -> (6070, 6071, 6072)
        6071 in use           -> "--start_port 6070: port 6071 on 127.0.0.1 is in use (...)"
    """
    if limit is not None and n > limit:
        raise PortTakenError(
            f"{source} {start}: this node needs {n} consecutive ports, but only {limit} "
            f"were opened from {start}; open more or run fewer workers"
        )
    if start + n - 1 > 65535:
        raise PortTakenError(f"{source} {start}: leaves no room for {n} ports below 65536")
    wanted = tuple(range(start, start + n))
    where = host or "*"
    with _session(registry_dir, lock_timeout, warn) as session:
        now = time.time()
        seen: dict[int, float | None] = {session.me: session.started}
        for port in wanted:
            entry = session.registry / str(port)
            if _held_by_other(entry, session.me, now, ttl, seen):
                raise PortTakenError(
                    f"{source} {start}: port {port} on {where} was just given to another "
                    f"launcher's workers ({entry}); pick another {source}"
                )
            error = _bindable(host, port)
            if error is not None:
                raise PortTakenError(
                    f"{source} {start}: port {port} on {where} is in use "
                    f"({error.strerror}); pick another {source} (this node needs "
                    f"{port_span(start, start + n - 1)})"
                )
        _write_entries(session, wanted, now)
        return wanted


def round_ports(given: GivenPorts, job: NodeJob) -> tuple[int, ...]:
    """This round's ports, as `plan.layout.port_request` says: on one node the consecutive
    ones from a given start (--start_port, PADDLE_START_PORT, PaddleCloud's PADDLE_PORT),
    else free ones reserved here (many nodes trade them at the rendezvous). A --master_port
    (collective) is the workers' store port: node 0 claims it as its last port instead of
    a free one, and a taken one ends the round with exit 2 naming it."""
    from paddlike.launch.plan.layout import port_request, workers_port_overlap

    if not job.reserve:
        return ()
    request = port_request(
        reserve=job.reserve,
        nnodes=job.nnodes,
        workers_port=job.workers_port,
        hosts_workers_store=job.nnodes > 1 and _hosts_workers_store(job),
        start_port=given.start_port,
        start_port_from=given.start_port_from,
        ports_num=given.ports_num,
    )
    if request.start is not None:
        ports = claim_ports(
            request.start, request.count, job.host, source=request.source, limit=request.limit
        )
    else:
        ports = reserve_ports(request.count, job.host)
        while job.workers_port in ports:  # free by chance: the workers' port is not theirs
            ports = reserve_ports(request.count, job.host)
    if request.unused_slot is not None:  # given ports; the workers' store is elsewhere
        return (*ports, request.unused_slot)
    if request.workers_port is None:
        return ports
    overlap = workers_port_overlap(request, ports)
    if overlap is not None:
        raise PortTakenError(overlap)
    claimed = claim_ports(request.workers_port, 1, job.host, source="--master_port")
    return (*ports, *claimed)


def _hosts_workers_store(job: NodeJob) -> bool:
    """Node 0 hosts the workers' store; before the rank is known, the node a given
    --master_port's master names (without one: assumed, the port is then reserved)."""
    if job.rank_known:
        return job.index == 0
    return job.workers_port is None or _may_host_store(job)


def _may_host_store(job: NodeJob) -> bool:
    """No rank yet: node 0 is the node the master names."""
    try:
        return job.master is not None and socket.gethostbyname(job.master[0]) == job.host
    except OSError:
        return False
