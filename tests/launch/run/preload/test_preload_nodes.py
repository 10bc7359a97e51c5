"""--preload on 2 namespace nodes: each node's launcher keeps its own zygote; rank 1 exits
during step 5 under --max_restarts 1 and every rank of both rounds, on both nodes, is a
fork of its node's zygote."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch.run.preload.conftest import probes
from tests.support.multinode_common import start_launcher
from tests.support.netns import netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]


def test_a_two_node_job_restarts_every_rank_from_its_nodes_zygote(scripts: Path) -> None:
    options = ["--max_restarts", "1", "--preload", "heavy"]
    args = [str(scripts / "out"), "steps"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = start_launcher(
            a,
            "nodea,nodeb",
            scripts / "la",
            scripts / "probe.py",
            options=options,
            script_args=args,
        )
        pb = start_launcher(
            b,
            "nodea,nodeb",
            scripts / "lb",
            scripts / "probe.py",
            options=options,
            script_args=args,
        )
        out_b = pb.communicate(timeout=180)[0].decode()
        out_a = pa.communicate(timeout=180)[0].decode()
    assert (pa.returncode, pb.returncode) == (0, 0), out_a + out_b
    assert "restart 1 of 1 after: trainer rank 1 exited with code 3" in out_a
    assert "--preload" not in out_a + out_b
    seen = probes(scripts)
    assert sorted(seen) == [f"{r}.{n}" for r in range(4) for n in range(2)]
    assert all(s["preloaded"] for s in seen.values())
