"""What an elastic job's console says when it shrinks to one node (issue 32): "1 node", and
the whole job's time on the last line, with the last round's."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.elastic.test_nodes import HEARTBEAT, _setup, _wait_until, _worlds
from tests.support.multinode_common import LAUNCH
from tests.support.netns import netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]


def test_a_job_left_with_one_node_says_1_node_and_the_whole_job_s_time(tmp_path: Path) -> None:
    script, ctl = _setup(tmp_path)
    dirs = [tmp_path / f"l{i}" for i in range(2)]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        master = f"{cluster.nodes[0].addr}:7431"
        procs = []
        for node, log_dir in zip(cluster.nodes, dirs, strict=True):
            argv = [*LAUNCH, "--nnodes", "1:2", "--master", master, "--nproc_per_node", "1",
                    "--heartbeat_timeout", str(HEARTBEAT), "--rdzv_last_call", "1",
                    "--rdzv_timeout", "60", "--log_dir", str(log_dir), "--kill_timeout", "2",
                    str(script), str(ctl)]  # fmt: skip
            procs.append(node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        try:
            _wait_until(tmp_path, "a round of 2", lambda: _worlds(dirs, 2), timeout=40, procs=procs)
            left_at = time.time()
            procs[1].send_signal(signal.SIGTERM)  # node b leaves; node a goes on alone
            procs[1].communicate(timeout=30)
            _wait_until(
                tmp_path, "a round of 1", lambda: _worlds(dirs[:1], 1, left_at), procs=procs[:1]
            )
            (ctl / "stop").touch()
            out = procs[0].communicate(timeout=60)[0].decode()
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    assert procs[0].returncode == 0, out
    assert re.search(rf"round \d+: 1 node \({re.escape(cluster.nodes[0].addr)}\);", out), out
    ok = re.search(r"OK: 1 worker finished in ([\d.]+) s \(the last round ([\d.]+) s\)", out)
    assert ok is not None, out
    assert float(ok.group(1)) > float(ok.group(2))
