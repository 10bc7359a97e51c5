"""Paddle's multi-node PS by counts: `--server_num 1 --trainer_num 1` on each of two
namespace nodes (meeting at --master with --nnodes 2, or by --ips) is one job of 2 servers
and 2 trainers that trains to the single-process reference; every node writes the same
endpoints.log and gives its trainer its id in the node-major list."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.e2e.nodes.test_start import clean_env
from tests.e2e.ps.test_training import reference
from tests.support.fixed_ports import fixed_ports
from tests.support.netns import netns_cluster
from tests.support.ps_workers.cluster import WORKERS

pytestmark = pytest.mark.netns

STEPS = 8
# ctr_train.py runs the job; before it, every process writes its environment (dump_env.py)
TRAIN = f"""
import os, runpy, sys
os.makedirs("envs", exist_ok=True)
role = os.environ["TRAINING_ROLE"]
name = role + "." + (os.environ.get("PADDLE_TRAINER_ID") or os.environ["PADDLE_PORT"])
with open(os.path.join("envs", name + "." + os.environ["POD_IP"] + ".json"), "w") as f:
    f.write(__import__("json").dumps(dict(os.environ)))
sys.path.insert(0, {str(WORKERS)!r})
runpy.run_path({str(WORKERS / "ctr_train.py")!r}, run_name="__main__")
"""


def _argv(how: str, addrs: list[str], master_port: int) -> list[str]:
    if how == "master":  # Paddle's form: no node list, no rank; ranks from the rendezvous
        return ["--master", f"{addrs[0]}:{master_port}", "--nnodes", "2"]
    return ["--ips", ",".join(addrs)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["master", "ips"])
def test_counts_on_two_nodes_are_one_job_of_two_servers_and_two_trainers(tmp_path, how):
    out = tmp_path / "result.npz"
    master_port = fixed_ports(1)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        addrs = [node.addr for node in cluster.nodes]
        procs = []
        for node in cluster.nodes:
            cwd = tmp_path / node.hostname
            cwd.mkdir()
            (cwd / "train.py").write_text(TRAIN)
            argv = [sys.executable, "-m", "paddlike.launch", *_argv(how, addrs, master_port),
                    "--server_num", "1", "--trainer_num", "1", "--log_dir", "log",
                    "--rdzv_timeout", "60", "train.py", str(out), "--mode", "sync",
                    "--steps", str(STEPS)]  # fmt: skip
            pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
            procs.append(node.popen(argv, cwd=cwd, env=dict(clean_env(), PADDLIKE_TIMEOUT="30"),
                                    **pipe))  # fmt: skip
        outs = [p.communicate(timeout=200)[0].decode() for p in procs]
    logs = "\n".join(
        f"--- {f}\n{f.read_text()[-2000:]}" for f in sorted(tmp_path.glob("node*/log/*log.*"))
    )
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outs) + logs
    w, emb = reference(steps=STEPS, batch=64)
    got = np.load(out)
    np.testing.assert_allclose(got["w"], w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["emb"], emb, rtol=1e-4, atol=1e-5)
    envs = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("node*/envs/*.json")}
    assert len(envs) == 4, sorted(envs)
    servers = {e["PADDLE_PSERVERS_IP_PORT_LIST"] for e in envs.values()}
    trainers = {e["PADDLE_TRAINER_ENDPOINTS"] for e in envs.values()}
    assert len(servers) == len(trainers) == 1, (servers, trainers)
    server_list, trainer_list = servers.pop().split(","), trainers.pop().split(",")
    assert [e.rpartition(":")[0] for e in server_list] == addrs  # node-major
    assert [e.rpartition(":")[0] for e in trainer_list] == addrs
    for i, addr in enumerate(addrs):
        trainer = envs[f"TRAINER.{i}.{addr}"]
        assert trainer["PADDLE_TRAINERS_NUM"] == "2"
        assert trainer["PADDLE_CURRENT_ENDPOINT"] == trainer_list[i]
        assert trainer["PADDLE_GLOO_HTTP_ENDPOINT"].startswith(addrs[0] + ":")
    files = {(tmp_path / n.hostname / "log" / "endpoints.log").read_text() for n in cluster.nodes}
    assert len(files) == 1, files
    text = files.pop()
    assert all(e in text for e in (*server_list, *trainer_list)), text
