"""paddlike's NCCL backend on 2-4 real ranks without a GPU: the workers import the CPU
double of CuPy's NCCL binding (tests/support/doubles/cupy, on their PYTHONPATH; see the README's
"What has run on a GPU" for what it proves and what only a GPU can), under the real
launcher, host and device arrays in one job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.collective_workers.launching import REPO, WORKERS, launch, logs, reports

DOUBLES = REPO / "tests" / "support" / "doubles"
WORKER = WORKERS / "nccl_double.py"


def run(tmp: Path, mode: str, nproc: int = 2, **env: str) -> dict[int, dict]:
    out = tmp / "results"
    out.mkdir()
    done = launch(tmp, WORKER, str(out), mode, nproc=nproc, timeout=240,
                  env={"PYTHONPATH": f"{REPO}:{DOUBLES}", **env})  # fmt: skip
    assert done.returncode == 0, done.stdout + logs(tmp)
    got = reports(out)
    assert sorted(got) == list(range(nproc)), done.stdout + logs(tmp)
    for rank, report in got.items():
        assert report["failures"] == [], (rank, report["failures"])
    return got


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nproc", [2, 4])
def test_every_operation_dtype_and_reduce_op_on_device_arrays(tmp_path, nproc):
    run(tmp_path, "matrix", nproc=nproc)


@pytest.mark.timeout(300)
def test_host_and_device_arrays_share_every_group_of_a_three_rank_job(tmp_path):
    got = run(tmp_path, "mixed", nproc=3)
    for report in got.values():
        assert report["backend"] == "nccl"  # what Paddle reports on a GPU node
        assert report["host_transport"] in ("shm", "tcp")
        assert report["device_transport"] == "nccl"


@pytest.mark.timeout(120)
def test_a_device_collective_past_its_deadline_aborts_only_its_group(tmp_path):
    got = run(tmp_path, "deadline")
    assert 0.9 < got[0]["waited"] < 30


@pytest.mark.timeout(120)
def test_async_tasks_use_the_callers_per_thread_default_stream(tmp_path):
    run(tmp_path, "per_thread_stream", CUPY_CUDA_PER_THREAD_DEFAULT_STREAM="1")


@pytest.mark.timeout(120)
def test_the_callers_later_work_on_the_stream_does_not_count_against_the_deadline(tmp_path):
    run(tmp_path, "later_work")


@pytest.mark.timeout(120)
def test_a_clean_end_destroys_the_nccl_communicators_instead_of_aborting_them(tmp_path):
    log = tmp_path / "closes.log"
    run(tmp_path, "teardown", CUPY_DOUBLE_LOG=str(log))
    assert sorted(log.read_text().splitlines()) == ["0 destroy", "1 destroy"]


@pytest.mark.timeout(300)
def test_the_global_views_cuda_boxings_and_operators_over_three_ranks(tmp_path):
    """The GPU worker of the global view (every boxing S/B/P -> S/B/P, x.T @ x), unchanged."""
    out = tmp_path / "results"
    out.mkdir()
    worker = REPO / "tests" / "support" / "global_view_workers" / "cuda_checks.py"
    done = launch(tmp_path, worker, str(out), nproc=3, timeout=240,
                  env={"PYTHONPATH": f"{REPO}:{DOUBLES}"})  # fmt: skip
    assert done.returncode == 0, done.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == [0, 1, 2]
    assert all(r["failures"] == [] for r in got.values()), got


@pytest.mark.timeout(300)
def test_the_gpu_collective_worker_runs_unchanged_on_two_ranks(tmp_path):
    """tests/support/collective_workers/nccl_checks.py, `make test-gpu`'s two-GPU worker."""
    out = tmp_path / "results"
    out.mkdir()
    done = launch(tmp_path, WORKERS / "nccl_checks.py", str(out), nproc=2, timeout=240,
                  env={"PYTHONPATH": f"{REPO}:{DOUBLES}"})  # fmt: skip
    assert done.returncode == 0, done.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == [0, 1]
    assert all(r["failures"] == [] and r["backend"] == "nccl" for r in got.values()), got
