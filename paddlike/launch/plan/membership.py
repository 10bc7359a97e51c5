"""Membership of an elastic job (``--nnodes MIN:MAX``, ``--elastic_level``): the pure
decisions, tested as tables. The rendezvous that uses them is
`peers.elastic_rendezvous`; what follows a round (a new round, a restart, the end) is
`plan.next_round`, for every job.

A round closes (its members are fixed, its ranks assigned):

| state of the round's rendezvous                              | close? |
| ------------------------------------------------------------ | ------ |
| the previous round has not ended on every node               | no     |
| MAX nodes arrived                                            | yes    |
| fewer than MIN arrived                                       | no     |
| every survivor of the previous round arrived (round > 0)     | yes    |
| MIN or more arrived, none new for --rdzv_last_call seconds   | yes    |

A round ends for a *membership change* (a node lost, a node that left on a signal, a
node waiting to join below MAX) or for a failure. Membership changes start a new round
at once and do not count against --max_restarts (torchrun's rule); a failed process
does, as in a fixed job. Below MIN survivors the job ends naming the lost node(s),
unless `--elastic_level 0` holds them for a replacement (up to --rdzv_timeout).
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike.launch import NamedTuple
from paddlike.launch.plan.world import NodeEntry, address_key
from paddlike.summary import RootCause

DEFAULT_LAST_CALL = 30.0  # seconds; torchrun's last_call_timeout default is 30 s too

# RootCause.membership values
LOST = "lost"  # heartbeats stopped: launcher killed, network cut, machine gone
LEFT = "left"  # its launcher was stopped by a signal (preemption's SIGTERM)
JOINED = "joined"  # a node waits to join a job below MAX


class ElasticSpec(NamedTuple):
    """How an elastic job grows and shrinks; the same on every node (built from the
    options by `launch.specs.elastic_spec`)."""

    min_nodes: int
    max_nodes: int
    last_call: float = DEFAULT_LAST_CALL  # seconds without a new arrival before closing
    hold: float = 0.0  # seconds survivors below MIN wait for nodes (level 0: --rdzv_timeout)
    level: int = 1  # Paddle's --elastic_level: 0 fault tolerance (hold), 1 scale

    @property
    def range_text(self) -> str:
        """The --nnodes the user gave: "2:4", or "3" for a fixed count at level 0 (as
        `context.options.elastic_text` prints it)."""
        if self.min_nodes == self.max_nodes:
            return str(self.max_nodes)
        return f"{self.min_nodes}:{self.max_nodes}"

    def ends_with(self, survivors: int) -> bool:
        """Whether a membership change that left `survivors` nodes ends the job: fewer
        than MIN, and none may wait for others (level 1)."""
        return survivors < self.min_nodes and self.hold <= 0


# --- closing a round --------------------------------------------------------------------


def may_close(
    spec: ElasticSpec,
    *,
    arrived: int,
    quiet_for: float,
    previous_over: bool,
    survivors_missing: int | None,
) -> bool:
    """Whether the round can close now (the table in the module docstring).

    `arrived`: launchers in the round (withdrawn ones not counted); `quiet_for`: seconds
    since the last arrival; `previous_over`: the round before ended on every node (or
    this is the first); `survivors_missing`: previous members not here yet (None: unknown
    to this node, or round 0)."""
    if not previous_over:
        return False
    if arrived >= spec.max_nodes:
        return True
    if arrived < spec.min_nodes:
        return False
    if survivors_missing == 0:
        return True
    return quiet_for >= spec.last_call


# --- the end of a round ---------------------------------------------------------------


def is_membership_change(cause: RootCause | None) -> bool:
    return cause is not None and getattr(cause, "membership", None) is not None


def joined_cause(host: str, now: float) -> RootCause:
    where = f" ({host})" if host else ""
    return RootCause(
        reason=f"a node{where} is waiting to join: a new round includes it",
        host=host,
        time=now,
        membership=JOINED,
    )


def below_min_cause(cause: RootCause, survivors: int, spec: ElasticSpec) -> RootCause:
    """A membership change left fewer than MIN nodes: the job ends, naming who went."""
    left = f"{survivors} node{'s' if survivors != 1 else ''} left"
    return cause.replace(
        reason=(
            f"{cause.reason}; {left}, fewer than the {spec.min_nodes} that --nnodes "
            f"{spec.range_text} needs"
        ),
        membership=None,
    )




def elastic_order(arrivals: Sequence[tuple[int, NodeEntry]]) -> list[int]:
    """The members' tickets in rank order. An entry's index is the rank it held in the
    previous round (the store's host asks for 0), -1 for a newcomer: previous members
    keep their relative order, newcomers follow by address (numeric), then arrival.

    (1, b new), (2, a was 0), (3, c was 2), (4, 10.0.0.10 new), (5, 10.0.0.9 new)
      -> [2, 3, 5, 4, 1]   when b's address sorts after 10.0.0.10
    """

    def key(a: tuple[int, NodeEntry]) -> tuple:
        ticket, e = a
        return (e.index if e.index >= 0 else float("inf"), address_key(e.host), ticket)

    return [t for t, _ in sorted(arrivals, key=key)]
