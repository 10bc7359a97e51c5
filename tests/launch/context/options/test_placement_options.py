"""torchrun 2.x's and Paddle 3.x's remaining options: --numa_binding (and DeepSpeed's
--bind_cores_to_rank), --virtual_local_rank, --enable_gpu_log / --gpu_log_interval,
--start_method, --logs_specs, --signals_to_handle, and Paddle's PADDLE_<OPTION> variables
(args_envs.py's env_args_mapping) at their place in the order of sources."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options import LaunchOptions, UsageError, parse_options


def parse(*argv: str, **env: str) -> LaunchOptions:
    return parse_options([*argv, "t.py"], env)


@pytest.mark.parametrize(
    ("argv", "env", "mode"),
    [
        ([], {}, None),
        (["--numa-binding", "node"], {}, "node"),
        (["--numa_binding=core-complex"], {}, "core-complex"),
        (["--numa_binding", "NONE"], {}, None),
        ([], {"PET_NUMA_BINDING": "socket"}, "socket"),
        ([], {"PADDLIKE_NUMA_BINDING": "exclusive", "PET_NUMA_BINDING": "node"}, "exclusive"),
        (["--bind_cores_to_rank"], {}, "exclusive"),  # DeepSpeed's
        (["--bind_cores_to_rank", "--numa_binding", "exclusive"], {}, "exclusive"),
    ],
)
def test_numa_binding_comes_from_torchruns_and_deepspeeds_options(argv, env, mode):
    assert parse(*argv, **env).numa_binding == mode


def test_deepspeeds_binding_contradicting_ours_is_refused_naming_both():
    message = r"^--numa_binding: 'node' contradicts --bind_cores_to_rank \(which means --numa"
    with pytest.raises(UsageError, match=message + r"_binding exclusive\)"):
        parse("--bind_cores_to_rank", "--numa_binding", "node")


def test_bind_core_list_is_a_cpu_list_as_numactl_writes_it():
    o = parse("--bind_cores_to_rank", "--bind_core_list", "0-3,8,10-11")
    assert o.bind_core_list == (0, 1, 2, 3, 8, 10, 11)
    with pytest.raises(UsageError, match=r"^--bind_core_list: expected CPU numbers and ranges"):
        parse("--bind_core_list", "3-1")
    with pytest.raises(UsageError, match=r"^--bind_core_list: only used to bind workers: add "
                       r"--numa_binding MODE"):  # fmt: skip
        parse("--bind_core_list", "0-3")


@pytest.mark.parametrize(
    ("argv", "env", "on"),
    [
        (["--virtual-local-rank"], {}, True),
        ([], {"PET_VIRTUAL_LOCAL_RANK": "1"}, True),
        ([], {"PET_VIRTUAL_LOCAL_RANK": "0"}, False),
        ([], {}, False),
    ],
)
def test_virtual_local_rank_is_torchruns_switch(argv, env, on):
    assert parse(*argv, **env).virtual_local_rank is on


@pytest.mark.parametrize(
    ("argv", "interval"),
    [
        ([], None),
        (["--enable_gpu_log", "True"], 30.0),  # Paddle's watcher: a row every 30 s
        (["--enable_gpu_log", "false"], None),
        (["--gpu_log_interval", "0.5"], 0.5),
    ],
)
def test_paddles_gpu_log_is_an_interval(argv, interval):
    assert parse(*argv).gpu_log_interval == interval


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_every_start_method_is_accepted_a_script_is_always_a_fresh_process(method):
    assert parse("--start-method", method).training_script == "t.py"


@pytest.mark.parametrize(
    "value", ["DefaultLogsSpecs", "torch.distributed.elastic.multiprocessing:DefaultLogsSpecs"]
)
def test_torchruns_default_logs_specs_is_what_paddlike_does(value):
    assert parse("--logs-specs", value).log_dir == "log"


def test_torchruns_default_signals_are_accepted():
    assert parse("--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT").training_script == "t.py"


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        ({"PADDLE_NPROC_PER_NODE": "2"}, "nproc_per_node", 2),
        ({"PADDLE_DEVICES": "0,1"}, "gpus", ("0", "1")),
        ({"PADDLE_RUN_MODE": "ps"}, "run_mode", "ps"),
        ({"PADDLE_LOG_DIR": "/tmp/pl"}, "log_dir", "/tmp/pl"),
        ({"PADDLE_JOB_ID": "j7"}, "job_id", "j7"),
        ({"PADDLE_MAX_RESTART": "2"}, "max_restarts", 2),
        ({"PADDLE_IPS": "127.0.0.1"}, "ips", ("127.0.0.1",)),
        ({"PADDLE_LOG_OVERWRITE": "true"}, "log_overwrite", True),
        ({"PADDLE_SERVER_NUM": "1", "PADDLE_TRAINER_NUM": "2"}, "worker_num", 2),
        ({"PADDLE_SERVER_NUM": "1"}, "run_mode", "ps"),  # a PS option implies ps, as a flag
        # precedence: the flag's own variable, then torchrun's, then Paddle's
        ({"PET_NPROC_PER_NODE": "3", "PADDLE_NPROC_PER_NODE": "2"}, "nproc_per_node", 3),
        ({"PADDLIKE_LOG_DIR": "a", "PADDLE_LOG_DIR": "b"}, "log_dir", "a"),
    ],
)
def test_paddles_option_variables_are_read_below_ours(env, field, value):
    assert getattr(parse(**env), field) == value


def test_a_flag_wins_over_paddles_variable():
    assert parse("--nproc_per_node", "1", PADDLE_NPROC_PER_NODE="4").nproc_per_node == 1


def test_inside_a_launched_worker_the_launchers_own_paddle_variables_are_not_options():
    worker = {"PADDLIKE_JOB_ID": "outer", "PADDLE_LOG_DIR": "/outer/log",
              "PADDLE_JOB_ID": "outer", "PADDLE_WITH_GLOO": "0"}  # fmt: skip
    o = parse(**worker)
    assert o.log_dir == "log"  # a nested launch does not write into the outer job's directory


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PADDLE_NPROC_PER_NODE": "x"}, r"^--nproc_per_node \(from PADDLE_NPROC_PER_NODE\): "
         r"expected a positive integer"),
        ({"PADDLE_SORT_IP": "1"}, r"^--sort_ip \(from PADDLE_SORT_IP\): node order is the --ips "
         r"order .*\(accepted: false, 0 or no\)"),
        ({"PADDLE_LOG_LEVEL": "DEBUG"}, r"^--log_level \(from PADDLE_LOG_LEVEL\): the launcher "
         r"prints one level"),
        ({"PADDLE_GLOO_PORT": "6767"}, r"^--gloo_port \(from PADDLE_GLOO_PORT\): the launcher "
         r"picks"),
        ({"PADDLE_AUTO_CLUSTER": "1"}, r"^--auto_cluster_config \(from PADDLE_AUTO_CLUSTER\)"),
    ],
)  # fmt: skip
def test_paddles_option_variables_paddlike_cannot_honour_name_the_variable(env, message):
    with pytest.raises(UsageError, match=message):
        parse(**env)


def test_paddles_accepted_option_variables_pass():
    o = parse(PADDLE_LOG_LEVEL="INFO", PADDLE_SORT_IP="false", PADDLE_WITH_GLOO="1")
    assert o.training_script == "t.py"


def test_paddles_enable_gpu_log_with_our_interval_is_that_interval():
    assert parse("--enable_gpu_log", "1", "--gpu_log_interval", "2").gpu_log_interval == 2.0
    with pytest.raises(UsageError, match=r"^--enable_gpu_log: false contradicts "
                       r"--gpu_log_interval 2 \(a GPU log every"):  # fmt: skip
        parse("--enable_gpu_log", "false", "--gpu_log_interval", "2")
