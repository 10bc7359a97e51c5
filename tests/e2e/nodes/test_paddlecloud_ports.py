"""PaddleCloud's given ports on every node: PADDLE_PORT with TRAINER_PORTS_NUM (the ports
the platform opened) put each node's trainer i at PADDLE_PORT + i, on two namespace nodes
as on one; a given port that is taken on a node ends the job, naming the port and host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.nodes.test_start import clean_env
from tests.support.fixed_ports import fixed_ports
from tests.support.netns import Node, netns_cluster

pytestmark = pytest.mark.netns

DUMP_ENV = Path(__file__).resolve().parents[2] / "support" / "workers" / "dump_env.py"
# Holds a port on a node until killed; prints "ready" once it listens.
HOLD = """
import socket, sys, time
s = socket.socket()
s.bind(("", int(sys.argv[1])))
s.listen()
print("ready", flush=True)
time.sleep(120)
"""


def _start(
    node: Node, i: int, addrs: list[str], port: int, tmp_path: Path, *options: str, opened=3
):
    """The launcher as PaddleCloud starts it: its variables, no options but the worker count
    (and `options`); `opened`: TRAINER_PORTS_NUM."""
    env = dict(
        clean_env(),
        PADDLE_TRAINERS=",".join(addrs),
        PADDLE_TRAINER_ID=str(i),
        POD_IP=node.addr,
        PADDLE_PORT=str(port),
        TRAINER_PORTS_NUM=str(opened),
        PADDLIKE_TIMEOUT="30",
    )
    envs = tmp_path / "envs"
    envs.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2", *options,
            "--log_dir", str(tmp_path / f"log{i}"), str(DUMP_ENV), str(envs)]  # fmt: skip
    return node.popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.timeout(120)
def test_every_nodes_trainers_listen_at_paddle_port_plus_their_local_index(tmp_path):
    port = fixed_ports(3)
    with netns_cluster(2) as cluster:
        addrs = [node.addr for node in cluster.nodes]
        procs = [_start(node, i, addrs, port, tmp_path) for i, node in enumerate(cluster.nodes)]
        outs = [p.communicate(timeout=90)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    envs = {int(p.stem[4:]): json.loads(p.read_text()) for p in (tmp_path / "envs").glob("*.json")}
    expected = [f"{addrs[n]}:{port + k}" for n in range(2) for k in range(2)]
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, env in envs.items():
        assert env["PADDLE_CURRENT_ENDPOINT"] == expected[rank]
        assert env["PADDLE_TRAINER_ENDPOINTS"] == ",".join(expected)
    assert {env["PADDLE_MASTER"] for env in envs.values()} == {f"{addrs[0]}:{port + 2}"}


@pytest.mark.timeout(120)
def test_a_given_port_taken_on_one_node_ends_every_node_with_exit_2_naming_it(tmp_path):
    port = fixed_ports(3)
    (tmp_path / "hold.py").write_text(HOLD)
    with netns_cluster(2) as cluster:
        addrs = [node.addr for node in cluster.nodes]
        holder = cluster.nodes[1].popen(
            [sys.executable, str(tmp_path / "hold.py"), str(port + 1)], stdout=subprocess.PIPE
        )
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        procs = [_start(node, i, addrs, port, tmp_path) for i, node in enumerate(cluster.nodes)]
        outs = [p.communicate(timeout=90)[0].decode() for p in procs]
        holder.kill()
        holder.wait()
    assert [p.returncode for p in procs] == [2, 2], outs
    named = f"port {port + 1} on {addrs[1]} is in use"
    assert f"PADDLE_PORT {port}: {named}" in outs[1], outs[1]
    assert named in outs[0], outs[0]  # node 0 says why node 1 did not come
    assert not list((tmp_path / "envs").glob("*.json"))  # no worker started anywhere


@pytest.mark.timeout(120)
def test_a_given_master_port_needs_no_store_port_on_the_other_nodes(tmp_path):
    """Paddle's fleet launch test, translated: 2 nodes, 2 trainers each, TRAINER_PORTS_NUM=2
    and --master_port: Paddle runs it with the trainers at p and p+1 on each node; node 1
    must not count the workers' store port, which node 0 hosts at --master_port."""
    port = fixed_ports(4)  # p, p+1 trainers; p+2 the workers' store; p+3 the launchers'
    master = port + 2
    with netns_cluster(2) as cluster:
        addrs = [node.addr for node in cluster.nodes]
        procs = [
            _start(node, i, addrs, port, tmp_path, "--master_port", str(master), opened=2)
            for i, node in enumerate(cluster.nodes)
        ]
        outs = [p.communicate(timeout=90)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    envs = {int(p.stem[4:]): json.loads(p.read_text()) for p in (tmp_path / "envs").glob("*.json")}
    expected = [f"{addrs[n]}:{port + k}" for n in range(2) for k in range(2)]
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, env in envs.items():
        assert env["PADDLE_CURRENT_ENDPOINT"] == expected[rank]
        assert env["MASTER_PORT"] == str(master)
