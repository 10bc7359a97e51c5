"""A signal's name for what is printed and written (summary.json); numbers everywhere
else. A leaf, so that any stage may use it."""

from __future__ import annotations

import signal


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def signal_number(name: str) -> int | None:
    """`signal_name`'s inverse, for a cause read as data (another node's, summary.json's);
    None for a name this machine does not know."""
    try:
        return int(signal.Signals[name])
    except KeyError:
        return None
