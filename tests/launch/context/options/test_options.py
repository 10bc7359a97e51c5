"""The launcher's command line: names, aliases, environment variables, validation."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options import LaunchOptions, UsageError, env_name, parse_options


def parse(*argv: str, **env: str) -> LaunchOptions:
    return parse_options(list(argv), env)


def test_defaults_match_paddles_launcher():
    o = parse("train.py")
    assert o.ips == ("127.0.0.1",)
    assert o.log_dir == "log"
    assert o.start_port == 6070
    assert o.run_mode == "collective"
    assert o.gpus is None and o.nproc_per_node is None
    assert o.kill_timeout == 30.0 and o.console == "0"
    assert (o.rdzv_timeout, o.heartbeat_timeout, o.max_restarts) == (300.0, 10.0, 0)
    assert o.master_port == 6170


def test_script_arguments_are_passed_verbatim_even_when_they_look_like_ours():
    o = parse("--nproc_per_node", "2", "train.py", "--nproc_per_node", "7", "--ips", "x", "-m")
    assert o.nproc_per_node == 2
    assert o.training_script == "train.py"
    assert o.training_script_args == ("--nproc_per_node", "7", "--ips", "x", "-m")


def test_double_dash_ends_the_launchers_options():
    o = parse("--log_dir", "L", "--", "--weird-script-name", "a")
    assert o.training_script == "--weird-script-name"
    assert o.training_script_args == ("a",)


@pytest.mark.parametrize("alias", ["--gpus", "--devices", "--selected_gpus"])
def test_gpu_aliases(alias):
    assert parse(alias, "0,1", "t.py").gpus == ("0", "1")


def test_logdir_is_an_alias_of_log_dir():
    assert parse("--logdir", "mylogs", "t.py").log_dir == "mylogs"


def test_torchrun_and_oneflow_names():
    o = parse(
        "--nnodes", "1", "--node_rank", "0", "--master_addr", "10.0.0.1",
        "--master_port", "29500", "-m", "--redirect_stdout_and_stderr", "pkg.train",
    )  # fmt: skip
    assert (o.nnodes, o.node_rank, o.master_addr, o.master_port) == (1, 0, "10.0.0.1", 29500)
    assert o.module and o.redirect_stdout_and_stderr
    assert o.training_script == "pkg.train"


def test_every_option_can_come_from_the_environment():
    o = parse("t.py", PADDLIKE_LOG_DIR="envlogs", PADDLIKE_NPROC_PER_NODE="3",
              PADDLIKE_DRY_RUN="1", PADDLIKE_CONSOLE="all")  # fmt: skip
    assert (o.log_dir, o.nproc_per_node, o.dry_run, o.console) == ("envlogs", 3, True, "all")


def test_the_command_line_wins_over_the_environment():
    o = parse("--log_dir", "cli", "t.py", PADDLIKE_LOG_DIR="env")
    assert o.log_dir == "cli"


def test_env_name_of_an_option():
    assert env_name("log_dir") == "PADDLIKE_LOG_DIR"
    assert env_name("nproc_per_node") == "PADDLIKE_NPROC_PER_NODE"


def test_ips_from_the_environment_count_as_given():
    assert parse("t.py", PADDLIKE_IPS="a,b").ips_given
    assert not parse("t.py").ips_given


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nproc_per_node", "x"], "--nproc_per_node: expected a positive integer, got 'x'"),
        (["--nproc_per_node", "0"], "--nproc_per_node: expected a positive integer, got '0'"),
        (["--start_port", "70000"], "--start_port: expected a port number 1-65535, got '70000'"),
        (["--gpus", "0,a"], "--gpus: expected a comma-separated list of GPU ids"),
        (["--gpus", "0,0"], "--gpus: expected each GPU id once, got '0,0'"),
        (["--ips", "a,,b"], "--ips: expected a comma-separated list of hosts"),
        (["--run_mode", "ring"], "--run_mode: expected one of collective, ps, ps-heter"),
        (["--kill_timeout", "-1"], "--kill_timeout: expected a number of seconds >= 0"),
        (["--console", "zero"], "--console: expected 'all', 'none' or a comma-separated list"),
        (["--tee", "zero"], "--tee: expected 0 (none), 1 (stdout), 2 (stderr), 3 (both)"),
        (["--master", "10.0.0.1"], "--master: expected ip:port"),
        (["--servers", "10.0.0.1"], "--servers: expected ip:port entries"),
        (["--node_rank", "-1"], "--node_rank: expected an integer >= 0, got '-1'"),
        (["--rdzv_timeout", "nan"], "--rdzv_timeout: expected a number of seconds > 0"),
    ],
)
def test_bad_values_give_one_line_naming_option_and_value(argv, message):
    with pytest.raises(UsageError) as err:
        parse(*argv, "t.py")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_a_bad_value_from_the_environment_names_the_variable():
    with pytest.raises(UsageError, match=r"--nproc_per_node \(from PADDLIKE_NPROC_PER_NODE\)"):
        parse("t.py", PADDLIKE_NPROC_PER_NODE="two")


def test_a_bad_flag_value_from_the_environment_is_an_error():
    with pytest.raises(UsageError, match=r"--dry_run \(from PADDLIKE_DRY_RUN\).*got 'maybe'"):
        parse("t.py", PADDLIKE_DRY_RUN="maybe")


def test_missing_training_script():
    with pytest.raises(UsageError, match=r"^training_script: missing"):
        parse("--nproc_per_node", "2")


def test_an_unambiguous_prefix_is_the_option_as_argparse_takes_it_for_torchrun():
    assert parse("--nproc_per_nod", "2", "t.py").nproc_per_node == 2
    assert parse("--nproc", "2", "t.py").nproc_per_node == 2
    assert parse("--nproc-per-nod=2", "--max_rest", "1", "t.py").max_restarts == 1
    assert parse("--rdzv_endp", "127.0.0.1:5000", "t.py").master == "127.0.0.1:5000"
    # the script's own arguments are never expanded
    assert parse("t.py", "--nproc").training_script_args == ("--nproc",)


def test_an_ambiguous_prefix_names_what_it_could_be_and_an_unknown_option_is_an_error():
    assert parse("--rdzv_t", "9", "t.py").rdzv_timeout == 9.0
    with pytest.raises(UsageError, match=r"^--rdzv: ambiguous abbreviation, could be "
                       r"--rdzv_backend, --rdzv_conf, --rdzv_endpoint, --rdzv_id, "):  # fmt: skip
        parse("--rdzv", "1", "t.py")
    with pytest.raises(UsageError, match=r"^--nprocs: unknown option \(see --help\)"):
        parse("--nprocs", "2", "t.py")


def test_an_option_without_its_value():
    with pytest.raises(UsageError, match=r"^--ips: expected one argument"):
        parse("--ips")


def test_nnodes_must_agree_with_ips():
    with pytest.raises(UsageError, match=r"^--nnodes: 3 contradicts --ips, which lists 2"):
        parse("--ips", "a,b", "--nnodes", "3", "t.py")


def test_node_rank_out_of_range():
    with pytest.raises(UsageError, match=r"^--node_rank: 2 is out of range for 2 node"):
        parse("--ips", "a,b", "--node_rank", "2", "t.py")


def test_nproc_per_node_must_divide_the_gpu_list():
    with pytest.raises(UsageError, match=r"^--nproc_per_node: 2 does not divide the 3 GPUs"):
        parse("--gpus", "0,1,2", "--nproc_per_node", "2", "t.py")


def test_module_and_no_python_exclude_each_other():
    with pytest.raises(UsageError, match=r"^--module: cannot be combined with --no_python"):
        parse("-m", "--no_python", "t")


def test_ps_mode_is_inferred_from_ps_options():
    assert parse("--server_num", "2", "--worker_num", "2", "t.py").run_mode == "ps"
    assert parse("--servers", "a:1", "--workers", "a", "t.py").run_mode == "ps"


def test_ps_mode_is_never_inferred_from_the_scripts_arguments():
    assert parse("t.py", "--server_num", "2").run_mode == "collective"


def test_ps_options_with_collective_mode_are_an_error():
    with pytest.raises(UsageError, match=r"^--run_mode: 'collective' contradicts --server_num"):
        parse("--run_mode", "collective", "--server_num", "2", "t.py")


def test_ps_heter_alone_asks_for_its_heter_trainers():
    with pytest.raises(UsageError, match=r"^--heter_workers: needed with --run_mode ps-heter"):
        parse("--run_mode", "ps-heter", "t.py")


def test_ps_lists_must_come_together():
    with pytest.raises(UsageError, match=r"^--workers: needed too"):
        parse("--servers", "a:1", "t.py")


def test_ps_count_must_match_its_list():
    with pytest.raises(UsageError, match=r"^--server_num: 3 contradicts --servers, which lists 1"):
        parse("--servers", "a:1", "--workers", "a", "--server_num", "3", "t.py")


def test_console_values_are_normalised():
    assert parse("--console", "ALL", "t.py").console == "all"
    assert parse("--console", "0, 2", "t.py").console == "0,2"
    assert parse("--local_ranks_filter", "1", "t.py").console == "1"


def test_master_accepts_etcd_urls():
    assert parse("--master", "etcd://10.0.0.1:2379,10.0.0.2:2379", "t.py").master.startswith(
        "etcd://"
    )


def test_options_object_is_frozen():
    o = parse("t.py")
    with pytest.raises(AttributeError):
        o.log_dir = "x"  # type: ignore[misc]


def test_the_job_token_can_come_from_a_file_but_not_from_both(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    opts = parse_options(["--job_token_file", str(token), "train.py"], {})
    assert opts.job_token == "s3cret"
    env_opts = parse_options(["train.py"], {"PADDLIKE_JOB_TOKEN_FILE": str(token)})
    assert env_opts.job_token == "s3cret"
    with pytest.raises(UsageError, match=r"^--job_token_file: give the token by --job_token or"):
        parse_options(["--job_token", "x", "--job_token_file", str(token), "train.py"], {})
    with pytest.raises(UsageError, match=r"^--job_token_file: cannot read the token file"):
        parse_options(["--job_token_file", str(tmp_path / "none"), "train.py"], {})
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "empty").chmod(0o600)
    with pytest.raises(UsageError, match=r"^--job_token_file: the token file is empty"):
        parse_options(["--job_token_file", str(tmp_path / "empty"), "train.py"], {})


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_a_token_file_others_can_read_or_write_is_refused_like_a_loose_ssh_key(tmp_path, mode):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(mode)
    message = (
        rf"^--job_token_file: refused the token file: others can read or write it \(mode "
        rf"0{mode:o}\): chmod 600 it, got '{token}'$"
    )
    with pytest.raises(UsageError, match=message):
        parse_options(["--job_token_file", str(token), "train.py"], {})
    with pytest.raises(UsageError, match=r"from PADDLIKE_JOB_TOKEN_FILE"):
        parse_options(["train.py"], {"PADDLIKE_JOB_TOKEN_FILE": str(token)})
