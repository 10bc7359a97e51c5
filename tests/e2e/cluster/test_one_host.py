"""A hostfile whose one host is this machine runs its workers here, without ssh, as
DeepSpeed does (issue 32, point 3); --force_multi sends it over ssh. The node is a
network namespace with no sshd in it, so a job that needed ssh would be refused."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tests.support.multinode_common import write_worker
from tests.support.netns import Node, netns_cluster

pytestmark = pytest.mark.timeout(120)
LAUNCH = [sys.executable, "-m", "paddlike.launch"]
REPO = Path(__file__).resolve().parents[3]


def _run(node: Node, tmp: Path, hostfile: str, *options: str):
    path = tmp / "hostfile"
    path.write_text(hostfile)
    argv = [*LAUNCH, "--hostfile", str(path), "--log_dir", str(tmp / "log"), *options]
    argv.append(str(write_worker(tmp)))
    return node.run(argv, timeout=90, capture_output=True, text=True, cwd=REPO)


def _ranks(log_dir: Path) -> list[int]:
    return sorted(
        int(line.split()[1])
        for log in log_dir.glob("workerlog.*")
        for line in log.read_text().splitlines()
        if line.startswith("RANK ")
    )


@pytest.mark.parametrize("name", ["localhost", socket.gethostname()])
def test_a_one_host_hostfile_of_this_machine_runs_here_with_no_sshd(tmp_path, name) -> None:
    with netns_cluster(1, ["solo"]) as cluster:
        done = _run(cluster.nodes[0], tmp_path, f"{name} slots=2\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ranks(tmp_path / "log") == [0, 1]
    note = f"its one host, {name}, is this machine: the job runs here, without ssh"
    assert note in done.stderr
    assert "ssh:" not in done.stderr


def test_force_multi_sends_the_one_host_over_ssh(tmp_path) -> None:
    with netns_cluster(1, ["solo"]) as cluster:
        done = _run(cluster.nodes[0], tmp_path, "localhost slots=2\n", "--force_multi")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "host localhost: ssh: connection refused" in done.stderr
    assert not (tmp_path / "log").exists()  # nothing started
