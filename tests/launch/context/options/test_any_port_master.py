"""`--rdzv_endpoint HOST:0` on one node (any free port): the endpoint is dropped, but an
IPv6 host stays this node's address, so the job runs on IPv6 as the user asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.context.options import parse_options
from tests.e2e.nodes.test_start import clean_env

DUMP_ENV = Path(__file__).resolve().parents[3] / "support" / "workers" / "dump_env.py"


@pytest.mark.parametrize(
    ("argv", "env", "ips"),
    [
        (["--rdzv_backend", "c10d", "--rdzv_endpoint", "[::1]:0"], {}, ("::1",)),
        (["--master", "[fd00::1]:0"], {}, ("fd00::1",)),
        ([], {"PET_RDZV_ENDPOINT": "[::1]:0"}, ("::1",)),
        (["--rdzv_endpoint", "localhost:0"], {}, ("127.0.0.1",)),  # IPv4 default kept
        (["--rdzv_endpoint", "127.0.0.1:0"], {}, ("127.0.0.1",)),
        (["--rdzv_endpoint", "[::1]:0", "--ips", "127.0.0.1"], {}, ("127.0.0.1",)),  # --ips wins
    ],
)
def test_port_0_on_one_node_keeps_an_ipv6_host_as_the_nodes_address(argv, env, ips):
    options = parse_options([*argv, "t.py"], env)
    assert options.master is None
    assert options.ips == ips


def _has_ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.timeout(60)
@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_a_one_node_job_at_an_ipv6_any_port_endpoint_runs_on_ipv6(tmp_path):
    envs = tmp_path / "envs"
    envs.mkdir()
    argv = [sys.executable, "-m", "paddlike.launch", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", "[::1]:0", "--nproc_per_node", "1",
            "--log_dir", str(tmp_path / "log"), str(DUMP_ENV), str(envs)]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, env=clean_env(), capture_output=True, timeout=50)
    out = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, out
    assert "::1 on lo" in out, out
    (env,) = [json.loads(p.read_text()) for p in envs.glob("*.json")]
    assert env["MASTER_ADDR"] == "::1"
    assert env["PADDLE_CURRENT_ENDPOINT"].startswith("[::1]:")
