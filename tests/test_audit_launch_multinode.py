"""Acceptance audit (issue 3, schedulers): corners that had no test yet.

Real launchers in network namespaces (tests/netns.py); the cluster fixture kills
every process it started and removes its namespaces, even when the test fails.
"""

from __future__ import annotations

import os
import subprocess

from tests.multinode_common import LAUNCH, write_worker
from tests.netns import netns_cluster, requires_netns

pytestmark = requires_netns


def test_paddlecloud_launchers_meet_at_the_schedulers_paddle_master(tmp_path):
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        hosts = ",".join(n.addr for n in cluster.nodes)
        master = f"{cluster.nodes[0].addr}:7321"
        procs = []
        for index, node in enumerate(cluster.nodes):
            env = {
                **os.environ,
                "PADDLE_TRAINERS": hosts,
                "POD_IP": node.addr,
                "PADDLE_TRAINER_ID": str(index),
                "PADDLE_NNODES": "2",
                "PADDLE_MASTER": master,
            }
            argv = [*LAUNCH, "--log_dir", str(tmp_path / f"log{index}"), "--rdzv_timeout", "20"]
            procs.append(
                node.popen(
                    [*argv, str(script)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=40)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    for out in outputs:
        assert f"rendezvous with 2 nodes at {master}" in out, out
