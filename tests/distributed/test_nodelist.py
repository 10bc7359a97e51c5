"""OneFlow's node list in the script: env.machine, env.ctrl_port, config.device_num, then
init_parallel_env() — every node runs the same script and one job forms.

The process that ran the script becomes its node's launcher and supervises the workers
(the same script again); errors are the launcher's own lines, raised before anything
starts. Two-node jobs run in network namespaces (tests/support/netns.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import paddlike.distributed as dist
from paddlike.distributed import nodelist
from tests.support.netns import netns_cluster

# Every node runs this: the node list from argv, two workers per node, one all_reduce.
TRAIN = """
import json, os, sys
import numpy as np
import paddlike.distributed as dist

addrs, port, out = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
dist.env.machine([{"addr": a} for a in addrs])
if port:
    dist.env.ctrl_port(port)
dist.config.gpu_device_num(int(sys.argv[4]) if len(sys.argv) > 4 else 2)
dist.init_parallel_env()
x = np.array([float(dist.get_rank() + 1)])
dist.all_reduce(x)
record = {"sum": float(x[0]), "world": dist.get_world_size(), "ppid": os.getppid(),
          "endpoint": os.environ["PADDLE_CURRENT_ENDPOINT"]}
with open(os.path.join(out, f"rank.{dist.get_rank()}.json"), "w") as f:
    json.dump(record, f)
"""

# A node list from argv (JSON); prints the ValueError's line and exits 3.
CONFIGURE = """
import json, sys
import paddlike.distributed as dist

cfg = json.loads(sys.argv[1])
try:
    dist.env.machine(cfg["machines"])
    if "port" in cfg:
        dist.env.ctrl_port(cfg["port"])
    dist.init_parallel_env()
except ValueError as exc:
    print(f"ValueError: {exc}")
    sys.exit(3)
print("STARTED")
"""


def clean_env() -> dict[str, str]:
    drop = ("PADDLIKE_", "SLURM_", "PADDLE_", "POD_IP", "GLOO_", "NCCL_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


@pytest.fixture(autouse=True)
def fresh_node_list():
    nodelist._reset()
    yield
    nodelist._reset()


def configure(tmp_path: Path, cfg: dict) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "configure.py"
    script.write_text(CONFIGURE)
    return subprocess.run(
        [sys.executable, str(script), json.dumps(cfg)],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def read_ranks(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank.{r}.json").read_text()) for r in range(world)]


def test_one_machine_two_workers_supervised_by_the_scripts_own_process(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "train.py", "127.0.0.1", "0", str(out)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=-1, stderr=-1, text=True)
    try:
        _, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    ranks = read_ranks(out, 2)
    assert [r["sum"] for r in ranks] == [3.0, 3.0] and [r["world"] for r in ranks] == [2, 2]
    assert [r["ppid"] for r in ranks] == [proc.pid, proc.pid]  # the script's process
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    assert summary["status"] == "succeeded" and len(summary["processes"]) == 2
    assert "paddlike.launch: job " in err  # the launcher's banner, from the script's process


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (
            {"machines": [{"addr": "127.0.0.1"}, {"addr": "127.0.0.1"}], "port": 9988},
            "--ips: entry '127.0.0.1' appears twice (positions 0 and 1)",
        ),
        (
            {"machines": [{"addr": "127.0.0.1"}, {"addr": "127.0.0.2"}]},
            "env.ctrl_port: needed with 2 machines (the port on node 0, 127.0.0.1",
        ),
        (
            {"machines": [{"addr": "198.18.0.1"}, {"addr": "198.18.0.2"}], "port": 9988},
            "--ips: no entry of '198.18.0.1,198.18.0.2' is an address of this node",
        ),
        (
            {"machines": [{"addr": "127.0.0.1"}, {"addr": "127.0.0.2"}], "port": 9988},
            "'127.0.0.1' (127.0.0.1) and '127.0.0.2' (127.0.0.2) are all addresses of this node",
        ),
        ({"machines": [{"ip": "127.0.0.1"}]}, "env.machine: entry 0 must be {'addr': "),
        ({"machines": "127.0.0.1"}, "env.machine: expected a non-empty list of {'addr': ...}"),
    ],
)
def test_a_bad_node_list_is_the_launchers_error_before_anything_starts(tmp_path, cfg, message):
    run = configure(tmp_path, cfg)
    assert run.returncode == 3, run.stdout + run.stderr
    assert message in run.stdout
    assert "STARTED" not in run.stdout
    assert not (tmp_path / "log").exists()


def test_after_init_the_node_list_calls_only_warn():
    dist.env.machine([{"addr": "127.0.0.1"}])
    nodelist.start_if_configured({nodelist.WORKER_MARK: "1"})  # as a worker: joins, no start
    with pytest.warns(UserWarning, match=r"env.machine: called after init_parallel_env\(\)") as w:
        dist.env.machine([{"addr": "127.0.0.2"}])
    assert w[0].filename == __file__  # the warning points at the script's own line
    with pytest.warns(UserWarning, match="config.device_num: called after") as w:
        dist.config.device_num(4)
    assert w[0].filename == __file__
    assert nodelist._state.addrs == ("127.0.0.1",) and nodelist._state.devices is None


def test_under_a_launcher_the_node_list_is_ignored_with_a_warning():
    dist.config.device_num(2)
    launched = {"PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:6000", "PADDLE_TRAINER_ID": "0"}
    with pytest.warns(UserWarning, match="runs under a launcher, whose configuration wins"):
        nodelist.start_if_configured(launched)


def test_bad_values_name_the_call_and_what_was_expected():
    with pytest.raises(ValueError, match=r"env.ctrl_port: expected a port number 1-65535, got 0"):
        dist.env.ctrl_port(0)
    with pytest.raises(ValueError, match=r"config.device_num: expected a positive integer, got -1"):
        dist.config.gpu_device_num(-1)


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_two_nodes_running_the_same_script_form_one_job(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    out = tmp_path / "out"
    out.mkdir()
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        addrs = ",".join(n.addr for n in cluster.nodes)
        procs = []
        for node in cluster.nodes:
            cwd = tmp_path / node.hostname
            cwd.mkdir()
            argv = [sys.executable, str(tmp_path / "train.py"), addrs, "9988", str(out)]
            procs.append(
                node.popen(argv, cwd=cwd, env=clean_env(), stdout=-1, stderr=-1, text=True)
            )
        results = [p.communicate(timeout=120) for p in procs]
        for p, (_out, err) in zip(procs, results, strict=True):
            assert p.returncode == 0, err
    ranks = read_ranks(out, 4)
    assert [r["sum"] for r in ranks] == [10.0] * 4 and {r["world"] for r in ranks} == {4}
    hosts = [r["endpoint"].rpartition(":")[0] for r in ranks]
    assert hosts == [cluster.nodes[0].addr] * 2 + [cluster.nodes[1].addr] * 2
    # each node's workers are children of that node's script process (its launcher)
    assert [r["ppid"] for r in ranks] == [procs[0].pid] * 2 + [procs[1].pid] * 2
    for node in cluster.nodes:
        summary = json.loads((tmp_path / node.hostname / "log" / "summary.json").read_text())
        assert summary["status"] == "succeeded" and summary["nnodes"] == 2


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_nodes_whose_scripts_disagree_on_the_device_count_both_stop_naming_it(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        addrs = ",".join(n.addr for n in cluster.nodes)
        procs = []
        for node, n in zip(cluster.nodes, ("2", "1"), strict=True):
            cwd = tmp_path / node.hostname
            cwd.mkdir()
            argv = [sys.executable, str(tmp_path / "train.py"), addrs, "9988", str(tmp_path), n]
            procs.append(
                node.popen(argv, cwd=cwd, env=clean_env(), stdout=-1, stderr=-1, text=True)
            )
        results = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, results, strict=True):
        assert p.returncode != 0, err
        # nodes may differ in worker counts (issue 24); the script's own arguments still differ
        assert "disagrees on script arguments" in err, err
    assert not list(tmp_path.glob("rank.*.json"))  # no worker started anywhere
