"""Two nodes (network namespaces nodea / nodeb): each launcher finds its own index.

`--ips nodea,nodeb --nproc_per_node 2` runs in both; the workers on nodea see ranks
0-1, those on nodeb ranks 2-3, and all four the same endpoint list. A scheduler's
variables (PaddleCloud's PADDLE_MASTER) say where the launchers meet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.multinode_common import LAUNCH, write_worker
from tests.support.netns import netns_cluster

pytestmark = pytest.mark.netns

DUMP = """
import json, os
names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT",
         "PADDLE_MASTER", "PADDLE_NNODES", "NODE_RANK", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"]
print("ENV " + json.dumps({n: os.environ.get(n) for n in names}), flush=True)
"""


def clean_env() -> dict[str, str]:
    drop = ("PADDLIKE_", "SLURM_", "PADDLE_", "POD_IP", "GLOO_", "NCCL_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def read_env(path) -> dict:
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("ENV ")]
    assert len(lines) == 1, path.read_text()
    return json.loads(lines[0][4:])


def test_each_node_finds_its_index_and_workers_agree_on_ranks_and_endpoints(tmp_path):
    (tmp_path / "dump.py").write_text(DUMP)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = []
        for node in cluster.nodes:
            argv = [sys.executable, "-m", "paddlike.launch", "--ips", "nodea,nodeb",
                    "--nproc_per_node", "2", "--log_dir", f"log_{node.hostname}",
                    "--tee", "none", "--rdzv_timeout", "60", "dump.py"]  # fmt: skip
            procs.append(
                node.popen(argv, cwd=tmp_path, env=clean_env(), stderr=-1, stdout=-1, text=True)
            )
        outs = [p.communicate(timeout=90) for p in procs]
        for p, (_out, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err
    envs = {
        (host, n): read_env(tmp_path / f"log_{host}" / f"workerlog.{n}")
        for host in ("nodea", "nodeb")
        for n in range(2)
    }
    assert [envs["nodea", n]["RANK"] for n in range(2)] == ["0", "1"]
    assert [envs["nodeb", n]["RANK"] for n in range(2)] == ["2", "3"]
    endpoint_lists = {e["PADDLE_TRAINER_ENDPOINTS"] for e in envs.values()}
    assert len(endpoint_lists) == 1
    endpoints = endpoint_lists.pop().split(",")
    assert [e.rpartition(":")[0] for e in endpoints] == ["198.18.0.1"] * 2 + ["198.18.0.2"] * 2
    assert len(set(endpoints)) == 4
    for (host, _), e in envs.items():
        assert e["WORLD_SIZE"] == "4" and e["PADDLE_NNODES"] == "2"
        assert e["NODE_RANK"] == ("0" if host == "nodea" else "1")
        assert e["PADDLE_CURRENT_ENDPOINT"] == endpoints[int(e["RANK"])]
        assert e["GLOO_SOCKET_IFNAME"] == e["NCCL_SOCKET_IFNAME"] == "eth0"
        assert e["PADDLE_MASTER"].startswith("198.18.0.1:")
        assert e["PADDLE_MASTER"] not in endpoints
    logs = [(tmp_path / f"log_{h}" / "endpoints.log").read_text() for h in ("nodea", "nodeb")]
    assert logs[0] == logs[1] == "PADDLE_TRAINER_ENDPOINTS: \n" + "\n".join(endpoints)
    banner_b = outs[1][1]
    assert "198.18.0.2 on eth0" in banner_b and "nodeb" in banner_b


def test_a_namespace_node_outside_ips_is_told_which_addresses_it_has(tmp_path):
    (tmp_path / "dump.py").write_text(DUMP)
    with netns_cluster(1, ["nodec"], first_host=3) as cluster:
        result = cluster.nodes[0].run(
            [sys.executable, "-m", "paddlike.launch", "--ips", "198.18.0.1,198.18.0.2", "dump.py"],
            cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
        )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        "paddlike.launch: error: --ips: no entry of '198.18.0.1,198.18.0.2' is an address"
    )
    assert "198.18.0.3 (eth0)" in result.stderr
    assert not (tmp_path / "log").exists()


# A server prints its environment, then listens until the launcher stops it; a trainer, like
# a real one, first reaches every server, so no server is stopped before it printed.
PS_DUMP = """
import json, os, socket, time
names = ["TRAINING_ROLE", "PADDLE_TRAINER_ID", "PADDLE_PORT", "POD_IP", "PADDLE_TRAINERS_NUM",
         "PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_TRAINER_ENDPOINTS"]
print("ENV " + json.dumps({n: os.environ.get(n) for n in names}), flush=True)
if os.environ["TRAINING_ROLE"] == "PSERVER":
    listener = socket.create_server((os.environ["POD_IP"], int(os.environ["PADDLE_PORT"])))
    time.sleep(60)  # a server runs until the launcher stops it
else:
    deadline = time.monotonic() + 30
    for ep in os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(","):
        host, port = ep.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"server {ep} never listened"
                time.sleep(0.05)  # not listening yet; nothing to wait on but the port
"""


def test_ps_lists_place_each_role_on_the_node_whose_address_it_names(tmp_path):
    (tmp_path / "ps.py").write_text(PS_DUMP)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = []
        for node in cluster.nodes:
            argv = [sys.executable, "-m", "paddlike.launch", "--servers", "nodea:7000,nodeb:7000",
                    "--workers", "nodea,nodeb,nodeb", "--log_dir", f"log_{node.hostname}",
                    "--tee", "none", "--kill_timeout", "2", "ps.py"]  # fmt: skip
            procs.append(node.popen(argv, cwd=tmp_path, env=clean_env(), stderr=-1, text=True))
        errs = [p.communicate(timeout=90)[1] for p in procs]
        for p, err in zip(procs, errs, strict=True):
            assert p.returncode == 0, err
    a, b = tmp_path / "log_nodea", tmp_path / "log_nodeb"
    assert read_env(a / "serverlog.0")["PADDLE_PORT"] == "7000"
    assert read_env(a / "serverlog.0")["POD_IP"] == "198.18.0.1"
    assert read_env(b / "serverlog.0")["POD_IP"] == "198.18.0.2"
    assert read_env(a / "workerlog.0")["PADDLE_TRAINER_ID"] == "0"
    assert [read_env(b / f"workerlog.{n}")["PADDLE_TRAINER_ID"] for n in range(2)] == ["1", "2"]
    assert not (a / "workerlog.1").exists() and not (b / "serverlog.1").exists()
    servers = "198.18.0.1:7000,198.18.0.2:7000"
    for env in (read_env(a / "workerlog.0"), read_env(b / "serverlog.0")):
        assert env["PADDLE_PSERVERS_IP_PORT_LIST"] == servers
        assert env["PADDLE_TRAINERS_NUM"] == "3"
    endpoints = (a / "endpoints.log").read_text()
    assert endpoints == (b / "endpoints.log").read_text()
    assert endpoints.endswith("PADDLE_PSERVERS_IP_PORT_LIST: \n198.18.0.1:7000\n198.18.0.2:7000")


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
