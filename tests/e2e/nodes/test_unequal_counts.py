"""Nodes with different worker counts form one job (a hostfile's `host slots=N` of
different N, torchrun's --nproc_per_node per node): three namespace nodes with 1, 2 and 3
CPU workers are one world of 6 ranks, node-major, and every rank all_reduces with all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.nodes.test_start import clean_env
from tests.support.collective_workers.launching import WORKERS
from tests.support.multinode_common import ranks_and_endpoints, write_worker
from tests.support.netns import netns_cluster

pytestmark = pytest.mark.netns

DUMP_ENV = Path(__file__).resolve().parents[2] / "support" / "workers" / "dump_env.py"
# Each rank writes its environment (dump_env.py), then checks all_reduce against numpy with
# every other rank (out_of_place.py), on the same launch.
TRAIN = f"""
import runpy
runpy.run_path({str(DUMP_ENV)!r}, run_name="__main__")
runpy.run_path({str(WORKERS / "out_of_place.py")!r}, run_name="__main__")
"""
COUNTS = (1, 2, 3)


@pytest.mark.timeout(240)
def test_three_nodes_of_1_2_3_workers_are_one_world_of_6_ranks_that_all_reduce(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    envs = tmp_path / "envs"
    envs.mkdir()
    with netns_cluster(3) as cluster:
        ips = ",".join(node.addr for node in cluster.nodes)
        procs = []
        for i, (node, n) in enumerate(zip(cluster.nodes, COUNTS, strict=True)):
            argv = [sys.executable, "-m", "paddlike.launch", "--ips", ips, "--nproc_per_node",
                    str(n), "--log_dir", str(tmp_path / f"log{i}"), "--rdzv_timeout", "60",
                    str(tmp_path / "train.py"), str(envs)]  # fmt: skip
            out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
            procs.append(node.popen(argv, cwd=tmp_path, env=clean_env(), **out))
        outs = [p.communicate(timeout=200)[0].decode() for p in procs]
        addrs = [node.addr for node in cluster.nodes]
    logs = "\n".join(
        f"--- {f}\n{f.read_text()[-2000:]}" for f in sorted(tmp_path.glob("log*/workerlog.*"))
    )
    assert [p.returncode for p in procs] == [0, 0, 0], "\n".join(outs) + logs
    got = {int(p.stem.split(".")[1]): json.loads(p.read_text()) for p in envs.glob("env.*.json")}
    assert sorted(got) == [0, 1, 2, 3, 4, 5], logs
    node_of = [0, 1, 1, 2, 2, 2]
    for rank, env in got.items():
        node, local = node_of[rank], rank - node_of.index(node_of[rank])
        assert env["RANK"] == env["PADDLE_TRAINER_ID"] == str(rank)
        assert env["WORLD_SIZE"] == env["PADDLE_TRAINERS_NUM"] == "6"
        assert env["LOCAL_WORLD_SIZE"] == env["PADDLE_LOCAL_SIZE"] == str(COUNTS[node])
        assert env["LOCAL_RANK"] == str(local) and env["PADDLE_NNODES"] == "3"
        assert env["PADDLE_CURRENT_ENDPOINT"].startswith(addrs[node] + ":")
    for name in ("PADDLE_TRAINER_ENDPOINTS", "PADDLE_MASTER", "PADDLE_WORLD_DEVICE_IDS"):
        assert len({env.get(name) for env in got.values()}) == 1, name
    endpoints = got[0]["PADDLE_TRAINER_ENDPOINTS"].split(",")
    assert [e.rpartition(":")[0] for e in endpoints] == [addrs[n] for n in node_of]
    assert endpoints == [got[r]["PADDLE_CURRENT_ENDPOINT"] for r in range(6)]
    files = {(tmp_path / f"log{i}" / "endpoints.log").read_text() for i in range(3)}
    assert len(files) == 1, files  # one endpoints.log content on every node
    text = files.pop()
    assert [ln for ln in text.splitlines() if ln.startswith("198.18.")] == endpoints
    for out in outs:  # the banner names each node's count
        assert "trainers per node: node 0: 1, node 1: 2, node 2: 3" in out, out
    oks = [ln for ln in logs.splitlines() if ln.startswith("OK ")]
    assert sorted(int(ln.split()[1]) for ln in oks) == [0, 1, 2, 3, 4, 5], logs


@pytest.mark.timeout(180)
def test_a_restart_keeps_each_nodes_count_and_the_same_world(tmp_path):
    worker = write_worker(tmp_path)
    with netns_cluster(2) as cluster:
        ips = ",".join(node.addr for node in cluster.nodes)
        procs = []
        for i, (node, n) in enumerate(zip(cluster.nodes, (1, 3), strict=True)):
            argv = [sys.executable, "-m", "paddlike.launch", "--ips", ips, "--nproc_per_node",
                    str(n), "--log_dir", str(tmp_path / f"log{i}"), "--max_restarts", "1",
                    str(worker), "--fail", "3", "--fail_rounds", "1", "--sleep", "0.5"]  # fmt: skip
            out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
            procs.append(node.popen(argv, cwd=tmp_path, env=clean_env(), **out))
        outs = [p.communicate(timeout=150)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("restart 1 of 1 after: trainer rank 3 exited with code 3" in o for o in outs), outs
    seen = [ranks_and_endpoints(tmp_path / f"log{i}") for i in range(2)]
    # each round printed once per rank (the logs hold both rounds): rank 0 on node 0, 1..3 on 1
    assert sorted(r for r, _ in seen[0]) == [0, 0]
    assert sorted(r for r, _ in seen[1]) == [1, 1, 2, 2, 3, 3]
    rounds = {eps for node in seen for _, eps in node}
    assert len(rounds) <= 2 and all(len(eps.split(",")) == 4 for eps in rounds), rounds
