"""Nodes of one job that see the same log directory (a shared home over NFS; the default
`log/` on many clusters) both run: the first takes the directory, the other a directory
of its own inside it, named by its address, with its own lock; `python -m paddlike.logs
DIR` shows the whole job. A launcher of another job on that directory is still refused,
naming the holder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.run.logdir import HEADER_PREFIX
from paddlike.logs.reader import load, node_dirs
from paddlike.summary import RunSummary, write_summary
from tests.support.multinode_common import LAUNCH, start_launcher, write_worker
from tests.support.netns import netns_cluster

IPS = "nodea,nodeb"
SLOW = ["--rdzv_timeout", "60"]


def _logs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paddlike.logs", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.netns
@pytest.mark.xdist_group("many_nodes_shared_log_dir")
def test_two_nodes_of_one_job_on_one_log_directory_both_run_and_keep_their_own_files(
    tmp_path: Path,
) -> None:
    script = write_worker(tmp_path)
    shared = tmp_path / "log"
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        procs = [start_launcher(n, IPS, shared, script, options=SLOW) for n in (a, b)]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    top = json.loads((shared / "summary.json").read_text())
    first = (a, b)[top["node_index"]]
    second = (b, a)[top["node_index"]]
    inner = shared / second.addr  # the later node: a directory named by its address
    assert f"this node writes to {inner}" in outs[(a, b).index(second)], outs
    dirs = {top["node_index"]: shared, 1 - top["node_index"]: inner}
    assert json.loads((inner / "summary.json").read_text())["node_index"] == 1 - top["node_index"]
    for index, d in dirs.items():
        assert (d / "endpoints.log").read_bytes() == (shared / "endpoints.log").read_bytes()
        for local in (0, 1):
            text = (d / f"workerlog.{local}").read_text()
            assert text.count(HEADER_PREFIX) == 1, text  # one run, nobody else's
            assert [line.split()[1] for line in text.splitlines() if line.startswith("RANK")] == [
                str(index * 2 + local)
            ], text
    assert not (shared / first.addr).exists()
    shown = _logs(str(shared), "--json")
    assert shown.returncode == 0, shown.stderr
    job = json.loads(shown.stdout)
    assert job["status"] == "succeeded"
    assert [n["node_index"] for n in job["nodes"]] == [0, 1]
    ranks = sorted((p["rank"], p["status"]) for n in job["nodes"] for p in n["processes"])
    assert ranks == [(0, "ok"), (1, "ok"), (2, "ok"), (3, "ok")]
    table = _logs(str(shared)).stdout
    assert "node 0 of 2" in table and "node 1 of 2" in table, table
    assert "job succeeded: 4 processes on 2 nodes" in table, table


@pytest.mark.netns
@pytest.mark.xdist_group("many_nodes_shared_log_dir")
def test_with_the_identical_command_on_both_nodes_a_shared_directory_shows_the_whole_job(
    tmp_path: Path,
) -> None:
    script = write_worker(tmp_path)
    shared = tmp_path / "log"
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        argv = [*LAUNCH, "--master", f"{a.addr}:7433", "--nnodes", "2", "--nproc_per_node", "2"]
        procs = [
            n.popen(
                [*argv, *SLOW, "--log_dir", str(shared), str(script)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for n in (a, b)
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len(node_dirs([shared])) == 2
    job = load([shared])
    assert [n.node_index for n in job.nodes] == [0, 1]
    assert sorted(p.rank for p in job.processes) == [0, 1, 2, 3]
    assert {p.status for p in job.processes} == {"ok"}


@pytest.mark.netns
@pytest.mark.xdist_group("many_nodes_shared_log_dir")
def test_a_launcher_of_another_job_on_the_shared_directory_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    script = write_worker(tmp_path)
    shared = tmp_path / "log"
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        sleepy = ["--sleep", "60"]
        job = [
            start_launcher(n, IPS, shared, script, options=SLOW, script_args=sleepy) for n in (a, b)
        ]
        for proc in job:  # past the rendezvous: both hold their log directories
            _await_line(proc, "rendezvous with 2 nodes")
        holder = json.loads((shared / ".paddlike.owner").read_text())
        # another job (it meets at another port) with the same directory, on node b
        argv = [*LAUNCH, "--ips", IPS, "--master_port", "7419", *SLOW]
        other = b.popen(
            [*argv, "--log_dir", str(shared), str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out = other.communicate(timeout=60)[0].decode()
        still = [p.poll() for p in job]
    assert other.returncode == 2, out
    assert (
        f"log directory {shared} is in use by launcher pid {holder['pid']} on host "
        f"{holder['host']}" in out
    ), out
    assert "for another job (the job meeting at" in out, out
    assert still == [None, None]  # the first job ran on, untouched


def _await_line(proc: subprocess.Popen[bytes], text: str) -> str:
    """Lines up to the first containing `text`."""
    assert proc.stdout is not None
    seen = ""
    for raw in proc.stdout:
        seen += raw.decode()
        if text in seen:
            return seen
    raise AssertionError(f"{text!r} never printed; output: {seen}")


def _node(path: Path, job_id: str, index: int, start: float) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    summary = RunSummary(
        job_id,
        "collective",
        index,
        2,
        f"198.18.0.{index + 1}",
        "h",
        str(path),
        start,
        status="succeeded",
        exit_code=0,
        end_time=start + 1,
    )
    write_summary(path, summary)
    (path / "workerlog.0").write_text("")
    return path


def test_the_reader_shows_the_top_nodes_job_and_leaves_out_earlier_runs_leftovers(
    tmp_path: Path,
) -> None:
    shared = _node(tmp_path / "log", "job-new", 1, 200.0)  # node 1 came first this time
    current = _node(shared / "198.18.0.1", "job-new", 0, 201.0)
    _node(shared / "198.18.0.2", "job-old", 1, 100.0)  # the last run's node 1, inside
    _node(shared / "198.18.0.1.2", "job-new", 0, 150.0)  # same node, an older directory
    assert node_dirs([shared]) == [shared, current]
    job = load([shared])
    assert [(n.node_index, n.log_dir) for n in job.nodes] == [(0, str(current)), (1, str(shared))]
    assert job.status == "succeeded"
