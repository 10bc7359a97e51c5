"""A parameter-server node that cannot start tells the others, as a collective one does:
in every PS form (by counts from PADDLE_TRAINERS, by --servers/--workers lists) the other
node exits 2 within seconds naming it, instead of waiting out --rdzv_timeout and saying
that node "never joined" (docs/ps.md)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.nodes.test_start import clean_env
from tests.support.fixed_ports import fixed_ports
from tests.support.netns import Node, netns_cluster

pytestmark = pytest.mark.netns

SCRIPT = "import time\nprint('ran', flush=True)\n"
# Holds a port on a node until killed; prints "ready" once it listens.
HOLD = """
import socket, sys, time
s = socket.socket()
s.bind(("", int(sys.argv[1])))
s.listen()
print("ready", flush=True)
time.sleep(120)
"""
LAUNCH = [sys.executable, "-m", "paddlike.launch"]


def _finish(procs: list[subprocess.Popen[bytes]]) -> tuple[list[str], float]:
    """Both outputs, and the seconds between node 1's exit and node 0's."""
    out1 = procs[1].communicate(timeout=60)[0].decode()
    ended = time.monotonic()
    out0 = procs[0].communicate(timeout=60)[0].decode()
    return [out0, out1], time.monotonic() - ended


def _popen(node: Node, argv: list[str], cwd: Path, **env: str) -> subprocess.Popen[bytes]:
    return node.popen(
        argv,
        cwd=cwd,
        env=dict(clean_env(), PADDLIKE_TIMEOUT="60", **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.timeout(120)
def test_a_paddlecloud_port_taken_on_node_1_of_a_ps_counts_job_ends_node_0_naming_it(tmp_path):
    port = fixed_ports(3)
    (tmp_path / "hold.py").write_text(HOLD)
    (tmp_path / "ps_train.py").write_text(SCRIPT)
    with netns_cluster(2) as cluster:
        addrs = [node.addr for node in cluster.nodes]
        holder = cluster.nodes[1].popen(
            [sys.executable, str(tmp_path / "hold.py"), str(port + 1)], stdout=subprocess.PIPE
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
            procs = [
                _popen(
                    node,
                    [
                        *LAUNCH,
                        "--server_num",
                        "1",
                        "--trainer_num",
                        "1",
                        "--log_dir",
                        str(tmp_path / f"log{i}"),
                        "ps_train.py",
                    ],
                    tmp_path,
                    PADDLE_TRAINERS=",".join(addrs),
                    POD_IP=node.addr,
                    PADDLE_PORT=str(port),
                    TRAINER_PORTS_NUM="3",
                )
                for i, node in enumerate(cluster.nodes)
            ]
            outs, gap = _finish(procs)
        finally:
            holder.kill()
            holder.wait()
    assert [p.returncode for p in procs] == [2, 2], outs
    named = f"port {port + 1} on {addrs[1]} is in use"
    assert named in outs[1], outs[1]
    assert named in outs[0] and "could not start" in outs[0], outs[0]
    assert "never joined" not in outs[0], outs[0]
    assert gap < 5, (gap, outs[0])


@pytest.mark.timeout(120)
def test_a_missing_script_on_node_1_of_a_ps_lists_job_ends_node_0_naming_it(tmp_path):
    port = fixed_ports(2)
    (tmp_path / "ps_train.py").write_text(SCRIPT)
    with netns_cluster(2) as cluster:
        a, b = (node.addr for node in cluster.nodes)
        lists = [
            "--servers",
            f"{a}:{port},{b}:{port}",
            "--workers",
            f"{a}:{port + 1},{b}:{port + 1}",
        ]
        scripts = ["ps_train.py", "missing.py"]
        procs = [
            _popen(
                node,
                [*LAUNCH, *lists, "--log_dir", str(tmp_path / f"log{i}"), scripts[i]],
                tmp_path,
            )
            for i, node in enumerate(cluster.nodes)
        ]
        outs, gap = _finish(procs)
    assert [p.returncode for p in procs] == [2, 2], outs
    assert "'missing.py' not found" in outs[1], outs[1]
    assert "could not start: training_script: 'missing.py' not found" in outs[0], outs[0]
    assert "never joined" not in outs[0], outs[0]
    assert gap < 5, (gap, outs[0])
