"""What training scripts import: `import paddlike.distributed as dist`.

The environment API (get_rank, ...) is imported eagerly and needs only the standard
library. Everything else (collectives, DataParallel, which need numpy) loads on first
use, because the launcher imports `paddlike.distributed.store` and must not pull numpy
in with it.
"""

from __future__ import annotations

import importlib
from typing import Any

from .env import (
    ParallelEnv,
    get_local_rank,
    get_local_world_size,
    get_node_size,
    get_rank,
    get_world_size,
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
            "DataParallel",
            "all_reduce_gradients",
        ],
        ".parallel",
    ),
}
# fmt: on

__all__ = [
    "ParallelEnv",
    "get_local_rank",
    "get_local_world_size",
    "get_node_size",
    "get_rank",
    "get_world_size",
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'paddlike.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
