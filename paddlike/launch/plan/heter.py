"""ps-heter's pipeline of stages: who sits in which stage and what each process is told.

Stage 1 is the CPU trainers; heter stages are 2..N+1, each a list of heter-trainer
endpoints with one device kind. Pure functions from endpoints to environment variables
(issue 16's table, which `paddlike.distributed.ps.stage` reads back), and
`plan_ps_heter`, which puts them on top of a PS plan and adds this node's heter trainers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paddlike import contract, netaddr
from paddlike.launch.plan.plan import (
    JobFacts,
    LaunchPlan,
    ProcessSpec,
    PsLayout,
    Role,
    error_file_env,
    log_names,
)
from paddlike.launch.plan.ps_plan import plan_ps, ps_common_env

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.jobspec import PlanSpec


def plan_ps_heter(spec: PlanSpec, layout: PsLayout, facts: JobFacts) -> LaunchPlan:
    """`plan_ps`'s servers and trainers with the stage variables, then this node's heter
    trainers (a plain PS plan when the layout has no heter stage)."""
    base = plan_ps(spec, layout, facts)
    stages = layout.heter_stages
    if not stages:
        return base
    every = common_env(layout.trainers, stages)
    processes = []
    for process in base.processes:
        env = {**process.env, **every}
        if process.role is Role.TRAINER:
            env.update(trainer_env(stages))
        processes.append(process._replace(env=dict(sorted(env.items()))))
    common = {**ps_common_env(spec, layout, facts), **every}
    processes += _heter_processes(spec, layout, facts, common)
    return base._replace(
        run_mode="ps-heter",
        processes=tuple(processes),
        heter_endpoints=tuple(ep for s in stages for ep in s),
    )


def _heter_processes(
    spec: PlanSpec, layout: PsLayout, facts: JobFacts, common: Mapping[str, str]
) -> list[ProcessSpec]:
    """This node's heter trainers: rank = place in the list of every heter trainer
    (stage 2 first), heterlog.N numbered on this node; a gpu stage's trainers take GPUs
    0, 1, ... in the order the stage lists them on this node."""
    argv = spec.argv(facts.python)
    out: list[ProcessSpec] = []
    rank = 0
    for k, members in enumerate(layout.heter_stages):
        on_node = 0
        for ep in members:
            host, port = netaddr.split(ep)
            if host == layout.host:
                stage = heter_trainer_env(
                    layout.trainers, layout.heter_stages, layout.heter_devices, k + 2, on_node
                )
                env = {
                    **common,
                    **stage,
                    contract.PADDLE_PORT: port,
                    contract.POD_IP: host,
                    contract.CURRENT_ENDPOINT: ep,
                }
                gpu = (str(on_node),) if layout.heter_devices[k] == "gpu" else ()
                log, err = log_names(Role.HETER, len(out), spec.split_logs)
                env = dict(sorted({**env, **error_file_env(facts, log)}.items()))
                out.append(ProcessSpec(Role.HETER, rank, len(out), gpu, ep, env, argv, log, err))
                on_node += 1
            rank += 1
    return out


def stage_counts(trainers: Sequence[str], stages: Sequence[Sequence[str]]) -> list[int]:
    """Trainers per stage, stage 1 (the CPU trainers) first: [2, 1] for 2 trainers and
    one heter stage of 1."""
    return [len(trainers), *(len(s) for s in stages)]


def common_env(trainers: Sequence[str], stages: Sequence[Sequence[str]]) -> dict[str, str]:
    """What every role of a ps-heter job gets (servers included)."""
    return {
        contract.ALL_HETER_TRAINER_IP_PORT_LIST: ",".join(ep for s in stages for ep in s),
        contract.STAGE_NUM: str(len(stages) + 1),
        contract.STAGE_TRAINERS_NUM: str(stage_counts(trainers, stages)),
    }


def trainer_env(stages: Sequence[Sequence[str]]) -> dict[str, str]:
    """A CPU trainer's place: stage 1, nothing before it, stage 2 after it."""
    return {
        contract.STAGE_ID: "1",
        contract.PREVIOUS_HETER_TRAINER_IP_PORT_LIST: "",
        contract.NEXT_HETER_TRAINER_IP_PORT_LIST: ",".join(stages[0]),
        contract.HETER_DEVICE_TYPE: "cpu",
    }


def heter_trainer_env(
    trainers: Sequence[str],
    stages: Sequence[Sequence[str]],
    devices: Sequence[str],
    stage: int,
    gpu: int,
) -> dict[str, str]:
    """Heter stage `stage` (2..N+1): the stage before it (stage 2's are the CPU trainers),
    the one after it ("" for the last), its device kind; `gpu` is the GPU of a gpu stage's
    trainer (its index among the stage's trainers on its node)."""
    k = stage - 2
    previous = trainers if k == 0 else stages[k - 1]
    following = stages[k + 1] if k + 1 < len(stages) else ()
    env = {
        contract.TRAINING_ROLE: contract.ROLE_HETER_TRAINER,
        contract.PADDLE_ROLE: contract.ROLE_HETER_TRAINER,
        contract.STAGE_ID: str(stage),
        contract.PREVIOUS_HETER_TRAINER_IP_PORT_LIST: ",".join(previous),
        contract.NEXT_HETER_TRAINER_IP_PORT_LIST: ",".join(following),
        contract.HETER_DEVICE_TYPE: devices[k],
    }
    if devices[k] == "gpu":
        env[contract.SELECTED_GPUS] = str(gpu)
    return env
