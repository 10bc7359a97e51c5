"""The errors collectives raise: each names the operation, and the peer rank at fault."""

from __future__ import annotations

__all__ = ["CollectiveError", "CollectiveTimeoutError", "GroupMembershipError", "PeerExitedError"]


class CollectiveError(RuntimeError):
    """A collective failed; the communicator it ran on is unusable afterwards."""


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """A peer did not arrive before the operation's deadline."""


class PeerExitedError(CollectiveError):
    """A peer closed its connection (its process exited or crashed) during an operation."""


class GroupMembershipError(CollectiveError):
    """This rank used a group it is not a member of."""
