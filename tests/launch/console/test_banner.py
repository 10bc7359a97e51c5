"""console/banner.py: the start banner names the GPUs this node's workers hold by their
physical ids, also when --virtual_local_rank shows each worker its own as GPU 0."""

from __future__ import annotations

from paddlike.launch.console.banner import format_banner
from paddlike.launch.context.devices import DeviceAssignment
from paddlike.launch.context.options import parse_options
from paddlike.launch.plan.placement import virtual_local_ranks
from paddlike.launch.plan.plan import EndpointLayout, JobFacts, plan_collective

FACTS = JobFacts(job_id="j", python="/py", log_dir="/abs/log", environ={}, interface="")
LAYOUT = EndpointLayout(("10.0.0.1",), 0, ((6070, 6071),), 6072)


def gpus(seen: tuple[str, ...], physical: tuple[str, ...]) -> DeviceAssignment:
    return DeviceAssignment("gpu", tuple((s,) for s in seen), tuple((p,) for p in physical), "GPUs")


def banner(devices: DeviceAssignment, *argv: str) -> str:
    plan = plan_collective(parse_options([*argv, "train.py"], {}), LAYOUT, devices, FACTS)
    if "--virtual_local_rank" in argv:
        plan = virtual_local_ranks(plan)
    return format_banner(plan, "/abs/log")


def test_the_banner_lists_a_two_gpu_jobs_gpus_under_virtual_local_rank():
    text = banner(gpus(("0", "1"), ("0", "1")), "--virtual_local_rank")
    assert "2 workers on this node, devices gpus 0,1," in text


def test_the_banner_names_the_physical_gpus_not_the_workers_view():
    text = banner(gpus(("0", "1"), ("2", "10")), "--virtual_local_rank")
    assert "devices gpus 2,10," in text


def test_ps_mode_calls_its_trainers_workers_as_the_last_line_does():
    from paddlike.launch.plan.plan import PsLayout, plan_ps

    options = parse_options(["--server_num", "1", "--worker_num", "2", "train.py"], {})
    ep = ("127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002")
    layout = PsLayout(ep[:1], ep[1:], "127.0.0.1", 0, 1)
    text = format_banner(plan_ps(options, layout, FACTS), "/abs/log")
    assert "1 server, 2 workers on this node, devices cpu," in text  # "OK: 2 workers finished"


def test_cpu_workers_are_devices_cpu():
    text = banner(DeviceAssignment("cpu", ((), ())))
    assert "devices cpu," in text
