"""When a node's parameter servers stop: a say the supervisor takes from the job.

Its own module (no store, no threads) so that the supervisor of a one-node job, which
never needs it, does not import what the many-node watch does.
"""

from __future__ import annotations

from collections.abc import Callable

from paddlike.launch import NamedTuple


class ServicesStop(NamedTuple):
    """An outside say in when this node's servers stop (PS on several nodes).

    Without one, the supervisor asks the servers to stop once this node's trainers all
    exited 0. With one, it calls `local_trainers_done()` once at that moment (at once
    when this node runs no trainer) and stops the servers only when `fd` is readable and
    `stop_now()` (which consumes the readiness) returns True: when every trainer of the
    whole job has exited 0, servers elsewhere may still be serving trainers until then.
    """

    fd: int
    local_trainers_done: Callable[[], None]
    stop_now: Callable[[], bool]
