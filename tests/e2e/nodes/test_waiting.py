"""Many nodes, before and after the workers: what a launcher says while it waits, how a
signal there ends it (and the other nodes), a wrong job token, the job-wide "OK"."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from paddlike.distributed.store import StoreClient
from paddlike.launch.peers.protocol import end_key
from tests.support.fixed_ports import fixed_ports
from tests.support.logwait import read_until
from tests.support.multinode_common import LAUNCH, start_launcher, write_worker
from tests.support.netns import netns_cluster

OK_SCRIPT = "print('ran')\n"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal, whatever pytest inherited


def _loopback_launcher(
    tmp_path: Path, ips: str, rank: int, port: int, code: str = OK_SCRIPT
) -> subprocess.Popen[str]:
    """A launcher for "node `rank`" of nodes on loopback addresses (127.0.0.x)."""
    script = tmp_path / "ok.py"
    script.write_text(code)
    cmd = [*LAUNCH, "--ips", ips, "--node_rank", str(rank), "--master", f"127.0.0.1:{port}"]
    cmd += ["--rdzv_timeout", "30", "--log_dir", str(tmp_path / f"log{rank}"), str(script)]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_default_sigint,
    )


def _kill(procs: list[subprocess.Popen[str]]) -> None:
    """Cleanup, even when a test failed: no launcher outlives its test."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.communicate()


def test_a_node_waiting_for_node_0s_store_says_so_and_ends_130_on_ctrl_c(tmp_path):
    port = fixed_ports()
    proc = _loopback_launcher(tmp_path, "127.0.0.1,127.0.0.2", 1, port)
    try:
        seen = read_until(proc, f"waiting for node 0 (127.0.0.1:{port}) to host the launchers'")
        assert "(1 s of 30 s)" in seen, seen
        proc.send_signal(signal.SIGINT)
        out = seen + proc.communicate(timeout=20)[0]
    finally:
        _kill([proc])
    assert proc.returncode == 130, out
    assert "Traceback" not in out, out
    assert (
        f"received SIGINT while waiting for node 0 (127.0.0.1:{port}) to host the launchers' "
        "store: stopping" in out
    ), out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_rendezvous_ends_every_node_that_arrived(tmp_path, sig):
    # Three nodes on loopback: 0 and 1 arrive, 2 never comes; node 1 is stopped meanwhile.
    port = fixed_ports()
    ips = "127.0.0.1,127.0.0.2,127.0.0.3"
    node0 = _loopback_launcher(tmp_path, ips, 0, port)
    node1 = None
    try:
        read_until(node0, "waiting for node 1 (127.0.0.2), node 2 (127.0.0.3)")
        node1 = _loopback_launcher(tmp_path, ips, 1, port)
        read_until(node0, "waiting for node 2 (127.0.0.3)")
        started = time.monotonic()
        node1.send_signal(sig)
        outs = [p.communicate(timeout=20)[0] for p in (node0, node1)]
        took = time.monotonic() - started
    finally:
        _kill([p for p in (node0, node1) if p is not None])
    name = sig.name
    assert [node0.returncode, node1.returncode] == [128 + sig, 128 + sig], outs
    assert took < 5, outs
    assert f"received {name} while waiting for " in outs[1], outs[1]
    assert "at the rendezvous at 127.0.0.1" in outs[1], outs[1]
    # (its line ends "; told the other nodes" when it saw node 0's arrival counted; under
    # load it may stop before it reads that count, and node 0 then learns it from node 1's
    # guardian: the line below is what must hold)
    assert (
        f"the job stopped during the rendezvous: launcher on 127.0.0.2 received {name}" in outs[0]
    ), outs[0]
    assert not any("Traceback" in out for out in outs), outs


# Rank 0 (node 0) works on; rank 1 (node 1) is done at once, so node 1 waits for node 0.
RANK_0_WORKS_ON = """
import os, time
if os.environ["PADDLE_TRAINER_ID"] == "0":
    time.sleep(120)  # stopped by its launcher when node 1 stops the job
"""


def test_a_signal_while_waiting_for_the_other_nodes_leaves_a_whole_summary(tmp_path):
    # As a Slurm scancel's SIGTERM may land: this node's workers have ended, it waits for
    # node 0's end; its summary.json must still get every process's end and its exit code.
    port = fixed_ports()
    ips = "127.0.0.1,127.0.0.2"
    procs = [_loopback_launcher(tmp_path, ips, r, port, RANK_0_WORKS_ON) for r in (0, 1)]
    try:
        store = StoreClient("127.0.0.1", port, timeout=60)
        try:
            store.get(end_key(0, 1), timeout=60)  # set as node 1 starts waiting for the others
        finally:
            store.close()
        procs[1].send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=30)[0] for p in procs]
    finally:
        _kill(procs)
    assert procs[1].returncode == 143, outs[1]
    assert "received SIGTERM while waiting for the other nodes to finish round 0" in outs[1]
    summary = json.loads((tmp_path / "log1" / "summary.json").read_text())
    assert (summary["status"], summary["exit_code"]) == ("interrupted", 143), summary
    assert [(p["status"], p["exit_code"]) for p in summary["processes"]] == [("ok", 0)], summary
    assert "received SIGTERM" in summary["root_cause"]["reason"], summary


@pytest.mark.netns
def test_a_wrong_job_token_stops_that_node_at_once_and_node_0_notes_it_once(tmp_path):
    # Node 0 does not end the job for a refused handshake: a stranger can fail one on
    # purpose (issue 31). It logs the address once and waits out --rdzv_timeout.
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        opts = ["--rdzv_timeout", "10"]
        pa = start_launcher(
            a, "nodea,nodeb", tmp_path / "la", script, options=[*opts, "--job_token", "right"]
        )
        pb = start_launcher(
            b, "nodea,nodeb", tmp_path / "lb", script, options=[*opts, "--job_token", "wrong"]
        )
        outs = [p.communicate(timeout=60)[0].decode() for p in (pa, pb)]
    assert (pa.returncode, pb.returncode) == (1, 2), outs
    assert "rejected this client's job token; the launcher on node 1 (198.18.0.2) " in (
        outs[1]
    ), outs[1]
    assert "as the one on node 0, which hosts that store" in outs[1], outs[1]
    refused = [line for line in outs[0].splitlines() if "refused peer" in line]
    assert refused == [
        "paddlike store: 198.18.0.1:6170 refused peer 198.18.0.2: wrong or missing job token "
        "(logged once per address)"
    ], outs[0]
    assert "node 1 (198.18.0.2) never joined" in outs[0], outs[0]
    assert (
        "this node's store refused 198.18.0.2 for a wrong or missing job token: a launcher "
        "there may have another --job_token than this node's"
    ) in outs[0], outs[0]


@pytest.mark.netns
def test_a_node_whose_workers_succeeded_says_no_ok_when_the_job_failed_elsewhere(tmp_path):
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        args = ["--fail", "3", "--after", "1.5", "--code", "3"]  # rank 3 is on node b
        procs = [
            start_launcher(n, "nodea,nodeb", tmp_path / f"l{i}", script, script_args=args)
            for i, n in enumerate(cluster.nodes)
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [3, 3], outs
    assert "OK:" not in outs[0], outs[0]
    assert "the job failed on another node" in outs[0], outs[0]


@pytest.mark.netns
def test_every_node_says_ok_once_the_whole_job_succeeded(tmp_path):
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = [
            start_launcher(n, "nodea,nodeb", tmp_path / f"l{i}", script)
            for i, n in enumerate(cluster.nodes)
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("OK: 2 workers finished" in out for out in outs), outs


def test_two_torchrun_style_nodes_on_one_machine_meet_on_loopback(tmp_path):
    # --nnodes 2 --node_rank R --master_addr 127.0.0.1, as torchrun users try it on one host;
    # --master_port P is the workers' store, and the launchers meet at P+1: both reserved
    port = fixed_ports(2)
    script = write_worker(tmp_path)
    procs: list[subprocess.Popen[str]] = []
    try:
        for rank in (0, 1):
            argv = [*LAUNCH, "--nnodes", "2", "--node_rank", str(rank), "--master_addr"]
            argv += ["127.0.0.1", "--master_port", str(port), "--nproc_per_node", "2"]
            argv += ["--rdzv_timeout", "30", "--log_dir", str(tmp_path / f"l{rank}"), str(script)]
            procs.append(
                subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            )
        outs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        _kill(procs)
    assert [p.returncode for p in procs] == [0, 0], outs
    endpoints = {(tmp_path / f"l{rank}" / "endpoints.log").read_text() for rank in (0, 1)}
    assert len(endpoints) == 1, endpoints
    for rank in (0, 1):
        ranks = []
        for log in sorted((tmp_path / f"l{rank}").glob("workerlog.*")):
            ranks += [
                int(ln.split()[1]) for ln in log.read_text().splitlines() if ln[:5] == "RANK "
            ]
        assert sorted(ranks) == [2 * rank, 2 * rank + 1]
