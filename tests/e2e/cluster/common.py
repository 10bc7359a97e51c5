"""Shared by the cluster tests: a login node and three hosts with sshd, and the checks
that nothing is left running anywhere."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.multinode_common import write_worker
from tests.support.netns import Cluster, Node, netns_cluster
from tests.support.sshd import SshSetup, ssh_cluster

LAUNCH = [sys.executable, "-m", "paddlike.launch"]
REPO = Path(__file__).resolve().parents[3]


@dataclass
class Site:
    """The login node (none of the hosts), the hosts with sshd, and the test's files."""

    cluster: Cluster
    login: Node
    hosts: list[Node]
    ssh: SshSetup
    tmp: Path
    worker: Path

    def hostfile(self, text: str) -> Path:
        path = self.tmp / "hostfile"
        path.write_text(text)
        return path

    def argv(self, hostfile: Path, *options: str, script_args: Sequence[str] = ()) -> list[str]:
        return [
            *LAUNCH,
            "--hostfile",
            str(hostfile),
            self.ssh.ssh_args,
            "--log_dir",
            str(self.tmp / "log"),
            "--rdzv_timeout",
            "60",
            *options,
            str(self.worker),
            *script_args,
        ]

    def run(self, argv: Sequence[str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return self.login.run(argv, timeout=timeout, capture_output=True, text=True, cwd=REPO)

    def start(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        return self.login.popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def cut_ssh(self, host: int) -> None:
        """Loses the connection to host `host` as a dropped link would: its sshd session
        processes are killed (not the daemon, which the next session would need)."""
        node = self.hosts[host]
        pids = subprocess.run(
            ["ip", "netns", "pids", node.netns], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            # a process may end between the listing and the read (the check's shell)
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                if name == "sshd" and int(pid) != self.ssh.daemons[node.hostname]:
                    os.kill(int(pid), signal.SIGKILL)

    def leftovers(self, deadline_s: float = 15) -> dict[str, list[str]]:
        """Processes still in any namespace but the sshd daemons, after waiting up to
        `deadline_s` for the ones that are on their way out (sessions closing)."""
        end = time.monotonic() + deadline_s
        while True:
            left = {}
            for node in self.cluster.nodes:
                pids = subprocess.run(
                    ["ip", "netns", "pids", node.netns], capture_output=True, text=True
                ).stdout.split()
                others = [p for p in pids if int(p) != self.ssh.daemons.get(node.hostname)]
                if others:
                    left[node.hostname] = [_cmdline(p) for p in others]
            if not left or time.monotonic() > end:
                return left
            time.sleep(0.1)  # other namespaces' processes: nothing to wait on from here


def _cmdline(pid: str) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    return pid


@contextlib.contextmanager
def site(tmp_path: Path, hosts: int = 3, sshd_on: Sequence[int] | None = None) -> Iterator[Site]:
    """A login node and `hosts` hosts h0.. (sshd on those of `sshd_on`, default all)."""
    names = ["login", *(f"h{i}" for i in range(hosts))]
    with netns_cluster(len(names), names) as cluster:
        login, nodes = cluster.nodes[0], cluster.nodes[1:]
        served = nodes if sshd_on is None else [nodes[i] for i in sshd_on]
        with ssh_cluster(cluster, served) as ssh:
            yield Site(cluster, login, nodes, ssh, tmp_path, write_worker(tmp_path))


def worker_ranks(log_dir: Path) -> list[int]:
    """Every rank that the test worker printed, in any node's directory of the job: whole
    lines only (a worker may be writing the last one while it is read)."""
    ranks = []
    for log in log_dir.rglob("workerlog.*"):
        for line in log.read_text().split("\n")[:-1]:  # the part after the last newline
            words = line.split()
            if len(words) >= 2 and words[0] == "RANK" and words[1].isdigit():
                ranks.append(int(words[1]))
    return sorted(ranks)


def endpoints_logs(log_dir: Path) -> list[str]:
    return [p.read_text() for p in sorted(log_dir.rglob("endpoints.log"))]
