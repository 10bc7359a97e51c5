"""SBP signatures: for each operator, which input SBPs it computes on locally and the SBP
of its output (OneFlow's "SBP signature"). Pure functions, tested as tables.

An operator lists its legal signatures per placement axis. When the inputs' SBPs match
none, the candidate that boxes the fewest operands wins, then the one whose boxing sends
the fewest bytes per rank, then the first listed. Boxing *into* P is never chosen
automatically (it moves nothing, but only defers a reduction): so P + B boxes P to B,
P * B stays P, and S(0) + B slices the B operand for free.

Per placement axis of size k, for an operand of N bytes:

    boxing      collective       bytes sent per rank
    same        -                0
    B -> S      local slice      0
    S -> B      all_gather       N (k-1)/k
    P -> S      reduce_scatter   N (k-1)/k
    P -> B      all_reduce       2 N (k-1)/k
    S -> S'     all_to_all       N (k-1)/k^2
    X -> P      (not automatic)  -
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import GlobalViewError
from .sbp import Sbp, Split, broadcast, fmt, partial_sum

__all__ = [
    "MATMUL",
    "Signature",
    "boxing_cost",
    "choose",
    "elementwise",
    "elementwise_candidates",
    "matmul",
    "reduce_sbp",
    "reshape_sbp",
    "transpose_sbp",
]

S0, S1, B, P = Split(0), Split(1), broadcast, partial_sum
INF = math.inf

# (x, w) -> out; the order breaks ties.
MATMUL: tuple[tuple[tuple[Sbp, Sbp], Sbp], ...] = (
    ((S0, B), S0),
    ((B, S1), S1),
    ((S1, S0), P),
    ((B, B), B),
    ((P, B), P),
    ((B, P), P),
)

Candidate = tuple[tuple[Sbp | None, ...], Sbp]  # required SBP per operand (None: scalar), out


@dataclass(frozen=True)
class Signature:
    """What the operands must be boxed to (per operand, one SBP per placement axis; None
    for a scalar) and the output's SBP."""

    inputs: tuple[tuple[Sbp, ...] | None, ...]
    output: tuple[Sbp, ...]
    cost: float


def boxing_cost(src: Sbp, dst: Sbp, nbytes: int, k: int) -> float:
    """Bytes one rank sends to box an N-byte array from `src` to `dst` over k ranks."""
    if src == dst or k == 1:
        return 0.0
    if dst is partial_sum:
        return INF
    share = nbytes * (k - 1) / k
    if src is broadcast:
        return 0.0  # a local slice
    if src is partial_sum:
        return 2 * share if dst is broadcast else share
    return share if dst is broadcast else share / k


def choose(
    what: str,
    per_axis: Sequence[Sequence[Candidate]],
    operands: Sequence[tuple[tuple[Sbp, ...], int] | None],
    hierarchy: Sequence[int],
) -> Signature:
    """The cheapest candidate on each placement axis; operands are (nd_sbp, nbytes), None
    for scalars."""
    ins: list[list[Sbp | None]] = [[] for _ in operands]
    out: list[Sbp] = []
    total = 0.0
    for axis, cands in enumerate(per_axis):
        best: tuple[tuple[int, float], Candidate] | None = None
        for cand in cands:
            cost, boxed = 0.0, 0
            for j, need in enumerate(cand[0]):
                op = operands[j]
                if op is None or need is None or op[0][axis] == need:
                    continue
                boxed += 1
                cost += boxing_cost(op[0][axis], need, op[1], hierarchy[axis])
            if cost < INF and (best is None or (boxed, cost) < best[0]):
                best = ((boxed, cost), cand)
        if best is None:
            shown = ", ".join(fmt(o[0]) if o else "scalar" for o in operands)
            raise GlobalViewError(f"{what}: no SBP signature fits the inputs {shown}")
        total += best[0][1]
        for j, need in enumerate(best[1][0]):
            ins[j].append(need)  # type: ignore[arg-type]
        out.append(best[1][1])
    inputs = tuple(None if operands[j] is None else tuple(ins[j]) for j in range(len(operands)))
    return Signature(inputs, tuple(out), total)  # type: ignore[arg-type]


def elementwise_candidates(
    op: str, shapes: Sequence[tuple[int, ...] | None], out_shape: tuple[int, ...]
) -> list[Candidate]:
    """Legal signatures of a broadcasting elementwise op on one placement axis.

    S(e) of the output needs S of the matching dim of each operand that has it at full
    size, B of an operand broadcast along it; B needs B everywhere. P: add/sub take all P
    (no scalars: c + P would add c once per rank); mul takes one P operand times B
    operands; div takes a P numerator over a B denominator."""
    n_out = len(out_shape)

    def need_for_split(j: int, e: int) -> Sbp | None:
        shp = shapes[j]
        if shp is None:
            return None
        d = e - (n_out - len(shp))
        return Split(d) if d >= 0 and shp[d] == out_shape[e] else B

    arrays = [j for j, s in enumerate(shapes) if s is not None]
    cands: list[Candidate] = [
        (tuple(need_for_split(j, e) for j in range(len(shapes))), Split(e)) for e in range(n_out)
    ]
    cands.append((tuple(None if s is None else B for s in shapes), B))
    if op in ("add", "sub") and len(arrays) == len(shapes):
        cands.append((tuple(P for _ in shapes), P))
    elif op in ("mul", "div"):
        for j in arrays if op == "mul" else arrays[:1]:
            if op == "div" and j != 0:
                continue
            cands.append((tuple(None if s is None else (P if i == j else B)
                                for i, s in enumerate(shapes)), P))  # fmt: skip
    elif op == "neg":
        cands.append(((P,), P))
    return cands


def elementwise(
    op: str,
    operands: Sequence[tuple[tuple[int, ...], tuple[Sbp, ...], int] | None],
    out_shape: tuple[int, ...],
    hierarchy: Sequence[int],
) -> Signature:
    """Signature of an elementwise op; operands are (shape, nd_sbp, nbytes) or None."""
    shapes = [None if o is None else o[0] for o in operands]
    cands = elementwise_candidates(op, shapes, out_shape)
    priced = [None if o is None else (o[1], o[2]) for o in operands]
    return choose(op, [cands] * len(hierarchy), priced, hierarchy)


def matmul(
    x: tuple[tuple[Sbp, ...], int], w: tuple[tuple[Sbp, ...], int], hierarchy: Sequence[int]
) -> Signature:
    """Signature of 2-D x @ w; operands are (nd_sbp, nbytes)."""
    cands = [(tuple(ins), out) for ins, out in MATMUL]
    return choose("matmul", [cands] * len(hierarchy), [x, w], hierarchy)


def reduce_sbp(
    nd_sbp: Sequence[Sbp], ndim: int, axes: Sequence[int], keepdims: bool
) -> tuple[Sbp, ...]:
    """sum/mean over `axes`: a split reduced away becomes P; other splits follow their dim."""
    out: list[Sbp] = []
    for s in nd_sbp:
        if isinstance(s, Split):
            if s.dim in axes:
                out.append(P)
            elif keepdims:
                out.append(s)
            else:
                out.append(Split(s.dim - sum(1 for a in axes if a < s.dim)))
        else:
            out.append(s)
    return tuple(out)


def transpose_sbp(nd_sbp: Sequence[Sbp], perm: Sequence[int]) -> tuple[Sbp, ...]:
    return tuple(Split(list(perm).index(s.dim)) if isinstance(s, Split) else s for s in nd_sbp)


def reshape_sbp(
    shape: Sequence[int], new_shape: Sequence[int], nd_sbp: Sequence[Sbp]
) -> tuple[Sbp, ...] | None:
    """The output SBP when every split dim survives the reshape as one dim with the same
    elements before it (so each piece reshapes locally); None when some split does not."""
    out: list[Sbp] = []
    for s in nd_sbp:
        if not isinstance(s, Split):
            out.append(s)
            continue
        before = math.prod(shape[: s.dim])
        match = [
            e for e in range(len(new_shape))
            if math.prod(new_shape[:e]) == before and new_shape[e] == shape[s.dim]
        ]  # fmt: skip
        if not match:
            return None
        out.append(Split(match[0]))
    return tuple(out)
