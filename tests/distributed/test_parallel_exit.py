"""How a rank leaves the runtime (paddlike.distributed.parallel): after an uncaught
exception the atexit handler enters no collective, so the other ranks learn that the
rank exited instead of a story about a barrier it never meant to call."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.collective_workers.launching import REPO, WORKERS

WORKER = WORKERS / "raise_after_init.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _world(n: int, out: Path) -> list[subprocess.Popen[str]]:
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE", "MASTER_"))}
    procs = []
    for rank in range(n):
        env = {**base, "PYTHONPATH": str(REPO), "PADDLE_TRAINER_ID": str(rank),
               "PADDLE_TRAINERS_NUM": str(n), "PADDLE_MASTER": f"127.0.0.1:{port}",
               "PADDLE_CURRENT_ENDPOINT": f"127.0.0.1:{_free_port()}"}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))  # fmt: skip
    return procs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3])
def test_a_rank_that_raises_is_named_as_exited_not_as_calling_a_barrier(tmp_path, n):
    procs = _world(n, tmp_path)
    try:
        outs = [p.communicate(timeout=90)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[-1].returncode == 1 and "the script's own bug" in outs[-1]
    for rank in range(n - 1):
        text = (tmp_path / f"rank{rank}.txt").read_text()
        assert "PeerExitedError" in text and f"rank {n - 1}" in text, (text, outs)
        assert "different operations" not in text and "barrier" not in text, text
