"""The options of ours, as one table: what --help lists, the fast parse, the split at the
training script.

`HELP_GROUPS` is the table. A launch reads its options with `parse_ours` (no argparse: its
import and the building of the parser were an eighth of a launch's start-up); argparse is
built from the same table only for --help and for anything the fast parse does not take
as plainly correct, so that every error and the help text are argparse's own. Values come
back as text: `values` checks them, `sources` decides which one counts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from paddlike.commands import command_name
from paddlike.contract import OPTION_ENV_PREFIX
from paddlike.launch.context.options.others import (
    BOOL_TRUE,
    COMPAT_OPTIONS,
    COMPAT_VALUED,
    PADDLE_BOOL,
    normalize_spelling,
)
from paddlike.launch.context.options.record import UsageError
from paddlike.launch.context.options.values import FLAGS

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import argparse

# --help's groups: (title, ((spellings, help), ...)); an option's dest is its first long
# spelling. Switches are `values.FLAGS`; every other option takes one value.
HELP_GROUPS: tuple[tuple[str, tuple[tuple[tuple[str, ...], str], ...]], ...] = (
    (
        "Paddle options",
        (
            (
                ("--ips",),
                "comma-separated node IPs or hostnames (default 127.0.0.1)",
            ),
            (
                ("--gpus", "--devices", "--selected_gpus"),
                "physical GPU ids for this node's workers, e.g. 0,1 (entries of "
                "CUDA_VISIBLE_DEVICES when set), or cpu; default: every visible GPU, or CPU "
                "workers when none is visible",
            ),
            (
                ("--nproc_per_node", "--nproc-per-node"),
                "workers per node: a number (the GPUs split into that many slices), or gpu, cpu, "
                "auto as in torchrun (default: one per visible GPU, or 1)",
            ),
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
                ("--nnodes", "--np"),
                "number of nodes (must agree with --ips), or MIN:MAX for an elastic job",
            ),
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
                ("--master",),
                "ip:port or etcd://host:port[,host:port] for rendezvous",
            ),
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
                ("--max_restarts", "--max-restarts", "--max_restart"),
                "restart rounds after a failure (default 0)",
            ),
            (
                ("--job_token",),
                "shared secret for the launchers' store",
            ),
            (
                ("--job_token_file",),
                "file holding the job token (instead of --job_token)",
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
                ("--log_dir", "--log-dir", "--logdir"),
                "log directory (default log)",
            ),
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
                ("--dry_run",),
                "print every process, its command and environment; start nothing",
            ),
            (
                ("--kill_timeout", "--shutdown_timeout", "--shutdown-timeout"),
                "seconds between SIGTERM and SIGKILL (default 5)",
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


def _dest(spellings: tuple[str, ...]) -> str:
    return next(s for s in spellings if s.startswith("--"))[2:]


# every spelling of ours -> its dest (argparse's: the first long spelling)
DEST = {s: _dest(sp) for _, rows in HELP_GROUPS for sp, _ in rows for s in sp}
_SWITCHES = frozenset(s for s, dest in DEST.items() if dest in FLAGS)
_KNOWN = frozenset(DEST) | {"-h", "--help"} | {"--" + name for name in COMPAT_OPTIONS}
_TAKES_VALUE = (
    frozenset(s for s in DEST if s not in _SWITCHES)
    | {"--" + name for name in COMPAT_VALUED}
    | {"-r", "-t"}
)


# options whose value is itself options of another tool, so may start with "-":
# ``--ssh_args "-i key"`` (argparse would take "-i" for --include)
DASH_VALUES = frozenset({"ssh_args"})


def parse_ours(ours: Sequence[str]) -> dict[str, object]:
    """Our options (`split_argv`'s part, the other launchers' taken out) -> {dest: text,
    or True for a switch}; the last of a repeated option wins, as in argparse.

    Only plainly correct arguments are read here: an option of ours with a value that
    does not start with "-" (any value for `DASH_VALUES`; or ``--name=value``), or a
    switch. Anything else (--help, an unknown option, a missing value, ``--switch=1``) goes
    to argparse, which prints the help or raises the `UsageError` it always did.
    """
    given: dict[str, object] = {}
    i, n = 0, len(ours)
    while i < n:
        arg = ours[i]
        if arg in _SWITCHES:
            given[DEST[arg]] = True
            i += 1
        elif arg in DEST and i + 1 < n and (
            not ours[i + 1].startswith("-") or DEST[arg] in DASH_VALUES
        ):
            given[DEST[arg]] = ours[i + 1]
            i += 2
        else:
            name, eq, text = arg.partition("=")
            if not (eq and name.startswith("--") and name in DEST and name not in _SWITCHES):
                return vars(build_parser().parse_args(ours))
            given[DEST[name]] = text
            i += 1
    return given


def build_parser() -> argparse.ArgumentParser:
    """argparse from `HELP_GROUPS`: --help's text, and the parse of what `parse_ours` does
    not take; its errors become `UsageError` (one line, no usage dump)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            # argparse's wording, reshaped to ours: "--ips: expected one argument".
            if message.startswith("unrecognized arguments: "):
                unknown = message.split(": ", 1)[1]
                raise UsageError(f"{unknown}: unknown option (see --help)", unknown)
            if message.startswith("argument "):
                message = message[len("argument ") :]
            raise UsageError(message)

    def formatter(prog: str) -> argparse.HelpFormatter:
        # An explicit width keeps argparse from importing shutil (and with it bz2,
        # lzma, zlib): ~5 ms of every launch, spent only to format --help.
        try:
            columns = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size().columns
        except (ValueError, OSError):
            columns = 80
        return argparse.HelpFormatter(prog, width=max(columns - 2, 40))

    p = Parser(
        prog=command_name(sys.argv[0], "paddlike.launch"),  # what the user typed
        formatter_class=formatter,
        description=(
            "Start a distributed training job: one worker per device (or "
            "--nproc_per_node CPU workers) on each node in --ips. Every option can "
            f"also be set from the environment as {OPTION_ENV_PREFIX}<OPTION>, e.g. "
            f"{OPTION_ENV_PREFIX}LOG_DIR; a flag on the command line wins. Every option "
            "may be spelled with - in place of _, as torchrun spells them; torchrun's "
            "PET_<OPTION> variables are read too, below these (docs/migrating.md). An "
            "unambiguous prefix of an option is that option, as argparse takes it for torchrun."
        ),
        allow_abbrev=False,
    )
    for title, rows in HELP_GROUPS:
        g = p.add_argument_group(title)
        for spellings, text in rows:
            if _dest(spellings) in FLAGS:
                g.add_argument(*spellings, action="store_true", default=None, help=text)
            else:
                g.add_argument(*spellings, dest=_dest(spellings), help=text)
    g = p.add_argument_group("torchrun's options")
    for spellings, text in TORCHRUN_HELP:
        name = "torchrun_" + _dest(spellings)
        if spellings == ("--standalone",):
            g.add_argument(*spellings, dest=name, action="store_true", help=text)
        else:
            g.add_argument(*spellings, dest=name, metavar=_dest(spellings).upper(), help=text)
    # Parsed by `split_argv`, never by argparse; declared here for --help.
    p.add_argument("training_script", nargs="?", help="the script (or module, or command) to run")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


# the long options a prefix may stand for (underscore spellings: dashes are normalized)
_LONG = sorted(s for s in _KNOWN if s.startswith("--") and "-" not in s[2:])


def _unabbreviated(arg: str) -> str:
    """An unambiguous prefix of a long option, as argparse accepts it for torchrun
    (``--nproc_per_nod 2``, ``--rdzv-endp=h:p``), as the whole option; an exact name or
    anything else is returned as it is. A prefix of two options is a `UsageError`."""
    name, sep, value = arg.partition("=")
    if not name.startswith("--") or name in _KNOWN or len(name) < 3:
        return arg
    under = "--" + name[2:].replace("-", "_")
    matches = [s for s in _LONG if s.startswith(under)]
    options = {DEST.get(s, s) for s in matches}  # aliases of one option are one option
    if len(options) > 1:
        raise UsageError(f"{name}: ambiguous abbreviation, could be {', '.join(matches)}", name)
    if not matches:
        return arg
    return "--" + DEST[matches[0]] + sep + value if matches[0] in DEST else matches[0] + sep + value


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split at the training script: launcher options before it, the script's argv after.

    argparse alone would still look at the script's arguments for option prefixes;
    splitting first guarantees they are passed on untouched. The launcher's part comes
    back with torchrun's dash spellings rewritten to ours (`normalize_spelling`),
    unambiguous abbreviations written out (`_unabbreviated`), and Paddle's
    ``--log_overwrite True|False`` (a value, where ours is a switch) folded.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = _unabbreviated(normalize_spelling(argv[i], _KNOWN))
        if arg == "--":
            return out, list(argv[i + 1 :])
        if not arg.startswith("-") or arg == "-":
            return out, list(argv[i:])
        name, sep, value = arg.partition("=")
        if name == "--log_overwrite":
            if not sep and i + 1 < len(argv) and argv[i + 1].lower() in PADDLE_BOOL:
                sep, value = "=", argv[i + 1]
                i += 1
            if sep:
                if value.lower() not in PADDLE_BOOL:
                    raise UsageError(
                        f"--log_overwrite: expected no value, or true/false as in Paddle's "
                        f"launcher, got {value!r}",
                        "--log_overwrite",
                    )
                if value.lower() in BOOL_TRUE:
                    out.append(name)
                i += 1
                continue
        out.append(arg)
        if arg in _TAKES_VALUE:
            if i + 1 < len(argv):
                out.append(argv[i + 1])
            i += 2
        else:
            i += 1
    return out, []
