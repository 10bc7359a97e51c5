"""The call path every collective takes (issue 38): argument checks remembered per kind of
array yet every array's layout still checked, and the flight record it writes, read back
as the launcher reads it (done, failed, running), also where a ring slot is reused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paddlike.distributed import progress
from paddlike.distributed.collective import flight
from paddlike.distributed.collective.checks import check_array

pytestmark = pytest.mark.timeout(120)


def test_an_array_of_an_accepted_kind_is_still_refused_for_its_own_layout() -> None:
    x = np.zeros((4, 6), np.float32)
    check_array(x, "all_reduce", "tensor")  # float32 numpy arrays: accepted from here on
    with pytest.raises(ValueError, match=r"^all_reduce: argument 'tensor' is not C-contiguous"):
        check_array(x[:, ::2], "all_reduce", "tensor")
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"^all_reduce: argument 'tensor' is read-only"):
        check_array(frozen, "all_reduce", "tensor")
    with pytest.raises(TypeError, match=r"has dtype complex64, which is not one of bool, "):
        check_array(np.zeros(4, np.complex64), "all_reduce", "tensor")
    with pytest.raises(TypeError, match=r"argument 'tensor' must be an array .* got list"):
        check_array([1.0, 2.0], "all_reduce", "tensor")


def test_a_ring_slot_whose_last_operation_failed_reads_running_then_done_for_its_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PADDLE_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("PADDLE_TRAINER_ID", "0")
    progress._reset_for_tests()
    path = progress.progress_path(tmp_path, 0)
    x = np.zeros(4, np.float32)
    try:
        first = flight.begin("all_reduce", 7, x)
        assert first is not None
        flight.end(first, False)
        for _ in range(progress.CAPACITY - 1):  # round the ring back to the failed op's slot
            flight.end(flight.begin("broadcast", 7, x, 0), True)
        again = flight.begin("all_reduce", 7, x)
        assert again is not None and again[0] == first[0]  # the same slot
        running = progress.read_progress(path).flight[-1]
        flight.end(again, True)
        done = progress.read_progress(path).flight[-1]
    finally:
        progress._reset_for_tests()
    assert (running.op, running.state, running.end_mono) == ("all_reduce", "running", 0.0)
    assert (done.op, done.state, done.group_seq) == ("all_reduce", "done", progress.CAPACITY + 1)
    assert done.end_mono >= done.start_mono


WORLD_OF_ONE = """
import numpy as np, paddlike.distributed as dist
from paddlike.distributed import progress
dist.init_parallel_env()
x = np.ones(1024, np.float32)
task = dist.all_reduce(x, sync_op=False)
dist.all_reduce(x)
dist.barrier()
try:
    dist.all_reduce(np.ones(4, np.int32), dist.ReduceOp.AVG)
except TypeError as e:
    print(e)
task.wait()
for e in progress.read_progress(progress.progress_path(LOG, 0)).flight:
    print(e.op, e.group_seq, e.nbytes, e.dtype, e.state, e.end_mono >= e.start_mono)
dist.destroy_process_group()
"""


def test_a_world_of_one_records_every_operation_in_issue_order_and_refuses_before_recording(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE", "MASTER", "RANK", "WORLD_SIZE"))}  # fmt: skip
    env["PADDLE_LOG_DIR"] = str(tmp_path)
    code = f"LOG = {str(tmp_path)!r}\n" + WORLD_OF_ONE
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "all_reduce: ReduceOp.AVG needs a floating-point array, got dtype int32; use "
        "ReduceOp.SUM and divide, or cast to float32 first",
        "all_reduce 1 4096 float32 done True",
        "all_reduce 2 4096 float32 done True",
        "barrier 3 0  done True",
    ]
