"""--on_straggler exclude in an elastic job (issue 37), on 3 namespace nodes: the node whose
ranks all sleep an extra 50 ms before each all_reduce is named by node 0, leaves the job
(as on SIGTERM: exit 143), and the other two go on in a new round and finish."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.support.collective_workers.launching import REPO
from tests.support.netns import netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]
STEPS = REPO / "tests" / "support" / "straggler_workers" / "steps.py"


def _env(**extra: str) -> dict[str, str]:
    drop = ("PADDLIKE_", "SLURM_", "PADDLE_", "POD_IP", "GLOO_", "NCCL_", "STRAGGLER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **extra}


def test_the_straggling_node_of_an_elastic_job_leaves_and_the_others_finish(tmp_path) -> None:
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    with netns_cluster(3) as cluster:
        master = f"{cluster.nodes[0].addr}:6170"
        procs = []
        for i, node in enumerate(cluster.nodes):
            argv = [sys.executable, "-m", "paddlike.launch", "--nnodes", "2:3",
                    "--master", master, "--nproc_per_node", "2", "--devices", "cpu",
                    "--heartbeat_timeout", "2", "--rdzv_last_call", "1", "--rdzv_timeout", "60",
                    "--kill_timeout", "5", "--log_dir", str(tmp_path / f"log{i}"),
                    "--straggler_check", "1", "--on_straggler", "exclude",
                    str(STEPS), "--steps", "300", "--work", "0.02"]  # fmt: skip
            env = _env(STRAGGLER_EXTRA="0.05") if i == 2 else _env()
            with open(tmp_path / f"out{i}.txt", "wb") as f:
                procs.append(node.popen(argv, env=env, stdout=f, stderr=-2))
        try:
            codes = [p.wait(timeout=200) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    outs = [(tmp_path / f"out{i}.txt").read_text(errors="replace") for i in range(3)]
    slow = cluster.nodes[2].addr
    assert codes == [0, 0, 143], "\n".join(outs)
    # its index is the rendezvous' (arrival order): named as every other line names a node
    index = re.search(rf"straggler: node (\d+) \({re.escape(slow)}; ranks ", outs[0])
    assert index is not None, outs[0]
    node = f"node {index[1]} ({slow})"
    assert f"--on_straggler exclude: {node} leaves the job" in outs[0], outs[0]
    assert "this node leaves the elastic job (as on SIGTERM)" in outs[2], outs[2]
    # the trial: node 0 said "launcher on <slow> received SIGTERM"; the leaving says why
    why = f"{node} left: excluded as a straggler (--on_straggler exclude)"
    assert f"new round (membership change): {why}" in outs[0], outs[0]
    assert f"launcher on {slow} received SIGTERM" not in outs[0], outs[0]
    summary = json.loads((tmp_path / "log2" / "summary.json").read_text())
    assert summary["root_cause"]["reason"] == why
    # no node calls the exclusion a SIGTERM from outside; the reader's verdict is the
    # job's (its last round's nodes succeeded), the node that left keeps its own section
    for out in outs:
        assert f"stop notice: {why} at " in out, out
        assert "preemption notice" not in out, out
    logs = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", *(str(tmp_path / f"log{i}") for i in range(3))],
        capture_output=True, text=True, env=_env(), timeout=60,
    )  # fmt: skip
    assert logs.returncode == 0, logs.stdout + logs.stderr
    assert "STOPPED" not in logs.stdout and "preempted by" not in logs.stdout, logs.stdout
    assert logs.stdout.rstrip().splitlines()[-1].startswith("job succeeded: "), logs.stdout
    assert "node 2 of 3 (" in logs.stdout and why in logs.stdout, logs.stdout
