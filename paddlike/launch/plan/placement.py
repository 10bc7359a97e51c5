"""Where each worker runs and how it is seen, on top of the round's plan: --numa_binding
(its CPUs, `plan.binding`) and torchrun's -t/-r showing one stream of a worker on the
console (`ProcessSpec.console_streams`). (--virtual_local_rank changes what a worker is
told, so it is part of its environment, made once: `plan.plan.plan_collective`.)

`place` applies them in order; `run.job.JobRun.plan` (every round) and `main.describe`
(the preview) call it after the planner. Pure: the NUMA facts are read once, in context.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.jobspec import Placement
    from paddlike.launch.plan.plan import LaunchPlan


def place(plan: LaunchPlan, placement: Placement | None) -> LaunchPlan:
    """`plan` bound to its CPUs (--numa_binding, given the topology) and with each
    trainer's console streams; `plan` itself without a placement."""
    if placement is None:
        return plan
    if placement.binds:  # (the NUMA code is loaded only for the jobs that bind)
        from paddlike.launch.plan.binding import bind_plan

        plan = bind_plan(
            plan,
            placement.numa_binding,  # type: ignore[arg-type]
            placement.topology,  # type: ignore[arg-type]
            placement.bind_core_list,
            preview=placement.preview,
        )
    if placement.console_streams:
        plan = console_streams(plan, placement.console_streams)
    return plan


def console_streams(plan: LaunchPlan, shown: tuple[tuple[int, int], ...]) -> LaunchPlan:
    """Each trainer's streams on the console from `Placement.console_streams` (local
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
