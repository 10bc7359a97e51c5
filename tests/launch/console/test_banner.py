"""console/banner.py: the start banner names the GPUs this node's workers hold by their
physical ids, also when --virtual_local_rank shows each worker its own as GPU 0; node 0 of
a job of several nodes without a job token says so, with the ways to give one."""

from __future__ import annotations

import pytest

from paddlike.launch.console.banner import format_banner
from paddlike.launch.context.devices import DeviceAssignment
from paddlike.launch.context.options import parse_options
from paddlike.launch.plan.plan import EndpointLayout, JobFacts, plan_collective
from paddlike.launch.specs import plan_spec

FACTS = JobFacts(job_id="j", python="/py", log_dir="/abs/log", environ={}, interface="")
LAYOUT = EndpointLayout(("10.0.0.1",), 0, ((6070, 6071),), 6072)


def gpus(seen: tuple[str, ...], physical: tuple[str, ...]) -> DeviceAssignment:
    return DeviceAssignment("gpu", tuple((s,) for s in seen), tuple((p,) for p in physical), "GPUs")


def banner(devices: DeviceAssignment, *argv: str) -> str:
    spec = plan_spec(parse_options([*argv, "train.py"], {}))
    plan = plan_collective(spec, LAYOUT, devices, FACTS)
    return format_banner(plan, "/abs/log")


def test_the_banner_lists_a_two_gpu_jobs_gpus_under_virtual_local_rank():
    text = banner(gpus(("0", "1"), ("0", "1")), "--virtual_local_rank")
    assert "2 workers on this node, devices gpus 0,1," in text


def test_the_banner_names_the_physical_gpus_not_the_workers_view():
    text = banner(gpus(("0", "1"), ("2", "10")), "--virtual_local_rank")
    assert "devices gpus 2,10," in text


def test_ps_mode_calls_its_trainers_workers_as_the_last_line_does():
    from paddlike.launch.plan.plan import PsLayout
    from paddlike.launch.plan.ps_plan import plan_ps

    options = parse_options(["--server_num", "1", "--worker_num", "2", "train.py"], {})
    ep = ("127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002")
    layout = PsLayout(ep[:1], ep[1:], "127.0.0.1", 0, 1)
    text = format_banner(plan_ps(plan_spec(options), layout, FACTS), "/abs/log")
    assert "1 server, 2 workers on this node, devices cpu," in text  # "OK: 2 workers finished"


def test_cpu_workers_are_devices_cpu():
    text = banner(DeviceAssignment("cpu", ((), ())))
    assert "devices cpu," in text


TWO_NODES = EndpointLayout(("10.0.0.1", "10.0.0.2"), 0, ((6070,), (6070,)), 6071)
NO_TOKEN = (
    "paddlike.launch: warning: this job of 2 nodes has no job token, so its stores accept "
    "any user of its machines; give every node the same --job_token_file FILE (or "
    "PADDLIKE_JOB_TOKEN_FILE, PADDLIKE_JOB_TOKEN)"
)


@pytest.mark.parametrize(
    ("layout", "argv", "warned"),
    [
        (TWO_NODES, ["--nnodes", "2"], True),  # node 0, started per node, no token
        (TWO_NODES._replace(node_index=1), ["--nnodes", "2"], False),  # node 0 says it
        (TWO_NODES, ["--nnodes", "2", "--job_token", "s3cret"], False),
        (LAYOUT._replace(ports=((6070,),)), [], False),  # one node: a token of its own
    ],
    ids=["node-0", "node-1", "a-token", "one-node"],
)
def test_node_0_of_a_job_of_several_nodes_without_a_token_warns_once(layout, argv, warned):
    options = parse_options([*argv, "--nproc_per_node", "1", "train.py"], {})
    plan = plan_collective(plan_spec(options), layout, DeviceAssignment("cpu", ((),)), FACTS)
    lines = format_banner(plan, "/abs/log").splitlines()
    assert [line for line in lines if "warning" in line] == ([NO_TOKEN] if warned else [])
