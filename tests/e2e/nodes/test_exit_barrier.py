"""Three network-namespace nodes, one rank each: rank 1 calls sys.exit(7) after
init_parallel_env, before an all_reduce that ranks 0 and 2 enter. Every node's launcher
ends with rank 1's code 7 and names rank 1, within seconds (it used to take 36 s: rank
1 waited in the runtime's exit barrier, and its peers failed as causes of their own)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.collective_workers.launching import REPO, WORKERS
from tests.support.multinode_common import LAUNCH
from tests.support.netns import Node, netns_cluster

BOUND = 20.0  # launch, rendezvous and teardown of 3 nodes on a loaded machine; was 36 s


def _start(node: Node, ips: str, log_dir: Path, out: Path) -> subprocess.Popen[bytes]:
    argv = [*LAUNCH, "--ips", ips, "--devices", "cpu", "--nproc_per_node", "1",
            "--log_dir", str(log_dir), str(WORKERS / "exit_before_collective.py")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "EXIT_HOW": "sys.exit", "FAIL_RANK": "1",
           "OUT": str(out)}  # fmt: skip
    return node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)


@pytest.mark.netns
@pytest.mark.timeout(240)
def test_a_rank_that_calls_sys_exit_7_ends_every_node_with_7_naming_it(tmp_path: Path) -> None:
    with netns_cluster(3) as cluster:
        ips = ",".join(node.addr for node in cluster.nodes)
        for attempt in range(3):
            started = time.monotonic()
            procs = [
                _start(node, ips, tmp_path / f"a{attempt}n{i}", tmp_path)
                for i, node in enumerate(cluster.nodes)
            ]
            outs = [p.communicate(timeout=120)[0].decode() for p in procs]
            seconds = time.monotonic() - started
            where = f"attempt {attempt}, {seconds:.1f} s:\n" + "\n".join(outs)
            assert [p.returncode for p in procs] == [7, 7, 7], where
            for out in outs:
                assert "rank 1" in out and "exited with code 7" in out, where
            assert seconds < BOUND, where
