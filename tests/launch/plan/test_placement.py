"""--virtual_local_rank's view of each worker's GPUs (part of the worker's environment,
made once by the plan), and plan/placement.py's steps on top of a plan (the preview and
every round alike: `place`)."""

from __future__ import annotations

import pytest

from paddlike import contract
from paddlike.launch.context.devices import DeviceAssignment
from paddlike.launch.context.numa import NumaTopology
from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.plan.placement import place
from paddlike.launch.plan.plan import EndpointLayout, JobFacts, format_plan, plan_collective
from paddlike.launch.specs import placement, plan_spec

FACTS = JobFacts(job_id="j", python="/py", log_dir="/abs/log", environ={}, interface="")
LAYOUT = EndpointLayout(("10.0.0.1",), 0, ((6070, 6071),), 6072)
# CUDA_VISIBLE_DEVICES=2,3 style: the workers see 0 and 1, physically GPUs 2 and 3
GPUS = DeviceAssignment("gpu", (("0",), ("1",)), (("2",), ("3",)), "2 GPUs")
TWO_NODES = NumaTopology({0: (0,), 1: (1,)}, {"2": 0, "3": 1}, {}, {}, {})


def options(*argv: str):
    return parse_options([*argv, "train.py"], {})


def planned(*argv: str, devices: DeviceAssignment = GPUS):
    return plan_collective(plan_spec(options(*argv)), LAYOUT, devices, FACTS)


def test_virtual_local_rank_shows_each_worker_only_its_own_gpu_as_gpu_0():
    plan = planned("--virtual_local_rank")
    envs = [p.env for p in plan.processes]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "0"]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["2", "3"]
    assert [e["FLAGS_selected_gpus"] for e in envs] == ["0", "0"]
    assert [e["PADDLE_LOCAL_DEVICE_IDS"] for e in envs] == ["0", "0"]
    assert {e["PADDLE_WORLD_DEVICE_IDS"] for e in envs} == {"0,0"}
    assert [e["PADDLE_LOCAL_RANK"] for e in envs] == ["0", "1"]  # Paddle's index is kept
    assert [p.device_ids for p in plan.processes] == [("0",), ("0",)]
    assert [list(e) for e in envs] == [sorted(e) for e in envs]  # in the plan's order


def test_virtual_local_rank_on_cpu_workers_only_zeroes_local_rank():
    plan = planned("--virtual_local_rank", devices=DeviceAssignment("cpu", ((), ())))
    assert [p.env["LOCAL_RANK"] for p in plan.processes] == ["0", "0"]
    assert all("CUDA_VISIBLE_DEVICES" not in p.env for p in plan.processes)


def test_without_virtual_local_rank_each_worker_sees_the_gpus_it_was_given():
    envs = [p.env for p in planned().processes]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    assert [e["FLAGS_selected_gpus"] for e in envs] == ["0", "1"]
    assert all(contract.CUDA_VISIBLE_DEVICES not in e for e in envs)


def test_placement_binds_the_plan_and_dry_run_shows_it():
    got = place(planned(), placement(options("--numa_binding", "node"), TWO_NODES))
    assert [(p.cpus, p.numa_nodes) for p in got.processes] == [((0,), (0,)), ((1,), (1,))]
    assert "  numa binding: cpus 1 (GPU 3's NUMA node 1)" in format_plan(got, "/abs/log")


def test_without_either_option_there_is_no_placement_and_the_plan_is_untouched():
    assert placement(options(), TWO_NODES) is None
    plan = planned()
    assert place(plan, None) is plan


NO_GPUS_HERE = NumaTopology({0: (0, 1)}, {}, {}, {}, {})  # a machine without the node's GPUs


def test_a_dry_run_previews_a_gpu_node_whose_numa_nodes_cannot_be_read_here():
    spot = placement(options("--numa_binding", "node", "--dry_run"), NO_GPUS_HERE)
    shown = format_plan(place(planned(), spot), "/abs/log")
    line = "  numa binding: decided on the node (GPU 2's NUMA node not readable here)"
    assert shown.count(line) == 2


def test_a_real_launch_on_such_a_node_keeps_the_clear_error():
    spot = placement(options("--numa_binding", "node"), NO_GPUS_HERE)
    with pytest.raises(UsageError, match=r"^--numa_binding: GPU 2's NUMA node is unknown"):
        place(planned(), spot)
