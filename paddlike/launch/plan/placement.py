"""Where each worker runs and how it is seen, on top of the round's plan: --numa_binding
(its CPUs, `plan.binding`), torchrun's --virtual_local_rank (each worker alone with its
GPUs: LOCAL_RANK=0, CUDA_VISIBLE_DEVICES its own) and torchrun's -t/-r showing one stream
of a worker on the console (`ProcessSpec.console_streams`).

`with_placement` wraps a node job's plan function, so that the preview (--dry_run) and
every round's plan get the same placement. Pure: the NUMA facts are read once, in context.

--virtual_local_rank, as torchrun's: every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES
naming its own GPUs (their physical ids, or the entries of the user's CUDA_VISIBLE_DEVICES),
so code written for one GPU per process (``cuda:0``, ``cuda:LOCAL_RANK``) finds its GPU, and
a worker cannot touch another's. The GPU variables are numbered as the worker now sees
them: FLAGS_selected_gpus and PADDLE_LOCAL_DEVICE_IDS 0 (0,1 for a slice of two), every
entry of PADDLE_WORLD_DEVICE_IDS alike. PADDLE_LOCAL_RANK and PADDLE_RANK_IN_NODE keep the
worker's index on the node: Paddle has no virtual rank, and its scripts number log
files and ports by it.
"""

from __future__ import annotations

from collections.abc import Callable

from paddlike import contract
from paddlike.launch.plan.binding import bind_plan

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.numa import NumaTopology
    from paddlike.launch.context.options.record import LaunchOptions
    from paddlike.launch.plan.plan import JobFacts, LaunchPlan, ProcessSpec
    from paddlike.launch.plan.world import RendezvousResult

    PlanFn = Callable[[RendezvousResult, JobFacts], LaunchPlan]


def virtual_local_ranks(plan: LaunchPlan) -> LaunchPlan:
    """Every trainer of `plan` as --virtual_local_rank shows it (the module's rules)."""
    return plan._replace(processes=tuple(_alone(p) for p in plan.processes))


def _alone(p: ProcessSpec) -> ProcessSpec:
    if p.role.value != "trainer":
        return p
    env = dict(p.env)
    env[contract.LOCAL_RANK] = "0"
    if not p.physical_devices:  # a CPU worker: only its local rank is virtual
        return p._replace(env=dict(sorted(env.items())))
    seen = tuple(str(i) for i in range(len(p.physical_devices)))
    env[contract.CUDA_VISIBLE_DEVICES] = ",".join(p.physical_devices)
    env[contract.SELECTED_GPUS] = env[contract.LOCAL_DEVICE_IDS] = ",".join(seen)
    world = env.get(contract.WORLD_DEVICE_IDS, "")
    if world:  # every trainer now sees its GPUs from 0
        entries = world.split(",")
        env[contract.WORLD_DEVICE_IDS] = ",".join(
            ":".join(str(i) for i in range(len(e.split(":")))) for e in entries
        )
    return p._replace(env=dict(sorted(env.items())), device_ids=seen)


def console_streams(plan: LaunchPlan, shown: tuple[tuple[int, int], ...]) -> LaunchPlan:
    """Each trainer's streams on the console from `LaunchOptions.console_streams` (local
    rank -1: every rank not named)."""
    per_rank = dict(shown)
    rest = per_rank.get(-1, 3)
    return plan._replace(
        processes=tuple(
            p._replace(console_streams=per_rank.get(p.local_index, rest))
            if p.role.value == "trainer"
            else p
            for p in plan.processes
        )
    )


def with_placement(plan: PlanFn, options: LaunchOptions, topology: NumaTopology | None) -> PlanFn:
    """`plan`, its result bound (--numa_binding, given `topology`) and seen as
    --virtual_local_rank says; `plan` itself when neither option is given."""
    mode = options.numa_binding
    bound = mode is not None and topology is not None
    if not (bound or options.virtual_local_rank or options.console_streams):
        return plan

    def placed(result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        out = plan(result, facts)
        if mode is not None and topology is not None:
            out = bind_plan(out, mode, topology, options.bind_core_list, preview=options.dry_run)
        if options.virtual_local_rank:
            out = virtual_local_ranks(out)
        if options.console_streams:
            out = console_streams(out, options.console_streams)
        return out

    return placed
