"""The one error type of the global view: a misuse a user can fix (the message says how)."""

from __future__ import annotations

__all__ = ["GlobalViewError"]


class GlobalViewError(ValueError):
    """A global-view operation was refused before any data moved: the message names the
    operation, the placements and SBPs involved, and the ranks."""
