"""Collective communication: operations, groups and the backends (cpu, nccl) behind them."""

from .errors import CollectiveError, CollectiveTimeoutError, GroupMembershipError, PeerExitedError
from .group import Group
from .ops import (
    all_gather,
    all_reduce,
    all_to_all,
    alltoall,
    barrier,
    broadcast,
    gather,
    irecv,
    isend,
    recv,
    reduce,
    reduce_scatter,
    scatter,
    send,
)
from .reduce_op import ReduceOp
from .task import Task

__all__ = [
    "CollectiveError",
    "CollectiveTimeoutError",
    "Group",
    "GroupMembershipError",
    "PeerExitedError",
    "ReduceOp",
    "Task",
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
]
