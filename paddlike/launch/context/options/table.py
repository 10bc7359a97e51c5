"""Every option of ours as a row of one table: its spellings and its --help text, in
--help's groups (the common options first). The parser (`parser`), the fast parse and
docs/cli.md's tables (`tests/test_docs_cli.py`) are read from it.
"""

from __future__ import annotations

COMMON = "common options"  # --help's first group (--version is added to it)

# --help's groups: (title, ((spellings, help), ...)); an option's dest is its first long
# spelling. Switches are `values.FLAGS`; every other option takes one value.
HELP_GROUPS: tuple[tuple[str, tuple[tuple[tuple[str, ...], str], ...]], ...] = (
    (
        COMMON,
        (
            (
                ("--nproc_per_node", "--nproc-per-node"),
                "workers per node: a number (the GPUs split into that many slices), or gpu, cpu, "
                "auto as in torchrun (default: one per visible GPU, or 1)",
            ),
            (
                ("--gpus", "--devices", "--selected_gpus"),
                "physical GPU ids for this node's workers, e.g. 0,1 (entries of "
                "CUDA_VISIBLE_DEVICES when set), or cpu; default: every visible GPU, or CPU "
                "workers when none is visible",
            ),
            (
                ("--nnodes", "--np"),
                "number of nodes (must agree with --ips), or MIN:MAX for an elastic job",
            ),
            (
                ("--ips",),
                "comma-separated node IPs or hostnames (default 127.0.0.1)",
            ),
            (
                ("--master",),
                "ip:port or etcd://host:port[,host:port] for rendezvous",
            ),
            (
                ("--log_dir", "--log-dir", "--logdir"),
                "log directory (default log)",
            ),
            (
                ("--max_restarts", "--max-restarts", "--max_restart"),
                "restart rounds after a failure (default 0)",
            ),
            (
                ("--dry_run",),
                "print every process, its command and environment; start nothing",
            ),
        ),
    ),
    (
        "Paddle options",
        (
            (
                ("--run_mode",),
                "collective (default), ps or ps-heter",
            ),
            (
                ("--host", "--local_addr", "--local-addr"),
                "this node's address, when it cannot be matched (or POD_IP)",
            ),
            (
                ("--start_port",),
                "first port on multi-node jobs (default 6070)",
            ),
            (
                ("--job_id", "--rdzv_id", "--rdzv-id"),
                "job name (default: generated from the time)",
            ),
        ),
    ),
    (
        "torchrun/OneFlow compatible",
        (
            (
                ("--node_rank", "--node-rank", "--rank"),
                "this node's index in --ips (ignored by elastic jobs)",
            ),
            (
                ("--master_addr", "--master-addr"),
                "address where the launchers meet (default: node 0)",
            ),
            (
                ("--master_port", "--master-port"),
                "the workers' MASTER_PORT on node 0, as in torchrun; the launchers then meet at "
                "the next port, unless --master says where (default: launchers at 6170, the "
                "workers' port picked free)",
            ),
            (
                ("-m", "--module"),
                "run the script as a module",
            ),
            (
                ("--no_python", "--no-python"),
                "run training_script as a command, without the Python interpreter",
            ),
        ),
    ),
    (
        "multi-node",
        (
            (
                ("--rdzv_timeout",),
                "seconds to wait for all nodes (default 300)",
            ),
            (
                ("--heartbeat_timeout",),
                "seconds before a silent node is lost (10)",
            ),
            (
                ("--rdzv_last_call",),
                "elastic jobs: a round closes with MIN or more nodes after this many seconds "
                "without a new arrival (default 30)",
            ),
            (
                ("--elastic_level",),
                "-1 off (default; 1 with --nnodes MIN:MAX), 0 fault tolerance (a fixed --nnodes N"
                " waits for a replacement node), 1 scale within MIN:MAX",
            ),
            (
                ("--elastic_timeout",),
                "elastic jobs (Paddle's meaning): seconds a job with MIN to MAX-1 nodes waits for"
                " more before a round starts; overrides --rdzv_last_call (default: that)",
            ),
            (
                ("--job_token",),
                "shared secret for the launchers' store",
            ),
            (
                ("--job_token_file",),
                "file holding the job token (instead of --job_token); refused when others can "
                "read or write it",
            ),
        ),
    ),
    (
        "parameter server",
        (
            (
                ("--server_num",),
                "servers on this node (implies --run_mode ps)",
            ),
            (
                ("--worker_num", "--trainer_num"),
                "trainers on this node (implies --run_mode ps)",
            ),
            (
                ("--servers",),
                "server endpoints ip:port,... (implies --run_mode ps)",
            ),
            (
                ("--workers", "--trainers"),
                "trainer hosts ip[:port],... (implies --run_mode ps)",
            ),
            (
                ("--heter_workers",),
                "heter trainer endpoints ip:port, stages separated by ';' (implies ps-heter)",
            ),
            (
                ("--heter_worker_num",),
                "heter trainers on this node per stage, e.g. 1;2 (implies ps-heter)",
            ),
            (
                ("--heter_devices",),
                "device kind per heter stage: gpu, or cpu;gpu (ps-heter)",
            ),
        ),
    ),
    (
        "one command for the cluster",
        (
            (
                ("--hostfile", "-H"),
                "start the job on every host of this file (DeepSpeed's format: 'host slots=N' "
                "a line, # comments) from this one command; slots=N: one worker on each of "
                "that host's GPUs 0..N-1 (N CPU workers on a host without GPUs); a file of "
                "one host, this machine, runs here without ssh",
            ),
            (
                ("--include", "-i"),
                "only these hosts (and devices) of the hostfile, as in DeepSpeed: "
                "host1:0,1@host2",
            ),
            (
                ("--exclude", "-e"),
                "all hosts (and devices) of the hostfile but these, e.g. host3@host1:2",
            ),
            (
                ("--num_nodes",),
                "the first N hosts of the hostfile",
            ),
            (
                ("--num_gpus", "--num_accelerators"),
                "N workers on each host, one on each of its GPUs 0..N-1 (as DeepSpeed's), over "
                "the slots",
            ),
            (
                ("--slots",),
                "N workers on this host, one on each of GPUs 0..N-1 (the rest unused), or N "
                "CPU workers where no GPU is visible: a hostfile's 'host slots=N' as DeepSpeed "
                "reads it (--hostfile gives each host its own)",
            ),
            (
                ("--launcher",),
                "how the hosts' launchers are started: ssh (default with --hostfile), pdsh or "
                "slurm (srun inside an allocation)",
            ),
            (
                ("--export",),
                "NAME[,NAME]: also carry these variables of this shell to every host (besides "
                "the NAME=VALUE lines of .deepspeed_env and .paddlike_env)",
            ),
            (
                ("--export_prefixes",),
                "PREFIX[,PREFIX]: this shell's variables whose names start so are carried to "
                "every host, as in DeepSpeed (default NCCL,PYTHON,UCX,MV2,MLFLOW); none: only "
                "--export and the env files",
            ),
            (
                ("--remote_python",),
                "the Python on the hosts (default: this one's path, the same on every host)",
            ),
            (
                ("--ssh_args",),
                "more options for ssh (and pdsh's ssh), before ours, e.g. --ssh_args='-F cfg'",
            ),
            (
                ("--ssh_port",),
                "the hosts' ssh port (ssh's Port, also for pdsh's ssh), as in DeepSpeed",
            ),
            (
                ("--force_multi",),
                "as in DeepSpeed: a hostfile whose one host is this machine is started over "
                "ssh too (without it, that job runs here); needs --hostfile",
            ),
            (
                ("--no_ssh",),
                "as in DeepSpeed: with --hostfile and --node_rank I, start only this host's "
                "share, as node I of the hostfile's hosts (the same command typed on each "
                "host; no ssh)",
            ),
            (
                ("--no_ssh_check",),
                "DeepSpeed's; refused: the check of every host runs in the job's own ssh "
                "session and is what keeps a failing host from starting the others",
            ),
        ),
    ),
    (
        "output",
        (
            (
                ("--log_overwrite",),
                "truncate the log files instead of appending",
            ),
            (
                ("--redirect_stdout_and_stderr",),
                "stdout to workerlog.N, stderr to workerlog.N.err",
            ),
            (
                ("--console", "--local_ranks_filter", "--local-ranks-filter"),
                "local workers shown on the console: 0 (default; every worker with torchrun's "
                "-t/-r), 0,1, all, none",
            ),
            (
                ("--kill_timeout", "--shutdown_timeout", "--shutdown-timeout"),
                "seconds from SIGTERM (or a preemption notice) to SIGKILL; after Ctrl-C's "
                "SIGINT, SIGTERM follows within 5 s (default 30)",
            ),
        ),
    ),
    (
        "hangs",
        (
            (
                ("--hang_timeout",),
                "seconds without a sign of life from any worker (log output, heartbeat, "
                "collective) before the launcher takes every rank's stack (default: off)",
            ),
            (
                ("--on_hang",),
                "after a hang's stacks are written: dump (keep waiting, default) or abort (end "
                "the job, exit code 124)",
            ),
        ),
    ),
    (  # issue 35: the pre-flight check (paddlike/launch/health/)
        "pre-flight check",
        (
            (
                ("--preflight",),
                "check every node (log disk, memory, interface, GPUs through NVML) and its "
                "links to two peers after the nodes meet, before any worker starts: off, on "
                "(default for more than one node), full (each link measured 1 s, not 0.25 s)",
            ),
            (
                ("--preflight_limits",),
                "the check's thresholds as name=value pairs: bandwidth=0.5 (of the median), "
                "rtt=4 (times the median), rtt_floor_ms=1, disk_gb=1, memory_gb=0.5, "
                "quarantine_rounds=2 (elastic: rounds a node may end before it is left out)",
            ),
        ),
    ),
    (
        "signals",
        (
            (
                ("--signals_to_handle", "--signals-to-handle"),
                "signals the launcher handles, as in torchrun (default SIGTERM,SIGINT,SIGHUP,"
                "SIGQUIT; under Slurm also SIGUSR1,SIGUSR2): SIGINT, SIGTERM, SIGHUP, SIGQUIT "
                "end the job, the others are passed on to every worker and the job goes on; "
                "stacks: SIGRTMIN+4 (docs/cli.md#signals)",
            ),
        ),
    ),
    (
        "placement and GPU log",
        (
            (
                ("--numa_binding", "--numa-binding"),
                "bind each worker to the CPUs of its GPU's NUMA node (CPU workers: spread over "
                "the nodes), as torchrun: node, socket, exclusive, core-complex; none (default)",
            ),
            (
                ("--bind_core_list",),
                "DeepSpeed's: the CPUs --numa_binding may use, e.g. 0-15,32-47 (default: "
                "the launcher's own affinity)",
            ),
            (
                ("--virtual_local_rank", "--virtual-local-rank"),
                "as torchrun: every worker sees LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES set to "
                "its own GPUs",
            ),
            (
                ("--gpu_log_interval",),
                "write <log_dir>/<job id>.gpu.log (nvidia-smi's GPU use) every this many "
                "seconds; Paddle's --enable_gpu_log true is 30 (default: no GPU log)",
            ),
        ),
    ),
)

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


# every spelling of ours -> its dest (argparse's: the first long spelling)
DEST = {s: dest_of(sp) for _, rows in HELP_GROUPS for sp, _ in rows for s in sp}
