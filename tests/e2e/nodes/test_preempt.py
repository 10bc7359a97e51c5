"""A preemption notice on many nodes (issue 34), on node 0's store and on etcd: SIGTERM to
a random node's launcher at a random moment; every node hears of it through the store,
says where it came from, and every rank of the job saves the same step (`should_stop`),
then the job ends 143."""

from __future__ import annotations

import os
import random
import signal
import sys
import time

import pytest

from tests.e2e.elastic.test_nodes import ETCD, _etcd_on
from tests.support.collective_workers.launching import REPO
from tests.support.netns import netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]
SAVER = REPO / "tests" / "support" / "signal_workers" / "save_at_stop.py"
NODES, NPROC = 2, 2


def _env() -> dict[str, str]:
    drop = ("PADDLIKE_", "SLURM_", "PADDLE_", "POD_IP", "GLOO_", "NCCL_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize(("seed", "backend"), [(34, "store"), (3434, "store"), (35, "etcd")])
def test_a_notice_to_a_random_node_saves_the_same_step_on_every_rank(seed, backend, tmp_path):
    if backend == "etcd" and ETCD is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    rng = random.Random(seed)
    victim, delay = rng.randrange(NODES), rng.uniform(0.2, 2.0)
    out = tmp_path / "out"
    out.mkdir()
    with netns_cluster(NODES + 1) as cluster:  # the last: etcd's (unused on the store)
        nodes = cluster.nodes[:NODES]
        addrs = [n.addr for n in nodes]
        where = ["--ips", ",".join(addrs)]
        if backend == "etcd":
            _etcd, master = _etcd_on(cluster.nodes[-1], tmp_path)
            where = [*where, "--master", master, "--job_id", f"preempt-{seed}"]
        procs = []
        for i, node in enumerate(nodes):
            argv = [sys.executable, "-m", "paddlike.launch", *where,
                    "--nproc_per_node", str(NPROC), "--devices", "cpu", "--tee", "none",
                    "--log_dir", str(tmp_path / f"log{i}"), "--rdzv_timeout", "60",
                    str(SAVER), str(out), "0.02"]  # fmt: skip
            with open(tmp_path / f"out{i}.txt", "wb") as f:
                procs.append(node.popen(argv, env=_env(), stdout=f, stderr=-2))
        try:
            deadline = time.monotonic() + 90
            while not all((out / f"ready.{r}").exists() for r in range(NODES * NPROC)):
                assert all(p.poll() is None for p in procs), "a launcher ended before its ranks ran"
                assert time.monotonic() < deadline, "the ranks never all ran a step"
                time.sleep(0.02)  # the ranks' files are all there is to wait on
            time.sleep(delay)  # the random moment
            procs[victim].send_signal(signal.SIGTERM)
            codes = [p.wait(timeout=90) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    outs = [(tmp_path / f"out{i}.txt").read_text(errors="replace") for i in range(NODES)]
    saved = {int(p.suffix[1:]): int(p.read_text()) for p in out.glob("saved.*")}
    assert sorted(saved) == list(range(NODES * NPROC)), "\n".join(outs)
    assert len(set(saved.values())) == 1, saved
    assert codes == [143] * NODES, "\n".join(outs)
    where = f"preemption notice: SIGTERM on node {victim} ({addrs[victim]}) at "
    for text in outs:
        assert where in text, text
        assert f"stop step {saved[0]}: should_stop() is True there on every rank" in text
        assert f"every rank stopped after step {saved[0]}" in text.strip().splitlines()[-1], text


TORCH_SAVER = REPO / "tests" / "support" / "signal_workers" / "torch_save_on_notice.py"


def _read_logs(*dirs) -> str:
    """`python -m paddlike.logs DIR...`'s text."""
    import subprocess

    view = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", *map(str, dirs)],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    return view.stdout + view.stderr


def _torch_nodes_preempted(tmp_path, slow_rank: int, then) -> tuple[list, list[str], dict, list]:
    """3 nodes of one torch gloo rank each (`TORCH_SAVER`, `slow_rank` saving for 60 s);
    SIGTERM to node 1's launcher once every rank ran a step, then `then(procs)` once the
    slow rank is in its save. Every launcher's exit code and output, and who saved which
    step; the nodes' addresses."""
    pytest.importorskip("torch.distributed", reason="torch is not installed (make torch-env)")
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "t").mkdir()
    env = {**_env(), "TMPDIR": str(tmp_path / "t")}  # the DataLoader workers' directories
    with netns_cluster(3) as cluster:
        addrs = [n.addr for n in cluster.nodes]
        procs = []
        for i, node in enumerate(cluster.nodes):
            argv = [sys.executable, "-m", "paddlike.launch", "--ips", ",".join(addrs),
                    "--nproc_per_node", "1", "--devices", "cpu", "--tee", "none",
                    "--log_dir", str(tmp_path / f"log{i}"), "--rdzv_timeout", "60",
                    str(TORCH_SAVER), str(out), str(slow_rank)]  # fmt: skip
            with open(tmp_path / f"out{i}.txt", "wb") as f:
                procs.append(node.popen(argv, env=env, stdout=f, stderr=-2))
        try:
            deadline = time.monotonic() + 120
            while not all((out / f"ready.{r}").exists() for r in range(3)):
                assert all(p.poll() is None for p in procs), "a launcher ended before its ranks ran"
                assert time.monotonic() < deadline, "the ranks never all ran a step"
                time.sleep(0.02)  # the ranks' files are all there is to wait on
            procs[1].send_signal(signal.SIGTERM)  # the notice
            while not (out / f"saving.{slow_rank}").exists():  # at the stop step, saving
                assert procs[slow_rank].poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            then(procs)
            codes = [p.wait(timeout=90) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    outs = [(tmp_path / f"out{i}.txt").read_text(errors="replace") for i in range(3)]
    saved = {int(p.suffix[1:]): int(p.read_text()) for p in out.glob("saved.*")}
    return codes, outs, saved, addrs


def test_a_second_sigterm_that_kills_a_nodes_rank_is_said_on_every_node(tmp_path):
    # A user's trial: a real torch gloo script on 3 nodes; node 1's launcher gets the
    # notice, then a second SIGTERM while its rank saves (the documented "kill now"). The
    # other nodes' ranks saved; rank 1 did not: every node's last line, and the reader
    # of any one node's log directory, must say so, not "every rank stopped".
    codes, outs, saved, _ = _torch_nodes_preempted(
        tmp_path, 1, lambda procs: procs[1].send_signal(signal.SIGTERM)
    )
    assert sorted(saved) == [0, 2], "\n".join(outs)
    assert saved[0] == saved[2]
    assert "received SIGTERM again: killing the remaining processes now" in outs[1]
    assert codes == [143] * 3, "\n".join(outs)
    missed = f"stop step {saved[0]}: rank 1 (killed) did not stop at it"
    for i, text in enumerate(outs):
        last = text.strip().splitlines()[-1]
        assert missed in last, f"node {i}:\n{text}"
        assert "every rank stopped" not in last
    for i in range(3):  # each node's own log directory, as a user there reads it
        view = _read_logs(tmp_path / f"log{i}")
        assert missed in view, f"log{i}:\n{view}"
        assert "every rank stopped" not in view
    assert missed in _read_logs(*(tmp_path / f"log{i}" for i in range(3)))


def test_a_node_lost_during_the_save_is_named_unknown_not_counted_as_stopped(tmp_path):
    # node 2's launcher is SIGKILLed while its rank saves: no word of its ranks can come
    # (its guardian marks it lost); nodes 0 and 1 must not say "every rank stopped"
    codes, outs, saved, addrs = _torch_nodes_preempted(
        tmp_path, 2, lambda procs: procs[2].send_signal(signal.SIGKILL)
    )
    assert sorted(saved) == [0, 1], "\n".join(outs)
    assert codes[:2] == [143, 143], "\n".join(outs)
    unknown = (
        f"node 2 ({addrs[2]}): unknown whether its ranks stopped at it (its launcher was lost)"
    )
    for i in (0, 1):
        last = outs[i].strip().splitlines()[-1]
        assert f"stop step {saved[0]}: {unknown}" in last, f"node {i}:\n{outs[i]}"
        assert "every rank stopped" not in last
        assert unknown in _read_logs(tmp_path / f"log{i}")
