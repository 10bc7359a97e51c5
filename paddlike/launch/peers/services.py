"""When a node's parameter servers stop: a say the supervisor takes from the job.

Its own module (no store, no threads) so that the supervisor of a one-node job, which
never needs it, does not import what the many-node watch does (`peers.trainers_ok`
implements it).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # an interface for type checkers; nothing checks it at run time


class ServicesStop(Protocol):
    """An outside say in when this node's servers stop (PS on several nodes).

    Without one, the supervisor asks the servers to stop once this node's trainers all
    exited 0. With one, it calls `local_trainers_done()` once at that moment (at once
    when this node runs no trainer) and stops the servers only when `fd` is readable and
    `stop_now()` (which consumes the readiness) returns True: when every trainer of the
    whole job has exited 0, servers elsewhere may still be serving trainers until then.
    """

    @property
    def fd(self) -> int: ...

    def local_trainers_done(self) -> None: ...

    def stop_now(self) -> bool: ...
