"""Elastic jobs on network-namespace nodes: how long a lost node and a joining node take
to become a new round, beside a fixed job's failure restart measured in the same run.

    python bench/elastic.py [--runs 3] [--heartbeat_timeout 2] [--rdzv_last_call 1]

Needs root and `ip netns` (skips with the reason otherwise). Four namespace nodes on a
private bridge (tests/support/netns.py), one worker per node, `--nnodes 2:4` with node 0's store
(`--master NODE0:PORT`). Every worker prints, as its first act, one line per round with
its `time.time()`, and one line when its launcher stops it (SIGTERM); one machine, one
clock, so those stamps and the benchmark's own kill and start times compare directly.
A fresh set of namespaces per run and scenario; rows are medians of --runs:

- lost node: a running 4-node round; the benchmark SIGKILLs node 3's launcher (not the
  store's host). "noticed": from the kill to the first survivor's worker being stopped
  (heartbeat timeout + detection period + the stop); "new round": from the kill to the
  moment every survivor's worker of the 3-node round has started. Both are about
  --heartbeat_timeout, printed beside them: a node beats every fifth of it, and the
  silence is counted from the last beat a survivor saw, so detection falls within one
  beat period either side of the timeout (after the kill), plus the stop.
- join: a running 3-node round; a 4th launcher starts: from its start to the moment
  every worker of the 4-node round has started (its own start-up included).
- Baseline, same run: a fixed 4-node job (`--nnodes 4 --master`, `--max_restarts 1`)
  whose rank 0 exits 3: from that exit to the moment every worker of the restart round
  has started; the same stop-and-start path without a membership change.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.netns import Cluster, Node, netns_cluster, netns_unavailable_reason  # noqa: E402

PY = sys.executable
NODES = 4
PORT = 7480  # node 0's store; every run has namespaces of its own, so one port serves all

# argv: CTL. One ROUND line per round (first act), one STOP line when the launcher stops
# it; with CTL/fail, rank 0 of the first failure-restart generation records its exit and
# exits 3; every worker ends when CTL/stop exists.
WORKER = """
import os, signal, sys, time, pathlib
ctl = pathlib.Path(sys.argv[1])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
restart = int(os.environ["PADDLIKE_RESTART_COUNT"])
def stopped(signum, frame):
    print("STOP", rank, world, restart, repr(time.time()), flush=True)
    os._exit(128 + signum)
signal.signal(signal.SIGTERM, stopped)
print("ROUND", rank, world, restart, repr(time.time()), flush=True)
while not (ctl / "stop").exists():
    if restart == 0 and rank == 0 and (ctl / "fail").exists():
        (ctl / "exit_time").write_text(repr(time.time()))
        os._exit(3)
    time.sleep(0.02)
"""


@dataclass
class Mark:
    """One ROUND or STOP line of a worker log."""

    kind: str
    rank: int
    world: int
    restart: int
    time: float


def _marks(log_dir: Path, kind: str) -> list[Mark]:
    log = log_dir / "workerlog.0"
    if not log.exists():
        return []
    out = []
    for text in log.read_text().splitlines():
        f = text.split()
        if len(f) == 5 and f[0] == kind:
            out.append(Mark(kind, int(f[1]), int(f[2]), int(f[3]), float(f[4])))
    return out


def _last_round(log_dir: Path) -> Mark | None:
    rounds = _marks(log_dir, "ROUND")
    return rounds[-1] if rounds else None


class Job:
    """The launchers of one scenario, their log directories and output files."""

    def __init__(self, cluster: Cluster, work: Path, argv: Sequence[str]) -> None:
        self.cluster, self.work, self.argv = cluster, work, list(argv)
        self.ctl = work / "ctl"
        self.ctl.mkdir()
        (work / "worker.py").write_text(WORKER)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.killed: set[int] = set()

    def kill(self, i: int) -> float:
        """SIGKILL node i's launcher; return the time just before."""
        self.killed.add(i)
        killed_at = time.time()
        self.procs[i].send_signal(signal.SIGKILL)
        return killed_at

    def log_dir(self, i: int) -> Path:
        return self.work / f"log{i}"

    def start(self, i: int) -> float:
        """Start node i's launcher; return the time just before."""
        node: Node = self.cluster.nodes[i]
        argv = [PY, "-m", "paddlike.launch", *self.argv, "--nproc_per_node", "1"]
        argv += ["--log_dir", str(self.log_dir(i)), "--tee", "none", "--kill_timeout", "2"]
        argv += [str(self.work / "worker.py"), str(self.ctl)]
        started = time.time()
        with open(self.work / f"launcher{i}.out", "wb") as out:
            self.procs[i] = node.popen(argv, env=_env(), stdout=out, stderr=subprocess.STDOUT)
        return started

    def worlds(self, nodes: Sequence[int], size: int, after: float = 0.0, restart: int = 0) -> bool:
        """Every node in `nodes` has a worker of a `size`-node round started after `after`."""
        lasts = [_last_round(self.log_dir(i)) for i in nodes]
        return all(
            m is not None and m.world == size and m.time > after and m.restart == restart
            for m in lasts
        )

    def round_started(self, nodes: Sequence[int]) -> list[float]:
        return [_last_round(self.log_dir(i)).time for i in nodes]  # type: ignore[union-attr]

    def wait(self, what: str, ok: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout:g} s waiting for {what}")
            ended = {i: p.poll() for i, p in self.procs.items() if i not in self.killed}
            ended = {i: code for i, code in ended.items() if code is not None}
            if ended:
                self.fail(f"waiting for {what}, launchers ended early (node: exit code) {ended}")
            time.sleep(0.02)  # polling files the workers write: no event to wait on

    def finish(self, nodes: Sequence[int]) -> None:
        """Let the workers end; every launcher in `nodes` must exit 0."""
        (self.ctl / "stop").touch()
        codes = []
        for i in nodes:
            try:
                codes.append(self.procs[i].wait(timeout=60))
            except subprocess.TimeoutExpired:
                self.fail(f"node {i}'s launcher did not exit 60 s after the workers were told to")
        if codes != [0] * len(codes):
            self.fail(f"launchers of nodes {list(nodes)} exited {codes}, expected 0 each")

    def fail(self, message: str) -> None:
        """Stop the benchmark with the launchers' last output lines (netns_cluster then kills
        every process and removes the namespaces)."""
        tails = []
        for out in sorted(self.work.glob("launcher*.out")):
            lines = out.read_text(errors="replace").splitlines()[-6:]
            tails.append(f"--- {out.name}\n" + "\n".join(lines))
        raise SystemExit(f"bench/elastic.py: {message}\n" + "\n".join(tails))


def _env() -> dict[str, str]:
    """This environment without launcher variables (a PET_/PADDLE_ one would change the job)."""
    prefixes = ("PADDLIKE_", "PADDLE_", "PET_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _elastic_argv(cluster: Cluster, args: argparse.Namespace) -> list[str]:
    master = f"{cluster.nodes[0].addr}:{PORT}"
    argv = ["--nnodes", f"2:{NODES}", "--master", master, "--rdzv_timeout", "60"]
    argv += ["--heartbeat_timeout", f"{args.heartbeat_timeout:g}"]
    return [*argv, "--rdzv_last_call", f"{args.rdzv_last_call:g}"]


def _fresh(base: Path, name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=name, dir=base))


def _names() -> list[str]:
    return [f"node{i}" for i in range(NODES)]


def lost_node(base: Path, args: argparse.Namespace) -> tuple[float, float]:
    """(kill -> first survivor's worker stopped, kill -> every survivor's new worker started)."""
    with netns_cluster(NODES, _names()) as cluster:
        job = Job(cluster, _fresh(base, "lost"), _elastic_argv(cluster, args))
        everyone, survivors = range(NODES), range(NODES - 1)
        for i in everyone:
            job.start(i)
        job.wait(f"a round of {NODES}", lambda: job.worlds(everyone, NODES))
        killed_at = job.kill(NODES - 1)
        job.wait("the survivors' new round", lambda: job.worlds(survivors, NODES - 1, killed_at))
        stops = [
            m.time
            for i in survivors
            for m in _marks(job.log_dir(i), "STOP")
            if m.world == NODES and m.time > killed_at
        ]
        if not stops:
            job.fail("no survivor's worker of the 4-node round recorded being stopped")
        new_round = max(job.round_started(survivors)) - killed_at
        job.finish(survivors)
    return min(stops) - killed_at, new_round


def join(base: Path, args: argparse.Namespace) -> tuple[float, float]:
    """(4th launcher start -> first old worker stopped, -> every worker of 4 started)."""
    with netns_cluster(NODES, _names()) as cluster:
        job = Job(cluster, _fresh(base, "join"), _elastic_argv(cluster, args))
        first, everyone = range(NODES - 1), range(NODES)
        for i in first:
            job.start(i)
        job.wait(f"a round of {NODES - 1}", lambda: job.worlds(first, NODES - 1))
        started = job.start(NODES - 1)
        job.wait(f"the round of {NODES}", lambda: job.worlds(everyone, NODES, started))
        stops = [
            m.time
            for i in first
            for m in _marks(job.log_dir(i), "STOP")
            if m.world == NODES - 1 and m.time > started
        ]
        if not stops:
            job.fail("no worker of the 3-node round recorded being stopped")
        all_started = max(job.round_started(everyone)) - started
        job.finish(everyone)
    return min(stops) - started, all_started


def fixed_restart(base: Path, args: argparse.Namespace) -> float:
    """A fixed 4-node job's rank 0 exits 3: its exit -> every restart worker started."""
    with netns_cluster(NODES, _names()) as cluster:
        master = f"{cluster.nodes[0].addr}:{PORT}"
        argv = ["--nnodes", str(NODES), "--master", master, "--max_restarts", "1"]
        job = Job(cluster, _fresh(base, "fixed"), [*argv, "--rdzv_timeout", "60"])
        everyone = range(NODES)
        for i in everyone:
            job.start(i)
        job.wait(f"a round of {NODES}", lambda: job.worlds(everyone, NODES))
        (job.ctl / "fail").touch()
        job.wait("the restart round", lambda: job.worlds(everyone, NODES, restart=1))
        exited = float((job.ctl / "exit_time").read_text())
        restarted = max(job.round_started(everyone)) - exited
        job.finish(everyone)
    return restarted


def _row(name: str, values: list[float], baseline: float | None, what: str) -> str:
    runs = ", ".join(f"{v:.2f}" for v in values)
    base = "-" if baseline is None else f"{baseline:.3f}s"
    return f"{name:<42} {statistics.median(values):>8.3f}s {base:>9}  {what:<38} {runs}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--heartbeat_timeout", type=float, default=2.0)
    parser.add_argument("--rdzv_last_call", type=float, default=1.0)
    args = parser.parse_args()
    reason = netns_unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return
    noticed, lost, join_seen, joined, fixed = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-elastic-") as tmp:
        base = Path(tmp)
        for _ in range(args.runs):
            fixed.append(fixed_restart(base, args))
            seen, new_round = lost_node(base, args)
            noticed.append(seen)
            lost.append(new_round)
            seen, all_started = join(base, args)
            join_seen.append(seen)
            joined.append(all_started)
    hb = args.heartbeat_timeout
    base_fixed = statistics.median(fixed)
    restart = f"fixed job: exit(3) -> all {NODES} restarted"
    print(f"median of {args.runs} runs, {os.cpu_count()} cores; {NODES} namespace nodes,")
    print(f"one worker per node, --nnodes 2:{NODES}, node 0's store, --heartbeat_timeout {hb:g},")
    print(f"--rdzv_last_call {args.rdzv_last_call:g}; baseline: the same nodes as a fixed")
    print(f"--nnodes {NODES} job with --max_restarts 1 whose rank 0 exits 3 (same run)\n")
    print(f"{'measure':<42} {'paddlike':>9} {'baseline':>9}  {'baseline is':<38} runs")
    floor = "--heartbeat_timeout (+-1/5: one beat)"
    print(_row("lost node: kill -> survivors noticed", noticed, hb, floor))
    print(_row(f"lost node: kill -> {NODES - 1} new workers started", lost, base_fixed, restart))
    print(_row("  the same minus --heartbeat_timeout", [v - hb for v in lost], base_fixed, restart))
    print(_row("join: launcher start -> old round stopped", join_seen, None, "-"))
    print(_row(f"join: launcher start -> {NODES} workers started", joined, base_fixed, restart))
    print(_row("fixed job: exit(3) -> all restarted", fixed, None, "(the baseline)"))
    print('\n("survivors noticed": the first survivor\'s worker stopped by its launcher; "old')
    print(' round stopped": the first worker of the 3-node round stopped for the joining node;')
    print(" every figure includes starting Python for the new workers on these cores)")


if __name__ == "__main__":
    main()
