"""Many-node rendezvous time and cross-node teardown latency, on network-namespace nodes.

    python bench/rendezvous.py [--runs 3] [--nodes 2,4,8,16]
    python bench/rendezvous.py --simulated 1024,4096 [--backends store,etcd] [--no_baseline]

--simulated: N `Rendezvous` participants (no launchers, no workers) against node 0's
store (a child process on loopback) and a loopback etcd (when the binary exists): time
from a common start until every node has the verdict, and the key+value bytes and store
calls per node, with their growth from one size to the next. The participants are
threads of driver processes, 256 nodes each, each node with a connection of its own:
thousands of threads in one interpreter would measure that interpreter's lock, which
N launchers on N machines do not share. Each size runs the previous protocol in the
same run as the baseline (`PreviousRendezvous`; on node 0's store also the previous
store server, read from git at PREVIOUS_STORE_REV: a thread per connection, every write
waking every waiter); on etcd also the previous client (`PreviousEtcdStore`: counters by
compare-and-swap on one key, N reads for the last arrival).

Needs root and `ip netns` (skips with the reason otherwise). Each node is a namespace
on a private bridge (tests/support/netns.py); one worker per node. Rows (median of --runs):

- rendezvous N nodes: from the moment the last of N launchers was started to the
  moment the last worker started (each worker records CLOCK_MONOTONIC, system-wide,
  as its first act). Baseline, same run: the same N workers started directly with
  `ip netns exec` (no launcher), timed the same way; the difference is the launcher
  (start-up, store, rendezvous, planning, spawning). Target (issue 3): <= 0.5 s.
- teardown N nodes: the worker on the last node exits 3 once every worker runs;
  from its exit to the moment every launcher has exited. Baseline, same run: the
  same on one node (a one-node launcher, no store). Target: <= 1 s.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paddlike.distributed.store import StoreClient, StoreError, StoreTimeoutError  # noqa: E402
from paddlike.launch.peers import protocol  # noqa: E402
from paddlike.launch.peers.etcd import EtcdStore  # noqa: E402
from paddlike.launch.peers.rendezvous import Rendezvous  # noqa: E402
from paddlike.launch.peers.rendezvous_errors import FingerprintMismatch  # noqa: E402
from paddlike.launch.plan.agreement import claim_message, job_id_in_force  # noqa: E402
from paddlike.launch.plan.world import NodeEntry, RendezvousResult  # noqa: E402
from tests.support.netns import Cluster, netns_cluster, netns_unavailable_reason  # noqa: E402

PY = sys.executable

# argv: DIR MODE NNODES. Records its start; in "fail" mode the last rank exits 3 once
# all ranks have started (recording when), the others wait to be stopped.
WORKER = """
import os, sys, time
start = time.monotonic()
d, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank = int(os.environ["PADDLE_TRAINER_ID"])
with open(os.path.join(d, f"start.{rank}"), "w") as f:
    f.write(repr(start))
if mode == "fail":
    if rank != n - 1:
        time.sleep(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(d, f"start.{r}")) for r in range(n)):
        time.sleep(0.002)
    with open(os.path.join(d, "exit_time"), "w") as f:
        f.write(repr(time.monotonic()))
    os._exit(3)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PADDLE_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _last_start(d: Path, n: int) -> float:
    return max(float((d / f"start.{r}").read_text()) for r in range(n))


def _launchers(cluster: Cluster, work: Path, mode: str) -> tuple[list[subprocess.Popen], float]:
    n = len(cluster.nodes)
    ips = ",".join(node.hostname for node in cluster.nodes)
    procs = []
    for i, node in enumerate(cluster.nodes):
        argv = [PY, "-m", "paddlike.launch", "--ips", ips, "--nproc_per_node", "1"]
        argv += ["--log_dir", str(work / f"log{i}"), "--tee", "none"]
        argv += [str(work / "worker.py"), str(work), mode, str(n)]
        with open(work / f"launcher{i}.err", "wb") as err:
            procs.append(node.popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=err))
    return procs, time.monotonic()


def _store_part(work: Path, n: int) -> float:
    """The longest "rendezvous ... took X s" the launchers printed: the meeting itself."""
    took = []
    for i in range(n):
        for line in (work / f"launcher{i}.err").read_text().splitlines():
            if " took " in line and "rendezvous" in line:
                took.append(float(line.rsplit(" took ", 1)[1].split()[0]))
    return max(took)


def rendezvous_time(cluster: Cluster, work: Path) -> tuple[float, float]:
    """(last launcher started -> last worker started, the launchers' own meeting time)."""
    procs, started = _launchers(cluster, work, "noop")
    codes = [p.wait(timeout=120) for p in procs]
    if codes != [0] * len(procs):
        raise SystemExit(f"a launcher failed: exit codes {codes} (logs in {work})")
    return _last_start(work, len(procs)) - started, _store_part(work, len(procs))


def direct_time(cluster: Cluster, work: Path) -> float:
    procs = []
    for i, node in enumerate(cluster.nodes):
        env = {**_env(), "PADDLE_TRAINER_ID": str(i)}
        argv = [PY, str(work / "worker.py"), str(work), "noop", str(len(cluster.nodes))]
        procs.append(node.popen(argv, env=env))
    started = time.monotonic()
    for p in procs:
        p.wait(timeout=60)
    return _last_start(work, len(procs)) - started


def teardown_time(cluster: Cluster, work: Path) -> float:
    procs, _ = _launchers(cluster, work, "fail")
    ended: list[float] = []

    def reap(p: subprocess.Popen) -> None:
        p.wait(timeout=120)
        ended.append(time.monotonic())

    threads = [threading.Thread(target=reap, args=(p,)) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(p.returncode == 0 for p in procs):
        raise SystemExit(f"a launcher succeeded where all should fail (logs in {work})")
    return max(ended) - float((work / "exit_time").read_text())


def _fresh(base: Path, name: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=name, dir=base))
    (d / "worker.py").write_text(WORKER)
    return d


def _ok(value: float, target: float) -> str:
    return "ok" if value <= target else "SLOW"


# --- simulated nodes: N `Rendezvous` participants, threads of a few processes ------------

SIM_FINGERPRINT = {  # about the size of a launcher's real fingerprint
    "nnodes": "",
    "nproc_per_node": "8",
    "training script": "/home/user/project/train.py",
    "script args": "--epochs 10 --batch-size 64",
    "devices": "gpu",
    "run_mode": "collective",
    "job_id": "",
    "paddlike": "0.1.0",
}
_SIM = {"nodes_per_process": 256}  # simulated nodes per driver process (--nodes_per_process)


class CountingKV:
    """One simulated node's store connection, counting the key and value bytes it moves
    (requests and replies, without framing): the store's own byte count, computed."""

    def __init__(self, kv) -> None:  # type: ignore[no-untyped-def]
        self.kv, self.address = kv, kv.address
        self.sent = self.received = self.calls = 0
        if hasattr(kv, "missing"):  # node 0's store looks up many keys in one call; etcd too
            self.missing = self._missing
        if hasattr(kv, "get_many"):
            self.get_many = self._get_many
        if hasattr(kv, "arrive_and_claim"):  # etcd: an arrival in one transaction
            self.arrive_and_claim = self._arrive_and_claim

    def _arrive_and_claim(
        self, arrived: str, key: str, value: bytes, count: str
    ) -> tuple[int, bytes, int | None]:
        got = self.kv.arrive_and_claim(arrived, key, value, count)
        self._count(arrived + key + count, value, b"%d" % got[0] + got[1] + b"%d" % (got[2] or 0))
        return got

    def _missing(self, keys: list[str]) -> list[str]:
        lacking = self.kv.missing(keys)
        self.calls += 1
        self.sent += sum(len(k) for k in keys)
        self.received += sum(len(k) for k in lacking)
        return lacking

    def _get_many(self, keys: list[str], timeout: float | None = None) -> list[bytes]:
        values = self.kv.get_many(keys, timeout=timeout)
        self.calls += 1
        self.sent += sum(len(k) for k in keys)
        self.received += sum(len(v) for v in values)
        return values

    def _count(self, key: str, value: bytes | str | None = None, reply: bytes | None = None):  # type: ignore[no-untyped-def]
        self.calls += 1
        self.sent += len(key) + (len(value) if value is not None else 0)
        self.received += len(reply) if reply is not None else 0
        return reply

    def set(self, key: str, value: bytes | str) -> None:
        self.kv.set(key, value)
        self._count(key, value)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        return self._count(key, reply=self.kv.get(key, timeout=timeout))

    def try_get(self, key: str) -> bytes | None:
        return self._count(key, reply=self.kv.try_get(key))

    def add(self, key: str, amount: int = 1) -> int:
        value = self.kv.add(key, amount)
        self._count(key, b"%d" % amount, b"%d" % value)
        return value

    def compare_set(self, key: str, expected: bytes | None, desired: bytes) -> bytes:
        got = self.kv.compare_set(key, expected, desired)
        self._count(key, (expected or b"") + desired, got)
        return got

    def close(self) -> None:
        self.kv.close()


class PreviousRendezvous(Rendezvous):
    """The previous protocol, kept here as the same-run baseline: the last arrival reads
    the N entries with one `get` each (N store calls in a row) before writing the world."""

    def _join(self, entry: NodeEntry, round_: int) -> RendezvousResult:
        started = self.clock()
        deadline = started + self.timeout
        mine = protocol.encode_entry(entry)
        complete = protocol.complete_key(round_)
        try:
            self.ticket = self.kv.add(protocol.arrived_key(round_), 1)
            stored = self.kv.compare_set(protocol.node_key(round_, entry.index), None, mine)
            if stored != mine:
                raise FingerprintMismatch(claim_message(protocol.decode_entry(stored), entry))
            if self.kv.add(protocol.count_key(round_), 1) == self.nnodes:
                left = max(1.0, deadline - self.clock())
                everyone = [
                    protocol.decode_entry(self.kv.get(protocol.node_key(round_, i), timeout=left))
                    for i in range(self.nnodes)
                ]
                self.kv.set(protocol.world_key(round_), protocol.encode_world(everyone))
                self.kv.compare_set(complete, None, protocol.COMPLETE_OK)
            protocol.check_verdict(self._wait_complete(round_, started, deadline))
            left = max(1.0, deadline - self.clock())
            entries = protocol.decode_world(self.kv.get(protocol.world_key(round_), timeout=left))
        except StoreError as exc:
            raise self._store_failed(exc, round_, deadline) from exc
        return RendezvousResult(
            round_, entries, job_id_in_force(entries), self.clock() - started, entry.index
        )


def _named_absent(self: Rendezvous, round_: int, named: bool = False) -> str | None:
    """The previous progress look: the missing nodes by name each second, even while
    nodes still arrive (a read of every entry per node per second)."""
    return Rendezvous._absent(self, round_, named=True)


PreviousRendezvous._absent = _named_absent  # type: ignore[method-assign]


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PreviousEtcdStore(EtcdStore):
    """The previous etcd client, kept here as the same-run baseline: kept-alive connections
    as now, but counters by compare-and-swap on one key (retried until it wins: O(N)
    tries per arrival), a watch opened anew for each wait, and the last arrival's N
    entries read with one `get` each."""

    def _open(self, path: str, body: dict, timeout: float):  # type: ignore[no-untyped-def]
        """The previous watch's connection: urllib, a new one per wait, no proxy."""
        host, port = self.endpoints[0]
        req = urllib.request.Request(
            f"http://{host}:{port}/v3/{path}", data=json.dumps(body).encode(), method="POST"
        )
        req.add_header("Content-Type", "application/json")
        return _DIRECT.open(req, timeout=max(0.05, timeout))

    def _range(self, key: str) -> tuple[dict | None, int]:
        r = self._call("kv/range", {"key": self._k(key)})
        kvs = r.get("kvs") or []
        return (kvs[0] if kvs else None), int(r.get("header", {}).get("revision", 0))

    def add(self, key: str, amount: int = 1) -> int:
        deadline = time.monotonic() + 10 * self.io_timeout
        while True:
            kv, _ = self._range(key)
            if kv is None:
                compare = {"key": self._k(key), "result": "EQUAL", "target": "CREATE"}
                compare["create_revision"] = "0"
                old = 0
            else:
                compare = {"key": self._k(key), "result": "EQUAL", "target": "MOD"}
                compare["mod_revision"] = kv.get("mod_revision", "0")
                old = int(base64.b64decode(kv.get("value") or ""))
            txn = {
                "compare": [compare],
                "success": [{"request_put": self._put_op(key, str(old + amount).encode())}],
            }
            if self._call("kv/txn", txn).get("succeeded"):
                return old + amount
            if time.monotonic() > deadline:
                raise StoreTimeoutError(f"add to etcd key {key!r}: too much contention")

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """A watch opened anew for each wait (urllib), from the revision of the miss."""
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        while True:
            kv, revision = self._range(key)
            if kv is not None:
                return base64.b64decode(kv.get("value") or "")
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreTimeoutError(f"key {key!r} did not appear within {t:g} s")
            body = {"create_request": {"key": self._k(key), "start_revision": str(revision + 1)}}
            with contextlib.suppress(OSError, ValueError), self._open("watch", body, left) as resp:
                while time.monotonic() < deadline:
                    line = resp.readline()
                    if not line:
                        break
                    events = json.loads(line).get("result", {}).get("events") or []
                    puts = [e for e in events if e.get("type", "PUT") == "PUT"]
                    if puts:
                        return base64.b64decode(puts[0]["kv"].get("value") or "")

    def get_many(self, keys: list[str], timeout: float | None = None) -> list[bytes]:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        return [self.get(k, timeout=max(0.001, deadline - time.monotonic())) for k in keys]


def _sim_entry(i: int, n: int) -> NodeEntry:
    host = f"198.18.{i // 250}.{i % 250 + 1}"
    return NodeEntry(
        i, host, f"node{i}", 1000 + i, (6170, 6171 + i), {**SIM_FINGERPRINT, "nnodes": str(n)}
    )


def _connect(spec: dict):  # type: ignore[no-untyped-def]
    if spec["backend"] == "store":
        return StoreClient(*spec["address"], timeout=spec["timeout"])
    kind = PreviousEtcdStore if spec["previous"] else EtcdStore
    return kind([tuple(spec["address"])], job_id=spec["job_id"], timeout=spec["timeout"])


def sim_driver(spec: dict) -> dict:
    """One driver process: its share of the N nodes as threads, each with its own store
    connection, started together when the parent writes "go"; what they moved and when
    the last had its verdict (CLOCK_MONOTONIC, which every process of the machine shares)."""
    n, timeout = spec["n"], spec["timeout"]
    kind = PreviousRendezvous if spec["previous"] else Rendezvous
    hosts = [_sim_entry(i, n).host for i in range(n)]
    kvs = {i: CountingKV(_connect(spec)) for i in spec["nodes"]}
    go = threading.Event()
    errors: list[str] = []
    done: list[float] = []

    def node(i: int) -> None:
        rdzv = kind(kvs[i], i, n, hosts, timeout)
        go.wait()
        try:
            result = rdzv.join(_sim_entry(i, n))
            if len(result.nodes) != n or result.nodes[n - 1].host != hosts[n - 1]:
                errors.append(f"node {i}: wrong world")
        except Exception as exc:  # reported in the table, not raised: other sizes still run
            errors.append(f"node {i}: {type(exc).__name__}: {exc}"[:200])
        done.append(time.monotonic())

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in kvs]
    for t in threads:
        t.start()
    print("ready", flush=True)
    sys.stdin.readline()
    go.set()
    for t in threads:
        t.join(timeout + 30)
    for kv in kvs.values():
        with contextlib.suppress(Exception):
            kv.close()
    return {
        "last": max(done) if len(done) == len(kvs) else None,
        "bytes": sum(kv.sent + kv.received for kv in kvs.values()),
        "calls": sum(kv.calls for kv in kvs.values()),
        "error": errors[0] if errors else "",
    }


class SimResult(NamedTuple):
    elapsed: float  # from the common start to the last node's verdict (or the give-up)
    moved: int  # key and value bytes, both ways, all nodes
    calls: int
    error: str
    server_cpu: float | None = None  # CPU seconds the store's process spent meanwhile


def _cpu_seconds(pid: int | None) -> float | None:
    """user + system CPU seconds of process `pid` so far (None: not ours to measure)."""
    if pid is None:
        return None
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def simulate(n: int, spec: dict, previous: bool, server_pid: int | None = None) -> SimResult:
    """N nodes' rendezvous against one store, as threads of ceil(N / NODES_PER_PROCESS)
    driver processes started beforehand and released together."""
    share = -(-n // _SIM["nodes_per_process"])
    drivers = []
    try:
        for k in range(share):
            nodes = list(range(k, n, share))
            argv = [PY, __file__, "--_sim_driver"]
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env(), text=True
            )
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps({**spec, "n": n, "nodes": nodes, "previous": previous}))
            proc.stdin.write("\n")
            proc.stdin.flush()
            drivers.append(proc)
        for proc in drivers:
            if proc.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
                raise SystemExit("a simulation driver did not start")
        cpu_before = _cpu_seconds(server_pid)
        started = time.monotonic()
        for proc in drivers:
            proc.stdin.write("go\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        reports = [json.loads(proc.stdout.readline()) for proc in drivers]  # type: ignore[union-attr]
        cpu_after = _cpu_seconds(server_pid)
    finally:
        for proc in drivers:
            _stop(proc)
    lasts = [r["last"] for r in reports]
    elapsed = (max(lasts) if None not in lasts else time.monotonic()) - started
    error = next((r["error"] for r in reports if r["error"]), "")
    server_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return SimResult(
        elapsed,
        sum(r["bytes"] for r in reports),
        sum(r["calls"] for r in reports),
        error,
        server_cpu,
    )


def _etcd_port() -> int:
    """A port with its neighbour free (etcd's peer port), below the ephemeral range."""
    from tests.support.fixed_ports import fixed_ports

    return fixed_ports(2)


@contextlib.contextmanager
def _loopback_etcd() -> Iterator[tuple[str, int]]:
    """An etcd on loopback for the simulation, killed at the end whatever happens."""
    from tests.launch.peers.test_etcd import _etcd_argv

    with tempfile.TemporaryDirectory(prefix="bench-etcd-") as tmp:
        port = _etcd_port()
        argv = _etcd_argv(Path(tmp) / "etcd", "127.0.0.1", port, port + 1)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    url = f"http://127.0.0.1:{port}/health"
                    with urllib.request.urlopen(url, timeout=1) as r:
                        if json.loads(r.read()).get("health") == "true":
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("etcd did not become healthy in 20 s")
                time.sleep(0.05)  # etcd's health endpoint offers nothing to wait on
            yield ("127.0.0.1", port)
        finally:
            _stop(proc)


# node 0's store in a process of its own, as on a cluster (there it runs in node 0's
# launcher, not in the process of the other nodes' launchers); argv[1]: the directory of
# the store package to serve with ("" for this one)
STORE_PROCESS = """
import sys
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])
    from prevstore import StoreServer
else:
    from paddlike.distributed.store import StoreServer
server = StoreServer("127.0.0.1", 0).start()
print(server.address[1], flush=True)
sys.stdin.read()  # until the benchmark closes our stdin (or dies)
"""
# The store as it was before the per-key wake-ups, get_many and the one serving thread
# (a thread per connection, every write waking every waiter): the baseline's server,
# read from git so that the package keeps no copy of it.
PREVIOUS_STORE_REV = "0d960f4"


def _previous_store(tmp: Path) -> Path:
    """The previous store package, as `prevstore` under `tmp`."""
    package = tmp / "prevstore"
    package.mkdir()
    for name in ("__init__", "wire", "commands", "server", "client"):
        path = f"{PREVIOUS_STORE_REV}:paddlike/distributed/store/{name}.py"
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", path], check=True, capture_output=True, text=True
        ).stdout
        (package / f"{name}.py").write_text(text)
    return tmp


@contextlib.contextmanager
def _store_process(previous: bool) -> Iterator[tuple[tuple[str, int], int]]:
    """Node 0's store on loopback in a child process, killed at the end whatever happens."""
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        where = str(_previous_store(Path(tmp))) if previous else ""
        argv = [PY, "-c", STORE_PROCESS, where]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env())
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("the store process did not start")
            yield ("127.0.0.1", int(line)), proc.pid
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _run(backend: str, n: int, timeout: float, previous: bool) -> SimResult:
    """One size, one protocol: a fresh store (or etcd) for it."""
    with contextlib.ExitStack() as stack:
        pid = None
        if backend == "store":
            address, pid = stack.enter_context(_store_process(previous))
        else:
            address = stack.enter_context(_loopback_etcd())
        spec = {"backend": backend, "address": address, "timeout": timeout, "job_id": f"sim{n}"}
        return simulate(n, spec, previous, server_pid=pid)


def _cell(r: SimResult, n: int) -> str:
    if r.error:
        return f"{r.elapsed:.2f} s, failed: {r.error[:90]}"
    cpu = f", store CPU {r.server_cpu:.2f} s" if r.server_cpu is not None else ""
    return f"{r.elapsed:.3f} s, {r.moved / n:,.0f} B/node, {r.calls / n:.1f} calls/node{cpu}"


def simulated_main(sizes: list[int], backends: list[str], timeout: float, baseline: bool) -> None:
    """The table of simulated-node rendezvous per backend and N, the previous protocol
    (and, for node 0's store, the previous store server) in the same run."""
    cores, each = os.cpu_count(), _SIM["nodes_per_process"]
    print(f"simulated nodes: threads of driver processes ({each} nodes each, each")
    print(f"with its own connection), released together; loopback, {cores} cores; node 0's")
    print("store in a process of its own (as in node 0's launcher), etcd a local server;")
    print("bytes = keys and values moved between the nodes and the store (both ways); time =")
    print("from the common start to the last node's verdict; store CPU = the CPU seconds")
    print("node 0's store process spent meanwhile (on a cluster, the nodes' share of the")
    print("time runs on their own machines: this is node 0's part of it)\n")
    head = (
        f"{'backend':<8} {'nodes':>6} {'time':>8} {'store CPU':>9} {'bytes/node':>11} "
        f"{'calls/node':>10}"
    )
    print(f"{head}  growth (x nodes: time, bytes/node) | previous protocol, same run (ratio)")
    for backend in backends:
        if backend == "etcd" and shutil.which("etcd") is None:
            print(f"{backend:<8} skipped: no etcd binary")
            continue
        rows: list[tuple[int, SimResult]] = []
        for n in sizes:
            r = _run(backend, n, timeout, previous=False)
            rows.append((n, r))
            growth = "-"
            if len(rows) > 1:
                n0, r0 = rows[-2]
                growth = (
                    f"x{n / n0:g}: x{r.elapsed / r0.elapsed:.1f}, "
                    f"x{(r.moved / n) / (r0.moved / n0):.1f}"
                )
            cpu = f"{r.server_cpu:>8.2f}s" if r.server_cpu is not None else f"{'-':>9}"
            line = (
                f"{backend:<8} {n:>6} {r.elapsed:>7.3f}s {cpu} {r.moved / n:>11,.0f} "
                f"{r.calls / n:>10.1f}  {r.error[:100] or growth}"
            )
            print(line, flush=True)
            if baseline:
                old = _run(backend, n, timeout, previous=True)
                ratio = f" (x{old.elapsed / r.elapsed:.1f} the time)" if not old.error else ""
                print(f"{'':<8} {'':>6} previous: {_cell(old, n)}{ratio}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", default="2,4,8,16")
    parser.add_argument(
        "--simulated",
        metavar="N,N,...",
        help="instead: N simulated nodes (threads of driver processes) per size, e.g. 1024,4096",
    )
    parser.add_argument("--backends", default="store,etcd", help="for --simulated")
    parser.add_argument("--sim_timeout", type=float, default=60.0, help="for --simulated")
    parser.add_argument(
        "--no_baseline", action="store_true", help="for --simulated: not the previous protocol"
    )
    parser.add_argument(
        "--nodes_per_process", type=int, default=_SIM["nodes_per_process"], help="for --simulated"
    )
    parser.add_argument("--_sim_driver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._sim_driver:  # one driver process of --simulated: its spec on stdin
        print(json.dumps(sim_driver(json.loads(sys.stdin.readline()))), flush=True)
        return
    if args.simulated:
        _SIM["nodes_per_process"] = args.nodes_per_process
        sizes = [int(n) for n in args.simulated.split(",")]
        simulated_main(sizes, args.backends.split(","), args.sim_timeout, not args.no_baseline)
        return
    reason = netns_unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return
    sizes = [int(n) for n in args.nodes.split(",")]
    rows: list[tuple[str, float, float, str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-rdzv-") as tmp:
        base = Path(tmp)
        for n in sizes:
            names = [f"node{i}" for i in range(n)]
            with netns_cluster(n, names) as cluster:
                rdzv, meet, direct, down = [], [], [], []
                for _ in range(args.runs):
                    direct.append(direct_time(cluster, _fresh(base, "direct")))
                    total, store_part = rendezvous_time(cluster, _fresh(base, "rdzv"))
                    rdzv.append(total)
                    meet.append(store_part)
                    down.append(teardown_time(cluster, _fresh(base, "down")))
                rows.append(
                    (
                        f"rendezvous, {n} nodes",
                        statistics.median(rdzv),
                        statistics.median(direct),
                        "direct ip netns exec",
                        0.5,
                    )
                )
                rows.append(("  of which meeting", statistics.median(meet), 0.0, "-", 0.5))
                rows.append((f"teardown, {n} nodes", statistics.median(down), 0.0, "", 1.0))
        with netns_cluster(1, ["solo"]) as cluster:
            solo = [teardown_time(cluster, _fresh(base, "solo")) for _ in range(args.runs)]
        one = statistics.median(solo)
        rows = [(r[0], r[1], one, "one-node launcher", r[4]) if r[3] == "" else r for r in rows]
    print(f"median of {args.runs} runs, {os.cpu_count()} cores; one worker per node")
    print('("of which meeting": the longest time a launcher spent in the rendezvous itself;')
    print(" the rest is N launchers and N workers starting Python on these cores)\n")
    print(f"{'measure':<22} {'paddlike':>9} {'baseline':>9}  {'baseline is':<22} target")
    for name, value, baseline, what, target in rows:
        print(
            f"{name:<22} {value:>8.3f}s {baseline:>8.3f}s  {what:<22} "
            f"<= {target:g} s {_ok(value, target)}"
        )


if __name__ == "__main__":
    main()
