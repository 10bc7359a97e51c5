"""DeepSpeed's carried prefixes over real ssh (issue 31, point 10): this shell's
NCCL_SOCKET_IFNAME and PYTHON* variables reach every host's workers, as under DeepSpeed,
without --export; --export_prefixes none leaves them here (sshd gives a login its own
environment, so a variable seen by a worker was carried)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.cluster.common import LAUNCH, REPO, site

pytestmark = pytest.mark.timeout(180)
DUMP_ENV = REPO / "tests" / "support" / "workers" / "dump_env.py"
# (not the hosts' eth0, which each launcher gives NCCL when the user's does not arrive)
MINE = {"NCCL_SOCKET_IFNAME": "ib7", "PYTHONCARRIED": "from-the-login-shell"}


def _envs(s, out: Path, *options: str) -> list[dict[str, str]]:
    out.mkdir()
    hostfile = s.hostfile("h0 slots=1\nh1 slots=1\n")
    argv = [*LAUNCH, "--hostfile", str(hostfile), s.ssh.ssh_args, "--rdzv_timeout", "60",
            "--log_dir", str(s.tmp / out.name), *options, str(DUMP_ENV), str(out)]  # fmt: skip
    done = s.login.run(
        argv, timeout=120, capture_output=True, text=True, cwd=REPO, env={**os.environ, **MINE}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(p.read_text()) for p in sorted(out.glob("env.*.json"))]


def test_deepspeeds_prefixes_reach_every_hosts_workers_unless_turned_off(tmp_path) -> None:
    with site(tmp_path, hosts=2) as s:
        carried = _envs(s, tmp_path / "carried")
        kept = _envs(s, tmp_path / "kept", "--export_prefixes", "none")
        assert s.leftovers() == {}
    assert len(carried) == 2 and len(kept) == 2
    for env in carried:
        assert {k: env.get(k) for k in MINE} == MINE
    for env in kept:
        assert "PYTHONCARRIED" not in env
        assert env["NCCL_SOCKET_IFNAME"] == "eth0"  # the launcher's choice, not this shell's
