"""Other launchers' options that are not ours by another name, as one table: torchrun's,
Paddle's two launchers', OneFlow's and DeepSpeed's. Each is translated to ours
(`others.translate_compat`: ``--rdzv_endpoint h:p`` -> ``--master h:p``), accepted where
its value is what paddlike does anyway (`ONLY_VALUES`), or refused with one line saying
why (`REFUSED_OPTIONS`), never ignored; docs/migrating.md has the whole table. Their
spellings of our own options (``--nproc-per-node``, ``--local_addr``) and their variables
for them (``PET_NNODES``) are in our options' rows (`our_table.py`).
"""

from __future__ import annotations

_SCALE_BY_NODES = (
    "an elastic job scales by starting or stopping nodes within --nnodes MIN:MAX "
    "(docs/migrating.md#elastic-jobs)"
)
_AUTO_PARALLEL = "Paddle's auto-parallel rank mapping and tuner are not part of paddlike"
_NO_STREAM_COPY = (
    "no filtered copy of the console's lines is made: every worker's lines are already in "
    "its log file (stdout in workerlog.N, stderr in workerlog.N.err with -r/-t choosing one "
    "stream or --redirect_stdout_and_stderr); select them there, e.g. grep -h PATTERN "
    "log/workerlog.*"
)

# Options refused whatever their value: name -> why (the user reads "--name: why").
REFUSED_OPTIONS = {
    # torchrun
    "duplicate_stdout_filters": _NO_STREAM_COPY,
    "duplicate_stderr_filters": _NO_STREAM_COPY,
    # Paddle's paddle.distributed.launch
    "auto_parallel_config": _AUTO_PARALLEL,
    "auto_tuner_json": _AUTO_PARALLEL,
    "npus": "paddlike runs on NVIDIA GPUs or CPUs (--gpus, --devices cpu)",
    "xpus": "paddlike runs on NVIDIA GPUs or CPUs (--gpus, --devices cpu)",
    "selected_xpus": "paddlike runs on NVIDIA GPUs or CPUs (--gpus, --devices cpu)",
    "gloo_port": "the launcher picks Paddle fleet's gloo HTTP port itself "
    "(PADDLE_GLOO_HTTP_ENDPOINT, on server 0's host)",
    # Paddle's fleet.launch
    "http_port": "the launcher picks Paddle fleet's gloo HTTP port itself "
    "(PADDLE_GLOO_HTTP_ENDPOINT, on server 0's host)",
    "cluster_topo_path": _AUTO_PARALLEL,
    "rank_mapping_path": _AUTO_PARALLEL,
    "enable_auto_mapping": _AUTO_PARALLEL,
    "ranks": _AUTO_PARALLEL,
    "enable_rank_mapping": _AUTO_PARALLEL,
    "coordinators": "parameter-server coordinators are not supported (servers and trainers only)",
    "coordinator_num": "parameter-server coordinators are not supported (servers and trainers "
    "only)",
    "elastic_pre_hook": "no pre-launch hook: run it in the node's start script before "
    "the launcher; " + _SCALE_BY_NODES,
    "scale": "no scale command: " + _SCALE_BY_NODES,
    "force": "no forced rescale: " + _SCALE_BY_NODES,
    # DeepSpeed's launcher
    "launcher_args": "give ssh's (and pdsh's ssh's) options with --ssh_args='...' "
    "(docs/cli.md#one-command-for-the-whole-cluster)",
}

BOOL_TRUE = {"1", "true", "t", "yes", "y", "on"}
BOOL_FALSE = {"0", "false", "f", "no", "n", "off"}

# Options accepted only with the values that describe what paddlike does anyway:
# name -> (accepted values, lower case; why others are refused).
ONLY_VALUES = {
    # A training script is always started as a fresh process (an exec), whatever the
    # method, as torchrun starts a script: the method only matters to torchrun's function
    # entry points, which a command line never names.
    "start_method": (
        {"spawn", "fork", "forkserver"},
        "expected spawn, fork or forkserver",
    ),
    # torchrun's LogsSpecs entry point: its default writes each worker's output to files
    # in the log directory, as paddlike's fixed layout does; another class would decide
    # other paths, which paddlike's log readers (paddlike.logs, the report) could not find.
    "logs_specs": (
        {
            "default",
            "defaultlogsspecs",
            "torch.distributed.elastic.multiprocessing:defaultlogsspecs",
        },
        "paddlike's log layout is fixed (workerlog.N in --log_dir, docs/logdir.md), which is "
        "what torchrun's DefaultLogsSpecs does; a custom LogsSpecs cannot apply",
    ),
    "event_log_handler": (
        {"null"},
        "no event handlers; the job's events are in summary.json",
    ),
    "sort_ip": (
        BOOL_FALSE,
        "node order is the --ips order (or --node_rank); sort --ips yourself",
    ),
    "auto_cluster_config": (BOOL_FALSE, _AUTO_PARALLEL),
    "with_gloo": (
        {"1"},
        "parameter-server workers always get Paddle fleet's gloo (PADDLE_WITH_GLOO=1)",
    ),
    "log_level": (
        {"info"},
        "the launcher prints one level of messages; --dry_run shows every "
        "process's command and environment",
    ),
    "legacy": (
        BOOL_TRUE | BOOL_FALSE,
        "expected a boolean (true/false)",
    ),  # both launchers' options are ours
}

# Options whose values become ours (see `translate_compat`); the rest of the table.
COMPAT_TRANSLATED = (
    "rdzv_backend", "rdzv_endpoint", "rdzv_conf", "monitor_interval", "role", "redirects",
    "tee", "backend", "elastic_server", "enable_gpu_log",
)  # fmt: skip
COMPAT_SWITCHES = ("standalone", "run_path", "use_env", "bind_cores_to_rank")  # no value

# torchrun's options among the above: read from PET_<NAME> as torchrun does.
TORCHRUN_OPTIONS = {
    "rdzv_backend", "rdzv_endpoint", "rdzv_conf", "monitor_interval", "role", "redirects", "tee",
    "start_method", "event_log_handler", "standalone", "run_path", "logs_specs",
    "duplicate_stdout_filters", "duplicate_stderr_filters",
}  # fmt: skip
# Paddle's launcher reads these options of the table from its variables (args_envs.py's
# env_args_mapping); the rest of that mapping are options of ours (their rows' variables).
PADDLE_OPTION_VARIABLES = {
    "log_level": "PADDLE_LOG_LEVEL",
    "sort_ip": "PADDLE_SORT_IP",
    "gloo_port": "PADDLE_GLOO_PORT",
    "with_gloo": "PADDLE_WITH_GLOO",
    "auto_parallel_config": "PADDLE_AUTO_PARALLEL_CONFIG",
    "auto_cluster_config": "PADDLE_AUTO_CLUSTER",
}
SHORT_OPTIONS = {"-r": "redirects", "-t": "tee"}

PADDLE_BOOL = BOOL_TRUE | BOOL_FALSE

COMPAT_VALUED = frozenset(REFUSED_OPTIONS) | frozenset(ONLY_VALUES) | frozenset(COMPAT_TRANSLATED)
COMPAT_OPTIONS = COMPAT_VALUED | frozenset(COMPAT_SWITCHES)


# --help only: torchrun's options that are not ours by another name, in torchrun's
# spellings; `others` takes them out before the parse (docs/migrating.md has the table).
TORCHRUN_HELP: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("-t", "--tee"),
        "0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:3,1:1, as in torchrun: also "
        "on the console (the output is always in workerlog.N); shows every worker unless "
        "--local_ranks_filter says which",
    ),
    (
        ("-r", "--redirects"),
        "the same values, as in torchrun: only in workerlog.N, not on the console (-r 3: "
        "nothing on the console)",
    ),
    (
        ("--rdzv_endpoint", "--rdzv-endpoint"),
        "host:port where the launchers meet, as --master (localhost:0 on one node: any port)",
    ),
    (
        ("--rdzv_backend", "--rdzv-backend"),
        "static or c10d (node 0's store at --rdzv_endpoint), etcd or etcd-v2 (--master etcd://)",
    ),
    (
        ("--rdzv_conf", "--rdzv-conf"),
        "join_timeout=S, last_call_timeout=S, keep_alive_interval=S, keep_alive_max_attempt=N",
    ),
    (("--standalone",), "one node with its own rendezvous (what a one-node job is anyway)"),
    (("--role",), "the workers' ROLE_NAME (default: default)"),
)


def dest_of(spellings: tuple[str, ...]) -> str:
    """An option's dest: its first long spelling without the dashes (argparse's rule)."""
    return next(s for s in spellings if s.startswith("--"))[2:]
