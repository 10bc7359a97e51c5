"""Restart rounds (--max_restarts N): run the job; after a worker failure, run it again.

One loop for the one-node path (main.run) and the many-node path (multinode), so both
restart alike. A round is whatever the caller runs; the loop only decides, from the
round's job-wide root cause, whether another round follows:

| the round ended with                      | next                                  |
| ----------------------------------------- | ------------------------------------- |
| success (no root cause)                   | stop, exit code of the round (0)      |
| a failed process (trainer, server, ...)   | a new round, while restarts remain    |
| a signal to a launcher, a lost node, a    | stop: restarting cannot fix it, and   |
| rendezvous error                          | the user (or scheduler) wants it over |

Every node of a job sees the same root cause, so every node decides the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from paddlike.summary import RootCause


@dataclass(frozen=True)
class RoundEnd:
    """How one round ended: this launcher's exit code and the job-wide root cause."""

    exit_code: int
    cause: RootCause | None  # None when the round succeeded everywhere


def restartable(cause: RootCause) -> bool:
    """A process of the job failed (rather than a launcher, a node or the rendezvous)."""
    return cause.role is not None


def _say(line: str) -> None:
    print(f"paddlike.launch: {line}", file=sys.stderr, flush=True)


def run_rounds(
    max_restarts: int,
    run_round: Callable[[int], RoundEnd],
    say: Callable[[str], None] = _say,
) -> int:
    """Call `run_round(0)`, then `run_round(1)`, ... until one succeeds, ends for a reason a
    restart cannot fix, or `max_restarts` restarts are used up; return the exit code."""
    end = run_round(0)
    for round_ in range(1, max_restarts + 1):
        if end.cause is None or not restartable(end.cause):
            return end.exit_code
        say(f"restart {round_} of {max_restarts} after: {end.cause.reason}")
        end = run_round(round_)
    if end.cause is not None and max_restarts and restartable(end.cause):
        say(f"giving up after {max_restarts} restart(s); last root cause: {end.cause.reason}")
    return end.exit_code
