"""Collectives through the real launcher: every operation x reduction x dtype against numpy,
on the shared-memory and the TCP paths, groups, uneven sizes, async tasks, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.collective_workers.launching import WORKERS, launch, logs, reports


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_every_operation_matches_numpy_on_shared_memory_and_tcp(tmp_path: Path, nproc: int) -> None:
    out = tmp_path / "results"
    out.mkdir()
    # A small shared-memory buffer makes the modest arrays of the matrix span many chunks.
    env = {"PADDLIKE_SHM_BUFFER_BYTES": "65536"}
    run = launch(tmp_path, WORKERS / "matrix.py", str(out), nproc=nproc, env=env)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == list(range(nproc)), logs(tmp_path)
    for rank, report in got.items():
        assert report["failures"] == [], f"rank {rank}: " + "\n".join(report["failures"])
        assert report["default_transport"] == "shm"
        assert report["tcp_transport"] == "tcp"
        assert report["checks"] > 400


@pytest.mark.parametrize(
    ("transport", "size", "mode"),
    [("auto", 1000, "exit"), ("auto", 200_000, "exit"), ("tcp", 1000, "exit"),
     ("tcp", 200_000, "exit"), ("auto", 1000, "exit-async")],
)  # fmt: skip
def test_rank_that_exits_mid_job_gives_others_an_error_naming_it(
    tmp_path: Path, transport: str, size: int, mode: str
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    run = launch(tmp_path, WORKERS / "peer_exit.py", str(out), mode, "60", str(size), nproc=3,
                 env={"PADDLIKE_CPU_TRANSPORT": transport})  # fmt: skip
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == [0, 1], logs(tmp_path)
    for report in got.values():
        assert report["error"] == "PeerExitedError", report
        assert "all_reduce" in report["message"]
        assert "rank 2" in report["message"] or "closed its connection" in report["message"]
        assert report["elapsed"] < 10, report  # long before the 60 s deadline


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_rank_that_never_arrives_gives_a_timeout_naming_it(tmp_path: Path, transport: str) -> None:
    out = tmp_path / "results"
    out.mkdir()
    run = launch(tmp_path, WORKERS / "peer_exit.py", str(out), "stall", "1.5", nproc=2,
                 env={"PADDLIKE_CPU_TRANSPORT": transport})  # fmt: skip
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    report = reports(out)[0]
    assert report["error"] == "CollectiveTimeoutError", report
    assert "all_reduce" in report["message"] and "rank 1" in report["message"]
    assert 1.4 <= report["elapsed"] < 8, report


def test_a_world_of_one_needs_no_launcher_and_no_peers(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import numpy as np, paddlike.distributed as dist\n"
        "try:\n    dist.all_reduce(np.zeros(2))\nexcept dist.CollectiveError as e:\n"
        "    print(e)\n"
        "g = dist.init_parallel_env()\n"
        "try:\n    dist.new_group([0, 1])\nexcept ValueError as e:\n    print(e)\n"
        "x = np.arange(4.0); dist.all_reduce(x, dist.ReduceOp.AVG); out = []\n"
        "dist.all_gather(out, x); dist.broadcast(x, src=0); dist.barrier()\n"
        "print(dist.get_rank(), dist.get_world_size(), g.nranks, x.tolist(), len(out))\n"
        "dist.destroy_process_group(); print(dist.is_initialized())\n"
    )
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("PADDLE", "MASTER", "RANK", "WORLD_SIZE"))}  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "all_reduce: the process group is not initialized; call "
        "paddlike.distributed.init_parallel_env() first",
        "new_group: ranks [0, 1] must be a non-empty list of ranks in 0..0",
        "0 1 1 [0.0, 1.0, 2.0, 3.0] 1",
        "False",
    ]
