"""Nodes with different worker counts form one job (a hostfile's `host slots=N` of
different N, torchrun's --nproc_per_node per node): three namespace nodes with 1, 2 and 3
CPU workers are one world of 6 ranks, node-major, and every rank all_reduces with all."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.elastic.test_nodes import WORKER as ELASTIC_WORKER
from tests.e2e.elastic.test_nodes import Line, _complete_lines, _wait_until
from tests.e2e.nodes.test_start import clean_env
from tests.e2e.test_gpu_nodes import dumped, start_on_node
from tests.support.collective_workers.launching import WORKERS
from tests.support.fixed_ports import fixed_ports
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
        assert "workers per node: node 0: 1, node 1: 2, node 2: 3" in out, out
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


def _last_lines(log_dir: Path, count: int) -> list[Line] | None:
    """Each local worker's last ROUND line, or None while one has printed none."""
    lines = []
    for k in range(count):
        log = log_dir / f"workerlog.{k}"
        got = [
            Line(t)
            for t in (_complete_lines(log.read_text()) if log.exists() else [])
            if t.startswith("ROUND ")
        ]
        if not got:
            return None
        lines.append(got[-1])
    return lines


def _world_of(dirs: list[Path], counts: tuple[int, ...], size: int, after: float) -> bool:
    lasts = [_last_lines(d, n) for d, n in zip(dirs, counts, strict=True)]
    return all(
        node is not None and all(ln.world == size and ln.time > after for ln in node)
        for node in lasts
    )


@pytest.mark.timeout(180)
def test_an_elastic_node_of_3_workers_joining_nodes_of_1_and_2_makes_a_world_of_6(tmp_path):
    script, ctl = tmp_path / "worker.py", tmp_path / "ctl"
    script.write_text(ELASTIC_WORKER)
    ctl.mkdir()
    counts = (1, 2, 3)
    dirs = [tmp_path / f"l{i}" for i in range(3)]
    port = fixed_ports(1)
    with netns_cluster(3) as cluster:
        master = f"{cluster.nodes[0].addr}:{port}"

        def start(i: int) -> subprocess.Popen[bytes]:
            argv = [sys.executable, "-m", "paddlike.launch", "--nnodes", "2:3", "--master",
                    master, "--nproc_per_node", str(counts[i]), "--rdzv_last_call", "1",
                    "--heartbeat_timeout", "3", "--rdzv_timeout", "60", "--log_dir",
                    str(dirs[i]), "--kill_timeout", "2", str(script), str(ctl)]  # fmt: skip
            out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
            return cluster.nodes[i].popen(argv, env=clean_env(), **out)

        procs = [start(0), start(1)]
        _wait_until(
            tmp_path, "a round of 3 ranks", lambda: _world_of(dirs[:2], (1, 2), 3, 0.0), 60, procs
        )
        joined = time.time()
        procs.append(start(2))
        _wait_until(
            tmp_path, "a round of 6 ranks", lambda: _world_of(dirs, counts, 6, joined), 60, procs
        )
        (ctl / "stop").write_text("")
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    lasts = [_last_lines(d, n) for d, n in zip(dirs, counts, strict=True)]
    assert len({ln.endpoints for node in lasts for ln in node}) == 1  # one world everywhere
    ranks = [sorted(ln.rank for ln in node) for node in lasts]
    assert sorted(r for node in ranks for r in node) == list(range(6))
    for node in ranks:  # each node's ranks are consecutive (node-major), its own count of them
        assert node == list(range(node[0], node[0] + len(node)))
    assert [len(node) for node in ranks] == list(counts)


@pytest.mark.timeout(150)
def test_nodes_with_1_and_3_fake_gpus_give_every_rank_the_same_world_device_ids(tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    with netns_cluster(2, ["gpunodea", "gpunodeb"]) as cluster:
        procs = [
            start_on_node(node, gpus, "gpunodea,gpunodeb", tmp_path / f"log{i}", out)
            for i, (node, gpus) in enumerate(zip(cluster.nodes, (1, 3), strict=True))
        ]
        outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    envs = sorted(dumped(out), key=lambda e: int(e["PADDLE_TRAINER_ID"]))
    assert [e["PADDLE_TRAINER_ID"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["NODE_RANK"] for e in envs] == ["0", "1", "1", "1"]
    assert [e["FLAGS_selected_gpus"] for e in envs] == ["0", "0", "1", "2"]
    assert {e["PADDLE_WORLD_DEVICE_IDS"] for e in envs} == {"0,0,1,2"}
    assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["1", "3", "3", "3"]
    assert {e["PADDLE_DISTRI_BACKEND"] for e in envs} == {"nccl"}
