"""Faults on many nodes, injected at a seeded random moment into a real job on namespace
nodes (issue 27): the fault x mode table, one trial at a time, and what a trial must show
to hold. Used by tests/e2e/nodes/test_faults.py (one trial per fixed fault) and by
`make chaos` (bench/chaos.py: every cell, several trials).

The job: NODES namespace nodes, one CPU worker each, examples/elastic_train.py (an
all_reduce per step, a checkpoint every 5 steps on storage every node sees);
--heartbeat_timeout 3; a fixed job with --max_restarts 1, or an elastic one with
--nnodes 2:4. Every launcher's output goes to a file; a trial waits until every node runs
its worker, waits a random moment, injects the fault and waits for every launcher to
exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.netns import Cluster, Node, _ip, netns_cluster

REPO = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-m", "paddlike.launch"]
NODES = 4
HEARTBEAT = 3.0
STEPS, STEP_TIME = 120, 0.05  # about 6 s of training when nothing happens
FAULTS = (
    "kill worker",
    "kill launcher",
    "kill node 0",
    "cut network",
    "sigterm launcher",
    "sigterm node 0",
    "full disk",
    "raise in a rank",
    "stop a rank",
    "preempt a node",
)
MODES = ("fixed", "elastic")
DISK = "1m"  # the full-disk node's log directory: a tmpfs this small
RAISER = REPO / "tests" / "support" / "fault_workers" / "raise_train.py"  # "raise in a rank"
HANG = ["--hang_timeout", "5", "--on_hang", "abort"]  # "stop a rank"


class Trial:
    """One fault in one job: what every node did."""

    def __init__(self, fault: str, mode: str, seed: int, victim: int, addrs: list[str]) -> None:
        self.fault, self.mode, self.seed, self.victim, self.addrs = fault, mode, seed, victim, addrs
        self.codes: list[int | None] = []
        self.outs: list[str] = []
        self.summaries: list[dict | None] = []
        self.leftovers: list[str] = []  # processes, temporary files, mounts left behind
        self.exited_after: float | None = None  # fault -> every launcher exited, seconds
        self.started = False
        self.log_dirs: list[str] = []
        self.rank: int | None = None  # the rank that raised, or was stopped
        self.worker_logs: list[str] = []  # each node's workers' logs, read before cleanup

    def cause(self, node: int) -> dict:
        s = self.summaries[node]
        return (s or {}).get("root_cause") or {}

    def last_lines(self, node: int, n: int = 6) -> str:
        return "\n".join(self.outs[node].splitlines()[-n:])

    def describe(self) -> str:
        parts = [f"{self.fault} / {self.mode} (seed {self.seed}, node {self.victim})"]
        for i, out in enumerate(self.outs):
            s = self.summaries[i] or {}
            parts.append(
                f"-- node {i} exit {self.codes[i]} status {s.get('status')} cause "
                f"{self.cause(i).get('reason')!r}\n" + "\n".join(out.splitlines()[-8:])
            )
        return "\n".join(parts)


def _argv(
    mode: str, log_dir: Path, ckpt: Path, addrs: list[str], extra: tuple[list[str], list[str]]
) -> list[str]:
    """`extra`: the launcher's and the script's further arguments (a fault's own)."""
    argv = [*LAUNCH, "--devices", "cpu", "--nproc_per_node", "1", "--log_dir", str(log_dir)]
    argv += ["--heartbeat_timeout", f"{HEARTBEAT:g}", "--max_restarts", "1"]
    argv += ["--kill_timeout", "2", "--rdzv_timeout", "30"]
    # (issue 35) the pre-flight check would refuse the full-disk trial's 1 MB log disk at
    # the start: these trials fault a running job
    argv += ["--preflight_limits", "disk_gb=0"]
    if mode == "fixed":
        argv += ["--ips", ",".join(addrs)]
    else:
        argv += ["--nnodes", f"2:{NODES}", "--master", f"{addrs[0]}:6170"]
        argv += ["--rdzv_last_call", "3"]
    script = RAISER if extra[1] else REPO / "examples" / "elastic_train.py"
    argv += [*extra[0], str(script), *extra[1], "--steps", str(STEPS), "--checkpoint_every", "5"]
    return [*argv, "--checkpoint", str(ckpt), "--step_time", str(STEP_TIME)]


def _start(node: Node, argv: list[str], out: Path, disk: Path | None) -> subprocess.Popen:
    """A launcher on `node`; with `disk`, its log directory is a small tmpfs in a mount
    namespace of its own, copied to `disk` when the launcher exits (the tmpfs goes then)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    with open(out, "wb") as f:
        if disk is None:
            return node.popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
        log_dir = argv[argv.index("--log_dir") + 1]
        quoted = " ".join(f"'{a}'" for a in argv)
        script = (
            f"mkdir -p '{log_dir}' && mount -t tmpfs -o size={DISK} tmpfs '{log_dir}' || exit 99; "
            f"{quoted}; rc=$?; rm -f '{log_dir}/fill'; cp -a '{log_dir}/.' '{disk}'; exit $rc"
        )
        wrapped = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
        return node.popen(wrapped, stdout=f, stderr=subprocess.STDOUT, env=env)


def _summary(path: Path, via: int | None = None) -> dict | None:
    """summary.json, read directly or (`via`: a pid) inside that process's mount namespace."""
    try:
        if via is None:
            return json.loads(path.read_text())
        done = subprocess.run(
            ["nsenter", "-t", str(via), "-m", "cat", str(path)],
            capture_output=True, timeout=5, check=False,
        )  # fmt: skip
        return json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def _stepped(log_dir: Path) -> bool:
    """The node's rank made a step (its progress file is there): a notice then finds it
    training. (One that comes before a rank's first `should_stop` only SIGTERMs that rank.)"""
    return any((log_dir / ".progress").glob("rank.*"))


def _running(summary: dict | None) -> bool:
    if not summary or summary.get("status") != "running" or summary.get("nnodes") != NODES:
        return False
    return any(p.get("pid") for p in summary.get("processes", []))


def run_trial(
    fault: str, mode: str, seed: int, workdir: Path, timeout: float = 120, slow_exit: float = 0
) -> Trial:
    """One trial of `fault` in a `mode` job; `seed` picks the node and the moment;
    `slow_exit`: a raising rank lingers so long at exit, after closing its connections."""
    rng = random.Random(seed)
    victim = rng.randrange(NODES) if fault in ("kill worker", "full disk") else 0
    if fault in ("kill launcher", "cut network", "sigterm launcher"):
        victim = rng.randrange(1, NODES)
    if fault == "preempt a node":  # any node, node 0 (the store's) included
        victim = rng.randrange(NODES)
    delay = rng.uniform(0.3, 3.0)
    extra: tuple[list[str], list[str]] = (HANG if fault == "stop a rank" else [], [])
    if fault == "raise in a rank":  # the rank (== its node in a fixed job) and the step
        extra = ([], ["--raise_rank", str(victim), "--raise_step", str(rng.randrange(8, 40))])
        extra[1].extend(["--slow_exit", str(slow_exit)] if slow_exit else [])
    workdir.mkdir(parents=True, exist_ok=True)
    ckpt = workdir / "ckpt"
    ckpt.mkdir(exist_ok=True)
    with netns_cluster(NODES) as cluster:
        addrs = [n.addr for n in cluster.nodes]
        trial = Trial(fault, mode, seed, victim, addrs)
        logs = [workdir / f"log{i}" for i in range(NODES)]
        trial.log_dirs = [str(d) for d in logs]
        outs = [workdir / f"out{i}.txt" for i in range(NODES)]
        disk = workdir / "disk-copy" if fault == "full disk" else None
        if disk is not None:
            disk.mkdir(exist_ok=True)
        procs = [
            _start(
                node,
                _argv(mode, logs[i], ckpt, addrs, extra),
                outs[i],
                disk if i == victim else None,
            )
            for i, node in enumerate(cluster.nodes)
        ]
        exited: list[float | None] = [None] * NODES
        exited_wall = [0.0] * NODES

        def wait(i: int) -> None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                procs[i].wait(timeout=timeout + 60)
            exited[i], exited_wall[i] = time.monotonic(), time.time()

        waiters = [threading.Thread(target=wait, args=(i,), daemon=True) for i in range(NODES)]
        for w in waiters:
            w.start()
        via = [procs[i].pid if disk is not None and i == victim else None for i in range(NODES)]
        summaries = [logs[i] / "summary.json" for i in range(NODES)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(e is not None for e in exited):
            if all(_running(_summary(summaries[i], via[i])) for i in range(NODES)) and (
                fault != "preempt a node" or all(_stepped(d) for d in logs)
            ):
                trial.started = True
                break
            time.sleep(0.1)  # the launchers' files are all there is to wait on
        if trial.started:
            time.sleep(delay)
            fault_at = time.monotonic()
            with contextlib.suppress(ProcessLookupError):  # (a launcher that ended already)
                summary = _summary(summaries[victim], via[victim])
                trial.rank = _inject(fault, cluster, procs, victim, summary, rng)
            deadline = fault_at + timeout
            while time.monotonic() < deadline and not all(e is not None for e in exited):
                time.sleep(0.05)  # (the waiter threads record each exit)
            if all(e is not None for e in exited):
                trial.exited_after = max(e for e in exited if e is not None) - fault_at
                with contextlib.suppress(OSError, ValueError):  # the raise's own moment
                    raised = float((ckpt / "raised-at").read_text())
                    trial.exited_after = max(exited_wall) - raised
        for i, p in enumerate(procs):
            if p.poll() is None:
                trial.leftovers.append(f"node {i}'s launcher still running")
                p.kill()
        for i, node in enumerate(cluster.nodes):
            pids = _ip("netns", "pids", node.netns, check=False).stdout.split()
            live = [p for p in pids if Path(f"/proc/{p}").exists()]
            if live and procs[i].returncode is not None:
                trial.leftovers.append(f"node {i}: processes left: {' '.join(live)}")
        trial.codes = [p.returncode for p in procs]
    trial.outs = [o.read_text(errors="replace") for o in outs]
    trial.worker_logs = [
        "".join(p.read_text(errors="replace") for p in sorted(d.glob("workerlog.*"))) for d in logs
    ]
    dirs = [disk if (disk is not None and i == victim) else logs[i] for i in range(NODES)]
    trial.summaries = [_summary(d / "summary.json") for d in dirs]  # type: ignore[operator]
    for d in dirs:
        assert d is not None
        trial.leftovers += [f"temporary file {f}" for f in d.glob(".*.tmp")]
    if disk is not None and f" {logs[victim]} " in Path("/proc/self/mounts").read_text():
        trial.leftovers.append("the tmpfs was still mounted")  # (in the test's namespace)
    return trial


def _inject(
    fault: str,
    cluster: Cluster,
    procs: list[subprocess.Popen],
    victim: int,
    summary: dict | None,
    rng: random.Random,
) -> int | None:
    """Inject `fault`; the rank it hits, where there is one."""
    node = cluster.nodes[victim]
    if fault == "raise in a rank":
        return victim  # the script raises by itself, at its step
    if fault == "stop a rank":
        procs_ = [p for p in (summary or {}).get("processes", []) if p.get("pid")]
        with contextlib.suppress(ProcessLookupError, IndexError):
            os.kill(procs_[0]["pid"], signal.SIGSTOP)
            return procs_[0].get("rank")
        return None
    if fault == "kill worker":
        pids = [p["pid"] for p in (summary or {}).get("processes", []) if p.get("pid")]
        with contextlib.suppress(ProcessLookupError, IndexError):
            os.kill(rng.choice(pids), signal.SIGKILL)
    elif fault in ("kill launcher", "kill node 0"):
        os.kill(procs[victim].pid, signal.SIGKILL)  # `ip netns exec` execs the launcher
    elif fault in ("sigterm launcher", "sigterm node 0", "preempt a node"):
        os.kill(procs[victim].pid, signal.SIGTERM)
    elif fault == "cut network":
        node.run(["ip", "link", "set", "eth0", "down"], check=True)
    elif fault == "full disk":
        # the log directory's disk fills up; then a worker on another node dies, and the
        # restart needs the full disk (endpoints.log first)
        log_dir = (summary or {}).get("log_dir", "")
        subprocess.run(
            ["nsenter", "-t", str(procs[victim].pid), "-m", "sh", "-c",
             f"cat /dev/zero > '{log_dir}/fill' 2>/dev/null; true"],
            timeout=30, check=False,
        )  # fmt: skip
        other = (victim + 1) % len(procs)
        log = Path((summary or {}).get("log_dir", "")).parent / f"log{other}" / "summary.json"
        pids = [p["pid"] for p in (_summary(log) or {}).get("processes", []) if p.get("pid")]
        with contextlib.suppress(ProcessLookupError, IndexError):
            os.kill(pids[0], signal.SIGKILL)
    return None


# --- what a trial must show ---------------------------------------------------------------


def problems(t: Trial) -> list[str]:
    """Why trial `t` did not hold; [] when it did."""
    bad = list(t.leftovers)
    if not t.started:
        return [*bad, "the job never ran on every node"]
    if t.exited_after is None:
        return [*bad, "not every launcher exited"]
    for i, out in enumerate(t.outs):
        if "/paddlike/launch/" in out and "Traceback" in out:  # (workers' own are echoed)
            bad.append(f"node {i}'s launcher printed a traceback")
        s = t.summaries[i]
        if s is not None and s.get("status") == "running" and not _killed(t, i):
            bad.append(f"node {i}'s summary.json still says running")
    v, addr = t.victim, t.addrs[t.victim]
    others = [i for i in range(len(t.codes)) if i != v]
    label = f"node {v} ({addr})"

    def expect(nodes: list[int], code: int, *words: str) -> None:
        for i in nodes:
            if t.codes[i] != code:
                bad.append(f"node {i} exited {t.codes[i]}, not {code}")
            reason = t.cause(i).get("reason") or ""
            for w in words:
                if w not in reason:
                    bad.append(f"node {i}'s cause {reason!r} does not say {w!r}")
                elif w not in t.outs[i]:
                    bad.append(f"node {i}'s console does not say {w!r}")

    fixed = t.mode == "fixed"
    if t.fault == "kill worker":
        expect(list(range(len(t.codes))), 0)
        for i, out in enumerate(t.outs):  # (a trial whose kill missed would pass unseen)
            if "restart 1 of 1 after: trainer rank" not in out:
                bad.append(f"node {i} did not restart after the killed worker")
    elif t.fault == "kill launcher":
        expect(others, 1 if fixed else 0, *([label] if fixed else []))
        if not fixed and not any(label in t.outs[i] for i in others):
            bad.append(f"no node said that {label} was lost")
    elif t.fault == "kill node 0":
        expect(others, 1, "lost contact with node 0 (")
    elif t.fault == "cut network":
        expect([v], 1, "lost contact with node 0 (")
        expect(others, 1 if fixed else 0, *([label] if fixed else []))
    elif t.fault == "sigterm launcher":
        if fixed:
            expect(list(range(len(t.codes))), 143, f"launcher on {addr} received SIGTERM")
        else:
            expect([v], 143)
            expect(others, 0)
    elif t.fault == "sigterm node 0":
        words = [f"launcher on {addr} received SIGTERM"]
        if not fixed:
            words.append("hosts the launchers' store")
        expect(list(range(len(t.codes))), 143, *words)
    elif t.fault == "full disk":
        expect(list(range(len(t.codes))), 1, f"cannot write {t.log_dirs[v]}/", "is full")
    elif t.fault == "raise in a rank":
        own = f"trainer rank {t.rank} exited with code 1"
        expect(list(range(len(t.codes))), 1, own)
        home = _node_of_rank(t, t.rank)
        for i, out in enumerate(t.outs):
            where = t.cause(i).get("node_index")
            if where != home:
                bad.append(f"node {i}'s cause is on node {where}, not {home}")
            if f"{own}: put down to" in out:
                bad.append(f"node {i} put the raising rank's failure down to another cause")
    elif t.fault == "preempt a node":
        stays = not fixed and v != 0  # an elastic job goes on without it (not node 0)
        expect([v], 143, f"launcher on {addr} received SIGTERM")
        expect([i for i in others if not stays], 143, f"launcher on {addr} received SIGTERM")
        expect([i for i in others if stays], 0)
        bad += _same_step_saved(t, resumed=stays)
    elif t.fault == "stop a rank":
        if t.rank is None:
            bad.append("no rank was stopped")
        expect(list(range(len(t.codes))), 124, f"rank {t.rank} (", "is stopped")
    return bad


def _same_step_saved(t: Trial, *, resumed: bool) -> list[str]:
    """Every rank stopped at the same step at the notice (and, `resumed`, the next round
    went on from it)."""
    bad = []
    steps: dict[int, set[int]] = {}
    for i, text in enumerate(t.worker_logs):
        found = {int(m) for m in re.findall(r"PREEMPTED: stopped at step (\d+)", text)}
        steps[i] = found
    stopped = set().union(*steps.values())
    # (rank 0 of the next round says where it resumed)
    resumed_at = f"RESUMED from step {min(stopped)}" if stopped else ""
    if resumed and len(stopped) == 1 and resumed_at not in "".join(t.worker_logs):
        bad.append(f"the next round did not resume from step {min(stopped)}")
    if any(len(s) != 1 for s in steps.values()) or len(stopped) != 1:
        bad.append(f"the ranks did not all stop at one step: {steps}")
    return bad


def _node_of_rank(t: Trial, rank: int | None) -> int | None:
    """The node whose summary.json lists trainer `rank` (elastic ranks follow arrival)."""
    for i, s in enumerate(t.summaries):
        if any(p.get("rank") == rank for p in (s or {}).get("processes", [])):
            return i
    return None


def _killed(t: Trial, node: int) -> bool:
    """A launcher SIGKILLed by the trial itself cannot finish its summary."""
    return node == t.victim and t.fault in ("kill launcher", "kill node 0")
