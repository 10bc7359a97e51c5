"""The plan: ranks, endpoints, environment, command and log names, decided without I/O."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddlike import contract
from paddlike.launch.context.devices import DeviceAssignment, assign_devices
from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.plan.jobspec import PlanSpec
from paddlike.launch.plan.plan import (
    EndpointLayout,
    JobFacts,
    PsLayout,
    Role,
    format_plan,
    plan_collective,
)
from paddlike.launch.plan.ps_plan import plan_ps
from paddlike.launch.specs import plan_spec

FACTS = JobFacts(job_id="job-test", python="/py", log_dir="/abs/log", environ={}, interface="eth0")


def options(*argv: str) -> PlanSpec:
    return plan_spec(parse_options([*argv, "train.py", "--lr", "0.1"], {}))


def two_node_layout(node: int, nproc: int = 2) -> EndpointLayout:
    return EndpointLayout(
        hosts=("10.0.0.1", "10.0.0.2"),
        node_index=node,
        ports=((6070, 6071)[:nproc], (6070, 6071)[:nproc]),
        master_port=6072,
    )


def cpu(n: int) -> DeviceAssignment:
    return DeviceAssignment("cpu", tuple(() for _ in range(n)))


def test_ranks_are_node_major_in_ips_order():
    p0 = plan_collective(options(), two_node_layout(0), cpu(2), FACTS)
    p1 = plan_collective(options(), two_node_layout(1), cpu(2), FACTS)
    assert [p.rank for p in p0.processes] == [0, 1]
    assert [p.rank for p in p1.processes] == [2, 3]
    assert [p.local_index for p in p1.processes] == [0, 1]
    assert p0.trainer_endpoints == p1.trainer_endpoints == (
        "10.0.0.1:6070", "10.0.0.1:6071", "10.0.0.2:6070", "10.0.0.2:6071",
    )  # fmt: skip


def test_the_contract_environment_of_one_worker():
    plan = plan_collective(options(), two_node_layout(1), cpu(2), FACTS)
    env = plan.processes[1].env
    expected = {
        "PADDLE_TRAINER_ID": "3", "PADDLE_GLOBAL_RANK": "3", "RANK": "3",
        "PADDLE_TRAINERS_NUM": "4", "PADDLE_GLOBAL_SIZE": "4", "WORLD_SIZE": "4",
        "PADDLE_RANK_IN_NODE": "1", "PADDLE_LOCAL_RANK": "1", "LOCAL_RANK": "1",
        "PADDLE_LOCAL_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "PADDLE_NNODES": "2",
        "GROUP_RANK": "1", "NODE_RANK": "1",
        "PADDLE_CURRENT_ENDPOINT": "10.0.0.2:6071",
        "PADDLE_TRAINER_ENDPOINTS": "10.0.0.1:6070,10.0.0.1:6071,10.0.0.2:6070,10.0.0.2:6071",
        "PADDLE_MASTER": "10.0.0.1:6072", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "6072",
        "PADDLE_DISTRI_BACKEND": "gloo",
        "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0",
        "PADDLIKE_JOB_ID": "job-test", "PADDLIKE_RESTART_COUNT": "0",
        "PADDLIKE_NODE_HOSTS": "10.0.0.1,10.0.0.2",
        "PADDLE_JOB_ID": "job-test", "PADDLE_LOG_DIR": "/abs/log",
        # torchrun's names, so torch scripts and libraries see a torchrun-style launch
        "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "3", "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "job-test",
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "OMP_NUM_THREADS": "1",
    }  # fmt: skip
    for name, value in expected.items():
        assert env[name] == value, name
    assert contract.SELECTED_GPUS not in env  # CPU mode


def test_with_a_proxy_set_the_nodes_are_added_to_no_proxy_and_nothing_changes_without():
    def env_with(environ: dict[str, str]) -> dict[str, str]:
        facts = JobFacts("job-test", "/py", "/abs/log", environ, "eth0")
        return dict(plan_collective(options(), two_node_layout(0), cpu(2), facts).processes[0].env)

    env = env_with({"https_proxy": "http://proxy.example:3128", "no_proxy": ".corp,10.0.0.2"})
    assert env["no_proxy"] == env["NO_PROXY"] == ".corp,10.0.0.2,127.0.0.1,localhost,10.0.0.1"
    assert "https_proxy" not in env  # the user's proxy is inherited as it is, not rewritten
    assert "no_proxy" not in env_with({}) and "NO_PROXY" not in env_with({})


def test_one_openmp_thread_per_worker_unless_the_user_chose_or_there_is_one_worker():
    def omp(nproc: int, environ: dict[str, str]) -> str | None:
        facts = JobFacts("job-test", "/py", "/abs/log", environ, "eth0")
        plan = plan_collective(options(), two_node_layout(0, nproc), cpu(nproc), facts)
        return plan.processes[0].env.get("OMP_NUM_THREADS")

    assert omp(2, {}) == "1"
    assert omp(2, {"OMP_NUM_THREADS": "4"}) is None  # inherited from the launcher as is
    assert omp(1, {}) is None


def test_the_master_is_not_a_trainer_endpoint():
    plan = plan_collective(options(), two_node_layout(0), cpu(2), FACTS)
    assert plan.master == "10.0.0.1:6072"
    assert plan.master not in plan.trainer_endpoints


def test_gpu_workers_get_their_devices_and_nccl():
    devices = assign_devices(("0", "1", "2", "3"), 2, environ={}, gpu_count=4)
    plan = plan_collective(options(), two_node_layout(1), devices, FACTS)
    env = plan.processes[1].env
    assert env["FLAGS_selected_gpus"] == env["PADDLE_LOCAL_DEVICE_IDS"] == "2,3"
    assert env["PADDLE_WORLD_DEVICE_IDS"] == "0:1,2:3,0:1,2:3"
    assert env["PADDLE_DISTRI_BACKEND"] == "nccl"
    assert plan.processes[1].device_ids == ("2", "3")


def test_socket_interface_names_the_user_set_are_left_alone():
    facts = JobFacts("j", "/py", "/l", {"NCCL_SOCKET_IFNAME": "ib0"}, interface="eth0")
    env = plan_collective(options(), two_node_layout(0), cpu(2), facts).processes[0].env
    assert "NCCL_SOCKET_IFNAME" not in env  # inherited from the launcher's environment
    assert env["GLOO_SOCKET_IFNAME"] == "eth0"


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        ((), ("/py", "-u", "train.py", "--lr", "0.1")),
        (("-m",), ("/py", "-u", "-m", "train.py", "--lr", "0.1")),
        (("--no_python",), ("train.py", "--lr", "0.1")),
    ],
)
def test_the_command(argv, command):
    plan = plan_collective(options(*argv), two_node_layout(0), cpu(2), FACTS)
    assert plan.processes[0].argv == command


@pytest.mark.parametrize(
    ("argv", "commands"),
    [  # DeepSpeed's launcher: --local_rank=N, one argument, after the script, before its own
        (("--hostfile", "hf"), [("/py", "-u", "train.py", f"--local_rank={n}", "--lr", "0.1")
                                for n in (0, 1)]),
        (("-H", "hf", "-m"), [("/py", "-u", "-m", "train.py", f"--local_rank={n}", "--lr", "0.1")
                              for n in (0, 1)]),
        (("--num_gpus", "2", "--no_python"), [("train.py", f"--local_rank={n}", "--lr", "0.1")
                                              for n in (0, 1)]),
        (("--include", "localhost:0,1"), [("/py", "-u", "train.py", f"--local_rank={n}", "--lr",
                                           "0.1") for n in (0, 1)]),
        (("--pass_local_rank", "--nproc_per_node", "2"),
         [("/py", "-u", "train.py", f"--local_rank={n}", "--lr", "0.1") for n in (0, 1)]),
        # every worker's LOCAL_RANK is 0 with --virtual_local_rank: so is its --local_rank
        (("--hostfile", "hf", "--virtual_local_rank"),
         [("/py", "-u", "train.py", "--local_rank=0", "--lr", "0.1")] * 2),
        # no extra argument: DeepSpeed's --no_local_rank, its slurm runner, torchrun/Paddle
        (("--hostfile", "hf", "--no_local_rank"), [("/py", "-u", "train.py", "--lr", "0.1")] * 2),
        (("--hostfile", "hf", "--launcher", "slurm"),
         [("/py", "-u", "train.py", "--lr", "0.1")] * 2),
        (("--nproc_per_node", "2"), [("/py", "-u", "train.py", "--lr", "0.1")] * 2),
        (("--gpus", "0,1", "--ips", "10.0.0.1,10.0.0.2"),
         [("/py", "-u", "train.py", "--lr", "0.1")] * 2),
        (("--no_local_rank",), [("/py", "-u", "train.py", "--lr", "0.1")] * 2),
    ],
)  # fmt: skip
def test_a_deepspeed_style_start_gives_each_worker_its_local_rank_as_an_argument(argv, commands):
    plan = plan_collective(options(*argv), two_node_layout(1), cpu(2), FACTS)
    assert [p.argv for p in plan.processes] == commands


def test_pass_local_rank_and_no_local_rank_together_are_refused():
    with pytest.raises(UsageError, match=r"^--no_local_rank: contradicts --pass_local_rank"):
        options("--hostfile", "hf", "--pass_local_rank", "--no_local_rank")


def test_log_names():
    plan = plan_collective(options(), two_node_layout(0), cpu(2), FACTS)
    assert [(p.log_name, p.err_log_name) for p in plan.processes] == [
        ("workerlog.0", None),
        ("workerlog.1", None),
    ]
    split = plan_collective(
        options("--redirect_stdout_and_stderr"), two_node_layout(0), cpu(2), FACTS
    )
    assert [(p.log_name, p.err_log_name) for p in split.processes] == [
        ("workerlog.0", "workerlog.0.err"),
        ("workerlog.1", "workerlog.1.err"),
    ]


def test_dry_run_text_is_deterministic_and_complete():
    plan = plan_collective(options(), two_node_layout(0), cpu(2), FACTS)
    text = format_plan(plan, "/abs/log")
    assert text == format_plan(plan, "/abs/log")
    assert "[trainer rank 1] local index 1, device cpu, endpoint 10.0.0.1:6071" in text
    assert "log /abs/log/workerlog.1" in text
    assert "command: /py -u train.py --lr 0.1" in text
    env_lines = [line.strip() for line in text.splitlines() if line.startswith("    ")]
    first_block = env_lines[: len(plan.processes[0].env)]
    assert first_block == sorted(first_block)


@st.composite
def jobs(draw):
    nnodes = draw(st.integers(1, 5))
    nproc = draw(st.integers(1, 4))
    node = draw(st.integers(0, nnodes - 1))
    hosts = tuple(f"10.0.1.{i + 1}" for i in range(nnodes))
    base = draw(st.integers(1024, 60000))
    ports = tuple(tuple(base + j for j in range(nproc)) for _ in hosts)
    return EndpointLayout(hosts, node, ports, master_port=base + nproc), nproc


@settings(max_examples=60, deadline=None)
@given(jobs())
def test_property_ranks_unique_and_contiguous_endpoints_unique_env_consistent(job):
    layout, nproc = job
    plans = [
        plan_collective(
            options(),
            EndpointLayout(layout.hosts, n, layout.ports, layout.master_port),
            cpu(nproc),
            FACTS,
        )
        for n in range(len(layout.hosts))
    ]
    procs = [p for plan in plans for p in plan.processes]
    world = len(layout.hosts) * nproc
    assert sorted(p.rank for p in procs) == list(range(world))
    assert len({p.endpoint for p in procs}) == world
    for name in ("WORLD_SIZE", "PADDLE_TRAINER_ENDPOINTS", "PADDLE_MASTER", "MASTER_ADDR",
                 "MASTER_PORT", "PADDLE_NNODES", "PADDLIKE_JOB_ID"):  # fmt: skip
        assert len({p.env[name] for p in procs}) == 1, name
    for p in procs:
        assert p.env["PADDLE_TRAINER_ENDPOINTS"].split(",")[p.rank] == p.endpoint
        assert p.env["RANK"] == p.env["PADDLE_TRAINER_ID"] == str(p.rank)
        assert p.env["WORLD_SIZE"] == str(world)
    assert plans[0].master.rpartition(":")[0] == layout.hosts[0]
    assert plans[0].master not in plans[0].trainer_endpoints


PS = PsLayout(
    servers=("10.0.0.1:7000", "10.0.0.2:7000"),
    trainers=("10.0.0.1:6070", "10.0.0.2:6070", "10.0.0.2:6071"),
    host="10.0.0.2",
    node_index=1,
    nnodes=2,
    gloo_endpoint="10.0.0.1:6070",
)


def test_ps_plan_starts_this_nodes_servers_then_trainers():
    plan = plan_ps(options("--server_num", "1"), PS, FACTS)
    assert [(p.role, p.rank, p.local_index, p.log_name) for p in plan.processes] == [
        (Role.SERVER, 1, 0, "serverlog.0"),
        (Role.TRAINER, 1, 0, "workerlog.0"),
        (Role.TRAINER, 2, 1, "workerlog.1"),
    ]
    assert plan.run_mode == "ps"
    assert plan.server_endpoints == PS.servers
    assert plan.trainer_endpoints == PS.trainers


def test_ps_environment_per_role():
    plan = plan_ps(options("--server_num", "1"), PS, FACTS)
    server, trainer = plan.processes[0].env, plan.processes[2].env
    assert server["TRAINING_ROLE"] == server["PADDLE_ROLE"] == "PSERVER"
    assert (server["PADDLE_PORT"], server["POD_IP"]) == ("7000", "10.0.0.2")
    assert trainer["TRAINING_ROLE"] == trainer["PADDLE_ROLE"] == "TRAINER"
    assert trainer["PADDLE_TRAINER_ID"] == "2"  # its position in the workers list
    for env in (server, trainer):
        assert env["PADDLE_PSERVERS_IP_PORT_LIST"] == "10.0.0.1:7000,10.0.0.2:7000"
        assert env["PADDLE_TRAINER_ENDPOINTS"] == ",".join(PS.trainers)
        assert env["PADDLE_TRAINERS_NUM"] == "3"
    # Paddle's fleet.init() needs PADDLE_PORT of trainers too, and its gloo endpoint
    assert trainer["PADDLE_PORT"] == PS.trainers[2].rpartition(":")[2]
    for env in (server, trainer):
        assert env["PADDLE_GLOO_HTTP_ENDPOINT"] == "10.0.0.1:6070"
        assert (env["PADDLE_WITH_GLOO"], env["PADDLE_GLOO_RENDEZVOUS"]) == ("1", "3")


def test_plan_takes_the_interpreter_it_is_given():
    facts = JobFacts("j", sys.executable, "/l", {})
    plan = plan_collective(options(), two_node_layout(0), cpu(2), facts)
    assert plan.processes[0].argv[0] == sys.executable


@st.composite
def ps_jobs(draw):
    hosts = [f"10.0.2.{i + 1}" for i in range(draw(st.integers(1, 3)))]
    servers = draw(st.lists(st.sampled_from(hosts), min_size=1, max_size=4))
    trainers = draw(st.lists(st.sampled_from(hosts), min_size=1, max_size=5))
    return (
        tuple(f"{h}:{7000 + i}" for i, h in enumerate(servers)),
        tuple(f"{h}:{6000 + i}" for i, h in enumerate(trainers)),
    )


@settings(max_examples=60, deadline=None)
@given(ps_jobs())
def test_property_ps_every_role_runs_once_on_its_own_node(job):
    servers, trainers = job
    node_hosts = tuple(dict.fromkeys(e.rpartition(":")[0] for e in (*servers, *trainers)))
    procs = []
    for i, host in enumerate(node_hosts):
        layout = PsLayout(servers, trainers, host, i, len(node_hosts), node_hosts)
        plan = plan_ps(options("--server_num", "1"), layout, FACTS)
        assert all(p.endpoint.startswith(host + ":") for p in plan.processes)
        procs += plan.processes
    assert sorted(p.rank for p in procs if p.role is Role.SERVER) == list(range(len(servers)))
    assert sorted(p.rank for p in procs if p.role is Role.TRAINER) == list(range(len(trainers)))
    for p in procs:
        assert p.env["PADDLE_PSERVERS_IP_PORT_LIST"] == ",".join(servers)
        assert p.env["PADDLE_TRAINER_ENDPOINTS"] == ",".join(trainers)
        if p.role is Role.TRAINER:
            assert trainers[int(p.env["PADDLE_TRAINER_ID"])] == p.endpoint
        else:
            assert servers[p.rank] == p.endpoint
