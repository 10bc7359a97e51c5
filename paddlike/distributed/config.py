"""OneFlow's ``flow.config`` for the node-list form: how many workers each node runs.

``config.device_num(n)`` (alias ``gpu_device_num``) is one of the three calls of the
node-list form (see `paddlike.distributed.nodelist`): `n` workers on every node, one per
device. Stdlib only: imported with the package.
"""

from __future__ import annotations

from .nodelist import device_num, gpu_device_num

__all__ = ["device_num", "gpu_device_num"]
