"""Every key the workers write in the runtime store (rank 0's, at PADDLE_MASTER), in one place.

    paddlike/r<restart>/i<incarnation>           a runtime: one per launch round and init
      store-ready                                 rank 0's store belongs to this runtime
      leaving/count, leaving/all                  the two-phase leave of destroy_process_group
      g<gid>/...                                  a group from init_parallel_env / new_group
      gv/<rank>-<rank>-.../...                    a group of the global view (by its ranks)

Under a group's prefix, each communicator's setup:

    nonce, addr/<rank>                            TCP mesh: the group's nonce, each listener
    host/<rank>, host<i>/..., leaders/...         CPU: each rank's host; one host's ranks; leaders
    shm/<rank>, shm-mapped                        shared memory: each file; how many mapped it
    nccl-uid, nccl-gpu/<gpu>, nccl-alive/<rank>,  NCCL: the unique id, each GPU's claimant, the
    nccl-shared, nccl-read/<rank>                 setup barrier, two ranks on one GPU, its readers
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "group",
    "host_of",
    "host_ranks",
    "leaders",
    "leaving",
    "mesh_address",
    "mesh_nonce",
    "nccl_alive",
    "nccl_gpu",
    "nccl_read",
    "nccl_shared",
    "nccl_uid",
    "placement_group",
    "runtime",
    "shm_file",
    "shm_mapped",
    "store_ready",
]


def runtime(restart: str, incarnation: int) -> str:
    return f"paddlike/r{restart}/i{incarnation}"


def store_ready(prefix: str) -> str:
    return f"{prefix}/store-ready"


def leaving(prefix: str, what: str) -> str:
    """"count", "all", or "store-closed" (never set: waited on until the store closes)."""
    return f"{prefix}/leaving/{what}"


def group(prefix: str, gid: int) -> str:
    return f"{prefix}/g{gid}"


def placement_group(prefix: str, ranks: Iterable[int]) -> str:
    return f"{prefix}/gv/{'-'.join(map(str, ranks))}"


# --- under a group's prefix -----------------------------------------------------------


def mesh_nonce(prefix: str) -> str:
    return f"{prefix}/nonce"


def mesh_address(prefix: str, rank: int) -> str:
    return f"{prefix}/addr/{rank}"


def host_of(prefix: str, rank: int) -> str:
    return f"{prefix}/host/{rank}"


def host_ranks(prefix: str, index: int) -> str:
    """The prefix of the ranks of one host (the `index`-th host of the group)."""
    return f"{prefix}/host{index}"


def leaders(prefix: str) -> str:
    """The prefix of the hosts' leaders."""
    return f"{prefix}/leaders"


def shm_file(prefix: str, rank: int) -> str:
    return f"{prefix}/shm/{rank}"


def shm_mapped(prefix: str) -> str:
    return f"{prefix}/shm-mapped"


def nccl_uid(prefix: str) -> str:
    return f"{prefix}/nccl-uid"


def nccl_alive(prefix: str, rank: int) -> str:
    return f"{prefix}/nccl-alive/{rank}"


def nccl_gpu(prefix: str, gpu: str) -> str:
    return f"{prefix}/nccl-gpu/{gpu}"


def nccl_shared(prefix: str) -> str:
    return f"{prefix}/nccl-shared"


def nccl_read(prefix: str, rank: int) -> str:
    return f"{prefix}/nccl-read/{rank}"


def nccl_usable(prefix: str, rank: int) -> str:
    return f"{prefix}/nccl-usable/{rank}"
