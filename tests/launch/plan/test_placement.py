"""plan/placement.py: --virtual_local_rank's view of each worker's GPUs, and both options
wrapped around a node job's plan function (the preview and every round alike)."""

from __future__ import annotations

import pytest

from paddlike.launch.context.devices import DeviceAssignment
from paddlike.launch.context.numa import NumaTopology
from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.plan.placement import virtual_local_ranks, with_placement
from paddlike.launch.plan.plan import EndpointLayout, JobFacts, format_plan, plan_collective

FACTS = JobFacts(job_id="j", python="/py", log_dir="/abs/log", environ={}, interface="")
LAYOUT = EndpointLayout(("10.0.0.1",), 0, ((6070, 6071),), 6072)
# CUDA_VISIBLE_DEVICES=2,3 style: the workers see 0 and 1, physically GPUs 2 and 3
GPUS = DeviceAssignment("gpu", (("0",), ("1",)), (("2",), ("3",)), "2 GPUs")
TWO_NODES = NumaTopology({0: (0,), 1: (1,)}, {"2": 0, "3": 1}, {}, {}, {})


def options(*argv: str):
    return parse_options([*argv, "train.py"], {})


def test_virtual_local_rank_shows_each_worker_only_its_own_gpu_as_gpu_0():
    plan = virtual_local_ranks(plan_collective(options(), LAYOUT, GPUS, FACTS))
    envs = [p.env for p in plan.processes]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "0"]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["2", "3"]
    assert [e["FLAGS_selected_gpus"] for e in envs] == ["0", "0"]
    assert [e["PADDLE_LOCAL_DEVICE_IDS"] for e in envs] == ["0", "0"]
    assert {e["PADDLE_WORLD_DEVICE_IDS"] for e in envs} == {"0,0"}
    assert [e["PADDLE_LOCAL_RANK"] for e in envs] == ["0", "1"]  # Paddle's index is kept
    assert [p.device_ids for p in plan.processes] == [("0",), ("0",)]


def test_virtual_local_rank_on_cpu_workers_only_zeroes_local_rank():
    cpu = DeviceAssignment("cpu", ((), ()))
    plan = virtual_local_ranks(plan_collective(options(), LAYOUT, cpu, FACTS))
    assert [p.env["LOCAL_RANK"] for p in plan.processes] == ["0", "0"]
    assert all("CUDA_VISIBLE_DEVICES" not in p.env for p in plan.processes)


def test_with_placement_binds_every_plan_and_dry_run_shows_it():
    def plan(result, facts):
        return plan_collective(options(), LAYOUT, GPUS, facts)

    placed = with_placement(plan, options("--numa_binding", "node"), TWO_NODES)
    got = placed(None, FACTS)
    assert [(p.cpus, p.numa_nodes) for p in got.processes] == [((0,), (0,)), ((1,), (1,))]
    assert "  numa binding: cpus 1 (GPU 3's NUMA node 1)" in format_plan(got, "/abs/log")


def test_without_either_option_the_plan_function_is_untouched():
    def plan(result, facts):
        raise AssertionError("not called")

    assert with_placement(plan, options(), TWO_NODES) is plan


NO_GPUS_HERE = NumaTopology({0: (0, 1)}, {}, {}, {}, {})  # a machine without the node's GPUs


def test_a_dry_run_previews_a_gpu_node_whose_numa_nodes_cannot_be_read_here():
    def plan(result, facts):
        return plan_collective(options(), LAYOUT, GPUS, facts)

    placed = with_placement(plan, options("--numa_binding", "node", "--dry_run"), NO_GPUS_HERE)
    shown = format_plan(placed(None, FACTS), "/abs/log")
    line = "  numa binding: decided on the node (GPU 2's NUMA node not readable here)"
    assert shown.count(line) == 2


def test_a_real_launch_on_such_a_node_keeps_the_clear_error():
    def plan(result, facts):
        return plan_collective(options(), LAYOUT, GPUS, facts)

    placed = with_placement(plan, options("--numa_binding", "node"), NO_GPUS_HERE)
    with pytest.raises(UsageError, match=r"^--numa_binding: GPU 2's NUMA node is unknown"):
        placed(None, FACTS)
