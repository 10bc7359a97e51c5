"""How a user asks for an elastic job (issue 12): `--nnodes MIN:MAX` and its spellings,
`--elastic_level`, `--elastic_timeout`, `--rdzv_last_call`, the legacy fleet options, the
combinations an elastic job rules out, node matching without a node list, the fingerprint
every node must share, and the `--dry_run` line. Parse-level and `--dry_run` runs of the
real CLI on 127.0.0.1 only: nothing here starts a worker or opens a socket to a peer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.context.node import LocalAddresses, match_node
from paddlike.launch.context.options import LaunchOptions, UsageError, parse_options
from paddlike.launch.main import describe
from paddlike.launch.plan.membership import ElasticSpec
from paddlike.launch.specs import elastic_spec

ROOT = Path(__file__).resolve().parents[4]
MASTER = ("--master", "127.0.0.1:7000")
ETCD = ("--master", "etcd://127.0.0.1:2379")


def parse(*argv: str, **env: str) -> LaunchOptions:
    return parse_options([*argv, "t.py"], env)


def refused(*argv: str, **env: str) -> str:
    with pytest.raises(UsageError) as info:
        parse(*argv, **env)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- --nnodes MIN:MAX and its spellings -----------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("--nnodes", "2:4"),
        ("--nnodes=2:4",),
        ("--np", "2:4"),  # Paddle fleet's legacy elastic launcher
        ("--np=2:4",),
    ],
)
def test_a_node_range_is_an_elastic_job_with_max_nodes_and_min_nodes(argv):
    o = parse(*argv, *MASTER)
    assert (o.nnodes, o.min_nnodes, o.elastic_level) == (4, 2, -1)
    assert elastic_spec(o) == ElasticSpec(min_nodes=2, max_nodes=4, last_call=30.0, level=1)


@pytest.mark.parametrize(
    "env",
    [
        {"PADDLIKE_NNODES": "1:4"},
        {"PET_NNODES": "1:4"},  # Kubeflow's elastic PyTorchJob
        {"PADDLE_ELASTIC_NP": "1:4"},  # what Paddle fleet's elastic manager reads
    ],
)
def test_a_node_range_comes_from_the_environment_too(env):
    o = parse(*MASTER, **env)
    assert (o.min_nnodes, o.nnodes) == (1, 4)


def test_the_flag_wins_over_every_environment_source_of_the_range():
    o = parse("--nnodes", "2:3", *MASTER, PADDLIKE_NNODES="1:4", PET_NNODES="1:5")
    assert (o.min_nnodes, o.nnodes) == (2, 3)


def test_n_colon_n_stays_a_fixed_job():
    o = parse("--nnodes", "2:2", *MASTER)
    assert (o.nnodes, o.min_nnodes) == (2, None) and elastic_spec(o) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("4:2", r"^--nnodes: MIN \(4\) is above MAX \(2\).*got '4:2'$"),
        ("0:2", r"^--nnodes: expected a positive integer, or MIN:MAX .*got '0:2'$"),
        ("0", r"^--nnodes: expected a positive integer, or MIN:MAX .*got '0'$"),
        ("2:x", r"^--nnodes: expected a positive integer, or MIN:MAX .*got '2:x'$"),
        ("2:4:8", r"^--nnodes: expected .*got '2:4:8'$"),
    ],
)
def test_a_bad_range_is_refused_naming_the_option_and_the_value(value, message):
    with pytest.raises(UsageError, match=message):
        parse("--nnodes", value, *MASTER)


def test_a_bad_range_from_the_environment_names_the_variable():
    message = refused(*MASTER, PET_NNODES="3:1")
    assert message.startswith("--nnodes (from PET_NNODES): MIN (3) is above MAX (1)")


# --- --rdzv_last_call and torchrun's --rdzv_conf -----------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "seconds"),
    [
        ((), {}, 30.0),
        (("--rdzv_last_call", "5"), {}, 5.0),
        (("--rdzv-last-call", "2.5"), {}, 2.5),
        ((), {"PADDLIKE_RDZV_LAST_CALL": "7"}, 7.0),
        (("--rdzv_conf", "last_call_timeout=4"), {}, 4.0),
        (("--rdzv-conf", "join_timeout=60,last_call_timeout=3"), {}, 3.0),
        ((), {"PET_RDZV_CONF": "last_call_timeout=9"}, 9.0),
    ],
)
def test_the_last_call_window_comes_from_our_option_or_torchruns_conf(argv, env, seconds):
    o = parse("--nnodes", "2:4", *MASTER, *argv, **env)
    assert o.rdzv_last_call == seconds and elastic_spec(o).last_call == seconds


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_last_call_window_must_be_positive_seconds(value):
    message = refused("--nnodes", "2:4", *MASTER, "--rdzv_last_call", value)
    assert message == f"--rdzv_last_call: expected a number of seconds > 0, got {value!r}"


def test_torchruns_close_timeout_is_refused_with_the_closing_rule():
    message = refused("--nnodes", "2:4", *MASTER, "--rdzv-conf", "close_timeout=5")
    assert message.startswith("--rdzv-conf: key 'close_timeout': a round closes when MAX")


def test_last_call_and_level_and_timeout_are_in_the_help_of_the_multi_node_group():
    from paddlike.launch.context.options import build_parser

    group = next(g for g in build_parser()._action_groups if g.title == "multi-node")
    names = {s for a in group._group_actions for s in a.option_strings}
    assert {"--rdzv_last_call", "--elastic_level", "--elastic_timeout"} <= names


# --- --elastic_level and --elastic_timeout ---------------------------------------------------


def test_level_1_with_a_range_is_the_default_scale_mode():
    o = parse("--nnodes", "2:4", "--elastic_level", "1", *MASTER)
    assert elastic_spec(o).level == 1 and o.elastic_level == 1


def test_level_0_keeps_a_fixed_world_whose_survivors_wait_up_to_the_rendezvous_timeout():
    o = parse("--nnodes", "3", "--elastic-level", "0", "--rdzv_timeout", "90", *MASTER)
    assert (o.nnodes, o.min_nnodes) == (3, 3)
    spec = elastic_spec(o)
    assert (spec.min_nodes, spec.max_nodes, spec.level, spec.hold) == (3, 3, 0, 90.0)


def test_level_1_survivors_below_min_do_not_wait_whatever_the_elastic_timeout():
    spec = elastic_spec(parse("--nnodes", "2:4", "--elastic_timeout", "45", *MASTER))
    assert (spec.level, spec.hold) == (1, 0.0)


def test_elastic_timeout_is_paddles_wait_for_more_nodes_so_it_sets_the_last_call():
    o = parse("--nnodes", "2:4", "--elastic_timeout", "12", "--rdzv_last_call", "5", *MASTER)
    assert (o.elastic_timeout, o.rdzv_last_call) == (12.0, 5.0)
    assert elastic_spec(o).last_call == 12.0  # overrides --rdzv_last_call


def test_without_elastic_timeout_the_last_call_is_rdzv_last_call():
    o = parse("--nnodes", "2:4", "--rdzv_last_call", "5", *MASTER)
    assert o.elastic_timeout is None and elastic_spec(o).last_call == 5.0


def test_elastic_timeout_of_zero_starts_a_round_as_soon_as_min_nodes_joined():
    o = parse("--nnodes", "2:4", "--elastic_timeout", "0", *MASTER)
    assert o.elastic_timeout == 0.0 and elastic_spec(o).last_call == 0.0


@pytest.mark.parametrize(
    ("env", "level", "seconds"),
    [
        ({"PADDLIKE_ELASTIC_LEVEL": "0", "PADDLIKE_ELASTIC_TIMEOUT": "12"}, 0, 12.0),
        ({"PADDLE_ELASTIC_TIMEOUT": "8"}, 1, 8.0),  # Paddle fleet's legacy variable
        ({"PADDLIKE_ELASTIC_TIMEOUT": "6", "PADDLE_ELASTIC_TIMEOUT": "8"}, 1, 6.0),
    ],
)
def test_level_and_timeout_come_from_the_environment_ours_above_paddles(env, level, seconds):
    o = parse("--nnodes", "2:4", *MASTER, **env)
    spec = elastic_spec(o)
    assert (spec.level, o.elastic_timeout, spec.last_call) == (level, seconds, seconds)


def test_the_elastic_timeout_flag_wins_over_paddles_variable():
    o = parse("--nnodes", "2:4", "--elastic_timeout", "3", *MASTER, PADDLE_ELASTIC_TIMEOUT="8")
    assert elastic_spec(o).last_call == 3.0


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (("--nnodes", "2:4", "--elastic_level", "-1"), {},
         "--elastic_level: -1 (off) contradicts --nnodes 2:4, an elastic range"),
        (("--nnodes", "2:4"), {"PADDLIKE_ELASTIC_LEVEL": "-1"},
         "--elastic_level (from PADDLIKE_ELASTIC_LEVEL): -1 (off) contradicts --nnodes 2:4"),
        (("--nnodes", "2", "--elastic_level", "1"), {},
         "--elastic_level: 1 (scale) needs a range of nodes, --nnodes MIN:MAX, got --nnodes 2"),
        (("--elastic_level", "1"), {},
         "--elastic_level: 1 (scale) needs a range of nodes, --nnodes MIN:MAX, got no --nnodes"),
        (("--nnodes", "1", "--elastic_level", "0"), {},
         "--elastic_level: 0 (fault tolerance) needs --nnodes N with N >= 2"),
        (("--elastic_level", "0"), {}, "--elastic_level: 0 (fault tolerance) needs --nnodes N"),
        (("--nnodes", "2:4", "--elastic_level", "2"), {},
         "--elastic_level: expected -1 (off), 0 (fault tolerance) or 1 (scale), got '2'"),
        (("--nnodes", "2", "--elastic_timeout", "5"), {},
         "--elastic_timeout: only meaningful for an elastic job"),
        (("--nnodes", "2"), {"PADDLE_ELASTIC_TIMEOUT": "5"},
         "--elastic_timeout (from PADDLE_ELASTIC_TIMEOUT): only meaningful for an elastic job "
         "(--nnodes MIN:MAX or "
         "--elastic_level 0), got 5 for a fixed job"),
        (("--nnodes", "2:4"), {"PADDLE_ELASTIC_TIMEOUT": "soon"},
         "--elastic_timeout (from PADDLE_ELASTIC_TIMEOUT): expected a number of seconds >= 0, "
         "got 'soon'"),
        (("--nnodes", "2:4", "--elastic_timeout", "-1"), {},
         "--elastic_timeout: expected a number of seconds >= 0, got '-1'"),
    ],
)  # fmt: skip
def test_elastic_level_and_timeout_rules_are_one_line_each(argv, env, message):
    assert refused(*argv, *MASTER, **env).startswith(message)


# --- legacy fleet options ------------------------------------------------------------------


def test_fleets_elastic_server_is_an_etcd_master():
    o = parse("--elastic_server", "127.0.0.1:2379", "--np", "2:4")
    assert o.master == "etcd://127.0.0.1:2379" and (o.min_nnodes, o.nnodes) == (2, 4)


def test_fleets_elastic_server_contradicting_master_is_refused():
    message = refused("--elastic_server", "127.0.0.1:2379", "--nnodes", "2:4", *MASTER)
    assert message.startswith("--master: '127.0.0.1:7000' contradicts --elastic_server (which "
                              "means --master etcd://127.0.0.1:2379)")  # fmt: skip


def test_fleets_elastic_server_needs_host_and_port():
    assert refused("--elastic_server", "127.0.0.1").startswith(
        "--elastic_server: expected the etcd server as host:port"
    )


def test_fleets_elastic_environment_is_read_as_fleet_reads_it():
    o = parse(PADDLE_ELASTIC_SERVER="127.0.0.1:2379", PADDLE_ELASTIC_NP="2:4",
              PADDLE_ELASTIC_JOB_ID="j7")  # fmt: skip
    assert (o.master, o.job_id, o.min_nnodes, o.nnodes) == ("etcd://127.0.0.1:2379", "j7", 2, 4)
    k8s = parse(PADDLE_ELASTIC_ETCD_SERVICE_HOST="127.0.0.1",
                PADDLE_ELASTIC_ETCD_SERVICE_PORT="2379", PADDLE_ELASTIC_NP="2:3")  # fmt: skip
    assert k8s.master == "etcd://127.0.0.1:2379"


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (("--np", "2", "--elastic_server", "127.0.0.1:2379"), {}),
        ((), {"PADDLE_ELASTIC_SERVER": "127.0.0.1:2379", "PADDLE_ELASTIC_NP": "2"}),
    ],
)
def test_one_node_count_with_fleets_elastic_server_is_its_fault_tolerance(argv, env):
    o = parse(*argv, **env)
    assert (o.elastic_level, o.min_nnodes, o.nnodes) == (0, 2, 2)


def test_our_master_wins_over_fleets_server_in_the_environment_and_keeps_a_fixed_job():
    o = parse("--nnodes", "2", "--node_rank", "0", *MASTER, PADDLE_ELASTIC_SERVER="127.0.0.1:2379")
    assert (o.master, o.min_nnodes, o.elastic_level) == ("127.0.0.1:7000", None, -1)


@pytest.mark.parametrize("option", ["--scale", "--force", "--elastic_pre_hook"])
def test_fleets_scaling_commands_are_refused_pointing_at_the_node_range(option):
    message = refused(option, "1")
    assert message.startswith(f"{option}: ") and "--nnodes MIN:MAX" in message


# --- what an elastic job rules out ---------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--nnodes", "2:4", "--ips", "127.0.0.1,127.0.0.2", *MASTER),
         "--ips: an elastic job (--nnodes 2:4) finds its nodes at each round's rendezvous, "
         "but --ips lists 127.0.0.1,127.0.0.2; drop --ips"),
        (("--nnodes", "2:4"), "--master: an elastic job (--nnodes 2:4) needs a place where"),
        (("--nnodes", "3", "--elastic_level", "0"),
         "--master: an elastic job (--nnodes 3, --elastic_level 0) needs a place where"),
        (("--nnodes", "2:4", "--server_num", "1", *MASTER),
         "--nnodes: an elastic job (--nnodes 2:4) is collective, but --run_mode is 'ps'"),
        (("--nnodes", "2:4", "--run_mode", "ps", "--servers", "127.0.0.1:6170", "--workers",
          "127.0.0.1", *MASTER), "--nnodes: an elastic job (--nnodes 2:4) is collective"),
        (("--nnodes", "2:4", *ETCD, "--master_port", "29500"),
         "--master_port: 29500 fixes the workers' port on rank 0's node, but rank 0 may move"),
    ],
)  # fmt: skip
def test_combinations_an_elastic_job_rules_out_are_refused(argv, message):
    assert refused(*argv).startswith(message)


@pytest.mark.parametrize(
    "meet",
    [
        MASTER,
        ETCD,
        ("--master_addr", "127.0.0.1"),
        ("--master_addr", "127.0.0.1", "--master_port", "29500"),  # node 0's store: fine
        ("--rdzv_backend", "etcd", "--rdzv_endpoint", "127.0.0.1:2379"),
        ("--rdzv-endpoint", "127.0.0.1:29400"),
    ],
)
def test_every_way_of_saying_where_the_nodes_meet_is_accepted(meet):
    assert parse("--nnodes", "2:4", *meet).min_nnodes == 2


@pytest.mark.parametrize(
    ("argv", "env"),
    [(("--node_rank", "3"), {}), (("--rank", "1"), {}), ((), {"PET_NODE_RANK": "2"})],
)
def test_node_rank_is_accepted_and_ignored_by_an_elastic_job(argv, env):
    assert parse("--nnodes", "2:4", *ETCD, *argv, **env).node_rank is None


# --- node matching --------------------------------------------------------------------------


def no_local_addresses() -> LocalAddresses:
    return LocalAddresses({}, bind_probe=False)


@pytest.mark.parametrize("meet", [MASTER, ETCD])
def test_an_elastic_job_is_matched_without_a_rank_with_max_entries(meet):
    o = parse("--nnodes", "2:4", *meet, "--node_rank", "3")
    node = match_node(o, {}, local=no_local_addresses())
    assert node.nnodes == 4 and node.hosts[0] == "127.0.0.1" and node.hosts[1:] == ("",) * 3
    assert node.discovered and not node.rank_known and node.node_index == 0


def test_an_elastic_jobs_address_may_come_from_host_or_a_single_ips_entry():
    by_host = parse("--nnodes", "2:4", *ETCD, "--host", "127.0.0.5")
    by_ips = parse("--nnodes", "2:4", *ETCD, "--ips", "127.0.0.6")
    assert match_node(by_host, {}, local=no_local_addresses()).address == "127.0.0.5"
    assert match_node(by_ips, {}, local=no_local_addresses()).address == "127.0.0.6"


def test_an_elastic_job_ignores_a_schedulers_node_list():
    o = parse("--nnodes", "1:3", *MASTER)
    slurm = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "127.0.0.1,127.0.0.2",
             "SLURM_NODEID": "1"}  # fmt: skip
    node = match_node(o, slurm, local=no_local_addresses())
    assert node.nnodes == 3 and node.scheduler is None and not node.rank_known


def test_a_fixed_job_on_etcd_still_needs_node_rank():
    o = parse("--nnodes", "2", *ETCD)
    with pytest.raises(UsageError, match=r"^--node_rank: needed with --nnodes 2 and etcd"):
        match_node(o, {}, local=no_local_addresses())


# --- this node's job: the spec and the fingerprint -------------------------------------------


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('ran')\n")
    return str(path)


def test_the_node_job_carries_the_spec_and_a_fingerprint_naming_the_range(script):
    d = describe(["--nnodes", "2:4", *ETCD, "--nproc_per_node", "1", "--rdzv_last_call", "5",
                  "--dry_run", script], {})  # fmt: skip
    assert d.job.elastic == ElasticSpec(min_nodes=2, max_nodes=4, last_call=5.0, level=1)
    assert d.job.fingerprint["ips"] == "2:4 nodes (elastic), found at the rendezvous"
    assert d.job.fingerprint["elastic"].startswith("--elastic_level 1, --rdzv_last_call 5 s")
    assert d.job.nnodes == 4 and not d.job.rank_known


def test_nodes_with_another_elastic_timeout_have_another_last_call_in_the_fingerprint(script):
    def fp(*extra: str) -> str:
        argv = ["--nnodes", "2:4", *MASTER, "--nproc_per_node", "1", *extra, "--dry_run", script]
        return describe(argv, {}).job.fingerprint["elastic"]

    assert "--rdzv_last_call 7 s" in fp("--elastic_timeout", "7")
    assert fp("--elastic_timeout", "7") != fp()


def test_nodes_with_another_range_have_another_fingerprint(script):
    def fp(nodes: str) -> dict[str, str]:
        argv = ["--nnodes", nodes, *MASTER, "--nproc_per_node", "1", "--dry_run", script]
        return describe(argv, {}).job.fingerprint

    assert fp("2:4")["ips"] != fp("3:4")["ips"]
    assert "elastic" not in fp("4")
    assert fp("4")["ips"] == "4 nodes, found at the rendezvous"  # a fixed job, as before
    assert describe(["--nnodes", "4", *MASTER, "--dry_run", script], {}).job.elastic is None


# --- the real CLI -------------------------------------------------------------------------------


def launch(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("--nnodes", "2:4", *ETCD),
         "(elastic: 2..4 nodes; the ranks and the world are found at each round's "
         "rendezvous; shown as node 0 of 4)"),
        (("--np", "1:3", *MASTER, "--node_rank", "2"),
         "(elastic: 1..3 nodes; the ranks and the world are found at each round's "
         "rendezvous; shown as node 0 of 3)"),
        (("--nnodes", "2", "--elastic_level", "0", "--master_addr", "127.0.0.1"),
         "(elastic: 2 nodes, a lost one replaced in a new round; the ranks and the world are "
         "found at each round's rendezvous; shown as node 0 of 2)"),
    ],
)  # fmt: skip
def test_dry_run_says_the_node_count_is_a_range_found_each_round(argv, line, tmp_path, script):
    run = launch(*argv, "--nproc_per_node", "1", "--dry_run", script, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == line
    assert "no --node_rank" not in run.stdout
    assert "WORLD_SIZE=" in run.stdout and not (tmp_path / "log").exists()


def test_dry_run_of_a_fixed_torchrun_style_job_keeps_its_own_line(tmp_path, script):
    run = launch("--nnodes", "2", *MASTER, "--nproc_per_node", "1", "--dry_run", script,
                 cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1].startswith(
        "(no --node_rank: the node rank is decided at the rendezvous; shown as node 0"
    )
    assert "elastic" not in run.stdout.splitlines()[-1]


def test_the_cli_exits_2_with_one_line_for_a_broken_elastic_rule(tmp_path, script):
    run = launch("--nnodes", "2:4", "--ips", "127.0.0.1,127.0.0.2", *MASTER, "--dry_run",
                 script, cwd=tmp_path)  # fmt: skip
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "paddlike.launch: error: --ips: an elastic job (--nnodes 2:4)"
    )
    assert run.stdout == ""
