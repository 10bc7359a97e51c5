"""Other launchers' command lines: torchrun's, Paddle's two and OneFlow's options and PET_*.

Each option is accepted with our meaning, translated to ours, or refused with one line
(exit 2); none is ignored. The table of decisions is docs/migrating.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.context.options import (
    COMPAT_OPTIONS,
    LaunchOptions,
    UsageError,
    build_parser,
    parse_options,
)

ROOT = Path(__file__).resolve().parents[4]
MIGRATING = ROOT / "docs" / "migrating.md"


def parse(*argv: str, **env: str) -> LaunchOptions:
    return parse_options(list(argv), env)


# --- torchrun's spellings ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--nproc-per-node", "2"], "nproc_per_node", 2),
        (["--nproc-per-node=2"], "nproc_per_node", 2),
        (["--master-addr", "127.0.0.1", "--nnodes", "1"], "master_addr", "127.0.0.1"),
        (["--master-port", "29500"], "master_port", 29500),
        (["--node-rank", "0"], "node_rank", 0),
        (["--no-python"], "no_python", True),
        (["--max-restarts", "2"], "max_restarts", 2),
        (["--log-dir", "L"], "log_dir", "L"),
        (["--local-addr", "127.0.0.1"], "host", "127.0.0.1"),
        (["--local-ranks-filter", "0,1"], "console", "0,1"),
        (["--rdzv-id", "job7"], "job_id", "job7"),
        (["--shutdown-timeout", "3"], "kill_timeout", 3.0),
        (["--role", "learner"], "role", "learner"),
        (["--standalone"], "standalone", True),
        (["--kill-timeout", "1"], "kill_timeout", 1.0),  # ours, with dashes
        (["--redirect-stdout-and-stderr"], "redirect_stdout_and_stderr", True),
    ],
)
def test_torchrun_spellings_mean_the_same_as_ours(argv, field, value):
    assert getattr(parse(*argv, "t.py"), field) == value


def test_every_option_in_help_accepts_dashes_for_underscores():
    for action in build_parser()._actions:
        for spelling in action.option_strings:
            if "_" not in spelling:
                continue
            dashed = "--" + spelling[2:].replace("_", "-")
            args = [dashed] if action.nargs == 0 else [dashed, "1"]
            try:
                parse(*args, "t.py")
            except UsageError as e:  # a bad value is fine; an unknown option is not
                assert "unknown option" not in str(e), dashed


def test_an_unknown_dashed_option_keeps_the_users_spelling_in_the_error():
    with pytest.raises(UsageError, match=r"^--no-such-thing: unknown option"):
        parse("--no-such-thing", "t.py")


def test_the_scripts_own_dashed_options_are_passed_on_untouched():
    o = parse("--nproc-per-node", "1", "t.py", "--nproc-per-node", "7", "--rdzv-endpoint", "x")
    assert o.training_script_args == ("--nproc-per-node", "7", "--rdzv-endpoint", "x")


# --- torchrun's rendezvous options --------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "master"),
    [
        (["--rdzv-endpoint", "127.0.0.1:29400"], "127.0.0.1:29400"),
        (["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:5000"], "127.0.0.1:5000"),
        (["--rdzv-backend", "static", "--rdzv-endpoint", "127.0.0.1:5000"], "127.0.0.1:5000"),
        (["--rdzv_endpoint", "node0"], "node0:29400"),  # torchrun's c10d default port
        (["--rdzv-backend=etcd", "--rdzv-endpoint", "127.0.0.1:2379"], "etcd://127.0.0.1:2379"),
        (["--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "e1,e2:4001"], "etcd://e1:2379,e2:4001"),
    ],
)
def test_rendezvous_endpoint_is_our_master(argv, master):
    assert parse(*argv, "t.py").master == master


def test_rendezvous_conf_sets_our_timeouts():
    o = parse("--rdzv-conf", "join_timeout=60,keep_alive_interval=2,keep_alive_max_attempt=4",
              "t.py")  # fmt: skip
    assert (o.rdzv_timeout, o.heartbeat_timeout) == (60.0, 8.0)


def test_standalone_is_one_node_without_a_shared_rendezvous():
    o = parse("--standalone", "--nproc-per-node", "2", "t.py")
    assert o.standalone and o.ips == ("127.0.0.1",) and o.master is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rdzv-backend", "zookeeper"], r"^--rdzv-backend: expected static, c10d, etcd"),
        (["--rdzv-backend", "etcd"], r"^--rdzv-backend: etcd needs --rdzv_endpoint"),
        (["--rdzv-conf", "is_host=1"], r"^--rdzv-conf: key 'is_host': the node whose address"),
        (["--rdzv-conf", "close_timeout=5"], r"key 'close_timeout': a round closes when MAX"),
        (["--rdzv-conf", "nonsense"], r"expected key=value entries, got 'nonsense'"),
        (["--standalone", "--nnodes", "2"], r"^--standalone: .* --nnodes 2 names another node"),
        (["--standalone", "--master", "127.0.0.1:1"], r"^--standalone: .* --master"),
        (["--master", "127.0.0.1:1", "--rdzv-endpoint", "127.0.0.1:2"],
         r"^--master: '127.0.0.1:1' contradicts --rdzv-endpoint \(which means --master "
         r"127.0.0.1:2\)"),
        (["--nnodes", "4:1"], r"^--nnodes: MIN \(4\) is above MAX \(1\)"),
        (["--nproc-per-node", "xpu"], r"^--nproc-per-node: xpu is refused \(no XPUs: "),
    ],
)  # fmt: skip
def test_rendezvous_forms_paddlike_cannot_honour_are_refused_with_a_reason(argv, message):
    with pytest.raises(UsageError, match=message):
        parse(*argv, "t.py")


def test_a_fixed_node_range_is_a_count():
    assert parse("--nnodes", "2:2", "--node_rank", "1", "--master_addr", "h", "t.py").nnodes == 2


# --- torchrun's process options -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "console"),
    [
        ([], "0"),  # paddlike's (Paddle's) console: local worker 0
        (["-r", "3"], "none"),  # every stream into the files only
        (["--redirects", "3"], "none"),
        (["--redirects", "0"], "all"),  # torchrun's console: every worker
        (["-t", "3"], "all"),  # torchrun's tee: every worker, in the files and on the console
        (["--tee", "3"], "all"),  # the long spelling means the same
        (["-t3"], "all"),
        (["--tee=3"], "all"),
        (["-t", "0"], "all"),
        (["--tee", "1"], "all"),  # a tee hides nothing: stderr still reaches the console
        (["-t", "3", "--local-ranks-filter", "0"], "0"),
        (["--tee", "3", "--local_ranks_filter", "0,1"], "0,1"),
        (["-r", "3", "-t", "0:3"], "0"),  # everything redirected, rank 0 teed
        (["-r", "3", "-t", "0:3,2:3", "--local-ranks-filter", "2"], "2"),
        (["-r", "0:3", "--nproc_per_node", "3"], "1,2"),
        (["-r", "0:3,1:3", "--local_ranks_filter", "1,2"], "2"),
        (["-r", "1", "-t", "1"], "all"),  # stdout redirected but teed: both on the console
        (["--tee", "all"], "all"),  # paddlike's earlier words
        (["--tee", "none"], "none"),
        (["--console", "0,1", "-r", "3"], "none"),
    ],
)
def test_torchruns_tee_redirects_and_filter_choose_the_console_as_in_torchrun(argv, console):
    assert parse(*argv, "t.py").console == console


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-r", "5"], r"^-r: expected 0 \(none\), 1 \(stdout\), 2 \(stderr\), 3 \(both\)"),
        (["-r", "0:3"], r"^-r: '0:3' keeps some local ranks off the console and shows every "
         r"other one; say which ranks there are with --local_ranks_filter"),
        (["--tee", "0,1"], r"^--tee: expected 0 \(none\), 1 \(stdout\), 2 \(stderr\), 3 "
         r"\(both\) .*; to choose which local workers the console shows, use --console 0,1"),
        (["-t", "4"], r"^-t: expected 0 \(none\)"),
        (["--start-method", "thread"], r"^--start-method: expected spawn, fork or forkserver"),
        (["--monitor-interval", "0"], r"^--monitor-interval: expected a number of seconds > 0"),
        (["--run-path", "-m"], r"^--run-path: runs the script by its path; cannot be combined"),
        (["--logs-specs", "x"], r"^--logs-specs: paddlike's log layout is fixed"),
        (["--event-log-handler", "dynamic_rendezvous"], r"^--event-log-handler: no event"),
        (["--numa-binding", "nodes"], r"^--numa-binding: expected node, socket, exclusive, "
         r"core-complex \(as in torchrun\) or none, got 'nodes'"),
        (["--signals-to-handle", "SIGFOO"], r"^--signals-to-handle: SIGFOO is not a signal name"),
        (["--duplicate-stdout-filters", "loss"], r"^--duplicate-stdout-filters: no filtered "
         r"copy of the console's lines is made: every worker's lines are already in its log"),
        (["--logs-specs", "my_specs"], r"^--logs-specs: .*DefaultLogsSpecs does; a custom "
         r"LogsSpecs cannot apply"),
        (["--standalone=1"], r"^--standalone: takes no value, got '1'"),
    ],
)
def test_torchrun_process_options_we_cannot_honour_are_refused(argv, message):
    with pytest.raises(UsageError, match=message):
        parse(*argv, "t.py")


def test_accepted_torchrun_options_that_describe_what_we_do_anyway():
    o = parse("--start-method", "spawn", "--monitor-interval", "0.1", "--run-path",
              "--event-log-handler", "null", "--use-env", "t.py")  # fmt: skip
    assert o.training_script == "t.py" and not o.module


# --- Paddle's launchers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--rank", "0"], "node_rank", 0),
        (["--max_restart", "3"], "max_restarts", 3),
        (["--server_num", "1", "--trainer_num", "2"], "worker_num", 2),
        (["--servers", "127.0.0.1:6170", "--trainers", "127.0.0.1"], "workers", ("127.0.0.1",)),
        (["--log_overwrite", "True"], "log_overwrite", True),
        (["--log_overwrite", "false"], "log_overwrite", False),
        (["--log_overwrite=1"], "log_overwrite", True),
        (["--log_overwrite"], "log_overwrite", True),
        (["--legacy", "1"], "training_script", "t.py"),
        (["--log_level", "INFO"], "training_script", "t.py"),
        (["--sort_ip", "False"], "training_script", "t.py"),
        (["--elastic_level", "-1"], "training_script", "t.py"),
        (["--backend", "gloo"], "cpu_only", True),
        (["--backend", "nccl"], "nproc_per_node_kind", "gpu"),
        (["--backend", "auto"], "nproc_per_node_kind", None),
        (["--logdir", "L"], "log_dir", "L"),  # OneFlow's
    ],
)
def test_paddles_options_are_ours_by_another_name(argv, field, value):
    assert getattr(parse(*argv, "t.py"), field) == value


def test_paddles_boolean_value_is_not_taken_for_the_training_script():
    o = parse("--log_overwrite", "train.py", "--epochs", "1")
    assert o.log_overwrite and o.training_script == "train.py"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--log_level", "DEBUG"], r"^--log_level: the launcher prints one level of messages"),
        (["--sort_ip", "1"], r"^--sort_ip: node order is the --ips order"),
        (["--enable_gpu_log", "maybe"], r"^--enable_gpu_log: expected a boolean"),
        (["--xpus", "0,1"], r"^--xpus: paddlike runs on NVIDIA GPUs or CPUs"),
        (["--npus", "0"], r"^--npus: paddlike runs on NVIDIA GPUs or CPUs"),
        (["--backend", "bkcl"], r"^--backend: expected auto, nccl .* or gloo"),
        (["--backend", "nccl", "--devices", "cpu"], r"^--backend: 'nccl' needs GPU workers"),
        (["--gloo_port", "6767"], r"^--gloo_port: the launcher picks Paddle fleet's gloo"),
        (["--http_port", "6767"], r"^--http_port: the launcher picks Paddle fleet's gloo"),
        (["--with_gloo", "0"], r"^--with_gloo: parameter-server workers always get"),
        (["--scale", "1"], r"^--scale: no scale command: an elastic job scales by starting"),
        (["--force", "1"], r"^--force: no forced rescale: an elastic job scales"),
        (["--elastic_level", "1"], r"^--elastic_level: 1 \(scale\) needs a range of nodes"),
        (["--auto_parallel_config", "c.json"], r"^--auto_parallel_config: Paddle's auto-par"),
        (["--coordinator_num", "1"], r"^--coordinator_num: parameter-server coordinators"),
        (["--log_overwrite=maybe"], r"^--log_overwrite: expected no value, or true/false"),
        (["--role", "r", "--server_num", "1"], r"^--role: torchrun's worker role"),
    ],
)
def test_paddle_options_paddlike_cannot_honour_are_refused(argv, message):
    with pytest.raises(UsageError, match=message):
        parse(*argv, "t.py")


# --- PET_* (torchrun's environment, as Kubeflow's PyTorchJob sets it) -------------------------


KUBEFLOW = {
    "PET_NPROC_PER_NODE": "2",
    "PET_NNODES": "2",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "127.0.0.1",
    "PET_MASTER_PORT": "29500",
}


def test_kubeflows_pet_variables_are_read_like_torchrun_reads_them():
    o = parse("t.py", **KUBEFLOW)
    assert (o.nproc_per_node, o.nnodes, o.node_rank) == (2, 2, 1)
    assert (o.master_addr, o.master_port) == ("127.0.0.1", 29500)


def test_the_flag_and_our_variable_win_over_pet():
    o = parse("--nproc_per_node", "3", "t.py", PADDLIKE_NNODES="1", PADDLIKE_NODE_RANK="0",
              **KUBEFLOW)  # fmt: skip
    assert (o.nproc_per_node, o.nnodes, o.node_rank) == (3, 1, 0)
    assert parse("t.py", PET_RDZV_ENDPOINT="127.0.0.1:5000",
                 PADDLIKE_MASTER="127.0.0.1:6000").master == "127.0.0.1:6000"  # fmt: skip


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        ({"PET_RDZV_ENDPOINT": "127.0.0.1:5000"}, "master", "127.0.0.1:5000"),
        ({"PET_RDZV_ID": "j"}, "job_id", "j"),
        ({"PET_STANDALONE": "1"}, "standalone", True),
        ({"PET_STANDALONE": "0"}, "standalone", False),
        ({"PET_MAX_RESTARTS": "2"}, "max_restarts", 2),
        ({"PET_NO_PYTHON": "1"}, "no_python", True),
        ({"PET_LOG_DIR": "L"}, "log_dir", "L"),
        ({"PET_TEE": "3"}, "console", "all"),
        ({"PET_TEE": "3", "PET_LOCAL_RANKS_FILTER": "1"}, "console", "1"),
        ({"PET_REDIRECTS": "3"}, "console", "none"),
        ({"PADDLIKE_TEE": "3", "PET_TEE": "0:3", "PET_REDIRECTS": "3"}, "console", "all"),
        ({"PET_ROLE": "x"}, "role", "x"),
    ],
)
def test_pet_variables_of_torchruns_other_options(env, field, value):
    assert getattr(parse("t.py", **env), field) == value


def test_a_bad_pet_value_names_the_variable():
    with pytest.raises(UsageError, match=r"^--nproc_per_node \(from PET_NPROC_PER_NODE\)"):
        parse("t.py", PET_NPROC_PER_NODE="many")
    with pytest.raises(UsageError, match=r"^--start_method \(from PET_START_METHOD\): expected"):
        parse("t.py", PET_START_METHOD="thread")


@pytest.mark.parametrize("word", ["no", "false", "FALSE", "off", "0", ""])
def test_a_pet_switch_that_says_no_is_off(word):
    o = parse("--nnodes", "2", "--master", "127.0.0.1:1", "t.py", PET_STANDALONE=word)
    assert not o.standalone  # it was on: --master then refused for --standalone


@pytest.mark.parametrize("var", ["PET_STANDALONE", "PET_RUN_PATH"])
def test_a_pet_switch_that_is_no_word_is_one_line_naming_it_and_exit_2(var, tmp_path):
    (tmp_path / "t.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--dry_run", "t.py"], cwd=tmp_path,
        env={**env, var: "banana"}, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    option = "--" + var[4:].lower()
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (2, "", [
        f"paddlike.launch: error: {option} (from {var}): expected 1/true/yes/on, or "
        "0/false/no/off or empty, got 'banana'"
    ])  # fmt: skip


def test_pet_standalone_is_named_in_what_it_contradicts():
    with pytest.raises(UsageError, match=r"^--standalone \(from PET_STANDALONE\): .* --master"):
        parse("--master", "127.0.0.1:1", "t.py", PET_STANDALONE="yes")


# --- PS counts on several nodes -----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--server_num", "1", "--worker_num", "1", "--ips", "127.0.0.1,127.0.0.2"],
        ["--server_num", "1", "--worker_num", "1", "--nnodes", "2", "--node_rank", "1",
         "--master", "127.0.0.1:6170"],
        ["--worker_num", "2", "--nnodes", "2", "--node_rank", "0"],
        ["--trainer_num", "1", "--server_num", "1", "--rdzv-endpoint", "127.0.0.1:6170",
         "--nnodes", "2"],
    ],
)  # fmt: skip
def test_ps_counts_on_several_nodes_are_one_job_of_every_nodes_roles(argv):
    assert parse(*argv, "t.py").run_mode == "ps"  # Paddle's multi-node PS by counts


def test_ps_counts_on_several_nodes_from_the_environment_are_accepted_too():
    o = parse("--server_num", "1", "--worker_num", "1", "t.py", PET_NNODES="2", PET_NODE_RANK="1")
    assert o.run_mode == "ps" and o.nnodes == 2


def test_heter_counts_on_several_nodes_are_refused_pointing_to_the_lists():
    message = r"--heter_worker_num: counts describe a one-node ps-heter job, but --ips lists 2"
    with pytest.raises(UsageError, match=message):
        parse("--server_num", "1", "--worker_num", "1", "--heter_worker_num", "1",
              "--heter_devices", "cpu", "--ips", "127.0.0.1,127.0.0.2", "t.py")  # fmt: skip


def test_ps_counts_on_one_node_and_lists_on_several_still_run():
    assert parse("--server_num", "1", "--worker_num", "2", "t.py").run_mode == "ps"
    o = parse("--servers", "127.0.0.1:6170,127.0.0.2:6170", "--workers", "127.0.0.1,127.0.0.2",
              "--ips", "127.0.0.1,127.0.0.2", "t.py")  # fmt: skip
    assert o.run_mode == "ps" and len(o.workers) == 2


# --- the launcher itself, and the table ----------------------------------------------------------


def _launch(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", *argv],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_the_launcher_exits_2_with_one_line_for_a_refused_option(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print('ran')\n")
    run = _launch("--numa-binding", "sockets", "--log_dir", str(tmp_path / "log"), str(script))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "paddlike.launch: error: --numa-binding: expected node, socket, exclusive, core-complex "
        "(as in torchrun) or none, got 'sockets'"
    ]
    assert not (tmp_path / "log").exists()


def test_the_launcher_shows_ps_counts_on_two_nodes_as_one_job_in_a_dry_run(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print('ran')\n")
    run = _launch("--server_num", "1", "--worker_num", "1", "--nnodes", "2", "--node_rank", "1",
                  "--master", "127.0.0.1:6170", "--log_dir", str(tmp_path / "log"), "--dry_run",
                  str(script))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "mode ps, node 1 of 2" in run.stdout and "PADDLE_TRAINERS_NUM=2" in run.stdout
    assert not (tmp_path / "log").exists()  # nothing started


def test_torchruns_command_line_runs_a_one_node_job(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("import os; print('rank', os.environ['RANK'], os.environ['ROLE_NAME'])\n")
    run = _launch("--standalone", "--nproc-per-node=2", "--max-restarts", "0",
                  "--log-dir", str(tmp_path / "log"), "--role", "learner", "--tee", "all",
                  str(script))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rank 0 learner" in run.stdout and "rank 1 learner" in run.stdout


def test_every_option_of_the_table_is_in_the_migration_guide():
    doc = MIGRATING.read_text()
    section = doc[doc.index("## Every option of the other launchers") :]
    missing = [n for n in sorted(COMPAT_OPTIONS) if f"`--{n}`" not in section]
    assert not missing, f"options handled but not in docs/migrating.md: {missing}"
    for action in build_parser()._actions:
        for spelling in action.option_strings:
            if spelling.startswith("--") and spelling != "--help":
                assert f"`{spelling}`" in doc, spelling


# --- torchrun's --rdzv_endpoint localhost:0 (torchtitan's run script) ----------------------


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--rdzv_endpoint", "localhost:0"], {}),
        (["--rdzv-backend", "c10d", "--rdzv-endpoint=localhost:0", "--nnodes", "1"], {}),
        (["--master", "127.0.0.1:0", "--standalone"], {}),
        ([], {"PET_RDZV_ENDPOINT": "localhost:0"}),
    ],
)
def test_port_0_on_one_node_is_any_port_and_needs_no_meeting_place(argv, env):
    assert parse(*argv, "t.py", **env).master is None


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--rdzv_endpoint", "localhost:0", "--nnodes", "2"], {},
         r"^--master \(from --rdzv_endpoint\): port 0 \(any free port\) works for a one-node "
         r"job only, but this job has --nnodes 2: the other nodes could not learn which port "
         r"node 0 picked; give a port, e.g. localhost:29400$"),
        (["--master", "10.0.0.1:0", "--ips", "10.0.0.1,10.0.0.2"], {},
         r"^--master: port 0 .* this job has several nodes"),
        (["--rdzv_endpoint", "h:0", "--nnodes", "1:3"], {}, r"this job has --nnodes 1:3"),
        ([], {"PET_RDZV_ENDPOINT": "h:0", "PET_NNODES": "2"},
         r"^--master \(from PET_RDZV_ENDPOINT\): port 0"),
    ],
)  # fmt: skip
def test_port_0_on_several_nodes_is_refused_saying_why(argv, env, message):
    with pytest.raises(UsageError, match=message):
        parse(*argv, "t.py", **env)
