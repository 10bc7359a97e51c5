"""An auto job's ranks on the CuPy double (tests/support/doubles), started as a launcher would:
the GPU is current from init on, a peer that dies before the first device collective is
named at once, and ranks that cannot all run NCCL agree to refuse device arrays."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.collective_workers.launching import REPO, WORKERS

WORKER = WORKERS / "nccl_double_ranks.py"
DOUBLES = REPO / "tests" / "support" / "doubles"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(out: Path, mode: str, n: int = 2, timeout: str = "60", **extra: str) -> dict[int, dict]:
    """`n` ranks of one auto job (local rank = rank: rank k's GPU is k), each writing a report."""
    port = _free_port()
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PADDLE", "MASTER_", "FLAGS_", "CUPY_", "LOCAL_", "RANK"))}
    procs = []
    for rank in range(n):
        env = {**base, "PYTHONPATH": f"{REPO}:{DOUBLES}", "PADDLE_TRAINER_ID": str(rank),
               "PADDLE_TRAINERS_NUM": str(n), "PADDLE_MASTER": f"127.0.0.1:{port}",
               "PADDLE_RANK_IN_NODE": str(rank),
               "PADDLE_CURRENT_ENDPOINT": f"127.0.0.1:{_free_port()}", **extra}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(out), mode, timeout],
                                      env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))  # fmt: skip
    try:
        outs = [p.communicate(timeout=90)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    got = {k: json.loads((out / f"rank{k}.json").read_text())
           for k in range(n) if (out / f"rank{k}.json").exists()}  # fmt: skip
    for k, text in enumerate(outs):
        assert "Traceback" not in text or (mode == "peer_exits" and k == 1), text
    return got


@pytest.mark.timeout(120)
def test_init_makes_each_ranks_gpu_current_so_early_arrays_live_there(tmp_path):
    got = run(tmp_path, "made_before")
    for k in (0, 1):
        assert got[k]["error"] is None, got[k]
        assert got[k]["device_at_init"] == got[k]["array_device"] == got[k]["device_id"] == k
        assert got[k]["sum"] == 3.0


@pytest.mark.timeout(120)
def test_a_peer_dead_before_the_first_device_collective_is_named_at_once(tmp_path):
    got = run(tmp_path, "peer_exits", timeout="60")
    error = got[0]["error"]
    assert error and "PeerExitedError" in error and "rank 1 exited" in error, got[0]
    assert got[0]["seconds"] < 15, got[0]


@pytest.mark.timeout(120)
def test_ranks_that_cannot_all_run_nccl_agree_and_name_the_rank_without_it(tmp_path):
    got = run(tmp_path, "disagree", CUPY_DOUBLE_GPUS="1")
    assert [got[k]["backend"] for k in (0, 1)] == ["cpu", "cpu"]
    assert [got[k]["host_sum"] for k in (0, 1)] == [2.0, 2.0]
    assert got[0]["error"].startswith("TypeError: all_reduce: tensor is a device array"), got[0]
    assert "rank 1: GPU 1 is not visible (CUDA sees 1)" in got[0]["error"], got[0]
    assert "NCCL cannot run here: GPU 1 is not visible" in got[1]["error"], got[1]
    assert all(got[k]["seconds"] < 10 for k in (0, 1)), got


@pytest.mark.timeout(120)
def test_ranks_mixing_array_kinds_in_one_operation_are_told_so(tmp_path):
    got = run(tmp_path, "mixed", timeout="3")
    assert "host (numpy) array" in got[0]["error"] and "device (cupy)" in got[0]["error"], got
    assert "device (cupy) array" in got[1]["error"] and "host (numpy)" in got[1]["error"], got


@pytest.mark.timeout(120)
def test_device_collectives_issued_in_different_orders_say_so_at_the_deadline(tmp_path):
    got = run(tmp_path, "opposite_orders", timeout="3")
    # the first rank past its deadline says why and aborts; once its communicator is gone
    # the other rank's queue may drain (as on a GPU), or fail on the abort, or time out too
    timed_out = [k for k in (0, 1) if "CollectiveTimeoutError" in (got[k]["error"] or "")]
    assert timed_out, got
    for k in timed_out:
        assert "issued device collectives in different orders" in got[k]["error"], got[k]
