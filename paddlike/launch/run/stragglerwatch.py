"""--straggler_check: every SECONDS, read this node's ranks' recent collectives and, on
node 0, name the ranks (or nodes) that arrive last at most of them.

    a round's workers started -> `start` (a thread of its own: reading torch's record
    through the workers' probes may take up to a few seconds, which the supervisor's loop
    must never wait for)
      every SECONDS: `collect` this node's arrivals (paddlike's flight record from the
        progress files; torch's flight recorder through `logs.worker_probe`, which
        --straggler_check installs as --hang_timeout does)
        node 0: `lateness.find_stragglers` over every node's ranks; the console's lines
        when who is named changed (once, then again only on a change); summary.json's
        "stragglers" (`on_table`)
        another node: its arrivals to node 0 through the job's store (`channel`), and node
        0's latest finding read back (node 0 announces each): this node's summary.json
        "stragglers" says where the check runs and what it found (`relayed`)
    the round ends -> `stop` (no store call: node 0's may be gone)

Clocks: each rank's arrivals go to node 0 as Unix times of its own node (paddlike's
monotonic times through the progress file's anchor; torch's are Unix times already).
Nodes' clocks differ by what NTP leaves (usually well under a millisecond); the node's
offset, where a channel measures one, is added on node 0 (`lateness`'s `offsets`).

The decision is `paddlike.logs.lateness`'s (pure, tested as tables); this module only
gathers and says. `logs.lateness`, `logs.torch_flight` and the progress reader are
imported on the first check, never at the launcher's start.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from paddlike import netaddr
from paddlike.launch.console.output import Console
from paddlike.summary import ProcessRecord

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from os import PathLike
    from typing import Any, Protocol

    from paddlike.launch.peers.stackreq import StackChannel
    from paddlike.launch.plan.membership import ElasticSpec
    from paddlike.launch.plan.plan import LaunchPlan
    from paddlike.launch.run.record import RunRecord
    from paddlike.launch.run.runspec import RunSpec
    from paddlike.logs.lateness import Arrival, Lateness

    class Channel(Protocol):
        """What the watch needs of the other nodes (many nodes; `peers.stragglers`):
        this node's part to node 0, every other node's latest part (JSON types)."""

        def publish(self, part: dict[str, Any]) -> None: ...
        def gather(self) -> list[dict[str, Any]]: ...
        def close(self) -> None: ...
        def exclude(self, node_index: int) -> None: ...
        def excluded(self) -> int | None: ...
        def announce(self, found: dict[str, Any]) -> None: ...
        def heard(self) -> dict[str, Any] | None: ...


PROBE_TIMEOUT = 2.0  # seconds for every probe's answer at one check


class NodeArrivals:
    """One node's part of a check: each rank's arrivals, node and log, and the step time
    its ranks' heartbeat() measured (0.0: none)."""

    def __init__(
        self,
        arrivals: dict[int, list[Arrival]],
        nodes: dict[int, str],
        logs: dict[int, str],
        step_time: float = 0.0,
        index: int = 0,
    ) -> None:
        self.index = index  # the node's index in this round
        self.arrivals = arrivals
        self.nodes = nodes
        self.logs = logs
        self.step_time = step_time

    def to_json(self) -> dict[str, Any]:
        """Compact: per rank, [group, seq, op, time, end] rows (times to the microsecond;
        end null where not recorded)."""
        return {
            "arrivals": {
                str(r): [[a.group, a.seq, a.op, round(a.time, 6), _round(a.end)] for a in rows]
                for r, rows in self.arrivals.items()
            },
            "nodes": {str(r): n for r, n in self.nodes.items()},
            "logs": {str(r): n for r, n in self.logs.items()},
            "step_time": self.step_time,
            "index": self.index,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeArrivals:
        from paddlike.logs.lateness import Arrival

        arrivals = {
            int(r): [
                Arrival(str(row[0]), int(row[1]), str(row[2]), float(row[3]), _float(row[4:]))
                for row in rows
            ]
            for r, rows in data.get("arrivals", {}).items()
        }
        nodes = {int(r): str(n) for r, n in data.get("nodes", {}).items()}
        logs = {int(r): str(n) for r, n in data.get("logs", {}).items()}
        step = float(data.get("step_time") or 0.0)
        return cls(arrivals, nodes, logs, step, int(data.get("index") or 0))


def _round(t: float | None) -> float | None:
    return None if t is None else round(t, 6)


def _float(rest: Sequence[Any]) -> float | None:
    return float(rest[0]) if rest and rest[0] is not None else None


def collect(
    log_dir: str,
    job_id: str,
    workers: Sequence[ProcessRecord],
    node: str,
    probe_timeout: float = PROBE_TIMEOUT,
    ask: Callable[..., dict[int, Any]] | None = None,
) -> NodeArrivals:
    """This node's ranks' recent collectives: paddlike's flight record (progress files)
    and torch's (the probes' answers), as arrivals in this node's Unix time."""
    from paddlike.distributed import progress as P
    from paddlike.logs.lateness import Arrival

    ranks = {w.rank: w for w in workers}
    arrivals: dict[int, list[Arrival]] = {r: [] for r in ranks}
    steps = []
    for rank, snap in P.read_all(log_dir, job_id or None).items():
        if rank not in ranks:
            continue
        arrivals[rank] += [
            Arrival(
                f"paddlike:{e.group_id}",
                e.group_seq,
                e.op,
                snap.to_wall(e.start_mono),
                snap.to_wall(e.end_mono) if e.state == "done" else None,
            )
            for e in snap.flight
        ]
        if snap.step_time > 0:
            steps.append(snap.step_time)
    if ask is None:
        from paddlike.logs.torch_flight import ask
    for rank, answer in ask(list(workers), probe_timeout).items():
        if rank not in arrivals:
            continue
        arrivals[rank] += [
            Arrival(f"torch:{op.group_id}", op.group_seq, op.op, op.created)
            for op in answer.record
            if op.created is not None and op.group_seq > 0
        ]
    steps.sort()
    return NodeArrivals(
        {r: a for r, a in arrivals.items() if a},
        dict.fromkeys(ranks, node),
        {r: w.log_file for r, w in ranks.items()},
        steps[len(steps) // 2] if steps else 0.0,
    )


class StragglerWatch:
    """--straggler_check on this node, a thread per round. Node 0 (or the one node)
    decides and says; other nodes publish their part through `channel`."""

    def __init__(
        self,
        log_dir: str,
        console: Console,
        *,
        period: float,
        threshold: float,
        node_index: int,
        node: str,
        channel: Channel | None = None,
        on_table: Callable[[dict[str, Any]], None] | None = None,
        on_straggler: str = "warn",
        leave: Callable[[], None] | None = None,
        nnodes: int = 1,
        min_nodes: int = 0,
        nnodes_text: str = "",
        excluded: Sequence[dict[str, Any]] = (),
        decider: str = "",
        echo_relayed: bool = True,
    ) -> None:
        """`on_straggler` exclude: node 0 tells a straggling node (never itself) to leave,
        unless the round's `nnodes` less those told would fall below `min_nodes` (an
        elastic job's MIN; `nnodes_text` is --nnodes as given): then it warns, once per
        node. A node told so calls `leave` (the launcher's SIGTERM to itself: an elastic
        job's node leaves at the next round, its ranks saving at the preemption stop step).
        `excluded`: the nodes earlier rounds excluded (summary.json's "excluded", kept in
        every later table so that the job's summary still names them). `decider`: node 0's
        host, which another node's summary names as where the check runs. `echo_relayed`:
        another node says node 0's finding on its own console too (not where every node's
        console is one already: the one-command start's)."""
        self.log_dir = log_dir
        self.console = console
        self.period = period
        self.threshold = threshold
        self.node_index = node_index
        self.node = node
        self.channel = channel
        self.on_table = on_table
        self.on_straggler = on_straggler
        self._leave = leave or _sigterm_self
        self._excluded: set[int] = set()  # nodes node 0 told to leave
        self._kept: set[int] = set()  # stragglers' nodes kept: the job is at its MIN
        # {"node", "line", "time"} per node told to leave, earlier rounds' first
        self.exclusions: list[dict[str, Any]] = list(excluded)
        self.nnodes = nnodes
        self.min_nodes = min_nodes
        self.nnodes_text = nnodes_text
        self.decider = decider
        self.echo_relayed = echo_relayed
        self._heard: dict[str, Any] | None = None  # node 0's finding, as relayed last
        self._relayed = False  # this round's relay written (another node)
        self.named: tuple[str, ...] = ()  # who the console named last
        self.checks = 0  # this round's checks that compared collectives
        self.since = 0  # the check that first named who is named now
        self._most_ranks = 0  # the most ranks a check of this round compared
        self._stop = threading.Event()
        # held while a finding is said and kept: after `stop` none is (summary.json's last
        # word is the round's end, never a check's)
        self._saying = threading.Lock()
        self._thread: threading.Thread | None = None
        self._job_id = ""
        self._workers: list[ProcessRecord] = []

    def start(self, job_id: str, records: Sequence[ProcessRecord]) -> None:
        """The round's processes started: check every `period` seconds from now."""
        if self.period <= 0:
            return
        self._job_id = job_id
        self._workers = [r for r in records if r.role == "trainer" and r.pid]
        self._stop.clear()
        self.named, self.checks, self.since, self._most_ranks = (), 0, 0, 0
        self._relayed = False
        if self.node_index != 0 and self.channel is not None:
            self._relay(None)  # from the start: the check runs on node 0
        self._thread = threading.Thread(target=self._run, name="stragglers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """The round ends: no check after this returns (one under way is waited for)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(PROBE_TIMEOUT + 1.0)
            self._thread = None
        with self._saying:  # a check still under way says nothing from now on
            pass
        if self.channel is not None:  # node 0's word as its checks relayed it: no store
            self.channel.close()  # call here, where node 0's store may be gone (a fault)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.check()
            except Exception as exc:  # a check never ends the job; it says why once
                self.console.warn(f"--straggler_check: the check failed ({exc}); stopped")
                return

    def check(self) -> Lateness | None:
        """One check: collect; node 0 decides and says (the finding), others publish."""
        part = collect(self.log_dir, self._job_id, self._workers, self.node)
        if self._stop.is_set():
            return None
        part.index = self.node_index
        if self.node_index != 0:
            if self.channel is not None:
                self.channel.publish(part.to_json())
                with self._saying:
                    if not self._stop.is_set():
                        self._relay(self.channel.heard())
                if self.on_straggler == "exclude" and self.channel.excluded() == self.node_index:
                    self._told_to_leave()
            return None
        others = self.channel.gather() if self.channel is not None else []
        return self.decide([part, *(NodeArrivals.from_json(d) for d in others)])

    def decide(self, parts: Sequence[NodeArrivals]) -> Lateness:
        """Every node's part: the finding, said when who is named changed, and kept
        (`on_table`). The nodes' clock offsets are `lateness.clock_offsets`' estimate."""
        from paddlike.logs.lateness import find_stragglers

        arrivals, nodes, logs, steps = {}, {}, {}, []
        for part in parts:
            arrivals.update(part.arrivals)
            nodes.update(part.nodes)
            logs.update(part.logs)
            if part.step_time > 0:
                steps.append(part.step_time)
        steps.sort()
        # many nodes: each named "node 1 (10.0.0.2)", as the launcher's other lines do
        index_of = {n: p.index for p in parts for n in p.nodes.values()}
        found = find_stragglers(
            arrivals,
            nodes,
            logs,
            threshold=self.threshold,
            step_time=steps[len(steps) // 2] if steps else None,
            node_index=index_of if self.nnodes > 1 else None,
        )
        # A check that sees fewer ranks than an earlier one (ranks ending, a node's part
        # not there) judges a part of the job: it neither speaks nor replaces the table.
        if not found.window or len(found.rows) < self._most_ranks:
            return found
        with self._saying:
            if self._stop.is_set():
                return found
            self._most_ranks = len(found.rows)
            self.checks += 1
            if self._say(found) and self.on_straggler == "exclude":
                self._exclude(found, index_of)
            table = {"time": time.time(), "check": self.checks, "since": self.since}
            if self.on_table is not None:
                self.on_table({**table, **found.to_json(), "excluded": list(self.exclusions)})
            if self.channel is not None:  # the other nodes' summaries say it too
                named = [s.line for s in found.stragglers]
                self.channel.announce(
                    {**table, "host": self.node, "named": named, "excluded": self.exclusions,
                     "who": list(self.named)}  # who: the lines' figures change every check
                )  # fmt: skip
        return found

    def _exclude(self, found: Lateness, index_of: dict[str, int]) -> None:
        """--on_straggler exclude: each straggler's node is told to leave (once)."""
        from paddlike.logs.lateness import node_label  # loaded by the check already

        for s in found.stragglers:
            i = index_of.get(s.row.node)
            if i is None or i in self._excluded:
                continue
            node = node_label(s.row.node, index_of if self.nnodes > 1 else {})
            if i == 0:
                self.console.say(
                    "--on_straggler exclude: the straggler is on node 0, which holds the "
                    "launchers' store: it stays (warned only)"
                )
                continue
            left = self.nnodes - len(self._excluded)
            if left - 1 < self.min_nodes:
                if i not in self._kept:
                    self._kept.add(i)
                    self.console.warn(
                        f"--on_straggler exclude: {node} is a straggler, but it "
                        f"stays: the job has {left} nodes, --nnodes {self.nnodes_text} needs "
                        f"{self.min_nodes}"
                    )
                continue
            self._excluded.add(i)
            self.exclusions.append(
                {"node": s.row.node, "index": i, "line": s.line, "time": time.time()}
            )
            if self.channel is not None:
                self.channel.exclude(i)
            self.console.say(f"--on_straggler exclude: {node} leaves the job")

    def _relay(self, heard: dict[str, Any] | None) -> None:
        """Another node: its summary.json's "stragglers" is where the check runs and node
        0's latest finding (`heard`, None before one came): written when that changed."""
        if self._relayed and heard == self._heard:
            return
        before = (self._heard or {}).get("who") or []
        self._relayed, self._heard = True, heard
        if self.echo_relayed and heard and (heard.get("who") or []) != before:
            named = heard.get("named") or []  # node 0's lines, on this node's console too
            if not named:
                self.console.say("node 0's check: stragglers: none now")
            for line in named:
                self.console.say(f"node 0's check: {line}")
        if self.on_table is not None:
            host = str((heard or {}).get("host") or self.decider)
            self.on_table({"decided_on": {"node": 0, "host": host}, "heard": heard})

    def _told_to_leave(self) -> None:
        self._stop.set()  # no more checks here
        self.console.say(
            "--on_straggler exclude: node 0 named this node's ranks stragglers: this node "
            "leaves the elastic job (as on SIGTERM)"
        )
        self._leave()

    def _say(self, found: Lateness) -> bool:
        """The lines, when who is named changed since the last check that compared any;
        whether it changed."""
        named = tuple(s.row.who for s in found.stragglers)
        if named == self.named:
            return False
        if not named:
            self.console.say(f"stragglers: none now ({', '.join(self.named)} kept up)")
        for s in found.stragglers:
            self.console.say(s.line)
        self.named, self.since = named, self.checks
        return True


def recorder_off(environ: Mapping[str, str]) -> str:
    """ "NAME=0" where the user's environment turns torch's flight recorder off (the probe
    leaves a size the user gave alone), else "": the check then sees no torch collective."""
    from paddlike.logs.worker_probe import FR_BUFFER_NAMES

    for name in FR_BUFFER_NAMES:
        if environ.get(name, "").strip() == "0":
            return f"{name}=0"
    return ""


def excluded_reason(host: str, index: int) -> str:
    """The cause's reason when node 0 excluded this node (summary.json, node 0's round line)."""
    return f"node {index} ({host}) left: excluded as a straggler (--on_straggler exclude)"


def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def straggler_watch(
    spec: RunSpec,
    plan: LaunchPlan,
    log_dir: str | PathLike[str],
    console: Console,
    record: RunRecord,
    stacks: StackChannel | None = None,
    elastic: ElasticSpec | None = None,
    environ: Mapping[str, str] | None = None,
    leave_for: Callable[[str], None] | None = None,
    echo_relayed: bool = True,
) -> StragglerWatch:
    """The round's watch from the job's spec (a period of 0: one that never checks); on
    many nodes its channel goes beside the round's stack requests (`stacks`). Node 0's
    first round warns where the user's `environ` turns torch's flight recorder off.
    `leave_for`: how this node leaves when node 0 excludes it (the supervisor's, giving the
    leaving its own cause); None: a plain SIGTERM to this launcher."""
    off = recorder_off(os.environ if environ is None else environ)
    if off and spec.straggler_check > 0 and plan.node_index == 0 and not record.rounds_started:
        console.warn(
            f"--straggler_check: {off} in the environment turns torch's flight recorder off: "
            "the check sees no torch collective (unset it, or give it a size, to compare them)"
        )
    channel = None
    if stacks is not None and spec.straggler_check > 0:
        from paddlike.launch.peers.stragglers import store_channel

        channel = store_channel(stacks)
    earlier = (record.stragglers or {}).get("excluded")
    return StragglerWatch(
        str(log_dir),
        console,
        period=spec.straggler_check,
        threshold=spec.straggler_threshold,
        node_index=plan.node_index,
        # one node: its hostname, as the hang report names it; many: its --ips entry
        node=os.uname().nodename if plan.nnodes == 1 else plan.host,
        channel=channel,
        on_table=record.stragglers_found,
        on_straggler=spec.on_straggler,
        nnodes=plan.nnodes,
        min_nodes=elastic.min_nodes if elastic is not None else 0,
        nnodes_text=(
            f"{elastic.min_nodes}:{elastic.max_nodes}" if elastic is not None else str(plan.nnodes)
        ),
        excluded=earlier if isinstance(earlier, list) else (),
        leave=None
        if leave_for is None
        else lambda: leave_for(excluded_reason(plan.host, plan.node_index)),
        decider=netaddr.split(plan.trainer_endpoints[0])[0] if plan.trainer_endpoints else "",
        echo_relayed=echo_relayed,
    )
