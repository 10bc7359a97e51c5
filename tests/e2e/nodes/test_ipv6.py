"""IPv6 jobs through the real launcher: two namespace nodes on ULA addresses, named by
names that have AAAA records only, and one node on ::1; the workers' all_reduce runs
over the endpoints the launchers agreed on.

The worker (tests/support/ipv6_workers/all_reduce.py) reports its sum, and the family
and peer of its runtime store's and mesh's connections, which is what a user of an
IPv6-only pod network would check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fixed_ports import fixed_ports
from tests.support.multinode_common import LAUNCH
from tests.support.netns import netns_cluster

WORKER = Path(__file__).resolve().parents[2] / "support" / "ipv6_workers" / "all_reduce.py"
REPO = Path(__file__).resolve().parents[3]


def _reports(out: Path) -> dict[int, dict]:
    return {
        int(f.stem.removeprefix("rank")): json.loads(f.read_text()) for f in out.glob("rank*.json")
    }


def _endpoints(log_dir: Path) -> list[str]:
    lines = (log_dir / "endpoints.log").read_text().splitlines()
    return [line for line in lines[1:] if line.strip()]


def _logs(tmp: Path) -> str:
    return "\n".join(
        f"--- {f}\n{f.read_text()[-2000:]}" for f in sorted(tmp.glob("log*/workerlog.*"))
    )


@pytest.mark.netns
@pytest.mark.timeout(120)
@pytest.mark.parametrize("style", ["ips_names", "master_brackets"])
def test_two_ipv6_nodes_run_a_collective_job(tmp_path: Path, style: str) -> None:
    out = tmp_path / "results"
    out.mkdir()
    env = {**os.environ, "PADDLIKE_CPU_TRANSPORT": "tcp", "PYTHONPATH": str(REPO)}
    with netns_cluster(2, ipv6=True) as cluster:
        a, b = cluster.nodes
        assert a.addr6 and b.addr6
        if style == "ips_names":  # names with AAAA records only
            common = ["--ips", f"{a.hostname6},{b.hostname6}"]
            per_node: list[list[str]] = [[], []]
        else:  # torchrun style: node 0's address in brackets, ranks given
            port = fixed_ports(1)
            common = ["--nnodes", "2", "--master", f"[{a.addr6}]:{port}"]
            per_node = [["--node_rank", "0"], ["--node_rank", "1", "--host", b.addr6]]
        dry = b.run([*LAUNCH, *common, *per_node[1], "--dry_run", str(WORKER), str(out)],
                    capture_output=True, text=True, env=env, timeout=30)  # fmt: skip
        # the interface holding the IPv6 address; endpoints bracketed
        expected = ["GLOO_SOCKET_IFNAME=eth0", f"PADDLE_CURRENT_ENDPOINT=[{b.addr6}]:"]
        if style == "ips_names":  # (torchrun style shows "<node 0>" until the rendezvous)
            # MASTER_ADDR bare: torch's TCPStore takes it as a host
            expected += [f"MASTER_ADDR={a.addr6}", f"PADDLE_MASTER=[{a.addr6}]:"]
        for line in expected:
            assert line in dry.stdout, dry.stdout + dry.stderr
        procs = [
            node.popen(
                [
                    *LAUNCH,
                    *common,
                    *per_node[i],
                    "--nproc_per_node",
                    "2",
                    "--log_dir",
                    str(tmp_path / f"log{i}"),
                    str(WORKER),
                    str(out),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
            )
            for i, node in enumerate(cluster.nodes)
        ]
        outputs = [p.communicate(timeout=100)[0].decode() for p in procs]
    context = "\n".join(outputs) + _logs(tmp_path)
    assert [p.returncode for p in procs] == [0, 0], context
    # the banner names the IPv6 address matched and its interface
    assert f"({a.addr6} on eth0" in outputs[0], context
    assert f"({b.addr6} on eth0" in outputs[1], context
    # endpoints bracketed, node-major, identical on both nodes
    eps = _endpoints(tmp_path / "log0")
    assert eps == _endpoints(tmp_path / "log1"), context
    assert [e.rpartition(":")[0] for e in eps] == [f"[{a.addr6}]"] * 2 + [f"[{b.addr6}]"] * 2
    got = _reports(out)
    assert sorted(got) == [0, 1, 2, 3], context
    for rank, report in got.items():
        assert report["correct"], (rank, report)
        assert report["store_family"] == "ipv6" and report["store_peer"] == a.addr6, report
        assert "ipv6" in report["mesh_families"], report


@pytest.mark.timeout(60)
def test_ipv6_loopback_alone_runs_two_workers(tmp_path: Path) -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here ({exc})")
    out = tmp_path / "results"
    out.mkdir()
    env = {**os.environ, "PADDLIKE_CPU_TRANSPORT": "tcp", "PYTHONPATH": str(REPO)}
    env.pop("POD_IP", None)
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--ips", "::1", "--nproc_per_node", "2",
         "--log_dir", str(tmp_path / "log0"), str(WORKER), str(out)],
        env=env, capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    context = done.stdout + done.stderr + _logs(tmp_path)
    assert done.returncode == 0, context
    assert "(::1 on lo: matched --ips entry 0" in done.stdout + done.stderr
    assert [e.rpartition(":")[0] for e in _endpoints(tmp_path / "log0")] == ["[::1]"] * 2
    got = _reports(out)
    assert sorted(got) == [0, 1], context
    assert all(r["correct"] and r["store_family"] == "ipv6" for r in got.values()), got


ETCD = shutil.which("etcd")


@pytest.mark.netns
@pytest.mark.timeout(150)
@pytest.mark.skipif(ETCD is None, reason="etcd is not installed (Debian: etcd-server)")
def test_two_ipv6_nodes_meet_through_etcd_at_a_bracketed_address(tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    env = {**os.environ, "PADDLIKE_CPU_TRANSPORT": "tcp", "PYTHONPATH": str(REPO)}
    with netns_cluster(3, ["node0", "node1", "etcd"], ipv6=True) as cluster:
        a, b, e = cluster.nodes
        url = f"http://[{e.addr6}]"
        e.popen(
            [str(ETCD), "--data-dir", str(tmp_path / "etcd-data"), "--name", "t",
             "--listen-client-urls", f"{url}:2379", "--advertise-client-urls", f"{url}:2379",
             "--listen-peer-urls", f"{url}:2380",
             "--initial-advertise-peer-urls", f"{url}:2380",
             "--initial-cluster", f"t={url}:2380"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        master = f"etcd://[{e.addr6}]:2379"
        procs = [
            node.popen(
                [
                    *LAUNCH,
                    "--ips",
                    f"{a.hostname6},{b.hostname6}",
                    "--master",
                    master,
                    "--job_id",
                    "ipv6-etcd",
                    "--nproc_per_node",
                    "1",
                    "--log_dir",
                    str(tmp_path / f"log{i}"),
                    str(WORKER),
                    str(out),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
            )
            for i, node in enumerate((a, b))
        ]
        outputs = [p.communicate(timeout=120)[0].decode() for p in procs]
    context = "\n".join(outputs) + _logs(tmp_path)
    assert [p.returncode for p in procs] == [0, 0], context
    got = _reports(out)
    assert sorted(got) == [0, 1], context
    assert all(r["correct"] and r["mesh_families"] == ["ipv6"] for r in got.values()), got
