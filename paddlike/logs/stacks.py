"""Stacks of running workers, without their cooperation: py-spy, else the kernel's view.

`collect(targets)` runs `py-spy dump --json --pid P` for every target at once, then
again with `--native` in the time left before one deadline (a rank whose native pass
fails or is late keeps its Python frames). Where py-spy cannot attach (not installed,
no ptrace permission) the rank gets the kernel's view from /proc instead — the main
thread's state and the kernel function it sleeps in (`wchan`) — and the reason in one
line. A stopped process (SIGSTOP) is not given to py-spy, which cannot read it.

`collect_job(targets)` adds what the workers' probes say (`--hang_timeout` puts one in
each worker, see `worker_probe`): torch's flight record, and a Python stack for a rank
py-spy could not read.

`dump_job(log_dir)` collects, summarises and writes the files (`stack_files`) for the
running trainers that this node's summary.json lists (`python -m paddlike.logs DIR
--stacks`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from paddlike.distributed import progress as P
from paddlike.logs import hang, torch_flight
from paddlike.logs.hang import Frame, RankStack, ThreadStack
from paddlike.logs.stack_files import (
    Dump,
    merge_reports,
    merge_torch_records,
    node_report,
    stacks_from_json,
    stacks_to_json,
    write_dump,
)
from paddlike.logs.torch_flight import TorchOp
from paddlike.summary import ProcessStatus, RunStatus, RunSummary, read_summary

__all__ = [
    "Dump",
    "Target",
    "collect",
    "collect_job",
    "dump_job",
    "find_py_spy",
    "job_flights",
    "job_targets",
    "merge_reports",
    "merge_torch_records",
    "node_report",
    "parse_py_spy",
    "signs_of_life",
    "stacks_from_json",
    "stacks_to_json",
    "write_dump",
]

PTRACE_DENIED = (
    "no permission to attach (ptrace): run as the workers' user or root, or allow it "
    "(sysctl kernel.yama.ptrace_scope=0; in a container, the SYS_PTRACE capability)"
)
DEFAULT_TIMEOUT = 10.0
STOPPED = "stopped (state T): py-spy cannot read a stopped process"


@dataclass(frozen=True)
class Target:
    """A process to take the stack of, and how to name it to the user."""

    rank: int
    pid: int
    host: str = ""
    log_file: str = ""


def find_py_spy() -> str | None:
    """py-spy beside this interpreter (a virtualenv's bin/ is often not on PATH), else on
    PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


# --- py-spy's output -------------------------------------------------------------------


def parse_py_spy(text: str) -> tuple[ThreadStack, ...]:
    """The threads of `py-spy dump --json` output (one process)."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = [data]
    threads = []
    for t in data:
        frames = tuple(
            Frame(
                function=str(f.get("name", "?")),
                filename=str(f.get("filename") or f.get("short_filename") or "?"),
                line=int(f.get("line") or 0),
                native=bool(f.get("module")) and not str(f.get("filename", "")).endswith(".py"),
            )
            for f in t.get("frames", [])
        )
        threads.append(
            ThreadStack(
                name=str(t.get("thread_name") or f"thread {t.get('thread_id')}"),
                frames=frames,
                os_thread_id=int(t.get("os_thread_id") or 0),
                idle=not t.get("active", False),
            )
        )
    return tuple(threads)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return ""


# --- the kernel's view -----------------------------------------------------------------

_STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "in uninterruptible I/O",
    "T": "stopped",
    "t": "stopped by a tracer",
    "Z": "a zombie",
    "X": "dead",
    "I": "idle",
}


def main_thread_state(pid: int, proc: Path = Path("/proc")) -> str:
    """The kernel's one-letter state of a process's main thread ("S", "T", ...); "" when
    the process is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        return stat[stat.rindex(")") + 2 :].split()[0]
    except (OSError, ValueError, IndexError):
        return ""


def kernel_view(pid: int, proc: Path = Path("/proc")) -> str:
    """One line from /proc, which needs no ptrace: the main thread's state and the kernel
    function it sleeps in, and how many threads there are. "" when the process is gone."""
    base = proc / str(pid)
    try:
        tasks = sorted(int(p.name) for p in (base / "task").iterdir())
    except OSError:
        return ""

    def state(tid: int) -> tuple[str, str]:
        task = base / "task" / str(tid)
        try:
            stat = (task / "stat").read_text()
            code = stat[stat.rindex(")") + 2 :].split()[0]
        except (OSError, ValueError, IndexError):
            code = "?"
        try:
            wchan = (task / "wchan").read_text().strip()
        except OSError:
            wchan = ""
        return code, "" if wchan in ("0", "") else wchan

    code, wchan = state(pid)
    text = f"kernel: main thread {_STATES.get(code, code)}"
    if wchan:
        text += f" in {wchan}"
    others = [state(t) for t in tasks if t != pid]
    if others:
        text += f"; {len(tasks)} threads"
        running = sum(1 for c, _ in others if c == "R")
        if running:
            text += f" ({running} other running)"
    return text


# --- collection ------------------------------------------------------------------------


def collect(
    targets: Sequence[Target],
    timeout: float = DEFAULT_TIMEOUT,
    py_spy: str | None = None,
    native: bool = True,
) -> dict[int, RankStack]:
    """Every target's stack by rank, all within `timeout` seconds.

    Two passes, each over all targets in parallel: Python frames first (tens of ms a
    rank), then, in the time left, again with native frames (unwinding and symbolising a
    big library such as libtorch takes seconds on a busy machine). A rank keeps its
    Python-only stack when the native pass fails or runs out of time, and gets the
    kernel's view when even the first pass fails."""
    deadline = time.monotonic() + timeout
    results: dict[int, RankStack] = {}
    # py-spy cannot read a stopped process (it would wait out the deadline): say so now
    for t in targets:
        if main_thread_state(t.pid) == "T":
            results[t.rank] = replace(_fallback(t, STOPPED), stopped=True)
    targets = [t for t in targets if t.rank not in results]
    tool = py_spy or find_py_spy()
    if tool is None:
        reason = "py-spy not found (pip install py-spy)"
        results.update({t.rank: _fallback(t, reason) for t in targets})
        return {r: results[r] for r in sorted(results)}
    for t, (ok, out, err) in _dump_all(tool, targets, False, deadline):
        results[t.rank] = _parsed(t, out, "Python frames only") if ok else _fallback(t, err)
    if native:
        located = [t for t in targets if not results[t.rank].error]
        for t, (ok, out, err) in _dump_all(tool, located, True, deadline):
            if ok:
                stack = _parsed(t, out)
                if not stack.error:
                    results[t.rank] = stack
                    continue
            note = "Python frames only: native unwinding " + (
                "ran out of time" if ok is None else f"failed ({err})"
            )
            results[t.rank] = replace(results[t.rank], note=note)
    return {r: results[r] for r in sorted(results)}


def collect_job(
    targets: Sequence[Target], timeout: float = DEFAULT_TIMEOUT, py_spy: str | None = None
) -> tuple[dict[int, RankStack], dict[int, list[TorchOp]]]:
    """Every target's stack and torch flight record: the workers' probes first (they
    answer in milliseconds, and py-spy pauses a rank while it reads it), then py-spy;
    a rank py-spy could not read keeps the Python stack its probe sent. A stopped
    process is asked nothing (it cannot answer)."""
    moving = [t for t in targets if main_thread_state(t.pid) != "T"]
    answers = torch_flight.ask(moving, min(torch_flight.TIMEOUT, timeout / 3)) if moving else {}
    taken = torch_flight.fill_stacks(collect(targets, timeout, py_spy), answers)
    return taken, {r: list(a.record) for r, a in answers.items() if a.record}


def job_flights(
    progress: Mapping[int, P.RankProgress], torch_records: Mapping[int, Sequence[TorchOp]]
) -> dict[int, Sequence[hang.FlightOp]]:
    """The flight record of every rank: paddlike's runtime's where it has one, else
    torch's (a job uses one or the other)."""
    flights: dict[int, Sequence[hang.FlightOp]] = {r: p.flight for r, p in progress.items()}
    for rank, ops in torch_records.items():
        if not flights.get(rank):
            flights[rank] = ops
    return dict(sorted(flights.items()))


def _dump_all(
    tool: str, targets: Sequence[Target], native: bool, deadline: float
) -> list[tuple[Target, tuple[bool | None, str, str]]]:
    procs = [(t, _spawn(tool, t.pid, native)) for t in targets]
    try:
        return [(t, _finish(proc, deadline)) for t, proc in procs]
    finally:
        for _, proc in procs:  # past the deadline: kill every straggler at once, then reap
            if proc.poll() is None:
                proc.kill()
        for _, proc in procs:
            proc.wait()


def _spawn(tool: str, pid: int, native: bool) -> subprocess.Popen[str]:
    argv = [tool, "dump", "--json", "--pid", str(pid)]
    if native:
        argv.append("--native")
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _finish(proc: subprocess.Popen[str], deadline: float) -> tuple[bool | None, str, str]:
    """(True, stdout, "") on success; (False, "", first error line) when py-spy failed;
    (None, "", why) when it ran past the deadline (killed)."""
    try:
        out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        if proc.poll() is None:  # still running: the caller kills it with the others
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            return None, "", "py-spy did not answer before the deadline"
        out, err = proc.communicate()  # it finished just now: its answer is complete
    if proc.returncode == 0 and out.strip().startswith(("[", "{")):
        return True, out, ""
    why = _first_line(err) or _first_line(out) or f"exit code {proc.returncode}"
    if "permission denied" in why.lower():
        why = PTRACE_DENIED
    return False, "", f"py-spy: {why}"


def _parsed(t: Target, out: str, note: str = "") -> RankStack:
    try:
        threads = parse_py_spy(out)
    except (ValueError, TypeError, AttributeError) as exc:
        return _fallback(t, f"py-spy output unreadable ({exc})")
    return RankStack(t.rank, t.host, t.log_file, t.pid, threads, note=note)


def _fallback(t: Target, reason: str) -> RankStack:
    view = kernel_view(t.pid)
    if not view:
        reason = f"process {t.pid} is not running"
    return RankStack(t.rank, t.host, t.log_file, t.pid, (), error=reason, kernel=view)


# --- targets from a log directory ------------------------------------------------------


def job_targets(summary: RunSummary) -> list[Target]:
    """The running trainers this node's summary lists, checked against /proc so that a
    pid reused by another program is not dumped (its environment must name the job)."""
    targets = []
    for p in summary.processes:
        if p.role != "trainer" or p.status != ProcessStatus.RUNNING or not p.pid:
            continue
        if not _same_job(p.pid, summary.job_id):
            continue
        targets.append(Target(p.rank, p.pid, summary.hostname or summary.host, p.log_file))
    return targets


def _same_job(pid: int, job_id: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # not ours to read: trust the summary
    return f"PADDLIKE_JOB_ID={job_id}".encode() in environ.split(b"\0")


def signs_of_life(
    log_dir: str | os.PathLike[str],
    logs: Mapping[int, str],
    progress: Mapping[int, P.RankProgress],
) -> list[hang.Activity]:
    """Each rank's last log write (the file's mtime) and last heartbeat or collective, as
    Unix times, for `hang.detect_hang(…, now=time.time(), …)`. `logs` maps rank to log
    file name (relative to log_dir), as summary.json's processes do."""
    out = []
    for rank, name in sorted(logs.items()):
        last_log: float | None = None
        for path in (Path(log_dir) / name, Path(log_dir) / f"{name}.err"):
            with contextlib.suppress(OSError):
                last_log = max(last_log or 0.0, path.stat().st_mtime)
        p = progress.get(rank)
        last = p.last_activity_wall if p is not None and (p.beats or p.ops) else None
        out.append(hang.Activity(rank, last_log, last, bool(p and p.beats)))
    return out


def _status(summary: RunSummary) -> str:
    return "is running" if summary.status == RunStatus.RUNNING else summary.status


def dump_job(
    log_dirs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    timeout: float = DEFAULT_TIMEOUT,
) -> Dump | str:
    """Collect, summarise and write the stacks of the job whose node directories are
    `log_dirs` (one, or one per node when the nodes share this machine), for the running
    trainers their summary.json lists; after the job ended, what the progress files say.
    Every node directory gets its ranks' files and the job-wide summary. A one-line
    reason (str) when there is nothing to collect."""
    if isinstance(log_dirs, (str, os.PathLike)):
        log_dirs = [log_dirs]
    nodes: list[tuple[Path, RunSummary, list[Target], dict[int, P.RankProgress]]] = []
    for d in log_dirs:
        summary = read_summary(d)
        if summary is None:
            return f"{d}: no summary.json, so no process ids to take stacks of"
        nodes.append((Path(d), summary, job_targets(summary), P.read_all(d, summary.job_id)))
    targets = [t for _, _, ts, _ in nodes for t in ts]
    progress = {r: p for _, _, _, ps in nodes for r, p in ps.items()}
    first = nodes[0][1]
    if not targets and not progress:
        return (
            f"{nodes[0][0]}: no running trainer of job {first.job_id} on this machine "
            f"(the summary says the job {_status(first)}) and no progress files"
        )
    stacks, records = collect_job(targets, timeout) if targets else ({}, {})
    lines = hang.summarize(
        stacks, job_flights(progress, records), hang.find_stragglers(progress.values())
    )
    if not targets:
        # After the job ended the progress files remain: what the ranks did last.
        lines.insert(
            0,
            f"no running trainer of job {first.job_id} here (the job {_status(first)}); "
            f"from the progress files of ranks {hang.rank_ranges(progress)}:",
        )
    when = time.time()
    paths = []
    for d, _, ts, ps in nodes:
        local = {t.rank: stacks[t.rank] for t in ts if t.rank in stacks}
        mine = {t.rank: records[t.rank] for t in ts if t.rank in records}
        paths.append(write_dump(d, local, lines, ps, when, mine))
    return Dump(paths[0], lines, stacks, paths)
