"""Every option of ours, declared once: one `Option` row each (`declare.Option` says what a
row holds), in --help's groups, the common options first; the one command's options for
starting a cluster among them (scope CLUSTER).

The parser and --help (`parser`), the checks (`parse`), the sources (`sources`) and the
record's fields (`record`) are read from these rows, and docs/cli.md's tables are checked
against --help (`tests/test_docs_cli.py`). Other launchers' options that are not ours by
another name are `their_table.py`'s.
"""

from __future__ import annotations

from paddlike.launch.context.options import values as v
from paddlike.launch.context.options.declare import CLUSTER, Option

COMMON = "common options"  # --help's first group (--version is added to it)

GROUPS: tuple[tuple[str, tuple[Option, ...]], ...] = (
    (
        COMMON,
        (
            Option(
                ("--nproc_per_node", "--nproc-per-node"),
                "workers per node: a number (the GPUs split into that many slices), or gpu, cpu, "
                "auto as in torchrun (default: one per visible GPU, or 1)",
                v.nproc, variables=("PET_NPROC_PER_NODE", "PADDLE_NPROC_PER_NODE"),
                hint="; or gpu, cpu, auto (as in torchrun)",
                # a word (gpu, cpu, auto) is the kind of worker; a number the count
                into=lambda value, _: {
                    "nproc_per_node_kind" if isinstance(value, str) else "nproc_per_node": value
                },
            ),
            Option(
                ("--gpus", "--devices", "--selected_gpus"),
                "physical GPU ids for this node's workers, e.g. 0,1 (entries of "
                "CUDA_VISIBLE_DEVICES when set), or cpu; default: every visible GPU, or CPU "
                "workers when none is visible",
                v.gpu_list, variables=("PADDLE_DEVICES",), hint=v.worker_per_gpu_hint,
                into=lambda value, _: {"cpu_only": True} if value == "cpu" else {"gpus": value},
            ),
            Option(
                ("--nnodes", "--np"),
                "number of nodes (must agree with --ips), or MIN:MAX for an elastic job",
                v.nnodes, variables=("PET_NNODES", "PADDLE_NNODES", "PADDLE_ELASTIC_NP"),
            ),
            Option(
                ("--ips",),
                "comma-separated node IPs or hostnames (default 127.0.0.1)",
                v.name_list, variables=("PADDLE_IPS",),
                into=lambda value, _: {"ips": value, "ips_given": True},
            ),
            Option(
                ("--master",),
                "ip:port or etcd://host:port[,host:port] for rendezvous",
                v.master, variables=("PADDLE_MASTER",),
            ),
            Option(
                ("--log_dir", "--log-dir", "--logdir"),
                "log directory (default log)",
                v.non_empty, variables=("PET_LOG_DIR", "PADDLE_LOG_DIR"),
            ),
            Option(
                ("--max_restarts", "--max-restarts", "--max_restart"),
                "restart rounds after a failure (default 0)",
                v.NON_NEGATIVE_INT, variables=("PET_MAX_RESTARTS", "PADDLE_MAX_RESTART"),
            ),
            Option(
                ("--dry_run",),
                "print every process, its command and environment; start nothing",
                None, scope=CLUSTER,
            ),
        ),
    ),
    (
        "Paddle options",
        (
            Option(
                ("--run_mode",),
                "collective (default), ps or ps-heter",
                v.RUN_MODE, variables=("PADDLE_RUN_MODE",),
            ),
            Option(
                ("--host", "--local_addr", "--local-addr"),
                "this node's address, when it cannot be matched (or POD_IP)",
                v.non_empty, variables=("PET_LOCAL_ADDR",),
            ),
            Option(
                ("--start_port",),
                "first port on multi-node jobs (default 6070)",
                v.PORT, variables=("PADDLE_START_PORT",),
                into=lambda value, source: {"start_port": value, "start_port_from": source.name},
            ),
            Option(
                ("--job_id", "--rdzv_id", "--rdzv-id"),
                "job name (default: generated from the time)",
                v.non_empty, variables=("PET_RDZV_ID", "PADDLE_ELASTIC_JOB_ID", "PADDLE_JOB_ID"),
            ),
        ),
    ),
    (
        "torchrun/OneFlow compatible",
        (
            Option(
                ("--node_rank", "--node-rank", "--rank"),
                "this node's index in --ips (ignored by elastic jobs)",
                v.NON_NEGATIVE_INT, variables=("PET_NODE_RANK", "PADDLE_RANK"),
            ),
            Option(
                ("--master_addr", "--master-addr"),
                "address where the launchers meet (default: node 0)",
                v.non_empty, variables=("PET_MASTER_ADDR",),
            ),
            Option(
                ("--master_port", "--master-port"),
                "the workers' MASTER_PORT on node 0, as in torchrun; the launchers then meet at "
                "the next port, unless --master says where (default: launchers at 6170, the "
                "workers' port picked free)",
                v.PORT, variables=("PET_MASTER_PORT",),
                into=lambda value, _: {"master_port": value, "master_port_given": True},
            ),
            Option(
                ("-m", "--module"),
                "run the script as a module",
                None, variables=("PET_MODULE",),
            ),
            Option(
                ("--no_python", "--no-python"),
                "run training_script as a command, without the Python interpreter",
                None, variables=("PET_NO_PYTHON",),
            ),
            Option(
                ("--pass_local_rank",),
                "give each worker --local_rank=N (its local rank) right after the script, before "
                "its own args, as DeepSpeed's launcher does; on by itself for a DeepSpeed-style "
                "start (--hostfile, --include, --exclude, --num_nodes, --num_gpus)",
                None,
            ),
        ),
    ),
    (
        "multi-node",
        (
            Option(
                ("--rdzv_timeout",),
                "seconds to wait for all nodes (default 300)",
                v.POSITIVE_SECONDS,
            ),
            Option(
                ("--heartbeat_timeout",),
                "seconds before a silent node is lost (10)",
                v.POSITIVE_SECONDS,
            ),
            Option(
                ("--rdzv_last_call",),
                "elastic jobs: a round closes with MIN or more nodes after this many seconds "
                "without a new arrival (default 30)",
                v.POSITIVE_SECONDS,
            ),
            Option(
                ("--elastic_level",),
                "-1 off (default; 1 with --nnodes MIN:MAX), 0 fault tolerance (a fixed --nnodes N "
                "waits for a replacement node), 1 scale within MIN:MAX",
                v.ELASTIC_LEVEL, variables=("PADDLE_ELASTIC_LEVEL",),
            ),
            Option(
                ("--elastic_timeout",),
                "elastic jobs (Paddle's meaning): seconds a job with MIN to MAX-1 nodes waits for "
                "more before a round starts; overrides --rdzv_last_call (default: that)",
                v.NON_NEGATIVE_SECONDS, variables=("PADDLE_ELASTIC_TIMEOUT",),
            ),
            Option(
                ("--job_token",),
                "shared secret for the launchers' store",
                v.non_empty, secret=True,
            ),
            Option(
                ("--job_token_file",),
                "file holding the job token (instead of --job_token); refused when others can read"
                " or write it",
                v.non_empty,  # no field: parse.token_from_file reads the file
                secret=True,
            ),
        ),
    ),
    (
        "parameter server",
        (
            Option(
                ("--server_num",),
                "servers on this node (implies --run_mode ps)",
                v.POSITIVE_INT, variables=("PADDLE_SERVER_NUM",), implies="ps",
            ),
            Option(
                ("--worker_num", "--trainer_num"),
                "trainers on this node (implies --run_mode ps)",
                v.POSITIVE_INT, variables=("PADDLE_TRAINER_NUM",), implies="ps",
            ),
            Option(
                ("--servers",),
                "server endpoints ip:port,... (implies --run_mode ps)",
                v.one_stage_servers, variables=("PADDLE_SERVERS_ENDPOINTS",), implies="ps",
            ),
            Option(
                ("--workers", "--trainers"),
                "trainer hosts ip[:port],... (implies --run_mode ps)",
                v.one_stage_workers, variables=("PADDLE_TRAINERS_ENDPOINTS",), implies="ps",
            ),
            Option(
                ("--heter_workers",),
                "heter trainer endpoints ip:port, stages separated by ';' (implies ps-heter)",
                v.heter_stages, implies="ps-heter",
            ),
            Option(
                ("--heter_worker_num",),
                "heter trainers on this node per stage, e.g. 1;2 (implies ps-heter)",
                v.stage_counts, implies="ps-heter",
            ),
            Option(
                ("--heter_devices",),
                "device kind per heter stage: gpu, or cpu;gpu (ps-heter)",
                v.stage_devices, implies="ps-heter",
            ),
        ),
    ),
    (
        "one command for the cluster",
        (
            Option(
                ("--hostfile", "-H"),
                "start the job on every host of this file (DeepSpeed's format: 'host slots=N' a "
                "line, # comments) from this one command; slots=N: one worker on each of that "
                "host's GPUs 0..N-1 (N CPU workers on a host without GPUs); a file of one host, "
                "this machine, runs here without ssh",
                v.non_empty, scope=CLUSTER,
            ),
            Option(
                ("--include", "-i"),
                "only these hosts (and devices) of the hostfile, as in DeepSpeed: host1:0,1@host2",
                v.non_empty, scope=CLUSTER,
            ),
            Option(
                ("--exclude", "-e"),
                "all hosts (and devices) of the hostfile but these, e.g. host3@host1:2",
                v.non_empty, scope=CLUSTER,
            ),
            Option(
                ("--num_nodes",),
                "the first N hosts of the hostfile",
                v.POSITIVE_INT, scope=CLUSTER,
            ),
            Option(
                ("--num_gpus", "--num_accelerators"),
                "N workers on each host, one on each of its GPUs 0..N-1 (as DeepSpeed's), over the"
                " slots",
                v.POSITIVE_INT, scope=CLUSTER,
            ),
            Option(
                ("--slots",),
                "N workers on this host, one on each of GPUs 0..N-1 (the rest unused), or N CPU "
                "workers where no GPU is visible: a hostfile's 'host slots=N' as DeepSpeed reads "
                "it (--hostfile gives each host its own)",
                v.POSITIVE_INT,
            ),
            Option(
                ("--launcher",),
                "how the hosts' launchers are started: ssh (default with --hostfile), pdsh or "
                "slurm (srun inside an allocation)",
                v.cluster_launcher, scope=CLUSTER,
            ),
            Option(
                ("--export",),
                "NAME[,NAME]: also carry these variables of this shell to every host (besides the "
                "NAME=VALUE lines of .deepspeed_env and .paddlike_env)",
                v.variable_names, scope=CLUSTER,
            ),
            Option(
                ("--export_prefixes",),
                "PREFIX[,PREFIX]: this shell's variables whose names start so are carried to every"
                " host, as in DeepSpeed (default NCCL,PYTHON,UCX,MV2,MLFLOW); none: only --export "
                "and the env files",
                v.name_prefixes, scope=CLUSTER,
            ),
            Option(
                ("--remote_python",),
                "the Python on the hosts (default: this one's path, the same on every host)",
                v.non_empty, scope=CLUSTER,
            ),
            Option(
                ("--ssh_args",),
                "more options for ssh (and pdsh's ssh), before ours, e.g. --ssh_args='-F cfg'",
                v.non_empty, scope=CLUSTER, dash_value=True,
            ),
            Option(
                ("--ssh_port",),
                "the hosts' ssh port (ssh's Port, also for pdsh's ssh), as in DeepSpeed",
                v.PORT, scope=CLUSTER,
            ),
            Option(
                ("--force_multi",),
                "as in DeepSpeed: a hostfile whose one host is this machine is started over ssh "
                "too (without it, that job runs here); needs --hostfile",
                None, scope=CLUSTER,
            ),
            Option(
                ("--no_ssh",),
                "as in DeepSpeed: with --hostfile and --node_rank I, start only this host's share,"
                " as node I of the hostfile's hosts (the same command typed on each host; no ssh)",
                None, scope=CLUSTER,
            ),
            Option(
                ("--no_local_rank",),
                "as in DeepSpeed: a DeepSpeed-style start passes no --local_rank=N to the workers "
                "(their LOCAL_RANK variable says it)",
                None, scope=CLUSTER,
            ),
            Option(
                ("--no_ssh_check",),
                "DeepSpeed's; refused: the check of every host runs in the job's own ssh session "
                "and is what keeps a failing host from starting the others",
                None, scope=CLUSTER,
            ),
        ),
    ),
    (
        "output",
        (
            Option(
                ("--log_overwrite",),
                "truncate the log files instead of appending",
                None, variables=("PADDLE_LOG_OVERWRITE",),
            ),
            Option(
                ("--redirect_stdout_and_stderr",),
                "stdout to workerlog.N, stderr to workerlog.N.err",
                None,
            ),
            Option(
                ("--console", "--local_ranks_filter", "--local-ranks-filter"),
                "local workers shown on the console: 0 (default; every worker with torchrun's "
                "-t/-r), 0,1, all, none",
                v.console, variables=("PET_LOCAL_RANKS_FILTER",),
            ),
            Option(
                ("--kill_timeout", "--shutdown_timeout", "--shutdown-timeout"),
                "seconds from SIGTERM (or a preemption notice) to SIGKILL; after Ctrl-C's SIGINT, "
                "SIGTERM follows within 5 s (default 30)",
                v.NON_NEGATIVE_SECONDS, variables=("PET_SHUTDOWN_TIMEOUT",),
            ),
        ),
    ),
    (
        "hangs",
        (
            Option(
                ("--hang_timeout",),
                "seconds without a sign of life from any worker (log output, heartbeat, "
                "collective) before the launcher takes every rank's stack (default: off)",
                v.POSITIVE_SECONDS,
            ),
            Option(
                ("--on_hang",),
                "after a hang's stacks are written: dump (keep waiting, default) or abort (end the"
                " job, exit code 124)",
                v.ON_HANG,
            ),
            Option(
                ("--straggler_check",),
                "seconds between checks for stragglers, ranks that arrive last at most "
                "collectives (default 60, at least 1; 0: off)",
                v.straggler_period,
            ),
            Option(
                ("--straggler_threshold",),
                "a straggler's median lateness is over this share of the step time (or the "
                "time between collectives; default 0.1)",
                v.SHARE_ABOVE_ZERO,
            ),
            Option(
                ("--on_straggler",),
                "once a straggler is named: warn (default), or exclude (an elastic job: the "
                "straggling node leaves at the next round, as on SIGTERM; never node 0, nor "
                "below MIN nodes: then warned)",
                v.ON_STRAGGLER,
            ),
        ),
    ),
    (
        "restarts",
        (
            Option(
                ("--preload",),
                "MODULE[,MODULE...]: import these once in a zygote process and start every "
                "worker (first round and restarts) as a fork of it (docs/cli.md#restarts)",
                v.module_names,
            ),
        ),
    ),
    (  # issue 35: the pre-flight check (paddlike/launch/health/)
        "pre-flight check",
        (
            Option(
                ("--preflight",),
                "check every node (log disk, memory, interface, GPUs through NVML) and its "
                "links to two peers after the nodes meet, before any worker starts: off, on "
                "(default for more than one node), full (each link measured 1 s, not 0.25 s)",
                v.PREFLIGHT,
            ),
            Option(
                ("--preflight_limits",),
                "the check's thresholds as name=value pairs: bandwidth=0.5 (of the median), "
                "rtt=4 (times the median), rtt_floor_ms=1, disk_gb=1, memory_gb=0.5, "
                "quarantine_rounds=2 (elastic: rounds a node may end before it is left out), "
                "matmul=0.5 (full: a GPU's matmul rate, of the median)",
                v.preflight_limits,
            ),
        ),
    ),
    (
        "signals",
        (
            Option(
                ("--signals_to_handle", "--signals-to-handle"),
                "signals the launcher handles, as in torchrun (default "
                "SIGTERM,SIGINT,SIGHUP,SIGQUIT; under Slurm also SIGUSR1,SIGUSR2): SIGINT, "
                "SIGTERM, SIGHUP, SIGQUIT end the job, the others are passed on to every worker "
                "and the job goes on; stacks: SIGRTMIN+4 (docs/cli.md#signals)",
                v.signal_list, variables=("PET_SIGNALS_TO_HANDLE",),
            ),
        ),
    ),
    (
        "placement and GPU log",
        (
            Option(
                ("--numa_binding", "--numa-binding"),
                "bind each worker to the CPUs of its GPU's NUMA node (CPU workers: spread over the"
                " nodes), as torchrun: node, socket, exclusive, core-complex; none (default)",
                v.numa_mode, variables=("PET_NUMA_BINDING",),
            ),
            Option(
                ("--bind_core_list",),
                "DeepSpeed's: the CPUs --numa_binding may use, e.g. 0-15,32-47 (default: the "
                "launcher's own affinity)",
                v.cpu_list,
            ),
            Option(
                ("--virtual_local_rank", "--virtual-local-rank"),
                "as torchrun: every worker sees LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES set to its "
                "own GPUs",
                None, variables=("PET_VIRTUAL_LOCAL_RANK",),
            ),
            Option(
                ("--gpu_log_interval",),
                "write <log_dir>/<job id>.gpu.log (nvidia-smi's GPU use) every this many seconds; "
                "Paddle's --enable_gpu_log true is 30 (default: no GPU log)",
                v.POSITIVE_SECONDS,
                into=lambda value, source: {
                    "gpu_log_interval": value,
                    "gpu_log_from": source.label("gpu_log_interval"),
                },
            ),
        ),
    ),
)

OPTIONS = tuple(option for _, rows in GROUPS for option in rows)
BY_DEST = {option.dest: option for option in OPTIONS}
# every spelling of ours -> its dest
DEST = {flag: option.dest for option in OPTIONS for flag in option.flags}
SWITCHES = frozenset(option.dest for option in OPTIONS if option.switch)
CLUSTER_DESTS = frozenset(option.dest for option in OPTIONS if option.scope == CLUSTER)
SECRET_DESTS = frozenset(option.dest for option in OPTIONS if option.secret)
