"""What each option's value may be: text in, a value out, or `BadValue` saying what was
expected. The caller adds the option's name, where it came from and the text given:
``--nproc_per_node (from PET_NPROC_PER_NODE): expected a positive integer, got 'x'``.

Every number goes through one range checker, `in_range`: counts, ports, seconds and
levels differ only in their type, their bounds and the words of the message.
"""

from __future__ import annotations

from collections.abc import Callable

RUN_MODES = ("collective", "ps", "ps-heter")
INF = float("inf")
FINITE = 1.7976931348623157e308  # the largest float: an upper bound that refuses inf


class BadValue(ValueError):
    """Raised by a checker; the caller adds the option name and the value."""


def in_range(
    kind: type, expected: str, low: float, high: float = INF, *, above: bool = False
) -> Callable[[str], int | float]:
    """A checker for numbers of `kind` (int or float) in [low, high] ((low, high] when
    `above`); anything else, NaN included, raises `BadValue(expected)`.

    in_range(int, "expected a port number 1-65535", 1, 65535)("8080") -> 8080
    in_range(float, "expected ... > 0", 0, INF, above=True)("0")       -> BadValue
    """

    def check(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise BadValue(expected) from None
        if not (low < value if above else low <= value) or not value <= high:
            raise BadValue(expected)
        return value

    return check


POSITIVE_INT = in_range(int, "expected a positive integer", 1)
NON_NEGATIVE_INT = in_range(int, "expected an integer >= 0", 0)
PORT = in_range(int, "expected a port number 1-65535", 1, 65535)
# seconds: finite (float("inf") is refused: a timeout of forever is "no timeout", which
# the options that allow it spell by leaving the option out)
POSITIVE_SECONDS = in_range(float, "expected a number of seconds > 0", 0, FINITE, above=True)
NON_NEGATIVE_SECONDS = in_range(float, "expected a number of seconds >= 0", 0, FINITE)
ELASTIC_LEVEL = in_range(int, "expected -1 (off), 0 (fault tolerance) or 1 (scale)", -1, 1)


def nnodes(text: str) -> int | tuple[int, int]:
    """A node count, or torchrun's / Paddle's MIN:MAX: (MIN, MAX) for an elastic range,
    the count for N:N (a fixed job)."""
    expected = "expected a positive integer, or MIN:MAX with 1 <= MIN <= MAX (an elastic range)"
    low, sep, high = text.partition(":")
    try:
        if not sep:
            return POSITIVE_INT(text)
        lo, hi = POSITIVE_INT(low), POSITIVE_INT(high)
    except BadValue:
        raise BadValue(expected) from None
    if lo > hi:
        raise BadValue(f"MIN ({lo}) is above MAX ({hi}); expected MIN:MAX with MIN <= MAX")
    return lo if lo == hi else (lo, hi)


def name_list(text: str) -> tuple[str, ...]:
    """Hosts: names, IPv4 or IPv6 addresses (bracketed or not; kept bare: "[fd00::1]" ->
    "fd00::1")."""
    items = tuple(t.strip() for t in text.split(","))
    if not text.strip() or any(not t or " " in t for t in items):
        raise BadValue("expected a comma-separated list of hosts, e.g. 192.168.0.1,192.168.0.2")
    from paddlike import netaddr

    if any(t.startswith("[") and not netaddr.is_ipv6(t) for t in items):
        raise BadValue("expected an IPv6 address inside [ ], e.g. [fd00::1],[fd00::2]")
    return tuple(netaddr.bare(t) for t in items)


NPROC_KINDS = ("gpu", "cpu", "auto")


def nproc(text: str) -> int | str:
    """A positive count, or torchrun's gpu | cpu | auto."""
    word = text.strip().lower()
    if word in NPROC_KINDS:
        return word
    if word == "xpu":  # torchrun's word for Intel GPUs
        raise BadValue(
            "xpu is refused (no XPUs: paddlike runs on NVIDIA GPUs or CPUs); expected a "
            "positive integer, or gpu, cpu, auto"
        )
    return POSITIVE_INT(text)  # + the option's hint


def gpu_list(text: str) -> tuple[str, ...] | str:
    if text.strip().lower() == "cpu":
        return "cpu"
    items = tuple(t.strip() for t in text.split(","))
    if not text.strip() or any(not t.isdigit() for t in items):
        raise BadValue("expected a comma-separated list of GPU ids, e.g. 0,1, or cpu")
    if len(set(items)) != len(items):
        raise BadValue("expected each GPU id once")
    return tuple(str(int(t)) for t in items)


def host_port(text: str, *, port_required: bool) -> tuple[str, int | None]:
    """host:port, an IPv6 host in brackets ([fd00::1]:6170; `netaddr.split`); the host
    comes back bare."""
    from paddlike import netaddr

    try:
        host, port = netaddr.split(text)
    except ValueError:
        raise BadValue("expected ip:port, an IPv6 address in brackets: [fd00::1]:6170") from None
    if not port and port_required:
        if netaddr.is_ipv6(host):
            raise BadValue("expected [ipv6]:port, the address in brackets: [fd00::1]:6170")
        raise BadValue("expected ip:port entries, e.g. 192.168.0.1:6170,192.168.0.2:6170")
    if not host or " " in host:
        raise BadValue("expected ip[:port] entries, e.g. 192.168.0.1:6170")
    if not port:
        return host, None
    return host, PORT(port)


def servers(text: str) -> tuple[str, ...]:
    items = tuple(t.strip() for t in text.split(","))
    if not text.strip():
        raise BadValue("expected ip:port entries, e.g. 192.168.0.1:6170,192.168.0.2:6170")
    for item in items:
        host_port(item, port_required=True)
    if len(set(items)) != len(items):
        raise BadValue("expected each server endpoint once")
    return items


def workers(text: str) -> tuple[str, ...]:
    items = tuple(t.strip() for t in text.split(","))
    if not text.strip():
        raise BadValue("expected ip[:port] entries, e.g. 192.168.0.1,192.168.0.1,192.168.0.2")
    for item in items:
        host_port(item, port_required=False)
    return items


def one_stage(text: str) -> str:
    """--servers/--workers may use Paddle's stage separator, but name one stage only."""
    if ";" in text:
        n = len(text.split(";"))
        raise BadValue(
            f"lists {n} stages (separated by ';'); servers and CPU trainers are one stage "
            "(stage 1): list the heter stages in --heter_workers"
        )
    return text


def heter_stages(text: str) -> tuple[tuple[str, ...], ...]:
    """Heter stages, e.g. "a:1,b:1;c:2": separated by ';', endpoints within one by ','."""
    stages = tuple(servers(part) for part in text.split(";"))
    flat = [ep for s in stages for ep in s]
    if len(set(flat)) != len(flat):
        raise BadValue("expected each heter endpoint once")
    return stages


def stage_counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(POSITIVE_INT(t.strip()) for t in text.split(";"))
    except BadValue:
        raise BadValue(
            "expected a positive count per heter stage, separated by ';', e.g. 1;2"
        ) from None


HETER_DEVICES = ("cpu", "gpu")


def stage_devices(text: str) -> tuple[str, ...]:
    kinds = tuple(t.strip().lower() for t in text.split(";"))
    if any(k not in HETER_DEVICES for k in kinds):
        raise BadValue("expected one device kind per heter stage, cpu or gpu, e.g. gpu or cpu;gpu")
    return kinds


def one_of(*words: str, expected: str) -> Callable[[str], str]:
    """A checker accepting these words, in any case (`EXCLUDE` is `exclude`, as signal
    names are SIGTERM or sigterm)."""

    def check(text: str) -> str:
        word = text.strip().lower()
        if word not in words:
            raise BadValue(expected)
        return word

    return check


def console(text: str) -> str:
    """--console (--local_ranks_filter): local worker indices, all or none."""
    text = text.strip().lower()
    if text in ("all", "none"):
        return text
    items = [t.strip() for t in text.split(",")]
    if not text or not all(t.isdigit() for t in items):
        raise BadValue("expected 'all', 'none' or a comma-separated list of local worker indices")
    twice = sorted({int(t) for t in items if [int(u) for u in items].count(int(t)) > 1})
    if twice:
        raise BadValue(f"local worker {twice[0]} is listed twice")
    return ",".join(str(int(t)) for t in items)


def master(text: str) -> str:
    """ip:port (port 0: any free port, torchrun's ``localhost:0``; `rules.any_port_master`
    says when that can work), or etcd://host:port[,host:port]; an IPv6 host in brackets,
    [fd00::1]:6170, etcd://[fd00::1]:2379."""
    if text.startswith("etcd://"):
        rest = text[len("etcd://") :]
        if not rest:
            raise BadValue("expected etcd://host:port[,host:port]")
        for item in rest.split(","):
            host_port(item, port_required=True)
        return text
    if text.endswith(":0") and text[:-2] and " " not in text:
        return text
    host_port(text, port_required=True)
    return text


def non_empty(text: str) -> str:
    if not text:
        raise BadValue("expected a non-empty value")
    return text


NUMA_MODES = ("node", "socket", "exclusive", "core-complex")


def numa_mode(text: str) -> str | None:
    """--numa_binding: torchrun's affinity modes, or none (off: the default)."""
    word = text.strip().lower()
    if word in ("none", ""):
        return None
    if word not in NUMA_MODES:
        raise BadValue("expected node, socket, exclusive, core-complex (as in torchrun) or none")
    return word


def cpu_list(text: str) -> tuple[int, ...]:
    """A CPU list as sysfs and numactl write it: "0-3,8,10-11" -> (0, 1, 2, 3, 8, 10, 11)."""
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        low, sep, high = part.partition("-")
        if not (low.isdigit() and (not sep or high.isdigit())) or (sep and int(high) < int(low)):
            raise BadValue("expected CPU numbers and ranges, e.g. 0-3,8,10-11")
        cpus.update(range(int(low), int(high if sep else low) + 1))
    return tuple(sorted(cpus))


CLUSTER_LAUNCHERS = ("ssh", "pdsh", "slurm")
# DeepSpeed's other --launcher values: MPI starters, which start one process per rank
# themselves, where ours start one launcher per host
MPI_LAUNCHERS = ("openmpi", "mvapich", "impi", "mpich")


def cluster_launcher(text: str) -> str:
    """--launcher: ssh, pdsh or slurm; DeepSpeed's MPI ones are refused with the reason."""
    word = text.strip().lower()
    if word in MPI_LAUNCHERS:
        raise BadValue(
            "MPI launchers start every rank themselves, paddlike starts one launcher per host "
            "that starts its workers: use ssh, pdsh or slurm"
        )
    if word not in CLUSTER_LAUNCHERS:
        raise BadValue("expected ssh, pdsh or slurm")
    return word


def variable_names(text: str) -> tuple[str, ...]:
    """--export: environment variable names, comma-separated."""
    names = tuple(t.strip() for t in text.split(","))
    valued = [n.split("=", 1)[0] for n in names if "=" in n]
    if valued and valued[0].isidentifier():  # a value here would be in every user's `ps`
        raise BadValue(
            f"expected variable names, not NAME=VALUE: set it in this shell (export "
            f"{valued[0]}=...) and give --export {valued[0]}; the value travels unseen"
        )
    if not text.strip() or not all(n.isidentifier() and n.isascii() for n in names):
        raise BadValue("expected variable names separated by commas, e.g. NCCL_DEBUG,HF_HOME")
    return names


def name_prefixes(text: str) -> tuple[str, ...]:
    """--export_prefixes: variable-name prefixes, comma-separated; none: no prefix."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(t.strip() for t in text.split(","))
    if not text.strip() or not all(n.isidentifier() and n.isascii() for n in names):
        raise BadValue("expected name prefixes separated by commas, e.g. NCCL,PYTHON, or none")
    return names


# Signals --signals_to_handle cannot take: not catchable, the faults of the launcher's own
# code, the one its children's exits raise, and the real-time ones (SIGRTMIN+4 takes stacks).
_UNHANDLED_SIGNALS = ("SIGKILL", "SIGSTOP", "SIGCHLD", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")


def signal_list(text: str) -> tuple[int, ...]:
    """torchrun's --signals_to_handle: "SIGTERM,SIGUSR1" (the SIG may be left out) -> numbers."""
    import signal  # a builtin module; only when the option is given

    numbers = []
    for word in text.split(","):
        name = word.strip().upper()
        name = name if name.startswith("SIG") else "SIG" + name
        if name.startswith("SIGRT"):  # SIGRTMIN, SIGRTMIN+4, SIGRTMAX-1: every spelling
            raise BadValue("real-time signals are not handled (SIGRTMIN+4 takes stacks)")
        member = signal.Signals.__members__.get(name)
        if member is None:
            raise BadValue(
                f"{word.strip() or 'an empty entry'} is not a signal name; expected a "
                "comma-separated list such as SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
            )
        if name in _UNHANDLED_SIGNALS:
            raise BadValue(f"{name} cannot be handled by the launcher")
        numbers.append(int(member))
    return tuple(dict.fromkeys(numbers))


RUN_MODE = one_of(*RUN_MODES, expected="expected one of " + ", ".join(RUN_MODES))
ON_HANG = one_of("dump", "abort", expected="expected dump or abort")
PREFLIGHT = one_of("off", "on", "full", expected="expected off, on or full")
ON_STRAGGLER = one_of("warn", "exclude", expected="expected warn or exclude")


def straggler_period(text: str) -> float:
    """--straggler_check: 0 (off) or at least a second; each check reads every rank's
    recent collectives, and checks closer together see too few of them to compare (and
    cost a busy launcher's share of a core)."""
    expected = "expected 0 (off) or a number of seconds >= 1"
    try:
        value = NON_NEGATIVE_SECONDS(text)
    except BadValue:
        raise BadValue(expected) from None  # one rule, said one way whatever was typed
    if 0 < value < 1:
        raise BadValue(expected)
    return value


SHARE_ABOVE_ZERO = in_range(float, "expected a share of the step time > 0", 0, FINITE, above=True)


def one_stage_servers(text: str) -> tuple[str, ...]:
    return servers(one_stage(text))


def one_stage_workers(text: str) -> tuple[str, ...]:
    return workers(one_stage(text))


def module_names(text: str) -> tuple[str, ...]:
    """--preload: dotted module names, comma-separated ("torch,transformers.models")."""
    names = tuple(word.strip() for word in text.split(","))
    for name in names:
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise BadValue(
                f"{name or 'an empty entry'} is not a module name; expected a comma-separated "
                "list of modules such as torch,numpy"
            )
        if name.endswith(".py"):  # `--preload train.py`: the script taken as the value
            raise BadValue(
                f"{name} is a script's file name, not a module; --preload takes modules "
                f"before the script (--preload torch {name})"
            )
    return tuple(dict.fromkeys(names))


PREFLIGHT_LIMITS = (
    "bandwidth",
    "rtt",
    "rtt_floor_ms",
    "disk_gb",
    "memory_gb",
    "quarantine_rounds",
    "matmul",
)


def preflight_limits(text: str) -> tuple[tuple[str, float], ...]:
    """--preflight_limits: "bandwidth=0.4,rtt=5" -> (("bandwidth", 0.4), ("rtt", 5.0));
    what the names mean: `launch.health.limits`."""
    pairs = []
    for item in text.split(","):
        name, eq, value = (t.strip() for t in item.partition("="))
        if not eq or name not in PREFLIGHT_LIMITS:
            raise BadValue(
                f"expected name=value pairs with names {', '.join(PREFLIGHT_LIMITS)} "
                "(e.g. bandwidth=0.5,rtt=4)"
            )
        if any(n == name for n, _ in pairs):
            raise BadValue(f"{name} is given twice; give each name once")
        try:
            number = float(value)
        except ValueError:
            commas = "; separate the pairs with commas" if "=" in value else ""
            raise BadValue(f"expected a number for {name}{commas}") from None
        if name == "quarantine_rounds" and not number.is_integer():
            raise BadValue("expected a whole number of rounds for quarantine_rounds")
        if not 0 <= number < INF:
            raise BadValue(f"expected a finite number >= 0 for {name}")
        if name == "bandwidth" and number > 1:
            raise BadValue("expected bandwidth as a fraction of the median, at most 1")
        if name == "rtt" and 0 < number < 1:
            raise BadValue("expected rtt as a multiple of the median, at least 1")
        pairs.append((name, number))
    return tuple(pairs)


# torchrun's words for "a worker per GPU", given to --gpus (or --devices): where they go
_WORKER_PER_GPU = frozenset({"gpu", "gpus", "cuda", "auto", "all"})


def worker_per_gpu_hint(text: str) -> str:
    """What to say after a bad --gpus value that is torchrun's word for a worker per GPU."""
    if text.strip().lower() in _WORKER_PER_GPU:
        return (
            "; for one worker per visible GPU leave it out, or give --nproc_per_node gpu "
            "(as in torchrun)"
        )
    return ""


# the words a switch's variables may hold
FLAG_TRUE = frozenset({"1", "true", "yes", "on"})
FLAG_FALSE = frozenset({"0", "false", "no", "off", ""})
SWITCH_WORDS = "1/true/yes/on, or 0/false/no/off or empty"  # for messages: the two sets
