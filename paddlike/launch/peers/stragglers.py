"""The straggler check's traffic through the launchers' store (many nodes, issue 37).

| key                        | written by          | value                                   |
| -------------------------- | ------------------- | --------------------------------------- |
| ``stragglers/<r>/node/<i>`` | node i, each check | its ranks' recent collectives, deflated |
|                            | (not node 0)        | JSON (`run.stragglerwatch.NodeArrivals`) |
| ``stragglers/<r>/exclude/<i>`` | node 0        | `--on_straggler exclude`: node i leaves |
| ``stragglers/<r>/found``    | node 0, each check  | what it found: who it named, when,      |
|                            | that judged         | its host (JSON), for the other nodes'   |
|                            |                     | summaries                               |

Node 0 reads every other node's latest part at its own check, without waiting: a node
whose part is not there yet (its first check has not come) is left out of that check.
The other nodes read node 0's finding at each of their checks, and once more at the
round's end (`run.stragglerwatch`), so that their log directories say what was found.
The channel opens a connection of its own on first use, from the check's thread.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Callable

from paddlike.distributed.store import StoreError
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.kv import KV

TYPE_CHECKING = False  # typing's, without importing typing (the launcher's start-up)
if TYPE_CHECKING:
    from typing import Any

    from paddlike.launch.peers.stackreq import StackChannel


class StoreChannel:
    """One node's end: `publish` and `heard` (other nodes), `gather` and `announce`
    (node 0)."""

    def __init__(
        self, connect: Callable[[], KV], *, round_: int, node_index: int, nnodes: int
    ) -> None:
        self._connect = connect
        self._kv: KV | None = None
        self.round = round_
        self.node_index = node_index
        self.nnodes = nnodes

    def _store(self) -> KV:
        if self._kv is None:
            self._kv = self._connect()
        return self._kv

    def publish(self, part: dict[str, Any]) -> None:
        """This node's part (plain JSON types); a store gone away is the job watch's to
        notice, not the check's."""
        body = zlib.compress(json.dumps(part, separators=(",", ":")).encode())
        with contextlib.suppress(StoreError):
            self._store().set(p.stragglers_node_key(self.round, self.node_index), body)

    def gather(self) -> list[dict[str, Any]]:
        """Every other node's latest part that is there now."""
        out = []
        for j in range(self.nnodes):
            if j == self.node_index:
                continue
            try:
                raw = self._store().try_get(p.stragglers_node_key(self.round, j))
            except StoreError:
                continue
            if raw is not None:
                out.append(json.loads(zlib.decompress(raw)))
        return out

    def announce(self, found: dict[str, Any]) -> None:
        """Node 0: what its check found (plain JSON types), for the other nodes."""
        body = json.dumps(found, separators=(",", ":")).encode()
        with contextlib.suppress(StoreError):
            self._store().set(p.stragglers_found_key(self.round), body)

    def heard(self) -> dict[str, Any] | None:
        """Another node: node 0's latest finding, None before its first (or no store)."""
        try:
            raw = self._store().try_get(p.stragglers_found_key(self.round))
            return json.loads(raw) if raw is not None else None
        except (StoreError, ValueError):
            return None

    def exclude(self, node_index: int) -> None:
        """Node 0: `--on_straggler exclude` tells node `node_index` to leave."""
        with contextlib.suppress(StoreError):
            self._store().set(p.stragglers_exclude_key(self.round, node_index), b"1")

    def excluded(self) -> int | None:
        """This node's index when node 0 told it to leave, else None."""
        try:
            told = self._store().try_get(p.stragglers_exclude_key(self.round, self.node_index))
        except StoreError:
            return None
        return self.node_index if told is not None else None

    def close(self) -> None:
        if self._kv is not None:
            self._kv.close()
            self._kv = None


def store_channel(stacks: StackChannel | None) -> StoreChannel | None:
    """The round's channel, beside its stack requests (None on one node)."""
    if stacks is None:
        return None
    return StoreChannel(
        stacks.connect, round_=stacks.round, node_index=stacks.node_index, nnodes=stacks.nnodes
    )
