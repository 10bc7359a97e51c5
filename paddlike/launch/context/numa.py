"""This node's NUMA layout, read from sysfs: which CPUs each NUMA node has, which node
each GPU hangs off, and which CPUs share a socket, a core or a last-level cache.

--numa_binding needs these facts; `plan.binding` decides from them without I/O. Where
each one comes from:

    a GPU's PCI address    /proc/driver/nvidia/gpus/<address>/ (one directory per GPU, in
                           PCI order = NVML's index order); else the devices bound to the
                           driver, /sys/bus/pci/drivers/nvidia/<address>
    its NUMA node          /sys/bus/pci/devices/<address>/numa_node (-1: the firmware did
                           not say; on a one-node machine that is node 0)
    a node's CPUs          /sys/devices/system/node/node<N>/cpulist, only those this
                           launcher may run on (os.sched_getaffinity: a container's or
                           Slurm's cpuset is respected)
    a CPU's socket         /sys/devices/system/cpu/cpu<C>/topology/physical_package_id
    a CPU's core           .../topology/thread_siblings_list (the first sibling names it)
    a CPU's L3             .../cache/index<I>/shared_cpu_list of the highest level

A fact that cannot be read is left out (a GPU with no node, a CPU alone in its core and
cache), so the plan says what it could not place instead of failing here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping

from paddlike.launch import NamedTuple

SYS = "/sys"
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"
_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class NumaTopology(NamedTuple):
    """The facts --numa_binding places workers by (every mapping keyed by number)."""

    node_cpus: Mapping[int, tuple[int, ...]]  # NUMA node -> its CPUs this launcher may use
    gpu_nodes: Mapping[str, int]  # physical GPU index ("0", "1", ...) -> its NUMA node
    cpu_socket: Mapping[int, int]  # CPU -> physical package
    cpu_core: Mapping[int, int]  # CPU -> its core (the core's first hardware thread)
    cpu_cache: Mapping[int, int]  # CPU -> its last-level cache (the first CPU sharing it)
    notes: tuple[str, ...] = ()  # what could not be read, for the banner


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """sysfs's list form: "0-3,8,10-11\\n" -> (0, 1, 2, 3, 8, 10, 11); "" -> ()."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(cpus))


def cpu_list_text(cpus: Iterable[int]) -> str:
    """The inverse, as numactl and taskset print it: (0, 1, 2, 3, 8) -> "0-3,8"."""
    ordered = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(runs)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def gpu_addresses(gpus_dir: str = NVIDIA_GPUS_DIR, sys_root: str = SYS) -> tuple[str, ...]:
    """The NVIDIA GPUs' PCI addresses in PCI order, which is NVML's index order."""
    for where in (gpus_dir, os.path.join(sys_root, "bus/pci/drivers/nvidia")):
        try:
            names = sorted(n for n in os.listdir(where) if _PCI_ADDRESS.match(n))
        except OSError:
            continue
        if names:
            return tuple(n.lower() for n in names)
    return ()


def read_topology(
    *,
    sys_root: str = SYS,
    gpus_dir: str = NVIDIA_GPUS_DIR,
    allowed: Iterable[int] | None = None,
) -> NumaTopology:
    """This node's NUMA facts (see the module's table). `allowed`: the CPUs this launcher
    may use (default: its own affinity)."""
    may_use = set(os.sched_getaffinity(0) if allowed is None else allowed)
    notes: list[str] = []
    node_dir = os.path.join(sys_root, "devices/system/node")
    node_cpus: dict[int, tuple[int, ...]] = {}
    try:
        entries = os.listdir(node_dir)
    except OSError:
        entries = []
    for name in sorted(entries):
        if not re.fullmatch(r"node\d+", name):
            continue
        text = _read(os.path.join(node_dir, name, "cpulist"))
        cpus = tuple(c for c in parse_cpu_list(text or "") if c in may_use)
        if cpus:  # a node of memory only (or of CPUs this launcher may not use) hosts none
            node_cpus[int(name[4:])] = cpus
    if not node_cpus:  # no NUMA in sysfs (a kernel without it): one node of every CPU
        notes.append(f"{node_dir} lists no node: all CPUs taken as node 0")
        node_cpus[0] = tuple(sorted(may_use))
    gpu_nodes: dict[str, int] = {}
    for index, address in enumerate(gpu_addresses(gpus_dir, sys_root)):
        text = _read(os.path.join(sys_root, "bus/pci/devices", address, "numa_node"))
        node = int(text) if text is not None and text.lstrip("-").isdigit() else None
        if node is not None and node < 0 and len(node_cpus) == 1:
            node = next(iter(node_cpus))  # one node: the firmware's -1 can only mean it
        if node is None or node < 0:
            notes.append(f"GPU {index} ({address}): NUMA node unknown")
            continue
        gpu_nodes[str(index)] = node
    cpu_dir = os.path.join(sys_root, "devices/system/cpu")
    cpus = sorted({c for cs in node_cpus.values() for c in cs})
    return NumaTopology(
        node_cpus=node_cpus,
        gpu_nodes=gpu_nodes,
        cpu_socket=_per_cpu(cpus, cpu_dir, _socket),
        cpu_core=_per_cpu(cpus, cpu_dir, _core),
        cpu_cache=_per_cpu(cpus, cpu_dir, _last_cache),
        notes=tuple(notes),
    )


def _per_cpu(
    cpus: Iterable[int], cpu_dir: str, read: Callable[[str], int | None]
) -> dict[int, int]:
    found = {}
    for cpu in cpus:
        value = read(os.path.join(cpu_dir, f"cpu{cpu}"))
        if value is not None:
            found[cpu] = value
    return found


def _socket(cpu_path: str) -> int | None:
    text = _read(os.path.join(cpu_path, "topology/physical_package_id"))
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _core(cpu_path: str) -> int | None:
    siblings = parse_cpu_list(_read(os.path.join(cpu_path, "topology/thread_siblings_list")) or "")
    return siblings[0] if siblings else None


def _last_cache(cpu_path: str) -> int | None:
    """The first CPU of those sharing this CPU's highest-level data (or unified) cache."""
    cache_dir = os.path.join(cpu_path, "cache")
    try:
        names = [n for n in os.listdir(cache_dir) if re.fullmatch(r"index\d+", n)]
    except OSError:
        return None
    best: tuple[int, int] | None = None  # (level, first sharing CPU)
    for name in names:
        where = os.path.join(cache_dir, name)
        if _read(os.path.join(where, "type")) not in ("Unified", "Data"):
            continue
        level = _read(os.path.join(where, "level"))
        shared = parse_cpu_list(_read(os.path.join(where, "shared_cpu_list")) or "")
        if level is None or not level.isdigit() or not shared:
            continue
        if best is None or int(level) > best[0]:
            best = (int(level), shared[0])
    return None if best is None else best[1]
