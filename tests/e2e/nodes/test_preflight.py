"""The pre-flight check on namespace nodes (issue 35): one node's veth throttled by tc's
token bucket filter makes a fixed job end with exit 2 on every node, naming that node
and its figure, before any worker starts; a healthy job raises no alarm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.multinode_common import LAUNCH, start_launcher, write_worker
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


def test_limits_set_on_one_node_only_stop_every_node_at_the_rendezvous(tmp_path):
    """PADDLIKE_PREFLIGHT_LIMITS in one node's environment: the nodes would judge by other
    thresholds, so they disagree when they meet, as on any option: exit 2 everywhere."""
    import os

    script = write_worker(tmp_path)
    with netns_cluster(3) as cluster:
        ips = ",".join(n.addr for n in cluster.nodes)
        procs = []
        for i, node in enumerate(cluster.nodes):
            env = dict(os.environ)
            if i == 1:
                env["PADDLIKE_PREFLIGHT_LIMITS"] = "bandwidth=0.3"
            argv = [*LAUNCH, "--ips", ips, "--nproc_per_node", "1", *SLOW,
                    "--log_dir", str(tmp_path / f"log{i}"), str(script)]  # fmt: skip
            procs.append(
                node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
            )
        ends = [(p.communicate(timeout=90)[0].decode(), p.returncode) for p in procs]
    addr = cluster.nodes[1].addr
    for i, (text, code) in enumerate(ends):
        assert code == 2, text
        assert "rendezvous: node 1 (" in text and f"{addr}) disagrees on preflight_limits: " in text
        assert "it has 'bandwidth=0.3', node 0 (" in text and "has 'the defaults'" in text, text
        assert "healthy" not in text and "no figures from" not in text, text
        assert not list((tmp_path / f"log{i}").glob("workerlog.*")), text


@pytest.mark.parametrize(("n", "attempt"), [(3, 0), (3, 1), (3, 2), (8, 0)])
def test_a_healthy_job_raises_no_alarm(tmp_path, n, attempt):
    with netns_cluster(n) as cluster:
        ends = run_job(cluster, tmp_path)
    for code, text, log in ends:
        assert code == 0, text
        assert f"pre-flight check: {n} nodes healthy" in text, text
        assert "warning: pre-flight" not in text, text
        summary = json.loads((log / "summary.json").read_text())
        assert summary["preflight"]["ok"] is True
        for node in summary["preflight"]["nodes"]:  # its 2 peers (and a second look, if any)
            i = node["index"]
            assert {f["to"] for f in node["links"]} >= {(i + 1) % n, (i + 2) % n}


def test_preflight_off_starts_the_job_on_a_throttled_node(tmp_path):
    with netns_cluster(3) as cluster:
        throttle(cluster.nodes[2])
        ends = run_job(cluster, tmp_path, ["--preflight", "off"])
    for code, text, _ in ends:
        assert code == 0, text
        assert "pre-flight" not in text, text


ELASTIC_WORKER = """
import os
print("ROUND", os.environ["RANK"], os.environ["WORLD_SIZE"], flush=True)
"""


@pytest.mark.parametrize("backend", ["store", "etcd"])
def test_an_elastic_job_starts_without_the_throttled_node_which_exits_69(tmp_path, backend):
    """Node 0's store: node 3 is left out. etcd: node 0 is an ordinary node, left out too."""
    from paddlike.launch.plan.exitcode import LEFT_OUT
    from tests.e2e.elastic.test_nodes import ETCD, _etcd_on

    if backend == "etcd" and ETCD is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    script = tmp_path / "w.py"
    script.write_text(ELASTIC_WORKER)
    with netns_cluster(5 if backend == "etcd" else 4) as cluster:
        nodes = cluster.nodes[:4]
        if backend == "etcd":
            _, master = _etcd_on(cluster.nodes[4], tmp_path)
            extra = ["--job_id", "preflight-etcd", "--heartbeat_timeout", "4"]
            bad = 0
        else:
            master, extra, bad = f"{nodes[0].addr}:6391", [], 3
        slow = nodes[bad]
        throttle(slow)
        procs = []
        for i, node in enumerate(nodes):
            log = str(tmp_path / f"log{i}")
            argv = [*LAUNCH, "--nnodes", "3:4", "--master", master, "--nproc_per_node", "1",
                    "--rdzv_last_call", "5", "--log_dir", log, *extra, str(script)]  # fmt: skip
            procs.append(node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        ends = [(p.communicate(timeout=90)[0].decode(), p.returncode) for p in procs]
    for i, (text, code) in enumerate(ends):
        if i == bad:
            continue
        assert code == 0, text
        assert f"pre-flight check: node {bad} ({slow.addr}): " in text, text
        assert f"the job goes on without node {bad} ({slow.addr}): a new round of 3 nodes" in text
        assert "pre-flight check: 3 nodes healthy" in text, text  # the new round's check
        log = (tmp_path / f"log{i}" / "workerlog.0").read_text()
        assert "ROUND" in log and log.split("ROUND")[-1].split()[1] == "3", log  # WORLD_SIZE 3
    # the nodes that went on keep the check that left it out, and the reader shows it
    keeper = tmp_path / f"log{(bad + 1) % 4}"
    kept = json.loads((keeper / "summary.json").read_text())["preflight"]
    assert kept["ok"] is True and kept["earlier"][0]["bad_nodes"] == [bad]
    assert len(kept["earlier"][0]["nodes"]) == 4
    shown = subprocess.run([sys.executable, "-m", "paddlike.logs", str(keeper)],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "pre-flight check, round 0 (" in shown.stdout, shown.stdout
    assert "): failed" in shown.stdout and "): passed" in shown.stdout, shown.stdout
    assert f"  node {bad} ({slow.addr}): " in shown.stdout, shown.stdout
    text, code = ends[bad]
    assert code == LEFT_OUT, text
    assert "this node is left out of the elastic job, which goes on with 3 nodes" in text, text
    assert not list((tmp_path / f"log{bad}").glob("workerlog.*")), text
    summary = json.loads((tmp_path / f"log{bad}" / "summary.json").read_text())
    assert summary["exit_code"] == LEFT_OUT
    assert summary["root_cause"]["reason"].startswith("pre-flight check left this node out: ")


def test_an_elastic_job_whose_store_host_is_slow_ends_saying_it_cannot_go_on_without_it(
    tmp_path,
):
    """Node 0 hosts the launchers' store (--master at it): the job cannot leave it out;
    every node says why (not that a spare is missing) and exits 2 before any worker."""
    script = tmp_path / "w.py"
    script.write_text(ELASTIC_WORKER)
    with netns_cluster(4) as cluster:
        master = f"{cluster.nodes[0].addr}:6391"
        throttle(cluster.nodes[0])
        procs = []
        for i, node in enumerate(cluster.nodes):
            argv = [*LAUNCH, "--nnodes", "3:4", "--master", master, "--nproc_per_node", "1",
                    "--rdzv_last_call", "5", "--log_dir", str(tmp_path / f"log{i}"),
                    str(script)]  # fmt: skip
            procs.append(node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        ends = [(p.communicate(timeout=90)[0].decode(), p.returncode) for p in procs]
    for i, (text, code) in enumerate(ends):
        assert code == 2, text
        assert f"pre-flight check: node 0 ({cluster.nodes[0].addr}): " in text, text
        assert "node 0 hosts the launchers' store (--master) and the job cannot go on" in text
        assert "no spare node" not in text, text
        assert not list((tmp_path / f"log{i}").glob("workerlog.*")), text


def test_an_elastic_job_quarantines_a_node_whose_worker_failed_two_rounds(tmp_path):
    """Node 3's worker exits 3 in rounds 0 and 1 (restarts); round 2 starts without it."""
    from paddlike.launch.plan.exitcode import LEFT_OUT

    script = write_worker(tmp_path)
    with netns_cluster(4) as cluster:
        master = f"{cluster.nodes[0].addr}:6391"
        procs = []
        for i, node in enumerate(cluster.nodes):
            argv = [*LAUNCH, "--nnodes", "3:4", "--master", master, "--nproc_per_node", "1",
                    "--rdzv_last_call", "5", "--max_restarts", "3", "--log_dir",
                    str(tmp_path / f"log{i}"), str(script), "--fail", "3",
                    "--fail_rounds", "2"]  # fmt: skip
            procs.append(node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        ends = [(p.communicate(timeout=100)[0].decode(), p.returncode) for p in procs]
    addr = cluster.nodes[3].addr
    for text, code in ends[:3]:
        assert code == 0, text
        assert (
            f"pre-flight check: node 3 ({addr}): quarantined: its processes or launcher ended "
            "2 rounds (0, 1)" in text
        ), text
        assert f"the job goes on without node 3 ({addr}): a new round of 3 nodes" in text
    text, code = ends[3]
    assert code == LEFT_OUT, text
    assert "this node is left out of the elastic job" in text, text
    summary = json.loads((tmp_path / "log0" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert summary["preflight"]["ok"] is True  # the last round's check: 3 healthy nodes


STAND_IN_CUPY = '''
"""CuPy's few names the pre-flight matmul uses, for a node without a GPU: each product
takes 5 ms, on GPU 1 of a node with SLOW_GPU=1 it takes 100 ms (a throttled GPU)."""
import os, time
float32 = "float32"
def ones(shape, dtype=None):
    return shape
def matmul(a, b):
    time.sleep(0.1 if os.environ.get("SLOW_GPU") == "1" and cuda.current == 1 else 0.005)
    return a
class cuda:
    current = 0
    class runtime:
        @staticmethod
        def getDeviceCount():
            return 2
    class Device:
        def __init__(self, i):
            self.i = i
        def __enter__(self):
            cuda.current = self.i
            return self
        def __exit__(self, *exc):
            cuda.current = 0
        def synchronize(self):
            pass
'''


def test_full_names_a_slow_gpu_by_its_matmul_rate_against_the_jobs_median(tmp_path):
    """--preflight full where CuPy imports (a stand-in: no GPU here): node 2's GPU 1 is
    slow, every node names it with its rate and the median, exit 2 before any worker."""
    import os

    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(STAND_IN_CUPY)
    script = write_worker(tmp_path)
    with netns_cluster(3) as cluster:
        ips = ",".join(n.addr for n in cluster.nodes)
        procs = []
        for i, node in enumerate(cluster.nodes):
            env = {**os.environ, "PYTHONPATH": str(tmp_path), "SLOW_GPU": "1" if i == 2 else "0"}
            argv = [*LAUNCH, "--ips", ips, "--node_rank", str(i), "--nproc_per_node", "1",
                    "--preflight", "full", *SLOW, "--log_dir", str(tmp_path / f"log{i}"),
                    str(script)]  # fmt: skip
            procs.append(
                node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
            )
        ends = [(p.communicate(timeout=90)[0].decode(), p.returncode) for p in procs]
    slow = cluster.nodes[2].addr
    for i, (text, code) in enumerate(ends):
        assert code == 2, text
        assert f"pre-flight check: node 2 ({slow}): GPU 1: " in text and " matmul, median " in text
        assert not list((tmp_path / f"log{i}").glob("workerlog.*")), text
    summary = json.loads((tmp_path / "log0" / "summary.json").read_text())
    assert [len(n["matmul"]) for n in summary["preflight"]["nodes"]] == [2, 2, 2]
