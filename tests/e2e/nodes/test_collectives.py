"""Collectives across two network-namespace "nodes" through the launcher: ranks on different
hosts talk over TCP; all_reduce goes through shared memory within each host first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.collective_workers.launching import WORKERS, reports
from tests.support.multinode_common import start_launcher
from tests.support.netns import netns_cluster


@pytest.mark.netns
def test_two_nodes_of_two_ranks_run_every_operation_shared_memory_within_tcp_between(
    tmp_path: Path,
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    with netns_cluster(2) as cluster:
        ips = ",".join(node.addr for node in cluster.nodes)
        procs = [
            start_launcher(
                node, ips, tmp_path / f"log{i}", WORKERS / "matrix.py", script_args=[str(out)]
            )
            for i, node in enumerate(cluster.nodes)
        ]
        outputs = [p.communicate(timeout=100)[0].decode() for p in procs]
    logs = "\n".join(
        f"--- {f}\n{f.read_text()[-3000:]}" for f in sorted(tmp_path.glob("log*/workerlog.*"))
    )
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs) + logs
    got = reports(out)
    assert sorted(got) == [0, 1, 2, 3], logs
    for rank, report in got.items():
        assert report["failures"] == [], f"rank {rank}: " + "\n".join(report["failures"])
        # Two hosts with two ranks each: shared memory on each host, TCP between them.
        assert report["default_transport"] == "shm+tcp"
