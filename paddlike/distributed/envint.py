"""Integers from the environment contract, and the error a bad one gives: a leaf module,
so that the progress heartbeat can read them without importing the runtime's env.py (and
with it the node-list form, which reaches the launcher)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["EnvironmentContractError", "env_int"]


class EnvironmentContractError(ValueError):
    """A contract variable is set to something the runtime cannot use."""


def env_int(
    environ: Mapping[str, str], names: tuple[str, ...], default: int, *, strict: bool = True
) -> int:
    """The first of `names` that is set (not blank), as an int; `default` when none is.

    A set value that is not an integer raises EnvironmentContractError naming the variable
    (`strict`, the runtime's contract: a silent default could make two workers rank 0), or
    gives `default` (not strict: for observers such as the progress heartbeat, which must
    never stop the training it watches).

        environ                  names              strict   ->
        {}                       (RANK,)            either   default
        {RANK: " 3 "}            (RANK,)            either   3
        {A: "", B: "2"}          (A, B)             either   2
        {RANK: "x"}              (RANK,)            True     EnvironmentContractError
        {RANK: "x", B: "2"}      (RANK, B)          False    default (not B's value)
    """
    for name in names:
        raw = environ.get(name, "").strip()
        if raw:
            try:
                return int(raw)
            except ValueError:
                if not strict:
                    return default
                raise EnvironmentContractError(
                    f"environment variable {name}={raw!r} is not an integer"
                ) from None
    return default
