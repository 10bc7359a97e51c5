"""Which devices each local worker gets: GPUs counted without CuPy, ids relative to
CUDA_VISIBLE_DEVICES.

The launcher must not import CuPy (slow, and absent on CPU nodes), so GPUs are
counted from the driver's /proc entries. With CUDA_VISIBLE_DEVICES set, the ids in
``--gpus`` are entries of that list and workers get their position in it (what the
CUDA runtime in the worker calls them), as Paddle's launcher does:

    CUDA_VISIBLE_DEVICES   --gpus   worker sees
    (unset)                0,1      0 | 1
    2,3                    3        1
    2,3                    1        error: 1 is not in CUDA_VISIBLE_DEVICES
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from paddlike.contract import CUDA_VISIBLE_DEVICES
from paddlike.launch.context.options import LaunchOptions, UsageError

NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"


def count_gpus(gpus_dir: str = NVIDIA_GPUS_DIR) -> int:
    """The number of NVIDIA GPUs the driver lists (one directory per PCI device); 0 if none."""
    try:
        return sum(1 for entry in os.scandir(gpus_dir) if entry.is_dir())
    except OSError:
        return 0


@dataclass(frozen=True)
class DeviceAssignment:
    """The devices of each local worker, as the worker sees them; empty tuples on CPU."""

    kind: str  # "gpu" | "cpu"
    per_worker: tuple[tuple[str, ...], ...]

    @property
    def nproc(self) -> int:
        return len(self.per_worker)


def visible_devices(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """CUDA_VISIBLE_DEVICES as a tuple, or None when unset (an empty value hides every GPU)."""
    value = environ.get(CUDA_VISIBLE_DEVICES)
    if value is None:
        return None
    return tuple(t.strip() for t in value.split(",") if t.strip())


def assign_devices(
    gpus: Sequence[str] | None,
    nproc_per_node: int | None,
    *,
    environ: Mapping[str, str],
    gpu_count: int,
    dry_run: bool = False,
) -> DeviceAssignment:
    """Split this node's devices among its workers: contiguous slices, in --gpus order.

    `gpu_count` is passed in (from `count_gpus`) so that this stays free of I/O.
    A GPU that is not there is an error, except under --dry_run, which only prints.
    """
    if gpus is None:
        return DeviceAssignment("cpu", tuple(() for _ in range(nproc_per_node or 1)))
    shown = ",".join(gpus)
    visible = visible_devices(environ)
    if visible is not None:
        missing = [g for g in gpus if g not in visible]
        if missing:
            raise UsageError(
                f"--gpus: {missing[0]} is not in CUDA_VISIBLE_DEVICES={','.join(visible)!r}; "
                f"give ids from that list, got {shown!r}",
                "--gpus",
            )
        relative = tuple(str(visible.index(g)) for g in gpus)
    else:
        relative = tuple(gpus)
    if not dry_run:
        if gpu_count == 0:
            raise UsageError(
                f"--gpus: no NVIDIA GPU found on this node ({NVIDIA_GPUS_DIR} is empty or "
                f"missing), got {shown!r}; drop --gpus to run CPU workers",
                "--gpus",
            )
        # Physical ids only when CUDA_VISIBLE_DEVICES holds plain indices (it may hold UUIDs).
        physical = gpus if visible is None else [g for g in gpus if g.isdigit()]
        too_big = [g for g in physical if int(g) >= gpu_count]
        if too_big:
            raise UsageError(
                f"--gpus: GPU {too_big[0]} does not exist, this node has {gpu_count} "
                f"(ids 0-{gpu_count - 1}), got {shown!r}",
                "--gpus",
            )
    nproc = nproc_per_node or len(relative)
    if len(relative) % nproc:
        raise UsageError(
            f"--nproc_per_node: {nproc} does not divide the {len(relative)} GPUs of --gpus {shown}",
            "--nproc_per_node",
        )
    step = len(relative) // nproc
    return DeviceAssignment("gpu", tuple(relative[i * step : (i + 1) * step] for i in range(nproc)))


def node_devices(options: LaunchOptions, environ: Mapping[str, str]) -> DeviceAssignment:
    """This node's devices for its workers: the one call the launcher makes (reads /proc)."""
    return assign_devices(
        options.gpus,
        options.nproc_per_node,
        environ=environ,
        gpu_count=count_gpus() if options.gpus is not None else 0,
        dry_run=options.dry_run,
    )
