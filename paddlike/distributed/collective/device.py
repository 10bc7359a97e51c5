"""Device setup that every rank of an auto job shares: the current GPU, whether NCCL can run
on every rank (the ranks must agree, or a device op would wait for a rank that has no NCCL
lane), and waits for peers' setup keys that notice a peer's exit at once.

CuPy is imported here only where `nccl.unusable_reason` already did.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..store import StoreError, StoreTimeoutError
from . import keys as K
from .errors import CollectiveError, CollectiveTimeoutError, PeerExitedError

__all__ = ["AUTO_REFUSAL", "agree", "make_current", "refusal", "settle", "wait_keys"]

AUTO_REFUSAL = "only the CPU backend: NCCL cannot run here: "

SLICE_SECONDS = 0.2  # how often a setup wait looks at the peers' liveness
MIXED_HINT = ("or called this operation with a host (numpy) array where this rank used a "
              "device (cupy) array, or the other way round")  # fmt: skip


def make_current(device_id: int) -> bool:
    """Make this rank's GPU current, as paddle and torch users expect after init, so arrays
    made before the first device collective are on it; cheap (no NCCL). False when CuPy is
    not importable (not imported by now) or the GPU is not visible."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return False
    try:
        cupy.cuda.Device(device_id).use()
    except Exception:
        return False
    return True


def settle(rank: int, world: int, device_id: int, seconds: float) -> None:
    """Under auto, once the store is up: this rank's GPU made current (arrays made before
    the first device collective land on it, not on GPU 0), and the ranks agree on NCCL:
    device arrays take NCCL only if every rank can run it, else every rank refuses them,
    naming the ranks and why (a rank without NCCL would never join a device op)."""
    from .group import DEVICE, HOST, runtime

    make_current(device_id)
    if world == 1 or runtime.store is None:
        return
    own = runtime.refusals.get(DEVICE) if DEVICE not in runtime.kinds else None
    why = own.removeprefix(AUTO_REFUSAL) if own is not None else None
    reasons = agree(runtime.store, runtime.prefix, rank, world, why, time.monotonic() + seconds)
    if reasons and rank not in reasons:
        runtime.backend, runtime.kinds = "cpu", frozenset({HOST})
        runtime.refusals = {**runtime.refusals, DEVICE: refusal(reasons)}


def agree(store: Any, prefix: str, rank: int, world: int, why: str | None,
          deadline: float) -> dict[int, str]:  # fmt: skip
    """Publish whether NCCL can run on this rank (`why` not: None) and read every rank's
    answer; returns {rank: reason} of the ranks that cannot (empty: all can)."""
    keys = [K.nccl_usable(prefix, k) for k in range(world)]
    try:
        store.set(keys[rank], why or "")
        store.wait(keys, timeout=max(0.001, deadline - time.monotonic()))
        answers = [store.get(key, timeout=1.0) for key in keys]
    except StoreError as exc:
        raise CollectiveTimeoutError(
            f"init_parallel_env: not every rank said whether NCCL can run on it in time ({exc}); "
            f"did every rank call init_parallel_env?"
        ) from None
    return {k: a.decode(errors="replace") for k, a in enumerate(answers) if a}


def refusal(reasons: dict[int, str]) -> str:
    """Why a job whose ranks do not all have NCCL runs device arrays on none."""
    by_why: dict[str, list[int]] = {}
    for rank, why in sorted(reasons.items()):
        by_why.setdefault(why, []).append(rank)
    parts = [f"{'rank' if len(r) == 1 else 'ranks'} {', '.join(map(str, r))}: {why}"
             for why, r in by_why.items()]  # fmt: skip
    return ("only the CPU backend: NCCL cannot run on every rank, so no rank uses it ("
            + "; ".join(parts) + ")")


def wait_keys(store: Any, keys: Sequence[str], owners: Sequence[int], deadline: float,
              exited: Callable[[int], bool] | None, what: str) -> None:  # fmt: skip
    """store.wait(keys) until `deadline`, in slices; between them, a missing key whose owner
    (the group rank `k` of keys[k], global rank owners[k]) has exited raises PeerExitedError
    at once. Past the deadline: StoreTimeoutError, as store.wait."""
    while True:
        left = deadline - time.monotonic()
        try:
            store.wait(keys, timeout=max(0.001, min(left, SLICE_SECONDS) if exited else left))
            return
        except StoreTimeoutError:
            if exited is None or time.monotonic() >= deadline:
                raise
        dead = [owners[k] for k, key in enumerate(keys) if exited(k) and not _has(store, key)]
        if dead:
            who = ("rank " if len(dead) == 1 else "ranks ") + ", ".join(map(str, dead))
            raise PeerExitedError(
                f"{what}: {who} exited (its connection closed) before reaching NCCL "
                f"communicator setup; see its log (a rank still alive closes its connections "
                f"after an error: then it may have called this operation with a host (numpy) "
                f"array where this rank used a device (cupy) array)"
            )


def _has(store: Any, key: str) -> bool:
    try:
        return store.try_get(key) is not None
    except StoreError as exc:
        raise CollectiveError(f"the runtime store failed during NCCL setup: {exc}") from None
