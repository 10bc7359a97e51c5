"""Messages that quote what the user typed and count what they name: one port is
"port P", an etcd endpoint is quoted as given (not as the etcd:// URL made of it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)


def _launch(tmp_path, *argv: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    (tmp_path / "t.py").write_text("open('STARTED', 'w').close()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", *argv, "t.py"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=45,
    )  # fmt: skip


def test_one_port_in_use_is_named_as_one_port(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = _launch(tmp_path, "--start_port", str(port), "--master_port", str(port + 7))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"paddlike.launch: error: --start_port {port}: port {port} on 127.0.0.1 is in use "
        f"(Address already in use); pick another --start_port (this node needs port {port})"
    ]
    assert not (tmp_path / "STARTED").exists()


def test_an_etcd_endpoint_without_a_port_is_quoted_as_typed(tmp_path):
    done = _launch(tmp_path, "--rdzv_backend", "etcd", "--rdzv_endpoint", "localhost:0")
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        "paddlike.launch: error: --rdzv_endpoint: expected a port number 1-65535 for etcd, "
        "got 'localhost:0'"
    ])  # fmt: skip
