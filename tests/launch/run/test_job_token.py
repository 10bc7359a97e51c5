"""A one-node job gets a secret of its own: another local user, without it, can use
neither the workers' store nor the parameter servers of the job (loopback included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlike.distributed.ps import auth
from paddlike.distributed.ps.client import Client, PsAuthError
from paddlike.distributed.ps.wire import Message, Op
from paddlike.distributed.store import StoreAuthError, StoreClient, StoreError

DEADLINE = 60.0

# Writes what an outsider would need to reach the job (its endpoints, never the token's
# value), then waits until the test has tried; collective workers also host rank 0's store.
WORKER = r"""
import json, os, sys, time
out = sys.argv[1]
role = os.environ.get("TRAINING_ROLE", "TRAINER")
if role == "PSERVER":
    from paddlike.distributed import ps
    ps.init()
    ps.run_server()
    sys.exit(0)
if os.environ.get("PADDLE_PSERVERS_IP_PORT_LIST"):
    from paddlike.distributed import ps
    ps.init(); ps.init_worker()
else:
    import paddlike.distributed as dist
    dist.init_parallel_env()
seen = {k: os.environ.get(k, "") for k in ("PADDLE_MASTER", "PADDLE_PSERVERS_IP_PORT_LIST")}
seen["has_token"] = bool(os.environ.get("PADDLIKE_JOB_TOKEN"))
tmp = os.path.join(out, f"seen.{os.getpid()}.tmp")
with open(tmp, "w") as f:
    json.dump(seen, f)
os.replace(tmp, os.path.join(out, "seen.json"))
end = time.monotonic() + 60
while not os.path.exists(os.path.join(out, "tried")) and time.monotonic() < end:
    time.sleep(0.02)
if os.environ.get("PADDLE_PSERVERS_IP_PORT_LIST"):
    ps.stop_worker()
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PADDLE_"))}


def _start(tmp_path: Path, *options: str) -> tuple[subprocess.Popen[str], dict]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cmd = [sys.executable, "-m", "paddlike.launch", *options, "--log_dir", str(tmp_path / "log")]
    proc = subprocess.Popen(
        [*cmd, str(script), str(tmp_path)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = tmp_path / "seen.json"
    end = time.monotonic() + DEADLINE
    while not seen.exists():  # the worker's own file: nothing to await but its appearance
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            pytest.fail(f"the job never started: {proc.communicate()[0]}")
        time.sleep(0.02)
    return proc, json.loads(seen.read_text())


def _finish(tmp_path: Path, proc: subprocess.Popen[str]) -> str:
    (tmp_path / "tried").touch()
    try:
        out, _ = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    return out


def test_a_local_process_without_the_token_cannot_use_the_workers_store(tmp_path):
    proc, seen = _start(tmp_path, "--nproc_per_node", "2")  # rank 0 hosts the store
    try:
        assert seen["has_token"]
        host, _, port = seen["PADDLE_MASTER"].rpartition(":")
        with (
            pytest.raises(StoreAuthError),
            StoreClient(host, int(port), timeout=5.0, token=None, reconnect_timeout=0.0) as kv,
        ):
            kv.try_get("anything")
    finally:
        out = _finish(tmp_path, proc)
    assert "PADDLIKE_JOB_TOKEN" not in out  # never printed


def test_a_local_process_without_the_token_cannot_pull_from_the_parameter_servers(tmp_path):
    proc, seen = _start(tmp_path, "--server_num", "1", "--worker_num", "1")
    try:
        assert seen["has_token"]
        server = seen["PADDLE_PSERVERS_IP_PORT_LIST"]
        client = Client([server], 0, 5.0, policy=auth.Policy.create(None, None))
        try:
            with pytest.raises((PsAuthError, StoreError)):
                client.call([(0, Message(Op.HELLO, arg0=1, arg1=1))], probe=False)
        finally:
            client.close()
    finally:
        _finish(tmp_path, proc)
