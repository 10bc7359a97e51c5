"""Elastic jobs' decisions (plan/membership.py) as tables, and the elastic rendezvous
(peers/elastic_rendezvous.py) over an in-memory store with real threads."""

from __future__ import annotations

import threading

import pytest

from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.elastic_rendezvous import ElasticRendezvous, JobEnded
from paddlike.launch.peers.rendezvous_errors import RendezvousTimeout
from paddlike.launch.plan.membership import (
    JOINED,
    LOST,
    ElasticSpec,
    elastic_order,
    may_close,
)
from paddlike.launch.plan.world import NodeEntry
from paddlike.summary import RootCause
from tests.support.fakes import MemoryKV

pytestmark = pytest.mark.timeout(30)

SPEC = ElasticSpec(min_nodes=2, max_nodes=4, last_call=30.0)


@pytest.mark.parametrize(
    ("arrived", "quiet_for", "previous_over", "survivors_missing", "close"),
    [
        (4, 0.0, True, None, True),  # MAX came
        (5, 0.0, True, None, True),
        (1, 99.0, True, None, False),  # below MIN, however long
        (2, 29.9, True, None, False),  # MIN, last call still open
        (2, 30.0, True, None, True),  # MIN, last call over
        (3, 0.0, True, 0, True),  # every survivor of the last round is back
        (3, 0.0, True, 1, False),
        (1, 99.0, True, 0, False),  # survivors back, but fewer than MIN
        (4, 99.0, False, 0, False),  # the running round has not ended everywhere
    ],
)
def test_a_round_closes_at_max_at_min_after_the_last_call_or_when_the_survivors_are_back(
    arrived: int,
    quiet_for: float,
    previous_over: bool,
    survivors_missing: int | None,
    close: bool,
) -> None:
    got = may_close(
        SPEC,
        arrived=arrived,
        quiet_for=quiet_for,
        previous_over=previous_over,
        survivors_missing=survivors_missing,
    )
    assert got is close


def _e(host: str, index: int = -1, pid: int = 1) -> NodeEntry:
    return NodeEntry(index, host, "", pid, (7000,), {"fp": "1"})


def test_previous_members_keep_their_order_and_newcomers_follow_by_address() -> None:
    arrivals = [
        (1, _e("10.0.0.30")),
        (2, _e("10.0.0.5", 0)),
        (3, _e("10.0.0.7", 2)),
        (4, _e("10.0.0.10")),
        (5, _e("10.0.0.9")),
    ]
    assert elastic_order(arrivals) == [2, 3, 5, 4, 1]


def _membership(kind: str) -> RootCause:
    return RootCause(reason=f"node {kind}", membership=kind)


def _failed() -> RootCause:
    return RootCause(reason="trainer rank 1 exited with code 3", role="trainer", exit_code=3)


# --- the rendezvous over an in-memory store ---------------------------------------------


def _join_all(
    kv: MemoryKV,
    entries: list[NodeEntry],
    spec: ElasticSpec,
    round_: int = 0,
    survivors: set[tuple[str, int]] | None = None,
    timeout: float = 10.0,
) -> list:
    results: list = [None] * len(entries)

    def one(i: int) -> None:
        rdzv = ElasticRendezvous(
            kv, spec, timeout=timeout, progress=lambda *a: None, survivors=survivors, poll=0.02
        )
        try:
            results[i] = rdzv.join(entries[i], round_)
        except Exception as exc:  # the test looks at it
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(entries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return results


def test_min_nodes_start_a_round_once_the_last_call_passed_without_a_new_arrival() -> None:
    spec = ElasticSpec(min_nodes=2, max_nodes=4, last_call=0.3)
    results = _join_all(MemoryKV(), [_e("10.0.0.2"), _e("10.0.0.1", 0)], spec)
    assert all(r.round == 0 and len(r.nodes) == 2 for r in results)
    assert [r.hosts for r in results] == [("10.0.0.1", "10.0.0.2")] * 2
    assert sorted(r.index for r in results) == [0, 1]


def test_max_nodes_start_a_round_at_once_without_waiting_for_the_last_call() -> None:
    spec = ElasticSpec(min_nodes=2, max_nodes=3, last_call=1000.0)
    hosts = ["10.0.0.3", "10.0.0.1", "10.0.0.2"]
    results = _join_all(MemoryKV(), [_e(h) for h in hosts], spec, timeout=5.0)
    assert all(not isinstance(r, Exception) for r in results), results
    assert {r.hosts for r in results} == {("10.0.0.1", "10.0.0.2", "10.0.0.3")}


def test_a_late_node_waits_in_the_next_round_until_the_running_one_is_over() -> None:
    kv = MemoryKV()
    spec = ElasticSpec(min_nodes=2, max_nodes=4, last_call=0.2)
    first = _join_all(kv, [_e("10.0.0.1", 0), _e("10.0.0.2")], spec)
    assert all(r.round == 0 for r in first)
    late: list = []
    t = threading.Thread(
        target=lambda: late.append(
            ElasticRendezvous(kv, spec, timeout=10, progress=lambda *a: None, poll=0.02).join(
                _e("10.0.0.3"), 0
            )
        )
    )
    t.start()
    # the late node takes a ticket in round 1; round 0's members see it there
    kv.get(p.ticket_key(1, 1), timeout=5)
    assert kv.try_get(p.complete_key(1)) is None
    kv.set(p.over_key(0), b"1")  # round 0 ended everywhere: the members come to round 1
    survivors = {("10.0.0.1", 1), ("10.0.0.2", 1)}
    again = _join_all(kv, [_e("10.0.0.1", 0), _e("10.0.0.2", 1)], spec, 1, survivors)
    t.join(10)
    assert [r.round for r in again + late] == [1, 1, 1]
    assert {r.hosts for r in again + late} == {("10.0.0.1", "10.0.0.2", "10.0.0.3")}


def test_a_new_round_starts_as_soon_as_every_survivor_is_back() -> None:
    kv = MemoryKV()
    kv.set(p.over_key(0), b"1")
    spec = ElasticSpec(min_nodes=2, max_nodes=4, last_call=1000.0)
    survivors = {("10.0.0.1", 1), ("10.0.0.2", 1), ("10.0.0.4", 1)}
    entries = [_e("10.0.0.1", 0), _e("10.0.0.2", 1), _e("10.0.0.4", 3)]
    results = _join_all(kv, entries, spec, 1, survivors, timeout=5.0)
    assert all(not isinstance(r, Exception) for r in results), results
    assert results[0].hosts == ("10.0.0.1", "10.0.0.2", "10.0.0.4")


def test_a_waiting_node_whose_deadline_passes_while_the_job_runs_leaves_alone() -> None:
    kv = MemoryKV()
    kv.set(p.ELASTIC_ROUND_KEY, b"3")  # round 3 runs; nothing says it is over
    kv.set(p.closed_key(3), p.encode_order([1, 2]))
    kv.set(p.complete_key(3), p.COMPLETE_OK)
    kv.set(p.arrived_key(3), b"2")
    rdzv = ElasticRendezvous(kv, SPEC, timeout=0.3, progress=lambda *a: None, poll=0.02)
    with pytest.raises(RendezvousTimeout, match="runs with its maximum of 4 nodes"):
        rdzv.join(_e("10.0.0.9"), 0)
    assert kv.try_get(p.gone_key(4, 1)) == b"1"
    assert kv.try_get(p.complete_key(4)) is None  # nobody else's round failed


def test_too_few_nodes_by_the_deadline_fail_the_round_for_everyone_waiting() -> None:
    spec = ElasticSpec(min_nodes=3, max_nodes=4, last_call=0.1)
    results = _join_all(MemoryKV(), [_e("10.0.0.1"), _e("10.0.0.2")], spec, timeout=0.5)
    assert all(isinstance(r, RendezvousTimeout) for r in results)
    assert "fewer than the 3 that --nnodes 3:4 needs" in str(results[0])


def test_a_node_that_comes_after_the_job_ended_is_told_so() -> None:
    kv = MemoryKV()
    kv.set(p.ELASTIC_END_KEY, b"it succeeded")
    with pytest.raises(JobEnded, match="ended before this node got a place in it"):
        ElasticRendezvous(kv, SPEC, timeout=1, progress=lambda *a: None).join(_e("10.0.0.1"), 0)


def test_a_round_in_which_a_node_was_lost_ends_as_a_membership_change_whatever_failed_first():
    from paddlike.launch.plan.policy import membership_cause

    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    failed = _failed()  # a survivor's collective saw the lost node's processes vanish first
    cause = membership_cause(failed, [(2, LOST)], hosts, 2.0, 1.0)
    assert cause.membership == LOST
    assert cause.reason.startswith("node 2 (10.0.0.3) stopped sending heartbeats for 2 s")
    assert cause.reason.endswith("; first seen as: trainer rank 1 exited with code 3")
    left = membership_cause(None, [(1, "left")], hosts, 2.0, 1.0)
    assert (left.membership, left.reason) == (
        "left",
        "node 1 (10.0.0.2) left the job (its launcher was stopped)",
    )
    joined = _membership(JOINED)
    assert membership_cause(joined, [(2, LOST)], hosts, 2.0, 1.0) is joined


def test_a_node_joining_late_skips_the_closed_rounds_without_taking_tickets_there() -> None:
    kv = MemoryKV()
    kv.set(p.ELASTIC_ROUND_KEY, b"1")
    for r in (1, 2):
        kv.set(p.closed_key(r), p.encode_order([1, 2]))
    kv.set(p.over_key(2), b"1")
    spec = ElasticSpec(min_nodes=1, max_nodes=4, last_call=0.1)
    result = ElasticRendezvous(kv, spec, timeout=5, progress=lambda *a: None, poll=0.02).join(
        _e("10.0.0.9"), 0
    )
    assert kv.try_get(p.arrived_key(1)) is None and kv.try_get(p.arrived_key(2)) is None
    assert result.round == 3


def test_a_newcomer_with_another_configuration_is_refused_alone_before_it_takes_a_place():
    from paddlike.launch.peers.rendezvous_errors import FingerprintMismatch

    kv = MemoryKV()
    kv.set(p.ELASTIC_ROUND_KEY, b"0")
    kv.set(p.closed_key(0), p.encode_order([1, 2]))
    kv.set(p.world_key(0), p.encode_world([_e("10.0.0.1", 0), _e("10.0.0.2", 1)]))
    odd = _e("10.0.0.3")._replace(fingerprint={"fp": "2"})
    rdzv = ElasticRendezvous(kv, SPEC, timeout=5, progress=lambda *a: None, poll=0.02)
    with pytest.raises(FingerprintMismatch, match=r"this node \(10.0.0.3\) cannot join .* fp '2'"):
        rdzv.join(odd, 0)
    assert kv.try_get(p.arrived_key(1)) is None  # the running job never saw it


def test_a_node_waiting_for_a_place_stops_when_the_job_ends_instead_of_starting_alone():
    kv = MemoryKV()
    kv.set(p.ELASTIC_ROUND_KEY, b"0")
    kv.set(p.closed_key(0), p.encode_order([1, 2]))
    kv.set(p.world_key(0), p.encode_world([_e("10.0.0.1", 0), _e("10.0.0.2", 1)]))
    spec = ElasticSpec(min_nodes=1, max_nodes=2, last_call=0.0)  # alone would be enough
    rdzv = ElasticRendezvous(kv, spec, timeout=10, progress=lambda *a: None, poll=0.02)
    # the members finish round 0 successfully: no over key (nobody goes on), an end key
    threading.Timer(0.3, kv.set, args=(p.ELASTIC_END_KEY, b"it succeeded")).start()
    with pytest.raises(JobEnded, match=r"ended before this node got a place in it \(it succ"):
        rdzv.join(_e("10.0.0.3"), 0)
    assert kv.try_get(p.complete_key(1)) is None
