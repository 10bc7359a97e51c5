"""The launcher's command line: parsed and validated once, into one immutable record.

Every option is also read from the environment as ``PADDLIKE_<OPTION_UPPER>``
(``--log_dir`` <-> ``PADDLIKE_LOG_DIR``); a flag given on the command line wins, and
torchrun's ``PET_<OPTION>`` (Kubeflow's PyTorchJob sets them) comes last. Every long
option may be spelled with ``-`` for ``_``; torchrun's, Paddle's and OneFlow's options
that --help does not list are translated, accepted or refused with a reason in the
section "other launchers' options" (docs/migrating.md has the table).
The training script and everything after it are passed on verbatim: parsing stops
at the first positional argument, so a script's own ``--nproc_per_node`` is never
read as ours.

Bad input raises `UsageError`, whose text is one line naming the option and the
value, e.g. ``--nproc_per_node: expected a positive integer, got 'x'``; the entry
point prints it after ``paddlike.launch: error:`` and exits 2.

argparse is imported inside `parse_options` so that importing the package stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from paddlike.contract import OPTION_ENV_PREFIX
from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import argparse
    from typing import Literal, TypeAlias

    # --tee's local worker indices, or every trainer of this node
    TeeSelection: TypeAlias = Literal["all"] | frozenset[int]

PROG = "paddlike.launch"
RUN_MODES = ("collective", "ps", "ps-heter")
PS_OPTIONS = ("server_num", "worker_num", "servers", "workers")
HETER_OPTIONS = ("heter_workers", "heter_worker_num", "heter_devices")
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
    # multi-node (wired by the rendezvous)
    master: str | None = None  # "ip:port" or "etcd://host:port[,host:port]"
    rdzv_timeout: float = 300.0
    heartbeat_timeout: float = 10.0
    max_restarts: int = 0
    # elastic (--nnodes MIN:MAX, --elastic_level 0|1): `nnodes` is MAX, this is MIN;
    # None for a fixed set of nodes (plan/elastic.py)
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
    tee: str = "0"  # "0", "0,2", "all" or "none"
    dry_run: bool = False
    kill_timeout: float = 5.0
    # hangs
    hang_timeout: float | None = None  # seconds without a sign of life from any worker
    on_hang: str = "dump"  # "dump" | "abort"
    # other launchers' options (see "other launchers' options" below)
    # where --start_port came from when given ("--start_port", "PADDLE_START_PORT",
    # "PADDLE_PORT"): one node then uses the ports from it instead of free ones
    start_port_from: str | None = None
    ports_num: int | None = None  # PaddleCloud's TRAINER_PORTS_NUM: ports opened from PADDLE_PORT
    role: str = "default"  # torchrun's --role: the workers' ROLE_NAME
    standalone: bool = False  # torchrun's --standalone: one node, its own rendezvous

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
        """--tee as local worker indices: "0" -> {0}, "0,2" -> {0, 2}, "all", "none" -> {}."""
        if self.tee == "all":
            return "all"
        if self.tee == "none":
            return frozenset()
        return frozenset(int(t) for t in self.tee.split(","))


# --- value checkers: str -> value, or a message saying what was expected ------------


class _Bad(ValueError):
    """Raised by a checker; the caller adds the option name and the value."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _Bad("expected a positive integer") from None
    if value < 1:
        raise _Bad("expected a positive integer")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _Bad("expected an integer >= 0") from None
    if value < 0:
        raise _Bad("expected an integer >= 0")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _Bad("expected a port number 1-65535") from None
    if not 1 <= value <= 65535:
        raise _Bad("expected a port number 1-65535")
    return value


def _nnodes(text: str) -> int | tuple[int, int]:
    """A node count, or torchrun's / Paddle's MIN:MAX: (MIN, MAX) for an elastic range,
    the count for N:N (a fixed job)."""
    expected = "expected a positive integer, or MIN:MAX with 1 <= MIN <= MAX (an elastic range)"
    low, sep, high = text.partition(":")
    if not sep:
        try:
            return _positive_int(text)
        except _Bad:
            raise _Bad(expected) from None
    try:
        lo, hi = _positive_int(low), _positive_int(high)
    except _Bad:
        raise _Bad(expected) from None
    if lo > hi:
        raise _Bad(f"MIN ({lo}) is above MAX ({hi}); expected MIN:MAX with MIN <= MAX")
    return lo if lo == hi else (lo, hi)


ELASTIC_LEVELS = (-1, 0, 1)


def _elastic_level(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value not in ELASTIC_LEVELS:
        raise _Bad("expected -1 (off), 0 (fault tolerance) or 1 (scale)")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _Bad("expected a number of seconds > 0") from None
    if not value > 0 or value == float("inf"):
        raise _Bad("expected a number of seconds > 0")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _Bad("expected a number of seconds >= 0") from None
    if not value >= 0 or value == float("inf"):
        raise _Bad("expected a number of seconds >= 0")
    return value


def _name_list(text: str) -> tuple[str, ...]:
    items = tuple(t.strip() for t in text.split(","))
    if not text.strip() or any(not t or " " in t for t in items):
        raise _Bad("expected a comma-separated list of hosts, e.g. 192.168.0.1,192.168.0.2")
    return items


NPROC_KINDS = ("gpu", "cpu", "auto")


def _nproc(text: str) -> int | str:
    """A positive count, or torchrun's gpu | cpu | auto."""
    word = text.strip().lower()
    if word in NPROC_KINDS:
        return word
    try:
        return _positive_int(text)
    except _Bad:
        raise _Bad("expected a positive integer") from None  # + _HINTS' words


def _gpu_list(text: str) -> tuple[str, ...] | str:
    if text.strip().lower() == "cpu":
        return "cpu"
    items = tuple(t.strip() for t in text.split(","))
    if not text.strip() or any(not t.isdigit() for t in items):
        raise _Bad("expected a comma-separated list of GPU ids, e.g. 0,1, or cpu")
    if len(set(items)) != len(items):
        raise _Bad("expected each GPU id once")
    return tuple(str(int(t)) for t in items)


def _host_port(text: str, *, port_required: bool) -> tuple[str, int | None]:
    host, sep, port = text.rpartition(":")
    if not sep:
        if port_required:
            raise _Bad("expected ip:port entries, e.g. 192.168.0.1:6170,192.168.0.2:6170")
        host, port = text, ""
    if not host or " " in host:
        raise _Bad("expected ip[:port] entries, e.g. 192.168.0.1:6170")
    if not port:
        return host, None
    return host, _port(port)


def _servers(text: str) -> tuple[str, ...]:
    items = tuple(t.strip() for t in text.split(","))
    if not text.strip():
        raise _Bad("expected ip:port entries, e.g. 192.168.0.1:6170,192.168.0.2:6170")
    for item in items:
        _host_port(item, port_required=True)
    if len(set(items)) != len(items):
        raise _Bad("expected each server endpoint once")
    return items


def _workers(text: str) -> tuple[str, ...]:
    items = tuple(t.strip() for t in text.split(","))
    if not text.strip():
        raise _Bad("expected ip[:port] entries, e.g. 192.168.0.1,192.168.0.1,192.168.0.2")
    for item in items:
        _host_port(item, port_required=False)
    return items


def _on_hang(text: str) -> str:
    if text not in ("dump", "abort"):
        raise _Bad("expected dump or abort")
    return text


def _one_stage(text: str) -> str:
    """--servers/--workers may use Paddle's stage separator, but name one stage only."""
    if ";" in text:
        n = len(text.split(";"))
        raise _Bad(
            f"lists {n} stages (separated by ';'); servers and CPU trainers are one stage "
            "(stage 1): list the heter stages in --heter_workers"
        )
    return text


def _heter_stages(text: str) -> tuple[tuple[str, ...], ...]:
    """Heter stages, e.g. "a:1,b:1;c:2": separated by ';', endpoints within one by ','."""
    stages = tuple(_servers(part) for part in text.split(";"))
    flat = [ep for s in stages for ep in s]
    if len(set(flat)) != len(flat):
        raise _Bad("expected each heter endpoint once")
    return stages


def _stage_counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(_positive_int(t.strip()) for t in text.split(";"))
    except _Bad:
        raise _Bad(
            "expected a positive count per heter stage, separated by ';', e.g. 1;2"
        ) from None


HETER_DEVICES = ("cpu", "gpu")


def _stage_devices(text: str) -> tuple[str, ...]:
    kinds = tuple(t.strip().lower() for t in text.split(";"))
    if any(k not in HETER_DEVICES for k in kinds):
        raise _Bad("expected one device kind per heter stage, cpu or gpu, e.g. gpu or cpu;gpu")
    return kinds


def _run_mode(text: str) -> str:
    if text not in RUN_MODES:
        raise _Bad("expected one of " + ", ".join(RUN_MODES))
    return text


def _tee(text: str) -> str:
    text = text.strip().lower()
    if text in ("all", "none"):
        return text
    items = [t.strip() for t in text.split(",")]
    if not text or not all(t.isdigit() for t in items):
        raise _Bad("expected 'all', 'none' or a comma-separated list of local worker indices")
    return ",".join(str(int(t)) for t in items)


def _master(text: str) -> str:
    if text.startswith("etcd://"):
        rest = text[len("etcd://") :]
        if not rest:
            raise _Bad("expected etcd://host:port[,host:port]")
        for item in rest.split(","):
            _host_port(item, port_required=True)
        return text
    _host_port(text, port_required=True)
    return text


def _text(text: str) -> str:
    if not text:
        raise _Bad("expected a non-empty value")
    return text


def _token_file(path: str) -> str:
    """The job token read from a file (kept out of `ps` output and shell history)."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise _Bad(f"cannot read the token file ({exc.strerror})") from None
    if not token:
        raise _Bad("the token file is empty")
    return token


_FLAG_TRUE = {"1", "true", "yes", "on"}
_FLAG_FALSE = {"0", "false", "no", "off", ""}


# --- other launchers' options ------------------------------------------------------------
#
# Other launchers' command lines: torchrun's, Paddle's two and OneFlow's options.
#
# `--help` lists paddlike's options and their aliases (argparse parses those). The
# options here are the rest of what the other launchers accept: each is translated to
# ours (``--rdzv_endpoint h:p`` -> ``--master h:p``), accepted where its value is what
# paddlike does anyway (``--start_method spawn``), or refused with one line saying why
# (exit 2) — never ignored. docs/migrating.md has the whole table.
#
# Spellings: torchrun writes ``--nproc-per-node``; every long option of ours and of this
# table is accepted with ``-`` or ``_`` (`normalize`). torchrun also reads each option
# from ``PET_<DEST>`` (its dest upper-cased: ``--nproc-per-node`` -> ``PET_NPROC_PER_NODE``);
# `PET_OF` and `pet_values` do the same, below the flag and ``PADDLIKE_<OPTION>``.

PET_PREFIX = "PET_"

# our dest -> the PET_ variable torchrun reads for the same option
PET_OF = {
    "nnodes": "PET_NNODES",
    "nproc_per_node": "PET_NPROC_PER_NODE",
    "node_rank": "PET_NODE_RANK",
    "master_addr": "PET_MASTER_ADDR",
    "master_port": "PET_MASTER_PORT",
    "max_restarts": "PET_MAX_RESTARTS",
    "job_id": "PET_RDZV_ID",
    "log_dir": "PET_LOG_DIR",
    "host": "PET_LOCAL_ADDR",
    "tee": "PET_LOCAL_RANKS_FILTER",
    "kill_timeout": "PET_SHUTDOWN_TIMEOUT",
    "module": "PET_MODULE",
    "no_python": "PET_NO_PYTHON",
}

_SCALE_BY_NODES = (
    "an elastic job scales by starting or stopping nodes within --nnodes MIN:MAX "
    "(docs/migrating.md#elastic-jobs)"
)
_AUTO_PARALLEL = "Paddle's auto-parallel rank mapping and tuner are not part of paddlike"

# Options refused whatever their value: name -> why (the user reads "--name: why").
REFUSED_OPTIONS = {
    # torchrun
    "logs_specs": "paddlike's log layout is fixed (workerlog.N in --log_dir, see docs/logdir.md)",
    "numa_binding": "no NUMA binding; wrap the script (numactl ... with --no_python) instead",
    "signals_to_handle": "the launcher always handles SIGINT, SIGTERM and SIGHUP (docs/cli.md)",
    "duplicate_stdout_filters": "every worker's output is in workerlog.N; filter that file",
    "duplicate_stderr_filters": "every worker's output is in workerlog.N; filter that file",
    "virtual_local_rank": "each worker sees its own LOCAL_RANK and FLAGS_selected_gpus",
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
}

_BOOL_TRUE = {"1", "true", "t", "yes", "y", "on"}
_BOOL_FALSE = {"0", "false", "f", "no", "n", "off"}

# Options accepted only with the values that describe what paddlike does anyway:
# name -> (accepted values, lower case; why others are refused).
ONLY_VALUES = {
    "start_method": (
        {"spawn"},
        "workers are always fresh processes (spawn); fork and forkserver are not available",
    ),
    "event_log_handler": ({"null"}, "no event handlers; the job's events are in summary.json"),
    "sort_ip": (_BOOL_FALSE, "node order is the --ips order (or --node_rank); sort --ips yourself"),
    "enable_gpu_log": (_BOOL_FALSE, "paddlike does not record GPU logs; use nvidia-smi or DCGM"),
    "auto_cluster_config": (_BOOL_FALSE, _AUTO_PARALLEL),
    "with_gloo": (
        {"1"},
        "parameter-server workers always get Paddle fleet's gloo (PADDLE_WITH_GLOO=1)",
    ),
    "log_level": (
        {"info"},
        "the launcher prints one level of messages; --dry_run shows every "
        "process's command and environment",
    ),
    "legacy": (_BOOL_TRUE | _BOOL_FALSE, "expected a boolean"),  # both launchers' options are ours
}

# Options whose values become ours (see `translate_compat`); the rest of the table.
COMPAT_TRANSLATED = (
    "rdzv_backend", "rdzv_endpoint", "rdzv_conf", "monitor_interval", "role", "redirects",
    "torch_tee", "backend", "elastic_server",
)  # fmt: skip
COMPAT_SWITCHES = ("standalone", "run_path", "use_env")  # no value

# torchrun's options among the above: read from PET_<NAME> as torchrun does.
TORCHRUN_OPTIONS = {
    "rdzv_backend", "rdzv_endpoint", "rdzv_conf", "monitor_interval", "role", "redirects",
    "start_method", "event_log_handler", "standalone", "run_path", "logs_specs",
    "numa_binding", "signals_to_handle", "duplicate_stdout_filters",
    "duplicate_stderr_filters", "virtual_local_rank",
}  # fmt: skip
_PET_NAME = {"torch_tee": "PET_TEE"}  # torchrun's -t/--tee (paddlike's --tee differs)
_SHORT = {"-r": "redirects", "-t": "torch_tee"}

COMPAT_VALUED = frozenset(REFUSED_OPTIONS) | frozenset(ONLY_VALUES) | frozenset(COMPAT_TRANSLATED)
COMPAT_OPTIONS = COMPAT_VALUED | frozenset(COMPAT_SWITCHES)


class CompatError(ValueError):
    """One line for `UsageError`: args[0] the option as the user wrote it, args[1] why."""


def normalize_spelling(arg: str, known: frozenset[str] | set[str]) -> str:
    """torchrun's dash spelling to ours: ``--nproc-per-node=2`` -> ``--nproc_per_node=2``.

    Only names that exist with underscores are rewritten, so an unknown option keeps the
    spelling the user typed in the error message.
    """
    if not arg.startswith("--") or "-" not in arg[2:].partition("=")[0]:
        return arg
    name, sep, value = arg.partition("=")
    under = "--" + name[2:].replace("-", "_")
    return under + sep + value if under in known else arg


def pet_name(name: str) -> str:
    return _PET_NAME.get(name, PET_PREFIX + name.upper())


def compat_name(arg: str) -> tuple[str, str | None] | None:
    """(table name, inline value) when `arg` (normalized) is an option of this table."""
    if arg in _SHORT:
        return _SHORT[arg], None
    if arg[:2] in _SHORT and len(arg) > 2 and not arg.startswith("--"):
        return _SHORT[arg[:2]], arg[2:].lstrip("=")
    if not arg.startswith("--"):
        return None
    name, sep, value = arg[2:].partition("=")
    if name in COMPAT_OPTIONS:
        return name, (value if sep else None)
    return None


def pet_values(environ: Mapping[str, str], given: Mapping[str, object]) -> dict[str, tuple]:
    """torchrun's options from PET_<NAME>, for those not given as flags."""
    found = {}
    for name in TORCHRUN_OPTIONS | {"torch_tee"}:
        var = pet_name(name)
        if name not in given and var in environ:
            value = environ[var]
            if name in COMPAT_SWITCHES:
                if value.strip() in ("", "0"):
                    continue
                value = None
            found[name] = (value, var)
    return found


def _std(text: str, what: str) -> int:
    """torchrun's Std value (0 none, 1 stdout, 2 stderr, 3 both); maps are refused."""
    text = text.strip()
    if ":" in text:
        raise CompatError(
            f"per-rank maps ({text!r}) are not supported; choose the workers shown on the "
            "console with --tee 0,1 or --tee all"
        )
    if text not in ("0", "1", "2", "3"):
        raise CompatError(f"expected 0, 1, 2 or 3 as in torchrun, got {text!r}")
    if text in ("1", "2"):
        raise CompatError(
            f"{text} ({'stdout' if text == '1' else 'stderr'} only) is not supported: a worker's "
            f"stdout and stderr stay together in workerlog.N; use 0 or 3 ({what})"
        )
    return int(text)


def _endpoint(text: str, default_port: int) -> str:
    text = text.strip()
    _, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return f"{text}:{default_port}"
    return text


_CONF_KEYS = "join_timeout, timeout, last_call_timeout, keep_alive_interval, keep_alive_max_attempt"


def _rdzv_conf(text: str) -> dict[str, str]:
    """torchrun's key=value,... into our --rdzv_timeout, --rdzv_last_call and
    --heartbeat_timeout."""
    conf: dict[str, str] = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise CompatError(f"expected key=value entries, got {item!r}")
        conf[key.strip()] = value.strip()
    out = {}
    for key in ("join_timeout", "timeout"):
        if key in conf:
            out["rdzv_timeout"] = conf.pop(key)
    if "last_call_timeout" in conf:
        out["rdzv_last_call"] = conf.pop("last_call_timeout")
    if "keep_alive_interval" in conf or "keep_alive_max_attempt" in conf:
        try:
            interval = float(conf.pop("keep_alive_interval", "5"))
            attempts = int(conf.pop("keep_alive_max_attempt", "3"))
        except ValueError:
            raise CompatError("keep_alive_interval and keep_alive_max_attempt: numbers") from None
        out["heartbeat_timeout"] = repr(interval * attempts)
    if conf:
        key = sorted(conf)[0]
        why = {
            "is_host": "the node whose address --rdzv_endpoint (--master) names hosts the store",
            "close_timeout": "a round closes when MAX nodes joined, or MIN or more and none "
            "new for --rdzv_last_call seconds (last_call_timeout); there is no separate "
            "close timeout",
        }.get(key, f"not supported (accepted: {_CONF_KEYS})")
        raise CompatError(f"key {key!r}: {why}")
    return out


def translate_compat(found: Mapping[str, tuple[str | None, str]]) -> tuple[dict[str, tuple], dict]:
    """The table's options -> ({our dest: (text, source)}, other fields).

    `found` maps a table name to (value, where it came from). Raises `CompatError`
    with args (source, why) for a refused option or value.
    """
    ours: dict[str, tuple[str, str]] = {}
    extra: dict[str, object] = {}
    for name, (value, source) in found.items():
        texts: dict[str, str] = {}
        try:
            _compat_one(name, value, texts, extra)
        except CompatError as bad:
            raise CompatError(source, str(bad)) from None
        ours.update((dest, (text, source)) for dest, text in texts.items())
    backend = (found.get("rdzv_backend", ("static", ""))[0] or "static").strip()
    if "rdzv_endpoint" in found:
        endpoint, source = found["rdzv_endpoint"]
        endpoint = (endpoint or "").strip()
        if backend in ("etcd", "etcd-v2") and endpoint:
            hosts = ",".join(_endpoint(e, 2379) for e in endpoint.split(","))
            ours["master"] = ("etcd://" + hosts, source)
        elif endpoint:
            ours["master"] = (_endpoint(endpoint, 29400), source)
        if "elastic_server" in found and ours["master"][1] != found["elastic_server"][1]:
            raise CompatError(
                source,
                f"contradicts {found['elastic_server'][1]} (both say where the launchers "
                "meet); drop one of them",
            )
    elif backend in ("etcd", "etcd-v2"):
        raise CompatError(found["rdzv_backend"][1], "etcd needs --rdzv_endpoint host:port")
    return ours, extra


def _compat_one(name: str, value: str | None, ours: dict[str, str], extra: dict) -> None:
    if name in REFUSED_OPTIONS:
        raise CompatError(REFUSED_OPTIONS[name])
    if name in ONLY_VALUES:
        allowed, why = ONLY_VALUES[name]
        if (value or "").strip().lower() not in allowed:
            shown = "/".join(sorted(allowed)) if len(allowed) < 4 else "a boolean"
            raise CompatError(f"{why} (accepted: {shown}), got {value!r}")
        return
    if name == "rdzv_backend":
        if (value or "").strip() not in ("static", "c10d", "etcd", "etcd-v2"):
            raise CompatError(f"expected static, c10d, etcd or etcd-v2, got {value!r}")
    elif name == "rdzv_conf":
        ours.update(_rdzv_conf(value or ""))
    elif name == "monitor_interval":
        try:
            ok = float(value or "") > 0
        except ValueError:
            ok = False
        if not ok:
            raise CompatError(f"expected a number of seconds > 0, got {value!r}")
        # Accepted: worker exits are noticed at once (pidfd), within any interval.
    elif name == "role":
        if not (value or "").strip():
            raise CompatError("expected a non-empty name")
        extra["role"] = value.strip()
    elif name == "redirects":
        if _std(value or "", "3: output only in the log files, like --tee none") == 3:
            ours["tee"] = "none"
    elif name == "torch_tee":
        if _std(value or "", "3: every local worker on the console, like --tee all") == 3:
            ours["tee"] = "all"
    elif name == "backend":
        word = (value or "").strip().lower()
        if word == "gloo":
            ours["gpus"] = "cpu"
        elif word == "nccl":
            extra["backend"] = "nccl"
        elif word != "auto":
            raise CompatError(
                f"expected auto, nccl (GPU workers) or gloo (CPU workers), got {value!r}"
            )
    elif name == "elastic_server":
        # Paddle fleet's legacy elastic launcher: an etcd server, host:port
        try:
            _host_port((value or "").strip(), port_required=True)
        except _Bad:
            raise CompatError(f"expected the etcd server as host:port, got {value!r}") from None
        ours["master"] = "etcd://" + (value or "").strip()
    elif name == "standalone":
        extra["standalone"] = True
    elif name == "run_path":
        extra["run_path"] = True
    # use_env: LOCAL_RANK is always in the environment, no --local-rank argument.


def split_compat(args: Sequence[str]) -> tuple[list[str], dict[str, tuple[str | None, str]]]:
    """Take this table's options out of the launcher's (normalized) arguments.

    Returns the arguments for argparse and {name: (value, option as written)}.
    """
    rest: list[str] = []
    found: dict[str, tuple[str | None, str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        hit = compat_name(arg)
        if hit is None:
            rest.append(arg)
            i += 1
            continue
        name, value = hit
        shown = arg.partition("=")[0] if arg.startswith("--") else arg[:2]
        if name in COMPAT_SWITCHES:
            if value is not None:
                raise CompatError(shown, f"takes no value, got {value!r}")
            i += 1
        elif value is None:
            if i + 1 >= len(args):
                raise CompatError(shown, "expected one argument")
            value = args[i + 1]
            i += 2
        else:
            i += 1
        found[name] = (value, shown)
    return rest, found


# --- the parser --------------------------------------------------------------------------


class _Parser:
    """argparse with errors turned into `UsageError` (one line, no usage dump)."""

    @staticmethod
    def build() -> argparse.ArgumentParser:
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
            prog="python -m paddlike.launch",
            formatter_class=formatter,
            description=(
                "Start a distributed training job: one worker per device (or "
                "--nproc_per_node CPU workers) on each node in --ips. Every option can "
                f"also be set from the environment as {OPTION_ENV_PREFIX}<OPTION>, e.g. "
                f"{OPTION_ENV_PREFIX}LOG_DIR; a flag on the command line wins. Every option "
                "may be spelled with - in place of _, as torchrun spells them; torchrun's "
                "PET_<OPTION> variables are read too, below these (docs/migrating.md)."
            ),
            allow_abbrev=False,
        )
        g = p.add_argument_group("Paddle options")
        g.add_argument("--ips", help="comma-separated node IPs or hostnames (default 127.0.0.1)")
        g.add_argument(
            "--gpus",
            "--devices",
            "--selected_gpus",
            dest="gpus",
            help="physical GPU ids for this node's workers, e.g. 0,1 (entries of "
            "CUDA_VISIBLE_DEVICES when set), or cpu; default: every visible GPU, or CPU workers "
            "when none is visible",
        )
        g.add_argument(
            "--nproc_per_node",
            help="workers per node: a number (the GPUs split into that many slices), or gpu, "
            "cpu, auto as in torchrun (default: one per visible GPU, or 1)",
        )
        g.add_argument("--run_mode", help="collective (default), ps or ps-heter")
        g.add_argument(
            "--host",
            "--local_addr",
            dest="host",
            help="this node's address, when it cannot be matched (or POD_IP)",
        )
        g.add_argument("--start_port", help="first port on multi-node jobs (default 6070)")
        g.add_argument(
            "--job_id",
            "--rdzv_id",
            dest="job_id",
            help="job name (default: generated from the time)",
        )

        g = p.add_argument_group("torchrun/OneFlow compatible")
        g.add_argument(
            "--nnodes",
            "--np",
            dest="nnodes",
            help="number of nodes (must agree with --ips), or MIN:MAX for an elastic job",
        )
        g.add_argument(
            "--node_rank",
            "--rank",
            dest="node_rank",
            help="this node's index in --ips (ignored by elastic jobs)",
        )
        g.add_argument("--master_addr", help="address where the launchers meet (default: node 0)")
        g.add_argument(
            "--master_port",
            help="the workers' MASTER_PORT on node 0, as in torchrun; the launchers then meet "
            "at the next port, unless --master says where (default: launchers at 6170, "
            "the workers' port picked free)",
        )
        g.add_argument(
            "-m", "--module", action="store_true", default=None, help="run the script as a module"
        )
        g.add_argument(
            "--no_python",
            action="store_true",
            default=None,
            help="run training_script as a command, without the Python interpreter",
        )

        g = p.add_argument_group("multi-node")
        g.add_argument("--master", help="ip:port or etcd://host:port[,host:port] for rendezvous")
        g.add_argument("--rdzv_timeout", help="seconds to wait for all nodes (default 300)")
        g.add_argument("--heartbeat_timeout", help="seconds before a silent node is lost (10)")
        g.add_argument(
            "--rdzv_last_call",
            help="elastic jobs: a round closes with MIN or more nodes after this many seconds "
            "without a new arrival (default 30)",
        )
        g.add_argument(
            "--elastic_level",
            help="-1 off (default; 1 with --nnodes MIN:MAX), 0 fault tolerance (a fixed "
            "--nnodes N waits for a replacement node), 1 scale within MIN:MAX",
        )
        g.add_argument(
            "--elastic_timeout",
            help="elastic jobs (Paddle's meaning): seconds a job with MIN to MAX-1 nodes waits "
            "for more before a round starts; overrides --rdzv_last_call (default: that)",
        )
        g.add_argument(
            "--max_restarts",
            "--max_restart",
            dest="max_restarts",
            help="restart rounds after a failure (default 0)",
        )
        g.add_argument("--job_token", help="shared secret for the launchers' store")
        g.add_argument(
            "--job_token_file", help="file holding the job token (instead of --job_token)"
        )

        g = p.add_argument_group("parameter server")
        g.add_argument("--server_num", help="servers on this node (implies --run_mode ps)")
        g.add_argument(
            "--worker_num",
            "--trainer_num",
            dest="worker_num",
            help="trainers on this node (implies --run_mode ps)",
        )
        g.add_argument("--servers", help="server endpoints ip:port,... (implies --run_mode ps)")
        g.add_argument(
            "--workers",
            "--trainers",
            dest="workers",
            help="trainer hosts ip[:port],... (implies --run_mode ps)",
        )
        g.add_argument(
            "--heter_workers",
            help="heter trainer endpoints ip:port, stages separated by ';' (implies ps-heter)",
        )
        g.add_argument(
            "--heter_worker_num",
            help="heter trainers on this node per stage, e.g. 1;2 (implies ps-heter)",
        )
        g.add_argument(
            "--heter_devices", help="device kind per heter stage: gpu, or cpu;gpu (ps-heter)"
        )

        g = p.add_argument_group("output")
        g.add_argument("--log_dir", "--logdir", dest="log_dir", help="log directory (default log)")
        g.add_argument(
            "--log_overwrite",
            action="store_true",
            default=None,
            help="truncate the log files instead of appending",
        )
        g.add_argument(
            "--redirect_stdout_and_stderr",
            action="store_true",
            default=None,
            help="stdout to workerlog.N, stderr to workerlog.N.err",
        )
        g.add_argument(
            "--tee",
            "--local_ranks_filter",
            dest="tee",
            help="local workers shown on the console: 0 (default), 0,1, all, none",
        )
        g.add_argument(
            "--dry_run",
            action="store_true",
            default=None,
            help="print every process, its command and environment; start nothing",
        )
        g.add_argument(
            "--kill_timeout",
            "--shutdown_timeout",
            dest="kill_timeout",
            help="seconds between SIGTERM and SIGKILL (default 5)",
        )

        g = p.add_argument_group("hangs")
        g.add_argument(
            "--hang_timeout",
            help="seconds without a sign of life from any worker (log output, heartbeat, "
            "collective) before the launcher takes every rank's stack (default: off)",
        )
        g.add_argument(
            "--on_hang",
            help="after a hang's stacks are written: dump (keep waiting, default) or abort "
            "(end the job, exit code 124)",
        )

        # Parsed by `_split_argv`, never by argparse; declared here for --help.
        p.add_argument(
            "training_script", nargs="?", help="the script (or module, or command) to run"
        )
        p.add_argument("training_script_args", nargs=argparse.REMAINDER)
        return p


# option dest -> checker (value options); flags are the store_true options.
_CHECKS = {
    "ips": _name_list,
    "gpus": _gpu_list,
    "nproc_per_node": _nproc,
    "run_mode": _run_mode,
    "host": _text,
    "start_port": _port,
    "job_id": _text,
    "nnodes": _nnodes,
    "node_rank": _non_negative_int,
    "master_addr": _text,
    "master_port": _port,
    "master": _master,
    "rdzv_timeout": _positive_float,
    "heartbeat_timeout": _positive_float,
    "rdzv_last_call": _positive_float,
    "elastic_level": _elastic_level,
    "elastic_timeout": _non_negative_float,
    "max_restarts": _non_negative_int,
    "job_token": _text,
    "job_token_file": _token_file,
    "server_num": _positive_int,
    "worker_num": _positive_int,
    "servers": lambda text: _servers(_one_stage(text)),
    "workers": lambda text: _workers(_one_stage(text)),
    "heter_workers": _heter_stages,
    "heter_worker_num": _stage_counts,
    "heter_devices": _stage_devices,
    "log_dir": _text,
    "tee": _tee,
    "kill_timeout": _non_negative_float,
    "hang_timeout": _positive_float,
    "on_hang": _on_hang,
}
# What else a value may be, said after the value given.
_HINTS = {"nproc_per_node": "; or gpu, cpu, auto (as in torchrun)"}
_FLAGS = ("module", "no_python", "log_overwrite", "redirect_stdout_and_stderr", "dry_run")


def env_name(dest: str) -> str:
    """The environment variable of an option: log_dir -> PADDLIKE_LOG_DIR."""
    return OPTION_ENV_PREFIX + dest.upper()


def _split_argv(
    argv: Sequence[str], parser: argparse.ArgumentParser
) -> tuple[list[str], list[str]]:
    """Split at the training script: launcher options before it, the script's argv after.

    argparse alone would still look at the script's arguments for option prefixes;
    splitting first guarantees they are passed on untouched. The launcher's part comes
    back with torchrun's dash spellings rewritten to ours (`normalize_spelling`), and
    Paddle's ``--log_overwrite True|False`` (a value, where ours is a switch) folded.
    """
    takes_value, known = set(), set()
    for a in parser._actions:
        for s in a.option_strings:
            known.add(s)
            if a.nargs is None:
                takes_value.add(s)
    known.update("--" + name for name in COMPAT_OPTIONS)
    takes_value.update("--" + name for name in COMPAT_VALUED)
    takes_value.update(("-r", "-t"))
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = normalize_spelling(argv[i], known)
        if arg == "--":
            return out, list(argv[i + 1 :])
        if not arg.startswith("-") or arg == "-":
            return out, list(argv[i:])
        name, sep, value = arg.partition("=")
        if name == "--log_overwrite":
            if not sep and i + 1 < len(argv) and argv[i + 1].lower() in _PADDLE_BOOL:
                sep, value = "=", argv[i + 1]
                i += 1
            if sep:
                if value.lower() not in _PADDLE_BOOL:
                    raise UsageError(
                        f"--log_overwrite: expected no value, or true/false as in Paddle's "
                        f"launcher, got {value!r}",
                        "--log_overwrite",
                    )
                if value.lower() in _BOOL_TRUE:
                    out.append(name)
                i += 1
                continue
        out.append(arg)
        if arg in takes_value:
            if i + 1 < len(argv):
                out.append(argv[i + 1])
            i += 2
        else:
            i += 1
    return out, []


_PADDLE_BOOL = _BOOL_TRUE | _BOOL_FALSE


def fleet_elastic_server(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """Paddle fleet's legacy elastic launcher reads its etcd server from
    PADDLE_ELASTIC_SERVER, else from Kubernetes' service variables of a service named
    paddle-elastic-etcd: (host:port, the variable it came from), or None."""
    if "PADDLE_ELASTIC_SERVER" in environ:
        return environ["PADDLE_ELASTIC_SERVER"], "PADDLE_ELASTIC_SERVER"
    host = environ.get("PADDLE_ELASTIC_ETCD_SERVICE_HOST")
    port = environ.get("PADDLE_ELASTIC_ETCD_SERVICE_PORT")
    if host and port:
        return f"{host}:{port}", "PADDLE_ELASTIC_ETCD_SERVICE_HOST"
    return None


# Where other launchers' options came from the environment (below our flags and
# PADDLIKE_<OPTION>, as PET_ variables are), not from a flag.
_ENV_ORIGINS = ("PADDLE_ELASTIC_SERVER", "PADDLE_ELASTIC_ETCD_SERVICE_HOST")


def _from_env(origin: str) -> bool:
    return origin.startswith(PET_PREFIX) or origin in _ENV_ORIGINS


def _compat(ours: list[str], environ: Mapping[str, str]) -> tuple[list[str], dict, dict]:
    """Other launchers' options (flags, then PET_ variables and fleet's elastic server)
    -> (argparse's part, our options as text, other fields); `UsageError` for what
    paddlike refuses."""
    try:
        rest, found = split_compat(ours)
        for name, hit in pet_values(environ, found).items():
            found[name] = hit
        fleet = fleet_elastic_server(environ)
        if fleet is not None and "elastic_server" not in found and "rdzv_endpoint" not in found:
            found["elastic_server"] = fleet
        texts, extra = translate_compat(found)
    except CompatError as bad:
        source, why = bad.args
        option = source if source.startswith("-") else "--" + source[4:].lower()
        shown = source if source.startswith("-") else f"{option} (from {source})"
        raise UsageError(f"{shown}: {why}", option) from None
    extra["_sources"] = {name: source for name, (_, source) in found.items()}
    return rest, texts, extra


def parse_options(argv: Sequence[str], environ: Mapping[str, str]) -> LaunchOptions:
    """Parse and validate the launcher's command line; raise `UsageError` on bad input."""
    parser = _Parser.build()
    ours, script = _split_argv(argv, parser)
    ours, compat_texts, extra = _compat(ours, environ)
    ns = parser.parse_args(ours)  # only our options: positionals come from `script`
    if not script:
        raise UsageError(
            "training_script: missing; usage: python -m paddlike.launch [options] "
            "training_script [args ...]",
            "training_script",
        )
    sources = extra.pop("_sources")
    raw: dict[str, object] = {}
    given: set[str] = set()
    for dest, check in _CHECKS.items():
        value, source = getattr(ns, dest), f"--{dest}"
        theirs, origin = compat_texts.get(dest, (None, ""))
        if theirs is not None and not _from_env(origin):
            if value is not None and value != theirs:
                raise UsageError(
                    f"--{dest}: {value!r} contradicts {origin} (which means --{dest} "
                    f"{theirs}); drop one of them",
                    f"--{dest}",
                )
            value, source = theirs, f"--{dest} (from {origin})"
        if value is None and env_name(dest) in environ:
            value, source = environ[env_name(dest)], f"--{dest} (from {env_name(dest)})"
        if value is None and theirs is not None:
            value, source = theirs, f"--{dest} (from {origin})"
        for other in (PET_OF.get(dest), _PADDLE_ENV.get(dest)):
            if value is None and other is not None and other in environ:
                value, source = environ[other], f"--{dest} (from {other})"
        if value is None:
            continue
        try:
            raw[dest] = check(value)
        except _Bad as bad:
            hint = _HINTS.get(dest, "")
            raise UsageError(f"{source}: {bad}, got {value!r}{hint}", f"--{dest}") from None
        given.add(dest)
        if dest == "start_port":
            raw["start_port_from"] = source.partition("(from ")[2].rstrip(")") or source
    _paddlecloud_ports(raw, environ)
    for dest in _FLAGS:
        value = getattr(ns, dest)
        for var in (env_name(dest), PET_OF.get(dest)):
            if value is not None or var is None or var not in environ:
                continue
            text = environ[var].strip().lower()
            if text not in _FLAG_TRUE | _FLAG_FALSE:
                raise UsageError(
                    f"--{dest} (from {var}): expected 1/true/yes or 0/false/no, "
                    f"got {environ[var]!r}",
                    f"--{dest}",
                )
            value = text in _FLAG_TRUE
        if value is not None:
            raw[dest] = bool(value)
    if "job_token_file" in raw:
        if "job_token" in given:
            raise UsageError(
                "--job_token_file: give the token by --job_token or by --job_token_file, "
                "not both (got both; values not shown: they are secrets)",
                "--job_token_file",
            )
        raw["job_token"] = raw.pop("job_token_file")
    if raw.get("gpus") == "cpu":
        raw["cpu_only"] = True
        del raw["gpus"]
    if isinstance(raw.get("nproc_per_node"), str):
        raw["nproc_per_node_kind"] = raw.pop("nproc_per_node")
    _apply_compat_extra(raw, extra, sources)
    fleet_master = compat_texts.get("master", (None, ""))
    if sources.get("elastic_server") == fleet_master[1] and raw.get("master") == fleet_master[0]:
        given.add("elastic_server")  # the launchers meet at fleet's server: its rule applies
    _elastic_fields(raw, given)
    raw["ips_given"] = "ips" in given
    raw["master_port_given"] = "master_port" in given
    raw["run_mode"] = _infer_run_mode(raw, given)
    options = LaunchOptions(
        training_script=script[0], training_script_args=tuple(script[1:]), **raw
    )
    _check_combinations(options)
    return options


# Paddle's launcher reads these for the same options (below PADDLIKE_ and PET_).
_PADDLE_ENV = {
    "start_port": "PADDLE_START_PORT",
    "nnodes": "PADDLE_ELASTIC_NP",  # Paddle fleet's legacy elastic launcher: MIN[:MAX]
    "elastic_timeout": "PADDLE_ELASTIC_TIMEOUT",  # fleet's: the wait for more nodes (last call)
    "job_id": "PADDLE_ELASTIC_JOB_ID",  # fleet's legacy elastic launcher
}


def _paddlecloud_ports(raw: dict[str, object], environ: Mapping[str, str]) -> None:
    """PaddleCloud opens TRAINER_PORTS_NUM ports from PADDLE_PORT for the job: the first
    port when --start_port (or PADDLE_START_PORT) is not given. Both must be set: paddlike
    sets PADDLE_PORT alone in a parameter-server process's own environment."""
    port, num = environ.get("PADDLE_PORT"), environ.get("TRAINER_PORTS_NUM")
    if port is None or num is None:
        return
    for var, text, check in (
        ("PADDLE_PORT", port, _port),
        ("TRAINER_PORTS_NUM", num, _positive_int),
    ):
        try:
            check(text)
        except _Bad as bad:
            raise UsageError(f"{var}: {bad}, got {text!r} (PaddleCloud's ports)", var) from None
    if "start_port_from" not in raw:
        raw["start_port"], raw["start_port_from"] = int(port), "PADDLE_PORT"
    if raw["start_port_from"] == "PADDLE_PORT":
        raw["ports_num"] = int(num)


def _apply_compat_extra(raw: dict[str, object], extra: dict, sources: dict[str, str]) -> None:
    """Fields of other launchers' options that are not ours by another name."""
    if "role" in extra:
        raw["role"] = extra["role"]
    if extra.get("standalone"):
        raw["standalone"] = True
    if extra.get("run_path") and (raw.get("module") or raw.get("no_python")):
        other = "--module" if raw.get("module") else "--no_python"
        raise UsageError(
            f"{sources['run_path']}: runs the script by its path; cannot be combined with {other}",
            "--run_path",
        )
    if extra.get("backend") == "nccl":
        # Fleet's --backend nccl: GPU workers; torchrun's word for "one per GPU, or exit 2".
        if raw.get("cpu_only"):
            raise UsageError(
                f"{sources['backend']}: 'nccl' needs GPU workers, but --devices is cpu",
                "--backend",
            )
        if "nproc_per_node" not in raw and "nproc_per_node_kind" not in raw:
            raw["nproc_per_node_kind"] = "gpu"


def _elastic_fields(raw: dict[str, object], given: set[str]) -> None:
    """--nnodes MIN:MAX and --elastic_level into `nnodes` (MAX) and `min_nnodes` (MIN, set
    for an elastic job); --node_rank is dropped there (ranks come from each round)."""
    nnodes = raw.get("nnodes")
    if isinstance(nnodes, tuple):
        raw["min_nnodes"], raw["nnodes"] = nnodes
    level = raw.get("elastic_level", -1)
    ranged = raw.get("min_nnodes") is not None
    count = raw.get("nnodes")
    fleet = "elastic_server" in given and "elastic_level" not in given
    if fleet and not ranged and isinstance(count, int) and count >= 2:
        # fleet's legacy elastic launcher: one node count with an elastic server is its
        # fault-tolerance level (a lost node is waited for), as --elastic_level 0 here
        raw["elastic_level"] = level = 0
    shown = f"--nnodes {raw['min_nnodes']}:{count}" if ranged else f"--nnodes {count}"
    if ranged and level == -1 and "elastic_level" in given:
        raise UsageError(
            f"--elastic_level: -1 (off) contradicts {shown}, an elastic range; drop "
            "--elastic_level -1, or give one node count for a fixed job",
            "--elastic_level",
        )
    if level == 1 and not ranged:
        got = shown if count is not None else "no --nnodes"
        raise UsageError(
            f"--elastic_level: 1 (scale) needs a range of nodes, --nnodes MIN:MAX, got {got}; "
            "for a fixed count that waits for replacements use --elastic_level 0",
            "--elastic_level",
        )
    if level == 0 and not ranged:
        if not isinstance(count, int) or count < 2:
            got = shown if count is not None else "no --nnodes"
            raise UsageError(
                f"--elastic_level: 0 (fault tolerance) needs --nnodes N with N >= 2 (or "
                f"MIN:MAX), got {got}; one node has nothing to be elastic about",
                "--elastic_level",
            )
        raw["min_nnodes"] = count  # the world keeps N nodes; survivors wait for a replacement
    if raw.get("min_nnodes") is None:
        if "elastic_timeout" in given:
            raise UsageError(
                f"--elastic_timeout: only meaningful for an elastic job (--nnodes MIN:MAX or "
                f"--elastic_level 0), got {raw['elastic_timeout']:g} for a fixed job, which "
                "starts when all its nodes joined; drop it (or unset PADDLIKE_ELASTIC_TIMEOUT "
                "and PADDLE_ELASTIC_TIMEOUT)",
                "--elastic_timeout",
            )
        return
    raw.pop("node_rank", None)  # torchrun ignores it for c10d/etcd too (Kubeflow sets it)


def _infer_run_mode(raw: Mapping[str, object], given: set[str]) -> str:
    """ps when a PS option is given (ours only, never the script's); explicit mode must agree."""
    ps_given = [o for o in PS_OPTIONS if o in given]
    heter_given = [o for o in HETER_OPTIONS if o in given]
    mode = raw.get("run_mode")
    if mode == "collective" and (ps_given or heter_given):
        option = (ps_given or heter_given)[0]
        raise UsageError(
            f"--run_mode: 'collective' contradicts --{option} (a parameter-server option); "
            "drop one of them",
            "--run_mode",
        )
    if mode is None:
        mode = "ps-heter" if heter_given else "ps" if ps_given else "collective"
    return str(mode)


def _check_combinations(o: LaunchOptions) -> None:
    """Rules between options; each error names the options involved."""
    if o.module and o.no_python:
        raise UsageError("--module: cannot be combined with --no_python", "--module")
    if o.min_nnodes is not None:
        _check_elastic(o)
    if o.run_mode == "ps-heter":
        _check_heter(o)
    elif o.run_mode == "ps":
        for dest in HETER_OPTIONS:
            if getattr(o, dest) is not None:
                raise UsageError(
                    f"--{dest}: a ps-heter option, but --run_mode is 'ps'; use --run_mode "
                    "ps-heter or drop it",
                    f"--{dest}",
                )
    if o.is_ps:
        if o.gpus is not None:
            raise UsageError(
                f"--gpus: parameter-server mode runs on CPUs, got {','.join(o.gpus)!r}", "--gpus"
            )
        if o.nproc_per_node is not None or o.nproc_per_node_kind is not None:
            raise UsageError(
                f"--nproc_per_node: not used in parameter-server mode (use --worker_num), "
                f"got '{o.nproc_per_node or o.nproc_per_node_kind}'",
                "--nproc_per_node",
            )
        if o.servers is not None and o.server_num is not None and o.server_num != len(o.servers):
            raise UsageError(
                f"--server_num: {o.server_num} contradicts --servers, which lists {len(o.servers)}",
                "--server_num",
            )
        if o.workers is not None and o.worker_num is not None and o.worker_num != len(o.workers):
            raise UsageError(
                f"--worker_num: {o.worker_num} contradicts --workers, which lists {len(o.workers)}",
                "--worker_num",
            )
        if (o.servers is None) != (o.workers is None):
            missing = "--workers" if o.workers is None else "--servers"
            raise UsageError(
                f"{missing}: needed too when the other list is given "
                "(each node starts the roles whose address is its own)",
                missing,
            )
    if o.is_ps:
        _check_ps_counts(o)
    if o.standalone:
        _check_standalone(o)
    if o.role != "default" and o.is_ps:
        raise UsageError(
            f"--role: torchrun's worker role ({o.role!r}) is for collective jobs; parameter-"
            "server jobs name their roles themselves (TRAINING_ROLE)",
            "--role",
        )
    if o.ips_given and o.nnodes is not None and o.nnodes != len(o.ips) and not o.min_nnodes:
        raise UsageError(
            f"--nnodes: {o.nnodes} contradicts --ips, which lists {len(o.ips)} ({','.join(o.ips)})",
            "--nnodes",
        )
    if o.node_rank is not None:
        nnodes = o.nnodes if o.nnodes is not None else len(o.ips)
        if o.node_rank >= nnodes:
            raise UsageError(
                f"--node_rank: {o.node_rank} is out of range for {nnodes} node(s)", "--node_rank"
            )
    _check_device_words(o)
    if o.gpus is not None and o.nproc_per_node is not None and len(o.gpus) % o.nproc_per_node:
        raise UsageError(
            f"--nproc_per_node: {o.nproc_per_node} does not divide the {len(o.gpus)} GPUs of "
            f"--gpus {','.join(o.gpus)}",
            "--nproc_per_node",
        )


def elastic_text(o: LaunchOptions) -> str:
    """The elastic node range as the user reads it: "2:4", or "3" for --elastic_level 0."""
    if o.min_nnodes is None or o.min_nnodes == o.nnodes:
        return str(o.nnodes)
    return f"{o.min_nnodes}:{o.nnodes}"


def _check_elastic(o: LaunchOptions) -> None:
    """An elastic job finds its nodes at each round's rendezvous: what that rules out."""
    what = f"an elastic job (--nnodes {elastic_text(o)}"
    what += ")" if o.elastic_level < 0 else f", --elastic_level {o.elastic_level})"
    if o.is_ps:
        raise UsageError(
            f"--nnodes: {what} is collective, but --run_mode is {o.run_mode!r}; "
            "parameter-server jobs run a fixed set of nodes: give one node count",
            "--nnodes",
        )
    if o.ips_given and len(o.ips) > 1:
        raise UsageError(
            f"--ips: {what} finds its nodes at each round's rendezvous, but --ips lists "
            f"{','.join(o.ips)}; drop --ips and give every node the same --master ip:port "
            "(or etcd://host:port)",
            "--ips",
        )
    if not o.master and not o.master_addr:
        raise UsageError(
            f"--master: {what} needs a place where the nodes meet: --master ip:port (node "
            "0's store), --master etcd://host:port (recommended: losing node 0 is then an "
            "ordinary node loss), --master_addr, or torchrun's --rdzv_endpoint",
            "--master",
        )
    if o.master_port_given and o.master and o.master.startswith("etcd://"):
        raise UsageError(
            f"--master_port: {o.master_port} fixes the workers' port on rank 0's node, but "
            f"rank 0 may move to another node between the rounds of {what} with --master "
            f"{o.master}; drop --master_port (a free port is picked each round)",
            "--master_port",
        )


def _check_ps_counts(o: LaunchOptions) -> None:
    """Counts (--server_num/--worker_num/--heter_worker_num) describe one node's job.

    On several nodes each launcher would start its own one-node job — every trainer
    id 0, every world size 1 — so the combination is refused: the lists name every
    process of a many-node job, in the order of their ids.
    """
    if o.servers is not None or o.workers is not None:
        return
    counts = [d for d in ("server_num", "worker_num", "heter_worker_num") if getattr(o, d)]
    if not counts:
        return
    many = (
        f"--ips lists {len(o.ips)} nodes"
        if len(o.ips) > 1
        else f"--nnodes is {o.nnodes}"
        if o.nnodes is not None and o.nnodes > 1
        else ""
    )
    if many:
        raise UsageError(
            f"--{counts[0]}: counts describe a one-node parameter-server job, but {many}; "
            "on several nodes list every server and trainer with --servers ip:port,... and "
            "--workers ip,... (the same lists on every node; see docs/ps.md)",
            f"--{counts[0]}",
        )


def _check_standalone(o: LaunchOptions) -> None:
    """torchrun's --standalone: one node on 127.0.0.1 with its own rendezvous (a free port);
    what a one-node paddlike job does anyway. Options naming other nodes contradict it."""
    for dest, bad in (
        ("master", o.master is not None),
        ("nnodes", o.nnodes is not None and o.nnodes > 1),
        ("ips", len(o.ips) > 1),
        ("node_rank", bool(o.node_rank)),
    ):
        if bad:
            raise UsageError(
                f"--standalone: a one-node job with its own rendezvous, but --{dest} "
                f"{getattr(o, dest) if dest != 'ips' else ','.join(o.ips)} names another node "
                "or a shared rendezvous; drop one of them",
                "--standalone",
            )


def _check_heter(o: LaunchOptions) -> None:
    """ps-heter: the heter stages (by list or by count), their devices, and that the
    options agree on how many stages there are."""
    lists = o.servers is not None or o.workers is not None
    if o.heter_workers is None and o.heter_worker_num is None:
        raise UsageError(
            "--heter_workers: needed with --run_mode ps-heter (or --heter_worker_num on one "
            "node): the heter trainers of each stage",
            "--heter_workers",
        )
    if o.heter_workers is not None and not lists:
        raise UsageError(
            "--heter_workers: needs --servers and --workers too (each node starts the roles "
            "whose address is its own); on one node use --heter_worker_num",
            "--heter_workers",
        )
    if o.heter_workers is None and lists:
        raise UsageError(
            "--heter_worker_num: counts are for one-node jobs (with --server_num/--worker_num); "
            "with --servers/--workers list the heter trainers by --heter_workers",
            "--heter_worker_num",
        )
    if o.heter_workers is not None and o.heter_worker_num is not None:
        listed = tuple(len(s) for s in o.heter_workers)
        if listed != o.heter_worker_num:
            raise UsageError(
                f"--heter_worker_num: {';'.join(map(str, o.heter_worker_num))} contradicts "
                f"--heter_workers, which lists {';'.join(map(str, listed))} per stage",
                "--heter_worker_num",
            )
    source = "--heter_workers" if o.heter_workers is not None else "--heter_worker_num"
    stages = len(o.heter_stage_sizes)
    if o.heter_devices is None:
        raise UsageError(
            f"--heter_devices: needed in ps-heter mode, one device kind per heter stage "
            f"(cpu or gpu; {source} gives {stages} stage(s)), e.g. --heter_devices "
            + ";".join(["gpu"] * stages),
            "--heter_devices",
        )
    if len(o.heter_devices) != stages:
        raise UsageError(
            f"--heter_devices: {';'.join(o.heter_devices)!r} names {len(o.heter_devices)} "
            f"stage(s) but {source} gives {stages}; give one device kind per heter stage",
            "--heter_devices",
        )


def _check_device_words(o: LaunchOptions) -> None:
    """--devices cpu and --nproc_per_node gpu|cpu|auto against the other device options."""
    kind = o.nproc_per_node_kind
    if kind == "cpu" and o.gpus is not None:
        raise UsageError(
            f"--nproc_per_node: 'cpu' contradicts --gpus {','.join(o.gpus)}; drop one of them",
            "--nproc_per_node",
        )
    if kind == "gpu" and o.cpu_only:
        raise UsageError(
            "--nproc_per_node: 'gpu' contradicts --devices cpu; drop one of them",
            "--nproc_per_node",
        )
