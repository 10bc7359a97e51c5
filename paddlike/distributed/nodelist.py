"""OneFlow's node list in the script: a job formed without a launcher command.

Every node runs the same ``python3 train.py``; the script says where the nodes are::

    dist.env.machine([{"addr": "198.18.0.1"}, {"addr": "198.18.0.2"}])
    dist.env.ctrl_port(9988)
    dist.config.device_num(2)          # alias gpu_device_num
    dist.init_parallel_env()           # parallel.init_parallel_env calls start_if_configured

At `init_parallel_env()` the process that ran the script becomes this node's launcher:
it describes the job exactly as ``python -m paddlike.launch --ips A,B --master A:9988
--nproc_per_node 2 train.py ARGS`` would (this node's index from its own address, node 0
the master, the launchers' rendezvous on node 0's ctrl_port, the usual log directory)
and supervises `n` children that re-run the same script with the launched environment
(and `PADDLIKE_NODELIST_WORKER=1`, so that their `init_parallel_env()` joins the job
instead of starting another). When the job ends the supervising process exits with the
launcher's exit code: nothing after `init_parallel_env()` runs twice on a node.

Errors are the launcher's own lines (node not in the list, two matches, a duplicate
address, configurations that differ across nodes), raised as ValueError before anything
starts; a call after the environment is initialised only warns.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from paddlike import netaddr

__all__ = [
    "WORKER_MARK",
    "configured",
    "ctrl_port",
    "device_num",
    "gpu_device_num",
    "machine",
    "start_if_configured",
]

# Set in the children's environment: "you are a worker of the node-list job".
WORKER_MARK = "PADDLIKE_NODELIST_WORKER"
_LAUNCHED = "PADDLE_TRAINER_ENDPOINTS"  # present under any launch


class _NodeList:
    """What the script said so far (a plain class: dataclasses costs the package ~5 ms)."""

    def __init__(self) -> None:
        self.addrs: tuple[str, ...] | None = None
        self.port: int | None = None
        self.devices: int | None = None
        self.started = False  # this process supervised the job, or is one of its workers


_state = _NodeList()


def _initialised() -> bool:
    if _state.started:
        return True
    parallel = sys.modules.get("paddlike.distributed.parallel")
    runtime = getattr(parallel, "runtime", None)
    return getattr(runtime, "default", None) is not None


def _too_late(call: str) -> bool:
    if _initialised():
        warnings.warn(
            f"{call}: called after init_parallel_env(); the job's configuration is fixed "
            "once the environment is initialised, so this call has no effect",
            stacklevel=3,
        )
        return True
    return False


def machine(nodes: Sequence[Mapping[str, Any]]) -> None:
    """OneFlow's ``flow.env.machine``: every node of the job, node 0 first (the master)."""
    if _too_late("env.machine"):
        return
    if isinstance(nodes, (str, bytes, Mapping)) or not isinstance(nodes, Sequence) or not nodes:
        raise ValueError(
            "env.machine: expected a non-empty list of {'addr': ...} entries, one per node, "
            f"got {nodes!r}"
        )
    addrs = []
    for i, node in enumerate(nodes):
        addr = node.get("addr") if isinstance(node, Mapping) else None
        extra = sorted(set(node) - {"addr"}) if isinstance(node, Mapping) else []
        if not isinstance(addr, str) or not addr.strip() or " " in addr.strip() or extra:
            raise ValueError(
                f"env.machine: entry {i} must be {{'addr': 'host or IP'}} and nothing else, "
                f"got {node!r}"
            )
        addrs.append(netaddr.bare(addr.strip()))  # --ips takes hosts unbracketed
    _state.addrs = tuple(addrs)


def ctrl_port(port: int) -> None:
    """OneFlow's ``flow.env.ctrl_port``: the port on node 0 where the nodes' launchers meet."""
    if _too_late("env.ctrl_port"):
        return
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"env.ctrl_port: expected a port number 1-65535, got {port!r}")
    _state.port = port


def device_num(n: int) -> None:
    """OneFlow's ``flow.config.gpu_device_num``: workers per node (one per device)."""
    if _too_late("config.device_num"):
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"config.device_num: expected a positive integer, got {n!r}")
    _state.devices = n


gpu_device_num = device_num


def configured() -> bool:
    """Did the script give a node list or a device count?"""
    return _state.addrs is not None or _state.devices is not None


def _script_argv() -> list[str]:
    """How to run this script again: ``-m NAME ARGS`` or ``PATH ARGS``."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        if name.endswith(".__main__"):
            name = name[: -len(".__main__")]
        return ["-m", name, *sys.argv[1:]]
    path = getattr(main, "__file__", None)
    if not path or not sys.argv or sys.argv[0] in ("", "-c"):
        raise ValueError(
            "env.machine: the node-list form re-runs this script in every worker, and this "
            "is not a script file (python -c, a notebook or the REPL); put the code in a file"
        )
    # As typed (every node's fingerprint carries the script, and the same relative path is
    # the same on every node), unless the working directory has changed since.
    script = sys.argv[0] if os.path.isfile(sys.argv[0]) else os.path.abspath(path)
    return [script, *sys.argv[1:]]


def launch_argv() -> list[str]:
    """The launcher command line this node list means (what `start_if_configured` runs)."""
    argv: list[str] = []
    if _state.addrs is not None:
        if len(_state.addrs) > 1 and _state.port is None:
            raise ValueError(
                f"env.ctrl_port: needed with {len(_state.addrs)} machines (the port on node 0, "
                f"{_state.addrs[0]}, where the nodes meet); call env.ctrl_port(PORT) with the "
                "same port on every node"
            )
        argv += ["--ips", ",".join(_state.addrs)]
    if _state.port is not None and _state.addrs:  # where the nodes meet: Paddle's --master
        argv += ["--master", netaddr.join(_state.addrs[0], _state.port)]
    elif _state.port is not None:
        argv += ["--master_port", str(_state.port)]
    if _state.devices is not None:
        argv += ["--nproc_per_node", str(_state.devices)]
    return [*argv, *_script_argv()]


def start_if_configured(environ: Mapping[str, str] | None = None) -> None:
    """Called by `init_parallel_env()`: a worker of the node-list job (or a script without
    a node list) returns at once; the script's first process runs the job as this node's
    launcher and exits with its code (SystemExit)."""
    env = os.environ if environ is None else environ
    if not configured() or _state.started:
        return
    if env.get(WORKER_MARK):
        _state.started = True
        return
    if env.get(_LAUNCHED):
        _state.started = True
        warnings.warn(
            "env.machine/config.device_num: this script runs under a launcher, whose "
            "configuration wins; the node list in the script is ignored",
            stacklevel=3,
        )
        return
    from paddlike.launch.context.options import UsageError
    from paddlike.launch.main import describe
    from paddlike.launch.run.ports import PortError

    argv = launch_argv()
    try:
        described = describe(argv, env)
    except (UsageError, PortError) as exc:
        raise ValueError(f"{exc} (the node list as launcher options: {' '.join(argv)})") from None
    from paddlike.launch.run.job import run_job

    _state.started = True
    code = run_job(described.run, described.job, {**env, WORKER_MARK: "1"})
    sys.stdout.flush()
    raise SystemExit(code)


def _reset() -> None:
    """Forget the node list (tests)."""
    global _state
    _state = _NodeList()
