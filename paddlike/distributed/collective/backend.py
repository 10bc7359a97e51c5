"""The interface every backend's communicator implements (one communicator per group).

Ranks here are group ranks (0..size-1); arguments are already checked and output lists
already allocated by `ops`, so a backend only moves and reduces bytes. Every method
finishes before `deadline` (time.monotonic()) or raises an error naming the late peer.
"""

from __future__ import annotations

import abc
from typing import Any

from .reduce_op import ReduceOp

__all__ = ["Communicator"]


class Communicator(abc.ABC):
    name: str
    rank: int
    size: int

    @abc.abstractmethod
    def all_reduce(self, x: Any, op: ReduceOp, deadline: float, out: Any = None) -> None:
        """Reduce `x` across the group into `x`, or into `out` (same shape and dtype) leaving
        `x` unchanged."""

    @abc.abstractmethod
    def broadcast(self, x: Any, root: int, deadline: float) -> None: ...

    @abc.abstractmethod
    def reduce(self, x: Any, root: int, op: ReduceOp, deadline: float) -> None: ...

    @abc.abstractmethod
    def all_gather(self, outs: list[Any], x: Any, deadline: float) -> None: ...

    @abc.abstractmethod
    def gather(self, x: Any, outs: list[Any] | None, root: int, deadline: float) -> None: ...

    @abc.abstractmethod
    def scatter(self, x: Any, ins: list[Any] | None, root: int, deadline: float) -> None: ...

    @abc.abstractmethod
    def reduce_scatter(self, out: Any, ins: list[Any], op: ReduceOp, deadline: float) -> None: ...

    @abc.abstractmethod
    def all_to_all(self, outs: list[Any], ins: list[Any], deadline: float) -> None: ...

    @abc.abstractmethod
    def send(self, x: Any, peer: int, deadline: float) -> None: ...

    @abc.abstractmethod
    def recv(self, x: Any, peer: int, deadline: float) -> None: ...

    @abc.abstractmethod
    def barrier(self, deadline: float, leaving: bool = False) -> None:
        """`leaving`: the runtime's exit barrier, told apart on the wire where it can be."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release everything at a clean teardown."""

    def abort(self) -> None:
        """Release everything after an error, without waiting for peers."""
        self.close()
