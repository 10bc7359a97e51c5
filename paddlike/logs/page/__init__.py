"""`python -m paddlike.logs DIR --html FILE`: a picture of the job in one HTML file.

facts.py reads what the page shows from the log directories (through the text
reader's public functions, so both say the same); render.py puts style, facts and the
drawing script (package data files in assets/) into one file; follow_page.py rewrites it while
the job runs.
Imported only when --html is given: `python -m paddlike.logs` stays quick to start.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from paddlike.logs import outcome
from paddlike.logs.nodedirs import LogDirError
from paddlike.logs.page.build import build_page, write_atomically
from paddlike.logs.reader import load

__all__ = ["build_page", "main", "write_atomically"]


def main(dirs: list[str], target: str, *, follow: bool, out: TextIO) -> int:
    """--html FILE (or - for stdout), with --follow: rewrite FILE until the job ends. Exit
    0 once the page is written, whatever the job's outcome (so that `--html x && xdg-open
    x` opens the page of a failed job; the outcome is the text view's exit status); 2 when
    DIR holds no logs or FILE cannot be written."""
    if follow:
        if target == "-":
            print(
                "paddlike.logs: --html - --follow: a page on stdout cannot be rewritten; "
                "give a file (--html job.html --follow) and open it in a browser",
                file=sys.stderr,
            )
            return 2
        from paddlike.logs.page.follow_page import follow_page

        return follow_page(dirs, Path(target), out=out)
    try:
        job = load(dirs)
    except LogDirError as e:
        print(f"paddlike.logs: {e}", file=sys.stderr)
        return outcome.EXIT_NOT_LOGS
    job.hung_for = outcome.hung_for(job)
    page = build_page(job, dirs)
    if target == "-":
        out.write(page)
        return 0
    try:
        write_atomically(Path(target), page)
    except OSError as e:
        print(f"paddlike.logs: --html {target}: cannot write: {e.strerror}", file=sys.stderr)
        return outcome.EXIT_NOT_LOGS
    size = len(page.encode()) // 1024
    out.write(f"paddlike.logs: wrote {target} ({size} KiB); open it in a browser\n")
    return 0
