"""ps-heter plans as tables: every process's environment is issue 16's, exactly as the
runtime tests' `heter_env` builds it; options that disagree are bad input (exit 2).

Addresses here are only planned, never used (no process starts).
"""

from __future__ import annotations

import pytest

from paddlike.distributed.ps.stage import stage_role_from_env
from paddlike.launch.context.node import LocalAddresses, match_ps_node
from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.plan.heter import plan_ps_heter
from paddlike.launch.plan.layout import ps_counts_layout, ps_lists_layout
from paddlike.launch.plan.plan import JobFacts, LaunchPlan, Role, format_plan
from paddlike.launch.run.logdir import endpoints_text
from paddlike.launch.specs import plan_spec, ps_job
from tests.launch.test_cli import assert_rejected, launch
from tests.support.ps_workers.heter_cluster import heter_env

FACTS = JobFacts(job_id="job-test", python="/py", log_dir="/abs/log", environ={}, interface="lo")
HOST = "127.0.0.1"


def options(*argv: str):
    return parse_options([*argv, "t.py"], {})


def _name(spec) -> str:
    """The process's key in heter_env: server.N, trainer.N, heter.STAGE.N."""
    if spec.role is Role.HETER:
        stage = int(spec.env["STAGE_ID"])
        members = spec.env["PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"].split(",")
        counts = eval(spec.env["PADDLE_STAGE_TRAINERS_NUM"])  # "[2, 1]": a list literal
        start = sum(counts[1 : stage - 1])
        return f"heter.{stage}.{members.index(spec.endpoint) - start}"
    return f"{spec.role.value}.{spec.rank}"


def assert_matches_the_issue_table(plans: list[LaunchPlan], devices: list[str]) -> None:
    """Every variable heter_env gives each process, with the same value; none it leaves out
    of the heter set (FLAGS_selected_gpus on cpu stages)."""
    p0 = plans[0]
    stages, at = [], 0
    counts = eval(p0.processes[0].env["PADDLE_STAGE_TRAINERS_NUM"])[1:]
    for n in counts:
        stages.append(list(p0.heter_endpoints[at : at + n]))
        at += n
    expected = heter_env(p0.server_endpoints, p0.trainer_endpoints, stages, devices)
    got = {_name(s): s.env for plan in plans for s in plan.processes}
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        assert {k: got[name].get(k) for k in want} == want, name
        if "FLAGS_selected_gpus" not in want:
            assert "FLAGS_selected_gpus" not in got[name], name


def counts_plan(servers: int, trainers: int, sizes: tuple[int, ...], devices: tuple[str, ...]):
    argv = ["--server_num", str(servers), "--worker_num", str(trainers)]
    argv += ["--heter_worker_num", ";".join(map(str, sizes)), "--heter_devices", ";".join(devices)]
    n = servers + trainers + 1 + sum(sizes)
    layout = ps_counts_layout(HOST, servers, trainers, range(7000, 7000 + n), sizes, devices)
    return plan_ps_heter(plan_spec(options(*argv)), layout, FACTS)


def test_one_heter_stage_on_one_node_gets_the_issue_table():
    plan = counts_plan(2, 2, (1,), ("cpu",))
    assert plan.run_mode == "ps-heter"
    assert [(p.role, p.rank, p.log_name) for p in plan.processes] == [
        (Role.SERVER, 0, "serverlog.0"),
        (Role.SERVER, 1, "serverlog.1"),
        (Role.TRAINER, 0, "workerlog.0"),
        (Role.TRAINER, 1, "workerlog.1"),
        (Role.HETER, 0, "heterlog.0"),
    ]
    assert plan.heter_endpoints == ("127.0.0.1:7005",)  # after the gloo endpoint
    assert_matches_the_issue_table([plan], ["cpu"])
    heter = plan.processes[-1].env
    assert heter["PADDLE_STAGE_TRAINERS_NUM"] == "[2, 1]"
    assert heter["PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST"] == "127.0.0.1:7002,127.0.0.1:7003"
    assert heter["PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST"] == ""
    # everything a PS process gets today stays: gloo, launcher variables
    for spec in plan.processes:
        assert spec.env["PADDLE_GLOO_HTTP_ENDPOINT"] == "127.0.0.1:7004"
        assert spec.env["PADDLIKE_JOB_ID"] == "job-test"


def test_two_heter_stages_chain_previous_and_next_and_number_gpus_per_stage():
    plan = counts_plan(1, 2, (1, 2), ("cpu", "gpu"))
    assert_matches_the_issue_table([plan], ["cpu", "gpu"])
    heters = [p for p in plan.processes if p.role is Role.HETER]
    assert [(p.rank, p.local_index, p.env["STAGE_ID"]) for p in heters] == [
        (0, 0, "2"),
        (1, 1, "3"),
        (2, 2, "3"),
    ]
    assert [p.env.get("FLAGS_selected_gpus") for p in heters] == [None, "0", "1"]
    assert [p.device_ids for p in heters] == [(), ("0",), ("1",)]
    assert heters[0].env["PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST"] == ",".join(
        p.endpoint for p in heters[1:]
    )
    assert heters[0].env["PADDLE_STAGE_TRAINERS_NUM"] == "[2, 1, 2]"


def test_the_runtime_reads_each_planned_heter_trainer_back_as_its_stage_member():
    plan = counts_plan(1, 2, (1, 2), ("cpu", "cpu"))
    roles = [stage_role_from_env(p.env) for p in plan.processes if p.role is not Role.SERVER]
    assert [(r.is_heter, r.stage_id, r.index) for r in roles] == [
        (False, 1, 0),
        (False, 1, 1),
        (True, 2, 0),
        (True, 3, 0),
        (True, 3, 1),
    ]


def _lists_plans(servers: str, workers: str, heters: str, devices: str) -> list[LaunchPlan]:
    """Every node's plan for role lists (addresses taken as this node's by --host)."""
    argv = ["--servers", servers, "--workers", workers, "--heter_workers", heters]
    argv += ["--heter_devices", devices]
    hosts = dict.fromkeys(e.rpartition(":")[0] or e for e in f"{servers},{workers}".split(","))
    hosts |= dict.fromkeys(e.rpartition(":")[0] for e in heters.replace(";", ",").split(","))
    plans = []
    for host in hosts:
        o = options(*argv, "--host", host)
        node = match_ps_node(o, {}, local=LocalAddresses({}), resolve=lambda name: name)
        layout = ps_lists_layout(node, o.start_port, o.heter_devices)
        plans.append(plan_ps_heter(plan_spec(o), layout, FACTS))
    return plans


def test_lists_on_three_nodes_give_each_node_its_own_roles_and_the_same_table():
    plans = _lists_plans(
        "10.9.0.1:7000,10.9.0.2:7000",
        "10.9.0.1,10.9.0.2",
        "10.9.0.3:8000,10.9.0.3:8001;10.9.0.2:8000",
        "cpu;gpu",
    )
    assert [sorted({p.role.value for p in plan.processes}) for plan in plans] == [
        ["server", "trainer"],
        ["heter", "server", "trainer"],
        ["heter"],
    ]
    assert_matches_the_issue_table(plans, ["cpu", "gpu"])
    node_b = plans[1].processes[-1]
    assert (node_b.env["STAGE_ID"], node_b.env["FLAGS_selected_gpus"]) == ("3", "0")
    assert plans[2].nnodes == 3 and plans[2].node_index == 2


def test_the_many_node_fingerprint_names_the_heter_list_and_the_store_skips_its_ports():
    argv = ["--servers", "10.9.0.1:6170", "--workers", "10.9.0.1,10.9.0.2"]
    argv += ["--heter_workers", "10.9.0.1:6171", "--heter_devices", "cpu", "--host", "10.9.0.2"]
    o = options(*argv)
    node = match_ps_node(o, {}, local=LocalAddresses({}), resolve=lambda name: name)
    job = ps_job(o, ps_lists_layout(node, o.start_port, o.heter_devices), "eth0", "test")
    assert job.fingerprint["heter workers"] == "10.9.0.1:6171"
    assert job.fingerprint["heter devices"] == "cpu"
    assert job.master == ("10.9.0.1", 6172)  # 6170 a server's, 6171 the heter trainer's


def test_a_plain_ps_fingerprint_has_no_heter_fields():
    o = options("--servers", "10.9.0.1:6170", "--workers", "10.9.0.1", "--host", "10.9.0.1")
    node = match_ps_node(o, {}, local=LocalAddresses({}), resolve=lambda name: name)
    job = ps_job(o, ps_lists_layout(node, o.start_port, o.heter_devices), "eth0", "test")
    assert not any("heter" in k for k in job.fingerprint)


def test_dry_run_text_and_endpoints_log_list_the_heter_trainers():
    plan = counts_plan(1, 1, (1,), ("cpu",))
    text = format_plan(plan, "/abs/log")
    assert "heter endpoints: 127.0.0.1:7003" in text
    assert "[heter rank 0] local index 0, device cpu, endpoint 127.0.0.1:7003" in text
    assert endpoints_text(plan.trainer_endpoints, plan.server_endpoints, plan.heter_endpoints) == (
        "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:7001\n"
        "PADDLE_PSERVERS_IP_PORT_LIST: \n127.0.0.1:7000\n"
        "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST: \n127.0.0.1:7003"
    )
    # a plain PS job's file stays byte for byte what it was
    assert endpoints_text(("a:1",), ("a:9",)) == (
        "PADDLE_TRAINER_ENDPOINTS: \na:1\nPADDLE_PSERVERS_IP_PORT_LIST: \na:9"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--heter_workers", "127.0.0.1:7"], "--heter_workers: needs --servers and --workers"),
        (["--run_mode", "ps-heter"], "--heter_workers: needed with --run_mode ps-heter"),
        (["--heter_worker_num", "1"], "--heter_devices: needed in ps-heter mode"),
        (
            ["--heter_worker_num", "1;2", "--heter_devices", "gpu"],
            "--heter_devices: 'gpu' names 1 stage(s) but --heter_worker_num gives 2",
        ),
        (["--heter_worker_num", "1;x", "--heter_devices", "cpu"], "--heter_worker_num: expected"),
        (["--heter_worker_num", "1", "--heter_devices", "tpu"], "--heter_devices: expected one"),
        (
            [
                "--servers",
                "127.0.0.1:7",
                "--workers",
                "127.0.0.1",
                "--heter_workers",
                "127.0.0.1:8;127.0.0.1:9",
                "--heter_worker_num",
                "1",
                "--heter_devices",
                "cpu;cpu",
            ],
            "--heter_worker_num: 1 contradicts --heter_workers, which lists 1;1 per stage",
        ),
        (
            [
                "--servers",
                "127.0.0.1:7",
                "--workers",
                "127.0.0.1",
                "--heter_worker_num",
                "1",
                "--heter_devices",
                "cpu",
            ],
            "--heter_worker_num: counts are for one-node jobs",
        ),
        (
            ["--servers", "127.0.0.1:7", "--workers", "127.0.0.1;127.0.0.1"],
            "--workers: lists 2 stages",
        ),
        (["--run_mode", "ps", "--heter_devices", "cpu"], "--heter_devices: a ps-heter option"),
        (
            [
                "--servers",
                "127.0.0.1:7",
                "--workers",
                "127.0.0.1",
                "--heter_workers",
                "127.0.0.1:7",
                "--heter_devices",
                "cpu",
            ],
            "--heter_workers: 127.0.0.1:7 is also a --servers or --workers endpoint",
        ),
    ],
)
def test_bad_heter_options_exit_2_with_one_line_and_start_nothing(tmp_path, argv, message):
    assert_rejected(launch(tmp_path, *argv, "w.py"), tmp_path, message)


def test_ps_heter_is_accepted_with_its_stages():
    o = options("--run_mode", "ps-heter", "--heter_worker_num", "2", "--heter_devices", "cpu")
    assert (o.run_mode, o.heter_worker_num, o.heter_devices) == ("ps-heter", (2,), ("cpu",))
    with pytest.raises(UsageError, match=r"^--heter_workers: expected each heter endpoint once"):
        options("--heter_workers", "a:1;a:1", "--heter_devices", "cpu;cpu")


def test_a_heter_trainers_run_header_names_its_stage_and_the_reader_shows_it(tmp_path):
    from paddlike.launch.run.logdir import format_header
    from paddlike.logs.reader import load_node

    plan = counts_plan(1, 1, (1, 1), ("cpu", "cpu"))
    for spec in plan.processes:
        header = format_header(spec, job_id="j", restart=0, when=0)
        (tmp_path / spec.log_name).write_text(header + "\n")
    heter = format_header(plan.processes[-1], job_id="j", restart=0, when=0)
    assert "heter rank 1 local 1 restart 0 stage 3: /py -u t.py ====" in heter
    trainer = format_header(plan.processes[1], job_id="j", restart=0, when=0)
    assert trainer.endswith("trainer rank 0 local 0 restart 0: /py -u t.py ====")
    views = {p.log_file: p for p in load_node(tmp_path).processes}
    assert [views[f"heterlog.{i}"].label for i in range(2)] == [
        "heter 0 (stage 2)",
        "heter 1 (stage 3)",
    ]
    assert views["workerlog.0"].label == "trainer 0"
