"""Many-node rendezvous time and cross-node teardown latency, on network-namespace nodes.

    python bench/rendezvous.py [--runs 3] [--nodes 2,4,8]

Needs root and `ip netns` (skips with the reason otherwise). Each node is a namespace
on a private bridge (tests/netns.py); one worker per node. Rows (median of --runs):

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

from tests.netns import Cluster, netns_cluster, netns_unavailable_reason  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", default="2,4,8")
    args = parser.parse_args()
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
