"""The job's stop step at a preemption notice, agreed through the launchers' store.

Each node publishes the smallest step that none of its ranks has passed
(`distributed.preempt.mark_pending`); the job's stop step is the largest of them, so that
no rank of any node has passed it. A node that does not answer within the deadline is
left out (named): the others still stop together, before the SIGKILL deadline.
"""

from __future__ import annotations

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing (a one-node launch imports this)
if TYPE_CHECKING:
    from paddlike.launch.peers.kv import KV


class StopStep(NamedTuple):
    """The agreed step, and the nodes whose position it could not include."""

    step: int
    missing: tuple[int, ...] = ()


def agree_stop_step(
    kv: KV, round_: int, node: int, nnodes: int, position: int, timeout: float
) -> StopStep:
    """Publish this node's `position` and return the job's stop step: the largest position
    of every node, waiting up to `timeout` for theirs."""
    # (many nodes only: imported already there)
    from paddlike.distributed.store import StoreError
    from paddlike.launch.peers import protocol as p
    from paddlike.launch.peers.kv import get_all

    kv.set(p.stop_step_key(round_, node), str(position).encode())
    keys = [p.stop_step_key(round_, j) for j in range(nnodes)]
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
    missing = tuple(j for j in range(nnodes) if j not in found)
    return StopStep(max(found.values()), missing)
