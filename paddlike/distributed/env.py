"""Where this worker stands in the job, read from the launcher's environment contract.

Outside a launch every reader describes a world of one (rank 0 of 1) instead of
failing, so a script runs unchanged on a laptop. A value that is present but not a
number is an error naming the variable: a silent rank 0 would make two workers
believe they are both rank 0.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from paddlike import contract as C
from paddlike import netaddr

# OneFlow's node list in the script (`dist.env.machine(...)` reads as `flow.env.machine`);
# kept in `nodelist` with the rest of the node-list form (stdlib only).
from .envint import EnvironmentContractError, env_int
from .nodelist import ctrl_port, machine

__all__ = [
    "ParallelEnv",
    "ctrl_port",
    "env_int",
    "get_local_rank",
    "get_local_world_size",
    "get_node_size",
    "get_rank",
    "get_world_size",
    "machine",
    "master_address",
]


_int = env_int


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def get_rank(environ: Mapping[str, str] | None = None) -> int:
    """Global rank of this worker (PADDLE_TRAINER_ID, then RANK); 0 outside a launch."""
    return _int(_env(environ), (C.TRAINER_ID, C.GLOBAL_RANK, C.RANK), 0)


def get_world_size(environ: Mapping[str, str] | None = None) -> int:
    """Number of workers in the job (PADDLE_TRAINERS_NUM, then WORLD_SIZE); 1 outside."""
    return _int(_env(environ), (C.TRAINERS_NUM, C.GLOBAL_SIZE, C.WORLD_SIZE), 1)


def get_local_rank(environ: Mapping[str, str] | None = None) -> int:
    """Index of this worker on its node; 0 outside a launch."""
    return _int(_env(environ), (C.RANK_IN_NODE, C.PADDLE_LOCAL_RANK, C.LOCAL_RANK), 0)


def get_local_world_size(environ: Mapping[str, str] | None = None) -> int:
    """Number of workers on this node; 1 outside a launch."""
    env = _env(environ)
    size = _int(env, (C.PADDLE_LOCAL_SIZE, C.LOCAL_WORLD_SIZE), 0)
    if size:
        return size
    # Older launchers set only the world size and node count.
    return max(1, get_world_size(env) // max(1, get_node_size(env)))


def get_node_size(environ: Mapping[str, str] | None = None) -> int:
    """Number of nodes in the job (PADDLE_NNODES); derived from the endpoints if unset."""
    env = _env(environ)
    nnodes = _int(env, (C.NNODES,), 0)
    if nnodes:
        return nnodes
    endpoints = _endpoints(env)
    return max(1, len({netaddr.split(ep)[0] for ep in endpoints if _parses(ep)}))


def _parses(endpoint: str) -> bool:
    try:
        netaddr.split(endpoint)
    except ValueError:
        return False
    return True


def _endpoints(env: Mapping[str, str]) -> list[str]:
    return [ep.strip() for ep in env.get(C.TRAINER_ENDPOINTS, "").split(",") if ep.strip()]


def master_address(environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """(host, port) of rank 0's runtime store: PADDLE_MASTER, else MASTER_ADDR:MASTER_PORT."""
    env = _env(environ)
    raw = env.get(C.PADDLE_MASTER, "").strip()
    if raw:
        try:
            host, port = netaddr.split(raw)
        except ValueError:
            host, port = "", ""
        if not host or not port.isdigit():
            raise EnvironmentContractError(
                f"environment variable {C.PADDLE_MASTER}={raw!r} is not host:port "
                f"(an IPv6 address in brackets: [fd00::1]:6170)"
            )
        return host, int(port)
    addr = netaddr.bare(env.get(C.MASTER_ADDR, "").strip())  # fd00::1, [fd00::1] alike
    port_raw = env.get(C.MASTER_PORT, "").strip()
    if addr and port_raw:
        if not port_raw.isdigit():
            raise EnvironmentContractError(
                f"environment variable {C.MASTER_PORT}={port_raw!r} is not a port number"
            )
        return addr, int(port_raw)
    return None


@dataclass(frozen=True)
class ParallelEnv:
    """A snapshot of the contract, named like Paddle's `paddle.distributed.ParallelEnv`."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    nnodes: int
    device_id: int
    current_endpoint: str
    trainer_endpoints: tuple[str, ...]

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = _env(environ)
        endpoints = tuple(_endpoints(env))
        rank = get_rank(env)
        current = env.get(C.CURRENT_ENDPOINT, "").strip()
        if not current and rank < len(endpoints):
            current = endpoints[rank]
        # The GPU: Paddle's FLAGS_selected_gpus (its first entry), else the local rank, which
        # is what torchrun's and Kubeflow's environments give (one GPU per local rank).
        gpus = env.get(C.SELECTED_GPUS, "").strip().split(",")[0]
        local_rank = get_local_rank(env)
        device_id = _int({C.SELECTED_GPUS: gpus}, (C.SELECTED_GPUS,), local_rank)
        values = {
            "rank": rank,
            "world_size": get_world_size(env),
            "local_rank": local_rank,
            "local_world_size": get_local_world_size(env),
            "nnodes": get_node_size(env),
            "device_id": device_id,
            "current_endpoint": current,
            "trainer_endpoints": endpoints,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)
        if not 0 <= rank < self.world_size:
            raise EnvironmentContractError(
                f"rank {rank} is outside the world of {self.world_size} workers "
                f"({C.TRAINER_ID}/{C.RANK} and {C.TRAINERS_NUM}/{C.WORLD_SIZE} disagree)"
            )

    # Paddle's spellings.
    @property
    def nranks(self) -> int:
        return self.world_size

    @property
    def dev_id(self) -> int:
        return self.device_id

    @property
    def trainer_id(self) -> int:
        return self.rank
