"""A file that holds a secret (the job token, carried variables): read only when no one
but its owner can read or write it, as ssh refuses a private key that others can read.

A token that another user could read is theirs too (they could join or end the job); one
that another user could write is theirs to choose. The file's owner must be this user
(or root).
"""

from __future__ import annotations

import os
import stat


def read_private(path: str) -> str:
    """The file's text; `LooseFile` when others may read or write it (OSError as open's)."""
    with open(path, encoding="utf-8") as f:
        problem = loose(os.fstat(f.fileno()))
        if problem:
            raise LooseFile(problem)
        return f.read()


class LooseFile(Exception):
    """What is wrong with a secret's file, in words (its fix included)."""


def loose(st: os.stat_result) -> str | None:
    """Why a file with this status may not hold a secret, or None."""
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o066:
        return f"others can read or write it (mode {mode:04o}): chmod 600 it"
    if st.st_uid not in (os.geteuid(), 0):
        return f"it belongs to another user (uid {st.st_uid}): it must be yours"
    return None
