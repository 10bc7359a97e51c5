"""Rendezvous: where the launchers meet, what they must agree on, and who is missing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from paddlike.distributed.store import StoreClient, StoreServer
from paddlike.launch.context.master import master_address
from paddlike.launch.peers import rendezvous
from paddlike.launch.peers.protocol import decode_entry, decode_world, encode_entry, encode_world
from paddlike.launch.peers.rendezvous import Rendezvous
from paddlike.launch.peers.rendezvous_errors import (
    FingerprintMismatch,
    RendezvousError,
    RendezvousTimeout,
)
from paddlike.launch.plan.agreement import (
    check_fingerprints,
    first_difference,
    rival_message,
    same_job,
)
from paddlike.launch.plan.nodejob import fingerprint
from paddlike.launch.plan.world import NodeEntry

HOSTS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]  # text only: no connection is opened to them


def _fp(**changes: object) -> dict[str, str]:
    args: dict = dict(
        ips=HOSTS,
        devices_per_node="cpu",
        nproc_per_node=2,
        run_mode="collective",
        job_id="j1",
        script="train.py",
        script_args=["--epochs", "3"],
    )
    args.update(changes)
    return fingerprint(**args)


def _entry(i: int, fp: dict[str, str] | None = None, ports: tuple[int, ...] = (1, 2)) -> NodeEntry:
    return NodeEntry(i, HOSTS[i], f"node{i}", 100 + i, ports, fp or _fp())


@pytest.mark.parametrize(
    ("master", "addr", "port", "expected"),
    [
        ("10.0.0.5:7000", None, None, ("10.0.0.5", 7000)),
        (None, "10.0.0.5", 7000, ("10.0.0.5", 7000)),
        (None, None, None, ("10.0.0.1", 6170)),
        (None, "nodeb", None, ("nodeb", 6170)),
    ],
)
def test_master_address_defaults_to_the_first_node_on_port_6170(master, addr, port, expected):
    assert master_address(master, addr, port, HOSTS) == expected


def test_identical_fingerprints_agree() -> None:
    assert check_fingerprints([_entry(0), _entry(1), _entry(2)]) is None


def test_a_different_ips_order_names_the_odd_node_and_the_field() -> None:
    odd = _fp(ips=[HOSTS[1], HOSTS[0], HOSTS[2]])
    msg = check_fingerprints([_entry(0), _entry(1, odd), _entry(2)])
    assert msg is not None
    assert "node 1 (node1, 10.0.0.2) disagrees on ips" in msg
    assert "'10.0.0.2,10.0.0.1,10.0.0.3'" in msg and "node 0 (node0, 10.0.0.1)" in msg


def test_with_two_nodes_the_node_that_differs_from_node_0_is_named() -> None:
    msg = check_fingerprints([_entry(0), _entry(1, _fp(nproc_per_node=4))])
    assert msg is not None and msg.startswith("rendezvous: node 1 (node1, 10.0.0.2) disagrees on")
    assert "nproc_per_node" in msg


def test_the_majority_wins_so_a_lone_node_0_is_the_odd_one() -> None:
    other = _fp(script="other.py")
    msg = check_fingerprints([_entry(0, other), _entry(1), _entry(2)])
    assert msg is not None and "node 0 (node0, 10.0.0.1) disagrees on training script" in msg


def test_an_unset_job_id_is_not_compared() -> None:
    assert "job_id" not in _fp(job_id=None)
    assert check_fingerprints([_entry(0, _fp(job_id=None)), _entry(1, _fp(job_id=None))]) is None


def test_node_entries_round_trip_through_bytes() -> None:
    e = _entry(2, ports=(40001, 40002, 40003))
    assert decode_entry(encode_entry(e)) == e


def test_a_world_round_trips_every_entry_with_its_own_fingerprint_in_field_order() -> None:
    odd = dict(reversed(_fp(nproc_per_node=4).items()))  # another value, another field order
    entries = [_entry(0), _entry(1, fp=odd, ports=(7, 8, 9)), _entry(2)]
    back = decode_world(encode_world(entries))
    assert back == tuple(entries)
    assert [list(e.fingerprint) for e in back] == [list(e.fingerprint) for e in entries]


# --- against a live store, nodes as threads --------------------------------------------


@pytest.fixture
def store() -> Iterator[StoreServer]:
    with StoreServer().start() as srv:
        yield srv


def _join_all(store: StoreServer, entries: list[NodeEntry], nnodes: int, timeout: float = 10):
    results: dict[int, object] = {}
    lines: list[str] = []

    def node(e: NodeEntry) -> None:
        with StoreClient(*store.address) as kv:
            r = Rendezvous(
                kv, e.index, nnodes, HOSTS, timeout, progress=lambda what, *_: lines.append(what)
            )
            try:
                results[e.index] = r.join(e)
            except RendezvousError as exc:
                results[e.index] = exc

    threads = [threading.Thread(target=node, args=(e,)) for e in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results, lines


def test_the_store_names_the_keys_it_lacks_in_one_call(store: StoreServer) -> None:
    with StoreClient(*store.address) as kv:
        kv.set("rdzv/0/node/1", b"x")
        assert kv.missing(["rdzv/0/node/0", "rdzv/0/node/1", "rdzv/0/node/2"]) == [
            "rdzv/0/node/0",
            "rdzv/0/node/2",
        ]
        assert kv.missing(["rdzv/0/node/1"]) == [] and kv.missing([]) == []


def test_all_nodes_get_every_nodes_ports_in_node_order(store: StoreServer) -> None:
    entries = [_entry(i, ports=(4000 + 10 * i, 4001 + 10 * i)) for i in range(3)]
    results, _ = _join_all(store, entries, 3)
    ports = {i: r.ports for i, r in results.items()}  # type: ignore[union-attr]
    assert ports[0] == ports[1] == ports[2] == ((4000, 4001), (4010, 4011), (4020, 4021))
    assert {r.job_id for r in results.values()} == {"j1"}  # type: ignore[union-attr]


def test_a_mismatch_fails_every_node_with_the_same_message_and_exit_code_2(store) -> None:
    entries = [_entry(0), _entry(1, _fp(run_mode="ps")), _entry(2)]
    results, _ = _join_all(store, entries, 3)
    assert all(isinstance(r, FingerprintMismatch) for r in results.values())
    assert len({str(r) for r in results.values()}) == 1
    assert "node 1 (node1, 10.0.0.2) disagrees on run_mode" in str(results[0])
    assert FingerprintMismatch.exit_code == 2


def test_a_node_that_never_comes_is_named_by_the_timeout(store: StoreServer) -> None:
    results, lines = _join_all(store, [_entry(0), _entry(2)], 3, timeout=1.5)
    for r in results.values():
        assert isinstance(r, RendezvousTimeout)
        assert "node 1 (10.0.0.2) never joined" in str(r)
    assert any("waiting for node 1 (10.0.0.2)" in line for line in lines)


def test_two_launchers_claiming_one_node_index_are_both_named(store: StoreServer) -> None:
    with StoreClient(*store.address) as kv:
        Rendezvous(kv, 0, 2, HOSTS, 5).kv.compare_set(
            "rdzv/0/node/0", None, encode_entry(_entry(0))
        )
        twin = NodeEntry(0, HOSTS[0], "elsewhere", 999, (1, 2), _fp())
        with pytest.raises(FingerprintMismatch, match=r"two launchers claim node index 0: node0"):
            Rendezvous(kv, 0, 2, HOSTS, 5).join(twin)


def test_a_rival_rendezvous_is_described_by_the_field_and_where_it_runs() -> None:
    mine = _entry(0)
    theirs = NodeEntry(0, HOSTS[1], "node1", 7, (1, 2), _fp(ips=[HOSTS[1], HOSTS[0], HOSTS[2]]))
    msg = rival_message(mine, theirs, "10.0.0.2:6170")
    assert msg.startswith("rendezvous: the launcher on node1 (10.0.0.2) disagrees on ips:")
    assert "'10.0.0.2,10.0.0.1,10.0.0.3'" in msg and "node0 (10.0.0.1) has '10.0.0.1," in msg
    assert "both believe they are node 0" in msg and "10.0.0.2:6170" in msg
    assert same_job(mine, theirs)
    other_job = NodeEntry(0, HOSTS[1], "node1", 7, (1, 2), _fp(ips=[HOSTS[1], "10.0.0.9"]))
    assert not same_job(mine, other_job)  # its store is left alone
    assert first_difference(_fp(), _fp(script="b.py")) == "training script"
    assert first_difference(_fp(), _fp()) is None


def test_the_store_host_lingers_until_every_arrival_has_read_the_verdict(store) -> None:
    # Node 0 fails its rendezvous; before closing the store it waits for the "left" mark
    # of each launcher that arrived, so none of them sees "store gone" instead.
    with StoreClient(*store.address) as kv, StoreClient(*store.address) as other:
        kv.add("rdzv/0/arrived", 2)
        kv.set("rdzv/0/left/1", b"1")
        threading.Timer(0.2, other.set, args=("rdzv/0/left/2", b"1")).start()
        started = time.monotonic()
        Rendezvous(kv, 0, 2, HOSTS, 5).linger(0, timeout=5)
        assert 0.15 < time.monotonic() - started < 4


def test_every_launcher_marks_that_it_read_the_verdict_even_when_it_fails(store) -> None:
    entries = [_entry(0), _entry(1, _fp(run_mode="ps"))]
    _join_all(store, entries, 2)
    with StoreClient(*store.address) as kv:
        assert kv.try_get("rdzv/0/arrived") == b"2"
        assert kv.try_get("rdzv/0/left/1") == kv.try_get("rdzv/0/left/2") == b"1"


class _Counting(StoreClient):
    """A store connection that counts its calls (each a request and its answer)."""

    calls = 0

    def _call(self, command):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super()._call(command)


def test_every_node_reads_one_world_in_a_few_calls_however_many_nodes(store) -> None:
    """The last arrival reads the N entries in one call and writes one world; each node
    reads that: the calls a node makes do not grow with N, and all get the same world."""
    n = 40
    hosts = [f"10.0.{i // 200}.{i % 200 + 1}" for i in range(n)]
    results: dict[int, object] = {}
    calls: dict[int, int] = {}

    def node(i: int) -> None:
        with _Counting(*store.address) as kv:
            entry = NodeEntry(i, hosts[i], f"node{i}", 100 + i, (5000 + i,), _fp())
            results[i] = Rendezvous(kv, i, n, hosts, 20).join(entry)
            calls[i] = kv.calls

    threads = [threading.Thread(target=node, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    worlds = [r.nodes for r in results.values()]  # type: ignore[union-attr]
    assert len(results) == n and all(w == worlds[0] for w in worlds)
    assert [e.ports for e in worlds[0]] == [(5000 + i,) for i in range(n)]
    # each: arrive, publish, count, verdict, world, left; the last also reads the entries
    # (one call), writes the world and the verdict
    assert max(calls.values()) <= 9 and sum(calls.values()) <= 6 * n + 3


def test_progress_counts_nodes_while_they_arrive_and_names_them_once_they_stall(
    store: StoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StoreClient(*store.address) as kv:
        rdzv = Rendezvous(kv, 0, 4, [*HOSTS, "10.0.0.4"], 5)
        monkeypatch.setattr(rendezvous, "ALWAYS_NAMED", 3)  # (as in a job of 65 nodes)
        for i in (0, 1):
            kv.set(f"rdzv/0/node/{i}", encode_entry(_entry(i)))
            kv.add("rdzv/0/count", 1)
        rdzv._last_count = (0, 1)  # node 0 came in first; node 1 arrived since
        assert rdzv._absent(0) == "2 of 4 nodes"  # (naming them reads every entry)
        assert rdzv._absent(0) == "node 2 (10.0.0.3), node 3 (10.0.0.4)"  # no one came
        kv.set("rdzv/0/node/2", encode_entry(_entry(2)))
        kv.add("rdzv/0/count", 1)
        assert rdzv._absent(0, named=True) == "node 3 (10.0.0.4)"  # (the timeout's)
