"""--numa_binding: which CPUs (and which NUMA node's memory) each worker gets, from the
node's NUMA facts (`context.numa.NumaTopology`). Pure: tested as tables.

A worker's home is the NUMA node of its GPU (of its GPUs, when a worker has a slice of
several; torchrun's rule: the GPU whose index is the worker's). CPU workers have no GPU:
they are spread over the nodes in blocks, in local-rank order (4 workers on 2 nodes: 0,
0, 1, 1), so neighbours in rank order, which talk the most in a ring, share a node.
Then, as torchrun's modes (torch.numa.binding.AffinityMode):

    node          every CPU of the home node
    socket        every CPU of the home node's socket (all its nodes)
    exclusive     the home node's cores split among the workers at home there, in rank
                  order, the first ones one core more when they do not divide evenly; a
                  core's hardware threads stay together
    core-complex  one last-level cache (an L3: AMD's CCX, a CPU die) of the home node per
                  worker, the biggest first, round-robin when there are more workers

Every mode also gives the worker its home node's memory as the preferred one (the kernel
falls back to other nodes when it is full, where numactl --membind would kill the job).
DeepSpeed's --bind_core_list limits every choice to those CPUs; --bind_cores_to_rank is
`exclusive`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paddlike.launch import NamedTuple
from paddlike.launch.context.numa import NumaTopology, cpu_list_text
from paddlike.launch.context.options.record import UsageError

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.plan import LaunchPlan


class Binding(NamedTuple):
    """One worker's place: the CPUs it may run on and the NUMA nodes they belong to (its
    preferred memory is the first); `home` says why, for the banner and --dry_run."""

    cpus: tuple[int, ...]
    nodes: tuple[int, ...]
    home: str  # "GPU 3's NUMA node 1", "NUMA node 0 (CPU workers in blocks)"

    def text(self) -> str:
        """``cpus 0-15 (GPU 0's NUMA node 0)``"""
        return f"cpus {cpu_list_text(self.cpus)} ({self.home})"


def _refuse(why: str) -> UsageError:
    return UsageError(f"--numa_binding: {why}", "--numa_binding")


def _homes(
    gpus_per_worker: Sequence[Sequence[str]], topology: NumaTopology, nodes: Sequence[int]
) -> list[tuple[tuple[int, ...], str]]:
    """Each worker's home nodes and why: its GPUs' nodes, or a block of the nodes."""
    cpu_workers = [i for i, gpus in enumerate(gpus_per_worker) if not gpus]
    homes: list[tuple[tuple[int, ...], str]] = []
    for i, gpus in enumerate(gpus_per_worker):
        if not gpus:
            k = cpu_workers.index(i) * len(nodes) // len(cpu_workers)
            homes.append(((nodes[k],), f"NUMA node {nodes[k]}, CPU workers in blocks"))
            continue
        found = set()
        for gpu in gpus:
            if gpu not in topology.gpu_nodes:
                raise _refuse(
                    f"GPU {gpu}'s NUMA node is unknown (its /sys/bus/pci/devices/<address>/"
                    "numa_node could not be read); drop --numa_binding on this node"
                )
            node = topology.gpu_nodes[gpu]
            if node not in nodes:
                raise _refuse(
                    f"GPU {gpu} is on NUMA node {node}, which has no CPU this launcher may "
                    "use (its affinity or --bind_core_list); use --numa_binding socket or "
                    "widen the CPU set"
                )
            found.add(node)
        ordered = tuple(sorted(found))
        where = ",".join(map(str, ordered))
        name = f"GPU {','.join(gpus)}'s NUMA node{'s' if len(ordered) > 1 else ''} {where}"
        homes.append((ordered, name))
    return homes


def _split(cpus: Sequence[int], by: Mapping[int, int]) -> list[tuple[int, ...]]:
    """CPUs grouped by a key (core, cache; a CPU without one is its own), in key order."""
    groups: dict[int, list[int]] = {}
    for cpu in sorted(cpus):
        groups.setdefault(by.get(cpu, cpu), []).append(cpu)
    return [tuple(groups[key]) for key in sorted(groups)]


def bind_workers(
    mode: str,
    gpus_per_worker: Sequence[Sequence[str]],
    topology: NumaTopology,
    core_list: Sequence[int] | None = None,
) -> tuple[Binding, ...]:
    """Each worker's `Binding` under `mode` (node, socket, exclusive, core-complex).

    `gpus_per_worker`: per worker (local rank order) its physical GPU indices, () for a
    CPU worker. Raises `UsageError` naming --numa_binding when a worker cannot be placed.
    """
    allowed = set(core_list) if core_list is not None else None
    node_cpus = {
        n: tuple(c for c in cpus if allowed is None or c in allowed)
        for n, cpus in sorted(topology.node_cpus.items())
    }
    node_cpus = {n: cpus for n, cpus in node_cpus.items() if cpus}
    if not node_cpus:
        raise _refuse("no CPU left to bind to (--bind_core_list names none this launcher may use)")
    nodes = sorted(node_cpus)
    node_of = {c: n for n, cpus in node_cpus.items() for c in cpus}
    homes = _homes(gpus_per_worker, topology, nodes)
    chosen: list[tuple[int, ...]] = []
    if mode in ("node", "socket"):
        for home, _ in homes:
            cpus = [c for n in home for c in node_cpus[n]]
            if mode == "socket":
                sockets = {topology.cpu_socket.get(c, -1) for c in cpus}
                cpus = [c for c in node_of if topology.cpu_socket.get(c, -1) in sockets]
            chosen.append(tuple(sorted(cpus)))
    elif mode in ("exclusive", "core-complex"):
        chosen = [()] * len(homes)
        for home in dict.fromkeys(h for h, _ in homes):  # each home, its workers in order
            workers = [i for i, (h, _) in enumerate(homes) if h == home]
            cpus = [c for n in home for c in node_cpus[n]]
            if mode == "exclusive":
                cores = _split(cpus, topology.cpu_core)
                if len(cores) < len(workers):
                    raise _refuse(
                        f"exclusive: NUMA node {','.join(map(str, home))} has {len(cores)} "
                        f"core{'s' if len(cores) != 1 else ''} for {len(workers)} workers; "
                        "use --numa_binding node (shared cores) or fewer workers"
                    )
                per, extra = divmod(len(cores), len(workers))
                start = 0
                for j, worker in enumerate(workers):
                    take = per + (1 if j < extra else 0)
                    chosen[worker] = tuple(
                        sorted(c for core in cores[start : start + take] for c in core)
                    )
                    start += take
            else:
                caches = sorted(_split(cpus, topology.cpu_cache), key=lambda g: (-len(g), g[0]))
                for j, worker in enumerate(workers):
                    chosen[worker] = caches[j % len(caches)]
    else:
        raise ValueError(f"unknown NUMA binding mode {mode!r}")
    return tuple(
        Binding(cpus, tuple(sorted({node_of[c] for c in cpus})), why)
        for cpus, (_, why) in zip(chosen, homes, strict=True)
    )


def _unreadable(gpus_per_worker: Sequence[Sequence[str]], topology: NumaTopology) -> str | None:
    """The first GPU whose NUMA node this machine could not read; None when all are known."""
    return next((g for gpus in gpus_per_worker for g in gpus if g not in topology.gpu_nodes), None)


def bind_plan(
    plan: LaunchPlan,
    mode: str,
    topology: NumaTopology,
    core_list: Sequence[int] | None = None,
    *,
    preview: bool = False,
) -> LaunchPlan:
    """`plan` with every process's CPUs and memory nodes set (`ProcessSpec.cpus`,
    `ProcessSpec.numa_nodes`), in the plan's order of processes.

    `preview` (--dry_run): a GPU whose NUMA node cannot be read here (a plan made on a
    machine without the node's GPUs) does not refuse the plan: the binding is shown as
    decided on the node, and a real launch there refuses it if it still cannot read it.
    """
    gpus_per_worker = [p.physical_devices for p in plan.processes]
    unknown = _unreadable(gpus_per_worker, topology) if preview else None
    if unknown is not None:
        why = f"decided on the node (GPU {unknown}'s NUMA node not readable here)"
        return plan._replace(processes=tuple(p._replace(binding=why) for p in plan.processes))
    bindings = bind_workers(mode, gpus_per_worker, topology, core_list)
    processes = tuple(
        p._replace(cpus=b.cpus, numa_nodes=b.nodes, binding=b.text())
        for p, b in zip(plan.processes, bindings, strict=True)
    )
    return plan._replace(processes=processes)
