"""Load log directories into one view of a job: its nodes, their processes, the root cause.

A directory written by paddlike carries `summary.json` (paddlike.summary): the facts
come from there, and each failed process's log is scanned for its first error line.
A directory written by Paddle's own launchers has no summary: the processes are
inferred from the file names (`workerlog.N`, `serverlog.N`, `heterlog.N`), ranks and
hosts from `endpoints.log`, failures from the logs' contents.

A multi-node job is several directories (found by `logs.nodedirs`); the job's verdict and
root cause are those of the nodes that decide it (`deciding_nodes`: an elastic job's last
round).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from paddlike.logformat import (
    ENDPOINTS_FILE,
    LOG_PREFIXES,
    TAIL_LINES,
    last_run_header,
    last_run_start,
    match_log_name,
    parse_endpoints,
    read_regular_text,
    read_run_tail,
)
from paddlike.logs.alive import launcher_alive, launcher_pid, pid_alive
from paddlike.logs.first_error import first_error_in_file
from paddlike.logs.nodedirs import listdir, node_dirs
from paddlike.summary import (
    SUMMARY_FILE,
    ProcessRecord,
    ProcessStatus,
    RootCause,
    RunStatus,
    RunSummary,
)

_ROLE_ORDER = {"server": 0, "trainer": 1, "heter": 2}


def last_run_error(path: str | os.PathLike[str]) -> str | None:
    """The first error line of the last run in a log (runs start with a header line)."""
    path = str(path)
    return first_error_in_file(path, start=last_run_start(path))


@dataclass
class ProcessView:
    """One process as the reader shows it (a summary record plus what its log says)."""

    role: str
    rank: int | None  # None where a Paddle-written directory does not tell
    local_index: int
    host: str
    log_file: str  # relative to the node's log directory
    log_path: str  # the node directory as given, joined with log_file
    status: str
    node_index: int | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    restarts: int = 0
    endpoint: str = ""
    first_error: str | None = None
    stage: int | None = None  # a heter trainer's stage (2..), from its log's run header

    @property
    def duration(self) -> float | None:
        if self.start_time is None:
            return None
        end = self.end_time if self.end_time is not None else None
        if end is None and self.status == ProcessStatus.RUNNING:
            end = time.time()
        return None if end is None else max(0.0, end - self.start_time)

    @property
    def label(self) -> str:
        rank = "?" if self.rank is None else str(self.rank)
        return f"{self.role} {rank}" + (f" (stage {self.stage})" if self.stage else "")

    @property
    def role_text(self) -> str:
        """The role as tables show it: `heter (stage 2)` for a heter trainer."""
        return f"{self.role} (stage {self.stage})" if self.stage else self.role


@dataclass
class NodeView:
    """One node's log directory."""

    log_dir: str
    processes: list[ProcessView]
    summary: RunSummary | None = None  # None: a Paddle-written directory
    node_index: int | None = None
    host: str = ""
    hostname: str = ""
    status: str = RunStatus.UNKNOWN  # the summary's (GONE: its launcher died), or UNKNOWN
    trainer_endpoints: list[str] = field(default_factory=list)
    server_endpoints: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class JobView:
    """Every node of a job, and the job-wide root cause."""

    nodes: list[NodeView]
    root_cause: RootCause | None = None
    root_cause_log_dir: str | None = None  # the node directory holding the cause's log
    # seconds without output or progress from any rank of a running job, when that is
    # long enough to call it hung (set by `paddlike.logs.__main__`, which looks)
    hung_for: float | None = None

    @property
    def processes(self) -> list[ProcessView]:
        return [p for node in self.nodes for p in node.processes]

    @property
    def deciding(self) -> list[NodeView]:
        """The nodes whose end is the job's: an elastic job that went on after a node left
        (a signal, --on_straggler exclude, its launcher lost) ended with the nodes of its
        last round; the node that left keeps its own section, but not the job's verdict."""
        return deciding_nodes(self.nodes)

    @property
    def status(self) -> str:
        """running if any deciding node runs; else failed, interrupted, gone (a launcher
        died without recording the end), succeeded (every one), unknown."""
        statuses = {node.status for node in self.deciding}
        for status in (RunStatus.RUNNING, RunStatus.FAILED, RunStatus.INTERRUPTED, RunStatus.GONE):
            if status in statuses:
                return status
        if statuses == {RunStatus.SUCCEEDED}:
            return RunStatus.SUCCEEDED
        if any(p.status == ProcessStatus.FAILED for p in self.processes):
            return RunStatus.FAILED
        return RunStatus.UNKNOWN

    def preemptions(self) -> list[dict]:
        """The deciding nodes' preemption records (summary.json's "preemption")."""
        return [n.summary.preemption for n in self.deciding if n.summary and n.summary.preemption]

    def find(self, role: str, rank: int) -> ProcessView | None:
        """The process of `role` with global `rank` (or local index where the rank is unknown)."""
        for proc in self.processes:
            if proc.role == role and proc.rank == rank:
                return proc
        for proc in self.processes:
            if proc.role == role and proc.rank is None and proc.local_index == rank:
                return proc
        return None


def deciding_nodes(nodes: list[NodeView]) -> list[NodeView]:
    """`nodes` less those whose last recorded elastic round is older than another's (they
    left; the job went on without them). Fixed jobs record no rounds: every node decides."""
    last = {  # a node that ended before any round of its own ended: older than any
        id(n): max(
            (int(r.get("round", 0)) for r in n.summary.rounds),
            default=None if n.status == RunStatus.RUNNING else -1,
        )
        for n in nodes
        if n.summary is not None
    }
    latest = max((r for r in last.values() if r is not None), default=None)
    if latest is None or latest < 0:
        return nodes
    kept = [n for n in nodes if last.get(id(n)) in (None, latest)]
    return kept or nodes


# --- one node ------------------------------------------------------------------------------


def _read_endpoints(log_dir: Path) -> dict[str, list[str]]:
    try:
        return parse_endpoints(read_regular_text(log_dir / ENDPOINTS_FILE, errors="replace"))
    except OSError:
        return {}


def _is_this_host(summary: RunSummary) -> bool:
    return not summary.hostname or summary.hostname == socket.gethostname()


def _view_from_record(
    record: ProcessRecord, log_dir: Path, summary: RunSummary, local_host: bool
) -> ProcessView:
    status = record.status
    running = status == ProcessStatus.RUNNING
    if running and local_host and not pid_alive(record.pid, record.start_time):
        status = ProcessStatus.GONE
    log_path = log_dir / record.log_file
    view = ProcessView(
        role=record.role,
        rank=record.rank,
        local_index=record.local_index,
        host=record.host or summary.host,
        log_file=record.log_file,
        log_path=str(log_path),
        status=status,
        node_index=summary.node_index,
        pid=record.pid,
        exit_code=record.exit_code,
        signal=record.signal,
        start_time=record.start_time,
        end_time=record.end_time,
        restarts=record.restarts,
        endpoint=record.endpoint,
    )
    if status in (ProcessStatus.FAILED, ProcessStatus.GONE, ProcessStatus.RUNNING) or record.signal:
        view.first_error = last_run_error(log_path)
    if record.role == "heter":
        view.stage = _stage_of(log_path)
    return view


def _stage_of(log_path: Path) -> int | None:
    """A heter trainer's stage, as its last run header says (None: no such header)."""
    header = last_run_header(log_path)
    return int(header.group("stage")) if header is not None and header.group("stage") else None


def _load_summary(log_dir: Path, notes: list[str]) -> RunSummary | None:
    path = log_dir / SUMMARY_FILE
    try:
        text = read_regular_text(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        notes.append(f"{SUMMARY_FILE} unreadable ({e.strerror}): facts inferred from the logs")
        return None
    try:
        data = json.loads(text)
        if data.get("schema", 1) > 1:
            notes.append(f"{SUMMARY_FILE} has schema {data['schema']}; this reader knows 1")
        known = set(RunSummary.FIELDS)
        return RunSummary.from_json({k: v for k, v in data.items() if k in known})
    except (ValueError, TypeError, AttributeError) as e:
        notes.append(f"{SUMMARY_FILE} is not a valid summary ({e}): facts inferred from the logs")
        return None


def load_node(log_dir: str | os.PathLike[str]) -> NodeView:
    """One node's directory as a NodeView (summary-backed or inferred)."""
    path = Path(log_dir)
    names = listdir(path)
    notes: list[str] = []
    endpoints = _read_endpoints(path)
    trainers = endpoints.get("PADDLE_TRAINER_ENDPOINTS", [])
    servers = endpoints.get("PADDLE_PSERVERS_IP_PORT_LIST", []) or endpoints.get(
        "PADDLE_PSERVER_ENDPOINTS", []
    )
    summary = _load_summary(path, notes)
    if summary is not None:
        local_host = _is_this_host(summary)
        procs = [_view_from_record(r, path, summary, local_host) for r in summary.processes]
        status = summary.status
        if status == RunStatus.RUNNING and local_host and not launcher_alive(path):
            status = RunStatus.GONE
            notes.append(_launcher_gone(path, procs))
        return NodeView(
            log_dir=str(path),
            processes=sorted(procs, key=_process_order),
            summary=summary,
            node_index=summary.node_index,
            host=summary.host,
            hostname=summary.hostname,
            status=status,
            trainer_endpoints=trainers,
            server_endpoints=servers,
            notes=notes,
        )
    if not any(n == SUMMARY_FILE for n in names):
        notes.append(
            "roles and failures inferred from the file names and contents (a directory "
            "written by Paddle's launcher, or by a launcher that is still starting)"
        )
    procs = _infer_processes(path, names, trainers, servers)
    host = _common_host(procs)
    return NodeView(
        log_dir=str(path),
        processes=sorted(procs, key=_process_order),
        host=host,
        status=RunStatus.UNKNOWN,
        trainer_endpoints=trainers,
        server_endpoints=servers,
        notes=notes,
    )


def _launcher_gone(path: Path, procs: list[ProcessView]) -> str:
    """What the reader says of a node whose launcher died without recording the end.

    Only its parent saw how it died; the reader names the possible causes, not a guess
    (SIGKILL is one, but so is any signal the launcher does not handle)."""
    pid = launcher_pid(path)
    who = f"the launcher (pid {pid})" if pid is not None else "the launcher"
    text = (
        f"{who} is gone without recording how the job ended (why cannot be read here: a "
        "signal it does not handle, such as SIGKILL or the OOM killer's, or a restart of "
        "its machine)"
    )
    left = [p for p in procs if p.status == ProcessStatus.RUNNING]
    if not left:
        return text + "; its processes are gone too"
    pids = " ".join(str(p.pid) for p in left)
    return text + f"; {len(left)} of its processes still run: stop them with kill {pids}"


def _infer_processes(
    log_dir: Path, names: list[str], trainers: list[str], servers: list[str]
) -> list[ProcessView]:
    by_role: dict[str, list[int]] = {}
    for name in names:
        match = match_log_name(name)
        if match:
            by_role.setdefault(LOG_PREFIXES[match.group(1)], []).append(int(match.group(2)))
    procs = []
    for role, indexes in by_role.items():
        known = {"trainer": trainers, "server": servers}.get(role, [])
        # Ranks are knowable only when this directory holds every process of the role.
        ranks_known = len(known) == len(indexes) and sorted(indexes) == list(range(len(known)))
        for index in sorted(indexes):
            prefix = next(k for k, v in LOG_PREFIXES.items() if v == role)
            log_file = f"{prefix}.{index}"
            log_path = log_dir / log_file
            error = last_run_error(log_path)
            endpoint = known[index] if ranks_known else ""
            rank = index if ranks_known else None
            header = last_run_header(log_path)
            if header is not None and header.group("role") == role:
                rank = int(header.group("rank"))
                endpoint = known[rank] if rank < len(known) else endpoint
            procs.append(
                ProcessView(
                    role=role,
                    rank=rank,
                    local_index=index,
                    host=endpoint.rsplit(":", 1)[0] if endpoint else "",
                    log_file=log_file,
                    log_path=str(log_path),
                    status=ProcessStatus.FAILED if error else ProcessStatus.UNKNOWN,
                    endpoint=endpoint,
                    first_error=error,
                    stage=_stage_of(log_path) if role == "heter" else None,
                )
            )
    return procs


def _common_host(procs: list[ProcessView]) -> str:
    hosts = {p.host for p in procs if p.host}
    return hosts.pop() if len(hosts) == 1 else ""


def _process_order(p: ProcessView) -> tuple[int, int, int]:
    return (_ROLE_ORDER.get(p.role, 9), p.rank if p.rank is not None else p.local_index, 0)


# --- the job ---------------------------------------------------------------------------------


def load(paths: list[str | os.PathLike[str]], *, tail_lines: int = TAIL_LINES) -> JobView:
    """Every node directory under `paths`, ordered by node index, with the job's root cause."""
    nodes = [load_node(d) for d in node_dirs(paths)]
    nodes.sort(key=lambda n: (n.node_index is None, n.node_index or 0, n.log_dir))
    job = JobView(nodes=nodes)
    job.root_cause, job.root_cause_log_dir = _root_cause(nodes, tail_lines)
    return job


def _root_cause(nodes: list[NodeView], tail_lines: int) -> tuple[RootCause | None, str | None]:
    """The summaries' root cause (the job-wide one; the earliest if nodes disagree);
    else, for inferred directories, the first process whose log shows an error."""
    causes = [
        (n.summary.root_cause, n)
        for n in deciding_nodes(nodes)  # not a node that left a job which went on
        if n.summary and n.summary.root_cause is not None
    ]
    if causes:
        cause, node = min(causes, key=lambda c: (c[0].time is None, c[0].time or 0.0))
        holder = _node_holding(cause, nodes) or node
        if not cause.tail and cause.log_file:
            cause.tail = read_run_tail(Path(holder.log_dir) / cause.log_file, tail_lines)
        return cause, holder.log_dir
    for node in nodes:
        if node.summary is not None:
            continue
        for proc in node.processes:
            if proc.status == ProcessStatus.FAILED:
                reason = f"{proc.role} {'rank ' + str(proc.rank) if proc.rank is not None else ''}"
                reason = reason.strip() + f" ({proc.log_file}) logged: {proc.first_error}"
                cause = RootCause(
                    reason=reason,
                    host=proc.host,
                    role=proc.role,
                    rank=proc.rank,
                    local_index=proc.local_index,
                    log_file=proc.log_file,
                    tail=read_run_tail(proc.log_path, tail_lines),
                )
                return cause, node.log_dir
    return None, None


def _node_holding(cause: RootCause, nodes: list[NodeView]) -> NodeView | None:
    for node in nodes:
        if cause.node_index is not None and node.node_index == cause.node_index:
            return node
    return None
