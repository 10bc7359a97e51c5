"""The errors collectives raise: each names the operation, and the peer rank at fault."""

from __future__ import annotations

__all__ = [
    "EXIT_BARRIER",
    "CollectiveError",
    "CollectiveTimeoutError",
    "GroupMembershipError",
    "PeerExitedError",
    "peer_left",
    "size_mismatch",
]


EXIT_BARRIER = "exit barrier"  # the runtime's last barrier (destroy_process_group), by name


class CollectiveError(RuntimeError):
    """A collective failed; the communicator it ran on is unusable afterwards."""


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """A peer did not arrive before the operation's deadline."""


class PeerExitedError(CollectiveError):
    """A peer closed its connection (its process exited or crashed) during an operation.
    `peer`: its global rank, when known. A rank that leaves by this error is a consequence
    of the peer's exit, not a cause: its error file says so (`paddlike.distributed.errorfile`)."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class GroupMembershipError(CollectiveError):
    """This rank used a group it is not a member of."""


def size_mismatch(
    what: str, peer: int, their_op: str, their_bytes: int, our_op: str, our_bytes: int,
    note: str = "",
) -> CollectiveError:  # fmt: skip
    """The one wording, on every transport, for data that does not fit where it goes (a peer's
    tensor and this rank's buffer for it differ in size), so the same mistake reads the same."""
    return CollectiveError(
        f"{what}: rank {peer} sent {their_op} data of {their_bytes} bytes where this rank "
        f"expected {our_op} data of {our_bytes} bytes{note}; the ranks called different "
        f"operations or passed different shapes/dtypes"
    )


def peer_left(what: str, peer: int, our_op: str) -> PeerExitedError:
    """A peer's data is its runtime's exit barrier: its script ended (or its runtime was
    destroyed) while this rank was still in `our_op`. A consequence of that rank's exit."""
    return PeerExitedError(
        f"{what}: rank {peer} left the job (exit barrier: its script ended or called "
        f"destroy_process_group) while this rank was in {our_op}; see rank {peer}'s log",
        peer=peer,
    )
