"""Setting up one NCCL communicator, before NCCL's constructor is called: the unique id
through the store, each rank's GPU claimed (two ranks on one GPU named before NCCL refuses
them with "Duplicate GPU detected" or hangs), the store barrier that names a rank that never
came, and the constructor itself on a helper thread under the group's deadline.

Split from nccl.py (the communicator's operations) because every step here is testable
without a GPU, against a real store. CuPy is imported only inside `gpu_identity`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..store import StoreError, StoreTimeoutError
from . import keys as K
from .errors import CollectiveError, CollectiveTimeoutError

__all__ = [
    "await_peers",
    "build_with_deadline",
    "claim_gpu",
    "decode_unique_id",
    "encode_unique_id",
    "gpu_identity",
    "refuse_shared_gpu",
]

T = TypeVar("T")

def encode_unique_id(uid: Any) -> bytes:
    """NCCL's unique id for the store: CuPy >= 14 gives 128 bytes, older CuPy a tuple of 128
    signed chars. A one-byte tag keeps the form, so the peers rebuild exactly that."""
    if isinstance(uid, (bytes, bytearray)):
        return b"B" + bytes(uid)
    return b"T" + bytes(int(v) & 0xFF for v in uid)


def decode_unique_id(raw: bytes) -> bytes | tuple[int, ...]:
    tag, body = raw[:1], raw[1:]
    if tag == b"B":
        return bytes(body)
    if tag == b"T":
        return tuple(v - 256 if v > 127 else v for v in body)
    raise CollectiveError(f"init: malformed NCCL unique id in the store (tag {tag!r})")


def await_peers(
    store: Any, prefix: str, rank: int, global_ranks: Sequence[int], deadline: float,
    exited: Callable[[int], bool] | None = None,
) -> None:
    """The store barrier before NCCL's constructor: this rank says it is alive and about to
    build the communicator, then waits until every rank of the group has said so. NCCL's
    constructor waits for all ranks without any deadline; here a rank that died after
    fetching the unique id (or never came) is named when the deadline passes, and one whose
    process exited (`exited(group rank)`: the CPU lane sees its connection close) at once."""
    from .device import MIXED_HINT, wait_keys

    keys = [K.nccl_alive(prefix, k) for k in range(len(global_ranks))]
    group = prefix.rsplit("/", 1)[-1]
    try:
        store.set(keys[rank], b"1")
        wait_keys(store, keys, global_ranks, deadline, exited, f"init of group {group}")
    except StoreTimeoutError:
        missing = []
        for k, key in enumerate(keys):
            with contextlib.suppress(StoreError):
                if store.try_get(key) is None:
                    missing.append(global_ranks[k])
        raise CollectiveTimeoutError(
            f"init: ranks {missing} of group {group} (ranks {list(global_ranks)}) did not reach "
            f"NCCL communicator setup before the deadline (they died, did not call "
            f"init_parallel_env / new_group, issued device collectives in different orders, "
            f"{MIXED_HINT}); no communicator was built"
        ) from None
    except StoreError as exc:
        raise CollectiveError(
            f"init: the runtime store failed during NCCL setup of group {group}: {exc}"
        ) from None


def gpu_identity(device_id: int) -> bytes:
    """This process's GPU `device_id` as "key<TAB>description": the key is the same in every
    process using that GPU (its UUID, or the machine's boot id and the PCI bus id)."""
    import socket

    import cupy

    runtime = cupy.cuda.runtime
    pci = ""
    with contextlib.suppress(Exception):
        pci = str(runtime.deviceGetPCIBusId(device_id))
    uuid = ""
    with contextlib.suppress(Exception):
        raw = runtime.getDeviceProperties(device_id).get("uuid") or ""
        if isinstance(raw, bytes):  # all zeros: no UUID known
            raw = raw.hex() if raw.strip(b"\0") else ""
        uuid = str(raw)
    if uuid:
        key = "uuid:" + uuid
    else:
        boot = ""
        with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        key = f"pci:{boot or socket.gethostname()}/{pci}"
    where = f" (PCI {pci})" if pci else ""
    return f"{key}\tGPU {device_id}{where} on {socket.gethostname()}".encode()


def claim_gpu(
    store: Any, prefix: str, rank: int, global_ranks: Sequence[int], identity: bytes
) -> None:
    """Claim this rank's GPU in the store, before the setup barrier (`await_peers`).

    NCCL cannot put two ranks of one communicator on one device: depending on its version
    it fails with "Duplicate GPU detected" or hangs. A rank that finds its GPU claimed by
    another rank of the group leaves the reason under ``<prefix>/nccl-shared`` before it
    announces itself, so after the barrier every rank finds it (`refuse_shared_gpu`).
    One store request per rank, whatever the group's size.
    """
    key, _, description = identity.decode(errors="replace").partition("\t")
    owner = store.compare_set(K.nccl_gpu(prefix, key), None, str(rank))
    if owner == str(rank).encode():
        return
    a, b = sorted((global_ranks[int(owner)], global_ranks[rank]))
    group = prefix.rsplit("/", 1)[-1]
    reason = (
        f"init: ranks {a} and {b} of group {group} both use {description}; NCCL cannot put "
        f"two ranks of one communicator on one GPU. Give each rank its own GPU: use the device "
        f"in FLAGS_selected_gpus (paddlike.distributed.ParallelEnv().device_id) and start one "
        f"worker per GPU (python -m paddlike.launch does by default), or use backend='cpu'"
    )
    store.compare_set(K.nccl_shared(prefix), None, reason)


def refuse_shared_gpu(
    store: Any, prefix: str, rank: int, global_ranks: Sequence[int], deadline: float
) -> None:
    """After the setup barrier: raise CollectiveError if two ranks claimed one GPU.

    Every rank raises the same error, before any communicator exists. A last barrier
    comes first: rank 0 closes its store as it raises, and a peer still asking would then
    see a store failure instead of the reason (it waits at most 5 s for ranks that are gone).
    """
    reason = store.try_get(K.nccl_shared(prefix))
    if reason is None:
        return
    keys = [K.nccl_read(prefix, k) for k in range(len(global_ranks))]
    with contextlib.suppress(StoreError):
        store.set(keys[rank], b"1")
        store.wait(keys, timeout=max(0.001, min(5.0, deadline - time.monotonic())))
    raise CollectiveError(reason.decode(errors="replace"))


def build_with_deadline(
    build: Callable[[], T], deadline: float, what: str, discard: Callable[[T], None]
) -> T:
    """`build()` on a helper thread, waited for until `deadline`. Past it, raise (the thread
    cannot be cancelled; if `build` ever returns, `discard` gets the late result)."""
    result: list[T] = []
    errors: list[BaseException] = []
    done, abandoned = threading.Event(), threading.Event()

    def run() -> None:
        try:
            result.append(build())
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()
        if abandoned.is_set() and result:
            with contextlib.suppress(Exception):
                discard(result[0])

    threading.Thread(target=run, name=f"nccl-build-{what}", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        abandoned.set()
        if done.is_set() and result:  # finished just now: not leaked
            with contextlib.suppress(Exception):
                discard(result[0])
        raise CollectiveTimeoutError(
            f"{what}: did not finish before the deadline; a rank that had announced itself "
            f"died or hangs before joining"
        )
    if errors:
        raise CollectiveError(f"{what}: {errors[0]}") from errors[0]
    return result[0]
