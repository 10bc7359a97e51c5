"""This node's share when nodes differ: what it publishes, what every node must agree on,
and the plans every node derives from the same entries (counts 1, 2, 3)."""

from __future__ import annotations

import pytest

from paddlike import contract
from paddlike.launch.context.devices import DeviceAssignment
from paddlike.launch.context.nodematch import NodeMatch
from paddlike.launch.context.options import parse_options
from paddlike.launch.peers.protocol import decode_entry, decode_world, encode_entry, encode_world
from paddlike.launch.plan.agreement import check_fingerprints
from paddlike.launch.plan.plan import JobFacts, format_plan
from paddlike.launch.plan.world import RendezvousResult
from paddlike.launch.specs import collective_job, ps_counts_job

HOSTS = ("10.0.0.1", "10.0.0.2", "10.0.0.3")
FACTS = JobFacts(job_id="job-t", python="/py", log_dir="/abs/log", environ={})


def gpus(*ids: str) -> DeviceAssignment:
    return DeviceAssignment("gpu", tuple((i,) for i in ids), tuple((i,) for i in ids))


def cpus(n: int) -> DeviceAssignment:
    return DeviceAssignment("cpu", tuple(() for _ in range(n)))


def node(i: int) -> NodeMatch:
    return NodeMatch(HOSTS, HOSTS, i, "eth0", "matched --ips")


def jobs(devices):
    options = parse_options(["--ips", ",".join(HOSTS), "train.py"], {})
    return [collective_job(options, node(i), d) for i, d in enumerate(devices)]


def meet(node_jobs) -> RendezvousResult:
    """Every node's entry as the rendezvous would give it: ports of its own count + 1."""
    entries = []
    for i, job in enumerate(node_jobs):
        ports = tuple(1000 * (i + 1) + k for k in range(job.reserve))
        entries.append(job.entry(ports, hostname=f"n{i}", pid=i, job_id=f"gen{i}"))
    return RendezvousResult(0, decode_world(encode_world(entries)), "job-t", 0.0)


def test_nodes_with_1_2_3_gpus_agree_and_form_one_world_of_6_ranks_node_major():
    node_jobs = jobs([gpus("0"), gpus("0", "1"), gpus("1", "2", "3")])
    world = meet(node_jobs)
    assert check_fingerprints(world.nodes) is None  # counts are not part of the agreement
    plans = [job.planner.plan(world, FACTS) for job in node_jobs]
    assert [[p.rank for p in plan.processes] for plan in plans] == [[0], [1, 2], [3, 4, 5]]
    envs = [p.env for plan in plans for p in plan.processes]
    for name in (contract.TRAINER_ENDPOINTS, contract.WORLD_DEVICE_IDS, contract.PADDLE_MASTER):
        assert len({env[name] for env in envs}) == 1, name
    assert envs[0][contract.WORLD_DEVICE_IDS] == "0,0,1,1,2,3"
    assert {env[contract.WORLD_SIZE] for env in envs} == {"6"}
    assert [env[contract.LOCAL_WORLD_SIZE] for env in envs] == ["1", "2", "2", "3", "3", "3"]
    assert [env[contract.PADDLE_LOCAL_SIZE] for env in envs] == ["1", "2", "2", "3", "3", "3"]
    assert envs[0][contract.TRAINER_ENDPOINTS] == (
        "10.0.0.1:1000,10.0.0.2:2000,10.0.0.2:2001,10.0.0.3:3000,10.0.0.3:3001,10.0.0.3:3002"
    )
    assert {plan.trainer_endpoints for plan in plans} == {plans[0].trainer_endpoints}
    assert "trainers per node: node 0: 1, node 1: 2, node 2: 3" in format_plan(plans[2], "/log")


def test_a_gpu_node_and_a_cpu_node_still_disagree_on_their_devices():
    world = meet(jobs([gpus("0", "1"), cpus(2), gpus("0")]))
    message = check_fingerprints(world.nodes)
    assert message is not None and "node 1 (n1, 10.0.0.2) disagrees on devices per node" in message
    assert "it has 'cpu'" in message


def test_a_node_publishes_its_own_devices_and_no_count_in_the_fingerprint():
    job = jobs([gpus("2", "3")])[0]
    entry = job.entry((7000, 7001, 7002), hostname="n0", pid=1, job_id="g")
    assert decode_entry(encode_entry(entry)).devices == "2,3"
    assert "nproc_per_node" not in entry.fingerprint
    assert jobs([cpus(3)])[0].devices == ""


def test_equal_counts_print_no_per_node_line():
    node_jobs = jobs([cpus(2), cpus(2), cpus(2)])
    plan = node_jobs[0].planner.plan(meet(node_jobs), FACTS)
    assert "trainers per node" not in format_plan(plan, "/l")


@pytest.mark.parametrize("argv", [["--ips", ",".join(HOSTS[:2])], ["--nnodes", "2"]])
def test_ps_counts_on_two_nodes_give_one_job_of_two_servers_and_two_trainers(argv):
    options = parse_options([*argv, "--server_num", "1", "--trainer_num", "1", "train.py"], {})
    hosts = HOSTS[:2]
    node_jobs = [
        ps_counts_job(options, NodeMatch(hosts, hosts, i, "eth0", "matched")) for i in range(2)
    ]
    world = meet(node_jobs)
    assert check_fingerprints(world.nodes) is None
    plans = [job.planner.plan(world, FACTS) for job in node_jobs]
    for i, plan in enumerate(plans):
        envs = {p.role.value: p.env for p in plan.processes}
        assert envs["server"][contract.PSERVERS_IP_PORT_LIST] == "10.0.0.1:1000,10.0.0.2:2000"
        assert envs["trainer"][contract.TRAINER_ENDPOINTS] == "10.0.0.1:1001,10.0.0.2:2001"
        assert envs["trainer"][contract.TRAINER_ID] == str(i)
        assert envs["trainer"][contract.TRAINERS_NUM] == "2"
        assert envs["trainer"][contract.PADDLE_GLOO_HTTP_ENDPOINT] == "10.0.0.1:1002"
    assert node_jobs[0].servers_wait_for_job and node_jobs[0].reserve == 3


def test_ps_counts_nodes_must_agree_on_the_counts():
    hosts = HOSTS[:2]
    node_jobs = [
        ps_counts_job(
            parse_options(["--ips", ",".join(hosts), "--server_num", n, "train.py"], {}),
            NodeMatch(hosts, hosts, i, "eth0", "matched"),
        )
        for i, n in enumerate(("1", "2"))
    ]
    entries = [
        job.entry(tuple(range(job.reserve)), hostname=f"n{i}", pid=i, job_id="g")
        for i, job in enumerate(node_jobs)
    ]
    message = check_fingerprints(entries)
    assert message is not None and "disagrees on servers per node: it has '2'" in message


# --- the preview of a torchrun-style node (issue 32) ------------------------------------


def _preview(local_addr: str):
    """--master nodea:6170 --nnodes 2 without --node_rank, on the machine at `local_addr`
    (the route to nodea leaves from 10.0.0.2; no socket is opened): its --dry_run plan."""
    from paddlike.launch.context.node_by_rank import match_node_by_rank
    from tests.launch.context.test_node import fake_resolve, machine

    options = parse_options(["--master", "nodea:6170", "--nnodes", "2", "train.py"], {})
    node = match_node_by_rank(
        options, {}, local=machine((local_addr, "eth0")), resolve=fake_resolve,
        route=lambda a, p: "10.0.0.2",
    )  # fmt: skip
    job = collective_job(options, node, cpus(1))
    return job.planner.plan(job.preview_world(lambda i: (6070, 6071), "job-t"), FACTS)


def test_a_node_not_at_the_master_address_is_previewed_as_another_node_than_node_0():
    plan = _preview("10.0.0.2")
    assert plan.node_index == 1
    env = plan.processes[0].env
    assert (env[contract.RANK], env["MASTER_ADDR"]) == ("1", "10.0.0.1")  # node 0: nodea
    assert env[contract.TRAINER_ENDPOINTS] == "10.0.0.1:6070,10.0.0.2:6070"


def test_the_node_at_the_master_address_is_previewed_as_node_0():
    plan = _preview("10.0.0.1")
    assert plan.node_index == 0
    assert plan.processes[0].env["MASTER_ADDR"] == "10.0.0.1"
