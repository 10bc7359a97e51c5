"""`--html FILE --follow`: keep the page current while the job runs, without a server.

A page opened from a file cannot read the log directory itself (browsers refuse a
file:// page's requests for other files), so the refresh comes from both sides: this
loop rewrites FILE every INTERVAL seconds (atomically), and the page, while the job it
shows runs, reloads itself as often, keeping the selected row and the opened nodes (in
the address's #fragment). Each pass also samples every rank's step from its progress
file, so the page draws steps over time for as long as it was followed. The loop ends
by itself once the job ended, after writing the last page (which no longer reloads).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from paddlike.distributed import progress as P
from paddlike.logs import outcome
from paddlike.logs.nodedirs import LogDirError
from paddlike.logs.page.build import build_page, write_atomically
from paddlike.logs.reader import JobView, load
from paddlike.summary import RunStatus

INTERVAL = 2.0  # seconds between two pages (and two reloads of the page)
HISTORY_POINTS = 600  # step samples kept per rank; older ones are thinned out


def job_running(job: JobView) -> bool:
    """The job runs: a summary says so and, where the reader can tell, its launcher lives
    (the reader calls a job whose launcher died without recording the end 'gone'). Its
    workers may all be down for a moment: between two rounds, the launcher restarts them."""
    return job.status == RunStatus.RUNNING


def sample_steps(job: JobView, history: dict[int, list[tuple[float, int]]], now: float) -> None:
    """Append every rank's current step (progress files, without their flight records)."""
    for node in job.nodes:
        job_id = node.summary.job_id if node.summary else None
        for rank, prog in P.read_all(node.log_dir, job_id=job_id, flight=False).items():
            if prog.beats <= 0:
                continue
            points = history.setdefault(rank, [])
            points.append((now, prog.step))
            if len(points) > HISTORY_POINTS:
                del points[1::2]  # every other sample: the shape stays, the page stays small


def follow_page(
    dirs: list[str],
    path: Path,
    *,
    out: TextIO,
    interval: float = INTERVAL,
    wait: Callable[[float], None] = time.sleep,
) -> int:
    """Rewrite `path` every `interval` s until the job ends; 0 once its last page is
    written (the outcome is the text view's exit status), 2 when the directory cannot be
    read or the page written, 130 on Ctrl-C."""
    history: dict[int, list[tuple[float, int]]] = {}
    first = True
    try:
        while True:
            try:
                job = load(dirs)
            except LogDirError as e:
                print(f"paddlike.logs: {e}", file=sys.stderr)
                return outcome.EXIT_NOT_LOGS
            running = job_running(job)
            job.hung_for = outcome.hung_for(job)
            sample_steps(job, history, time.time())
            page = build_page(job, dirs, follow=interval if running else 0.0, history=history)
            try:
                write_atomically(path, page)
            except OSError as e:
                print(f"paddlike.logs: --html {path}: cannot write: {e.strerror}", file=sys.stderr)
                return 2
            if first and running:
                out.write(
                    f"paddlike.logs: writing {path} every {interval:g} s while the job runs; "
                    f"open file://{path.resolve()} (it reloads itself)\n"
                )
                out.flush()
            first = False
            if not running:
                out.write(f"paddlike.logs: job {job.status}: wrote the last page to {path}\n")
                return 0
            wait(interval)
    except KeyboardInterrupt:
        out.flush()
        return 130
