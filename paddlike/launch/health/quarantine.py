"""Quarantine (issue 35): a node whose processes or launcher ended `quarantine_rounds`
rounds of an elastic job (2 by default, `--preflight_limits quarantine_rounds=N`, 0:
never) is left out of the next round where the job can do without it.

The list lives in the launchers' store (node 0's or etcd), one key a node address:

| key                        | written by                      | value                        |
| -------------------------- | ------------------------------- | ---------------------------- |
| ``quarantine/<address>``   | every member, as its round ends | the rounds that node ended   |
|                            | (compare-and-set, idempotent)   | (JSON list)                  |

Every member of round r writes before it joins round r+1's rendezvous, and that
rendezvous completes only when all of them came, so every node of round r+1 reads the
same list (`read_rounds`) and reaches the same decision.

A round counts against a node when its cause names the node and is a process's failure
(a worker's exit, a hang's odd rank) or the node's loss (its launcher killed, its
network cut); a node that left on a signal (a preemption) or was left out by the check
is not held against.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from paddlike.distributed.store import StoreError
from paddlike.launch.peers.kv import KV
from paddlike.launch.plan.world import node_label
from paddlike.summary import RootCause

DEFAULT_ROUNDS = 2
_CAS_TRIES = 20


def quarantine_key(host: str) -> str:
    return f"quarantine/{host}"


def counts_against(cause: RootCause | None) -> bool:
    """Whether a round's cause is held against the node it names."""
    if cause is None or not cause.host or cause.node_index is None:
        return False
    return cause.role is not None or cause.membership == "lost"


def note_round_end(kv: KV, round_: int, cause: RootCause | None) -> None:
    """Add `round_` to the rounds the cause's node ended (once, whoever writes first)."""
    if not counts_against(cause):
        return
    key = quarantine_key(cause.host)  # type: ignore[union-attr]
    try:
        current = kv.try_get(key)
        for _ in range(_CAS_TRIES):
            rounds = json.loads(current) if current else []
            if round_ in rounds:
                return
            desired = json.dumps(sorted([*rounds, round_])).encode()
            got = kv.compare_set(key, current, desired)
            if got == desired:
                return
            current = got
    except (StoreError, ValueError):
        return  # (the store went: there is no next round to leave the node out of)


def read_rounds(kv: KV, hosts: Sequence[str]) -> dict[str, list[int]]:
    """Each address's rounds held against it (addresses with none left out)."""
    out = {}
    for host in dict.fromkeys(hosts):
        try:
            raw = kv.try_get(quarantine_key(host))
            rounds = json.loads(raw) if raw else []
        except (StoreError, ValueError):
            rounds = []
        if rounds:
            out[host] = rounds
    return out


def quarantined(
    rounds: Mapping[str, Sequence[int]], hosts: Sequence[str], limit: int
) -> list[tuple[int, str]]:
    """The nodes (index, line) to leave out: those that ended `limit` rounds or more. Pure.

    >>> quarantined({"10.0.0.3": [0, 2]}, ["10.0.0.1", "10.0.0.3"], 2)
    [(1, 'node 1 (10.0.0.3): quarantined: its processes or launcher ended 2 rounds (0, 2)')]
    """
    if limit <= 0:
        return []
    out = []
    for i, host in enumerate(hosts):
        held = list(rounds.get(host, ()))
        if len(held) >= limit:
            which = ", ".join(map(str, held))
            line = (
                f"{node_label(i, hosts)}: quarantined: its processes or launcher ended "
                f"{len(held)} rounds ({which})"
            )
            out.append((i, line))
    return out
