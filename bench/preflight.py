"""The pre-flight check's cost (issue 35): what it adds to a job's start, and its work
per node as the job grows.

    python bench/preflight.py [--runs 3] [--nodes 2,4] [--simulated 256,1024]

Namespace nodes (needs root and `ip netns`; skipped with the reason otherwise): N
launchers of one fixed job (one no-op worker each) started together, with `--preflight
on` and `--preflight off` in turns, in the same run; the time from the last launcher's
start to the last worker's start (each worker records CLOCK_MONOTONIC, shared by every
process of the machine), median of --runs, and the check's own time on the slowest node
(summary.json's preflight.seconds).

Simulated figures (no sockets): N nodes as threads run the check's exchange through the
launchers' store (`health.preflight.exchange`) against an in-memory store that counts
every call and the bytes of keys and values each node sends and receives; each node's
links are made up (one node slow) instead of measured. Then one node's verdict over all
N reports (`health.verdict.judge`), timed. Shows the calls and bytes per node and their
growth from one size to the next: calls constant, bytes O(N) (every node reads every
report, as the rendezvous's world).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paddlike.distributed.store import StoreTimeoutError  # noqa: E402
from paddlike.launch.health import preflight  # noqa: E402
from paddlike.launch.health.limits import Limits  # noqa: E402
from paddlike.launch.health.probe import LinkFigure  # noqa: E402
from paddlike.launch.health.verdict import judge  # noqa: E402
from tests.support.netns import Cluster, netns_cluster, netns_unavailable_reason  # noqa: E402

PY = sys.executable
WORKER = """
import os, sys, time
start = time.monotonic()
with open(os.path.join(sys.argv[1], "start." + os.environ["PADDLE_TRAINER_ID"]), "w") as f:
    f.write(repr(start))
"""


# --- namespace nodes ------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PADDLE_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_time(cluster: Cluster, work: Path, mode: str) -> tuple[float, float | None]:
    """(last launcher started -> last worker started, the check's longest time or None)."""
    n = len(cluster.nodes)
    ips = ",".join(node.addr for node in cluster.nodes)
    procs = []
    for i, node in enumerate(cluster.nodes):
        argv = [PY, "-m", "paddlike.launch", "--ips", ips, "--nproc_per_node", "1",
                "--preflight", mode, "--log_dir", str(work / f"log{i}"), "--tee", "none",
                str(work / "worker.py"), str(work)]  # fmt: skip
        with open(work / f"launcher{i}.err", "wb") as err:
            procs.append(node.popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=err))
    started = time.monotonic()
    codes = [p.wait(timeout=120) for p in procs]
    if codes != [0] * n:
        raise SystemExit(f"a launcher failed: exit codes {codes} (logs in {work})")
    last = max(float((work / f"start.{r}").read_text()) for r in range(n))
    checks = []
    for i in range(n):
        entry = json.loads((work / f"log{i}" / "summary.json").read_text()).get("preflight")
        if entry:
            checks.append(entry["seconds"])
    return last - started, max(checks) if checks else None


def namespace_main(nodes: list[int], runs: int) -> None:
    reason = netns_unavailable_reason()
    if reason:
        print(f"namespace nodes: skipped ({reason})")
        return
    print("| nodes | --preflight on: last launcher start -> all workers started | "
          "--preflight off (same run) | added | the check on its slowest node |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    for n in nodes:
        on, off, check = [], [], []
        with netns_cluster(n) as cluster, tempfile.TemporaryDirectory() as tmp:
            for run in range(runs):
                for mode in ("on", "off") if run % 2 == 0 else ("off", "on"):
                    work = Path(tmp) / f"{mode}{run}"
                    work.mkdir()
                    (work / "worker.py").write_text(WORKER)
                    took, seconds = start_time(cluster, work, mode)
                    (on if mode == "on" else off).append(took)
                    if seconds is not None:
                        check.append(seconds)
        a, b = statistics.median(on), statistics.median(off)
        print(
            f"| {n} | {a:.3f} s | {b:.3f} s | {a - b:+.3f} s | {statistics.median(check):.3f} s |"
        )


# --- simulated figures ----------------------------------------------------------------------


class CountingStore:
    """An in-memory store with the calls the check makes (set, get_many, try_get), counting
    each node's calls and bytes (a thread is a node)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.events: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.calls: dict[int, int] = {}
        self.bytes: dict[int, int] = {}
        self.address = "memory"

    def _count(self, n_bytes: int) -> None:
        me = threading.get_ident()
        self.calls[me] = self.calls.get(me, 0) + 1
        self.bytes[me] = self.bytes.get(me, 0) + n_bytes

    def _event(self, key: str) -> threading.Event:
        with self.lock:
            return self.events.setdefault(key, threading.Event())

    def set(self, key: str, value: bytes | str) -> None:
        value = value.encode() if isinstance(value, str) else value
        self.data[key] = value
        self._event(key).set()  # (like node 0's store: a write wakes its own key's waiters)
        self._count(len(key) + len(value))

    def try_get(self, key: str) -> bytes | None:
        self._count(len(key))
        return self.data.get(key)

    def get_many(self, keys: list[str], timeout: float | None = None) -> list[bytes]:
        deadline = time.monotonic() + (timeout or 60)
        for k in keys:
            if not self._event(k).wait(max(0.0, deadline - time.monotonic())):
                raise StoreTimeoutError(f"simulated store: no {k}")
        values = [self.data[k] for k in keys]
        self._count(sum(map(len, keys)) + sum(map(len, values)))
        return values


class NoServer:
    port = 0

    def __init__(self, host: str, allowed: object) -> None:
        pass

    def close(self) -> None:
        pass


def made_up_figures(index, hosts, ports, peers, seconds):
    """Links as a healthy network's, node 7 slow: 1.1 GB/s and 50 us, or 38 MB/s."""
    return tuple(
        LinkFigure(index, p, *((38e6, 38e6) if 7 in (index, p) else (1.1e9, 1.2e9)), 50e-6)
        for p in peers
    )


def simulate(n: int) -> tuple[float, float, float, float]:
    """(calls per node, bytes per node, CPU seconds per node in the exchange, one node's
    verdict in seconds)."""
    preflight.ProbeServer = NoServer  # type: ignore[misc]
    preflight.measure_targets = made_up_figures  # type: ignore[assignment]
    kv = CountingStore()
    hosts = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(n)]
    results: dict[int, list] = {}

    def node(i: int) -> None:
        reports = preflight.exchange(kv, 0, i, hosts, (), 8, timeout=900, limits=Limits())  # type: ignore[arg-type]
        preflight.mark_read(kv, 0, i, n, wait=False)  # type: ignore[arg-type]
        results[i] = reports

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(n)]
    cpu = time.process_time()
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    exchanged = (time.process_time() - cpu) / n  # (N nodes share one interpreter here)
    t = time.monotonic()
    verdict = judge(results[0], Limits())
    judged = time.monotonic() - t
    assert verdict.bad_nodes == (7,), verdict.lines
    return (statistics.mean(kv.calls.values()), statistics.mean(kv.bytes.values()),
            exchanged, judged)  # fmt: skip


def simulated_main(sizes: list[int]) -> None:
    print("| nodes | calls per node | bytes per node | growth in bytes | CPU per node "
          "(exchange) | one node's verdict |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    last = None
    for n in sizes:
        calls, nbytes, exchanged, judged = simulate(n)
        growth = f"x{nbytes / last[1]:.1f} for x{n / last[0]:.0f} nodes" if last else ""
        cpu = f"{exchanged * 1e3:.1f} ms"
        print(f"| {n} | {calls:.1f} | {nbytes / 1e3:.1f} KB | {growth} | {cpu} | "
              f"{judged * 1e3:.1f} ms |")  # fmt: skip
        last = (n, nbytes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nodes", default="2,4")
    ap.add_argument("--simulated", default="256,1024")
    ap.add_argument("--no_namespaces", action="store_true")
    args = ap.parse_args()
    if not args.no_namespaces:
        namespace_main([int(x) for x in args.nodes.split(",")], args.runs)
        print()
    simulated_main([int(x) for x in args.simulated.split(",")])


if __name__ == "__main__":
    main()
