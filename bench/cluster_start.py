"""One command for the whole cluster: from the command to every worker started, 4 hosts
over ssh, against the per-node launchers started on each host directly.

    python bench/cluster_start.py [--runs 3] [--hosts 4]

Needs root, `ip netns` and OpenSSH's sshd (skips with the reason otherwise). A login
namespace and --hosts host namespaces, each host with a real sshd (tests/support/sshd.py).
Every worker writes `time.monotonic()` as its first act (one machine: one monotonic clock
across namespaces) and exits; a run's time is from the moment the command is started to
the last worker's stamp.

- paddlike --hostfile: `python -m paddlike.launch --hostfile H` on the login node: the
  preflight over every host at once (which opens each host's ssh master connection), then
  each host's launcher through that connection; the connections are new in every run.
- baseline, same run: the same per-node launcher commands (`--ips ... --node_rank i`)
  started at once in the hosts' namespaces with `ip netns exec`, as by hand on each host.

- by hand over ssh, same run: the same per-node commands, each started on its host with
  `ssh host 'cd DIR && python -m paddlike.launch --ips ... --node_rank i ...'`, all hosts
  at once: over new connections, and over the kept ones below (what a user has without
  paddlike's starter).
- over kept connections, same run: the same command with `--ssh_args` naming a
  ControlPath of the user's where master connections are already open (left by earlier
  work; paddlike keeps them): no handshakes, one session per host.
- new ssh connections alone, same run: `ssh host true` to every host at once, for the
  breakdown (on this machine root's ~/.bashrc runs `pyenv init` in every session).

Target: paddlike ≤ 1.5 × the per-node command run on each host by hand. Prints every
run's rows with the same run's baselines and ratios, then the medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.netns import netns_cluster, netns_unavailable_reason  # noqa: E402
from tests.support.sshd import ssh_cluster, sshd_unavailable_reason  # noqa: E402

PY = sys.executable
VERBOSE = False
WORKER = """
import os, sys, time
with open(os.path.join(sys.argv[1], "started." + os.environ["RANK"]), "w") as f:
    f.write(repr(time.monotonic()))
"""


def _last_start(stamps: Path, workers: int) -> float:
    files = sorted(stamps.glob("started.*"))
    if len(files) != workers:
        raise RuntimeError(f"{len(files)} of {workers} workers started")
    return max(float(f.read_text()) for f in files)


def _launcher_args(log_dir: Path) -> list[str]:
    return ["--nproc_per_node", "1", "--log_dir", str(log_dir), "--rdzv_timeout", "60"]


def handshakes(cluster, ssh) -> float:
    """For the breakdown: new ssh connections to every host at once, running `true`."""
    login, nodes = cluster.nodes[0], cluster.nodes[1:]
    start = time.monotonic()
    procs = [
        login.popen(["ssh", "-F", str(ssh.config), "-o", "BatchMode=yes", n.hostname, "true"])
        for n in nodes
    ]
    if any(p.wait(timeout=60) for p in procs):
        raise RuntimeError("ssh true failed")
    return time.monotonic() - start


def by_hand(login, nodes, work: Path, tag: str, ssh_options: list[str]) -> float:
    """The per-node command on each host through `ssh host cmd`, every host at once."""
    import shlex

    stamps = work / tag
    stamps.mkdir()
    names = ",".join(n.hostname for n in nodes)
    start = time.monotonic()
    procs = []
    for i, node in enumerate(nodes):
        argv = [PY, "-m", "paddlike.launch", "--ips", names, "--node_rank", str(i),
                *_launcher_args(stamps / "log"), str(worker_path(work)), str(stamps)]  # fmt: skip
        command = f"cd {shlex.quote(str(ROOT))} && exec " + shlex.join(argv)
        ssh_argv = ["ssh", *ssh_options, "-T", node.hostname, command]
        pipes = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        procs.append(login.popen(ssh_argv, stdin=subprocess.DEVNULL, **pipes))
    errors = [p.communicate(timeout=120)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"by hand over ssh failed: {errors[0].decode()[-2000:]}")
    return _last_start(stamps, len(nodes)) - start


def one_run(cluster, ssh, hosts: int, work: Path, run: int) -> tuple[float, ...]:
    login, nodes = cluster.nodes[0], cluster.nodes[1:]
    worker = work / "worker.py"
    names = ",".join(n.hostname for n in nodes)
    # baseline: every host's launcher by hand, all at once
    stamps = work / f"direct{run}"
    stamps.mkdir()
    start = time.monotonic()
    procs = [
        node.popen(
            [
                PY,
                "-m",
                "paddlike.launch",
                "--ips",
                names,
                "--node_rank",
                str(i),
                *_launcher_args(stamps / "log"),
                str(worker),
                str(stamps),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        for i, node in enumerate(nodes)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"direct launchers failed: {errors[0].decode()[-2000:]}")
    direct = _last_start(stamps, hosts) - start
    cold = _hostfile_run(login, nodes, work, f"ssh{run}", ssh.ssh_args)
    warm_args = f"{ssh.ssh_args} -o ControlPath={work}/cm-%C -o ControlPersist=300"
    warm = _hostfile_run(login, nodes, work, f"warm{run}", warm_args)
    plain = ["-F", str(ssh.config), "-o", "BatchMode=yes"]
    hand = by_hand(login, nodes, work, f"hand{run}", plain)
    kept = [*plain, "-o", f"ControlPath={work}/cm-%C", "-o", "ControlPersist=300"]
    hand_kept = by_hand(login, nodes, work, f"handkept{run}", kept)
    return direct, cold, warm, hand, hand_kept


def open_masters(cluster, ssh, work: Path) -> None:
    """Master connections under a ControlPath of the user's (as left by earlier work)."""
    login, nodes = cluster.nodes[0], cluster.nodes[1:]
    options = ["-F", str(ssh.config), "-o", "BatchMode=yes", "-o", "ControlMaster=auto"]
    options += ["-o", f"ControlPath={work}/cm-%C", "-o", "ControlPersist=300"]
    for n in nodes:
        login.run(["ssh", *options, n.hostname, "true"], timeout=60, check=True)


def close_masters(cluster, ssh, work: Path) -> None:
    login, nodes = cluster.nodes[0], cluster.nodes[1:]
    for n in nodes:
        login.run(
            ["ssh", "-F", str(ssh.config), "-o", f"ControlPath={work}/cm-%C", "-O", "exit",
             n.hostname], timeout=60, capture_output=True,
        )  # fmt: skip


def _hostfile_run(login, nodes, work: Path, tag: str, ssh_args: str) -> float:
    """One command on the login node: from its start to the last worker's start."""
    stamps = work / tag
    stamps.mkdir()
    hostfile = work / "hostfile"
    hostfile.write_text("".join(f"{n.hostname} slots=1\n" for n in nodes))
    start = time.monotonic()
    done = login.run(
        [PY, "-m", "paddlike.launch", "--hostfile", str(hostfile), ssh_args,
         *_launcher_args(stamps / "log")[2:], str(worker_path(work)), str(stamps)],
        timeout=120, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"--hostfile exited with {done.returncode}: {done.stderr[-2000:]}")
    if VERBOSE:
        print(done.stdout, done.stderr)
    return _last_start(stamps, len(nodes)) - start


def worker_path(work: Path) -> Path:
    return work / "worker.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args()
    reason = netns_unavailable_reason() or sshd_unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    direct, cold, warm, shakes, hand, hand_kept = [], [], [], [], [], []
    names = ["login", *(f"h{i}" for i in range(args.hosts))]
    with tempfile.TemporaryDirectory(prefix="plk-bench-cluster-") as tmp:
        work = Path(tmp)
        (work / "worker.py").write_text(WORKER)
        with (
            netns_cluster(len(names), names) as cluster,
            ssh_cluster(cluster, cluster.nodes[1:]) as ssh,
        ):
            open_masters(cluster, ssh, work)
            try:
                for run in range(args.runs):
                    d, c, w, bh, bk = one_run(cluster, ssh, args.hosts, work, run)
                    h = handshakes(cluster, ssh)
                    for into, x in zip(
                        (direct, cold, warm, hand, hand_kept, shakes),
                        (d, c, w, bh, bk, h),
                        strict=True,
                    ):
                        into.append(x)
                    print(
                        f"run {run + 1}: --hostfile {c:.3f} s (by hand over ssh {bh:.3f} s: "
                        f"{c / bh:.2f} x; direct {d:.3f} s: {c / d:.2f} x); kept connections: "
                        f"--hostfile {w:.3f} s (by hand {bk:.3f} s: {w / bk:.2f} x); "
                        f"ssh true alone {h:.3f} s",
                        flush=True,
                    )
            finally:
                close_masters(cluster, ssh, work)
    d, c, w, bh, bk = (statistics.median(x) for x in (direct, cold, warm, hand, hand_kept))
    print(f"{args.hosts} hosts, command -> every worker started (median of {args.runs}):")
    print(f"  by hand: ssh host 'per-node command', new connections:  {bh:.3f} s")
    print(f"  by hand: ssh host 'per-node command', kept connections: {bk:.3f} s")
    print(f"  launchers started directly (no ssh):                    {d:.3f} s")
    print(
        f"  paddlike --hostfile, new connections:  {c:.3f} s  ({c / bh:.2f} x by hand, "
        f"{c / d:.2f} x direct)"
    )
    print(
        f"  paddlike --hostfile, kept connections: {w:.3f} s  ({w / bk:.2f} x by hand kept, "
        f"{w / d:.2f} x direct)"
    )
    print("  target <= 1.5 x the per-node command run on each host by hand")
    print(
        f"  new ssh connections to every host alone (ssh true): {statistics.median(shakes):.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
