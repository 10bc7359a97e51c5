"""--straggler_check on 3 namespace nodes (issue 37): an unmodified torch gloo script whose
ranks on one node all sleep an extra 50 ms before each all_reduce: node 0's launcher
names that node (not one of its ranks), from the records the other nodes publish through
the launchers' store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.collective_workers.launching import REPO
from tests.support.netns import netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]
STEPS = REPO / "tests" / "support" / "straggler_workers" / "steps.py"
NODES, NPROC = 3, 2


def _env() -> dict[str, str]:
    drop = ("PADDLIKE_", "SLURM_", "PADDLE_", "POD_IP", "GLOO_", "NCCL_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1",
            "PADDLIKE_STRAGGLER_CHECK": "1"}  # fmt: skip


def test_a_node_whose_ranks_are_all_late_is_named_on_node_0(tmp_path) -> None:
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    late = ",".join(str(r) for r in range((NODES - 1) * NPROC, NODES * NPROC))  # the last node's
    with netns_cluster(NODES) as cluster:
        addrs = [n.addr for n in cluster.nodes]
        procs = []
        for i, node in enumerate(cluster.nodes):
            argv = [sys.executable, "-m", "paddlike.launch", "--ips", ",".join(addrs),
                    "--nproc_per_node", str(NPROC), "--devices", "cpu",
                    "--log_dir", str(tmp_path / f"log{i}"), "--rdzv_timeout", "60",
                    str(STEPS), "--steps", "150", "--work", "0.02", "--late", late]  # fmt: skip
            with open(tmp_path / f"out{i}.txt", "wb") as f:
                procs.append(node.popen(argv, env=_env(), stdout=f, stderr=-2))
        try:
            codes = [p.wait(timeout=180) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    outs = [(tmp_path / f"out{i}.txt").read_text(errors="replace") for i in range(NODES)]
    assert codes == [0] * NODES, "\n".join(outs)
    named = [line for line in outs[0].splitlines() if line.startswith("paddlike.launch: straggl")]
    assert len(named) == 1, outs[0]
    # named as every other line names a node: its index, then its address
    assert named[0].startswith(
        f"paddlike.launch: straggler: node {NODES - 1} ({addrs[-1]}; ranks 4–5, all late "
        "together) arrived last at "
    ), named
    # node 0 decides for the job; the others say its finding, once, as node 0's (the slow
    # node's user reads it on that node's console)
    said = named[0].removeprefix("paddlike.launch: ").split(" at ")[0]  # (its figures change)
    for i, out in enumerate(outs[1:], 1):
        relayed = [line for line in out.splitlines() if "straggl" in line]
        assert len(relayed) <= 1, out  # said when who is named changes, not at every check
        assert relayed or i != NODES - 1, out  # the slow node's own console names it
        assert all(x.startswith(f"paddlike.launch: node 0's check: {said} at ") for x in relayed)
    table = json.loads((tmp_path / "log0" / "summary.json").read_text())["stragglers"]
    assert [n["node"] for n in table["nodes"] if n["straggler"]] == [addrs[-1]]
    assert sorted(r["rank"] for r in table["ranks"]) == list(range(NODES * NPROC))
    assert not any(r["straggler"] for r in table["ranks"])  # the node takes their place

    # the slow node's own log directory, as a user there reads it: the check ran on node 0,
    # and what node 0 found (it tells every node) — not "no straggler check ... in this job"
    view = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(tmp_path / f"log{NODES - 1}"), "--stragglers"],
        capture_output=True, text=True, timeout=60, env=_env(),
    ).stdout  # fmt: skip
    assert "no straggler check compared collectives" not in view, view
    assert f"the straggler check runs on node 0 ({addrs[0]})" in view, view
    assert any(line.startswith(f"{said} at ") for line in view.splitlines()), view
    assert "python -m paddlike.logs" in view and "--stragglers" in view  # where the table is
