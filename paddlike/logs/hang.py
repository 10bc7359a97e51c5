"""Which rank stopped: pure functions over stacks, flight records and step counters.

Nothing here reads a file, a clock or a process: the caller passes what it collected
(`stacks.py` on this node, the launcher across nodes), so every rule is a table test.

- `locate` / `group_ranks` / `describe_groups`: where each rank is (its innermost frame
  in user code, the library call it is inside, whether that call waits for the other
  ranks), ranks grouped by place: "rank 3 (nodeb, workerlog.3) is in `load_batch` at
  train.py:41", "ranks 0–2 (3 of 4) wait in `all_reduce` called from train.py:88".
- `name_odd_ranks`: which ranks hold the others up, from the places and the flight
  records' findings (`flights.py`), or that it cannot be told (the rule is below).
- `summarize`: the report, its first line the verdict (the root cause of a hang abort).
- `detect_hang`: whether the whole job stopped making progress, with an injected `now`.
- `compare_flights` (flights.py) and `find_stragglers` (stragglers.py) are re-exported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from paddlike.logs.flights import (
    FlightFinding,
    FlightOp,
    compare_flights,
    flight_findings,
    ordinal,
    rank_ranges,
    ranks_phrase,
)
from paddlike.logs.stragglers import (
    StepSample,
    Straggler,
    describe_stragglers,
    find_stragglers,
)

__all__ = [
    "Activity",
    "FlightOp",
    "Frame",
    "Hang",
    "Location",
    "RankStack",
    "StepSample",
    "Straggler",
    "ThreadStack",
    "Verdict",
    "compare_flights",
    "describe_groups",
    "describe_stragglers",
    "detect_hang",
    "find_stragglers",
    "flight_findings",
    "group_ranks",
    "locate",
    "name_odd_ranks",
    "ordinal",
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
    stopped: bool = False  # the kernel says stopped (SIGSTOP, a debugger): it cannot move

    def main_thread(self) -> ThreadStack | None:
        for t in self.threads:
            if t.name == "MainThread" or (self.pid is not None and t.os_thread_id == self.pid):
                return t
        return self.threads[0] if self.threads else None


@dataclass(frozen=True, order=True)
class Location:
    """Where a rank is: `place` is what ranks are grouped by. `waiting`: inside a call
    that waits for the other ranks (a collective, the rendezvous of init)."""

    where: str  # innermost user frame "train.py:88", or "" when only library frames
    function: str  # the user function of that frame, or the innermost frame's function
    call: str = ""  # the library call the user frame is inside ("all_reduce"), "" if none
    unknown: str = ""  # why no stack (then the other fields are "")
    waiting: bool = False
    stopped: bool = False

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


# Code in which a rank waits for the others: the distributed packages of torch, Paddle
# and paddlike (collectives, init's rendezvous, the stores they meet through).
_DISTRIBUTED = re.compile(r"/(torch|paddle|paddlike)/distributed/")
_DISTRIBUTED_NATIVE = ("c10d::", "gloo::", "nccl")


def is_distributed(frame: Frame) -> bool:
    """A frame of a collective or rendezvous: torch's, Paddle's or paddlike's
    distributed package, or (native) c10d, gloo or NCCL."""
    if frame.native:
        return any(k in frame.function for k in _DISTRIBUTED_NATIVE)
    return bool(_DISTRIBUTED.search(frame.filename))


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
        return Location("", "", "", unknown=reason, stopped=stack.stopped)
    waiting = any(is_distributed(f) for f in thread.frames)
    frames = [f for f in thread.frames if not f.native]
    if not frames:
        f = thread.frames[0]
        return Location("", f.function, "", waiting=waiting)
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
        return Location(f.short, f.function, call, waiting=waiting)
    inner = frames[0]
    return Location("", _library_name(inner.function), "", waiting=waiting)


def group_ranks(
    locations: Mapping[int, Location], first: Iterable[int] = ()
) -> list[tuple[Location, list[int]]]:
    """Ranks grouped by place: the groups of the ranks in `first` (the odd ones, see
    name_odd_ranks) first, then smaller groups first, ranks whose stack is unknown
    after those with one, then by lowest rank."""
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    head: dict[tuple[str, str, str, str], Location] = {}
    for rank in sorted(locations):
        loc = locations[rank]
        groups.setdefault(loc.place, []).append(rank)
        head.setdefault(loc.place, loc)
    odd = set(first)
    order = sorted(
        groups,
        key=lambda k: (
            not odd.intersection(groups[k]),
            bool(head[k].unknown),
            len(groups[k]),
            groups[k][0],
        ),
    )
    return [(head[k], groups[k]) for k in order]


def describe_location(loc: Location, many: bool = False) -> str:
    """'waits in `all_reduce` called from train.py:88 (step)', 'is in `load_batch` at
    train.py:41' ('wait'/'are' for several ranks), 'is stopped', or why the stack is
    unknown."""
    if loc.stopped:
        return f"{'are' if many else 'is'} stopped (SIGSTOP, or held by a debugger): no stack"
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
    locations: Mapping[int, Location],
    about: Mapping[int, str] | None = None,
    first: Iterable[int] = (),
) -> list[str]:
    """One line per group, the groups of `first` first. `about[rank]` ("nodeb,
    workerlog.1") is shown for groups of one rank, where it tells the user which log to
    open."""
    total = len(locations)
    lines = []
    for loc, ranks in group_ranks(locations, first):
        who = ranks_phrase(ranks)
        if len(ranks) == 1 and about and about.get(ranks[0]):
            who += f" ({about[ranks[0]]})"
        elif len(ranks) > 1:
            who += f" ({len(ranks)} of {total})"
        lines.append(f"{who} {describe_location(loc, many=len(ranks) > 1)}")
    return lines


# --- the odd rank ----------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The ranks that hold the others up (`odd`, () when it cannot be told), which rule
    named them, and in words why (or why it cannot be told)."""

    odd: tuple[int, ...]
    rule: str  # "stopped" | "elsewhere" | "behind" | "mismatch" | "unknown" | "fewest" | ""
    why: str


def name_odd_ranks(
    locations: Mapping[int, Location], findings: Sequence[FlightFinding] = ()
) -> Verdict:
    """Who holds the job up, from where each rank is and what the flight records say.
    The first rule that applies decides:

    | rule      | when                                                    | odd ranks      |
    |-----------|---------------------------------------------------------|----------------|
    | stopped   | some ranks are stopped, not all                         | the stopped    |
    | elsewhere | some ranks wait in a collective, others are outside any | the outside    |
    | behind    | a record: ranks never entered what the others wait in   | those behind   |
    | mismatch  | a record: ranks entered another collective, a minority  | the minority   |
    | unknown   | every rank with a stack waits; some have no stack       | the unknown    |
    | fewest    | one group of places strictly smaller than every other   | that group     |

    Else it cannot be told: two ranks in different collectives, each the other's
    equal; no stacks and no record; every rank at the same place. Counting alone
    decides only the last rule, so two ranks are told apart by what they do, never by
    which is lower."""
    ranks = sorted(locations) or sorted({r for f in findings for r in (*f.odd, *f.others)})
    if len(ranks) < 2:
        return Verdict((), "", "one rank")
    stopped = [r for r in ranks if locations.get(r, _NOWHERE).stopped]
    if stopped and len(stopped) < len(ranks):
        return Verdict(tuple(stopped), "stopped", "stopped: it cannot enter any collective")
    known = {r: loc for r, loc in locations.items() if not loc.unknown}
    waiting = [r for r, loc in known.items() if loc.waiting]
    outside = sorted(r for r, loc in known.items() if not loc.waiting)
    if waiting and outside:
        return Verdict(tuple(outside), "elsewhere", "outside any collective the others wait in")
    for f in findings:
        if f.kind == "behind" and f.decisive:
            return Verdict(f.odd, "behind", f"never entered collective #{f.seq}")
    for f in findings:
        if f.kind == "mismatch" and f.decisive:
            return Verdict(f.odd, "mismatch", f"entered another collective as #{f.seq}")
    unknown = sorted(r for r, loc in locations.items() if loc.unknown)
    if unknown and known and len(waiting) == len(known):
        return Verdict(tuple(unknown), "unknown", "gave no stack while the others wait")
    groups = group_ranks(known)
    if len(groups) >= 2 and len(groups[0][1]) < min(len(rs) for _, rs in groups[1:]):
        return Verdict(tuple(groups[0][1]), "fewest", "fewer ranks at its place than any other")
    return Verdict((), "", _cannot_tell(locations, known, groups, findings))


_NOWHERE = Location("", "", unknown="not collected")


def _cannot_tell(
    locations: Mapping[int, Location],
    known: Mapping[int, Location],
    groups: Sequence[tuple[Location, list[int]]],
    findings: Sequence[FlightFinding],
) -> str:
    tie = next((f for f in findings if f.kind == "mismatch"), None)
    if tie is not None:
        return (
            f"{ranks_phrase(tie.odd)} and {ranks_phrase(tie.others)} entered different "
            f"collectives as #{tie.seq}, as many on each side: either went astray"
        )
    if not known:
        return "no rank's stack could be read, and no flight record shows where they part"
    if len(groups) == 1 and len(known) == len(locations):
        if groups[0][0].waiting:
            return "every rank waits at the same place (a network or backend problem?)"
        return "every rank is at the same place, outside any collective"
    return "the ranks are at different places, as many at each, and none waits for the others"


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
            text += (  # when, not who: the report's headline names the odd rank
                f"; last sign of life: rank {first_rank} {first_idle:.1f} s ago, the others "
                f"{span} s ago"
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
    """The report. Its first line is the verdict (name_odd_ranks): the ranks that hold
    the others up — the flight record's line where the record named them, else their
    own place's line — or "no single rank stands out: why"; then where the ranks are
    (the odd ones first), what the flight records and the step counters add. A line
    is never repeated: the verdict's line moves to the top."""
    locations = {r: locate(s, roots) for r, s in stacks.items()}
    about = {r: ", ".join(x for x in (s.host, s.log_file) if x) for r, s in stacks.items()}
    findings = flight_findings(flights) if flights else []
    verdict = name_odd_ranks(locations, findings)
    lines = describe_groups(locations, about, verdict.odd) + [f.text for f in findings]
    head = _headline(verdict, locations, about, findings)
    if head is not None:
        # the verdict's line replaces the line it restates (a record's, without host)
        lines = [line for line in lines if line != head and not _restates(head, line)]
        lines.insert(0, head)
    return lines + describe_stragglers(stragglers)


def _restates(head: str, line: str) -> bool:
    """`head` is `line` with "(host, log)" after its first words ("rank 1")."""
    words = line.split(" ", 2)
    if len(words) < 3:
        return False
    subject = " ".join(words[:2])
    return head.startswith(subject + " (") and head.endswith(line[len(subject) :])


def _headline(
    verdict: Verdict,
    locations: Mapping[int, Location],
    about: Mapping[int, str],
    findings: Sequence[FlightFinding],
) -> str | None:
    """The verdict's line; None when the report's first line already is."""
    ranks = set(locations) | {r for f in findings for r in (*f.odd, *f.others)}
    if len(ranks) < 2:
        return None
    if not verdict.odd:
        return f"no single rank stands out: {verdict.why}"
    odd = set(verdict.odd)
    who = ranks_phrase(verdict.odd)
    if len(verdict.odd) == 1 and about.get(verdict.odd[0]):
        who += f" ({about[verdict.odd[0]]})"
    named = next((f for f in findings if set(f.odd) == odd), None)
    first = group_ranks(locations, verdict.odd)
    own = first[0][0] if first and set(first[0][1]) == odd else None
    by_place = verdict.rule not in ("behind", "mismatch")
    if own is not None and by_place and (own.stopped or not own.unknown):
        return None  # the odd ranks' own line (describe_groups put it first)
    if named is not None:
        # the record's line, naming the rank's host and log as the others do
        return who + named.text.removeprefix(ranks_phrase(named.odd))
    return f"{who} {verdict.why}"
