"""The PS runtime across two namespace nodes: servers bind their node's own address."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.ps.test_training import reference
from tests.support.netns import netns_cluster
from tests.support.ps_workers.cluster import WORKERS, base_env

pytestmark = pytest.mark.netns


def test_sync_training_with_a_server_and_a_trainer_on_each_of_two_nodes(tmp_path):
    out = tmp_path / "result.npz"
    args = [str(WORKERS / "ctr_train.py"), str(out), "--mode", "sync", "--steps", "10"]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster, contextlib.ExitStack() as files:
        a, b = cluster.nodes
        env = base_env([f"{a.addr}:6170", f"{b.addr}:6170"], [f"{a.addr}:6171", f"{b.addr}:6171"])
        env["PADDLIKE_TIMEOUT"] = "30"
        procs = []
        for i, node in enumerate(cluster.nodes):
            server = dict(env, TRAINING_ROLE="PSERVER", POD_IP=node.addr, PADDLE_PORT="6170")
            trainer = dict(env, TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID=str(i))
            for role, e in (("server", server), ("trainer", trainer)):
                log = files.enter_context((tmp_path / f"{role}.{i}").open("wb"))
                procs.append(
                    (
                        f"{role} {i}",
                        log.name,
                        node.popen(
                            [sys.executable, *args], env=e, stdout=log, stderr=subprocess.STDOUT
                        ),
                    )
                )
        for name, log, p in procs:
            code = p.wait(60)
            assert code == 0, f"{name} exited {code}:\n{Path(log).read_text()}"
    w, emb = reference(steps=10, batch=64)
    got = np.load(out)
    np.testing.assert_allclose(got["w"], w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["emb"], emb, rtol=1e-4, atol=1e-5)
    assert f"serving on tcp://{b.addr}:6170" in (tmp_path / "server.1").read_text()
