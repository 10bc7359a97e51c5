"""The launcher's exit code, decided here and nowhere else, the same on every node:

| the job ended with                                   | exit code                        |
| ---------------------------------------------------- | -------------------------------- |
| success everywhere                                   | 0                                |
| this node's process failed and is the job's cause    | that process's code (128+N for  |
|                                                      | signal N, as a shell reports it) |
| another node's failure (ours, if any, a consequence) | the job's cause's code           |
| a launcher's signal N (SIGINT, SIGTERM, SIGHUP)      | 128+N                            |
| a hang (--on_hang abort)                             | 124, as timeout(1)               |
| a lost node, a rendezvous error, a full disk         | 1 (a rendezvous error: its own)  |
| this node cannot start (its log directory, ports)    | 2, as bad input: nothing started |
| the pre-flight check failed, no spare (fixed job)    | 2 on every node, nothing started |
| a node the pre-flight check left out (elastic job,   | 69 (sysexits' UNAVAILABLE)       |
| or a hostfile's host among spares: `health.choose`)  |                                  |
| an elastic job left with fewer than MIN nodes        | the round's code, else 1         |

Signals stay numbers (`signal.Signals`) until they are printed or written; a cause that
arrives as data (another node's, through the store) carries the name summary.json
spells, read back once here (`signames.signal_number`).
"""

from __future__ import annotations

from paddlike.launch.plan.signames import signal_number
from paddlike.summary import HANG_EXIT_CODE, RootCause

__all__ = [
    "CANNOT_START",
    "CHECK_FAILED",
    "HANG_EXIT_CODE",
    "LEFT_OUT",
    "below_min_exit_code",
    "cause_exit_code",
    "error_exit_code",
    "round_exit_code",
    "signal_exit_code",
]


# This node cannot start (its log directory, its given ports): as bad input, nothing started.
CANNOT_START = 2
# The pre-flight check (`launch.health`) failed and no spare node can stand in: every node.
CHECK_FAILED = 2
# A node that check left out of an elastic job: no worker started on it.
LEFT_OUT = 69


def error_exit_code(error: BaseException) -> int:
    """A rendezvous or port error's code: its own (`peers.rendezvous_errors` gives each
    kind one), else 1."""
    code = getattr(error, "exit_code", None)
    return code if isinstance(code, int) else 1


def signal_exit_code(signum: int) -> int:
    """Death by, or a launcher's receipt of, signal `signum`: 128+N, as a shell reports it."""
    return 128 + int(signum)


def cause_exit_code(cause: RootCause) -> int:
    """What a launcher exits with for a root cause, on every node: the failed process's
    own code, 128+N for death by (or a launcher's receipt of) signal N, else 1."""
    if cause.exit_code:
        return cause.exit_code
    if cause.signal:
        number = signal_number(cause.signal)
        if number is not None:
            return signal_exit_code(number)
    return 1


def round_exit_code(own_code: int, cause: RootCause | None, *, consequence: bool) -> int:
    """A round's exit code once its job-wide `cause` is known (None: success everywhere):
    this node's own (`own_code`, its supervisor's), unless its failure was a `consequence`
    of another, or it had none: then the job's cause's."""
    if cause is not None and consequence:
        return cause_exit_code(cause)
    return own_code or (cause_exit_code(cause) if cause is not None else 0)


def below_min_exit_code(round_code: int) -> int:
    """An elastic job that ends with too few nodes: the round's code, never 0."""
    return round_code or 1
