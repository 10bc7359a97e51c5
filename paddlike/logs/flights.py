"""Flight records compared across ranks: where the ranks' sequences of collectives part.

A flight record is a rank's last collectives, each with its number within its group
(what every rank of the group must agree on). Two records come here: paddlike's own
runtime's (`paddlike.distributed.progress`) and torch's flight recorder
(`paddlike.logs.torch_flight` turns torch's JSON into the same shape). Pure functions:
the caller passes the records in.

Two findings, per group the ranks share:

- a mismatch: the first number two ranks recorded with different operations (or
  sizes): "rank 1 entered barrier as #1204 (default group); ranks 0, 2–3 are in
  all_reduce #1204". The rank(s) named first are the smaller side; with two equal
  sides (two ranks) the record cannot say which went astray, and the finding says so
  by not being `decisive`.
- ranks behind: ranks that never entered a collective the others are waiting in:
  "rank 1 never entered collective #5 (all_reduce, which ranks 0, 2–3 are waiting in)".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["FlightFinding", "FlightOp", "compare_flights", "flight_findings", "ordinal"]


class FlightOp(Protocol):
    """A flight-record entry (paddlike.distributed.progress.FlightEntry satisfies it)."""

    group_seq: int
    group_id: int
    op: str
    nbytes: int
    dtype: str
    peer: int
    state: str  # "running" | "done" | "failed"


@dataclass(frozen=True)
class FlightFinding:
    """One place where the ranks' records part. `odd`: the smaller side of a mismatch,
    or the ranks behind; `decisive`: the record alone says those ranks are the odd
    ones (a strict minority, or ranks that never entered what the others wait in)."""

    kind: str  # "mismatch" | "behind"
    group_id: int
    seq: int
    odd: tuple[int, ...]
    others: tuple[int, ...]
    decisive: bool
    text: str


def ordinal(n: int) -> str:
    """1 -> '1st', 1204 -> '1,204th'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def ranks_phrase(ranks: Sequence[int]) -> str:
    """[3] -> 'rank 3'; [0, 1, 2, 5] -> 'ranks 0–2, 5'."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"


def rank_ranges(ranks: Sequence[int]) -> str:
    """[0, 1, 2, 4, 5, 7] -> '0–2, 4–5, 7'."""
    out: list[str] = []
    items = sorted(set(ranks))
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}–{items[j]}")
        i = j + 1
    return ", ".join(out)


_PEER_WORD = {"broadcast": "from", "scatter": "from", "recv": "from"}
_PEER_WORD.update(dict.fromkeys(("reduce", "gather", "send"), "to"))


def _op_text(e: FlightOp, with_size: bool) -> str:
    text = e.op
    if with_size and e.nbytes:
        text += f" of {e.nbytes:,} B" + (f" {e.dtype}" if e.dtype else "")
    if e.peer >= 0:
        text += f" {_PEER_WORD.get(e.op, 'with')} rank {e.peer}"
    return text


def _group_words(gid: int) -> str:
    return "default group" if gid == 0 else f"group {gid}"


def compare_flights(flights: Mapping[int, Sequence[FlightOp]]) -> list[str]:
    """The findings' lines ([] when the records agree)."""
    return [f.text for f in flight_findings(flights)]


def flight_findings(flights: Mapping[int, Sequence[FlightOp]]) -> list[FlightFinding]:
    """Per group the ranks share (lowest id first): the first sequence number whose
    operation (or size) differs between ranks, else the ranks behind."""
    out: list[FlightFinding] = []
    by_group: dict[int, dict[int, dict[int, FlightOp]]] = {}
    for rank, entries in flights.items():
        for e in entries:
            by_group.setdefault(e.group_id, {}).setdefault(rank, {})[e.group_seq] = e
    for gid in sorted(by_group):
        ranks = by_group[gid]
        if len(ranks) < 2:
            continue
        found = _mismatch(gid, ranks)
        if found is None:
            found = _behind(gid, ranks)
        if found is not None:
            out.append(found)
    return out


def _mismatch(gid: int, ranks: Mapping[int, Mapping[int, FlightOp]]) -> FlightFinding | None:
    first = _first_mismatch(ranks)
    if first is None:
        return None
    seq, parts = first
    odd_key, odd_ranks = parts[0]
    others = [r for _, rs in parts[1:] for r in rs]
    odd = ranks[odd_ranks[0]][seq]
    text = f"{ranks_phrase(odd_ranks)} entered "
    if len(parts) == 2:
        other_key, other_ranks = parts[1]
        other = ranks[other_ranks[0]][seq]
        with_size = odd_key[0] == other_key[0]
        text += f"{_op_text(odd, with_size)} as #{seq} ({_group_words(gid)}); "
        who = ranks_phrase(other_ranks)
        if other.state == "running":
            text += f"{who} {'is' if len(other_ranks) == 1 else 'are'} in "
            text += f"{_op_text(other, with_size)} #{seq}"
        else:
            text += f"{who} entered {_op_text(other, with_size)} as #{seq}"
        decisive = len(odd_ranks) < len(other_ranks)
    else:
        text += f"{_op_text(odd, True)} as #{seq} ({_group_words(gid)}); the others disagree too: "
        text += ", ".join(
            f"{ranks_phrase(rs)}: {_op_text(ranks[rs[0]][seq], True)}" for _, rs in parts[1:]
        )
        decisive = len(odd_ranks) < min(len(rs) for _, rs in parts[1:])
    return FlightFinding(
        "mismatch", gid, seq, tuple(odd_ranks), tuple(sorted(others)), decisive, text
    )


def _behind(gid: int, ranks: Mapping[int, Mapping[int, FlightOp]]) -> FlightFinding | None:
    last = {r: max(seqs) for r, seqs in ranks.items()}
    top = max(last.values())
    behind = sorted(r for r, s in last.items() if s < top)
    ahead = sorted(r for r, s in last.items() if s == top)
    e = ranks[ahead[0]][top]
    # A rank a collective ahead of a rank that is still finishing the previous one is
    # normal while a job runs; it says something only while the ahead ranks wait.
    if not behind or e.state == "done":
        return None
    where = "" if gid == 0 else f" on group {gid}"
    text = (
        f"{ranks_phrase(behind)} never entered collective #{top}{where} "
        f"({e.op}, which {ranks_phrase(ahead)} "
        f"{'is' if len(ahead) == 1 else 'are'} {_state_words(e.state)}); "
        + "; ".join(_last_words(r, ranks[r][last[r]]) for r in behind[:4])
        + ("; …" if len(behind) > 4 else "")
    )
    return FlightFinding("behind", gid, top, tuple(behind), tuple(ahead), True, text)


def _last_words(rank: int, e: FlightOp) -> str:
    if e.group_seq == 0:  # a member that entered none of the group's collectives yet
        return f"rank {rank} entered none of them"
    return f"rank {rank}'s last was #{e.group_seq} ({e.op}, {e.state})"


def _state_words(state: str) -> str:
    return {"running": "waiting in", "done": "past", "failed": "failed in"}.get(state, state)


def _first_mismatch(
    ranks: Mapping[int, Mapping[int, FlightOp]],
) -> tuple[int, list[tuple[tuple[str, int, str, int], list[int]]]] | None:
    """(seq, [(key, ranks)] smaller side first) for the first seq that two ranks both
    recorded with different operations; None when all agree."""
    seqs = sorted({s for entries in ranks.values() for s in entries})
    for seq in seqs:
        have = {r: entries[seq] for r, entries in ranks.items() if seq in entries}
        if len(have) < 2:
            continue
        keyed: dict[tuple[str, int, str, int], list[int]] = {}
        for r in sorted(have):
            e = have[r]
            keyed.setdefault((e.op, e.nbytes, e.dtype, e.peer), []).append(r)
        if len(keyed) > 1:
            parts = sorted(keyed.items(), key=lambda kv: (len(kv[1]), kv[1][0]))
            return seq, parts
    return None
