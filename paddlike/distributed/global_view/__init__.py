"""The global view (OneFlow's model): a placement of ranks, an SBP per placement axis, and
global arrays whose operators deduce their output SBP and box their inputs with the
collectives. See docs/global_view.md.

    import paddlike.distributed as dist
    p = dist.placement("cpu", ranks=[0, 1])
    x = dist.global_array(data, placement=p, sbp=dist.sbp.split(0))
    y = (x.T @ x).to_global(sbp=dist.sbp.broadcast)
"""

from __future__ import annotations

from . import sbp
from .array import GlobalArray
from .errors import GlobalViewError
from .factories import arange, full, global_array, ones, randn, to_global, zeros
from .placement import Placement, placement

__all__ = [
    "GlobalArray",
    "GlobalViewError",
    "Placement",
    "arange",
    "full",
    "global_array",
    "ones",
    "placement",
    "randn",
    "sbp",
    "to_global",
    "zeros",
]
