"""A failure anywhere ends the job everywhere, with one root cause; restarts go together."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.logwait import wait_for_text
from tests.support.multinode_common import start_launcher, write_worker
from tests.support.netns import netns_cluster

pytestmark = pytest.mark.netns


def _cause(log_dir: Path) -> dict:
    return json.loads((log_dir / "summary.json").read_text())["root_cause"]


def test_a_worker_exiting_3_on_node_b_ends_node_a_within_1_s_with_the_same_cause(tmp_path):
    script = write_worker(tmp_path)
    args = ["--fail", "3", "--code", "3", "--after", "0.5", "--sleep", "60"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = start_launcher(a, "nodea,nodeb", tmp_path / "la", script, script_args=args)
        pb = start_launcher(b, "nodea,nodeb", tmp_path / "lb", script, script_args=args)
        pb.communicate(timeout=60)
        b_done = time.monotonic()
        out_a = pa.communicate(timeout=60)[0].decode()
        gap = time.monotonic() - b_done
    assert (pa.returncode, pb.returncode) == (3, 3), out_a
    assert gap < 1.0
    ca, cb = _cause(tmp_path / "la"), _cause(tmp_path / "lb")
    assert ca == cb
    assert ca["rank"] == 3 and ca["exit_code"] == 3 and ca["host"] == b.addr
    assert "trainer rank 3 exited with code 3" in out_a
    # the failed worker's log is on node b's host, not in node a's log directory
    assert f"{tmp_path / 'lb' / 'workerlog.1'} on node 1 (198.18.0.2)" in out_a


def _wait_for_worker(log_dir: Path) -> None:
    wait_for_text(log_dir / "workerlog.0", "RANK", timeout=30)


def test_node_b_launcher_killed_ends_node_a_within_the_heartbeat_timeout(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    opts = ["--heartbeat_timeout", "2"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = start_launcher(
            a, "nodea,nodeb", tmp_path / "la", script, options=opts, script_args=["--sleep", "60"]
        )
        pb = start_launcher(
            b, "nodea,nodeb", tmp_path / "lb", script, options=opts, script_args=["--sleep", "60"]
        )
        _wait_for_worker(tmp_path / "la")
        _wait_for_worker(tmp_path / "lb")
        killed = time.monotonic()
        os.kill(pb.pid, signal.SIGKILL)  # `ip netns exec` execs the launcher: this is it
        out_a = pa.communicate(timeout=60)[0].decode()
        took = time.monotonic() - killed
    assert pa.returncode not in (0, None), out_a
    assert took < 2 + 1.5, out_a
    # its guardian said so before node a's heartbeat monitor could: the node is named,
    # and the fixed job ends rather than wait for it
    assert "node 1 (198.18.0.2) was lost: its launcher (pid" in out_a
    assert "a fixed job ends without it" in out_a
    assert _cause(tmp_path / "la")["host"] == b.addr


def test_node_0_launcher_killed_ends_node_1_within_the_heartbeat_timeout(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    opts, args = ["--heartbeat_timeout", "2"], ["--sleep", "60"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = start_launcher(
            a, "nodea,nodeb", tmp_path / "la", script, options=opts, script_args=args
        )
        pb = start_launcher(
            b, "nodea,nodeb", tmp_path / "lb", script, options=opts, script_args=args
        )
        _wait_for_worker(tmp_path / "la")
        _wait_for_worker(tmp_path / "lb")
        killed = time.monotonic()
        os.kill(pa.pid, signal.SIGKILL)  # node 0: the store goes with it
        out_b = pb.communicate(timeout=60)[0].decode()
        took = time.monotonic() - killed
    assert pb.returncode not in (0, None), out_b
    assert took < 2 + 1.5, out_b
    assert "lost contact with node 0 (198.18.0.1)" in out_b
    # node 0's host still answers: its store's port refuses, so node 1 need not wait
    assert "node 0's launcher is gone (its store at 198.18.0.1:6170 refused the connection)" in (
        out_b
    )


def test_a_network_cut_ends_both_sides_within_the_heartbeat_timeout_naming_the_other(
    tmp_path: Path,
) -> None:
    script = write_worker(tmp_path)
    opts, args = ["--heartbeat_timeout", "2"], ["--sleep", "60"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = start_launcher(
            a, "nodea,nodeb", tmp_path / "la", script, options=opts, script_args=args
        )
        pb = start_launcher(
            b, "nodea,nodeb", tmp_path / "lb", script, options=opts, script_args=args
        )
        _wait_for_worker(tmp_path / "la")
        _wait_for_worker(tmp_path / "lb")
        cut = time.monotonic()
        b.run(["ip", "link", "set", "eth0", "down"], check=True)
        outs, took = [], []
        for p in (pa, pb):
            outs.append(p.communicate(timeout=60)[0].decode())
            took.append(time.monotonic() - cut)
    assert [p.returncode for p in (pa, pb)] == [1, 1], outs
    assert max(took) < 2 + 1.5, (took, outs)
    assert "node 1 (198.18.0.2) stopped sending heartbeats" in outs[0]
    assert "lost contact with node 0 (198.18.0.1)" in outs[1]
    assert _cause(tmp_path / "la")["node_index"] == 1


def test_a_restart_round_runs_on_every_node_and_then_succeeds(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    args = ["--fail", "1", "--fail_rounds", "1", "--after", "0.2"]
    opts = ["--max_restarts", "1"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = [
            start_launcher(
                n, "nodea,nodeb", tmp_path / f"l{i}", script, options=opts, script_args=args
            )
            for i, n in enumerate(cluster.nodes)
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for i in range(2):
        text = (tmp_path / f"l{i}" / "workerlog.0").read_text()
        assert "restart 1" in text
        assert [ln.split()[-1] for ln in text.splitlines() if ln.startswith("RANK")] == ["0", "1"]


def test_an_interrupted_launcher_ends_every_node_and_is_not_restarted(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    opts, args = ["--max_restarts", "1"], ["--sleep", "60"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = [
            start_launcher(
                n, "nodea,nodeb", tmp_path / f"l{i}", script, options=opts, script_args=args
            )
            for i, n in enumerate(cluster.nodes)
        ]
        for i in range(2):
            _wait_for_worker(tmp_path / f"l{i}")
        procs[1].send_signal(signal.SIGINT)
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [130, 130], outs
    for out in outs:
        assert "launcher on 198.18.0.2 received SIGINT" in out
        assert "restart 1" not in out
