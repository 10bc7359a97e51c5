"""Checkpoint files: one directory per server, a manifest, and an all-or-nothing commit.

Layout of a checkpoint `DIR`:

    DIR/manifest.json                 tables (their specs) and the server count
    DIR/server-K/TABLE/meta.json      the shard's scalars (range, step, row count)
    DIR/server-K/TABLE/NAME.npy       its arrays: values, optimizer slots, keys

Everything is written under `DIR.tmp-<token>` first; the manifest goes in last and
the directory is renamed into place only after every server has written its part,
so a crash mid-save leaves the previous checkpoint (or none), never half of one.
Arrays are plain .npy files (numeric dtypes, `allow_pickle=False`).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = "manifest.json"
FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that is missing, incomplete, or does not fit the job's tables."""


def server_dir(root: Path, index: int) -> Path:
    return root / f"server-{index}"


def temp_dir_for(final: Path) -> Path:
    return final.parent / f"{final.name}.tmp-{uuid.uuid4().hex[:12]}"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_shard(
    root: Path, index: int, table: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]
) -> None:
    d = server_dir(root, index) / table
    d.mkdir(parents=True, exist_ok=True)
    for name, arr in arrays.items():
        path = d / f"{name}.npy"
        np.save(path, np.ascontiguousarray(arr), allow_pickle=False)
        _fsync(path)
    (d / "meta.json").write_text(json.dumps(meta))
    _fsync(d / "meta.json")


def read_shard(root: Path, index: int, table: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    d = server_dir(root, index) / table
    if not (d / "meta.json").is_file():
        raise CheckpointError(
            f"checkpoint {root} has no shard of table {table!r} for server {index}"
        )
    meta = json.loads((d / "meta.json").read_text())
    arrays = {p.stem: np.load(p, allow_pickle=False) for p in sorted(d.glob("*.npy"))}
    return meta, arrays


def write_manifest(root: Path, num_servers: int, specs: list[dict[str, Any]]) -> None:
    path = root / MANIFEST
    path.write_text(json.dumps({"format": FORMAT, "num_servers": num_servers, "tables": specs}))
    _fsync(path)


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{root} is not a paddlike PS checkpoint (no {MANIFEST})")
    return json.loads(path.read_text())


def commit(tmp: Path, final: Path) -> None:
    """Atomically make `tmp` the checkpoint at `final`, replacing an older one."""
    _fsync(tmp)
    old = None
    if final.exists():
        old = final.parent / f"{final.name}.old-{uuid.uuid4().hex[:12]}"
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
