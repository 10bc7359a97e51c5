"""A parameter server on one namespace node, attacked from a stranger's node and a job host."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.distributed.ps.test_auth import PEER, TOKEN, job_env, without_token
from tests.support.netns import Node, netns_cluster
from tests.support.ps_workers.cluster import WORKERS

pytestmark = pytest.mark.netns


def run_peer(node: Node, env: dict[str, str], *args: str) -> object:
    done = node.run(
        [sys.executable, "-c", PEER, *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_hello_save_and_push_from_a_stranger_or_a_job_host_without_the_token_are_refused(
    tmp_path,
):
    chosen = tmp_path / "attacker-chosen"
    with netns_cluster(3, ["nodea", "nodeb", "stranger"]) as cluster:
        a, b, c = cluster.nodes
        server_ep = f"{a.addr}:6170"
        env = job_env(server_ep, f"{b.addr}:6171", TOKEN)
        env["PADDLIKE_NODE_HOSTS"] = "nodea,nodeb"  # names: resolved on the server's node
        log = tmp_path / "serverlog.0"
        with log.open("wb") as out:
            server = a.popen(
                [sys.executable, str(WORKERS / "serve.py")],
                env=dict(env, TRAINING_ROLE="PSERVER", POD_IP=a.addr, PADDLE_PORT="6170"),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        assert run_peer(b, env, server_ep, "use") == [-1.0] * 4

        attacks = {
            "a stranger's node, with the token": (c, env),
            "a job host, without the token": (b, without_token(env)),
        }
        for who, (node, attacker_env) in attacks.items():
            result = run_peer(node, attacker_env, server_ep, "attack", str(chosen))
            assert all(r["refused"] for r in result.values()), (who, result)
            for op in ("HELLO", "SAVE", "PUSH"):
                assert result[op]["seconds"] < 5, (who, result)
                assert f"parameter server 0 at {server_ep} refused" in result[op]["error"]

        assert not chosen.exists()
        assert not list(tmp_path.glob("attacker-chosen*"))
        assert run_peer(b, env, server_ep, "check") == [-1.0] * 4  # no push of 100 got in
        assert server.wait(30) == 0
    text = log.read_text()
    refusals = sorted(line for line in text.splitlines() if "refused peer" in line)
    assert refusals == [
        f"paddlike auth: parameter server 0: refused peer {b.addr}: it has no job token "
        "(logged once per address)",
        f"paddlike auth: parameter server 0: refused peer {c.addr}: its address is not one "
        "of the job's hosts (logged once per address)",
    ], text
    assert "error reply" not in text  # nothing the attackers sent reached the server
    assert TOKEN not in text
