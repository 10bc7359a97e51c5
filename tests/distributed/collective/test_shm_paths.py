"""The shared-memory paths of issue 38 with ranks oversubscribed (4 ranks on this machine's
2 cores): every operation x dtype at sizes around the one-step limit and the buffer size,
no lost wake-up, and no busy core while a rank waits for a late peer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.collective_workers.launching import WORKERS, launch, logs, reports

WORKER = WORKERS / "shm_paths.py"


def _run(tmp_path: Path, mode: str, nproc: int, env: dict[str, str], timeout: float) -> dict:
    out = tmp_path / "results"
    out.mkdir()
    run = launch(tmp_path, WORKER, mode, str(out), nproc=nproc, env=env, timeout=timeout)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == list(range(nproc)), logs(tmp_path)
    for rank, report in got.items():
        assert report["transport"] == "shm", report
        assert report["failures"] == [], f"rank {rank}: " + "\n".join(report["failures"])
    return got


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nproc", [2, 4])
def test_every_operation_and_dtype_around_the_path_limits(tmp_path: Path, nproc: int) -> None:
    # 4 KiB one-step limit and 16 KiB buffers: sizes just below, at and above each limit.
    env = {"PADDLIKE_SHM_SMALL_BYTES": "4096", "PADDLIKE_SHM_BUFFER_BYTES": "16384"}
    got = _run(tmp_path, "matrix", nproc, env, timeout=280)
    assert all(r["checks"] > 1000 for r in got.values())


@pytest.mark.timeout(200)
def test_no_lost_wake_up_with_four_ranks_on_two_cores(tmp_path: Path) -> None:
    # The worker never spins and sleeps in 600 s futex slices: a wake-up that is lost
    # leaves a rank asleep until the launch times out.
    got = _run(tmp_path, "wakeups", 4, {"COLLECTIVE_TIMEOUT": "900"}, timeout=180)
    assert all(r["checks"] == 1500 for r in got.values())


@pytest.mark.timeout(120)
def test_a_rank_waiting_for_a_late_peer_does_not_keep_a_core_busy(tmp_path: Path) -> None:
    got = _run(tmp_path, "idle", 2, {"IDLE_SECONDS": "2"}, timeout=100)
    waiting = got[0]
    assert waiting["wait_wall"] >= 1.5, waiting
    # Spinning would cost about as much CPU time as the wait's wall time.
    assert waiting["wait_cpu"] < 0.1 * waiting["wait_wall"], waiting
