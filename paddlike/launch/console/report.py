"""The launcher's last words for a round: the root-cause report, or "OK" — only once the
job-wide outcome is known, so that "OK" is never printed while another node failed.

The text comes from `paddlike.logs.report` (stdlib only), so that the launcher and
`python -m paddlike.logs` print the same report from the same code.
"""

from __future__ import annotations

import os

from paddlike.launch.console.output import Console
from paddlike.logformat import TAIL_LINES
from paddlike.summary import RootCause


def report_failure(
    console: Console,
    cause: RootCause,
    log_dir: str | os.PathLike[str],
    *,
    restarts_left: bool = False,
) -> None:
    """This node's failure: the full report; one line when `restarts_left` (a restart round
    follows: `plan.next_round.may_restart`), since the rounds loop then says "restart 1 of
    2" and the full report is kept for the failure that ends the job."""
    from paddlike.logs import report

    if restarts_left:
        console.say(report.format_failure_line(cause, log_dir=log_dir))
        return
    console.block(report.format_root_cause(cause, color=console.color, log_dir=log_dir))


def report_remote_failure(console: Console, cause: RootCause) -> None:
    """This node's workers succeeded, another node's failed."""
    where = f" (host {cause.host}, log {cause.log_file})" if cause.log_file else ""
    how = "was stopped" if cause.stopped else "failed"  # a launcher's signal: not a failure
    console.say(f"the job {how} on another node: {cause.reason}{where}")
    for line in cause.tail[-TAIL_LINES:]:
        console.say(f"  | {line}")


def report_success(
    console: Console,
    *,
    trainers: int,
    duration: float,
    nnodes: int,
    log_dir: str | os.PathLike[str],
    restarts: int,
    last_round: float | None = None,
) -> None:
    """"OK: 2 workers finished in 57.0 s (2 nodes, the last round 25.3 s), logs in log":
    `duration` is the whole job's; `last_round`, when the job had several rounds (restarts,
    an elastic job's membership changes), the last one's."""
    from paddlike.logs import report

    text = report.format_success(
        trainers, duration, color=console.color, nnodes=nnodes, restarts=restarts
    )
    if last_round is not None:
        also = f"the last round {report.format_duration(last_round)}"
        text = text[:-1] + f", {also})" if text.endswith(")") else f"{text} ({also})"
    console.block(f"{text}, logs in {os.fspath(log_dir)}")
