"""The job's stop step at a preemption notice, agreed through the launchers' store.

Each node publishes the smallest step that none of its ranks has passed
(`distributed.preempt.mark_pending`); the job's stop step is the largest of them, so that
no rank of any node has passed it. A node that does not answer within the deadline is
left out (named): the others still stop together, before the SIGKILL deadline.
"""

from __future__ import annotations

import contextlib

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing (a one-node launch imports this)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from paddlike.launch.peers.kv import KV


class StopStep(NamedTuple):
    """The agreed step, and the nodes whose position it could not include."""

    step: int
    missing: tuple[int, ...] = ()


def agree_stop_step(
    connect: Callable[[], KV], keys: Sequence[str], node: int, position: int, timeout: float
) -> StopStep:
    """Publish this node's `position` under its key (`keys[node]`: `protocol.stop_step_key`,
    one per node of the round) and return the job's stop step: the largest position of every
    node, waiting up to `timeout` for theirs. On a connection of its own (`connect`): it
    runs on a thread of its own."""
    with contextlib.closing(connect()) as kv:
        return _agree(kv, keys, node, position, timeout)


def _agree(kv: KV, keys: Sequence[str], node: int, position: int, timeout: float) -> StopStep:
    # (many nodes only: imported already there)
    from paddlike.distributed.store import StoreError
    from paddlike.launch.peers.kv import get_all

    kv.set(keys[node], str(position).encode())
    try:
        return StopStep(max(int(v) for v in get_all(kv, keys, timeout)))
    except StoreError:
        pass  # a node did not answer in time: the others' positions, what is there
    found: dict[int, int] = {}
    for j, key in enumerate(keys):
        try:
            raw = kv.try_get(key)
        except StoreError:
            raw = None
        if raw is not None:
            found[j] = int(raw)
    found.setdefault(node, position)
    missing = tuple(j for j in range(len(keys)) if j not in found)
    return StopStep(max(found.values()), missing)
