"""Placement: which ranks hold a global array, arranged as a mesh (OneFlow's `placement`).

    placement("cpu", ranks=[0, 1, 2, 3])          1-D: hierarchy (4,)
    placement("cuda", ranks=[[0, 1], [2, 3]])     2-D: hierarchy (2, 2), one SBP per axis

A rank's parallel id is its position in the flattened ranks; its coordinates are that
position in the mesh. Along mesh axis i, the ranks that share every other coordinate form
one group, ordered by coordinate i (the group collectives of axis i run over it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import GlobalViewError

__all__ = ["DEVICE_TYPES", "Placement", "placement"]

DEVICE_TYPES = ("cpu", "cuda")


def _shape_of(ranks: Any, what: str) -> tuple[tuple[int, ...], list[int]]:
    """(mesh shape, flat ranks) of a nested list of ints; refused unless rectangular."""
    if isinstance(ranks, (bool, str)) or not isinstance(ranks, (list, tuple, range, int)):
        raise GlobalViewError(
            f"{what}: ranks must be a list of ints (or nested lists), got {ranks!r}"
        )
    if isinstance(ranks, int):
        return (1,), [ranks]
    items = list(ranks)
    if not items:
        raise GlobalViewError(f"{what}: ranks is empty; a placement needs at least one rank")
    if all(isinstance(r, int) and not isinstance(r, bool) for r in items):
        return (len(items),), [int(r) for r in items]
    if all(isinstance(r, (list, tuple, range)) for r in items):
        subs = [_shape_of(r, what) for r in items]
        shapes = {s for s, _ in subs}
        if len(shapes) != 1:
            raise GlobalViewError(
                f"{what}: ranks {ranks!r} is not rectangular (rows of shapes "
                f"{sorted(shapes)}); every row of the mesh needs the same length"
            )
        return (len(items), *subs[0][0]), [r for _, flat in subs for r in flat]
    raise GlobalViewError(f"{what}: ranks {ranks!r} mixes ints and lists")


class Placement:
    """A device type and a mesh of global ranks. Equal when both are equal."""

    __slots__ = ("_coords", "hierarchy", "ranks", "type")

    def __init__(self, type: str = "cpu", ranks: Any = (0,)) -> None:
        what = "placement"
        if type not in DEVICE_TYPES:
            raise GlobalViewError(f"{what}: type {type!r} is not one of {DEVICE_TYPES}")
        hierarchy, flat = _shape_of(ranks, what)
        bad = [r for r in flat if r < 0]
        if bad:
            raise GlobalViewError(f"{what}: ranks {bad} are negative; ranks are 0..world_size-1")
        dup = sorted({r for r in flat if flat.count(r) > 1})
        if dup:
            raise GlobalViewError(f"{what}: ranks {dup} appear more than once in {ranks!r}")
        self.type = type
        self.hierarchy = hierarchy
        self.ranks = tuple(flat)
        coords: dict[int, tuple[int, ...]] = {}
        for pid, r in enumerate(flat):
            c, rest = [], pid
            for n in reversed(hierarchy):
                c.append(rest % n)
                rest //= n
            coords[r] = tuple(reversed(c))
        self._coords = coords

    @classmethod
    def all(cls, type: str = "cpu", world_size: int | None = None) -> Placement:
        """Every rank of the world, 1-D (OneFlow's placement.all)."""
        if world_size is None:
            from ..env import get_world_size

            world_size = get_world_size()
        return cls(type, list(range(world_size)))

    @property
    def ndim(self) -> int:
        return len(self.hierarchy)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def nested_ranks(self) -> Any:
        """The ranks as given: a (nested) list."""

        def build(flat: Sequence[int], dims: tuple[int, ...]) -> list[Any]:
            if len(dims) == 1:
                return list(flat)
            step = len(flat) // dims[0]
            return [build(flat[i * step : (i + 1) * step], dims[1:]) for i in range(dims[0])]

        return build(self.ranks, self.hierarchy)

    def has(self, rank: int) -> bool:
        return rank in self._coords

    def parallel_id(self, rank: int) -> int:
        """Position of `rank` in the flattened ranks; -1 when not in the placement."""
        try:
            return self.ranks.index(rank)
        except ValueError:
            return -1

    def coords(self, rank: int) -> tuple[int, ...]:
        return self._coords[rank]

    def rank_at(self, coords: Sequence[int]) -> int:
        pid = 0
        for c, n in zip(coords, self.hierarchy, strict=True):
            pid = pid * n + c
        return self.ranks[pid]

    def axis_ranks(self, rank: int, axis: int) -> tuple[int, ...]:
        """The group of `rank` along mesh axis `axis`, ordered by that coordinate."""
        c = list(self.coords(rank))
        out = []
        for k in range(self.hierarchy[axis]):
            c[axis] = k
            out.append(self.rank_at(c))
        return tuple(out)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Placement)
            and self.type == other.type
            and self.hierarchy == other.hierarchy
            and self.ranks == other.ranks
        )

    def __hash__(self) -> int:
        return hash((self.type, self.hierarchy, self.ranks))

    def __repr__(self) -> str:
        return f'placement(type="{self.type}", ranks={self.nested_ranks()})'


placement = Placement
"""OneFlow's spelling: `placement("cpu", ranks=[0, 1])`, `placement.all("cpu")`."""
