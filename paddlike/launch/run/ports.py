"""Free ports for this node's processes, reserved so concurrent launchers never share one.

Asking the kernel for a free port (bind to port 0) and closing the socket leaves a
window until the worker binds it; two launchers starting at the same moment can get
the same port in that window. So every port handed out is also written into a
registry shared by all launchers on the host, under a file lock:

    /tmp/paddlike-ports/lock          the flock that guards the registry
    /tmp/paddlike-ports/<port>        "<pid> <pid start time> <unix time>"

An entry blocks its port for `TTL` seconds (enough for workers to bind it) or until
the launcher that took it is gone, whichever comes first. A port is handed out only
when it is not in the registry and can be bound right now.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path

from paddlike import netaddr
from paddlike.launch import NamedTuple
from paddlike.launch.plan.layout import port_span

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.options import LaunchOptions
    from paddlike.launch.plan.nodejob import NodeJob

TTL = 60.0
LOCK_TIMEOUT = 10.0
MAX_TRIES_PER_PORT = 200


def default_registry_dir() -> Path:
    """The machine's registry; inside a network namespace of its own, a folder of it per
    namespace: ports belong to a network namespace, so "nodes" that are namespaces of one
    machine must not block each other's ports (a fixed --master_port above all)."""
    # Not tempfile.gettempdir(): importing tempfile costs more than the whole reservation.
    registry = Path(os.environ.get("TMPDIR") or "/tmp") / "paddlike-ports"
    with contextlib.suppress(OSError):
        ns = os.stat("/proc/self/ns/net").st_ino
        if _own_network_namespace(ns):
            registry = registry / f"netns-{ns}"
    return registry


def _own_network_namespace(ns: int) -> bool:
    """Whether this process's network namespace is not the machine's: pid 1's differs or,
    where pid 1's cannot be read (some containers), it is one that `ip netns` named."""
    try:
        return os.stat("/proc/1/ns/net").st_ino != ns
    except OSError:
        pass
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return False
    for name in names:
        with contextlib.suppress(OSError):
            if os.stat(f"/run/netns/{name}").st_ino == ns:
                return True
    return False


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


def _lock(path: Path, timeout: float) -> int:
    """flock `path` exclusively within `timeout` seconds; returns the fd (close to release).

    fcntl directly rather than the filelock package: same kernel lock, and the
    import of filelock alone costs the launcher ~20 ms. The lock is held for
    microseconds, so a short retry interval is cheap.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise PortError(
                    f"could not lock the port registry {path.parent} within {timeout:g} s "
                    "(another launcher holds it)"
                ) from None
            time.sleep(0.001)


def _entry_expired(path: Path, now: float, ttl: float, seen: dict[int, float | None]) -> bool:
    try:
        pid, started, stamp = path.read_text().split()
        owner = _Owner(int(pid), float(started))
        age = now - float(stamp)
    except (OSError, ValueError):
        return True  # unreadable or half-written by a crashed launcher: not a valid claim
    return not (0 <= age < ttl) or not _owner_alive(owner, seen)


def reserve_ports(
    n: int,
    host: str = "",
    *,
    registry_dir: Path | None = None,
    ttl: float = TTL,
    lock_timeout: float = LOCK_TIMEOUT,
) -> tuple[int, ...]:
    """Reserve `n` distinct free TCP ports on `host` ("" = every address) for this process.

    The reservation needs no release: it lapses after `ttl` seconds or when this
    process exits. Raises `PortError` if the registry lock is not obtained within
    `lock_timeout` or no free port is found.
    """
    registry = registry_dir or default_registry_dir()
    with contextlib.suppress(FileExistsError):
        registry.mkdir(mode=0o777, parents=True)
        os.chmod(registry, 0o1777)  # shared by every user's launchers, like /tmp
    me = os.getpid()
    started = _process_start_time(me)
    lock_fd = _lock(registry / "lock", lock_timeout)
    try:
        now = time.time()
        taken: set[int] = set()
        seen: dict[int, float | None] = {me: started}
        for path in registry.iterdir():
            if not path.name.isdigit():
                continue
            if _entry_expired(path, now, ttl, seen):
                with contextlib.suppress(OSError):
                    path.unlink()
            else:
                taken.add(int(path.name))
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
        for port in ports:
            tmp = registry / f".{port}.{me}"
            tmp.write_text(f"{me} {started} {now}\n")
            os.replace(tmp, registry / str(port))
        return tuple(ports)
    finally:
        os.close(lock_fd)  # releases the flock


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
        owner = int(entry.read_text().split()[0])
    except (OSError, ValueError, IndexError):
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
    registry = registry_dir or default_registry_dir()
    with contextlib.suppress(FileExistsError):
        registry.mkdir(mode=0o777, parents=True)
        os.chmod(registry, 0o1777)
    me = os.getpid()
    started = _process_start_time(me)
    wanted = tuple(range(start, start + n))
    where = host or "*"
    lock_fd = _lock(registry / "lock", lock_timeout)
    try:
        now = time.time()
        seen: dict[int, float | None] = {me: started}
        for port in wanted:
            entry = registry / str(port)
            if _held_by_other(entry, me, now, ttl, seen):
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
        for port in wanted:
            tmp = registry / f".{port}.{me}"
            tmp.write_text(f"{me} {started} {now}\n")
            os.replace(tmp, registry / str(port))
        return wanted
    finally:
        os.close(lock_fd)


def round_ports(options: LaunchOptions, job: NodeJob) -> tuple[int, ...]:
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
        start_port=options.start_port,
        start_port_from=options.start_port_from,
        ports_num=options.ports_num,
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
