"""What training scripts import: `import paddlike.distributed as dist`.

The environment API (get_rank, ...) is imported eagerly and needs only the standard
library. Everything else (collectives, DataParallel, which need numpy; `heartbeat`)
loads on first use, because the launcher imports `paddlike.distributed.store` and must
not pull numpy in with it (nor pay for what it does not use).
"""

from __future__ import annotations

import importlib
from typing import Any

# `config` is OneFlow's flow.config of the node-list form (env.machine, env.ctrl_port);
# spawn is imported eagerly, not lazily: `spawn` is also the name of its module, and a
# lazily loaded module would shadow the function once imported. Both are stdlib only.
from . import config
from .env import (
    ParallelEnv,
    get_local_rank,
    get_local_world_size,
    get_node_size,
    get_rank,
    get_world_size,
)
from .spawn import (
    MultiprocessContext,
    ProcessExitedException,
    ProcessRaisedException,
    SpawnContext,
    SpawnError,
    spawn,
    start_processes,
)

# fmt: off
_LAZY = {
    # collective operations and types
    **dict.fromkeys(
        [
            "all_gather",
            "all_reduce",
            "all_to_all",
            "alltoall",
            "barrier",
            "broadcast",
            "gather",
            "irecv",
            "isend",
            "recv",
            "reduce",
            "reduce_scatter",
            "scatter",
            "send",
            "ReduceOp",
            "Group",
            "Task",
            "CollectiveError",
            "CollectiveTimeoutError",
            "GroupMembershipError",
            "PeerExitedError",
        ],
        ".collective",
    ),
    **dict.fromkeys(
        [
            "init_parallel_env",
            "destroy_process_group",
            "is_initialized",
            "new_group",
            "get_group",
            "get_backend",
        ],
        ".parallel",
    ),
    **dict.fromkeys(["DataParallel", "all_reduce_gradients"], ".data_parallel"),
}
# The global view (placement, SBP, global arrays); kept apart from _LAZY, which lists
# exactly the collective and parallel API.
_LAZY_GLOBAL_VIEW = dict.fromkeys(
    ["placement", "sbp", "global_array", "to_global", "ones", "zeros", "full", "arange", "randn"],
    ".global_view",
)
# The progress heartbeat (stdlib only); after the first use `dist.heartbeat` is a plain
# module attribute, so the per-step call pays no lookup.
_LAZY_PROGRESS = {
    "heartbeat": ".progress",
    "should_stop": ".preempt",
    "restartable": ".restartable",
    "RoundInterrupted": ".restartable",
}
# fmt: on

__all__ = [
    "ParallelEnv",
    "get_local_rank",
    "get_local_world_size",
    "get_node_size",
    "get_rank",
    "get_world_size",
    "heartbeat",
    "should_stop",
    "restartable",
    "RoundInterrupted",
    "MultiprocessContext",
    "ProcessExitedException",
    "ProcessRaisedException",
    "SpawnContext",
    "SpawnError",
    "config",
    "spawn",
    "start_processes",
    *sorted(_LAZY),
    *sorted(_LAZY_GLOBAL_VIEW),
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name) or _LAZY_GLOBAL_VIEW.get(name) or _LAZY_PROGRESS.get(name)
    if module is None:
        raise AttributeError(f"module 'paddlike.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_GLOBAL_VIEW) | set(_LAZY_PROGRESS))
