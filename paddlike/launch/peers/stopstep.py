"""The job's stop step at a preemption notice, agreed through the launchers' store.

Each node publishes the smallest step that none of its ranks has passed
(`distributed.preempt.mark_pending`); the job's stop step is the largest of them, so that
no rank of any node has passed it. A node that does not answer within the deadline is
left out (named): the others still stop together, before the SIGKILL deadline.

After the round, each node's outcome (which of its ranks did not stop at the step:
`run.preempt`) goes to the others the same way: written before the node's end mark
(`share_outcome`), so that a node that has read every end mark finds every part that
will ever come (`gather_outcomes`, waiting up to a deadline for the rest; before it says
it read the round's end: node 0's store closes once every node said so). A node whose
part is not there (its launcher was lost, or did not write it in time) is named as
such: its ranks' outcome is unknown, never counted as stopped.
"""

from __future__ import annotations

import contextlib

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing (a one-node launch imports this)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from paddlike.launch.peers.kv import KV


# How long a node waits, once every node's end mark is there, for a part not read yet:
# each part is written before its node's end mark, so one missing then was not written.
OUTCOME_TIMEOUT = 2.0


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


def share_outcome(kv: KV, key: str, part: Mapping[str, Any]) -> bool:
    """This node's part of the outcome (plain JSON types) under its key
    (`protocol.stop_outcome_key`), before its end mark; False when the store is gone
    (the others then say that this node's outcome is unknown)."""
    import json

    from paddlike.distributed.store import StoreError

    try:
        kv.set(key, json.dumps(part, separators=(",", ":")).encode())
    except StoreError:
        return False
    return True


def gather_outcomes(
    kv: KV,
    keys: Sequence[str],
    ends: tuple[Sequence[str], bytes],
    hosts: Sequence[str],
    node: int,
    timeout: float,
    unreachable: str = "",
) -> list[dict[str, Any]]:
    """Every other node's part (`keys[j]`), in node order, once the round's end marks
    were read (`ends`: their keys, and the mark of a lost node, `protocol.END_LOST`). A
    part not there is waited for until `timeout` from now, unless its node's end mark is
    there (it comes after the part: lost, or ended without one); one that does not come is
    ``{"node": j, "node_host": hosts[j], "unknown": why}``. `unreachable`: why the store
    cannot be asked (this node lost contact with it): every part is unknown at once."""
    import json
    import time

    from paddlike.distributed.store import StoreError, StoreTimeoutError
    from paddlike.launch.peers.kv import get_all

    end_keys, lost = ends
    deadline = time.monotonic() + timeout
    out: list[dict[str, Any]] = []
    gone = unreachable  # the store stopped answering: nothing more to read
    others = [j for j in range(len(keys)) if j != node]
    found: dict[int, bytes] = {}
    if not gone:  # as a rule every part is there: one call for all (node 0's store, etcd)
        with contextlib.suppress(StoreError):  # one is missing: each on its own, below
            found = dict(zip(others, get_all(kv, [keys[j] for j in others], 0.001), strict=True))
    for j in others:
        why, raw = gone, found.get(j)
        if not gone and raw is None:
            try:
                raw = kv.try_get(keys[j])
                mark = kv.try_get(end_keys[j]) if raw is None else None
                if raw is None and mark == lost:
                    why = "its launcher was lost"
                elif raw is None and mark:  # its part comes before its end mark, or never
                    why = "its launcher ended its round without saying"
                elif raw is None:
                    raw = kv.get(keys[j], timeout=max(0.001, deadline - time.monotonic()))
            except StoreTimeoutError:
                why = f"no word from its launcher within {timeout:g} s"
            except StoreError as exc:
                why = gone = f"the launchers' store did not answer ({exc})"
        if raw is not None:
            try:
                out.append({**json.loads(raw), "node": j, "node_host": hosts[j]})
                continue
            except ValueError:
                why = "its word could not be read"
        out.append({"node": j, "node_host": hosts[j], "unknown": why})
    return out
