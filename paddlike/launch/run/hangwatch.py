"""Hangs and stack dumps of this node's workers, for the supervisor's event loop.

The supervisor owns the loop and the teardown; this object owns the rules. It tells
the loop when it next wants to look (`next_check`, a monotonic deadline, so no thread
and no sleep), and the loop calls `check` then, or `dump` on a stack trigger (SIGRTMIN+4, what
`python -m paddlike.logs --stacks` sends; or SIGUSR1 while it is not passed on to the
workers: `run.signals`).

A hang (`--hang_timeout S`): no worker showed a sign of life for S seconds. The signs
are `stacks.signs_of_life` (its log grew, it called heartbeat() or ran a paddlike
collective), plus, for a rank that has shown none of them yet, CPU time: a script
that prints nothing while it imports torch is starting, not hung. Once a rank wrote
or beat, only writes and beats count (a rank spinning in a collective uses CPU too).

Then the stacks of every worker are taken (py-spy), with what each worker's probe
says (torch's flight record, and a Python stack where py-spy cannot read one: see
`paddlike.logs.worker_probe`, which --hang_timeout puts in every worker); the report
(`paddlike.logs.hang.summarize`, its first line the rank that holds the others up) is
printed and written under <log_dir>/stacks/<time>/, once per stall: the next dump
needs a new sign of life first. Each such diagnosis is also handed to `on_diagnosis`
(summary.json's `hangs`), so that it outlives the job's end, Ctrl-C included. py-spy
holds each rank while it reads its stack: the time of the last collection is not
counted as silence (else the pause itself would read as the next hang), and nothing
else delays the next look. `--on_hang abort` then ends the job with exit code 124 and
the report's first line as its root cause.

The clocks, a process's CPU time and the collection are given in (`clock`, `wall`,
`cpu_seconds`, `collect`), so the rule is tested on step clocks
(tests/launch/run/test_hangwatch.py).

Many nodes: each launcher judges its own workers; one whose workers all stalled asks
every node for its stacks through the store (`peers.stackreq`: the first node to see
a stall asks, the others' requests for it are dropped), and so does a stack trigger. Every node
then collects its ranks, answers with its report and the ages of its ranks' signs of
life, gathers the others' (a node that does not answer in time is named), and judges
the job as one: a hang only when no rank of any node showed life for S seconds. Every
node prints the same summary and writes its ranks' files and the job-wide summary.
When the asker's ranks stopped first ("no hang yet"), the node whose ranks showed life
last asks again once its own ranks reach S, so a job-wide hang is found about S after
the job's last sign of life, not S after the first request.

`paddlike.logs.hang`/`stacks` and the progress reader are imported on first use only:
a launch without --hang_timeout and without a stack trigger never loads them (start-up cost).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from paddlike.launch import NamedTuple
from paddlike.launch.console.output import Console
from paddlike.launch.plan.plan import Role
from paddlike.launch.plan.policy import hang_cause
from paddlike.summary import RootCause

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from paddlike.launch.peers.stackreq import StackChannel
    from paddlike.logs.hang import RankStack
    from paddlike.logs.stacks import Target
    from paddlike.logs.torch_flight import TorchOp

    Collect = Callable[
        [Sequence[Target], float], tuple[dict[int, RankStack], dict[int, list[TorchOp]]]
    ]

# CPU seconds a silent rank must use between two checks to count as starting up.
CPU_LIFE = 0.05
# How often the rule looks at most (it also wakes exactly when a rank could reach S).
_LONGEST_WAIT = 1.0
_SHORTEST_WAIT = 0.2
# How long taking the stacks may take (py-spy's Python pass, then its native pass).
COLLECT_TIMEOUT = 10.0
# Many nodes: how long, past the collection, to wait for the other nodes' answers.
ANSWER_GRACE = 5.0

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Watched(NamedTuple):
    """A running trainer as the hang rule sees it: its log (name relative to the log
    directory) and where the launcher's header in it ends. The supervisor makes these
    from its live processes; the rule never sees a process object."""

    rank: int
    pid: int
    log_name: str
    log_start: int
    err_name: str | None = None
    err_start: int = 0


class HangWatch:
    """The hang rule and the stack dumps of one node, for one round at a time."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        console: Console,
        *,
        host: str,
        node_index: int,
        host_label: str,
        timeout: float | None = None,
        on_hang: str = "dump",
        collect_timeout: float = COLLECT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        cpu_seconds: Callable[[int], float] | None = None,
        collect: Collect | None = None,
        on_diagnosis: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """`clock` (monotonic) and `wall` (Unix time) are the rule's clocks, `cpu_seconds`
        a process's CPU time and `collect` the stacks and flight records of targets
        (`paddlike.logs.stacks.collect_job`): given by tests, never patched.
        `on_diagnosis` gets each hang's diagnosis (`diagnosis`) as it is made."""
        self.log_dir = Path(log_dir)
        self.console = console
        self.host = host
        self.node_index = node_index
        self.host_label = host_label
        self.timeout = timeout
        self.on_hang = on_hang
        self.collect_timeout = collect_timeout
        self.job_id = ""
        self._next: float | None = None
        self._cpu: dict[int, float] = {}  # rank -> CPU seconds at the last check
        self._cpu_life: dict[int, float] = {}  # rank -> Unix time its CPU time last grew
        self._reported: float | None = None  # the newest sign of life of the stall dumped
        self._paused: tuple[float, float] | None = None  # the last collection (Unix times)
        self.channel: StackChannel | None = None  # many nodes: this round's stack requests
        self._workers: Callable[[], Sequence[Watched]] = list
        self._clock, self._wall = clock, wall
        self._cpu_seconds = cpu_seconds or _cpu_seconds
        self._collect = collect
        self._on_diagnosis = on_diagnosis

    @property
    def fd(self) -> int | None:
        """Many nodes: readable when a stack request came (call `answer`)."""
        return self.channel.fd if self.channel is not None else None

    def start_round(self, job_id: str, workers: Callable[[], Sequence[Watched]]) -> None:
        """A new round's workers started now: forget the last round's. `workers` gives
        the running trainers when a request comes."""
        self.job_id = job_id
        self._workers = workers
        self._cpu.clear()
        self._cpu_life.clear()
        self._reported = None
        self._paused = None
        self._next = self._clock() + _SHORTEST_WAIT if self.timeout else None

    def _after_collection(self, began: float) -> None:
        """py-spy pauses each rank while it reads its stack, for up to the collection's
        deadline: remember when (`began`, Unix time, until now), so that `_credit` does
        not count that time as silence; the next look is then a beat away at most."""
        self._paused = (began, self._wall())
        if self.timeout is not None and self._next is not None:
            self._next = min(self._next, self._clock() + _SHORTEST_WAIT)

    def _credit(self, activity: Sequence[Any], now: float) -> list[Any]:
        """`activity` with each rank's signs moved later by the part of the last
        collection's pause that fell after them: a rank py-spy held could not show life."""
        from paddlike.logs import hang

        if self._paused is None:
            return list(activity)
        t0, t1 = self._paused

        def shift(t: float | None) -> float | None:
            return None if t is None else t + max(0.0, min(t1, now) - max(t0, t))

        return [
            hang.Activity(a.rank, shift(a.last_log), shift(a.last_progress), a.uses_heartbeat)
            for a in activity
        ]

    def next_check(self) -> float | None:
        """The monotonic time `check` wants to run at; None: never (no --hang_timeout)."""
        return self._next

    # --------------------------------------------------------------------- the rule
    def check(self, workers: Sequence[Watched]) -> RootCause | None:
        """Look for a hang now; on one, dump once and, with --on_hang abort, return the
        root cause that ends the job."""
        if self.timeout is None:
            return None
        from paddlike.logs import hang

        now, now_mono = self._wall(), self._clock()
        activity = self._activity(workers, now)
        judged = self._credit(activity, now)
        found = hang.detect_hang(judged, now, self.timeout)
        if found is None:
            idle = [now - t for a in judged if (t := a.last_sign()) is not None]
            wait = self.timeout - min(idle) if len(idle) == len(judged) and idle else 0.0
            self._next = now_mono + min(max(wait, _SHORTEST_WAIT), _LONGEST_WAIT)
            return None
        self._next = now_mono + _LONGEST_WAIT
        newest = max(t for a in activity if (t := a.last_sign()) is not None)
        if self._reported == newest:
            return None  # this stall was dumped already
        self._reported = newest
        stalled = (hang.detect_hang(activity, now, 0.0) or found).describe()  # the true silence
        if self.channel is not None:  # the job decides, from every node's view
            self.channel.request_hang(stalled)
            return None
        self.console.warn(f"hang: {stalled} (--hang_timeout {self.timeout:g}); taking stacks")
        lines, path, odd = self._dump(workers, [stalled])
        self._diagnosed(lines, stalled, path, odd)
        if self.on_hang != "abort":
            self.console.say("--on_hang dump: the job keeps running")
            return None
        logs = {w.rank: w.log_name for w in workers}
        where = (self.host, self.node_index, logs[odd]) if odd in logs else None
        dump = str(path.relative_to(self.log_dir) / "summary.txt")
        return self._cause(lines, stalled, dump, odd, where)

    def _cause(
        self,
        lines: list[str],
        stalled: str,
        dump: str,
        odd: int | None,
        where: tuple[str, int, str] | None,
    ) -> RootCause:
        """--on_hang abort's root cause: the report's first line; when it names one rank,
        that trainer, its node and its log (`where`: host, node index, log file), so that
        summary.json says which process, as for a failure (a hang is not restarted)."""
        cause = hang_cause(self.host, self.node_index, lines, stalled, dump, self._wall())
        cause = cause.replace(stacks=dump)
        if odd is None or where is None:
            return cause
        host, node, log = where
        return cause.replace(
            role=Role.TRAINER.value, rank=odd, host=host, node_index=node, log_file=log
        )

    def _activity(self, workers: Sequence[Watched], now: float) -> list:
        from paddlike.distributed import progress as P
        from paddlike.logs import hang, stacks

        prog = P.read_all(self.log_dir, self.job_id or None, flight=False)
        logs = {w.rank: w.log_name for w in workers}
        out = []
        for w, a in zip(
            sorted(workers, key=lambda w: w.rank),
            stacks.signs_of_life(self.log_dir, logs, prog),
            strict=True,
        ):
            p = prog.get(w.rank)
            if (p is not None and (p.beats or p.ops)) or self._wrote(w):
                out.append(a)
                continue
            cpu = self._cpu_seconds(w.pid)
            if cpu - self._cpu.get(w.rank, 0.0) >= CPU_LIFE:
                self._cpu_life[w.rank] = now
            self._cpu[w.rank] = max(cpu, self._cpu.get(w.rank, 0.0))
            life = self._cpu_life.get(w.rank)
            if life is not None:
                a = hang.Activity(a.rank, max(a.last_log or 0.0, life), a.last_progress)
            out.append(a)
        return out

    def _wrote(self, w: Watched) -> bool:
        """The worker wrote to its log, past the launcher's header."""
        for name, start in ((w.log_name, w.log_start), (w.err_name, w.err_start)):
            if name is None:
                continue
            try:
                if (self.log_dir / name).stat().st_size > start:
                    return True
            except OSError:
                pass
        return False

    def _diagnosed(self, lines: list[str], stalled: str, path: Path, odd: int | None) -> None:
        if self._on_diagnosis is not None:
            self._on_diagnosis(diagnosis(self.log_dir, lines, stalled, path, odd, self._wall()))

    # --------------------------------------------------------------------- dumps
    def dump(self, workers: Sequence[Watched], why: str) -> None:
        """Stacks on request (a stack trigger): collect, print the summary, write; the job
        goes on."""
        if self.channel is not None:
            self.console.say(f"{why}: asking every node for its stacks")
            if self.channel.request(f"{why} on node {self.node_index}"):
                return
            self.console.warn("the job's store did not answer: taking this node's stacks only")
        if not workers:
            self.console.say(f"{why}: no worker is running; no stacks to take")
            return
        n = len(workers)
        self.console.say(f"{why}: taking the stacks of {n} worker{'' if n == 1 else 's'}")
        self._dump(workers, [])

    def _dump(
        self, workers: Sequence[Watched], extra: list[str]
    ) -> tuple[list[str], Path, int | None]:
        """Collect, print and write this node's stacks: the report, its directory, and the
        one rank the report names (None: none, or several)."""
        from paddlike.distributed import progress as P
        from paddlike.logs import hang, stacks

        targets = [
            stacks.Target(w.rank, w.pid, self.host_label, w.err_name or w.log_name) for w in workers
        ]
        began, began_wall = self._clock(), self._wall()
        taken, records = self._collect_job(targets)
        self._after_collection(began_wall)
        took = self._clock() - began
        prog = P.read_all(self.log_dir, self.job_id or None)
        flights = stacks.job_flights(prog, records)
        lines = hang.summarize(taken, flights, hang.find_stragglers(prog.values()))
        path = stacks.write_dump(self.log_dir, taken, [*lines, *extra], prog, None, records)
        for line in lines:
            self.console.say(f"  {line}")
        self.console.say(f"stacks of {_ranks(len(taken))} {_where(path)} (taken in {took:.1f} s)")
        return lines, path, _odd_rank(taken, flights)

    def _collect_job(
        self, targets: Sequence[Target]
    ) -> tuple[dict[int, RankStack], dict[int, list[TorchOp]]]:
        if self._collect is not None:
            return self._collect(targets, self.collect_timeout)
        from paddlike.logs import stacks

        return stacks.collect_job(targets, self.collect_timeout)

    # --------------------------------------------------------------------- many nodes
    def answer(self) -> RootCause | None:
        """A stack request came through the store: answer it, gather every node's answer,
        print and write the job-wide summary; on a job-wide hang with --on_hang abort,
        the root cause that ends the job."""
        assert self.channel is not None
        cause = None
        for n, body in self.channel.take():
            cause = self._answer(n, body) or cause
        return cause

    def drop_requests(self) -> None:
        """The round is ending: the requests that came are not answered (their askers
        name this node as not answering)."""
        if self.channel is not None:
            self.channel.take()

    def _answer(self, n: int, body: dict[str, Any]) -> RootCause | None:
        from paddlike.distributed import progress as P
        from paddlike.logs import hang, stacks

        assert self.channel is not None
        workers = self._workers()
        began, now = self._clock(), self._wall()
        own = self._activity(workers, now) if self.timeout else []
        ages = hang.rebase(self._credit(own, now), now)
        targets = [stacks.Target(w.rank, w.pid, self.host_label, w.err_name or w.log_name)
                   for w in workers]  # fmt: skip
        taken, records = self._collect_job(targets) if targets else ({}, {})
        self._after_collection(now)
        prog = P.read_all(self.log_dir, self.job_id or None)
        report = stacks.node_report(taken, prog, records)
        report["activity"] = [[a.rank, a.last_log, a.last_progress, a.uses_heartbeat] for a in ages]
        logs = {str(w.rank): os.path.abspath(self.log_dir / w.log_name) for w in workers}
        report["node"] = {"index": self.node_index, "host": self.host, "logs": logs}
        self.channel.answer(n, report)
        reports, silent = self.channel.gather(n, self.collect_timeout + ANSWER_GRACE)
        all_stacks, all_prog = stacks.merge_reports(reports)
        all_records = stacks.merge_torch_records(reports)
        flights = stacks.job_flights(all_prog, all_records)
        lines = hang.summarize(all_stacks, flights, hang.find_stragglers(all_prog.values()))
        if silent:
            nodes = ", ".join(map(str, silent))
            lines.append(
                f"node{'s' if len(silent) > 1 else ''} {nodes} did not answer within "
                f"{self.collect_timeout + ANSWER_GRACE:g} s (its launcher is busy, gone, "
                "or cut off from the store)"
            )
        extra: list[str] = []
        k = int(body.get("hang") or 0)
        if k:
            self.channel.hangs = max(self.channel.hangs, k)
            activity = [hang.Activity(*a) for r in reports for a in r.get("activity", [])]
            found = hang.detect_hang(activity, 0.0, self.timeout) if self.timeout else None
            if found is None or silent:
                if body.get("by") == self.node_index:  # the others need not hear of it
                    why = (
                        "ranks on other nodes show life"
                        if found is None
                        else ("not every node answered")
                    )
                    self.console.say(f"{body.get('why')} on this node, but {why}: no hang yet")
                return None
            signs = [t for a in own if (t := a.last_sign()) is not None]
            self._reported = max(signs, default=None)  # this stall is dumped: don't ask again
            extra = [found.describe()]
            self.console.warn(
                f"hang: {extra[0]} (--hang_timeout {self.timeout:g}); stacks of every node:"
            )
        else:
            self.console.say(f"stacks requested ({body.get('why')}):")
        local = {r: s for r, s in taken.items()}
        path = stacks.write_dump(self.log_dir, local, [*lines, *extra], prog, None, records)
        for line in lines:
            self.console.say(f"  {line}")
        took = self._clock() - began
        self.console.say(
            f"stacks of {_ranks(len(local))} of this node {_where(path)} "
            f"(the job's taken in {took:.1f} s)"
        )
        odd = _odd_rank(all_stacks, flights) if k else None
        if k:
            self._diagnosed(lines, extra[0], path, odd)
        if not k or self.on_hang != "abort":
            if k:
                self.console.say("--on_hang dump: the job keeps running")
            return None
        where = next(
            (
                (r["node"]["host"], r["node"]["index"], r["node"]["logs"][str(odd)])
                for r in reports
                if str(odd) in r.get("node", {}).get("logs", {})
            ),
            None,
        )
        # the other nodes read this summary.txt path on this node, as a log file's
        dump = os.path.abspath(path / "summary.txt")
        return self._cause(lines, extra[0], dump, odd, where)


def diagnosis(
    log_dir: Path, lines: list[str], stalled: str, dump: Path, odd: int | None, now: float
) -> dict[str, Any]:
    """One hang as summary.json's `hangs` keeps it: when, how long the job was silent, the
    report (its first line the rank that holds the others up), that rank, and the dump's
    directory (relative to the log directory; null when it could not be written)."""
    written = (dump / "summary.txt").exists()
    where = os.path.relpath(dump, log_dir) if written else None
    return {"time": now, "stalled": stalled, "summary": list(lines), "rank": odd, "stacks": where}


def _odd_rank(taken: dict[int, RankStack], flights: dict[int, Any]) -> int | None:
    """The one rank the report's first line names as holding the others up (the rule of
    `hang.summarize`), or None when it names none or several."""
    from paddlike.logs import hang

    locations = {r: hang.locate(s) for r, s in taken.items()}
    verdict = hang.name_odd_ranks(locations, hang.flight_findings(flights) if flights else [])
    return verdict.odd[0] if len(verdict.odd) == 1 else None


def _where(dump: Path) -> str:
    """Where a dump went: `in DIR`, or that it could not be written (write_dump warned)."""
    if (dump / "summary.txt").exists():
        return f"in {dump}"
    return "(not written to the log directory: see the warning above)"


def _ranks(n: int) -> str:
    """'1 rank', '2 ranks'."""
    return f"{n} rank{'' if n == 1 else 's'}"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (0.0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, ValueError, IndexError):
        return 0.0
