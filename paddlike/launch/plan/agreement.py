"""Whether the nodes at a rendezvous agree: pure functions over their entries.

Every node runs these on the same entries and so reaches the same verdict; the
rendezvous (`peers.rendezvous`) only carries the entries and the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paddlike.launch.plan.world import NodeEntry, address_key


def who(entry: NodeEntry) -> str:
    """A launcher named so that two on one machine (or in namespaces) are told apart."""
    if entry.hostname and entry.hostname != entry.host:
        return f"{entry.hostname} ({entry.host}, pid {entry.pid})"
    return f"{entry.host} (pid {entry.pid})"


def check_fingerprints(entries: Sequence[NodeEntry]) -> str | None:
    """None when all nodes agree; else one message naming the odd node and the field.

    The odd node is the one outside the majority value of the first differing field
    (ties go to node 0's value), so with two nodes node 1 is named.
    """
    if not entries:
        return None
    fields = list(entries[0].fingerprint)
    for e in entries[1:]:
        fields += [f for f in e.fingerprint if f not in fields]
    for f in fields:
        values = [e.fingerprint.get(f, "<unset>") for e in entries]
        if len(set(values)) == 1:
            continue
        counts = {v: values.count(v) for v in values}
        best = max(counts.values())
        majority = values[0] if counts[values[0]] == best else max(counts, key=counts.__getitem__)
        odd = [e for e, v in zip(entries, values, strict=True) if v != majority]
        ref = next(e for e, v in zip(entries, values, strict=True) if v == majority)
        first = odd[0]
        others = f" (and {len(odd) - 1} more)" if len(odd) > 1 else ""
        return (
            f"rendezvous: {first.label}{others} disagrees on {f}: it has "
            f"{first.fingerprint.get(f, '<unset>')!r}, {ref.label} has {majority!r}; "
            "run the same command on every node"
        )
    return None


def agreed_round_settings(
    max_restarts: int, straggler_check: float, straggler_threshold: float, on_straggler: str
) -> dict[str, str]:
    """The settings every node's round loop must share, as fingerprint fields: with
    other --max_restarts one node restarts while the others end (and it waits for them
    until --rdzv_timeout); the straggler check compares every node's collectives, and its
    verdict acts on all of them. A threshold and action of a check that is off are moot.

    (0, 60.0, 0.1, "warn") -> {"--max_restarts": "0", "--straggler_check": "60",
                               "--straggler_threshold": "0.1", "--on_straggler": "warn"}
    (1, 0.0, 0.5, "exclude") -> {"--max_restarts": "1", "--straggler_check": "0"}
    """
    fields = {"--max_restarts": str(max_restarts), "--straggler_check": f"{straggler_check:g}"}
    if straggler_check > 0:
        fields["--straggler_threshold"] = f"{straggler_threshold:g}"
        fields["--on_straggler"] = on_straggler
    return fields


def claim_message(first: NodeEntry, second: NodeEntry) -> str:
    """Two launchers published an entry for the same node index."""
    theirs, ours = first.fingerprint.get("job_id"), second.fingerprint.get("job_id")
    if theirs and ours and theirs != ours:  # e.g. two `--hostfile` jobs on the same hosts
        return (
            f"rendezvous: the launchers' store reached belongs to job {theirs} (this is job "
            f"{ours}): another job runs on these hosts ({who(first)} holds node index "
            f"{second.index}); give this job its own --master_port / --start_port, or wait "
            "for that job to end"
        )
    return (
        f"rendezvous: two launchers claim node index {second.index}: "
        f"{who(first)} and {who(second)}; check --ips (same order on every node) / "
        "--host / --node_rank on those nodes"
    )


def missing_nodes(nnodes: int, present: Sequence[int]) -> list[int]:
    here = set(present)
    return [i for i in range(nnodes) if i not in here]


def job_id_in_force(entries: Sequence[NodeEntry]) -> str:
    """The common --job_id, or else node 0's generated one."""
    return entries[0].fingerprint.get("job_id") or entries[0].job_id


def first_difference(a: Mapping[str, str], b: Mapping[str, str]) -> str | None:
    """The first fingerprint field (in `a`'s order, then `b`'s) where the two differ."""
    for f in [*a, *(f for f in b if f not in a)]:
        if a.get(f, "<unset>") != b.get(f, "<unset>"):
            return f
    return None


def same_job(a: NodeEntry, b: NodeEntry) -> bool:
    """Whether two node-0 entries look like one job started with --ips in two orders:
    the same set of nodes and the same script."""
    fa, fb = a.fingerprint, b.fingerprint

    def nodes(fp: Mapping[str, str]) -> list[str]:
        return sorted(fp.get("ips", fp.get("nodes", "")).split(","))

    return nodes(fa) == nodes(fb) and fa.get("training script") == fb.get("training script")


def rival_message(mine: NodeEntry, theirs: NodeEntry, address: str) -> str:
    """Two launchers each hosting a rendezvous of their own: say where, and why.

    The usual cause is --ips in another order: each node then finds itself first.
    """
    f = first_difference(theirs.fingerprint, mine.fingerprint) or "ips"
    name = theirs.hostname or theirs.host
    return (
        f"rendezvous: the launcher on {name} ({theirs.host}) disagrees on {f}: it has "
        f"{theirs.fingerprint.get(f, '<unset>')!r}, {mine.hostname or mine.host} ({mine.host}) "
        f"has {mine.fingerprint.get(f, '<unset>')!r}; so both believe they are node 0 and each "
        f"hosts its own rendezvous (the other at {address}); run the same command on every node"
    )


def assign_ranks(arrivals: Sequence[tuple[int, NodeEntry]], nnodes: int) -> list[int] | str:
    """Node ranks for launchers that came without one (the identical command on every
    node): the arrival tickets in node order, or a message when they cannot be given.

    `arrivals`: (arrival ticket, entry); an entry's index is the rank it asks for (the
    store's host asks for 0, --node_rank for its own), -1 when it asks for none. Ranks
    asked for are kept; the others are given, in the order of the address each node
    joined from (numeric), ties by arrival, to the ranks left free.

    (1, b: -1), (2, store host a: 0), (3, 10.0.0.2: -1), (4, 10.0.0.10: -1)
      -> [2, 3, 4]                           (a, then 10.0.0.2, then 10.0.0.10)
    """
    asked: dict[int, NodeEntry] = {}
    by_rank: dict[int, int] = {}
    for ticket, e in arrivals:
        if e.index < 0:
            continue
        if e.index >= nnodes:
            return (
                f"rendezvous: {who(e)} asks for node rank {e.index}, out of range for "
                f"--nnodes {nnodes}; give --node_rank 0..{nnodes - 1} or none"
            )
        if e.index in asked:
            return claim_message(asked[e.index], e)
        asked[e.index], by_rank[e.index] = e, ticket
    free = [r for r in range(nnodes) if r not in by_rank]
    rest = sorted(
        ((t, e) for t, e in arrivals if e.index < 0), key=lambda a: (address_key(a[1].host), a[0])
    )
    for rank, (ticket, _) in zip(free, rest, strict=False):
        by_rank[rank] = ticket
    return [by_rank[r] for r in range(nnodes)]
