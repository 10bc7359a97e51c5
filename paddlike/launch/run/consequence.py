"""A worker failure that is a consequence of a peer's exit is not the job's cause.

When a rank raises an uncaught exception, its runtime closes its connections at exit
(`paddlike.distributed.parallel`), and its peers' collectives fail at once with
PeerExitedError — often before the raising rank's own process has finished exiting. The
first exit would then win, on this node and (through the store's create-only cause) on
every node, naming a rank that merely saw the other one go.

The runtime writes each failing rank's error file before it closes anything, saying when
the exception reports a peer's exit (`paddlike.distributed.errorfile`). The supervisor
holds such a failure back for CONSEQUENCE_GRACE seconds: a failure that is not a
consequence (on this node, or another node's published cause, a lost node) comes first
and is the cause; only when none comes does the held-back failure become it.

A rank that leaves by sys.exit with a non-zero status is such a cause too: its runtime
skips the exit barrier and closes at once, as after an exception. A rank whose exit
barrier reaches a peer still in another collective makes that peer fail with "rank R
left the job (exit barrier)", a PeerExitedError, so a consequence as well.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from paddlike.contract import ERROR_FILE

# How long a failure that only reports a peer's exit waits for that peer's own failure:
# the peer's interpreter finishing its exit, its launcher noticing it and publishing it
# (milliseconds to a second; more under load, or for a process with much to tear down).
CONSEQUENCE_GRACE = 3.0


def consequence_hold(nnodes: int, heartbeat_timeout: float) -> float:
    """How long a consequence is held back on this job: on many nodes also the time it
    takes to learn that a node was lost (its heartbeats lapse, plus a beat or two): the
    peer that exited may have gone with its node (node 0's launcher, whose store goes too,
    has no guardian to say so), and that node is the cause."""
    if nnodes <= 1:
        return CONSEQUENCE_GRACE
    return max(CONSEQUENCE_GRACE, heartbeat_timeout * 1.4)


def peer_exited(env: Mapping[str, str], started: float | None) -> int | None:
    """The peer rank whose exit this worker's failure reports (-1: rank unknown), from the
    error file the launcher gave it (`env`), written since it started; None: a failure of
    its own (or no word from the runtime)."""
    path = env.get(ERROR_FILE)
    if not path:
        return None
    try:
        if started is not None and os.stat(path).st_mtime < started:
            return None  # an earlier run's (its timestamp has whole seconds only)
    except OSError:
        return None
    from paddlike.logs.report import read_error_file

    error = read_error_file(path)
    return None if error is None else error.peer_exited


def drop_stray_temps(env: Mapping[str, str]) -> None:
    """Remove what a worker killed while writing its error file left: the error file is
    written to `.<name>.<pid>.<random>.tmp` and renamed (never through a link in a shared
    directory), and a SIGKILL between the two leaves the temporary file behind."""
    path = env.get(ERROR_FILE)
    if not path:
        return
    error_file = Path(path)
    for stray in error_file.parent.glob(f".{error_file.name}.*.tmp"):
        with contextlib.suppress(OSError):  # another user's, in a sticky directory: theirs
            stray.unlink()
