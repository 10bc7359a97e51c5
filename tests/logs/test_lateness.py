"""Who arrives last at the collectives (paddlike.logs.lateness), as tables of arrivals."""

from __future__ import annotations

import json
import random

import pytest

from paddlike.logs.lateness import (
    HEAT_COLLECTIVES,
    HEAT_RANKS,
    Arrival,
    clock_offsets,
    describe,
    find_stragglers,
    most,
    rows_from_json,
)
from paddlike.logs.lateness_report import table_lines

STEP = 0.1  # seconds between collectives in these jobs


def job(
    ranks: int,
    late: dict[int, float] | None = None,
    n: int = 200,
    jitter: float = 0.0005,
    seed: int = 1,
    group: str = "torch:0",
) -> dict[int, list[Arrival]]:
    """`n` all_reduces every STEP seconds; rank r enters each `late[r]` seconds after the
    first, everyone else within `jitter`."""
    rnd = random.Random(seed)
    late = late or {}
    return {
        r: [
            Arrival(group, s, "all_reduce", s * STEP + late.get(r, 0.0) + rnd.uniform(0, jitter))
            for s in range(1, n + 1)
        ]
        for r in range(ranks)
    }


def two_nodes(ranks_each: int) -> dict[int, str]:
    return {r: "ab"[r // ranks_each] for r in range(2 * ranks_each)}


@pytest.mark.parametrize(
    ("ranks", "late", "named"),
    [
        (2, {}, []),
        (4, {}, []),
        (8, {}, []),
        (4, {2: 0.048}, ["rank 2"]),
        (2, {1: 0.05}, ["rank 1"]),
        # late, but under a tenth of the 100 ms between collectives
        (4, {2: 0.008}, []),
        # late by more than the noise floor and the threshold
        (4, {3: 0.015}, ["rank 3"]),
    ],
)
def test_a_rank_that_enters_most_collectives_late_is_named_and_a_balanced_job_names_nobody(
    ranks: int, late: dict[int, float], named: list[str]
) -> None:
    found = find_stragglers(job(ranks, late))
    assert [s.row.who for s in found.stragglers] == named
    assert found.window == 200


def test_the_line_names_the_rank_its_node_its_log_the_share_and_the_median() -> None:
    found = find_stragglers(
        job(4, {2: 0.048}, jitter=0.0),
        nodes={0: "a", 1: "a", 2: "b", 3: "b"},
        logs={0: "workerlog.0", 1: "workerlog.1", 2: "workerlog.0", 3: "workerlog.1"},
        step_time=0.31,
    )
    assert describe(found) == [
        "straggler: rank 2 (node b, workerlog.0) arrived last at 100% of the last 200 "
        "collectives, +48 ms median (the step takes 310 ms)"
    ]


def test_without_a_step_time_the_reference_is_the_time_between_collectives() -> None:
    found = find_stragglers(job(2, {1: 0.05}, jitter=0.0))
    assert describe(found) == [
        "straggler: rank 1 arrived last at 100% of the last 200 collectives, +50 ms median "
        "(a collective every 100 ms)"
    ]
    assert found.reference == pytest.approx(STEP)


@pytest.mark.parametrize(
    ("threshold", "named"),
    [(0.1, ["rank 0"]), (0.25, ["rank 0"]), (0.35, []), (1.0, [])],
)
def test_the_threshold_is_a_share_of_the_reference_time(threshold: float, named: list[str]) -> None:
    found = find_stragglers(job(3, {0: 0.03}), threshold=threshold)
    assert [s.row.who for s in found.stragglers] == named


def test_a_rank_last_only_some_of_the_time_is_not_named() -> None:
    arrivals = job(4)
    # rank 1 is 50 ms late at every third collective only: last at a third of them
    arrivals[1] = [a._replace(time=a.time + 0.05) if a.seq % 3 == 0 else a for a in arrivals[1]]
    found = find_stragglers(arrivals)
    assert found.stragglers == []
    row = next(r for r in found.rows if r.rank == 1)
    assert row.last_share > 0.3 and row.p90 == pytest.approx(0.05, abs=0.001)


def test_a_node_whose_ranks_are_all_late_together_is_named_instead_of_its_ranks() -> None:
    nodes = {r: "abc"[r // 2] for r in range(6)}
    found = find_stragglers(job(6, {4: 0.05, 5: 0.05}), nodes=nodes)
    assert [s.row.who for s in found.stragglers] == ["node c"]
    assert describe(found)[0].startswith(
        "straggler: node c (ranks 4–5, all late together) arrived last at 100% of the last 200"
    )


def test_one_late_rank_of_a_node_is_the_rank_not_the_node() -> None:
    nodes = {r: "abc"[r // 2] for r in range(6)}
    found = find_stragglers(job(6, {5: 0.05}), nodes=nodes)
    assert [s.row.who for s in found.stragglers] == ["rank 5"]


def test_clock_offsets_are_added_before_arrivals_are_compared() -> None:
    # node b's clock runs 40 ms ahead: its ranks look late until the offset is given
    nodes = two_nodes(2)
    arrivals = job(4, {2: 0.04, 3: 0.04})
    assert [s.row.who for s in find_stragglers(arrivals, nodes).stragglers] == ["node b"]
    fixed = find_stragglers(arrivals, nodes, offsets={2: -0.04, 3: -0.04})
    assert fixed.stragglers == []


def test_the_window_is_the_last_collectives_every_member_entered() -> None:
    arrivals = job(3, n=300)
    # rank 2 was late in the first 250 collectives only; and it has not entered #301 yet
    arrivals[2] = [a._replace(time=a.time + (0.05 if a.seq <= 250 else 0)) for a in arrivals[2]]
    for r in (0, 1):
        arrivals[r].append(Arrival("torch:0", 301, "all_reduce", 30.1))
    assert [s.row.who for s in find_stragglers(arrivals).stragglers] == ["rank 2"]
    assert find_stragglers(arrivals, window=50).stragglers == []
    assert find_stragglers(arrivals, window=50).window == 50


def with_ends(arrivals: dict[int, list[Arrival]], nodes: dict[int, str], clock: dict[str, float]):
    """Each collective ends for every rank 10 ms after its last arrival (true time); each
    node's clock reads `clock[node]` seconds ahead, arrivals and ends alike."""
    last: dict[int, float] = {}
    for entries in arrivals.values():
        for a in entries:
            last[a.seq] = max(last.get(a.seq, a.time), a.time)
    return {
        r: [
            a._replace(time=a.time + clock.get(nodes[r], 0.0),
                       end=last[a.seq] + 0.01 + clock.get(nodes[r], 0.0))
            for a in entries
        ]
        for r, entries in arrivals.items()
    }  # fmt: skip


@pytest.mark.parametrize(
    ("late", "clock", "named"),
    [
        ({}, {"b": 0.04}, []),  # b's clock 40 ms ahead: its ends show it, nobody is late
        ({}, {"b": -0.04}, []),  # ... or behind
        ({2: 0.05, 3: 0.05}, {}, ["node b"]),  # b late, clocks agree
        ({2: 0.05, 3: 0.05}, {"b": 0.03}, ["node b"]),  # b late, and its clock ahead
        ({0: 0.05, 1: 0.05}, {"b": 0.03}, ["node a"]),  # a late, b's clock ahead
    ],
)
def test_recorded_ends_give_each_nodes_clock_offset_and_lateness_stays(
    late: dict[int, float], clock: dict[str, float], named: list[str]
) -> None:
    nodes = two_nodes(2)
    arrivals = with_ends(job(4, late), nodes, clock)
    assert [s.row.who for s in find_stragglers(arrivals, nodes).stragglers] == named


def test_without_ends_the_clocks_are_taken_to_agree() -> None:
    nodes = two_nodes(2)
    arrivals = job(4, {2: 0.04, 3: 0.04})
    assert clock_offsets(arrivals, nodes) == {}
    ends = with_ends(job(4), nodes, {"b": 0.04})
    assert clock_offsets(ends, nodes) == pytest.approx({2: -0.04, 3: -0.04}, abs=0.001)
    assert clock_offsets(ends, {r: "a" for r in range(4)}) == {}  # one node: one clock


@pytest.mark.parametrize(
    "arrivals",
    [
        {},  # no rank recorded anything
        {0: [], 1: []},  # a script that never calls a collective
        {0: job(1)[0]},  # one rank: nobody to compare with
        job(3, {2: 0.05}, n=9),  # too few collectives yet to say anything
    ],
)
def test_no_collective_compared_names_nobody(arrivals: dict[int, list[Arrival]]) -> None:
    found = find_stragglers(arrivals)
    assert found.stragglers == [] and found.rows == [] and found.window == 0
    assert table_lines(found.rows, found.nodes, found.window) == [
        "no collective was compared across ranks (none ran, or one rank only)"
    ]


def test_groups_are_matched_by_their_own_sequence_numbers() -> None:
    # ranks 0-1 share a subgroup besides the default group; rank 1 is late in the subgroup
    arrivals = job(3)
    for r in (0, 1):
        arrivals[r] += [
            Arrival("torch:1", s, "broadcast", s * STEP + 0.05 + (0.03 if r == 1 else 0))
            for s in range(1, 201)
        ]
    found = find_stragglers(arrivals, window=400)
    assert found.window == 400
    row = next(r for r in found.rows if r.rank == 1)
    assert row.last_share >= 0.5 and row.collectives == 400


@pytest.mark.parametrize(("candidates", "share"), [(2, 0.75), (3, 0.5), (1024, 0.5)])
def test_most_is_a_half_and_three_quarters_of_two(candidates: int, share: float) -> None:
    assert most(candidates) == share


def test_the_table_puts_the_straggler_first_and_round_trips_through_json() -> None:
    found = find_stragglers(job(4, {2: 0.048}, jitter=0.0), logs={2: "workerlog.2"})
    ranks, nodes = rows_from_json(found.to_json())
    lines = table_lines(ranks, nodes, found.window)
    assert lines[0] == "lateness at the last 200 collectives (time after the first arrival):"
    assert lines[2].split() == ["*", "rank", "2", "100%", "+48", "ms", "+48", "ms",
                                "workerlog.2"]  # fmt: skip
    assert not any(line.startswith("*") for line in lines[3:])


# The heat map (summary.json's "stragglers"."heat", drawn by the job page)


def heat_rows(found) -> dict[int, dict]:
    return {r["rank"]: r for r in found.heat["ranks"]}


def test_the_heat_map_holds_each_ranks_lateness_at_each_collective_in_rank_order() -> None:
    found = find_stragglers(
        job(4, {2: 0.048}, jitter=0.0), nodes=dict.fromkeys(range(4), "vm"),
        logs={r: f"workerlog.{r}" for r in range(4)},
    )  # fmt: skip
    heat = json.loads(json.dumps(found.to_json(), allow_nan=False))["heat"]
    assert [r["rank"] for r in heat["ranks"]] == [0, 1, 2, 3] and heat["ranks_total"] == 4
    assert len(heat["collectives"]) == 200
    assert heat["collectives"][0][:3] == ["all_reduce", 1, "torch:0"]
    assert heat["collectives"][-1][:3] == ["all_reduce", 200, "torch:0"]
    late = heat["ranks"][2]
    assert (late["node"], late["log"], late["straggler"]) == ("vm", "workerlog.2", True)
    assert late["lateness_ms"] == [48.0] * 200
    assert heat["ranks"][0]["lateness_ms"] == [0.0] * 200 and not heat["ranks"][0]["straggler"]
    assert found.to_json()["bar"] == pytest.approx(0.01)  # a tenth of the 100 ms


def test_the_heat_map_is_bounded_and_keeps_the_latest_ranks_of_a_large_job() -> None:
    found = find_stragglers(job(200, {7: 0.05, 150: 0.02}, n=300))
    heat = found.heat
    assert len(heat["ranks"]) == HEAT_RANKS and heat["ranks_total"] == 200
    assert len(heat["collectives"]) == HEAT_COLLECTIVES
    ranks = [r["rank"] for r in heat["ranks"]]
    assert ranks == sorted(ranks) and {7, 150} <= set(ranks)  # the latest are kept
    assert heat["collectives"][-1][1] == 300  # the newest collectives
    assert len(json.dumps(found.to_json()["heat"])) < 100_000


def test_a_named_nodes_ranks_are_marked_in_the_heat_map() -> None:
    nodes = {r: "abc"[r // 2] for r in range(6)}
    found = find_stragglers(job(6, {4: 0.05, 5: 0.05}), nodes=nodes)
    assert [s.row.who for s in found.stragglers] == ["node c"]
    marked = {rank for rank, r in heat_rows(found).items() if r["straggler"]}
    assert marked == {4, 5}


def test_a_rank_outside_a_collectives_group_has_no_cell_there() -> None:
    arrivals = job(3, n=20)
    for r in (0, 1):
        arrivals[r] += [Arrival("torch:1", s, "broadcast", s * STEP + 0.05) for s in range(1, 21)]
    cells = heat_rows(find_stragglers(arrivals))[2]["lateness_ms"]
    assert cells.count(None) == 20 and len(cells) == 40


def test_too_few_collectives_keep_no_heat_map() -> None:
    found = find_stragglers(job(3, n=5))
    assert found.heat is None and found.to_json()["heat"] is None


def test_on_many_nodes_the_straggler_comes_first_and_long_names_keep_their_columns() -> None:
    # the trial: "node 198.18.0.2198.18.0.2", a long hostname pushing the columns, and
    # the nodes' rows before the one straggling rank
    long = "worker-17.training-cluster.example.internal"
    nodes = {0: "198.18.0.1", 1: "198.18.0.1", 2: "198.18.0.2", 3: long}
    found = find_stragglers(job(4, {1: 0.05}, jitter=0.0), nodes=nodes,
                            logs={r: f"workerlog.{r}" for r in range(4)})  # fmt: skip
    ranks, node_rows = rows_from_json(found.to_json())
    lines = table_lines(ranks, node_rows, found.window)
    assert lines[2].startswith("* rank 1 ")
    assert not any(line.startswith("*") for line in lines[3:])
    assert not any("198.18.0.2198.18.0.2" in line or long + long in line for line in lines)
    log_column = {line.index("workerlog") for line in lines if "workerlog" in line}
    assert len(log_column) == 1  # every rank's log starts in the same column
    header = lines[1]
    for line in lines[2:]:  # each row's share sits under the header's "last"
        assert line[header.index("last") - 2 : header.index("last") + 4].strip().endswith("%")
