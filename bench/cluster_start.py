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

Target: paddlike ≤ 1.5 × the baseline. Prints both medians and the ratio.
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


def one_run(cluster, ssh, hosts: int, work: Path, run: int) -> tuple[float, float]:
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
    # one command on the login node
    stamps = work / f"ssh{run}"
    stamps.mkdir()
    hostfile = work / "hostfile"
    hostfile.write_text("".join(f"{n.hostname} slots=1\n" for n in nodes))
    start = time.monotonic()
    done = login.run(
        [PY, "-m", "paddlike.launch", "--hostfile", str(hostfile), ssh.ssh_args,
         *_launcher_args(stamps / "log")[2:], str(worker), str(stamps)],
        timeout=120, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"--hostfile exited with {done.returncode}: {done.stderr[-2000:]}")
    over_ssh = _last_start(stamps, hosts) - start
    if VERBOSE:
        print(done.stdout, done.stderr)
    return direct, over_ssh


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args()
    reason = netns_unavailable_reason() or sshd_unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    direct, over_ssh, shakes = [], [], []
    names = ["login", *(f"h{i}" for i in range(args.hosts))]
    with tempfile.TemporaryDirectory(prefix="plk-bench-cluster-") as tmp:
        work = Path(tmp)
        (work / "worker.py").write_text(WORKER)
        with (
            netns_cluster(len(names), names) as cluster,
            ssh_cluster(cluster, cluster.nodes[1:]) as ssh,
        ):
            for run in range(args.runs):
                d, s = one_run(cluster, ssh, args.hosts, work, run)
                h = handshakes(cluster, ssh)
                direct.append(d)
                over_ssh.append(s)
                shakes.append(h)
                print(
                    f"run {run + 1}: direct {d:.3f} s, --hostfile over ssh {s:.3f} s "
                    f"(new ssh connections alone: {h:.3f} s)",
                    flush=True,
                )
    d, s = statistics.median(direct), statistics.median(over_ssh)
    print(f"{args.hosts} hosts, command -> every worker started (median of {args.runs}):")
    print(f"  paddlike --hostfile (ssh):             {s:.3f} s")
    print(f"  baseline, launchers started directly:  {d:.3f} s")
    print(f"  ratio {s / d:.2f} x (target <= 1.5 x)")
    print(
        "  of which new ssh connections to every host (ssh true): "
        f"{statistics.median(shakes):.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
