"""The launcher's options as one immutable record, and the error bad input raises.

Every other stage reads `LaunchOptions`; nothing writes it after `parse_options`. An
option's field here (its type and default) belongs to its row of the option table
(`our_table.py`, where the option is declared; tests/launch/context/options/test_table.py
checks that each row has its field). This module imports nothing of the launcher's: most
of it imports `UsageError` from here.
"""

from __future__ import annotations

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Literal, TypeAlias

    # --console's local worker indices, or every trainer of this node
    TeeSelection: TypeAlias = Literal["all"] | frozenset[int]

PROG = "paddlike.launch"
DEFAULT_START_PORT = 6070
DEFAULT_MASTER_PORT = 6170


class UsageError(Exception):
    """Bad user input: one line naming the option and the value. Exit code 2."""

    exit_code = 2

    def __init__(self, message: str, option: str = "") -> None:
        super().__init__(message)
        self.option = option


class LaunchOptions(NamedTuple):
    """Everything the user asked for, validated. Defaults match Paddle's launcher."""

    training_script: str
    training_script_args: tuple[str, ...] = ()
    # Paddle options
    ips: tuple[str, ...] = ("127.0.0.1",)
    ips_given: bool = False  # --ips came from the user (flag or env), not the default
    gpus: tuple[str, ...] | None = None  # None: the visible GPUs (or CPU workers when none)
    cpu_only: bool = False  # --devices cpu: CPU workers even where GPUs are visible
    nproc_per_node: int | None = None  # None: one per visible GPU, or 1 on CPU
    nproc_per_node_kind: str | None = None  # torchrun's words: "gpu" | "cpu" | "auto"
    run_mode: str = "collective"  # collective | ps (inferred from PS options)
    host: str | None = None
    start_port: int = DEFAULT_START_PORT
    job_id: str | None = None
    # torchrun / OneFlow compatible
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int = DEFAULT_MASTER_PORT
    # --master_port (or PET_MASTER_PORT, PADDLIKE_MASTER_PORT) came from the user: then it
    # is the workers' MASTER_PORT on node 0, as torchrun's; see context/master.py
    master_port_given: bool = False
    module: bool = False
    no_python: bool = False
    # DeepSpeed's `--local_rank=N` after the script in each worker's argv: --pass_local_rank,
    # or a DeepSpeed-style start without --no_local_rank (`rules.passes_local_rank`)
    pass_local_rank: bool = False
    # multi-node (wired by the rendezvous)
    master: str | None = None  # "ip:port" or "etcd://host:port[,host:port]"
    rdzv_timeout: float = 300.0
    heartbeat_timeout: float = 10.0
    max_restarts: int = 0
    # elastic (--nnodes MIN:MAX, --elastic_level 0|1): `nnodes` is MAX, this is MIN;
    # None for a fixed set of nodes (plan/membership.py)
    min_nnodes: int | None = None
    rdzv_last_call: float = 30.0  # seconds without a new arrival before a round closes
    elastic_level: int = -1  # Paddle's: -1 off, 0 fault tolerance, 1 scale
    # Paddle's: seconds a job with MIN..MAX-1 nodes waits for more before a round starts;
    # sets the last call (over rdzv_last_call) when given
    elastic_timeout: float | None = None
    job_token: str | None = None
    # parameter server
    server_num: int | None = None
    worker_num: int | None = None
    servers: tuple[str, ...] | None = None  # "ip:port" entries
    workers: tuple[str, ...] | None = None  # "ip" or "ip:port" entries
    heter_workers: tuple[tuple[str, ...], ...] | None = None  # per heter stage, "ip:port"
    heter_worker_num: tuple[int, ...] | None = None  # per heter stage, one-node jobs
    heter_devices: tuple[str, ...] | None = None  # per heter stage: "cpu" | "gpu"
    # output
    log_dir: str = "log"
    log_overwrite: bool = False
    redirect_stdout_and_stderr: bool = False
    # the local workers whose output the console shows: "0", "0,2", "all" or "none"
    # (--console, --local_ranks_filter, torchrun's -t/-r: see console.py)
    console: str = "0"
    dry_run: bool = False
    kill_timeout: float = 30.0
    # hangs
    hang_timeout: float | None = None  # seconds without a sign of life from any worker
    on_hang: str = "dump"  # "dump" | "abort"
    # stragglers (issue 37): seconds between checks (0: off); lateness that counts, as a
    # share of the step (or collective) time
    straggler_check: float = 60.0
    straggler_threshold: float = 0.1
    on_straggler: str = "warn"  # "warn" | "exclude" (an elastic job's straggling node leaves)
    # --preload: modules a zygote imports once; workers start as its forks (launch/run/preload/)
    preload: tuple[str, ...] = ()
    # the pre-flight check (issue 35, launch/health/): off | on | full; None: on for jobs of
    # more than one node; its thresholds as (name, value) pairs (health.limits)
    preflight: str | None = None
    preflight_limits: tuple[tuple[str, float], ...] = ()
    # other launchers' options (see others.py)
    # where --start_port came from when given ("--start_port", "PADDLE_START_PORT",
    # "PADDLE_PORT"): one node then uses the ports from it instead of free ones
    start_port_from: str | None = None
    ports_num: int | None = None  # PaddleCloud's TRAINER_PORTS_NUM: ports opened from PADDLE_PORT
    role: str = "default"  # torchrun's --role: the workers' ROLE_NAME
    standalone: bool = False  # torchrun's --standalone: one node, its own rendezvous
    standalone_from: str = "--standalone"  # how errors name it (the flag or PET_STANDALONE)
    # one command for the cluster (launch/cluster/): start every host's launcher from here
    hostfile: str | None = None  # DeepSpeed's hostfile: "host slots=N" lines
    include: str | None = None  # DeepSpeed's host1:0,1@host2
    exclude: str | None = None
    num_nodes: int | None = None  # the hostfile's first N hosts
    num_gpus: int | None = None  # workers on each host, over the slots
    # DeepSpeed's slots=N on this host: N workers, one on each of the first N visible GPUs
    # (the rest unused), or N CPU workers where none is visible (devices.assign_devices)
    slots: int | None = None
    launcher: str | None = None  # ssh | pdsh | slurm; None: ssh when a hostfile is given
    export: tuple[str, ...] = ()  # variables of the starting shell carried to every host
    # name prefixes of the starting shell's variables carried to every host (DeepSpeed's
    # EXPORT_ENVS and its CUDA accelerator's NCCL); None: those defaults (cluster/carried.py)
    export_prefixes: tuple[str, ...] | None = None
    remote_python: str | None = None  # None: sys.executable's path on every host
    ssh_args: str | None = None  # more ssh options, split as a shell would
    ssh_port: int | None = None  # DeepSpeed's --ssh_port: ssh -p N for every host
    force_multi: bool = False  # DeepSpeed's: a one-host hostfile of this machine over ssh too
    no_ssh_check: bool = False  # DeepSpeed's: refused with the reason (cluster/without_hostfile.py)
    no_ssh: bool = False  # DeepSpeed's: refused with the reason (cluster/without_hostfile.py)
    no_local_rank: bool = False  # DeepSpeed's: a DeepSpeed-style start passes no --local_rank
    # --numa_binding (torchrun's --numa-binding; DeepSpeed's --bind_cores_to_rank is
    # "exclusive"): None (off) | "node" | "socket" | "exclusive" | "core-complex"; each
    # worker's CPUs and preferred memory node from its GPU's NUMA node (plan/binding.py)
    numa_binding: str | None = None
    bind_core_list: tuple[int, ...] | None = None  # DeepSpeed's: the only CPUs binding may use
    # torchrun's --virtual-local-rank: every worker sees LOCAL_RANK=0 and only its own GPUs
    virtual_local_rank: bool = False
    # Paddle's --enable_gpu_log / --gpu_log_interval: seconds between the GPU-usage rows of
    # <log_dir>/<job id>.gpu.log (run/gpulog.py); None: no GPU log
    gpu_log_interval: float | None = None
    # how messages name the GPU log's option: "--gpu_log_interval", "--enable_gpu_log",
    # "--gpu_log_interval (from PADDLIKE_GPU_LOG_INTERVAL)" (what the user gave)
    gpu_log_from: str = "--gpu_log_interval"
    # torchrun's -t/-r showing one stream of some workers: ((local rank or -1 for the rest,
    # streams shown: 1 stdout, 2 stderr, 3 both), ...); () when workers are shown whole
    console_streams: tuple[tuple[int, int], ...] = ()
    # the local ranks torchrun's -t/-r maps name, with the option as given (("-t", 2), ...):
    # each must be one this node runs, as --console's (checked against the plan)
    console_ranks: tuple[tuple[str, int], ...] = ()
    # torchrun's --signals_to_handle: the signals the launcher handles, as numbers; None:
    # the default (torchrun's, and SIGUSR1, SIGUSR2 under Slurm: run/signals.py)
    signals_to_handle: tuple[int, ...] | None = None
    # how the user gave each option not typed as --<dest>, as messages name it
    # ((dest, "--nnodes (from PET_NNODES)"), ("gpus", "--devices"), ...): `label`
    labels: tuple[tuple[str, str], ...] = ()

    def label(self, dest: str) -> str:
        """How a message names option `dest`: ``--node_rank``, or with its source,
        ``--rank (from PADDLE_RANK)``, as typed (``--node-rank``, ``--devices``)."""
        return dict(self.labels).get(dest, f"--{dest}")

    @property
    def is_ps(self) -> bool:
        return self.run_mode in ("ps", "ps-heter")

    @property
    def heter_stage_sizes(self) -> tuple[int, ...]:
        """Heter trainers per heter stage (stage 2 first); () outside ps-heter."""
        if self.heter_workers is not None:
            return tuple(len(s) for s in self.heter_workers)
        return self.heter_worker_num or ()

    @property
    def tee_indices(self) -> TeeSelection:
        """--console as local worker indices: "0" -> {0}, "0,2" -> {0, 2}, "all", "none" -> {}."""
        if self.console == "all":
            return "all"
        if self.console == "none":
            return frozenset()
        return frozenset(int(t) for t in self.console.split(","))


def elastic_text(o: LaunchOptions) -> str:
    """The elastic node range as the user reads it: "2:4", or "3" for --elastic_level 0."""
    if o.min_nnodes is None or o.min_nnodes == o.nnodes:
        return str(o.nnodes)
    return f"{o.min_nnodes}:{o.nnodes}"


# Where a value may come from, highest first (`sources.PRECEDENCE` is the table):
FLAG = "flag"  # our option on the command line: --master h:p (an alias, a dashed spelling)
THEIR_FLAG = "their flag"  # another launcher's option, translated: --rdzv_endpoint h:p
OUR_VARIABLE = "our variable"  # PADDLIKE_MASTER
# another launcher's option from its variable, translated: PET_RDZV_ENDPOINT, fleet's
# PADDLE_ELASTIC_SERVER
THEIR_OPTION_VARIABLE = "their option's variable"
THEIR_VARIABLE = "their variable"  # the same option, another launcher's name: PET_NNODES


class Source(NamedTuple):
    """Where an option's value came from: one of the kinds above, and the flag or the
    variable by the name the user gave it."""

    kind: str
    # as the user gave it: "--start_port", "--start-port", "--devices" (our flag as typed),
    # "-t", "PADDLIKE_START_PORT", "PET_RDZV_ENDPOINT"
    name: str
    # a variable's option where it is not --<dest>: PADDLE_DEVICES is --devices
    # (`sources.candidates`); "" otherwise
    option: str = ""

    def label(self, dest: str) -> str:
        """How a message names the option, as the user gave it: ``--master``,
        ``--max-restarts``, ``--master (from --rdzv_endpoint)``, ``--devices (from
        PADDLE_DEVICES)``."""
        if self.kind == FLAG:
            return self.name
        return f"{self.option or '--' + dest} (from {self.name})"
