"""Rendezvous: every node's launcher meets the others, trades ports and checks agreement.

With more than one node, node 0's launcher hosts a `StoreServer` at the master
address (``--master ip:port``, else ``--master_addr:--master_port``, default the
first ``--ips`` entry and port 6170). Each launcher, node 0 included, then:

1. connects (retrying until ``--rdzv_timeout``);
2. publishes, under ``rdzv/<round>/node/<i>``, its host, the ports it reserved
   locally and a fingerprint of its configuration (create-only: a second launcher
   claiming the same node index is an error naming both);
3. counts itself in; the last to arrive marks the round complete. Everyone waits
   for that one key, printing one progress line naming the nodes still missing;
4. reads every node's entry and decides, identically on every node, whether the
   fingerprints agree. The endpoints then come from the published ports, so no
   port is ever assumed free on another host.

Two launchers that each believe they are node 0 (``--ips`` in another order, no
``--master``) each host a store of their own and would wait for each other until the
timeout. So while nodes are missing, the store's host looks for a rendezvous at the
missing nodes' store port (`find_rival`) and, finding one, fails both with exit 2.
A failing store host keeps its store up until every launcher that arrived has read
the verdict (`Rendezvous.linger`).

The deciding is pure (`check_fingerprints`, `missing_nodes`, `master_address`,
`rival_message`); `Rendezvous.join` is the shell that talks to the store. The same
logic runs on an etcd cluster through `paddlike.launch.peers.etcd.EtcdStore`, which has
the same methods.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from paddlike import __version__
from paddlike.distributed.store import StoreError, StoreServer, StoreTimeoutError

DEFAULT_MASTER_PORT = 6170
PROGRESS_FIRST = 1.0  # seconds before the first "waiting for" line (fast joins print nothing)


class KV(Protocol):
    """The key-value operations rendezvous and job watching need (StoreClient, EtcdStore)."""

    address: str

    def set(self, key: str, value: bytes | str) -> None: ...
    def get(self, key: str, timeout: float | None = None) -> bytes: ...
    def try_get(self, key: str) -> bytes | None: ...
    def add(self, key: str, amount: int = 1) -> int: ...
    def compare_set(self, key: str, expected: bytes | None, desired: bytes) -> bytes: ...
    def close(self) -> None: ...


class RendezvousError(RuntimeError):
    """The nodes could not agree; `exit_code` is what every launcher exits with."""

    exit_code = 1


class FingerprintMismatch(RendezvousError):
    exit_code = 2


class RendezvousTimeout(RendezvousError):
    exit_code = 1


class StoreRefused(RendezvousError):
    """Node 0's store refused this launcher (wrong or missing job token): configuration."""

    exit_code = 2


class RendezvousAborted(RendezvousError):
    """A launcher stopped during the rendezvous (a signal); `cause` is its encoded RootCause
    (`jobwatch.decode_cause`), which every node then reports."""

    def __init__(self, cause: bytes) -> None:
        super().__init__("rendezvous: another launcher stopped")
        self.cause = cause


# --- the pure core ---------------------------------------------------------------------


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


def fingerprint(
    *,
    ips: Sequence[str],
    devices_per_node: int,
    nproc_per_node: int,
    run_mode: str,
    job_id: str | None,
    script: str,
    script_args: Sequence[str],
    version: str = __version__,
) -> dict[str, str]:
    """The configuration every node must share. Field order is the order of the report.

    An unset job id is left out: each node would generate its own; node 0's is adopted.
    """
    fp = {
        "ips": ",".join(ips),
        "devices per node": str(devices_per_node),
        "nproc_per_node": str(nproc_per_node),
        "run_mode": run_mode,
        "paddlike version": version,
        "training script": script,
        "script arguments": json.dumps(list(script_args)),
    }
    if job_id:
        fp["job_id"] = job_id
    return fp


def ps_fingerprint(
    *,
    servers: Sequence[str],
    trainers: Sequence[str],
    nodes: Sequence[str],
    run_mode: str,
    job_id: str | None,
    script: str,
    script_args: Sequence[str],
    version: str = __version__,
) -> dict[str, str]:
    """`fingerprint` for parameter-server lists: the resolved server and trainer endpoints
    stand in for --ips and the device counts; "nodes" (the node order they imply) is last,
    as it can only differ when a list does."""
    fp = {
        "servers": ",".join(servers),
        "workers": ",".join(trainers),
        "run_mode": run_mode,
        "paddlike version": version,
        "training script": script,
        "script arguments": json.dumps(list(script_args)),
    }
    if job_id:
        fp["job_id"] = job_id
    fp["nodes"] = ",".join(nodes)
    return fp


def ps_master_port(master: tuple[str, int], master_port: int, taken: Sequence[str]) -> int:
    """The launchers' store port in PS lists mode, where the lists give ports away.

    The default --master_port (6170, also Paddle's usual server port) moves up past the
    endpoints the lists put on the store's host, identically on every node; any other
    port that a listed endpoint there uses is the user's clash: UsageError naming both.

    master ("a", 6170), taken ["a:6170", "b:6170"]   -> 6171
    master ("a", 6170), taken ["b:6170"]             -> 6170
    master ("a", 7000) given, taken ["a:7000"]       -> UsageError
    """
    from paddlike.launch.context.options import UsageError

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


@dataclass(frozen=True)
class NodeEntry:
    """What one node publishes at rendezvous."""

    index: int
    host: str  # the node's matched address; its endpoints use it
    hostname: str
    pid: int
    ports: tuple[int, ...]
    fingerprint: Mapping[str, str]
    job_id: str = ""

    def encode(self) -> bytes:
        d = {
            "index": self.index,
            "host": self.host,
            "hostname": self.hostname,
            "pid": self.pid,
            "ports": list(self.ports),
            "fingerprint": dict(self.fingerprint),
            "job_id": self.job_id,
        }
        # not sorted: the fingerprint's field order is the order mismatches are reported in
        return json.dumps(d).encode()

    @classmethod
    def decode(cls, raw: bytes) -> NodeEntry:
        d = json.loads(raw)
        return cls(
            index=int(d["index"]),
            host=str(d["host"]),
            hostname=str(d["hostname"]),
            pid=int(d["pid"]),
            ports=tuple(int(p) for p in d["ports"]),
            fingerprint={str(k): str(v) for k, v in d["fingerprint"].items()},
            job_id=str(d.get("job_id", "")),
        )

    @property
    def label(self) -> str:
        if self.hostname and self.hostname != self.host:
            return f"node {self.index} ({self.hostname}, {self.host})"
        return f"node {self.index} ({self.host})"


def node_label(index: int, hosts: Sequence[str]) -> str:
    """Like "node 1 (10.0.0.2)"; "node 1" while its address is unknown (torchrun style)."""
    if index < len(hosts) and hosts[index]:
        return f"node {index} ({hosts[index]})"
    return f"node {index}"


def _who(entry: NodeEntry) -> str:
    """A launcher named so that two on one machine (or in namespaces) are told apart."""
    if entry.hostname and entry.hostname != entry.host:
        return f"{entry.hostname} ({entry.host}, pid {entry.pid})"
    return f"{entry.host} (pid {entry.pid})"


def check_fingerprints(entries: Sequence[NodeEntry]) -> str | None:
    """None when all nodes agree; else one message naming the odd node and the field.

    The odd node is the one outside the majority value of the first differing field
    (ties go to node 0's value), so with two nodes node 1 is named.
    """
    if not entries:
        return None
    fields = list(entries[0].fingerprint)
    for e in entries[1:]:
        fields += [f for f in e.fingerprint if f not in fields]
    for f in fields:
        values = [e.fingerprint.get(f, "<unset>") for e in entries]
        if len(set(values)) == 1:
            continue
        counts = {v: values.count(v) for v in values}
        best = max(counts.values())
        majority = values[0] if counts[values[0]] == best else max(counts, key=counts.__getitem__)
        odd = [e for e, v in zip(entries, values, strict=True) if v != majority]
        ref = next(e for e, v in zip(entries, values, strict=True) if v == majority)
        first = odd[0]
        others = f" (and {len(odd) - 1} more)" if len(odd) > 1 else ""
        return (
            f"rendezvous: {first.label}{others} disagrees on {f}: it has "
            f"{first.fingerprint.get(f, '<unset>')!r}, {ref.label} has {majority!r}; "
            "run the same command on every node"
        )
    return None


def missing_nodes(nnodes: int, present: Sequence[int]) -> list[int]:
    return [i for i in range(nnodes) if i not in set(present)]


def describe_missing(missing: Sequence[int], hosts: Sequence[str]) -> str:
    return ", ".join(node_label(i, hosts) for i in missing)


# --- the shell ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RendezvousResult:
    """All nodes' entries, in node order; identical on every node."""

    round: int
    nodes: tuple[NodeEntry, ...]
    job_id: str  # the job id in force: the common one, or node 0's generated one
    elapsed: float

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(n.host for n in self.nodes)

    @property
    def ports(self) -> tuple[tuple[int, ...], ...]:
        return tuple(n.ports for n in self.nodes)


_COMPLETE_OK = b"ok"
_FAILED_PREFIX = b"failed:"
MISMATCH_PREFIX = b"mismatch:"  # then the message; every node exits 2
ABORTED_PREFIX = b"aborted:"  # then an encoded RootCause: a launcher stopped (a signal)


@dataclass
class Rendezvous:
    """One node's side of the meeting. `kv` is a connection to the master store (or etcd)."""

    kv: KV
    node_index: int
    nnodes: int
    hosts: Sequence[str]  # every node's address, for messages about nodes that never came
    timeout: float
    # progress(what, elapsed, timeout) about once a second while nodes are missing
    # (`progress.ProgressLine.show` decides what reaches the console)
    progress: Callable[[str, float, float], None] = field(default=lambda *a: None)
    clock: Callable[[], float] = time.monotonic
    # (round, missing nodes) -> a mismatch message when a missing node turns out to run a
    # rendezvous of its own (it read --ips in another order and believes it is node 0)
    rival_check: Callable[[int, list[int]], str | None] | None = None
    missing: list[int] = field(default_factory=list)  # last seen missing, for messages
    ticket: int | None = None  # this launcher's arrival number (its ``left/<ticket>`` key)

    def _key(self, round_: int, *parts: object) -> str:
        return "/".join(["rdzv", str(round_), *map(str, parts)])

    def join(self, entry: NodeEntry, round_: int = 0) -> RendezvousResult:
        """Meet the others; every launcher that arrived marks when it has read the verdict
        (`left/<ticket>`), so that the store's host can stay up until all have read it."""
        ticket = None
        try:
            ticket = self.ticket = self.kv.add(self._key(round_, "arrived"), 1)
            return self._join(entry, round_)
        except StoreError as exc:
            raise RendezvousError(
                f"rendezvous: lost the store at {self.kv.address} (node 0's launcher gone?): {exc}"
            ) from exc
        finally:
            if ticket is not None and getattr(self.kv, "connected", True):
                with contextlib.suppress(StoreError):
                    self.kv.set(self._key(round_, "left", ticket), b"1")

    def linger(self, round_: int, timeout: float) -> None:
        """The store's host, failing: wait (up to `timeout`) until every launcher that
        arrived has read the verdict, so that all of them print it rather than "store gone"."""
        with contextlib.suppress(StoreError, ValueError):
            arrived = int(self.kv.try_get(self._key(round_, "arrived")) or b"0")
            keys = [self._key(round_, "left", t) for t in range(1, arrived + 1)]
            wait_keys(self.kv, keys, timeout)

    def _join(self, entry: NodeEntry, round_: int) -> RendezvousResult:
        started = self.clock()
        deadline = started + self.timeout
        where = self.kv.address
        key = self._key(round_, "node", entry.index)
        mine = entry.encode()
        try:
            stored = self.kv.compare_set(key, None, mine)
            if stored != mine:
                other = NodeEntry.decode(stored)
                message = (
                    f"rendezvous: two launchers claim node index {entry.index}: "
                    f"{_who(other)} and {_who(entry)}; check --ips (same order on every node) / "
                    "--host / --node_rank on those nodes"
                )
                # Fail the whole round, so that the launcher already waiting says the same.
                self.kv.compare_set(
                    self._key(round_, "complete"), None, MISMATCH_PREFIX + message.encode()
                )
                raise FingerprintMismatch(message)
            if self.kv.add(self._key(round_, "count"), 1) == self.nnodes:
                self.kv.compare_set(self._key(round_, "complete"), None, _COMPLETE_OK)
            status = self._wait_complete(round_, started, deadline)
            if status.startswith(ABORTED_PREFIX):
                raise RendezvousAborted(status[len(ABORTED_PREFIX) :])
            if status.startswith(MISMATCH_PREFIX):
                raise FingerprintMismatch(status[len(MISMATCH_PREFIX) :].decode())
            if status.startswith(_FAILED_PREFIX):
                raise RendezvousTimeout(status[len(_FAILED_PREFIX) :].decode())
            entries = []
            for i in range(self.nnodes):
                raw = self.kv.get(
                    self._key(round_, "node", i), timeout=max(1.0, deadline - self.clock())
                )
                entries.append(NodeEntry.decode(raw))
        except StoreError as exc:
            if isinstance(exc, StoreTimeoutError) and self.clock() >= deadline:
                raise self._timeout(round_) from exc
            raise RendezvousError(
                f"rendezvous: lost the store at {where} (node 0's launcher gone?): {exc}"
            ) from exc
        problem = check_fingerprints(entries)
        if problem:
            raise FingerprintMismatch(problem)
        job_id = entries[0].fingerprint.get("job_id") or entries[0].job_id
        return RendezvousResult(round_, tuple(entries), job_id, self.clock() - started)

    def _present(self, round_: int) -> list[int]:
        return [
            i
            for i in range(self.nnodes)
            if self.kv.try_get(self._key(round_, "node", i)) is not None
        ]

    def _timeout(self, round_: int) -> RendezvousTimeout:
        missing = missing_nodes(self.nnodes, self._present(round_))
        return RendezvousTimeout(
            f"rendezvous timed out after {self.timeout:g} s (--rdzv_timeout) at the store "
            f"{self.kv.address}: {describe_missing(missing, self.hosts)} never joined; start "
            "the launcher there with the same command"
        )

    def _wait_complete(self, round_: int, started: float, deadline: float) -> bytes:
        """The value of the round's complete key: "ok", or "failed:<why>" set by a node whose
        deadline passed first (so every node prints the same verdict)."""
        complete = self._key(round_, "complete")
        next_check = started + PROGRESS_FIRST
        while True:
            now = self.clock()
            if now >= deadline:
                failure = self._timeout(round_)
                self.kv.compare_set(complete, None, _FAILED_PREFIX + str(failure).encode())
                return self.kv.get(complete, timeout=1.0)
            try:
                return self.kv.get(complete, timeout=max(0.001, min(deadline, next_check) - now))
            except StoreTimeoutError:
                pass
            now = self.clock()
            if now < next_check:
                continue
            next_check = now + 1.0
            missing = missing_nodes(self.nnodes, self._present(round_))
            self.missing = missing
            rival = self.rival_check(round_, missing) if missing and self.rival_check else None
            if rival:
                self.kv.compare_set(complete, None, MISMATCH_PREFIX + rival.encode())
                return self.kv.get(complete, timeout=1.0)
            if missing:
                self.progress(
                    f"rendezvous at {self.kv.address}: waiting for "
                    f"{describe_missing(missing, self.hosts)}",
                    now - started,
                    self.timeout,
                )


def first_difference(a: Mapping[str, str], b: Mapping[str, str]) -> str | None:
    """The first fingerprint field (in `a`'s order, then `b`'s) where the two differ."""
    for f in [*a, *(f for f in b if f not in a)]:
        if a.get(f, "<unset>") != b.get(f, "<unset>"):
            return f
    return None


def same_job(a: NodeEntry, b: NodeEntry) -> bool:
    """Whether two node-0 entries look like one job started with --ips in two orders:
    the same set of nodes and the same script."""
    fa, fb = a.fingerprint, b.fingerprint

    def nodes(fp: Mapping[str, str]) -> list[str]:
        return sorted(fp.get("ips", fp.get("nodes", "")).split(","))

    return nodes(fa) == nodes(fb) and fa.get("training script") == fb.get("training script")


def rival_message(mine: NodeEntry, theirs: NodeEntry, address: str) -> str:
    """Two launchers each hosting a rendezvous of their own: say where, and why.

    The usual cause is --ips in another order: each node then finds itself first.
    """
    f = first_difference(theirs.fingerprint, mine.fingerprint) or "ips"
    who = theirs.hostname or theirs.host
    return (
        f"rendezvous: the launcher on {who} ({theirs.host}) disagrees on {f}: it has "
        f"{theirs.fingerprint.get(f, '<unset>')!r}, {mine.hostname or mine.host} ({mine.host}) "
        f"has {mine.fingerprint.get(f, '<unset>')!r}; so both believe they are node 0 and each "
        f"hosts its own rendezvous (the other at {address}); run the same command on every node"
    )


RIVAL_PROBE_TIMEOUT = 0.2  # seconds per connection attempt to a missing node's store port


def find_rival(
    mine: NodeEntry,
    round_: int,
    hosts: Sequence[str],
    missing: Sequence[int],
    port: int,
    token: bytes | None,
) -> str | None:
    """The store's host, while nodes are missing: does one of them host a rendezvous too?

    One quick connection attempt per missing node at the launchers' store port. When a
    paddlike store answers there and holds a node 0 entry for this round, both launchers
    believe they are node 0: put the verdict into that store as well, so that its launcher
    stops with the same message, and return it.
    """
    import socket

    from paddlike.distributed.store import StoreClient

    for j in missing:
        host = hosts[j] if j < len(hosts) else ""
        if not host or host == mine.host:
            continue  # unknown yet (torchrun style), or ourselves
        try:
            socket.create_connection((host, port), timeout=RIVAL_PROBE_TIMEOUT).close()
        except OSError:
            continue  # nothing listens there: that node is simply not up yet
        try:
            kv = StoreClient(host, port, timeout=1.0, token=token, reconnect_timeout=0.0)
        except StoreError:
            continue  # not our kind of store, or another job's token: not a rival
        with kv:
            try:
                theirs = NodeEntry.decode(kv.try_get(f"rdzv/{round_}/node/0") or b"")
            except (StoreError, ValueError, KeyError):
                continue
            if theirs.host == mine.host or not same_job(mine, theirs):
                continue  # another job that happens to use this port: none of our business
            message = rival_message(mine, theirs, f"{host}:{port}")
            # The rival may have found us first and be closing its store: then this
            # write fails, but it has its verdict already.
            with contextlib.suppress(StoreError):
                kv.compare_set(f"rdzv/{round_}/complete", None, MISMATCH_PREFIX + message.encode())
            return message
    return None


def wait_keys(kv: KV, keys: Sequence[str], timeout: float) -> None:
    """Until every key exists (StoreTimeoutError after `timeout`): one `wait` call where the
    backend has it, else one waiting `get` per key under the same deadline."""
    wait = getattr(kv, "wait", None)
    if wait is not None:
        wait(list(keys), timeout=timeout)
        return
    deadline = time.monotonic() + timeout
    for k in keys:
        kv.get(k, timeout=max(0.001, deadline - time.monotonic()))


def hosts_store(master_host: str, hosts: Sequence[str], node_index: int) -> bool:
    """Whether this node hosts the launchers' store: the node whose address the master
    names (by default the first --ips entry, so node 0)."""
    import socket

    try:
        addr = socket.gethostbyname(master_host)
    except OSError as exc:
        raise RendezvousError(
            f"--master_addr: {master_host!r} does not resolve ({exc}); give an IP address"
        ) from exc
    return addr == hosts[node_index]


def host_store(
    host: str, port: int, *, allowed_hosts: Sequence[str] | None, token: bytes | None
) -> StoreServer:
    """Start node 0's store for the launchers; a taken port is a user error naming it."""
    try:
        return StoreServer(host, port, allowed_hosts=allowed_hosts, token=token).start()
    except OSError as exc:
        raise RendezvousError(
            f"--master_port: cannot host the launchers' store at {host}:{port}: "
            f"{exc.strerror or exc}; another job's store may hold it, pick another port"
        ) from exc
