"""The pre-flight check on namespace nodes (issue 35): one node's veth throttled by tc's
token bucket filter makes a fixed job end with exit 2 on every node, naming that node
and its figure, before any worker starts; a healthy job raises no alarm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.multinode_common import start_launcher, write_worker
from tests.support.netns import Cluster, Node, netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

THROTTLE = ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "20mbit",
            "burst", "32kbit", "latency", "50ms"]  # fmt: skip
SLOW = ["--rdzv_timeout", "60"]


def throttle(node: Node) -> None:
    """20 Mbit/s out of `node` (its end of the veth); skip where tc's tbf is not allowed."""
    made = node.run(THROTTLE, capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        pytest.skip(f"tc tbf is not allowed here: {made.stderr.strip()}")


def run_job(
    cluster: Cluster, tmp_path: Path, options: list[str] = ()
) -> list[tuple[int, str, Path]]:
    """Every node's launcher of one fixed job: (exit code, console, log directory)."""
    script = write_worker(tmp_path)
    ips = ",".join(n.addr for n in cluster.nodes)
    procs = []
    for i, node in enumerate(cluster.nodes):
        log = tmp_path / f"log{i}"
        procs.append((start_launcher(node, ips, log, script, options=[*SLOW, *options]), log))
    out = []
    for proc, log in procs:
        text = proc.communicate(timeout=90)[0].decode()
        out.append((proc.returncode, text, log))
    return out


def test_a_fixed_job_with_a_throttled_node_exits_2_on_every_node_naming_it(tmp_path):
    with netns_cluster(3) as cluster:
        slow = cluster.nodes[2]
        throttle(slow)
        ends = run_job(cluster, tmp_path)
    for code, text, log in ends:
        assert code == 2, text
        assert f"pre-flight check: node 2 ({slow.addr}): " in text, text
        assert " MB/s to node " in text and ", median " in text, text
        assert "no spare node" in text, text
        assert not list(log.glob("workerlog.*")), text  # no worker started anywhere
        summary = json.loads((log / "summary.json").read_text())
        assert summary["exit_code"] == 2
        assert summary["preflight"]["bad_nodes"] == [2]
        assert len(summary["preflight"]["nodes"]) == 3
        assert summary["root_cause"]["node_index"] == 2
    # python -m paddlike.logs shows the verdict and every node's figures
    shown = subprocess.run([sys.executable, "-m", "paddlike.logs", str(ends[0][2])],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert shown.returncode == 2, shown.stderr
    assert "pre-flight check, round 0 (" in shown.stdout and "): failed" in shown.stdout
    assert f"  node 2 ({slow.addr}): " in shown.stdout and " MB/s to node " in shown.stdout
    assert "each node's links (up / down, round trip):" in shown.stdout, shown.stdout
    # the healthy nodes are not named
    for _code, text, _ in ends:
        assert "pre-flight check: node 0" not in text and "pre-flight check: node 1" not in text


@pytest.mark.parametrize("attempt", range(3))
def test_a_healthy_job_raises_no_alarm(tmp_path, attempt):
    with netns_cluster(3) as cluster:
        ends = run_job(cluster, tmp_path)
    for code, text, log in ends:
        assert code == 0, text
        assert "pre-flight check: 3 nodes healthy" in text, text
        summary = json.loads((log / "summary.json").read_text())
        assert summary["preflight"]["ok"] is True
        assert all(len(n["links"]) == 2 for n in summary["preflight"]["nodes"])


def test_preflight_off_starts_the_job_on_a_throttled_node(tmp_path):
    with netns_cluster(3) as cluster:
        throttle(cluster.nodes[2])
        ends = run_job(cluster, tmp_path, ["--preflight", "off"])
    for code, text, _ in ends:
        assert code == 0, text
        assert "pre-flight" not in text, text
