"""The communicators a placement's collectives run on, and the array module of a device type.

A placement's ranks (or one of its mesh-axis groups) need a group, but `new_group` must
be called by every rank of the world in the same order, and a rank outside a placement
never touches it. So these groups are built lazily, by their members only, on first use:
the members of a placement reach its collectives in the same program order (that is the
global view's contract), and the store keys come from the ranks themselves, so no
counter has to agree across the world. The whole world reuses the default group.
"""

from __future__ import annotations

from typing import Any

from ..collective import keys as K
from ..collective.group import DEVICE, HOST, Group, runtime
from .errors import GlobalViewError
from .placement import Placement

__all__ = ["array_module", "group_of", "my_rank", "require_backend"]

_cache: dict[tuple[str, tuple[int, ...]], Group] = {}


KIND_PLURAL = {HOST: "host arrays (numpy)", DEVICE: "device arrays (cupy)"}


def my_rank() -> int:
    """This process's global rank (0 in a world of one without init_parallel_env)."""
    return runtime.rank


def require_backend(p: Placement, what: str) -> None:
    """A "cpu" placement holds host arrays, a "cuda" one device arrays: the job must serve
    that kind (backend "auto" serves both); both need the runtime."""
    if runtime.default is None:
        raise GlobalViewError(
            f"{what}: the process group is not initialized; call "
            f"paddlike.distributed.init_parallel_env() before using placement {p}"
        )
    kind = DEVICE if p.type == "cuda" else HOST
    if kind not in runtime.kinds:
        raise GlobalViewError(
            f"{what}: placement {p} holds {KIND_PLURAL[kind]}, but this job runs "
            f"{runtime.refusals.get(kind, 'no backend for them')}; or use a "
            f"{'cpu' if kind == DEVICE else 'cuda'} placement"
        )
    bad = [r for r in p.ranks if r >= runtime.world_size]
    if bad:
        raise GlobalViewError(
            f"{what}: placement {p} names ranks {bad}, outside the world of "
            f"{runtime.world_size} (ranks 0..{runtime.world_size - 1})"
        )


def group_of(ranks: tuple[int, ...]) -> Group:
    """The group of exactly these global ranks, in this order (this rank is one of them)."""
    if ranks == tuple(range(runtime.world_size)) and runtime.default is not None:
        return runtime.default
    key = (runtime.prefix, ranks)
    with runtime.lock:
        group = _cache.get(key)
        if group is not None and not group.closed:
            return group
        from ..parallel import make_group

        gid = -1 - len(_cache)  # apart from new_group's ids; destroy_process_group closes it
        prefix = K.placement_group(runtime.prefix, ranks)
        group = make_group(gid, list(ranks), prefix, runtime.timeout, f"gv{gid}")
        runtime.groups[gid] = group
        _cache[key] = group
        return group


def array_module(p: Placement) -> Any:
    """numpy for "cpu" placements; cupy, on this rank's GPU, for "cuda" ones."""
    if p.type == "cpu":
        import numpy

        return numpy
    try:
        import cupy
    except ImportError:
        raise GlobalViewError(
            f"placement {p} holds cupy arrays, but cupy is not installed; install "
            f"paddlike[gpu] or use a cpu placement"
        ) from None
    cupy.cuda.Device(runtime.device_id).use()
    return cupy
