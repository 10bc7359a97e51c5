"""Parameter-server mode's plan: this node's servers and trainers from a `PsLayout`, the
environment Paddle's fleet reads (`plan.heter` adds ps-heter's stages on top). Pure, as
`plan.plan` is.
"""

from __future__ import annotations

from paddlike import contract, netaddr
from paddlike.launch.plan.plan import (
    JobFacts,
    LaunchPlan,
    ProcessSpec,
    PsLayout,
    Role,
    error_file_env,
    ifname_env,
    launcher_env,
    log_names,
    no_proxy_env,
)

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.jobspec import PlanSpec


def _paddle_gloo_env(layout: PsLayout) -> dict[str, str]:
    """What Paddle's fleet needs to start its gloo in PS mode (barrier_worker, all_reduce)."""
    if not layout.gloo_endpoint:
        return {}
    return {
        contract.PADDLE_WITH_GLOO: "1",
        contract.PADDLE_GLOO_RENDEZVOUS: "3",
        contract.PADDLE_GLOO_HTTP_ENDPOINT: layout.gloo_endpoint,
    }


def ps_common_env(spec: PlanSpec, layout: PsLayout, facts: JobFacts) -> dict[str, str]:
    """What every process of a PS job gets, whatever its role."""
    servers, trainers = layout.servers, layout.trainers
    heters = (ep for s in layout.heter_stages for ep in s)
    node_hosts = layout.node_hosts or tuple(
        dict.fromkeys(netaddr.split(e)[0] for e in (*servers, *trainers, *heters))
    )
    return {
        contract.PSERVERS_IP_PORT_LIST: ",".join(servers),
        contract.TRAINER_ENDPOINTS: ",".join(trainers),
        contract.TRAINERS_NUM: str(len(trainers)),
        contract.NNODES: str(layout.nnodes),
        contract.GROUP_RANK: str(layout.node_index),
        contract.NODE_RANK: str(layout.node_index),
        contract.DISTRI_BACKEND: "gloo",
        **_paddle_gloo_env(layout),
        **no_proxy_env(facts, node_hosts),
        **ifname_env(facts),
        **launcher_env(spec, facts, node_hosts),
    }


def plan_ps(spec: PlanSpec, layout: PsLayout, facts: JobFacts) -> LaunchPlan:
    """This node's servers (first, so they listen before trainers connect) and trainers
    (`plan.heter.plan_ps_heter` adds the heter stages on top)."""
    servers, trainers = layout.servers, layout.trainers
    local_trainers = [i for i, e in enumerate(trainers) if netaddr.split(e)[0] == layout.host]
    common = ps_common_env(spec, layout, facts)
    argv = spec.argv(facts.python)
    split = spec.split_logs
    processes = []
    local = 0
    for rank, ep in enumerate(servers):
        host, port = netaddr.split(ep)
        if host != layout.host:
            continue
        env = {
            **common,
            contract.TRAINING_ROLE: contract.ROLE_PSERVER,
            contract.PADDLE_ROLE: contract.ROLE_PSERVER,
            contract.PADDLE_PORT: port,
            contract.POD_IP: host,
            contract.CURRENT_ENDPOINT: ep,
        }
        log, err = log_names(Role.SERVER, local, split)
        env.update(error_file_env(facts, log))
        processes.append(
            ProcessSpec(Role.SERVER, rank, local, (), ep, dict(sorted(env.items())), argv, log, err)
        )
        local += 1
    for local, rank in enumerate(local_trainers):
        ep = trainers[rank]
        host, port = netaddr.split(ep)
        env = {
            **common,
            contract.TRAINING_ROLE: contract.ROLE_TRAINER,
            contract.PADDLE_ROLE: contract.ROLE_TRAINER,
            contract.TRAINER_ID: str(rank),
            contract.GLOBAL_RANK: str(rank),
            contract.RANK: str(rank),
            contract.WORLD_SIZE: str(len(trainers)),
            contract.GLOBAL_SIZE: str(len(trainers)),
            contract.RANK_IN_NODE: str(local),
            contract.PADDLE_LOCAL_RANK: str(local),
            contract.LOCAL_RANK: str(local),
            contract.PADDLE_LOCAL_SIZE: str(len(local_trainers)),
            contract.LOCAL_WORLD_SIZE: str(len(local_trainers)),
            contract.PADDLE_PORT: port,  # Paddle's fleet.init() requires it of trainers too
            contract.POD_IP: host,
            contract.CURRENT_ENDPOINT: ep,
        }
        log, err = log_names(Role.TRAINER, local, split)
        env.update(error_file_env(facts, log))
        processes.append(
            ProcessSpec(
                Role.TRAINER, rank, local, (), ep, dict(sorted(env.items())), argv, log, err
            )
        )
    return LaunchPlan(
        job_id=facts.job_id,
        run_mode="ps",
        node_index=layout.node_index,
        nnodes=layout.nnodes,
        host=layout.host,
        processes=tuple(processes),
        trainer_endpoints=trainers,
        server_endpoints=servers,
    )
