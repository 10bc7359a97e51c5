"""The run summary: the JSON file a launcher leaves in its log directory.

Written by `paddlike.launch` (at start with status "running", again at the end)
and read by `python -m paddlike.logs`. One schema, one module, so that writer and
reader cannot drift apart. The file is replaced atomically (temporary name, then
rename), so a reader never sees half a summary.

Schema (version 1) — `summary.json`:

    {
      "schema": 1,
      "job_id": "job-20261122-1058-ab12",
      "mode": "collective" | "ps",
      "status": "running" | "succeeded" | "failed" | "interrupted",   # RunStatus
      "exit_code": 0 | null,              # the launcher's exit code, null while running
      "node_index": 0, "nnodes": 2,
      "host": "198.18.0.1",               # this node's matched address
      "hostname": "nodea",
      "log_dir": "/abs/path/log",
      "start_time": 1795000000.0,         # Unix time, seconds
      "end_time": null | float,
      "restarts": 0,                      # restart rounds this launcher ran
      "processes": [ProcessRecord, ...],  # this node's processes, last round
      "root_cause": RootCause | null,     # job-wide: may name another node's process
      "rounds": [                         # elastic jobs: every round this node ran
        {"round": 2, "restarts": 0, "members": ["198.18.0.1", ...],
         "ended": "succeeded" | the cause's reason, "membership": "lost" | ... | null}
      ],
      "hangs": [                          # --hang_timeout: every hang diagnosed, oldest first
        {"time": 1795000100.0, "stalled": "no rank showed life for 5 s",
         "summary": ["rank 2 (nodeb, workerlog.0) is in `load_batch` at train.py:26", ...],
         "rank": 2 | null,                # the rank the summary's first line names
         "stacks": "stacks/20261122-105800" | null}   # the dump, relative to log_dir
      ],
      "stragglers": null | {              # --straggler_check: node 0's last check (another
                                          # node: {"decided_on": {"node": 0, "host": ...},
                                          # "heard": what node 0 told it, or null})
        "time": 1795000100.0, "window": 200, "reference": 0.31, "step_known": true,
        "named": ["straggler: rank 2 (node b, workerlog.0) arrived last at ..."],
        "ranks": [{"who": "rank 2", "rank": 2, "node": "b", "log": "workerlog.0",
                   "last_share": 0.91, "median": 0.048, "p90": 0.061,
                   "collectives": 200, "straggler": true}, ...],   # the straggler first
        "nodes": [...],                   # the same per node, on many nodes
        "bar": 0.031,                     # seconds: a median lateness over it counts
        "heat": null | {                  # the page's heat map: at most 64 ranks (the
          "ranks_total": 3,               # latest ones) x the newest 200 collectives
          "collectives": [["all_reduce", 812, "torch:0", 1795000099.912], ...],
                                          # [op, seq, group, first arrival], oldest first
          "ranks": [{"rank": 2, "node": "b", "log": "workerlog.0", "straggler": true,
                     "lateness_ms": [48.2, 50.1, null, ...]}, ...]}},   # rank order;
                                          # null: not in that collective's group
      "preflight": {                      # the pre-flight check (--preflight), or null
        "round": 0, "ok": false, "seconds": 0.61,
        "bandwidth_median": 1100000000, "rtt_median": 0.00005,   # bytes/s, seconds
        "bad_nodes": [3], "findings": ["node 3 (198.18.0.4): 2.5 MB/s to node 0, ..."],
        "notes": ["the link node 1 (...) - node 2 (...): ..."],   # slow links, not fatal
        "nodes": [{"index": 0, "host": "198.18.0.1", "gpus": 8 | null, "problems": [],
                   "links": [{"to": 1, "up": 1.1e9, "down": 1.2e9, "rtt": 5e-05}, ...]}],
        "earlier": [{"round": 0, "ok": false, ...}]   # only where earlier checks found
      },                                  # something (an elastic job left a node out)
      "restart_causes": [                 # --max_restarts: why each restart happened
        {"round": 1, "cause": "trainer rank 1 exited with code 3",
         "error": "ValueError: bad batch" | null}   # the cause's first error line
      ]
    }

ProcessRecord: role ("trainer" | "server" | "heter"), rank (global rank within
its role; a trainer's is its PADDLE_TRAINER_ID), local_index, host, pid,
start_time, end_time, exit_code (null if killed by a signal or still running),
signal (name such as "SIGKILL", or null), status ("running" | "ok" | "failed" |
"killed" — killed means stopped by the launcher during teardown; ProcessStatus), restarts,
log_file (name relative to the log directory), endpoint.

RootCause: host, node_index, role, rank, local_index, exit_code, signal,
log_file, tail (the last lines of that log, list of str), error (the first line of
that log's run that says why, `paddlike.logs.first_error`: "RuntimeError: boom", also
behind torch's "[rank1]: "; null when none), time, duration (how
long the failed process ran), membership (elastic jobs: "lost", "left" or "joined"
when the round ended because its nodes changed; else null), reason (one sentence:
"trainer rank 1 exited with code 3", "launcher on nodeb received SIGTERM",
"node 1 (198.18.0.2) stopped sending heartbeats").
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path

from paddlike.logformat import open_regular, write_atomically

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any, ClassVar

SUMMARY_FILE = "summary.json"
SCHEMA_VERSION = 1
# What a launcher exits with when --on_hang abort ended the job (as timeout(1) does).
HANG_EXIT_CODE = 124


class _Word(str, Enum):  # noqa: UP042  (enum.StrEnum is 3.11+; we support 3.10)
    """A status word: a `str`, so summary.json keeps the bare word and `"ok" == OK`;
    str() and f-strings give the word on every Python version (3.12 changed mixins')."""

    __str__ = str.__str__
    __format__ = str.__format__


class ProcessStatus(_Word):
    """A process of a round (summary.json's processes[].status).

    RUNNING -> OK (exited 0; a parameter server that stopped when asked)
            -> FAILED (exited non-zero, or by a signal it was not sent)
            -> KILLED (stopped by the launcher during a teardown, whatever the cause)
            -> KEPT (parked for an in-process restart: the same process runs the next
               round, `paddlike.distributed.restartable`)
    GONE and UNKNOWN are the reader's, never written: GONE, a process the summary says
    runs whose pid no longer exists (its launcher died first); UNKNOWN, a process of a
    directory without a summary (Paddle's own launchers) whose log shows no error.
    """

    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    KILLED = "killed"
    KEPT = "kept"
    GONE = "gone"
    UNKNOWN = "unknown"


class RunStatus(_Word):
    """A round on one node (the supervisor's outcome), a node's run (summary.json's
    status) and the job as the reader sums it up.

    RUNNING -> SUCCEEDED | FAILED | INTERRUPTED (a launcher received SIGINT, SIGTERM or
    SIGHUP: stopped, not failed). GONE and UNKNOWN are the reader's, never written: GONE,
    a summary that says running whose launcher no longer exists; UNKNOWN, a directory
    without a summary.
    """

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    GONE = "gone"
    UNKNOWN = "unknown"


class _Record:
    """Plain mutable records with value equality, a repr and JSON-type conversion.

    Not dataclasses on purpose: importing `dataclasses` and creating a class with it
    cost the launcher more time than the rest of its start-up (see bench/launch.py).
    `FIELDS` is the order of the JSON keys.
    """

    __slots__ = ()
    FIELDS: ClassVar[tuple[str, ...]] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        args = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.FIELDS)
        return f"{type(self).__name__}({args})"

    def to_dict(self) -> dict[str, Any]:
        """JSON types only (nested records become dicts, lists are copied)."""
        return {f: _plain(getattr(self, f)) for f in self.FIELDS}

    def replace(self, **changes: Any) -> Any:
        """A copy with `changes` applied (the original is left as it is)."""
        unknown = set(changes) - set(self.FIELDS)
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.replace: unknown field(s) {sorted(unknown)}; "
                f"expected some of {list(self.FIELDS)}"
            )
        return type(self)(**{f: changes.get(f, getattr(self, f)) for f in self.FIELDS})


def _plain(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class ProcessRecord(_Record):
    FIELDS = (
        "role",
        "rank",
        "local_index",
        "host",
        "log_file",
        "endpoint",
        "pid",
        "start_time",
        "end_time",
        "exit_code",
        "signal",
        "status",
        "restarts",
    )
    __slots__ = FIELDS

    def __init__(
        self,
        role: str,
        rank: int,
        local_index: int,
        host: str,
        log_file: str,
        endpoint: str = "",
        pid: int | None = None,
        start_time: float | None = None,
        end_time: float | None = None,
        exit_code: int | None = None,
        signal: str | None = None,
        status: str = ProcessStatus.RUNNING,
        restarts: int = 0,
    ) -> None:
        self.role = role
        self.rank = rank
        self.local_index = local_index
        self.host = host
        self.log_file = log_file
        self.endpoint = endpoint
        self.pid = pid
        self.start_time = start_time
        self.end_time = end_time
        self.exit_code = exit_code
        self.signal = signal
        self.status = status
        self.restarts = restarts

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessRecord:
        return cls(**data)


def by_signal(reason: object) -> bool:
    """A stop notice sent by a signal to a launcher (its cause says "launcher on H received
    ..."), not by a node leaving for a reason of the job's own (--on_straggler exclude)."""
    return not (isinstance(reason, str) and reason and not reason.startswith("launcher on "))


def notice_source(signal: object, node_index: object, host: object, reason: object) -> str:
    """Who sent a stop notice, in words: "SIGTERM on node 1 (10.0.0.2)", or the reason."""
    return f"{signal} on node {node_index} ({host})" if by_signal(reason) else str(reason)


# the signals to a launcher that are a preemption notice (`RootCause.preempted`)
PREEMPTION_SIGNALS = ("SIGTERM", "SIGUSR1")


class RootCause(_Record):
    FIELDS = (
        "reason",
        "host",
        "node_index",
        "role",
        "rank",
        "local_index",
        "exit_code",
        "signal",
        "log_file",
        "tail",
        "time",
        "duration",
        "membership",
        "stacks",
        "error",
    )
    __slots__ = FIELDS

    def __init__(
        self,
        reason: str,
        host: str = "",
        node_index: int | None = None,
        role: str | None = None,
        rank: int | None = None,
        local_index: int | None = None,
        exit_code: int | None = None,
        signal: str | None = None,
        log_file: str | None = None,
        tail: list[str] | None = None,
        time: float | None = None,  # Unix time of the failure
        duration: float | None = None,  # how long the failed process ran, seconds
        # elastic jobs: "lost" | "left" | "joined" when the round ended for a change of its
        # nodes (a new round follows, not counted as a restart); None otherwise
        membership: str | None = None,
        # --on_hang abort: the hang's summary.txt in its stack dump (as log_file is given);
        # role and rank then name the rank that holds the others up, if one does
        stacks: str | None = None,
        # the first line of the failed process's log that says why (paddlike.logs.first_error)
        error: str | None = None,
    ) -> None:
        self.reason = reason
        self.host = host
        self.node_index = node_index
        self.role = role
        self.rank = rank
        self.local_index = local_index
        self.exit_code = exit_code
        self.signal = signal
        self.log_file = log_file
        self.tail = [] if tail is None else tail
        self.time = time
        self.duration = duration
        self.membership = membership
        self.stacks = stacks
        self.error = error

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RootCause:
        return cls(**data)

    @property
    def stopped(self) -> bool:
        """A launcher received a signal (Ctrl-C, a scheduler's SIGTERM): the job was
        stopped, it did not fail."""
        return self.role is None and self.signal is not None and self.membership is None

    @property
    def preempted(self) -> bool:
        """A preemption notice: SIGTERM (a scheduler, Kubernetes, a spot machine taken back)
        or Slurm's warning signal to a launcher, not Ctrl-C or a hang-up. The ranks get the
        grace to save (`paddlike.distributed.should_stop`); an elastic node leaving on it
        too."""
        return (
            self.role is None
            and self.signal in PREEMPTION_SIGNALS
            and self.membership in (None, "left")
        )

    @property
    def hung(self) -> bool:
        """--on_hang abort ended the job (the cause may name the odd rank: not a failure
        of it, and no restart follows)."""
        if self.stacks is not None:
            return True
        return self.role is None and self.exit_code == HANG_EXIT_CODE


class RunSummary(_Record):
    FIELDS = (
        "job_id",
        "mode",
        "node_index",
        "nnodes",
        "host",
        "hostname",
        "log_dir",
        "start_time",
        "status",
        "exit_code",
        "end_time",
        "restarts",
        "processes",
        "root_cause",
        "rounds",
        "restart_causes",
        "hangs",
        "schema",
        "preemption",
        "stragglers",
        "preflight",
        "recoveries",
    )
    __slots__ = FIELDS

    def __init__(
        self,
        job_id: str,
        mode: str,
        node_index: int,
        nnodes: int,
        host: str,
        hostname: str,
        log_dir: str,
        start_time: float,
        status: str = RunStatus.RUNNING,
        exit_code: int | None = None,
        end_time: float | None = None,
        restarts: int = 0,
        processes: list[ProcessRecord] | None = None,
        root_cause: RootCause | None = None,
        rounds: list[dict[str, Any]] | None = None,
        restart_causes: list[dict[str, Any]] | None = None,
        schema: int = SCHEMA_VERSION,
        hangs: list[dict[str, Any]] | None = None,
        # a preemption notice ended the job: who sent it, the stop step, this node's ranks
        # that did not stop at it, seconds from the notice to the last rank's exit
        preemption: dict[str, Any] | None = None,
        # --straggler_check: node 0's last lateness table (`logs.lateness`)
        stragglers: dict[str, Any] | None = None,
        # the pre-flight check (issue 35): every node's figures and the verdict
        preflight: dict[str, Any] | None = None,
        # each round after a failure or a change of nodes: {"round", "restarts", "kept":
        # [{"rank", "local_index", "pid"}], "started": [...], "recovery_s", "measured"}
        recoveries: list[dict[str, Any]] | None = None,
    ) -> None:
        self.job_id = job_id
        self.mode = mode
        self.node_index = node_index
        self.nnodes = nnodes
        self.host = host
        self.hostname = hostname
        self.log_dir = log_dir
        self.start_time = start_time
        self.status = status
        self.exit_code = exit_code
        self.end_time = end_time
        self.restarts = restarts
        self.processes = [] if processes is None else processes
        self.root_cause = root_cause
        self.rounds = [] if rounds is None else rounds
        # why each --max_restarts restart happened: [{"round": 1, "cause": reason}, ...]
        self.restart_causes = [] if restart_causes is None else restart_causes
        self.schema = schema
        # --hang_timeout: every hang diagnosed (the dump's report and directory)
        self.hangs = [] if hangs is None else hangs
        self.preemption = preemption
        self.stragglers = stragglers
        self.preflight = preflight
        self.recoveries = [] if recoveries is None else recoveries

    def to_json(self) -> dict[str, Any]:
        return self.to_dict()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        fields = dict(data)
        fields["processes"] = [ProcessRecord(**p) for p in data.get("processes", [])]
        cause = data.get("root_cause")
        fields["root_cause"] = RootCause(**cause) if cause else None
        return cls(**fields)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSummary:
        return cls.from_dict(data)


def summary_text(summary: RunSummary) -> str:
    """summary.json's bytes as text: one format for every writer."""
    import json  # here, not at import: a launch's start (a --dry_run) writes none

    return json.dumps(summary.to_json(), indent=2) + "\n"


def write_summary(log_dir: str | os.PathLike[str], summary: RunSummary) -> Path:
    """Replace `summary.json` atomically: readers see the old or the new file."""
    path = Path(log_dir) / SUMMARY_FILE
    write_atomically(path, summary_text(summary))
    return path


def read_summary(log_dir: str | os.PathLike[str]) -> RunSummary | None:
    """The summary in `log_dir`, or None where there is none (e.g. Paddle's own logs)."""
    path = Path(log_dir) / SUMMARY_FILE
    try:  # a regular file only: another user's FIFO in a shared directory would block
        with open(open_regular(path, os.O_RDONLY), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    import json

    return RunSummary.from_json(json.loads(text))
