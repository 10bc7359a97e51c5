"""Groups and their lanes (paddlike.distributed.collective.group): which lane an array takes,
the refusal when the job has none for its kind, and how a lane's communicator is made
(once, when first needed) and released (destroyed on a clean close, aborted otherwise)."""

from __future__ import annotations

import numpy as np
import pytest

from paddlike.distributed.collective.errors import CollectiveError, GroupMembershipError
from paddlike.distributed.collective.group import DEVICE, HOST, Group, Lane, array_kind
from paddlike.distributed.collective.task import OpQueue


class DeviceArray:
    """What paddlike sees of a cupy array: its type's module."""


DeviceArray.__module__ = "cupy._core.core"


class Comm:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def close(self) -> None:
        self.calls.append("close")

    def abort(self) -> None:
        self.calls.append("abort")


def test_cupy_arrays_are_device_arrays_and_everything_else_host_arrays():
    assert array_kind(DeviceArray()) == DEVICE
    assert array_kind(np.ones(2)) == HOST
    assert array_kind(np.float32(1)) == HOST


def _group(*kinds: str, rank: int = 0) -> Group:
    g = Group(3, [0, 1], rank, "cpu", 10.0)
    g.refusals = {DEVICE: "only the CPU backend (backend='cpu')"}
    for kind in kinds:
        g.lanes[kind] = Lane(kind, OpQueue(kind))
    return g


def test_a_kind_without_a_lane_is_refused_naming_the_kind_and_the_backend():
    g = _group(HOST)
    with pytest.raises(TypeError, match=r"^all_reduce: tensor is a device array \(cupy\), but "
                       r"group 3 runs only the CPU backend \(backend='cpu'\)$"):  # fmt: skip
        g.lane(DEVICE, "all_reduce")
    assert g.lane(HOST, "all_reduce") is g.lanes[HOST]


def test_a_rank_outside_the_group_hears_that_first():
    with pytest.raises(GroupMembershipError, match="not a member of group 3"):
        _group(rank=-1).lane(DEVICE, "all_reduce")


def test_an_operation_without_arrays_takes_the_host_lane_else_the_device_one():
    assert _group(HOST, DEVICE).default_lane("barrier").kind == HOST
    assert _group(DEVICE).default_lane("barrier").kind == DEVICE


def test_a_lanes_communicator_is_made_once_when_first_needed():
    made: list[Comm] = []
    lane = Lane(DEVICE, OpQueue("d"), make=lambda: made.append(Comm()) or made[-1])
    assert made == []
    assert lane.communicator() is lane.communicator() is made[0]
    assert len(made) == 1


@pytest.mark.parametrize(
    ("clean", "broken", "call"),
    [(True, False, "close"), (False, False, "abort"), (True, True, "abort")],
)
def test_closing_destroys_after_a_clean_run_and_aborts_after_an_error(clean, broken, call):
    g = _group(HOST, DEVICE)
    comms = {kind: Comm() for kind in g.lanes}
    for kind, lane in g.lanes.items():
        lane.comm = comms[kind]
    if broken:
        g.lanes[DEVICE].broken = RuntimeError("deadline")
    g.close(clean)
    assert comms[DEVICE].calls == [call]
    assert comms[HOST].calls == ["close" if clean else "abort"]
    with pytest.raises(CollectiveError, match="group 3 was destroyed"):
        g.require_member("all_reduce")
