"""spawn(..., ips=...) on two namespace nodes: every node runs the same program, one job.

Each node's parent process is its launcher (the same rendezvous as a launch); its return
values are its own children's, and a failure on the other node reaches it as SpawnError.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.netns import netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]
REPO = Path(__file__).resolve().parents[3]

PROGRAM = """
import json, sys
import paddlike.distributed as dist
from tests.support import spawn_fns as fns

if __name__ == "__main__":
    try:
        context = dist.spawn(getattr(fns, sys.argv[2]), nprocs=2, ips=sys.argv[1])
        print("VALUES " + json.dumps(context.return_values), flush=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0]
        print(type(exc).__name__, getattr(exc, "rank", "-"), first, flush=True)
"""


def clean_env() -> dict[str, str]:
    drop = ("PADDLIKE_", "SLURM_", "PADDLE_", "POD_IP", "GLOO_", "NCCL_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "PYTHONPATH": str(REPO)}


def run_on_two_nodes(tmp_path: Path, function: str) -> list[str]:
    (tmp_path / "program.py").write_text(PROGRAM)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        ips = ",".join(n.addr for n in cluster.nodes)
        procs = []
        for node in cluster.nodes:
            argv = [sys.executable, str(tmp_path / "program.py"), ips, function]
            procs.append(
                node.popen(argv, cwd=tmp_path, env=clean_env(), stdout=-1, stderr=-1, text=True)
            )
        outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    return [out.strip().splitlines()[-1] for out, _ in outs]


def test_spawn_with_ips_forms_one_job_and_each_node_gets_its_childrens_values(tmp_path):
    a, b = run_on_two_nodes(tmp_path, "all_reduce_rank")
    assert json.loads(a.removeprefix("VALUES ")) == [[0, 6.0], [1, 6.0]]
    assert json.loads(b.removeprefix("VALUES ")) == [[2, 6.0], [3, 6.0]]


def test_a_child_failing_on_one_node_is_raised_there_and_named_on_the_other(tmp_path):
    a, b = run_on_two_nodes(tmp_path, "rank_three_raises")
    assert b.startswith("ProcessRaisedException 3 ")
    assert a.startswith("SpawnError - spawn: trainer rank 3 ")
