"""`--hang_timeout` and SIGUSR1 on two namespace nodes × 2 ranks: a torch gloo job whose
rank 3 (node b) is stuck in `load_batch` while ranks 0–2 wait in all_reduce. Every node
prints the job-wide summary naming rank 3, and with `--on_hang abort` both launchers
exit 124 with that summary as the root cause; SIGUSR1 to node a's launcher makes both
nodes write their ranks' stacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from paddlike.logs.stacks import find_py_spy
from tests.support.hang_workers.running import REPO, all_blocked, wait_until

pytestmark = [
    pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed"),
    pytest.mark.timeout(150),
]

SCRIPT = REPO / "tests" / "support" / "hang_workers" / "torch_load_batch.py"
ODD = "rank 3 (198.18.0.2, workerlog.1) is in `load_batch` at torch_load_batch.py:14"
OTHERS = "ranks 0–2 (3 of 4) wait in `all_reduce` called from torch_load_batch.py:26 (main)"


def ready(out: Path, n: int):
    return lambda: all((out / f"ready.{r}").exists() for r in range(n))


def finish(proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    try:
        return proc.communicate(timeout=timeout)[0].decode()
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0].decode() + "\n[killed: did not end in time]"


def start_pair(cluster, tmp_path: Path, out: Path, options: list[str]):
    from tests.support.multinode_common import start_launcher

    a, b = cluster.nodes
    logs_a, logs_b = tmp_path / "nodes" / "a", tmp_path / "nodes" / "b"
    pa = start_launcher(a, "nodea,nodeb", logs_a, SCRIPT, options=options, script_args=[str(out)])
    pb = start_launcher(b, "nodea,nodeb", logs_b, SCRIPT, options=options, script_args=[str(out)])
    return pa, pb, logs_a, logs_b


def test_a_hang_on_two_nodes_is_named_on_both_and_aborts_both_with_code_124(tmp_path):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    from tests.support.netns import netns_cluster

    out = tmp_path / "out"
    out.mkdir()
    options = ["--hang_timeout", "5", "--on_hang", "abort", "--kill_timeout", "2"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        pa, pb, logs_a, logs_b = start_pair(cluster, tmp_path, out, options)
        wait_until("every rank is about to block", ready(out, 4), pa, tmp_path)
        blocked = time.monotonic()
        console_a, console_b = finish(pa), finish(pb)
        took = time.monotonic() - blocked
    for name, proc, console, logs in (("a", pa, console_a, logs_a), ("b", pb, console_b, logs_b)):
        assert proc.returncode == 124, f"node {name}:\n{console}"
        assert f"paddlike.launch:   {ODD}\n" in console, f"node {name}:\n{console}"
        assert f"paddlike.launch:   {OTHERS}\n" in console, f"node {name}:\n{console}"
        summary = json.loads((logs / "summary.json").read_text())
        assert summary["exit_code"] == 124
        assert summary["root_cause"]["reason"] == ODD
        (dump,) = (logs / "stacks").iterdir()
        assert (dump / "summary.txt").read_text().splitlines()[:2] == [ODD, OTHERS]
        (hang,) = summary["hangs"]  # every node keeps the job-wide diagnosis, its own dump
        assert (hang["rank"], hang["stacks"]) == (3, f"stacks/{dump.name}")
        assert hang["summary"][:2] == [ODD, OTHERS]
    # 5 s of silence, the stacks on both nodes at once (≤ 10 s), the teardown
    assert took < 5 + 10 + 10, f"the hang ended the job {took:.1f} s after the ranks blocked"


def test_a_stopped_rank_on_two_nodes_is_found_about_s_after_the_jobs_last_step(tmp_path):
    """SIGSTOP to rank 3 (node b) of paddlike's all_reduce steps; rank 0 (node a) logs a
    line 1 s later. Node b's request at S finds that life ("no hang yet"); node a asks
    once its own ranks reach S: the stacks come about S after the job's last sign of
    life (S + 1 after the SIGSTOP), not S after node b's request."""
    from tests.support.netns import netns_cluster

    out = tmp_path / "out"
    out.mkdir()
    script = REPO / "tests" / "support" / "hang_workers" / "steps.py"
    options = ["--hang_timeout", "5", "--on_hang", "abort", "--kill_timeout", "5"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        from tests.support.multinode_common import start_launcher

        a, b = cluster.nodes
        logs_a, logs_b = tmp_path / "nodes" / "a", tmp_path / "nodes" / "b"
        pa = start_launcher(a, "nodea,nodeb", logs_a, script, options=options,
                            script_args=[str(out)])  # fmt: skip
        pb = start_launcher(b, "nodea,nodeb", logs_b, script, options=options,
                            script_args=[str(out)])  # fmt: skip
        wait_until("every rank did 3 steps", ready(out, 4), pa, tmp_path)
        summary_b = json.loads((logs_b / "summary.json").read_text())
        pid = next(p["pid"] for p in summary_b["processes"] if p["rank"] == 3)
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        time.sleep(1.0)  # the job's last sign of life: a line of rank 0's, 1 s later
        with (logs_a / "workerlog.0").open("a") as f:
            f.write("rank 0: a line from another thread\n")
        console_a, console_b = finish(pa), finish(pb)
    stopped_line = (
        "rank 3 (198.18.0.2, workerlog.1) is stopped (SIGSTOP, or held by a debugger): no stack"
    )
    for name, proc, console, logs in (("a", pa, console_a, logs_a), ("b", pb, console_b, logs_b)):
        assert proc.returncode == 124, f"node {name}:\n{console}"
        assert f"paddlike.launch:   {stopped_line}\n" in console, f"node {name}:\n{console}"
        (dump,) = (logs / "stacks").iterdir()
        took = (dump / "summary.txt").stat().st_mtime - stopped
        assert took < 1 + 5 + 2, f"node {name}: stacks {took:.1f} s after SIGSTOP:\n{console}"
        assert "stacks of 2 ranks of this node in " in console
        cause = json.loads((logs / "summary.json").read_text())["root_cause"]
        assert cause["reason"] == stopped_line
        assert (cause["role"], cause["rank"], cause["node_index"], cause["host"]) == (
            "trainer",
            3,
            1,
            "198.18.0.2",
        ), f"node {name}: {cause}"
        assert cause["log_file"] == str(logs_b / "workerlog.1")
        assert "make it exit on SIGTERM" not in console, f"node {name}:\n{console}"
    assert f"trainer rank 3 (pid {pid}) is stopped (SIGSTOP, or held by a debugger): " in console_b
    # node b asked first and was told of node a's life; node a then found the hang
    assert "on this node, but ranks on other nodes show life: no hang yet" in console_b
    assert "hang: no progress for 5 s on any rank" in console_a


def test_sigusr1_to_one_launcher_writes_every_ranks_stack_on_both_nodes(tmp_path):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    from tests.support.netns import netns_cluster

    out = tmp_path / "out"
    out.mkdir()
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        pa, pb, logs_a, logs_b = start_pair(cluster, tmp_path, out, ["--kill_timeout", "2"])
        wait_until("every rank is about to block", ready(out, 4), pa, tmp_path)
        wait_until("every rank blocks", all_blocked(logs_a, logs_b), pa, tmp_path)
        pa.send_signal(signal.SIGUSR1)

        def written() -> bool:
            return all(
                any((d / "stacks.json").exists() for d in (logs / "stacks").glob("*"))
                for logs in (logs_a, logs_b)
            )

        wait_until("both nodes' dumps", written, pa, tmp_path)
        assert pa.poll() is None and pb.poll() is None, "SIGUSR1 ended the job"
        pa.send_signal(signal.SIGTERM)
        console_a, console_b = finish(pa), finish(pb)
    for logs, ranks, console in ((logs_a, [0, 1], console_a), (logs_b, [2, 3], console_b)):
        (dump,) = (logs / "stacks").iterdir()
        assert sorted(p.name for p in dump.glob("rank.*.txt")) == [f"rank.{r}.txt" for r in ranks]
        assert (dump / "summary.txt").read_text().splitlines()[:2] == [ODD, OTHERS], console
        assert f"paddlike.launch:   {ODD}\n" in console
