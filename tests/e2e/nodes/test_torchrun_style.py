"""Many nodes started the torchrun / OneFlow way: ``--nnodes N --node_rank R --master_addr A``
on every node and no --ips. Each launcher finds its own address (the route to A), node 0
hosts the store at A, and the node list comes from the rendezvous."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.multinode_common import LAUNCH, ranks_and_endpoints, write_worker
from tests.support.netns import Node, netns_cluster

pytestmark = pytest.mark.netns


def _start(
    node: Node, nnodes: int, rank: int, master: Node, port: int, log_dir: Path, script: Path
) -> subprocess.Popen[bytes]:
    argv = [*LAUNCH, "--nnodes", str(nnodes), "--node_rank", str(rank)]
    argv += ["--master_addr", master.addr, "--master_port", str(port)]
    argv += ["--nproc_per_node", "2", "--rdzv_timeout", "30", "--log_dir", str(log_dir)]
    return node.popen([*argv, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_nodes_given_only_their_rank_and_the_master_get_ranks_and_the_same_endpoints(tmp_path):
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        procs = [_start(n, 2, i, a, 7345, tmp_path / f"l{i}", script) for i, n in enumerate((a, b))]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    endpoints = {(tmp_path / f"l{i}" / "endpoints.log").read_text() for i in range(2)}
    assert len(endpoints) == 1, endpoints
    eps = endpoints.pop().splitlines()[1:]
    assert [e.split(":")[0] for e in eps] == [a.addr, a.addr, b.addr, b.addr]
    for i in range(2):
        seen = ranks_and_endpoints(tmp_path / f"l{i}")
        assert sorted(r for r, _ in seen) == [2 * i, 2 * i + 1]
        assert {e for _, e in seen} == {",".join(eps)}
    # --master_port is the workers' port (torchrun's meaning): the launchers meet at the next
    assert f"rendezvous with 2 nodes at {a.addr}:7346" in outs[1]


def test_node_rank_0_away_from_the_master_address_is_a_usage_error(tmp_path):
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        p = _start(b, 2, 0, a, 7345, tmp_path / "l", script)
        out = p.communicate(timeout=30)[0].decode()
    assert p.returncode == 2, out
    assert f"--node_rank: 0 hosts the launchers' store at --master_addr {a.addr}" in out
    assert f"run --node_rank 0 on {a.addr}" in out
    assert not (tmp_path / "l").exists()


def test_two_nodes_with_the_same_rank_both_exit_2_naming_both(tmp_path):
    script = write_worker(tmp_path)
    with netns_cluster(3, ["nodea", "nodeb", "nodec"]) as cluster:
        a, b, c = cluster.nodes
        procs = [
            _start(n, 3, rank, a, 7345, tmp_path / f"l{i}", script)
            for i, (n, rank) in enumerate(((a, 0), (b, 1), (c, 1)))
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [2, 2, 2], outs
    for out in outs:
        assert "two launchers claim node index 1" in out, out
        assert b.addr in out and c.addr in out, out
