"""A hostfile whose one host is this machine runs its workers here, without ssh, as
DeepSpeed does (issue 32, point 3); --force_multi sends it over ssh. The node is a
network namespace with no sshd in it, so a job that needed ssh would be refused."""

from __future__ import annotations

import socket
import subprocess
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


def test_no_ssh_runs_each_hosts_share_where_the_same_command_is_typed(tmp_path) -> None:
    """DeepSpeed's --no_ssh --node_rank I: the same command on every host (no sshd
    anywhere); each starts its own launcher as node I of the hostfile's hosts."""
    (tmp_path / "hostfile").write_text("h0 slots=1\nh1 slots=2\n")
    worker = write_worker(tmp_path)
    with netns_cluster(2, ["h0", "h1"]) as cluster:
        procs = []
        for i, node in enumerate(cluster.nodes):
            argv = [*LAUNCH, "--hostfile", str(tmp_path / "hostfile"), "--no_ssh",
                    "--node_rank", str(i), "--log_dir", str(tmp_path / f"log{i}"),
                    "--rdzv_timeout", "60", str(worker)]  # fmt: skip
            procs.append(node.popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True))
        errs = [p.communicate(timeout=90)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert _ranks(tmp_path / "log0") == [0] and _ranks(tmp_path / "log1") == [1, 2]
    assert "this host runs node 1 (h1) of 2" in errs[1]
