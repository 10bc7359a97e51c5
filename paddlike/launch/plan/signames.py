"""A signal's name for what is printed and written (summary.json); numbers everywhere
else. A leaf, so that any stage may use it."""

from __future__ import annotations

import signal


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"

