"""The hangs a launcher diagnosed (`--hang_timeout`), as summary.json's `hangs` keeps
them, in the reader's words.

With `--on_hang dump` the job goes on after a diagnosis and usually ends by Ctrl-C or a
scheduler's signal: its root cause then says only "stopped". The diagnosis stays in the
summary, and the reader shows it under its node with the dump's directory:

    hang at 12:04:31 (no progress for 5 s on any rank; ...): rank 1 (vm, workerlog.1)
    entered barrier as #4 (default group); ranks 0, 2 are in all_reduce #4; stacks in
    log/stacks/20261127-120431/
"""

from __future__ import annotations

import os
import time
from typing import Any

MAX_SHOWN = 5  # the latest diagnoses shown under a node (all are in summary.json)


def hang_line(diagnosis: dict[str, Any], log_dir: str) -> str:
    """One diagnosis in a line: when, the silence, the report's first line, the dump."""
    when = time.strftime("%H:%M:%S", time.localtime(float(diagnosis.get("time") or 0.0)))
    summary = [str(x) for x in diagnosis.get("summary") or []]
    stalled = str(diagnosis.get("stalled") or "")
    text = f"hang at {when}" + (f" ({stalled})" if stalled else "")
    if summary:
        text += f": {summary[0]}"
    stacks = diagnosis.get("stacks")
    if stacks:
        text += f"; stacks in {os.path.join(log_dir, str(stacks))}{os.sep}"
    else:
        text += "; its stacks could not be written to the log directory"
    return text


def hang_lines(hangs: list[dict[str, Any]], log_dir: str) -> list[str]:
    """A node's diagnoses, the latest MAX_SHOWN, indented for the reader's node block."""
    out = []
    if len(hangs) > MAX_SHOWN:
        out.append(f"  ({len(hangs) - MAX_SHOWN} earlier hangs in summary.json)")
    out += [f"  {hang_line(h, log_dir)}" for h in hangs[-MAX_SHOWN:]]
    return out
