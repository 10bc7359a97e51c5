"""--slots N, a hostfile's slots as DeepSpeed reads them: one worker on each of the first N
visible GPUs (the rest unused), N CPU workers where none is visible (issue 31, point 6)."""

from __future__ import annotations

import pytest

from paddlike.launch.context.devices import assign_devices
from paddlike.launch.context.options import UsageError


@pytest.mark.parametrize(
    ("gpus", "environ", "slots", "seen", "physical"),
    [
        (8, {}, 4, [("0",), ("1",), ("2",), ("3",)], [("0",), ("1",), ("2",), ("3",)]),
        (8, {}, 3, [("0",), ("1",), ("2",)], [("0",), ("1",), ("2",)]),  # not a divisor
        (8, {"CUDA_VISIBLE_DEVICES": "4,5,6"}, 2, [("0",), ("1",)], [("4",), ("5",)]),
    ],
)
def test_slots_put_one_worker_on_each_of_the_first_visible_gpus(
    gpus, environ, slots, seen, physical
) -> None:
    done = assign_devices(None, None, environ=environ, gpu_count=gpus, slots=slots)
    assert done.kind == "gpu"
    assert [tuple(w) for w in done.per_worker] == seen
    assert [tuple(w) for w in done.physical] == physical


def test_slots_on_a_node_without_gpus_or_with_devices_cpu_are_cpu_workers() -> None:
    assert assign_devices(None, None, environ={}, gpu_count=0, slots=3).per_worker == ((),) * 3
    done = assign_devices(None, None, environ={}, gpu_count=8, slots=2, cpu_only=True)
    assert (done.kind, done.nproc) == ("cpu", 2)


def test_more_slots_than_visible_gpus_is_refused_naming_both() -> None:
    with pytest.raises(UsageError, match=r"^--slots: 12 .* give slots=8 or fewer$"):
        assign_devices(None, None, environ={}, gpu_count=8, slots=12)
