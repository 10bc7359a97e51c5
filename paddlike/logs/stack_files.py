"""The files of a stack dump, and what nodes send each other for one.

    <log_dir>/stacks/<YYYYmmdd-HHMMSS>/rank.<N>.txt   one file per rank: its threads,
                                                       progress counters, flight records
    <log_dir>/stacks/<YYYYmmdd-HHMMSS>/summary.txt    the report (hang.summarize)
    <log_dir>/stacks/<YYYYmmdd-HHMMSS>/stacks.json    everything above, machine-readable

Across nodes, each launcher collects its own ranks and ships `node_report(...)` through
its store; `merge_reports` / `merge_torch_records` read every node's back.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paddlike.distributed import progress as P
from paddlike.logformat import new_file, write_atomically
from paddlike.logs import torch_flight
from paddlike.logs.hang import Frame, RankStack, ThreadStack
from paddlike.logs.torch_flight import TorchOp

STACKS_DIR = "stacks"


@dataclass
class Dump:
    """What `dump_job` / `write_dump` produced."""

    path: Path  # the stacks/<timestamp> directory (of the first node directory)
    lines: list[str]  # the grouped summary
    stacks: dict[int, RankStack] = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list)  # one per node directory


def stacks_to_json(stacks: Mapping[int, RankStack]) -> list[dict[str, Any]]:
    return [asdict(s) for _, s in sorted(stacks.items())]


def stacks_from_json(data: Sequence[Mapping[str, Any]]) -> dict[int, RankStack]:
    out = {}
    for d in data:
        threads = tuple(
            ThreadStack(
                name=t["name"],
                frames=tuple(Frame(**f) for f in t["frames"]),
                os_thread_id=t.get("os_thread_id", 0),
                idle=t.get("idle", True),
            )
            for t in d.get("threads", [])
        )
        fields = {k: v for k, v in d.items() if k != "threads"}
        out[int(d["rank"])] = RankStack(**fields, threads=threads)
    return out


def format_stack(stack: RankStack) -> str:
    """py-spy's text layout, with full file names."""
    head = f"rank {stack.rank}"
    for label, value in (("host", stack.host), ("pid", stack.pid), ("log", stack.log_file)):
        if value:
            head += f"  {label} {value}"
    lines = [head]
    if stack.error:
        lines.append(f"no Python stack: {stack.error}")
    if stack.note:
        lines.append(f"({stack.note})")
    if stack.kernel:
        lines.append(stack.kernel)
    for t in stack.threads:
        lines.append(f'Thread {t.os_thread_id} ({"idle" if t.idle else "active"}): "{t.name}"')
        for f in t.frames:
            where = f.filename if f.native else f"{f.filename}:{f.line}"
            name = f.function if len(f.function) <= 200 else f.function[:199] + "…"  # C++
            lines.append(f"    {name} ({where})")
    return "\n".join(lines) + "\n"


def format_progress(p: P.RankProgress, now_mono: float | None = None) -> str:
    lines = [
        f"progress: step {p.step}, {p.beats} heartbeats, {p.ops} collectives"
        + (
            f", {p.step_time:.3f} s/step ({p.busy_time:.3f} s outside collectives)"
            if p.step_time
            else ""
        )
    ]
    if now_mono is not None and p.last_activity_mono:
        lines[0] += f", last activity {now_mono - p.last_activity_mono:.1f} s ago"
    if p.flight:
        lines.append(f"flight record (last {len(p.flight)} collectives, oldest first):")
        for e in p.flight:
            if e.end_mono:
                took = f"took {_duration(e.end_mono - e.start_mono)}"
            else:
                took = f"for {_duration(now_mono - e.start_mono)}" if now_mono else ""
            lines.append(f"    {e.n:>8} {e.describe()} {took}")
    return "\n".join(lines) + "\n"


def node_report(
    stacks: Mapping[int, RankStack],
    progress: Mapping[int, P.RankProgress],
    torch_records: Mapping[int, Sequence[TorchOp]] | None = None,
) -> dict[str, Any]:
    """What one node sends to the node that writes the summary: JSON types only."""
    return {
        "stacks": stacks_to_json(stacks),
        "progress": {str(r): p.to_json() for r, p in sorted(progress.items())},
        "torch_flight": torch_flight.records_to_json(torch_records or {}),
    }


def merge_reports(
    reports: Sequence[Mapping[str, Any]],
) -> tuple[dict[int, RankStack], dict[int, P.RankProgress]]:
    """Every node's node_report, as one job's stacks and progress by global rank."""
    stacks: dict[int, RankStack] = {}
    progress: dict[int, P.RankProgress] = {}
    for report in reports:
        stacks.update(stacks_from_json(report.get("stacks", [])))
        for rank, data in report.get("progress", {}).items():
            progress[int(rank)] = P.RankProgress.from_json(data)
    return dict(sorted(stacks.items())), dict(sorted(progress.items()))


def merge_torch_records(reports: Sequence[Mapping[str, Any]]) -> dict[int, list[TorchOp]]:
    """Every node's torch flight records (node_report), by global rank."""
    out: dict[int, list[TorchOp]] = {}
    for report in reports:
        out.update(torch_flight.records_from_json(report.get("torch_flight", {})))
    return dict(sorted(out.items()))


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.1f} s"


def write_dump(
    log_dir: str | os.PathLike[str],
    stacks: Mapping[int, RankStack],
    lines: Sequence[str],
    progress: Mapping[int, P.RankProgress] | None = None,
    when: float | None = None,
    torch_records: Mapping[int, Sequence[TorchOp]] | None = None,
) -> Path:
    """Write one file per rank, summary.txt and stacks.json under
    <log_dir>/stacks/<timestamp>/; returns that directory. A file that cannot be written
    (permissions, a full disk) is a warning on stderr naming it, never an exception: the
    caller reports from the stacks it holds, and a hang is still handled."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when or time.time()))
    out = Path(log_dir) / STACKS_DIR / stamp
    try:
        return _write_dump(out, stacks, lines, progress or {}, when, torch_records or {})
    except OSError as exc:
        where = exc.filename or out
        print(
            f"{_prog()} warning: cannot write the stacks to {where}: {exc.strerror}; "
            "the report is from the stacks in memory",
            file=sys.stderr,
            flush=True,
        )
        return out


def _prog() -> str:
    """The prefix of the command that runs (the launcher's or the log reader's)."""
    return "paddlike.launch:" if "paddlike.launch.main" in sys.modules else "paddlike.logs:"


def _write_dump(
    out: Path,
    stacks: Mapping[int, RankStack],
    lines: Sequence[str],
    progress: Mapping[int, P.RankProgress],
    when: float | None,
    torch_records: Mapping[int, Sequence[TorchOp]],
) -> Path:
    root, stamp = out.parent, out.name
    root.mkdir(parents=True, exist_ok=True)
    if root.is_symlink():  # a shared log directory: someone else's link, somewhere else
        raise OSError(errno.ELOOP, "it is a symbolic link", str(root))
    n = 1
    while True:
        try:
            out.mkdir()
            break
        except FileExistsError:
            out = root / f"{stamp}-{n}"
            n += 1
    now_mono = time.monotonic()
    for rank in sorted(set(stacks) | set(progress) | set(torch_records)):
        parts = []
        if rank in stacks:
            parts.append(format_stack(stacks[rank]))
        if rank in progress:
            parts.append(format_progress(progress[rank], now_mono))
        if rank in torch_records:
            parts.append(torch_flight.format_record(torch_records[rank]))
        _write_new(out / f"rank.{rank}.txt", "\n".join(parts))
    _write_new(out / "summary.txt", "\n".join(lines) + "\n")
    data = {
        "time": when or time.time(),
        "summary": list(lines),
        "stacks": stacks_to_json(stacks),
        "progress": {str(r): asdict(p) for r, p in sorted(progress.items())},
        "torch_flight": torch_flight.records_to_json(torch_records),
    }
    # atomically: `paddlike.logs --stacks` reads it as soon as it exists (written last)
    write_atomically(out / "stacks.json", json.dumps(data, indent=1) + "\n")
    return out


def _write_new(path: Path, text: str) -> None:
    """A file of a dump directory just made: created, never opened through a link."""
    with open(new_file(path), "w", encoding="utf-8") as f:
        f.write(text)
