"""Functions the spawn tests start in children (no tests here).

They live in a module of their own so that a child imports only this (not pytest and the
test module) when it unpickles its function. Each writes what the test needs to see into
the directory it is given.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CONTRACT_PREFIXES = ("PADDLE_", "PADDLIKE_", "TORCHELASTIC_", "FLAGS_")
CONTRACT_NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "NODE_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
)


def _write(path: Path, text: str) -> None:
    """Whole or not at all: the other rank (or the test) may read it at any moment."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def where_am_i(tag: str) -> tuple[str, int, int, int]:
    """Paddle's convention: fn(*args)."""
    return tag, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), os.getpid()


def paddlike_modules() -> list[str]:
    """The paddlike modules this child had imported by the time its function ran."""
    import sys

    return sorted(name for name in sys.modules if name.split(".")[0] == "paddlike")


def index_first(i: int, tag: str) -> tuple[int, str, int]:
    """torch's convention: fn(i, *args)."""
    return i, tag, int(os.environ["LOCAL_RANK"])


def contract_of(environ: dict[str, str]) -> dict[str, str]:
    """The launched environment contract's variables in `environ`."""
    return {
        k: v for k, v in environ.items() if k.startswith(CONTRACT_PREFIXES) or k in CONTRACT_NAMES
    }


def contract() -> dict[str, str]:
    """The launched environment contract as this child sees it."""
    return contract_of(dict(os.environ))


def rank_one_raises(i: int, out: str) -> None:
    """Rank 0 records its pid and waits to be torn down; rank 1 raises once it has."""
    path = Path(out)
    if i == 0:
        _write(path / "pid.0", str(os.getpid()))
        time.sleep(60)
        return
    while not (path / "pid.0").exists():
        time.sleep(0.01)
    _write(path / "raised_at", repr(time.time()))
    raise ValueError(f"rank {i} failed on purpose with {out!r}")


def rank_one_killed(i: int, out: str) -> None:
    """Rank 1 is SIGKILLed (no Python exception); rank 0 waits to be torn down."""
    if i == 0:
        _write(Path(out) / "pid.0", str(os.getpid()))
        time.sleep(60)
        return
    while not (Path(out) / "pid.0").exists():
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)


def wait_for_go(i: int, out: str) -> int:
    """Returns i * 10 once the test has created OUT/go (join=False returns before that)."""
    _write(Path(out) / f"pid.{i}", str(os.getpid()))
    while not (Path(out) / "go").exists():
        time.sleep(0.01)
    return i * 10


MARK = "set in the module"


def module_state(i: int) -> str:
    """What a module-level value is in the child (the parent changes it before starting)."""
    return MARK


def torch_all_reduce(i: int) -> list[float]:
    """A torch.distributed script: gloo, env:// (MASTER_ADDR/MASTER_PORT, RANK,
    WORLD_SIZE from the contract), one all_reduce and one all_gather."""
    import torch
    import torch.distributed as td

    td.init_process_group("gloo")
    try:
        rank, world = td.get_rank(), td.get_world_size()
        x = torch.tensor([float(rank + 1)])
        td.all_reduce(x)
        gathered = [torch.zeros(1) for _ in range(world)]
        td.all_gather(gathered, torch.tensor([float(rank)]))
        return [x.item(), *(g.item() for g in gathered)]
    finally:
        td.destroy_process_group()


def unpicklable_result(i: int) -> object:
    """A return value the parent cannot receive: a lambda."""
    return lambda: i


def all_reduce_rank() -> tuple[int, float]:
    """The collective runtime inside a spawned job: the sum of the ranks, from every rank."""
    import numpy as np

    import paddlike.distributed as dist

    dist.init_parallel_env()
    x = np.array([float(dist.get_rank())])
    dist.all_reduce(x)
    dist.destroy_process_group()
    return dist.get_rank(), float(x[0])


def rank_three_raises() -> None:
    """Many nodes: the last rank raises, the others wait to be torn down."""
    if os.environ["RANK"] == "3":
        raise RuntimeError("rank 3 failed on purpose")
    time.sleep(60)
