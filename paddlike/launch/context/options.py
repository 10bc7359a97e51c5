"""The launcher's command line: parsed and validated once, into one immutable record.

Every option is also read from the environment as ``PADDLIKE_<OPTION_UPPER>``
(``--log_dir`` <-> ``PADDLIKE_LOG_DIR``); a flag given on the command line wins.
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
    module: bool = False
    no_python: bool = False
    # multi-node (wired by the rendezvous)
    master: str | None = None  # "ip:port" or "etcd://host:port[,host:port]"
    rdzv_timeout: float = 300.0
    heartbeat_timeout: float = 10.0
    max_restarts: int = 0
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
                f"{OPTION_ENV_PREFIX}LOG_DIR; a flag on the command line wins."
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
        g.add_argument("--host", help="this node's address, when it cannot be matched (or POD_IP)")
        g.add_argument("--start_port", help="first port on multi-node jobs (default 6070)")
        g.add_argument("--job_id", help="job name (default: generated from the time)")

        g = p.add_argument_group("torchrun/OneFlow compatible")
        g.add_argument("--nnodes", help="number of nodes; must agree with --ips")
        g.add_argument("--node_rank", help="this node's index in --ips")
        g.add_argument("--master_addr", help="address where the launchers meet (default: node 0)")
        g.add_argument("--master_port", help="port where the launchers meet (default 6170)")
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
        g.add_argument("--max_restarts", help="restart rounds after a failure (default 0)")
        g.add_argument("--job_token", help="shared secret for the launchers' store")
        g.add_argument(
            "--job_token_file", help="file holding the job token (instead of --job_token)"
        )

        g = p.add_argument_group("parameter server")
        g.add_argument("--server_num", help="servers on this node (implies --run_mode ps)")
        g.add_argument("--worker_num", help="trainers on this node (implies --run_mode ps)")
        g.add_argument("--servers", help="server endpoints ip:port,... (implies --run_mode ps)")
        g.add_argument("--workers", help="trainer hosts ip[:port],... (implies --run_mode ps)")
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
            "--tee", help="local workers shown on the console: 0 (default), 0,1, all, none"
        )
        g.add_argument(
            "--dry_run",
            action="store_true",
            default=None,
            help="print every process, its command and environment; start nothing",
        )
        g.add_argument("--kill_timeout", help="seconds between SIGTERM and SIGKILL (default 5)")

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
    "nnodes": _positive_int,
    "node_rank": _non_negative_int,
    "master_addr": _text,
    "master_port": _port,
    "master": _master,
    "rdzv_timeout": _positive_float,
    "heartbeat_timeout": _positive_float,
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


def _split_argv(argv: Sequence[str], parser: argparse.ArgumentParser) -> tuple[list[str], list]:
    """Split at the training script: launcher options before it, the script's argv after.

    argparse alone would still look at the script's arguments for option prefixes;
    splitting first guarantees they are passed on untouched.
    """
    takes_value = {
        s for a in parser._actions if a.nargs is None for s in a.option_strings if s.startswith("-")
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return list(argv[:i]), list(argv[i + 1 :])
        if not arg.startswith("-") or arg == "-":
            return list(argv[:i]), list(argv[i:])
        if arg in takes_value:
            i += 2
        else:
            i += 1
    return list(argv), []


def parse_options(argv: Sequence[str], environ: Mapping[str, str]) -> LaunchOptions:
    """Parse and validate the launcher's command line; raise `UsageError` on bad input."""
    parser = _Parser.build()
    ours, script = _split_argv(argv, parser)
    ns = parser.parse_args(ours)  # only our options: positionals come from `script`
    if not script:
        raise UsageError(
            "training_script: missing; usage: python -m paddlike.launch [options] "
            "training_script [args ...]",
            "training_script",
        )
    raw: dict[str, object] = {}
    given: set[str] = set()
    for dest, check in _CHECKS.items():
        value, source = getattr(ns, dest), f"--{dest}"
        if value is None and env_name(dest) in environ:
            value, source = environ[env_name(dest)], f"--{dest} (from {env_name(dest)})"
        if value is None:
            continue
        try:
            raw[dest] = check(value)
        except _Bad as bad:
            hint = _HINTS.get(dest, "")
            raise UsageError(f"{source}: {bad}, got {value!r}{hint}", f"--{dest}") from None
        given.add(dest)
    for dest in _FLAGS:
        value = getattr(ns, dest)
        if value is None and env_name(dest) in environ:
            text = environ[env_name(dest)].strip().lower()
            if text not in _FLAG_TRUE | _FLAG_FALSE:
                raise UsageError(
                    f"--{dest} (from {env_name(dest)}): expected 1/true/yes or 0/false/no, "
                    f"got {environ[env_name(dest)]!r}",
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
    raw["ips_given"] = "ips" in given
    raw["run_mode"] = _infer_run_mode(raw, given)
    options = LaunchOptions(
        training_script=script[0], training_script_args=tuple(script[1:]), **raw
    )
    _check_combinations(options)
    return options


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
    if o.ips_given and o.nnodes is not None and o.nnodes != len(o.ips):
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
