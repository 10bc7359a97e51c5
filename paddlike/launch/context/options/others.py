"""Other launchers' command lines: torchrun's, Paddle's two and OneFlow's options, and
the variables they read (torchrun's ``PET_<OPTION>``, Paddle's ``PADDLE_*``).

`--help` lists paddlike's options and their aliases (argparse parses those). The
options here are the rest of what the other launchers accept, declared in
`their_table.py`: each is translated to ours (``--rdzv_endpoint h:p`` -> ``--master
h:p``), accepted where its value is what paddlike does anyway (``--start_method
spawn``), or refused with one line saying why (exit 2) — never ignored.
docs/migrating.md has the whole table.

Spellings: torchrun writes ``--nproc-per-node``; every long option of ours and of that
table is accepted with ``-`` or ``_`` (`normalize_spelling`). torchrun also reads each
option from ``PET_<DEST>`` (its dest upper-cased: ``--nproc-per-node`` ->
``PET_NPROC_PER_NODE``); `pet_values` does the same for that table, and the variables of
other launchers that feed an option of ours are in that option's row (`our_table.py`).
Where these come in the order of sources is `sources.PRECEDENCE`'s business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paddlike.contract import JOB_ID, OPTION_ENV_PREFIX
from paddlike.launch.context.options.record import (
    THEIR_FLAG,
    THEIR_OPTION_VARIABLE,
    Source,
    UsageError,
)
from paddlike.launch.context.options.their_table import (
    BOOL_FALSE,
    BOOL_TRUE,
    COMPAT_OPTIONS,
    COMPAT_SWITCHES,
    ONLY_VALUES,
    PADDLE_BOOL,
    PADDLE_OPTION_VARIABLES,
    REFUSED_OPTIONS,
    SHORT_OPTIONS,
    TORCHRUN_OPTIONS,
)
from paddlike.launch.context.options.values import (
    FLAG_FALSE,
    FLAG_TRUE,
    PORT,
    POSITIVE_INT,
    SWITCH_WORDS,
    BadValue,
    host_port,
    in_range,
)

PET_PREFIX = "PET_"



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
    return PET_PREFIX + name.upper()


def compat_name(arg: str) -> tuple[str, str | None] | None:
    """(table name, inline value) when `arg` (normalized) is an option of this table."""
    if arg in SHORT_OPTIONS:
        return SHORT_OPTIONS[arg], None
    if arg[:2] in SHORT_OPTIONS and len(arg) > 2 and not arg.startswith("--"):
        return SHORT_OPTIONS[arg[:2]], arg[2:].lstrip("=")
    if not arg.startswith("--"):
        return None
    name, sep, value = arg[2:].partition("=")
    if name in COMPAT_OPTIONS:
        return name, (value if sep else None)
    return None


def pet_values(environ: Mapping[str, str], given: Mapping[str, object]) -> dict[str, tuple]:
    """The table's options from variables, for those not given as flags: PADDLIKE_<NAME>
    (every option of the table, as every option of ours: above the others), torchrun's
    PET_<NAME>, then Paddle's (`PADDLE_OPTION_VARIABLES`). torchrun's -t/-r are read by
    `console.their_console`."""
    found = {}
    ours = [(name, OPTION_ENV_PREFIX + name.upper()) for name in sorted(COMPAT_OPTIONS)]
    pets = [(name, pet_name(name)) for name in sorted(TORCHRUN_OPTIONS)]
    for name, var in (*ours, *pets):
        if name in given or name in found or var not in environ:
            continue
        if var.startswith(OPTION_ENV_PREFIX) and name in ("tee", "redirects"):
            continue
        value = environ[var]
        if name in COMPAT_SWITCHES:  # as our switches' variables: a word, or refused
            word = value.strip().lower()
            if word not in FLAG_TRUE | FLAG_FALSE:
                raise CompatError(var, f"expected {SWITCH_WORDS}, got {value!r}")
            if word in FLAG_FALSE:
                continue
            value = None
        found[name] = (value, var)
    for name, var in PADDLE_OPTION_VARIABLES.items():
        if name not in given and name not in found and var in environ:
            if var in LAUNCHER_SET and in_a_worker(environ):
                continue
            found[name] = (environ[var], var)
    return found


def in_a_worker(environ: Mapping[str, str]) -> bool:
    """Inside a worker of a paddlike launch (a nested launch, `distributed.spawn`): the
    launcher's own PADDLE_* variables there describe the outer job, not options."""
    return JOB_ID in environ


def variable_option(var: str) -> str:
    """The option a variable stands for, as messages name it: PET_TEE -> --tee,
    PADDLE_SORT_IP -> --sort_ip, PADDLE_ELASTIC_SERVER -> --elastic_server."""
    for name, paddle in PADDLE_OPTION_VARIABLES.items():
        if var == paddle:
            return "--" + name
    for prefix in (PET_PREFIX, OPTION_ENV_PREFIX):
        if var.startswith(prefix):
            return "--" + var[len(prefix) :].lower()
    if var in _ENV_ORIGINS:
        return "--elastic_server"
    return var


def _endpoint(text: str, default_port: int) -> str:
    """torchrun's endpoint, with its default port when none is given; a port that is
    not a number stays as typed, so that the check quotes what the user wrote:

    "h" -> "h:29400", "[fd00::1]" -> "[fd00::1]:29400", "h:7000" and "h:abc" as they are
    """
    text = text.strip()
    if ":" not in text or text.endswith("]"):
        return f"{text}:{default_port}"
    return text


# torchrun's --monitor_interval: any number of seconds > 0 (inf too: it is never waited for)
_INTERVAL = in_range(float, "expected a number of seconds > 0", 0, above=True)

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


def translate_compat(
    found: Mapping[str, tuple[str | None, str]],
) -> tuple[dict[str, tuple], dict]:
    """The table's options -> ({our dest: (text, source)}, other fields).

    `found` maps a table name to (value, where it came from). Raises `CompatError`
    with args (source, why) for a refused option or value.
    """
    ours: dict[str, tuple[str, str]] = {}
    extra: dict[str, object] = {}
    for name, (value, source) in found.items():
        if name in ("tee", "redirects"):  # torchrun's console options: console.choose
            extra[name] = (value or "", source)
            continue
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
            hosts = [_endpoint(e, 2379) for e in endpoint.split(",")]
            for host in hosts:  # judged here, so that the error quotes what was typed
                try:
                    PORT(host.rpartition(":")[2])
                except BadValue as bad:
                    raise CompatError(source, f"{bad} for etcd, got {endpoint!r}") from None
            ours["master"] = ("etcd://" + ",".join(hosts), source)
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
            if why.startswith("expected"):  # the reason is the list
                raise CompatError(f"{why}, got {value!r}")
            if allowed == BOOL_FALSE:
                shown = "false, 0 or no"
            elif allowed == BOOL_TRUE | BOOL_FALSE:
                shown = "a boolean"
            else:
                shown = "/".join(sorted(allowed))
            raise CompatError(f"{why} (accepted: {shown}), got {value!r}")
        return
    if name == "rdzv_backend":
        if (value or "").strip() not in ("static", "c10d", "etcd", "etcd-v2"):
            raise CompatError(f"expected static, c10d, etcd or etcd-v2, got {value!r}")
    elif name == "rdzv_conf":
        ours.update(_rdzv_conf(value or ""))
    elif name == "monitor_interval":
        try:
            _INTERVAL(value or "")
        except BadValue as bad:
            raise CompatError(f"{bad}, got {value!r}") from None
        # Accepted: worker exits are noticed at once (pidfd), within any interval.
    elif name == "role":
        if not (value or "").strip():
            raise CompatError("expected a non-empty name")
        extra["role"] = value.strip()
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
            host_port((value or "").strip(), port_required=True)
        except BadValue:
            raise CompatError(f"expected the etcd server as host:port, got {value!r}") from None
        ours["master"] = "etcd://" + (value or "").strip()
    elif name == "enable_gpu_log":
        word = (value or "").strip().lower()
        if word not in PADDLE_BOOL:
            raise CompatError(f"expected a boolean (true/false), got {value!r}")
        extra["gpu_log"] = word in BOOL_TRUE  # `apply_extra`: with --gpu_log_interval
    elif name == "bind_cores_to_rank":
        ours["numa_binding"] = "exclusive"
    elif name == "standalone":
        extra["standalone"] = True
    elif name == "run_path":
        extra["run_path"] = True
    # use_env: LOCAL_RANK is always in the environment, no --local-rank argument.


# Paddle's GPU log: one row per GPU every 30 seconds (its Watcher's fixed interval)
PADDLE_GPU_LOG_INTERVAL = 30.0


def split_compat(
    args: Sequence[str], typed: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, tuple[str | None, str]]]:
    """Take this table's options out of the launcher's (normalized) arguments.

    Returns the arguments for argparse and {name: (value, option as the user typed it:
    `typed` maps the normalized name back)}.
    """
    typed = typed or {}
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
        shown = typed.get(shown, shown)
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


def _source(origin: str) -> Source:
    """A translated option's origin as a `Source`: a flag, or a variable."""
    from_env = not origin.startswith("-")  # PET_*, PADDLE_*: a variable
    return Source(THEIR_OPTION_VARIABLE if from_env else THEIR_FLAG, origin)


def their_options(
    ours: list[str], environ: Mapping[str, str], typed: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, tuple[str, Source]], dict, dict[str, str]]:
    """Other launchers' options (flags, then PET_ variables and fleet's elastic server)
    -> (argparse's part, {our dest: (text, where it came from)}, other fields,
    {table name: the option or variable as the user gave it}); `UsageError` for what
    paddlike refuses. `typed`: each option's name as typed (`parser.typed_names`), which
    messages use (``--rdzv-backend``, not the ``--rdzv_backend`` `ours` spells)."""
    try:
        rest, found = split_compat(ours, typed or {})
        for name, hit in pet_values(environ, found).items():
            found[name] = hit
        fleet = fleet_elastic_server(environ)
        if fleet is not None and "elastic_server" not in found and "rdzv_endpoint" not in found:
            found["elastic_server"] = fleet
        texts, extra = translate_compat(found)
    except CompatError as bad:
        source, why = bad.args
        option = source if source.startswith("-") else variable_option(source)
        shown = source if source.startswith("-") else f"{option} (from {source})"
        raise UsageError(f"{shown}: {why}", option) from None
    theirs = {dest: (text, _source(origin)) for dest, (text, origin) in texts.items()}
    return rest, theirs, extra, {name: source for name, (_, source) in found.items()}


# Each option's other launchers' variables are in its row of the option table
# (`declare.Option.variables`): torchrun's PET_ first, then Paddle's. Paddle's launcher
# (args_envs.py's env_args_mapping) reads PADDLE_<OPTION> for its options, PADDLE_NNODES and
# PADDLE_MASTER among them. Under PaddleCloud (PADDLE_TRAINERS set) those two are read as
# PaddleCloud's instead (context/schedulers.py, context/master.py): the same meaning,
# checked against its node list (`PADDLECLOUD_READS`).

# Options' variables that paddlike's launcher itself gives its workers (plan.py): inside a
# worker they describe the outer job, so they are not read as options there (`in_a_worker`).
LAUNCHER_SET = frozenset(
    {"PADDLE_JOB_ID", "PADDLE_LOG_DIR", "PADDLE_WITH_GLOO", "PADDLE_NNODES", "PADDLE_MASTER"}
)
# Paddle's variables that PaddleCloud sets beside its node list (PADDLE_TRAINERS): read
# there by `context.schedulers` (and checked against that list), not as options.
PADDLECLOUD_READS = frozenset({"PADDLE_NNODES", "PADDLE_MASTER"})


def paddlecloud_ports(raw: dict[str, object], environ: Mapping[str, str]) -> None:
    """PaddleCloud opens TRAINER_PORTS_NUM ports from PADDLE_PORT for the job: the first
    port when --start_port (or PADDLE_START_PORT) is not given. Both must be set: paddlike
    sets PADDLE_PORT alone in a parameter-server process's own environment."""
    port, num = environ.get("PADDLE_PORT"), environ.get("TRAINER_PORTS_NUM")
    if port is None or num is None:
        return
    for var, text, check in (
        ("PADDLE_PORT", port, PORT),
        ("TRAINER_PORTS_NUM", num, POSITIVE_INT),
    ):
        try:
            check(text)
        except BadValue as bad:
            raise UsageError(f"{var}: {bad}, got {text!r} (PaddleCloud's ports)", var) from None
    if "start_port_from" not in raw:
        raw["start_port"], raw["start_port_from"] = int(port), "PADDLE_PORT"
    if raw["start_port_from"] == "PADDLE_PORT":
        raw["ports_num"] = int(num)


def apply_extra(raw: dict[str, object], extra: dict, sources: dict[str, str]) -> None:
    """Fields of other launchers' options that are not ours by another name."""
    if "role" in extra:
        raw["role"] = extra["role"]
    if extra.get("standalone"):
        raw["standalone"] = True
        if not sources["standalone"].startswith("-"):  # PET_STANDALONE
            raw["standalone_from"] = f"--standalone (from {sources['standalone']})"
    if extra.get("run_path") and (raw.get("module") or raw.get("no_python")):
        other = "--module" if raw.get("module") else "--no_python"
        raise UsageError(
            f"{sources['run_path']}: runs the script by its path; cannot be combined with {other}",
            "--run_path",
        )
    if raw.get("bind_core_list") is not None and raw.get("numa_binding") is None:
        raise UsageError(
            "--bind_core_list: only used to bind workers: add --numa_binding MODE (or "
            "DeepSpeed's --bind_cores_to_rank, which is --numa_binding exclusive)",
            "--bind_core_list",
        )
    if "gpu_log" in extra:  # Paddle's --enable_gpu_log: on at its interval, unless ours says
        if extra["gpu_log"] and raw.get("gpu_log_interval") is None:
            raw["gpu_log_interval"] = PADDLE_GPU_LOG_INTERVAL
            option = sources["enable_gpu_log"]
            raw["gpu_log_from"] = (
                option if option.startswith("-") else f"--enable_gpu_log (from {option})"
            )
        elif not extra["gpu_log"] and raw.get("gpu_log_interval") is not None:
            raise UsageError(
                f"{sources['enable_gpu_log']}: false contradicts --gpu_log_interval "
                f"{raw['gpu_log_interval']:g} (a GPU log every that many seconds); drop one",
                "--enable_gpu_log",
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
