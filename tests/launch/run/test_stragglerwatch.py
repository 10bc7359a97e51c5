"""--straggler_check's console and summary (run.stragglerwatch): each check's finding is
said once, again only when who is named changes; a check that sees fewer ranks than an
earlier one says nothing; other nodes' parts travel as JSON (peers.stragglers)."""

from __future__ import annotations

import io
import json
import zlib

from paddlike.launch.console.output import Console
from paddlike.launch.peers.stragglers import StoreChannel
from paddlike.launch.run.stragglerwatch import NodeArrivals, StragglerWatch
from paddlike.logs.lateness import Arrival
from tests.support.fakes import MemoryKV


def part(ranks: range, late: dict[int, float], node: str = "a", n: int = 50) -> NodeArrivals:
    arrivals = {
        r: [Arrival("torch:0", s, "all_reduce", s * 0.1 + late.get(r, 0.0)) for s in range(1, n)]
        for r in ranks
    }
    return NodeArrivals(arrivals, dict.fromkeys(ranks, node), {r: f"workerlog.{r}" for r in ranks})


def watch(node_index: int = 0) -> tuple[StragglerWatch, io.StringIO, list[dict]]:
    err, tables = io.StringIO(), []
    w = StragglerWatch(
        "/nowhere", Console(err), period=1.0, threshold=0.1, node_index=node_index,
        node="a", on_table=tables.append,
    )  # fmt: skip
    return w, err, tables


def test_a_straggler_is_said_once_and_again_only_when_who_is_named_changes() -> None:
    w, err, tables = watch()
    for late in ({2: 0.05}, {2: 0.05}, {2: 0.06}, {1: 0.05}, {}, {}):
        w.decide([part(range(3), late)])
    assert err.getvalue().splitlines() == [
        "paddlike.launch: straggler: rank 2 (node a, workerlog.2) arrived last at 100% of the "
        "last 49 collectives, +50 ms median (a collective every 100 ms)",
        "paddlike.launch: straggler: rank 1 (node a, workerlog.1) arrived last at 100% of the "
        "last 49 collectives, +50 ms median (a collective every 100 ms)",
        "paddlike.launch: stragglers: none now (rank 1 kept up)",
    ]
    assert [(t["check"], t["since"], t["named"] != []) for t in tables] == [
        (1, 1, True), (2, 1, True), (3, 1, True), (4, 4, True), (5, 5, False), (6, 5, False),
    ]  # fmt: skip


def test_a_check_that_sees_fewer_ranks_says_nothing_and_keeps_the_table() -> None:
    w, err, tables = watch()
    w.decide([part(range(4), {3: 0.05})])
    w.decide([part(range(3), {})])  # rank 3 ended: what is left is balanced
    assert err.getvalue().count("straggler") == 1 and len(tables) == 1


def test_other_nodes_parts_and_their_node_are_judged_together() -> None:
    w, err, _ = watch()
    mine = part(range(2), {}, "a")
    theirs = NodeArrivals.from_json(
        json.loads(json.dumps(part(range(2, 4), {2: 0.05, 3: 0.05}, "b").to_json()))
    )
    found = w.decide([mine, theirs])
    assert [s.row.who for s in found.stragglers] == ["node b"]
    assert "straggler: node b (ranks 2–3, all late together)" in err.getvalue()


def test_a_nodes_part_goes_to_node_0_through_the_store_deflated() -> None:
    kv = MemoryKV()
    one = StoreChannel(lambda: kv, round_=3, node_index=1, nnodes=3)
    zero = StoreChannel(lambda: kv, round_=3, node_index=0, nnodes=3)
    assert zero.gather() == []  # no node published yet: nothing to wait for
    data = part(range(2, 4), {2: 0.05}, "b").to_json()
    one.publish(data)
    raw = kv.try_get("stragglers/3/node/1")
    assert raw is not None and json.loads(zlib.decompress(raw)) == data
    assert zero.gather() == [data]


def test_after_the_round_ended_a_late_check_neither_speaks_nor_writes() -> None:
    w, err, tables = watch()
    w.stop()  # the round's end: summary.json's last word is the round's
    w.decide([part(range(3), {2: 0.05})])
    assert err.getvalue() == "" and tables == []
