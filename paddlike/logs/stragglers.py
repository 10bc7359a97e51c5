"""Stragglers: ranks slower than the others, from their step counters (heartbeat()).

A rank that lags the median step, or takes longer per step outside collectives, is
slow rather than stuck; pure functions over `paddlike.distributed.progress` snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["StepSample", "Straggler", "describe_stragglers", "find_stragglers"]


class StepSample(Protocol):
    """A rank's step counter (paddlike.distributed.progress.RankProgress satisfies it)."""

    rank: int
    step: int
    beats: int
    step_time: float
    busy_time: float


@dataclass(frozen=True)
class Straggler:
    rank: int
    reason: str


def find_stragglers(
    samples: Iterable[StepSample], lag_steps: int = 5, slow_factor: float = 2.0
) -> list[Straggler]:
    """Ranks whose step lags the median by more than `lag_steps`, or whose time per step
    exceeds `slow_factor` × the median. The time per step is taken outside paddlike's
    collectives where the rank used them ("busy" time): in a synchronous job every
    rank's step takes as long as the slowest rank's, only the busy time tells them apart.
    Ranks that never called heartbeat() are left out."""
    beating = [s for s in samples if s.beats > 0]
    if len(beating) < 2:
        return []
    out: dict[int, list[str]] = {}
    median_step = _median(sorted(s.step for s in beating), high=True)
    for s in beating:
        if median_step - s.step > lag_steps:
            out.setdefault(s.rank, []).append(
                f"{median_step - s.step} steps behind the median (step {s.step} vs {median_step})"
            )
    timed = [(s, s.busy_time if s.busy_time > 0 else s.step_time) for s in beating]
    timed = [(s, t) for s, t in timed if t > 0]
    if len(timed) >= 2:
        median_t = _median(sorted(t for _, t in timed), high=False)
        for s, t in timed:
            if median_t > 0 and t > slow_factor * median_t:
                what = (
                    "outside collectives " if s.busy_time > 0 and s.busy_time < s.step_time else ""
                )
                out.setdefault(s.rank, []).append(
                    f"{t / median_t:.1f}× the median time per step {what}"
                    f"({_seconds(t)} vs {_seconds(median_t)})"
                )
    return [Straggler(r, "; ".join(reasons)) for r, reasons in sorted(out.items())]


def _median(ordered: Sequence[float], high: bool) -> float:
    """The middle item; of an even count the upper (high) or lower one, never a mean: a
    rank's own value, so that one slow rank of two is measured against the other."""
    n = len(ordered)
    return ordered[n // 2] if (n % 2 or high) else ordered[n // 2 - 1]


def _seconds(t: float) -> str:
    return f"{t * 1000:.0f} ms" if t < 1 else f"{t:.2f} s"


def describe_stragglers(stragglers: Sequence[Straggler]) -> list[str]:
    return [f"straggler: rank {s.rank} is {s.reason}" for s in stragglers]
