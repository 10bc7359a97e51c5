"""Render a JobView as text: per node a heading, then one aligned row per process.

Pure functions of the view (no I/O), so the exact output is tested. Colours are the
caller's choice (see report.use_color): status words only, so the table still lines
up — padding is computed on the plain text.
"""

from __future__ import annotations

import os
import time

from paddlike.logs.diagnosed import hang_lines
from paddlike.logs.preflight import preflight_lines
from paddlike.logs.reader import JobView, NodeView, ProcessView
from paddlike.logs.report import (
    describe_exit,
    format_duration,
    format_preemption,
    format_root_cause,
    paint,
)
from paddlike.summary import SUMMARY_FILE, ProcessStatus, RootCause, RunStatus

COLUMNS = (
    "ROLE",
    "RANK",
    "LOCAL",
    "HOST",
    "PID",
    "STATUS",
    "EXIT",
    "TIME",
    "RESTARTS",
    "LOG",
    "FIRST ERROR",
)
_STATUS_COLOR = {
    ProcessStatus.OK: "32",
    ProcessStatus.FAILED: "31;1",
    ProcessStatus.KILLED: "33",
    ProcessStatus.RUNNING: "36",
    ProcessStatus.GONE: "33",
}
_STATUS_WORD = {ProcessStatus.UNKNOWN: "?"}
# A node's or the job's status in the headings and the last line.
_RUN_WORD = {RunStatus.GONE: "launcher gone"}
MAX_ERROR_WIDTH = 120


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _exit_cell(p: ProcessView) -> str:
    if p.signal:
        return p.signal
    if p.exit_code is not None:
        return str(p.exit_code)
    return "-"


def _error_cell(p: ProcessView) -> str:
    error = p.first_error or ""
    if len(error) > MAX_ERROR_WIDTH:
        error = error[: MAX_ERROR_WIDTH - 3] + "..."
    return error or "-"


def process_row(p: ProcessView) -> list[str]:
    """The cells of one process, in COLUMNS order."""
    return [
        p.role_text,
        _cell(p.rank if p.rank is not None else "?"),
        str(p.local_index),
        _cell(p.host),
        _cell(p.pid),
        _STATUS_WORD.get(p.status, p.status),
        _exit_cell(p),
        format_duration(p.duration),
        str(p.restarts),
        p.log_path,
        _error_cell(p),
    ]


def format_rows(rows: list[list[str]], *, color: bool = False) -> list[str]:
    """Rows aligned in columns (the last column is not padded)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row_index, row in enumerate(rows):
        cells = []
        for i, cell in enumerate(row):
            padded = cell if i == len(row) - 1 else cell.ljust(widths[i])
            if color and row_index > 0 and COLUMNS[i] == "STATUS":
                padded = paint(cell, _STATUS_COLOR.get(cell, "0"), True) + padded[len(cell) :]
            elif color and row_index == 0:
                padded = paint(padded, "1", True)
            cells.append(padded)
        lines.append("  ".join(cells).rstrip())
    return lines


def _clock(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def node_heading(node: NodeView) -> str:
    """'node 0 of 2 (nodea, 198.18.0.1): failed, exit 3, job job-..., ran 2.31 s, log/'."""
    s = node.summary
    if s is None:
        return f"{node.log_dir} (no {SUMMARY_FILE})"
    where = ", ".join(x for x in (s.hostname, s.host) if x)
    text = f"node {s.node_index} of {s.nnodes}"
    if where:
        text += f" ({where})"
    text += f": {_RUN_WORD.get(node.status, node.status)}"
    if s.exit_code is not None:
        text += f", exit {s.exit_code}"
    running = node.status == RunStatus.RUNNING
    end = s.end_time if s.end_time is not None else (time.time() if running else None)
    if end is not None:
        text += f", ran {format_duration(end - s.start_time)}"
    text += f", started {_clock(s.start_time)}, job {s.job_id} ({s.mode})"
    if s.restarts:
        text += f", {s.restarts} restart{'s' if s.restarts != 1 else ''}"
    return f"{text}, {node.log_dir}"


MAX_ROUNDS = 10  # an elastic job's rounds shown, the latest ones


def restart_lines(node: NodeView) -> list[str]:
    """Why the job restarted (--max_restarts), one line: '  1 restart: trainer rank 1
    exited with code 3: ValueError: bad batch' (with its first error line, where the
    summary has one); causes of several restarts joined in order."""
    causes = node.summary.restart_causes if node.summary is not None else []
    if not causes:
        return kept_lines(node)
    n = len(causes)
    said = "; ".join(
        (f"restart {c.get('round')} after " if n > 1 else "")
        + str(c.get("cause"))
        + (f": {c['error']}" if c.get("error") else "")
        for c in causes[-MAX_ROUNDS:]
    )
    return [f"  {n} restart{'s' if n != 1 else ''}: {said}", *kept_lines(node)]


def kept_lines(node: NodeView) -> list[str]:
    """In-process restarts (`restartable`): '  round 1: 1 process kept (rank 0), 1 started
    anew, running 0.12 s after the failed process ended (not yet at a step)', for the
    rounds that kept any: the new round handed out, the script's first step comes later."""
    recoveries = node.summary.recoveries if node.summary is not None else []
    out = []
    for r in recoveries[-MAX_ROUNDS:]:
        kept, started = r.get("kept", []), r.get("started", [])
        if not kept:
            continue
        ranks = ", ".join(str(k.get("rank")) for k in kept)
        took = r.get("recovery_s")
        when = "" if took is None else (
            f", running {took:.2f} s after the failed process ended (not yet at a step)"
        )
        out.append(
            f"  round {r.get('round')}: {len(kept)} process{'es' if len(kept) != 1 else ''} "
            f"kept (rank{'s' if len(kept) != 1 else ''} {ranks}), {len(started)} started anew"
            + when
        )
    return out


def round_lines(node: NodeView) -> list[str]:
    """An elastic job's rounds on this node, one line each (the latest MAX_ROUNDS):
    '  round 1: 3 nodes (198.18.0.1, 198.18.0.2, 198.18.0.3), restarts 0: node 2 ... lost'."""
    rounds = node.summary.rounds if node.summary is not None else []
    out = restart_lines(node)
    if len(rounds) > MAX_ROUNDS:
        out.append(f"  ({len(rounds) - MAX_ROUNDS} earlier rounds in {SUMMARY_FILE})")
    for r in rounds[-MAX_ROUNDS:]:
        members = r.get("members", [])
        n = len(members)
        out.append(
            f"  round {r.get('round')}: {n} node{'s' if n != 1 else ''} ({', '.join(members)}), "
            f"restarts {r.get('restarts', 0)}: {r.get('ended', '?')}"
        )
    return out


def format_job(job: JobView, *, color: bool = False) -> str:
    """The default view: the root cause (with its log's end) above every node's table."""
    out: list[str] = []
    if job.root_cause is not None:
        out.append(format_root_cause(job.root_cause, color=color, log_dir=job.root_cause_log_dir))
        out.append("")
    preempted = job.preemptions()
    if preempted:  # every node's part: the stop step, who did not stop at it
        out.extend([format_preemption(preempted), ""])
    checked = [n.summary.preflight for n in job.nodes if n.summary and n.summary.preflight]
    if checked:  # the pre-flight check (issue 35): the same verdict and figures on every node
        out.extend([*preflight_lines(checked[0]), ""])
    for node in job.nodes:
        out.append(node_heading(node))
        out.extend(round_lines(node))
        if node.summary is not None:
            out.extend(hang_lines(node.summary.hangs, node.log_dir))
            out.extend(f"  {line}" for line in (node.summary.stragglers or {}).get("named", []))
        out.extend(f"  note: {note}" for note in node.notes)
        if node.processes:
            rows = [list(COLUMNS)] + [process_row(p) for p in node.processes]
            out.extend("  " + line for line in format_rows(rows, color=color))
        else:
            out.append("  (no processes recorded yet)")
        out.append("")
    out.append(_footer(job))
    return "\n".join(out)


def _footer(job: JobView) -> str:
    procs = job.processes
    counts: dict[str, int] = {}
    for p in procs:
        counts[p.status] = counts.get(p.status, 0) + 1
    parts = [f"{n} {status}" for status, n in counts.items()]
    status = _RUN_WORD.get(job.status, job.status)
    text = f"job {status}: {len(procs)} processes on {len(job.nodes)} node"
    text += "s" if len(job.nodes) != 1 else ""
    if parts:
        text += " (" + ", ".join(parts) + ")"
    if ProcessStatus.KILLED in counts:
        text += f"; killed = {killed_because(job.root_cause)}"
    if ProcessStatus.GONE in counts:
        text += "; gone = its launcher died before recording how it ended"
    if job.hung_for is not None:
        dirs = " ".join(n.log_dir for n in job.nodes)
        text += (
            f"\nthe job looks hung: no output or progress from any rank for "
            f"{format_duration(job.hung_for)}; see where each rank is: "
            f"python -m paddlike.logs --stacks {dirs}"
        )
    return text


def killed_because(cause: RootCause | None) -> str:
    """Why the launcher stopped processes that had not failed, from the job's root cause."""
    if cause is None:
        return "stopped by the launcher"
    if cause.hung:  # before the role: a hang's cause may name its odd rank
        return "stopped by the launcher because the job hung (--on_hang abort)"
    if cause.role is not None:
        return "stopped by the launcher after another process failed"
    if cause.stopped:
        return f"stopped because the {cause.reason}"
    if cause.membership is not None:
        return "stopped by the launcher when the job's nodes changed"
    return f"stopped by the launcher because {cause.reason}"


def format_process_tail(p: ProcessView, lines: list[str], *, color: bool = False) -> str:
    """`--rank N`: one process's facts in a line, then the end of its log verbatim."""
    known = p.exit_code is not None or p.signal
    exit_text = describe_exit(p.exit_code, p.signal) if known else "-"
    head = (
        f"{p.role_text} rank {_cell(p.rank if p.rank is not None else '?')} "
        f"(local index {p.local_index}, host {_cell(p.host)}, pid {_cell(p.pid)}): "
        f"{p.status}, exit {exit_text}, ran {format_duration(p.duration)}"
    )
    if p.first_error:
        head += f"\n  first error: {p.first_error}"
    size = _size(p.log_path)
    head += f"\n==> {p.log_path} ({size}; last {len(lines)} lines) <=="
    return paint(head, "1", color) + ("\n" + "\n".join(lines) if lines else "")


def _size(path: str) -> str:
    try:
        n = os.path.getsize(path)
    except OSError:
        return "missing"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"
