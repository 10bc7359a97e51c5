"""NCCL setup deadlines that need no GPU: the store barrier every rank passes before NCCL's
constructor (which itself waits without a deadline), and the helper thread that bounds the
constructor. Real store, real threads; the only stand-in is the GPU constructor itself."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from paddlike.distributed.collective import nccl_setup
from paddlike.distributed.collective.errors import CollectiveError, CollectiveTimeoutError
from paddlike.distributed.store import StoreClient, StoreServer


def _announce_all(srv: StoreServer, ranks: list[int], world: int, seconds: float) -> dict:
    """Group ranks `ranks` of a `world`-rank group run the pre-constructor barrier at once."""
    results: dict[int, BaseException | None] = {}
    deadline = time.monotonic() + seconds

    def rank(k: int) -> None:
        with StoreClient(*srv.address, timeout=10) as store:
            try:
                nccl_setup.await_peers(
                    store, "paddlike/r0/i0/g3", k, [10, 11, 12][:world], deadline
                )
                results[k] = None
            except Exception as exc:
                results[k] = exc

    threads = [threading.Thread(target=rank, args=(k,)) for k in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_ranks_that_all_announce_themselves_pass_the_setup_barrier() -> None:
    with StoreServer().start() as srv:
        assert _announce_all(srv, [0, 1, 2], 3, 20.0) == {0: None, 1: None, 2: None}


def test_a_rank_missing_at_nccl_setup_is_named_at_the_deadline_instead_of_a_hang() -> None:
    with StoreServer().start() as srv:
        start = time.monotonic()
        results = _announce_all(srv, [0, 1], 3, 0.5)  # group rank 2 (global 12) died
        elapsed = time.monotonic() - start
    assert 0.4 < elapsed < 5
    for exc in results.values():
        assert isinstance(exc, CollectiveTimeoutError), exc
        assert str(exc).startswith("init: ranks [12] of group g3 (ranks [10, 11, 12]) did not "
                                   "reach NCCL communicator setup before the deadline")  # fmt: skip


def test_a_constructor_that_never_returns_times_out_and_its_late_result_is_discarded() -> None:
    release, discarded = threading.Event(), queue.SimpleQueue()

    def build() -> str:
        release.wait(30)
        return "late communicator"

    start = time.monotonic()
    with pytest.raises(CollectiveTimeoutError, match="init: NCCL communicator of group g0: did "
                       "not finish before the deadline"):  # fmt: skip
        nccl_setup.build_with_deadline(build, start + 0.3, "init: NCCL communicator of group g0",
                                 discarded.put)  # fmt: skip
    assert time.monotonic() - start < 5
    release.set()
    assert discarded.get(timeout=10) == "late communicator"  # aborted, not leaked


def test_a_constructor_that_fails_reports_why() -> None:
    def build() -> None:
        raise RuntimeError("NCCL_ERROR_INVALID_USAGE")

    with pytest.raises(CollectiveError, match="init: NCCL communicator: NCCL_ERROR_INVALID"):
        nccl_setup.build_with_deadline(build, time.monotonic() + 10, "init: NCCL communicator",
                                 lambda _: None)  # fmt: skip
    built = nccl_setup.build_with_deadline(lambda: 7, time.monotonic() + 10, "x", lambda _: None)
    assert built == 7
