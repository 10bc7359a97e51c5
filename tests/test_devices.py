"""Devices per worker: GPU ids, CUDA_VISIBLE_DEVICES, slices; GPUs counted without CuPy.

The GPU count is passed in (this machine has no GPU): that is the one fake.
"""

from __future__ import annotations

import pytest

from paddlike.launch.context.devices import assign_devices, count_gpus
from paddlike.launch.context.options import UsageError


def test_cpu_mode_has_one_worker_by_default():
    d = assign_devices(None, None, environ={}, gpu_count=0)
    assert (d.kind, d.per_worker) == ("cpu", ((),))


def test_cpu_mode_with_nproc_per_node():
    assert assign_devices(None, 3, environ={}, gpu_count=0).nproc == 3


def test_one_worker_per_gpu():
    d = assign_devices(("0", "1"), None, environ={}, gpu_count=2)
    assert (d.kind, d.per_worker) == ("gpu", (("0",), ("1",)))


def test_nproc_per_node_gives_contiguous_slices():
    d = assign_devices(("0", "1", "2", "3"), 2, environ={}, gpu_count=4)
    assert d.per_worker == (("0", "1"), ("2", "3"))


def test_ids_are_given_relative_to_cuda_visible_devices():
    d = assign_devices(("3", "5"), None, environ={"CUDA_VISIBLE_DEVICES": "5,3"}, gpu_count=8)
    assert d.per_worker == (("1",), ("0",))


def test_an_id_outside_cuda_visible_devices_is_an_error():
    with pytest.raises(UsageError, match=r"^--gpus: 1 is not in CUDA_VISIBLE_DEVICES='2,3'"):
        assign_devices(("1",), None, environ={"CUDA_VISIBLE_DEVICES": "2,3"}, gpu_count=4)


def test_no_gpu_on_the_node_is_an_error():
    with pytest.raises(UsageError, match=r"^--gpus: no NVIDIA GPU found on this node"):
        assign_devices(("0",), None, environ={}, gpu_count=0)


def test_a_gpu_beyond_the_count_is_an_error():
    with pytest.raises(UsageError, match=r"^--gpus: GPU 2 does not exist, this node has 2"):
        assign_devices(("0", "2"), None, environ={}, gpu_count=2)


def test_dry_run_accepts_missing_gpus():
    assert assign_devices(("0", "1"), None, environ={}, gpu_count=0, dry_run=True).nproc == 2


def test_count_gpus_reads_the_driver_directory(tmp_path):
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / bus).mkdir()
    assert count_gpus(str(tmp_path)) == 2
    assert count_gpus(str(tmp_path / "absent")) == 0
