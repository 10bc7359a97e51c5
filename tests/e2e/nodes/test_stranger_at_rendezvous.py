"""A stranger at node 0's store during the rendezvous (issue 31): another local user of a
shared machine, or the same user, connects to the launchers' store of a job with a token
and sends junk. Its connection is refused on its own: node 0 notes it once and both
nodes go on to finish the job. A launcher of the job with another token stops, naming
itself rather than node 0."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
from pathlib import Path

import pytest

from tests.support.fixed_ports import fixed_ports
from tests.support.logwait import read_until
from tests.support.multinode_common import LAUNCH
from tests.support.second_user import SYSTEM_PYTHON, as_second_user

pytestmark = pytest.mark.timeout(180)

# What the stranger runs, with only the standard library: 16 zero bytes (an empty answer
# to the challenge, then more), then a length prefix of almost 4 GiB on a fresh connection;
# each read until the store closes it. argv: host port
STRANGER = r"""
import socket, struct, sys
address = (sys.argv[1], int(sys.argv[2]))
for junk in (bytes(16), struct.pack(">I", 0xFFFFFFF0) + bytes(12)):
    with socket.create_connection(address, timeout=20) as s:
        s.sendall(junk)
        while s.recv(4096):
            pass
print("closed by the store")
"""
WORKER = "print('ran')\n"


def _launcher(
    tmp_path: Path, port: int, token: Path, node: int, rdzv_timeout: int = 60
) -> subprocess.Popen[str]:
    """One of the two launchers typed in two terminals (its rank comes from the rendezvous)."""
    argv = [*LAUNCH, "--master", f"127.0.0.1:{port}", "--nnodes", "2"]
    argv += ["--job_token_file", str(token), "--rdzv_timeout", str(rdzv_timeout)]
    argv += ["--log_dir", str(tmp_path / f"log{node}"), str(tmp_path / "worker.py")]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _token_file(path: Path, token: str) -> Path:
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def test_junk_from_another_user_at_the_rendezvous_neither_stops_nor_floods_the_job(
    tmp_path: Path,
) -> None:
    stranger = as_second_user()  # (skips where there is no second user to be)
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"no {SYSTEM_PYTHON} for the second user")
    port = fixed_ports()
    token = _token_file(tmp_path / "tok600", "s3cret")
    (tmp_path / "worker.py").write_text(WORKER)
    procs = [_launcher(tmp_path, port, token, 0)]
    try:
        early = read_until(procs[0], "waiting for 1 of 2 nodes")  # node 0 at the rendezvous
        other = subprocess.run(
            [*stranger, SYSTEM_PYTHON, "-c", STRANGER, "127.0.0.1", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.stdout == "closed by the store\n", (other.stderr, procs[0].poll())
        with socket.create_connection(("127.0.0.1", port), timeout=20) as same_user:
            same_user.sendall(bytes(16) + struct.pack(">I", 0xFFFFFFF0))
            while same_user.recv(4096):
                pass
        procs.append(_launcher(tmp_path, port, token, 1))
        outs = [early + procs[0].communicate(timeout=120)[0], procs[1].communicate(timeout=60)[0]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("OK: 1 worker finished" in out and "(2 nodes)" in out for out in outs), outs
    refused = [line for line in outs[0].splitlines() if "refused" in line]
    assert refused == [
        f"paddlike store: 127.0.0.1:{port} refused peer 127.0.0.1: wrong or missing job token "
        "(logged once per address)"
    ], outs[0]
    assert "refused" not in outs[1], outs[1]


def test_the_second_launcher_on_one_machine_with_another_token_names_itself(
    tmp_path: Path,
) -> None:
    port = fixed_ports()
    (tmp_path / "worker.py").write_text(WORKER)
    right = _token_file(tmp_path / "right", "s3cret")
    wrong = _token_file(tmp_path / "wrong", "other")
    procs = [_launcher(tmp_path, port, right, 0, rdzv_timeout=5)]
    try:
        read_until(procs[0], "waiting for 1 of 2 nodes")
        procs.append(_launcher(tmp_path, port, wrong, 1, rdzv_timeout=5))
        out = procs[1].communicate(timeout=60)[0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    assert procs[1].returncode == 2, out
    assert (
        "rejected this client's job token; this launcher needs the same --job_token (or "
        "PADDLIKE_JOB_TOKEN, --job_token_file) as the one on node 0, which hosts that store"
    ) in out, out
