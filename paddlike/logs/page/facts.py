"""What the job page draws, as plain JSON: every process's span, the rounds, the marks.

`job_facts(job)` turns the reader's JobView (paddlike.logs.reader) into one dict that
the page's script draws; everything the page shows comes from here, so the structure
tests read this dict rather than pixels. Times are seconds after the job's first start
(`t0`, Unix time), rounded to milliseconds, which keeps a 512-rank page small.

Facts a directory lacks are left out: a directory written by Paddle's own launcher has
no start or end times, so its rows have no bars (only the time its log last changed); a
job without progress files has no progress charts. The one estimate, marked as such on
the page: a process whose launcher died never got an end time, and its bar ends at its
last sign of life (its log's last change, its progress file's last beat).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paddlike.distributed import progress as P
from paddlike.logformat import (
    HEADER_PREFIX,
    last_run_header,
    open_regular,
    parse_header,
    read_run_tail,
)
from paddlike.logs.diagnosed import hang_lines
from paddlike.logs.hang import compare_flights, describe_stragglers, find_stragglers
from paddlike.logs.page.last_signs import last_signs, mark_first, newest_dump
from paddlike.logs.preflight import preflight_lines
from paddlike.logs.process_table import format_job, restart_lines
from paddlike.logs.reader import JobView, NodeView, ProcessView
from paddlike.logs.report import (
    format_duration,
    format_preemption,
    format_root_cause,
    format_success,
)
from paddlike.summary import ProcessStatus, RunStatus

TAIL_LINES = 20  # log lines kept per process for its detail panel
LINE_CHARS = 400  # a longer log line is cut (a progress bar rewritten with \r)
FLIGHT_KEEP_SMALL = 64  # flight entries kept per rank in a job of a few ranks
FLIGHT_KEEP_LARGE = 12  # ... and in a large job (the page stays a few MB at 512 ranks)
LARGE_JOB = 32  # ranks from which a job counts as large
COMPARED = 64  # newest flight entries per rank compared across ranks (hang.compare_flights)
# Earlier runs' headers are looked for in the first HEADER_SCAN_BYTES of each log, and in
# HEADER_SCAN_TOTAL over all the logs of a page (512 logs of gigabytes stay a second's work).
HEADER_SCAN_BYTES = 4 << 20
HEADER_SCAN_TOTAL = 256 << 20
_STAMP = len(HEADER_PREFIX), len(HEADER_PREFIX) + 19  # where its time stands
_ODD_RANK = re.compile(r"^rank (\d+) \(")  # hang.describe_groups' line for a lone rank


def _ms(t: float | None, t0: float) -> float | None:
    return None if t is None else round(t - t0, 3)


def run_starts(
    path: str | os.PathLike[str], limit: int = HEADER_SCAN_BYTES
) -> list[tuple[float, int, int | None]]:
    """Every run header in the first `limit` bytes of a log: (Unix time, restart, round),
    oldest first. Header times are local time to the second."""
    try:
        with open(open_regular(path, os.O_RDONLY), "rb") as f:  # never a FIFO's reader
            data = f.read(limit)
    except OSError:
        return []
    needle = HEADER_PREFIX.encode()
    runs: list[tuple[float, int, int | None]] = []
    pos = 0 if data.startswith(needle) else data.find(b"\n" + needle)
    while pos >= 0:
        start = pos if data.startswith(needle, pos) else pos + 1
        eol = data.find(b"\n", start)
        line = data[start : eol if eol >= 0 else None]
        text = line.decode("utf-8", errors="replace")
        match = parse_header(text)
        when = _header_time(text) if match else None
        if match and when is not None:
            rnd = match.group("round")
            runs.append((when, int(match.group("restart")), int(rnd) if rnd else None))
        pos = data.find(b"\n" + needle, start + 1)
    return runs


def _header_time(line: str) -> float | None:
    """A header's time, Unix seconds: `2026-11-22 11:46:00.123` (milliseconds since they
    were added) or `2026-11-22 11:46:00` (older logs); None when it is neither."""
    try:
        stamp = time.strptime(line[_STAMP[0] : _STAMP[1]], "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    frac = line[_STAMP[1] : _STAMP[1] + 4]
    ms = int(frac[1:]) if frac[:1] == "." and frac[1:].isdigit() else 0
    return time.mktime(stamp) + ms / 1000


def command_of(path: str | os.PathLike[str]) -> str:
    """The command line the last run header of a log names ('' without a header)."""
    header = last_run_header(path)
    if header is None:
        return ""
    rest = header.string[header.end() :].strip()
    return rest.removesuffix("====").strip()


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def report_text(job: JobView) -> str:
    """The console's words: the root-cause report (paddlike.logs.report), or its OK line;
    then why the job restarted, when it did, and the hangs diagnosed (`paddlike.logs`'
    lines)."""
    restarted = next((lines for n in job.nodes if (lines := restart_lines(n))), [])
    hung = next(
        (
            lines
            for n in job.nodes
            if n.summary and (lines := hang_lines(n.summary.hangs, n.log_dir))
        ),
        [],
    )
    preempted = job.preemptions()
    said = [format_preemption(preempted)] if preempted else []  # the stop step, who missed it
    slow = _named([n.summary.stragglers for n in job.nodes if n.summary])  # issue 37
    checked = next(
        (n.summary.preflight for n in job.nodes if n.summary and n.summary.preflight), None
    )
    return "\n".join(
        [
            _report_text(job),
            *said,
            *(line.strip() for line in [*restarted, *hung, *slow]),
            *preflight_lines(checked),  # the pre-flight check (issue 35), as the reader prints it
        ]
    )


def _report_text(job: JobView) -> str:
    if job.root_cause is not None:
        return format_root_cause(job.root_cause, log_dir=job.root_cause_log_dir)
    procs = job.processes
    if job.status == RunStatus.SUCCEEDED:  # the last round's nodes (a node that left: not)
        procs = [p for node in job.deciding for p in node.processes]
        starts = [p.start_time for p in procs if p.start_time is not None]
        ends = [p.end_time for p in procs if p.end_time is not None]
        duration = max(ends) - min(starts) if starts and ends else None
        restarts = max((n.summary.restarts for n in job.nodes if n.summary), default=0)
        return format_success(
            sum(p.role == "trainer" for p in procs) or len(procs),
            duration,
            nnodes=len(job.deciding),
            log_dir=job.nodes[0].log_dir if len(job.nodes) == 1 else None,
            restarts=restarts,
        )
    # Without a cause: the line the console's table ends with (`python -m paddlike.logs`).
    return format_job(job).split("\n\n")[-1]


def _node_facts(node: NodeView, t0: float) -> dict[str, Any]:
    s = node.summary
    return {
        "index": node.node_index,
        "host": node.host,
        "hostname": node.hostname,
        "status": node.status,
        "log_dir": node.log_dir,
        "notes": node.notes,
        "job_id": s.job_id if s else None,
        "mode": s.mode if s else None,
        "exit_code": s.exit_code if s else None,
        "start": _ms(s.start_time, t0) if s else None,
        "end": _ms(s.end_time, t0) if s else None,
        "restarts": s.restarts if s else 0,
    }


def _exit_text(p: ProcessView) -> str:
    if p.signal:
        return p.signal
    return "" if p.exit_code is None else str(p.exit_code)


def _is_cause(p: ProcessView, job: JobView) -> bool:
    c = job.root_cause
    if c is None or c.role is None or (c.rank is None and c.local_index is None):
        return False
    if p.role != c.role or (c.node_index is not None and p.node_index not in (None, c.node_index)):
        return False
    return p.rank == c.rank if c.rank is not None else p.local_index == c.local_index


def _process_facts(
    p: ProcessView, job: JobView, node_pos: int, t0: float, scan: list[int] | None
) -> dict[str, Any]:
    """One process's row. `scan`: bytes left to read for earlier runs' headers (a
    one-item list the rows share), None when the job never restarted."""
    facts: dict[str, Any] = {
        "node": node_pos,
        "role": p.role_text,
        "rank": p.rank,
        "local": p.local_index,
        "host": p.host,
        "status": p.status,
        "pid": p.pid,
        "exit": _exit_text(p),
        "start": _ms(p.start_time, t0),
        "end": _ms(p.end_time, t0),
        "ran": format_duration(p.duration) if p.duration is not None else "",
        "restarts": p.restarts,
        "log": p.log_path,
        "error": p.first_error,
        "cmd": command_of(p.log_path),
        "tail": [_cut(line) for line in read_run_tail(p.log_path, TAIL_LINES)],  # this run
    }
    if p.start_time is None or (p.end_time is None and p.status != ProcessStatus.RUNNING):
        # No times (Paddle's launchers), or no end (its launcher died): the last output.
        with contextlib.suppress(OSError):
            facts["mtime"] = _ms(os.stat(p.log_path).st_mtime, t0)
    if scan is not None and scan[0] > 0:
        limit = min(HEADER_SCAN_BYTES, scan[0])
        with contextlib.suppress(OSError):
            scan[0] -= min(limit, os.stat(p.log_path).st_size)
        # Header times are whole seconds: the last run's start is the summary's, exact.
        starts = run_starts(p.log_path, limit)
        found = [[max(0.0, t - t0), restart, rnd] for t, restart, rnd in starts]
        if found and p.start_time is not None:
            found[-1][0] = p.start_time - t0
        facts["runs"] = [[round(t, 3), restart, rnd] for t, restart, rnd in found]
    if _is_cause(p, job):
        facts["cause"] = True
    return facts


def _t0(job: JobView) -> float:
    starts = [n.summary.start_time for n in job.nodes if n.summary and n.summary.start_time]
    starts += [p.start_time for p in job.processes if p.start_time is not None]
    if starts:
        return min(starts)
    mtimes = []
    for p in job.processes:
        with contextlib.suppress(OSError):
            mtimes.append(os.stat(p.log_path).st_mtime)
    return min(mtimes) - 1.0 if mtimes else time.time()


def _stack_dumps(node: NodeView, t0: float) -> list[dict[str, Any]]:
    """Every stack dump of a node directory (stacks/<time>/stacks.json): when, and the
    grouped summary the launcher printed."""
    dumps = []
    for path in sorted(Path(node.log_dir).glob("stacks/*/stacks.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        lines = [str(x) for x in data.get("summary", [])]
        odd = _ODD_RANK.match(lines[0]) if lines else None
        dumps.append(
            {
                "t": _ms(float(data.get("time", 0.0)), t0),
                "dir": str(path.parent),
                "summary": lines,
                "odd": int(odd.group(1)) if odd and len(lines) > 1 else None,
            }
        )
    return dumps


def _rounds(job: JobView, procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rounds (elastic) or restarts: where each began, from the earliest run header that
    names it; what ended it, from the summaries."""
    starts: dict[tuple[int, int | None], float] = {}
    for p in procs:
        for t, restart, rnd in p.get("runs", []):
            key = (restart, rnd)
            starts[key] = min(starts.get(key, t), t)
    listed = []
    for node in job.nodes:
        if node.summary and len(node.summary.rounds) > len(listed):
            listed = node.summary.rounds
    if listed:
        out = []
        for r in listed:
            begun = [t for (_, rnd), t in starts.items() if rnd == r.get("round")]
            out.append(
                {
                    "label": f"round {r.get('round')}",
                    "start": min(begun) if begun else None,
                    "members": r.get("members", []),
                    "ended": r.get("ended"),
                    "membership": r.get("membership"),
                }
            )
        return out
    by_restart: dict[int, float] = {}
    for (restart, _), t in starts.items():
        by_restart[restart] = min(by_restart.get(restart, t), t)
    if len(by_restart) < 2:
        return []
    return [
        {"label": f"restart {k}" if k else "first run", "start": by_restart[k], "members": []}
        for k in sorted(by_restart)
    ]


def _flight_row(e: P.FlightEntry, prog: P.RankProgress, t0: float) -> list[Any]:
    end = _ms(prog.to_wall(e.end_mono), t0) if e.end_mono else None
    return [e.n, e.group_seq, e.op, e.nbytes, e.dtype, e.peer, e.group_id,
            _ms(prog.to_wall(e.start_mono), t0), end, e.state]  # fmt: skip


def _progress(
    job: JobView, t0: float, history: Mapping[int, list[tuple[float, int]]] | None
) -> dict[str, Any] | None:
    """Every rank's progress file (heartbeats, steps, flight record), job-wide."""
    found: dict[int, P.RankProgress] = {}
    for node in job.nodes:
        job_id = node.summary.job_id if node.summary else None
        for rank, prog in P.read_all(node.log_dir, job_id=job_id, flight=COMPARED).items():
            # An elastic job renumbers ranks each round: the newest file of a rank is its.
            if rank not in found or found[rank].created_wall < prog.created_wall:
                found[rank] = prog
    if not found:
        return None
    keep = FLIGHT_KEEP_LARGE if len(found) >= LARGE_JOB else FLIGHT_KEEP_SMALL
    ranks = {}
    for rank, prog in sorted(found.items()):
        ranks[str(rank)] = {
            "step": prog.step,
            "beats": prog.beats,
            "ops": prog.ops,
            "host": prog.hostname,
            "last": _ms(prog.last_activity_wall, t0),
            "step_time": round(prog.step_time, 4),
            "busy_time": round(prog.busy_time, 4),
            "flight": [_flight_row(e, prog, t0) for e in prog.flight[-keep:]],
        }
        if history and history.get(rank):
            ranks[str(rank)]["steps"] = [[_ms(t, t0), s] for t, s in history[rank]]
    stragglers = find_stragglers(found.values())
    return {
        "ranks": ranks,
        # A hang's disagreement is at the end of the records: their last entries suffice.
        "mismatch": compare_flights({r: p.flight[-COMPARED:] for r, p in found.items()}),
        "stragglers": describe_stragglers(stragglers),
        "straggler_ranks": [s.rank for s in stragglers],
    }


def _named(tables: list[dict[str, Any] | None]) -> list[str]:
    """Who the straggler check named: node 0's table's (summary.json "stragglers"), else,
    without node 0's directory, what node 0 told another node (`lateness_report`)."""
    full = [t for t in tables if t and "decided_on" not in t]
    heard = [t.get("heard") for t in tables if t and "decided_on" in t]
    for table in [*full, *heard]:
        named = table.get("named") if isinstance(table, dict) else None
        if isinstance(named, list):
            return [str(x) for x in named]
    return []


def lateness_facts(job: JobView, t0: float) -> dict[str, Any] | None:
    """The heat map's data: node 0's last straggler check (summary.json "stragglers",
    `logs.lateness`), its times after `t0`; None where no check kept a map (off, no
    collective, a summary written before the map was kept)."""
    for node in job.nodes:
        table = node.summary.stragglers if node.summary else None
        heat = table.get("heat") if isinstance(table, dict) else None
        if not isinstance(heat, dict) or not heat.get("ranks"):
            continue
        cols = [c for c in heat.get("collectives") or [] if isinstance(c, list) and len(c) == 4]
        shown = {r.get("rank") for r in heat["ranks"] if isinstance(r, dict)}
        when = table.get("time")
        return {
            "t": _ms(when, t0) if isinstance(when, (int, float)) else None,
            "check": table.get("check"),
            "window": table.get("window"),
            "reference": table.get("reference"),
            "step_known": bool(table.get("step_known")),
            "bar": table.get("bar") or 0.0,
            "named": [str(x) for x in table.get("named") or []],
            "ranks_total": heat.get("ranks_total"),
            "collectives": [
                [op, seq, group, _ms(t, t0) if isinstance(t, (int, float)) else None]
                for op, seq, group, t in cols
            ],
            "ranks": heat["ranks"],
            # each shown rank's median lateness (s) and share of last arrivals
            "medians": {
                str(r["rank"]): [r.get("median"), r.get("last_share")]
                for r in table.get("ranks") or []
                if isinstance(r, dict) and r.get("rank") in shown
            },
        }
    return None


def job_facts(
    job: JobView,
    *,
    now: float | None = None,
    follow: float = 0.0,
    history: Mapping[int, list[tuple[float, int]]] | None = None,
) -> dict[str, Any]:
    """The page's data. `follow` > 0: the page reloads itself every `follow` seconds while
    the job runs (`--html FILE --follow` rewrites the file). `history`: step samples per
    rank that a follower took, drawn as steps over time."""
    now = time.time() if now is None else now
    t0 = _t0(job)
    restarted = any(n.summary and (n.summary.restarts or n.summary.rounds) for n in job.nodes)
    scan = [HEADER_SCAN_TOTAL] if restarted else None
    procs = []
    for pos, node in enumerate(job.nodes):
        rows = [_process_facts(p, job, pos, t0, scan) for p in node.processes]
        dump = newest_dump(node.log_dir)
        signs = last_signs(dump, t0) if dump is not None else {}
        for row in rows:
            if row["role"] == "trainer" and row["rank"] in signs:
                row["last"] = signs[row["rank"]]
        procs.extend(rows)
    dumps = [d for node in job.nodes for d in _stack_dumps(node, t0)]
    newest = max(dumps, key=lambda d: d["t"] or 0.0) if dumps else None
    signs = {p["rank"]: p["last"] for p in procs if "last" in p}
    mark_first(signs, newest["odd"] if newest else None)
    ends = [p["end"] for p in procs if p["end"] is not None]
    ends += [p.get("mtime") for p in procs if p.get("mtime") is not None]
    ends += [d["t"] for d in dumps]
    cause = job.root_cause
    if cause is not None and cause.time is not None:
        ends.append(_ms(cause.time, t0))
    running = job.status == RunStatus.RUNNING
    t1 = _ms(now, t0) if running or not ends else max(ends)
    summaries = [n.summary for n in job.nodes if n.summary]
    first = summaries[0] if summaries else None
    return {
        "schema": 1,
        "job_id": first.job_id if first else None,
        "mode": first.mode if first else None,
        "status": job.status,
        "t0": t0,
        "t1": max(t1 or 0.0, 0.001),
        "generated": now,
        "follow": follow if running else 0.0,
        "report": report_text(job),
        "cause": None
        if cause is None
        else {
            "t": _ms(cause.time, t0),
            "reason": cause.reason,
            "membership": cause.membership,
            "node": cause.node_index,
        },
        "nodes": [_node_facts(n, t0) for n in job.nodes],
        "procs": procs,
        "rounds": _rounds(job, procs),
        "dumps": dumps,
        "progress": _progress(job, t0, history),
        "lateness": lateness_facts(job, t0),
    }
