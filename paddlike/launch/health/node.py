"""This node's own check: free space where the logs go, memory available, the job's
network interface up, and its GPUs (`nvml`). Each finding is one phrase naming the
figure and the limit; the job's verdict (`verdict`) puts the node's name before it.
"""

from __future__ import annotations

import os

from paddlike.launch import NamedTuple
from paddlike.launch.health.limits import Limits
from paddlike.launch.health.nvml import GpuSource, gpu_faults

MEMINFO = "/proc/meminfo"
NET_CLASS = "/sys/class/net"
_UP_STATES = ("up", "unknown")  # "unknown": lo and some virtual links that are up


class NodeFacts(NamedTuple):
    """What the node check read (None: could not be read here)."""

    disk_free: int | None  # bytes free to an unprivileged writer of the log directory
    memory_available: int | None  # bytes, MemAvailable
    interface_state: str | None  # operstate of the job's interface
    gpus: int | None  # GPUs NVML reports; None without NVML
    gpu_faults: tuple[str, ...] = ()


def read_facts(
    log_dir: str,
    interface: str,
    gpu_source: GpuSource | None,
    *,
    meminfo: str = MEMINFO,
    net_class: str = NET_CLASS,
) -> NodeFacts:
    """Read the node's facts (I/O only; `node_problems` judges them)."""
    try:
        st = os.statvfs(log_dir)
        disk: int | None = st.f_bavail * st.f_frsize
    except OSError:
        disk = None
    memory = None
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    memory = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        memory = None
    state = None
    if interface:
        try:
            with open(os.path.join(net_class, interface, "operstate"), encoding="ascii") as f:
                state = f.read().strip()
        except OSError:
            state = None
    readings = gpu_source.read() if gpu_source is not None else None
    if readings is None:
        return NodeFacts(disk, memory, state, None)
    return NodeFacts(disk, memory, state, len(readings), tuple(gpu_faults(readings)))


def node_problems(facts: NodeFacts, limits: Limits, log_dir: str, interface: str) -> list[str]:
    """What is wrong with this node, one phrase each; [] when nothing. Pure.

    >>> node_problems(NodeFacts(10**8, 8 * 10**9, "up", None), Limits(), "/l", "eth0")
    ['0.10 GB free in /l (needs 1.00 GB: --preflight_limits disk_gb)']
    """
    problems = []
    if facts.disk_free is not None and facts.disk_free < limits.disk:
        problems.append(
            f"{facts.disk_free / 1e9:.2f} GB free in {log_dir} "
            f"(needs {limits.disk / 1e9:.2f} GB: --preflight_limits disk_gb)"
        )
    if facts.memory_available is not None and facts.memory_available < limits.memory:
        problems.append(
            f"{facts.memory_available / 1e9:.2f} GB of memory available "
            f"(needs {limits.memory / 1e9:.2f} GB: --preflight_limits memory_gb)"
        )
    if facts.interface_state is not None and facts.interface_state not in _UP_STATES:
        problems.append(f"the job's interface {interface} is {facts.interface_state}")
    problems.extend(facts.gpu_faults)
    return problems
