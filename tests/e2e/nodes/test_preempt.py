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
