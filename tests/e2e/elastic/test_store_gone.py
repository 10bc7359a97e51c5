"""Node 0's launcher SIGKILLed on a host that still answers: its store's port refuses
connections, which is proof that the store is gone, so the survivors say so at once
instead of waiting out --heartbeat_timeout (kept for a host gone silent)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.fixed_ports import fixed_ports
from tests.support.logwait import wait_for_text
from tests.support.multinode_common import LAUNCH

pytestmark = pytest.mark.timeout(120)

HEARTBEAT = 30.0  # far above the deadline below: only the refusal can end the survivor in time
WORKER = "import time\nprint('up', flush=True)\ntime.sleep(300)\n"


def _launcher(tmp: Path, name: str, port: int) -> subprocess.Popen[str]:
    cmd = [*LAUNCH, "--nnodes", "2:3", "--master", f"127.0.0.1:{port}", "--nproc_per_node", "1"]
    cmd += ["--heartbeat_timeout", f"{HEARTBEAT:g}", "--rdzv_timeout", "60"]
    cmd += ["--rdzv_last_call", "1"]  # the round starts a second after the second arrives
    cmd += ["--log_dir", str(tmp / name), str(tmp / "worker.py")]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp
    )


def _await_line(proc: subprocess.Popen[str], text: str) -> None:
    """Read the launcher's output up to the first line with `text` (within seconds)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if text in line:
            return
    raise AssertionError(f"{text!r} never printed")


def test_a_refused_store_ends_the_survivor_at_once_naming_node_0(tmp_path: Path) -> None:
    (tmp_path / "worker.py").write_text(WORKER)
    port = fixed_ports()
    node0 = _launcher(tmp_path, "log0", port)  # the first hosts the store: node 0
    procs = [node0]
    try:
        _await_line(node0, "1 of at least 2 nodes")  # its store is up: the other joins it
        survivor = _launcher(tmp_path, "log1", port)
        procs.append(survivor)
        for name, proc in (("log0", node0), ("log1", survivor)):
            wait_for_text(tmp_path / name / "workerlog.0", "up", timeout=60, writer=proc)
        node0.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        out = survivor.communicate(timeout=HEARTBEAT + 30)[0]
        took = time.monotonic() - killed
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    assert survivor.returncode not in (0, None), out
    assert (
        f"node 0's launcher is gone (its store at 127.0.0.1:{port} refused the connection)" in out
    ), out
    assert took < 15, (took, out)  # well before the 30 s heartbeat timeout
    assert "Traceback" not in out, out
