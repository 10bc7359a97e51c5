"""`--hang_timeout` and SIGUSR1 on two namespace nodes × 2 ranks: a torch gloo job whose
rank 3 (node b) is stuck in `load_batch` while ranks 0–2 wait in all_reduce. Every node
prints the job-wide summary naming rank 3, and with `--on_hang abort` both launchers
exit 124 with that summary as the root cause; SIGUSR1 to node a's launcher makes both
nodes write their ranks' stacks."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from paddlike.logs.stacks import find_py_spy
from tests.hang_workers.running import REPO, all_blocked, wait_until

pytestmark = [
    pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed"),
    pytest.mark.timeout(150),
]

SCRIPT = REPO / "tests" / "hang_workers" / "torch_load_batch.py"
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
    from tests.multinode_common import start_launcher

    a, b = cluster.nodes
    logs_a, logs_b = tmp_path / "nodes" / "a", tmp_path / "nodes" / "b"
    pa = start_launcher(a, "nodea,nodeb", logs_a, SCRIPT, options=options, script_args=[str(out)])
    pb = start_launcher(b, "nodea,nodeb", logs_b, SCRIPT, options=options, script_args=[str(out)])
    return pa, pb, logs_a, logs_b


def test_a_hang_on_two_nodes_is_named_on_both_and_aborts_both_with_code_124(tmp_path):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    from tests.netns import netns_cluster

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
    # 5 s of silence, the stacks on both nodes at once (≤ 10 s), the teardown
    assert took < 5 + 10 + 10, f"the hang ended the job {took:.1f} s after the ranks blocked"


def test_sigusr1_to_one_launcher_writes_every_ranks_stack_on_both_nodes(tmp_path):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    from tests.netns import netns_cluster

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
