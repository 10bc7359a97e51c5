"""Which rank stopped: pure functions over stacks, flight records and step counters.

Nothing here reads a file, a clock or a process: the caller passes what it collected
(`stacks.py` on this node, the launcher across nodes), so every rule is a table test.

- `locate` / `group_ranks` / `describe_groups`: where each rank is (its innermost frame
  in user code, and the library call it is inside), ranks grouped by place, the odd one
  out first: "rank 3 (nodeb, workerlog.3) is in `load_batch` at train.py:41" before
  "ranks 0–2 (3 of 4) wait in `all_reduce` called from train.py:88".
- `compare_flights`: the first collective on which the ranks disagree, or the one some
  ranks never entered: "rank 1's 5th collective on group 0 was broadcast; the others'
  (ranks 0, 2–3) was all_reduce".
- `find_stragglers`: ranks lagging the median step, or slower per step than the median.
- `detect_hang`: whether the whole job stopped making progress, with an injected `now`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = [
    "Activity",
    "FlightOp",
    "Frame",
    "Hang",
    "Location",
    "RankStack",
    "Straggler",
    "ThreadStack",
    "compare_flights",
    "describe_groups",
    "detect_hang",
    "find_stragglers",
    "group_ranks",
    "locate",
    "rank_ranges",
    "rebase",
    "summarize",
]

# Files that are not the user's: the interpreter's library, installed packages, and the
# frameworks themselves (an editable install of paddlike or torch is not under
# site-packages, hence the package directories).
_LIBRARY_PATTERNS = (
    re.compile(r"/lib/python\d+(\.\d+)?t?/"),
    re.compile(r"/(site|dist)-packages/"),
    re.compile(r"^<frozen "),
)
PADDLIKE_ROOT = str(Path(__file__).resolve().parent.parent) + "/"
LIBRARY_ROOTS: tuple[str, ...] = (PADDLIKE_ROOT,)

# Wrappers that say nothing about what a rank waits in; the next frame inward does.
_WRAPPER_NAMES = frozenset(
    {
        "wrapper",
        "inner",
        "wrapped",
        "_wrapper",
        "decorator",
        "decorate_context",
        "__call__",
        "_call_impl",
        "_wrapped_call_impl",
        "_fn",
        "<lambda>",
    }
)


# --- stacks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    function: str  # as py-spy names it, e.g. "load_batch" or "Thread.run"
    filename: str  # full path; a shared object for native frames
    line: int
    native: bool = False

    @property
    def short(self) -> str:
        return f"{Path(self.filename).name}:{self.line}"


@dataclass(frozen=True)
class ThreadStack:
    name: str
    frames: tuple[Frame, ...]  # innermost first, as py-spy prints them
    os_thread_id: int = 0
    idle: bool = True


@dataclass(frozen=True)
class RankStack:
    """What was collected for one rank: its threads, or why there are none."""

    rank: int
    host: str = ""
    log_file: str = ""
    pid: int | None = None
    threads: tuple[ThreadStack, ...] = ()
    error: str = ""  # one line: why py-spy gave no stack ("" when it did)
    kernel: str = ""  # the no-cooperation fallback: "sleeping in futex_wait_queue"
    note: str = ""  # e.g. "Python frames only: native unwinding ran out of time"

    def main_thread(self) -> ThreadStack | None:
        for t in self.threads:
            if t.name == "MainThread" or (self.pid is not None and t.os_thread_id == self.pid):
                return t
        return self.threads[0] if self.threads else None


@dataclass(frozen=True, order=True)
class Location:
    """Where a rank is: `place` is what ranks are grouped by."""

    where: str  # innermost user frame "train.py:88", or "" when only library frames
    function: str  # the user function of that frame, or the innermost frame's function
    call: str = ""  # the library call the user frame is inside ("all_reduce"), "" if none
    unknown: str = ""  # why no stack (then the other fields are "")

    @property
    def place(self) -> tuple[str, str, str, str]:
        return (self.where, self.function, self.call, self.unknown)


def is_library(filename: str, roots: Sequence[str] = LIBRARY_ROOTS) -> bool:
    """True for the interpreter's and installed packages' files and paddlike itself.

    >>> is_library("/usr/lib/python3.11/threading.py"), is_library("/home/u/train.py")
    (True, False)
    """
    if any(p.search(filename) for p in _LIBRARY_PATTERNS):
        return True
    return any(filename.startswith(r) for r in roots)


def _library_name(function: str) -> str:
    """'ProcessGroup.allreduce' -> 'allreduce'; 'all_reduce' stays."""
    return function.rsplit(".", 1)[-1]


def locate(stack: RankStack, roots: Sequence[str] = LIBRARY_ROOTS) -> Location:
    """The innermost frame of the main thread in user code, and the library call (the
    frame it called, skipping wrappers) it is inside; native frames are never "where"."""
    thread = stack.main_thread()
    if thread is None or not thread.frames:
        reason = stack.error or "no stack"
        if stack.kernel:
            reason = f"{reason}; {stack.kernel}"
        return Location("", "", "", unknown=reason)
    frames = [f for f in thread.frames if not f.native]
    if not frames:
        f = thread.frames[0]
        return Location("", f.function, "")
    for i, f in enumerate(frames):
        if is_library(f.filename, roots):
            continue
        call = ""
        # frames[:i] are library frames, innermost first: the one the user called is
        # frames[i-1]; past wrappers, toward the inside.
        for lib in reversed(frames[:i]):
            name = _library_name(lib.function)
            if name not in _WRAPPER_NAMES and not name.startswith("_"):
                call = name
                break
        if not call and i:
            call = _library_name(frames[i - 1].function)
        return Location(f.short, f.function, call)
    inner = frames[0]
    return Location("", _library_name(inner.function), "")


def rank_ranges(ranks: Iterable[int]) -> str:
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


def _ranks_phrase(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"


def group_ranks(locations: Mapping[int, Location]) -> list[tuple[Location, list[int]]]:
    """Ranks grouped by place, the odd one out first: smaller groups first, ranks whose
    stack is unknown after those with one, then by lowest rank."""
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    first: dict[tuple[str, str, str, str], Location] = {}
    for rank in sorted(locations):
        loc = locations[rank]
        groups.setdefault(loc.place, []).append(rank)
        first.setdefault(loc.place, loc)
    order = sorted(groups, key=lambda k: (bool(first[k].unknown), len(groups[k]), groups[k][0]))
    return [(first[k], groups[k]) for k in order]


def describe_location(loc: Location, many: bool = False) -> str:
    """'waits in `all_reduce` called from train.py:88 (step)', 'is in `load_batch` at
    train.py:41' ('wait'/'are' for several ranks), or why the stack is unknown."""
    if loc.unknown:
        return f"— stack unknown: {loc.unknown}"
    if loc.call and loc.where:
        verb = "wait" if many else "waits"
        return f"{verb} in `{loc.call}` called from {loc.where} ({loc.function})"
    verb = "are" if many else "is"
    if loc.where:
        return f"{verb} in `{loc.function}` at {loc.where}"
    return f"{verb} in `{loc.function}` (library code only)"


def describe_groups(
    locations: Mapping[int, Location], about: Mapping[int, str] | None = None
) -> list[str]:
    """One line per group, the odd one out first. `about[rank]` ("nodeb, workerlog.1") is
    shown for groups of one rank, where it tells the user which log to open."""
    total = len(locations)
    lines = []
    for loc, ranks in group_ranks(locations):
        who = _ranks_phrase(ranks)
        if len(ranks) == 1 and about and about.get(ranks[0]):
            who += f" ({about[ranks[0]]})"
        elif len(ranks) > 1:
            who += f" ({len(ranks)} of {total})"
        lines.append(f"{who} {describe_location(loc, many=len(ranks) > 1)}")
    return lines


# --- flight records --------------------------------------------------------------------


class FlightOp(Protocol):
    """A flight-record entry (paddlike.distributed.progress.FlightEntry satisfies it)."""

    group_seq: int
    group_id: int
    op: str
    nbytes: int
    dtype: str
    peer: int
    state: str


def ordinal(n: int) -> str:
    """1 -> '1st', 1204 -> '1,204th'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def _op_text(e: FlightOp, with_size: bool) -> str:
    text = e.op
    if with_size and e.nbytes:
        text += f" of {e.nbytes:,} B" + (f" {e.dtype}" if e.dtype else "")
    if e.peer >= 0:
        text += f" {_PEER_WORD.get(e.op, 'with')} rank {e.peer}"
    return text


_PEER_WORD = {"broadcast": "from", "scatter": "from", "recv": "from"}
_PEER_WORD.update(dict.fromkeys(("reduce", "gather", "send"), "to"))


def compare_flights(flights: Mapping[int, Sequence[FlightOp]]) -> list[str]:
    """What the flight records say, per group the ranks share: the first sequence number
    whose operation (or size) differs between ranks, else the ranks that are behind —
    those that never entered a collective the others are in. [] when they agree."""
    lines: list[str] = []
    by_group: dict[int, dict[int, dict[int, FlightOp]]] = {}
    for rank, entries in flights.items():
        for e in entries:
            by_group.setdefault(e.group_id, {}).setdefault(rank, {})[e.group_seq] = e
    for gid in sorted(by_group):
        ranks = by_group[gid]
        if len(ranks) < 2:
            continue
        where = "" if gid == 0 else f" on group {gid}"
        found = _first_mismatch(ranks)
        if found is not None:
            seq, parts = found
            odd_key, odd_ranks = parts[0]
            others = [r for _, rs in parts[1:] for r in rs]
            others_key = parts[1][0] if len(parts) == 2 else None
            odd = ranks[odd_ranks[0]][seq]
            subject = _ranks_phrase(odd_ranks) + "'s"
            with_size = odd_key[0] == (others_key[0] if others_key else None)
            text = f"{subject} {ordinal(seq)} collective{where} was {_op_text(odd, with_size)}"
            if others_key is not None:
                other = ranks[parts[1][1][0]][seq]
                text += f"; the others' ({_ranks_phrase(others)}) was {_op_text(other, with_size)}"
            else:
                text += "; the others disagree too: " + ", ".join(
                    f"{_ranks_phrase(rs)}: {_op_text(ranks[rs[0]][seq], True)}"
                    for _, rs in parts[1:]
                )
            lines.append(text)
            continue
        last = {r: max(seqs) for r, seqs in ranks.items()}
        top = max(last.values())
        behind = sorted(r for r, s in last.items() if s < top)
        ahead = sorted(r for r, s in last.items() if s == top)
        e = ranks[ahead[0]][top]
        # A rank a collective ahead of a rank that is still finishing the previous one is
        # normal while a job runs; it says something only while the ahead ranks wait.
        if behind and e.state != "done":
            lines.append(
                f"{_ranks_phrase(behind)} never entered collective #{top}{where} "
                f"({e.op}, which {_ranks_phrase(ahead)} "
                f"{'is' if len(ahead) == 1 else 'are'} {_state_words(e.state)}); "
                + "; ".join(
                    f"{_ranks_phrase([r])}'s last was #{last[r]} "
                    f"({ranks[r][last[r]].op}, {ranks[r][last[r]].state})"
                    for r in behind[:4]
                )
                + ("; …" if len(behind) > 4 else "")
            )
    return lines


def _state_words(state: str) -> str:
    return {"running": "waiting in", "done": "past", "failed": "failed in"}.get(state, state)


def _first_mismatch(
    ranks: Mapping[int, Mapping[int, FlightOp]],
) -> tuple[int, list[tuple[tuple[str, int, str, int], list[int]]]] | None:
    """(seq, [(key, ranks)] minority first) for the first seq that two ranks both
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


# --- stragglers ------------------------------------------------------------------------


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


# --- hang detection --------------------------------------------------------------------


@dataclass(frozen=True)
class Activity:
    """A rank's latest signs of life, as Unix times (None: never seen)."""

    rank: int
    last_log: float | None = None  # last write to its log file
    last_progress: float | None = None  # last heartbeat() or collective
    uses_heartbeat: bool = False  # it called heartbeat(): judged by that alone

    def last_sign(self) -> float | None:
        """A rank that calls heartbeat() is alive while it beats, however quiet its log,
        and stuck when it stops, however chatty another thread; other ranks live by their
        log and their collectives."""
        if self.uses_heartbeat:
            return self.last_progress
        signs = [t for t in (self.last_log, self.last_progress) if t is not None]
        return max(signs) if signs else None


TOGETHER = 1.0  # seconds: ranks that stopped closer than this stopped "together"


@dataclass(frozen=True)
class Hang:
    stalled_for: float  # seconds since the job's last sign of life
    order: list[tuple[int, float]] = field(default_factory=list)  # (rank, idle s), oldest first

    def describe(self) -> str:
        first_rank, first_idle = self.order[0]
        text = f"no progress for {self.stalled_for:.0f} s on any rank"
        if len(self.order) > 1 and first_idle - self.order[-1][1] < TOGETHER:
            return text + "; every rank stopped within the same second"
        if len(self.order) > 1:
            lo, hi = min(i for _, i in self.order[1:]), max(i for _, i in self.order[1:])
            span = f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}–{hi:.1f}"
            text += (
                f"; rank {first_rank} stopped first ({first_idle:.1f} s ago; the others "
                f"{span} s ago)"
            )
        return text


def rebase(activity: Iterable[Activity], now: float) -> list[Activity]:
    """The same activity with times relative to `now` (so `now` becomes 0.0): nodes whose
    clocks differ send these, and one node judges them all with detect_hang(…, now=0.0)."""

    def rel(t: float | None) -> float | None:
        return None if t is None else t - now

    return [
        Activity(a.rank, rel(a.last_log), rel(a.last_progress), a.uses_heartbeat) for a in activity
    ]


def detect_hang(activity: Iterable[Activity], now: float, timeout: float) -> Hang | None:
    """A Hang when every rank has been idle for `timeout` seconds or more at `now`; None
    while any rank shows life (or none was seen yet: a job still starting is not hung)."""
    idle: list[tuple[int, float]] = []
    for a in activity:
        last = a.last_sign()
        if last is None:
            return None
        idle.append((a.rank, now - last))
    if not idle or min(i for _, i in idle) < timeout:
        return None
    idle.sort(key=lambda ri: (-ri[1], ri[0]))
    return Hang(stalled_for=min(i for _, i in idle), order=idle)


# --- the summary -----------------------------------------------------------------------


def summarize(
    stacks: Mapping[int, RankStack],
    flights: Mapping[int, Sequence[FlightOp]] | None = None,
    stragglers: Sequence[Straggler] = (),
    roots: Sequence[str] = LIBRARY_ROOTS,
) -> list[str]:
    """The grouped summary: where the ranks are (odd one out first), then what the flight
    records and step counters add."""
    locations = {r: locate(s, roots) for r, s in stacks.items()}
    about = {r: ", ".join(x for x in (s.host, s.log_file) if x) for r, s in stacks.items()}
    lines = describe_groups(locations, about)
    if flights:
        lines += compare_flights(flights)
    lines += describe_stragglers(stragglers)
    return lines
