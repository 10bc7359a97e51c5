"""Many-node rendezvous time and cross-node teardown latency, on network-namespace nodes.

    python bench/rendezvous.py [--runs 3] [--nodes 2,4,8,16]
    python bench/rendezvous.py --simulated 64,256,1024 [--backends store,etcd]

--simulated: N `Rendezvous` participants as threads of this process (no launchers, no
workers) against node 0's store (a child process on loopback) and a loopback etcd (when
the binary exists): time from a common start until every node has the verdict, and the
key+value bytes and store calls all nodes made, with their growth from one size to the next.

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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paddlike.distributed.store import StoreClient  # noqa: E402
from paddlike.launch.peers.etcd import EtcdStore  # noqa: E402
from paddlike.launch.peers.rendezvous import Rendezvous  # noqa: E402
from paddlike.launch.plan.world import NodeEntry  # noqa: E402
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


# --- simulated nodes: N `Rendezvous` participants in this process ------------------------

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


class CountingKV:
    """One simulated node's store connection, counting the key and value bytes it moves
    (requests and replies, without framing): the store's own byte count, computed."""

    def __init__(self, kv) -> None:  # type: ignore[no-untyped-def]
        self.kv, self.address = kv, kv.address
        self.sent = self.received = self.calls = 0
        if hasattr(kv, "missing"):  # node 0's store looks up many keys in one call; etcd not
            self.missing = self._missing

    def _missing(self, keys: list[str]) -> list[str]:
        lacking = self.kv.missing(keys)
        self.calls += 1
        self.sent += sum(len(k) for k in keys)
        self.received += sum(len(k) for k in lacking)
        return lacking

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


def _sim_entry(i: int, n: int) -> NodeEntry:
    host = f"198.18.{i // 250}.{i % 250 + 1}"
    return NodeEntry(
        i, host, f"node{i}", 1000 + i, (6170, 6171 + i), {**SIM_FINGERPRINT, "nnodes": str(n)}
    )


def simulate(n: int, connect, timeout: float) -> tuple[float, int, int, str]:  # type: ignore[no-untyped-def]
    """N launchers' rendezvous as threads of this process, against one store reached with
    `connect()`: (seconds from the common start to the last node's verdict, bytes moved,
    store calls, "" or the first error)."""
    kvs = [CountingKV(connect()) for _ in range(n)]
    hosts = [_sim_entry(i, n).host for i in range(n)]
    go = threading.Barrier(n + 1)
    errors: list[str] = []
    done: list[float] = []

    def node(i: int) -> None:
        rdzv = Rendezvous(kvs[i], i, n, hosts, timeout)
        go.wait()
        try:
            result = rdzv.join(_sim_entry(i, n))
            if len(result.nodes) != n or result.nodes[n - 1].host != hosts[n - 1]:
                errors.append(f"node {i}: wrong world")
        except Exception as exc:  # reported in the table, not raised: other sizes still run
            errors.append(f"node {i}: {type(exc).__name__}: {exc}"[:200])
        done.append(time.monotonic())

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    go.wait()
    started = time.monotonic()
    for t in threads:
        t.join(timeout + 30)
    for kv in kvs:
        with contextlib.suppress(Exception):
            kv.close()
    elapsed = (max(done) if len(done) == n else time.monotonic()) - started
    moved = sum(kv.sent + kv.received for kv in kvs)
    return elapsed, moved, sum(kv.calls for kv in kvs), errors[0] if errors else ""


@contextlib.contextmanager
def _loopback_etcd() -> Iterator[tuple[str, int]]:
    """An etcd on loopback for the simulation, killed at the end whatever happens."""
    from tests.launch.peers.test_etcd import _etcd_argv, _free_port

    with tempfile.TemporaryDirectory(prefix="bench-etcd-") as tmp:
        port = _free_port()
        argv = _etcd_argv(Path(tmp) / "etcd", "127.0.0.1", port, _free_port())
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


def _growth(rows: list[tuple[int, float, int]], i: int) -> str:
    if i == 0:
        return "-"
    (n0, t0, b0), (n1, t1, b1) = rows[i - 1], rows[i]
    k = n1 / n0
    return f"x{t1 / t0:.1f} time, x{b1 / b0:.1f} bytes for x{k:g} nodes"


# node 0's store in a process of its own, as on a cluster (there it runs in node 0's
# launcher, not in the process of the other nodes' launchers)
STORE_PROCESS = """
import sys
from paddlike.distributed.store import StoreServer
server = StoreServer("127.0.0.1", 0).start()
print(server.address[1], flush=True)
sys.stdin.read()  # until the benchmark closes our stdin (or dies)
"""


@contextlib.contextmanager
def _store_process() -> Iterator[tuple[str, int]]:
    """Node 0's store on loopback in a child process, killed at the end whatever happens."""
    argv = [PY, "-c", STORE_PROCESS]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env())
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the store process did not start")
        yield ("127.0.0.1", int(line))
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _backend(backend: str, n: int, stack: contextlib.ExitStack, timeout: float):  # type: ignore[no-untyped-def]
    """A connect() for one size: a fresh store, or a fresh key prefix on the one etcd."""
    if backend == "store":
        address = stack.enter_context(_store_process())
        return lambda: StoreClient(*address, timeout=timeout)
    endpoint = stack.enter_context(_loopback_etcd())
    return lambda: EtcdStore([endpoint], job_id=f"sim{n}", timeout=timeout)


def simulated_main(sizes: list[int], backends: list[str], timeout: float) -> None:
    """The table of simulated-node rendezvous per backend and N."""
    print(f"simulated nodes: threads of one process, {os.cpu_count()} cores, loopback; node 0's")
    print("store in a process of its own (as in node 0's launcher), etcd as a local server;")
    print("bytes = keys and values moved between the nodes and the store (both ways)\n")
    print(f"{'backend':<8} {'nodes':>6} {'time':>9} {'bytes':>13} {'calls':>10}  growth / note")
    for backend in backends:
        if backend == "etcd" and shutil.which("etcd") is None:
            print(f"{backend:<8} skipped: no etcd binary")
            continue
        rows: list[tuple[int, float, int]] = []
        for n in sizes:
            with contextlib.ExitStack() as stack:
                elapsed, moved, calls, error = simulate(
                    n, _backend(backend, n, stack, timeout), timeout
                )
            rows.append((n, elapsed, moved))
            note = error or _growth(rows, len(rows) - 1)
            goal = "  (goal <= 2 s)" if backend == "store" and n == 1024 else ""
            print(f"{backend:<8} {n:>6} {elapsed:>8.3f}s {moved:>13,} {calls:>10,}  {note}{goal}")
            sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", default="2,4,8,16")
    parser.add_argument(
        "--simulated",
        metavar="N,N,...",
        help="instead: N simulated nodes (threads of this process) per size, e.g. 64,256,1024",
    )
    parser.add_argument("--backends", default="store,etcd", help="for --simulated")
    parser.add_argument("--sim_timeout", type=float, default=60.0, help="for --simulated")
    args = parser.parse_args()
    if args.simulated:
        sizes = [int(n) for n in args.simulated.split(",")]
        simulated_main(sizes, args.backends.split(","), args.sim_timeout)
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
