"""The failure and success reports, shared by the launcher's console and `paddlike.logs`.

One function renders the root cause, so that the launcher's last words and
`python -m paddlike.logs` say the same thing. Standard library only: the launcher
imports this module, and must stay light (no numpy, no third-party imports).

    FAILED: trainer rank 1 exited with code 3
      where    node 0 (198.18.0.1), trainer rank 1, local index 1
      exit     code 3
      ran for  2.31 s
      log      log/workerlog.1
      last 20 lines of workerlog.1:
        | Traceback (most recent call last):
        | ...
"""

from __future__ import annotations

import json
import os
import signal as _signal
import time
from collections.abc import Mapping, Sequence

from paddlike.logformat import TAIL_LINES, read_regular
from paddlike.logformat import read_tail as read_tail  # one tail reader, the launcher's too
from paddlike.summary import RootCause, by_signal, notice_source

# A worker's structured error (torch's `@record` writes it to TORCHELASTIC_ERROR_FILE,
# which the launcher sets to this name next to the worker's log).
ERROR_FILE_SUFFIX = ".error.json"

# ANSI SGR codes; used only when the caller says the output is a colour terminal.
_RED = "31"
_GREEN = "32"
_YELLOW = "33"
_DIM = "2"
_BOLD = "1"


def paint(text: str, code: str, color: bool) -> str:
    """`text` wrapped in an ANSI colour when `color`, else unchanged."""
    return f"\x1b[{code}m{text}\x1b[0m" if color and text else text


def use_color(stream: object) -> bool:
    """Colours only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed stream
        return False


def format_duration(seconds: float | None) -> str:
    """A duration a person reads at a glance: 0.42 s, 12.3 s, 4m05s, 2h03m."""
    if seconds is None:
        return "-"
    if seconds < 0:
        seconds = 0.0
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def signal_description(name: str) -> str:
    """'SIGKILL' -> 'signal SIGKILL (9)': the number as well, since users search for both."""
    try:
        number = int(_signal.Signals[name])
    except KeyError:
        return f"signal {name}"
    return f"signal {name} ({number})"


def describe_exit(exit_code: int | None, signal: str | None) -> str:
    """'code 3', 'signal SIGKILL (9)', or 'unknown' when neither is known."""
    if signal:
        return signal_description(signal)
    if exit_code is None:
        return "unknown"
    return f"code {exit_code}"


def _where(cause: RootCause) -> str:
    parts: list[str] = []
    if cause.node_index is not None:
        node = f"node {cause.node_index}"
        if cause.host:
            node += f" ({cause.host})"
        parts.append(node)
    elif cause.host:
        parts.append(f"host {cause.host}")
    if cause.role is not None or cause.rank is not None:
        role = cause.role or "process"
        parts.append(f"{role} rank {cause.rank}" if cause.rank is not None else role)
    if cause.local_index is not None:
        parts.append(f"local index {cause.local_index}")
    return ", ".join(parts)


def _log_path(log_file: str, log_dir: str | os.PathLike[str] | None) -> str:
    if log_dir is None or os.path.isabs(log_file):
        return log_file
    return os.path.join(os.fspath(log_dir), log_file)


class WorkerError:
    """What a worker wrote to its error file: the exception's one line and its traceback."""

    __slots__ = ("message", "path", "peer_exited", "timestamp", "traceback")

    def __init__(
        self,
        message: str,
        traceback: str,
        timestamp: float | None,
        path: str,
        peer_exited: int | None = None,
    ) -> None:
        self.message = message
        self.traceback = traceback
        self.timestamp = timestamp
        self.path = path
        # paddlike's runtime: the exception reported peer rank N's exit (-1: rank unknown),
        # so this worker's failure is a consequence, not a cause
        self.peer_exited = peer_exited


def read_error_file(path: str | os.PathLike[str]) -> WorkerError | None:
    """torchelastic's error file, in either of torch's formats, or None when absent/unreadable.

    {"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "Traceback...",
                                                            "timestamp": "1700000000"}}}
    {"message": "ValueError: x", "timestamp": 1700000000}     (a message given as text)
    """
    try:  # never a link or a FIFO another user put in a shared log directory
        data = json.loads(read_regular(path, 16 << 20).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    body = data.get("message")
    timestamp = data.get("timestamp")
    traceback = ""
    if isinstance(body, dict):
        extra = body.get("extraInfo") if isinstance(body.get("extraInfo"), dict) else {}
        traceback = str(extra.get("py_callstack") or "")
        timestamp = extra.get("timestamp", timestamp)
        message = str(body.get("message") or "")
    elif isinstance(body, str):
        message = body
    else:
        return None
    try:
        when = float(timestamp) if timestamp is not None else None
    except (TypeError, ValueError):
        when = None
    if when is None:
        try:
            when = os.stat(path).st_mtime
        except OSError:
            when = None
    if not message and not traceback:
        return None
    ours = data.get("paddlike")
    peer = ours.get("peer_exited") if isinstance(ours, dict) else None
    peer = peer if isinstance(peer, int) and not isinstance(peer, bool) else None
    return WorkerError(message, traceback, when, os.fspath(path), peer)


def cause_error_file(
    cause: RootCause, log_dir: str | os.PathLike[str] | None = None
) -> WorkerError | None:
    """The failed worker's error file, when it wrote one in this run (not a stale file from
    an earlier run in the same directory: its timestamp must not precede the worker's start)."""
    if not cause.log_file:
        return None
    error = read_error_file(_log_path(cause.log_file, log_dir) + ERROR_FILE_SUFFIX)
    if error is None:
        return None
    if cause.time is not None and error.timestamp is not None:
        started = cause.time - (cause.duration or 0.0)
        if error.timestamp < int(started) - 1:  # torch writes whole seconds
            return None
    return error


def format_tail(lines: Sequence[str], *, color: bool = False, indent: str = "    ") -> str:
    """Log lines quoted with a `| ` margin, so they stand apart from the report's own lines."""
    bar = paint("|", _DIM, color)
    return "\n".join(f"{indent}{bar} {line.rstrip()}" for line in lines)


def format_root_cause(
    cause: RootCause,
    *,
    color: bool = False,
    log_dir: str | os.PathLike[str] | None = None,
    tail_lines: int = TAIL_LINES,
) -> str:
    """The multi-line failure report: what failed, where, how, for how long, and its log's end.
    `STOPPED:` instead of `FAILED:` when a launcher received a signal (`RootCause.stopped`).

    `log_dir`, when given, is joined to the cause's relative log file name so the
    user can copy the path. `tail_lines` caps the quoted lines (the cause carries
    at most what the launcher captured).
    """
    if cause.stopped:  # Ctrl-C or a scheduler's SIGTERM: nothing of the job failed
        label = paint("STOPPED:", _YELLOW + ";" + _BOLD, color)
    else:
        label = paint("FAILED:", _RED + ";" + _BOLD, color)
    out = [f"{label} {cause.reason}"]
    rows: list[tuple[str, str]] = []
    where = _where(cause)
    if where:
        rows.append(("where", where))
    if cause.exit_code is not None or cause.signal:
        rows.append(("exit", describe_exit(cause.exit_code, cause.signal)))
    if cause.duration is not None:
        rows.append(("ran for", format_duration(cause.duration)))
    if cause.log_file:
        rows.append(("log", _log_path(cause.log_file, log_dir)))
    if cause.stacks and cause.stacks != cause.log_file:
        rows.append(("stacks", _log_path(cause.stacks, log_dir)))
    error = cause_error_file(cause, log_dir) if not cause.hung else None  # it did not fail
    if error is not None and error.message:
        rows.append(("error", error.message.strip().splitlines()[0]))
    width = max((len(key) for key, _ in rows), default=0)
    out.extend(f"  {key.ljust(width)}  {value}" for key, value in rows)
    tail = list(cause.tail)[-tail_lines:] if tail_lines > 0 else []
    if error is not None and error.traceback.strip() and tail_lines > 0:
        lines = error.traceback.rstrip().splitlines()
        # Quoted only when the log's tail does not already end in the same exception
        # (it does not when stderr goes elsewhere, or the script printed after it).
        if not any(line.rstrip() == lines[-1].rstrip() for line in tail):
            out.append(f"  traceback from {os.path.basename(error.path)}:")
            out.append(format_tail(lines[-tail_lines:], color=color))
    if cause.stacks and cause.stacks != cause.log_file and tail:
        # a hang names its odd rank's log, but quotes the stack dump's summary
        out.append(f"  the hang's summary ({os.path.basename(cause.stacks)}):")
        out.append(format_tail(tail, color=color))
    elif cause.log_file:
        name = os.path.basename(cause.log_file)
        if tail:
            what = "last line" if len(tail) == 1 else f"last {len(tail)} lines"
            out.append(f"  {what} of {name}:")
            out.append(format_tail(tail, color=color))
        else:
            out.append(f"  {name} is empty")
    elif tail:
        out.append("  last lines:")
        out.append(format_tail(tail, color=color))
    return "\n".join(out)


def format_failure_line(cause: RootCause, *, log_dir: str | os.PathLike[str] | None = None) -> str:
    """The failure in one line, for a round that a restart follows (the full report is
    kept for the failure that ends the job): what, its first error line, its log.

    trainer rank 1 exited with code 3: ValueError: bad batch (log log/workerlog.1)
    """
    from paddlike.logs.first_error import first_error_line

    text = cause.reason
    error = cause.error or first_error_line(cause.tail)
    if error:
        text += f": {error}"
    if cause.log_file:
        text += f" (log {_log_path(cause.log_file, log_dir)})"
    return text


def format_success(
    workers: int,
    duration: float | None,
    *,
    color: bool = False,
    nnodes: int = 1,
    log_dir: str | os.PathLike[str] | None = None,
    restarts: int = 0,
) -> str:
    """One line: 'OK: 4 workers finished in 2.31 s (2 nodes), logs in log/'."""
    label = paint("OK:", _GREEN + ";" + _BOLD, color)
    noun = "worker" if workers == 1 else "workers"
    text = f"{label} {workers} {noun} finished in {format_duration(duration)}"
    extras = []
    if nnodes > 1:
        extras.append(f"{nnodes} nodes")
    if restarts:
        extras.append(f"after {restarts} restart{'s' if restarts != 1 else ''}")
    if extras:
        text += f" ({', '.join(extras)})"
    if log_dir is not None:
        text += f", logs in {os.fspath(log_dir)}"
    return text


def format_preemption(parts: Sequence[Mapping[str, object]]) -> str:
    """summary.json's "preemption" of one node or of every node, in one line:

    preempted by SIGTERM on node 1 (10.0.0.2) at 12:03:04; every rank stopped after
    step 17; the last exited 0.84 s after the notice

    (or "...; stop step 17: rank 3 (killed) did not stop at it; ...", or "...; no rank
    called should_stop(), so no common step was agreed (...); ..."). Each node's part counts
    once: its own, else the copy another node read ("other_nodes"); a node whose part no
    node read is named, its ranks' outcome unknown ("...; stop step 17: node 2
    (10.0.0.3): unknown whether its ranks stopped at it (its launcher was lost)"), and
    then "every rank" is never said."""
    first = parts[0]
    at = time.strftime("%H:%M:%S", time.localtime(float(first.get("time") or 0.0)))  # type: ignore[arg-type]
    source = notice_source(
        first.get("signal"), first.get("node_index"), first.get("host"), first.get("reason")
    )
    by = "preempted by" if by_signal(first.get("reason")) else "stopped:"
    text = f"{by} {source} at {at}"
    parts, unknown = _every_node(parts)
    steps = {p.get("stop_step") for p in parts} - {None}
    step = f"step {min(steps)}" if len(steps) == 1 else "no agreed step"
    missed = sorted(
        (r["rank"], r["status"])
        for p in parts
        for r in p.get("not_stopped") or ()  # type: ignore[attr-defined]
    )
    unsure = [
        f"node {u.get('node')} ({u.get('node_host')}): unknown whether its ranks stopped at "
        f"it ({u.get('unknown')})"
        for u in unknown
    ]
    if not steps:
        text += (
            "; no rank called should_stop(), so no common step was agreed (a rank's own "
            "SIGTERM handler saves at a step of its own, if at all)"
        )
        text += "".join(f"; {x}" for x in unsure)
    elif not missed and not unsure:
        text += f"; every rank stopped after {step}"
    else:
        who = ", ".join(f"rank {rank} ({status})" for rank, status in missed)
        said = [f"{who} did not stop at it"] if who else []
        text += f"; stop {step}: " + "; ".join([*said, *unsure])
    lasts = [p["seconds_to_last_exit"] for p in parts if p.get("seconds_to_last_exit") is not None]
    if lasts:
        text += f"; the last exited {max(lasts):.2f} s after the notice"  # type: ignore[type-var]
    return text


def _every_node(
    parts: Sequence[Mapping[str, object]],
) -> tuple[list[Mapping[str, object]], list[Mapping[str, object]]]:
    """Each node's part once (its own, else another node's copy: "other_nodes"), and the
    nodes whose part nobody read ("unknown": why), in node order. Parts without a node
    (summaries written before nodes traded them) count as they are."""
    loose: list[Mapping[str, object]] = []
    known: dict[object, Mapping[str, object]] = {}
    unknown: dict[object, Mapping[str, object]] = {}
    for part in parts:
        if part.get("node") is None:
            loose.append(part)
        else:
            known[part["node"]] = part  # its own word wins
    for part in parts:
        for other in part.get("other_nodes") or ():  # type: ignore[attr-defined]
            j = other.get("node")
            if other.get("unknown"):
                unknown.setdefault(j, other)
            elif j not in known:
                known[j] = other
    order = sorted(known, key=_node_order)
    gone = sorted((j for j in unknown if j not in known), key=_node_order)
    return [*loose, *(known[j] for j in order)], [unknown[j] for j in gone]


def _node_order(j: object) -> int:
    return j if isinstance(j, int) else -1
