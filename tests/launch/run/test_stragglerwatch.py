"""--straggler_check's console and summary (run.stragglerwatch): each check's finding is
said once, again only when who is named changes; a check that sees fewer ranks than an
earlier one says nothing; other nodes' parts travel as JSON (peers.stragglers)."""

from __future__ import annotations

import io
import json
import zlib

import pytest

from paddlike.launch.console.output import Console
from paddlike.launch.context.options import UsageError, parse_options
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


def test_on_straggler_exclude_tells_the_straggling_node_to_leave_never_node_0() -> None:
    kv, left = MemoryKV(), []
    channels = [StoreChannel(lambda: kv, round_=1, node_index=i, nnodes=3) for i in range(3)]
    err = io.StringIO()
    zero = StragglerWatch(
        "/nowhere", Console(err), period=1.0, threshold=0.1, node_index=0, node="a",
        channel=channels[0], on_straggler="exclude",
    )  # fmt: skip
    parts = [part(range(0, 2), {}, "a"), part(range(2, 4), {}, "b"), part(range(4, 6), {}, "c")]
    for i, p in enumerate(parts):
        p.index = i
    parts[2] = part(range(4, 6), {4: 0.05, 5: 0.05}, "c")
    parts[2].index = 2
    zero.decide(parts)
    assert "--on_straggler exclude: node c leaves the job" in err.getvalue()
    assert channels[1].excluded() is None and channels[2].excluded() == 2
    two = StragglerWatch(
        "/nowhere", Console(io.StringIO()), period=1.0, threshold=0.1, node_index=2,
        node="c", channel=channels[2], on_straggler="exclude", leave=lambda: left.append(2),
    )  # fmt: skip
    two._told_to_leave()
    assert left == [2]
    # a straggler on node 0 itself: node 0 holds the store, it stays
    zero = StragglerWatch(
        "/nowhere", Console(err), period=1.0, threshold=0.1, node_index=0, node="a",
        channel=channels[0], on_straggler="exclude",
    )  # fmt: skip
    late_zero = part(range(0, 2), {0: 0.05, 1: 0.05}, "a")
    zero.decide([late_zero, parts[1]])
    assert "the straggler is on node 0, which holds the launchers' store: it stays" in (
        err.getvalue()
    )
    assert channels[0].excluded() is None


def test_on_straggler_exclude_at_the_minimum_node_count_warns_once_and_keeps_the_node() -> None:
    # the trial: --nnodes 2:3 running on 2 nodes; excluding one ended the whole job
    kv = MemoryKV()
    channels = [StoreChannel(lambda: kv, round_=1, node_index=i, nnodes=2) for i in range(2)]
    err = io.StringIO()
    zero = StragglerWatch(
        "/nowhere", Console(err), period=1.0, threshold=0.1, node_index=0, node="a",
        channel=channels[0], on_straggler="exclude", nnodes=2, min_nodes=2, nnodes_text="2:3",
    )  # fmt: skip
    mine, late = part(range(0, 2), {}, "a"), part(range(2, 4), {2: 0.05, 3: 0.05}, "b")
    late.index = 1
    balanced = part(range(2, 4), {}, "b")
    balanced.index = 1
    for theirs in (late, balanced, late):  # named, kept up, named again: one warning
        zero.decide([mine, theirs])
    assert channels[1].excluded() is None
    said = err.getvalue()
    assert "leaves the job" not in said
    warning = (
        "paddlike.launch: warning: --on_straggler exclude: node 1 (b) is a straggler, but it "
        "stays: the job has 2 nodes, --nnodes 2:3 needs 2"
    )
    assert [line for line in said.splitlines() if "--on_straggler" in line] == [warning]
    # with a node to spare, the straggler leaves
    three = StragglerWatch(
        "/nowhere", Console(io.StringIO()), period=1.0, threshold=0.1, node_index=0,
        node="a", channel=channels[0], on_straggler="exclude", nnodes=3, min_nodes=2,
        nnodes_text="2:3",
    )  # fmt: skip
    three.decide([mine, late])
    assert channels[1].excluded() == 1


def test_on_straggler_exclude_needs_an_elastic_job() -> None:
    refused = (
        r"^--on_straggler: exclude makes a straggling node leave the job, which only an "
        r"elastic job survives: give --nnodes MIN:MAX"
    )
    with pytest.raises(UsageError, match=refused):
        parse_options(["--on_straggler", "exclude", "train.py"], {})
    with pytest.raises(UsageError, match="--on_straggler: expected warn or exclude, got 'drop'"):
        parse_options(["--on_straggler", "drop", "train.py"], {})
    # N:N is a fixed job: the message says MIN must be below MAX, not to give what was given
    fixed = ["--nnodes", "2:2", "--master", "127.0.0.1:6170", "--on_straggler", "exclude"]
    with pytest.raises(UsageError, match=r"MIN:MAX with MIN below MAX \(N:N, like N, is a fixed"):
        parse_options([*fixed, "train.py"], {})
    elastic = ["--nnodes", "2:3", "--master", "127.0.0.1:6170", "--on_straggler", "exclude"]
    assert parse_options([*elastic, "train.py"], {}).on_straggler == "exclude"
    assert parse_options(["train.py"], {}).on_straggler == "warn"


def test_every_check_rewrites_the_running_jobs_summary_with_its_heat_map(tmp_path) -> None:
    # --html --follow redraws the heat map from summary.json: each check must land there,
    # also when who is named did not change
    from paddlike.launch.run.record import RunRecord
    from paddlike.summary import read_summary
    from tests.launch.run.test_supervisor import make_plan

    record = RunRecord(tmp_path, warn=lambda _: None)
    plan = make_plan([], 3)
    record.running(plan, [], 0)
    w = StragglerWatch("/nowhere", Console(io.StringIO()), period=1.0, threshold=0.1,
                       node_index=0, node="a", on_table=record.stragglers_found)  # fmt: skip
    for check in (1, 2, 3):  # the same finding each time: the console says it once
        w.decide([part(range(3), {2: 0.05})])
        table = read_summary(tmp_path).stragglers
        assert table["check"] == check and table["window"] == 49
        heat = table["heat"]
        assert [r["rank"] for r in heat["ranks"] if r["straggler"]] == [2]
        assert heat["ranks"][2]["lateness_ms"][-1] == pytest.approx(50.0, abs=0.1)
        assert len(heat["collectives"]) == 49


def test_torch_flight_recorder_turned_off_by_the_user_is_said_once_at_the_start(tmp_path) -> None:
    # the trial: TORCH_FR_BUFFER_SIZE=0 made the check silently see nothing of torch jobs
    from paddlike.launch.run.record import RunRecord
    from paddlike.launch.run.runspec import RunSpec
    from paddlike.launch.run.stragglerwatch import straggler_watch
    from paddlike.logs.lateness_report import summary_lines
    from tests.launch.run.test_supervisor import make_plan

    spec = RunSpec(log_dir=str(tmp_path), ports=None, straggler_check=10.0)  # type: ignore[arg-type]
    record, plan = RunRecord(tmp_path, warn=lambda _: None), make_plan([], 2)
    said = []
    for environ in ({"TORCH_FR_BUFFER_SIZE": "0"}, {"TORCH_FR_BUFFER_SIZE": "2000"}, {}):
        err = io.StringIO()
        straggler_watch(spec, plan, tmp_path, Console(err), record, environ=environ)
        said.append(err.getvalue().splitlines())
    assert said == [[
        "paddlike.launch: warning: --straggler_check: TORCH_FR_BUFFER_SIZE=0 in the "
        "environment turns torch's flight recorder off: the check sees no torch collective "
        "(unset it, or give it a size, to compare them)"
    ], [], []]  # fmt: skip
    record.running(plan, [], 0)  # a later round: said once, at the start
    err = io.StringIO()
    straggler_watch(spec, plan, tmp_path, Console(err), record,
                    environ={"TORCH_FR_BUFFER_SIZE": "0"})  # fmt: skip
    assert err.getvalue() == ""
    assert "TORCH_FR_BUFFER_SIZE=0" in summary_lines(None)[0]


def test_an_excluded_node_stays_named_in_the_summary_after_the_next_rounds_checks(tmp_path) -> None:
    # the trial: the round after the exclusion rewrote the table balanced, and nothing in
    # summary.json said "straggler"
    from paddlike.launch.run.record import RunRecord
    from paddlike.launch.run.runspec import RunSpec
    from paddlike.launch.run.stragglerwatch import straggler_watch
    from paddlike.logs.lateness_report import summary_lines
    from paddlike.summary import read_summary
    from tests.launch.run.test_supervisor import make_plan

    kv = MemoryKV()
    record, plan = RunRecord(tmp_path, warn=lambda _: None), make_plan([], 3)
    record.running(plan, [], 0)
    zero = StragglerWatch(
        "/nowhere", Console(io.StringIO()), period=1.0, threshold=0.1, node_index=0, node="a",
        channel=StoreChannel(lambda: kv, round_=1, node_index=0, nnodes=3),
        on_straggler="exclude", nnodes=3, min_nodes=2, nnodes_text="2:3",
        on_table=record.stragglers_found,
    )  # fmt: skip
    mine, late = part(range(0, 2), {}, "a"), part(range(2, 4), {2: 0.05, 3: 0.05}, "b")
    late.index = 1
    zero.decide([mine, late])
    spec = RunSpec(log_dir=str(tmp_path), ports=None, straggler_check=10.0)  # type: ignore[arg-type]
    after = straggler_watch(spec, plan, tmp_path, Console(io.StringIO()), record, environ={})
    after.decide([part(range(0, 2), {}, "a")])  # the next round: node b gone, balanced
    table = read_summary(tmp_path).stragglers
    assert table["named"] == [] and [e["node"] for e in table["excluded"]] == ["b"]
    lines = summary_lines(table)
    assert lines[:2] == ["no straggler", (
        "excluded: node 1 (b) left the job (--on_straggler exclude): straggler: node 1 (b; "
        "ranks 2–3, all late together) arrived last at 100% of the last 49 collectives, "
        "+50 ms median (a collective every 100 ms)"
    )]  # fmt: skip


def test_on_many_nodes_a_straggler_line_names_the_node_as_every_other_line_does() -> None:
    # the trial: "node 198.18.0.12" where every other line says "node 1 (198.18.0.12)"
    err = io.StringIO()
    w = StragglerWatch("/nowhere", Console(err), period=1.0, threshold=0.1, node_index=0,
                       node="10.0.0.1", nnodes=2)  # fmt: skip
    mine, theirs = part(range(2), {}, "10.0.0.1"), part(range(2, 4), {}, "10.0.0.2")
    theirs.index = 1
    late = part(range(2, 4), {2: 0.05, 3: 0.05}, "10.0.0.2")
    late.index = 1
    w.decide([mine, late])
    assert "straggler: node 1 (10.0.0.2; ranks 2–3, all late together) arrived last" in (
        err.getvalue()
    )
    one = part(range(2, 4), {3: 0.05}, "10.0.0.2")
    one.index = 1
    w.decide([mine, one])
    assert "straggler: rank 3 (node 1, 10.0.0.2, workerlog.3) arrived last at" in err.getvalue()


def test_another_nodes_summary_says_where_the_check_runs_and_what_node_0_found(tmp_path):
    # the trial: `python -m paddlike.logs log1 --stragglers` said "no straggler check
    # compared collectives in this job" while node 0's check named rank 3 of node 1
    from paddlike.launch.run.record import RunRecord
    from paddlike.logs.lateness_report import summary_lines
    from paddlike.summary import read_summary
    from tests.launch.run.test_supervisor import make_plan

    kv, plan = MemoryKV(), make_plan([], 2)
    for name in ("log0", "log1"):
        (tmp_path / name).mkdir()
    record0, record1 = (
        RunRecord(tmp_path / "log0", warn=print),
        RunRecord(tmp_path / "log1", warn=print),
    )
    for record in (record0, record1):
        record.running(plan, [], 0)
    channels = [StoreChannel(lambda: kv, round_=0, node_index=i, nnodes=2) for i in range(2)]
    zero = StragglerWatch("/nowhere", Console(io.StringIO()), period=1.0, threshold=0.1,
                          node_index=0, node="10.0.0.1", channel=channels[0], nnodes=2,
                          on_table=record0.stragglers_found)  # fmt: skip
    one = StragglerWatch("/nowhere", Console(io.StringIO()), period=1.0, threshold=0.1,
                         node_index=1, node="10.0.0.2", channel=channels[1], nnodes=2,
                         on_table=record1.stragglers_found, decider="10.0.0.1")  # fmt: skip
    one._relay(None)  # its round started: no finding yet
    lines = summary_lines(read_summary(tmp_path / "log1").stragglers)
    assert lines[0].startswith("the straggler check runs on node 0 (10.0.0.1): ")
    assert "no finding of node 0's reached this node" in lines[1]
    assert lines[-1].startswith("the table (every rank's lateness) is in node 0 (10.0.0.1)'s")
    mine, late = part(range(2), {}, "10.0.0.1"), part(range(2, 4), {3: 0.05}, "10.0.0.2")
    late.index = 1
    found = zero.decide([mine, late])
    one._relay(channels[1].heard())  # its next check
    lines = summary_lines(read_summary(tmp_path / "log1").stragglers)
    assert lines[0].startswith("the straggler check runs on node 0 (10.0.0.1): ")
    assert lines[1].startswith("its check 1 at ") and found.stragglers[0].line in lines
    assert found.stragglers[0].line.startswith("straggler: rank 3 (node 1, 10.0.0.2, ")
    # every node's directories: node 0's table, not what node 1 heard of it
    assert summary_lines(read_summary(tmp_path / "log0").stragglers)[0] == found.stragglers[0].line


def test_the_reader_over_every_nodes_directory_prints_node_0s_table(tmp_path) -> None:
    # node 1's directory first on the command line: still node 0's table, not the relay
    from paddlike.launch.run.record import RunRecord
    from paddlike.logs.__main__ import main
    from tests.launch.run.test_supervisor import make_plan

    kv, plan = MemoryKV(), make_plan([], 2)
    records = []
    for name in ("log0", "log1"):
        (tmp_path / name).mkdir()
        records.append(RunRecord(tmp_path / name, warn=print))
        records[-1].running(plan, [], 0)
    channels = [StoreChannel(lambda: kv, round_=0, node_index=i, nnodes=2) for i in range(2)]
    zero = StragglerWatch("/nowhere", Console(io.StringIO()), period=1.0, threshold=0.1,
                          node_index=0, node="10.0.0.1", channel=channels[0], nnodes=2,
                          on_table=records[0].stragglers_found)  # fmt: skip
    one = StragglerWatch("/nowhere", Console(io.StringIO()), period=1.0, threshold=0.1,
                         node_index=1, node="10.0.0.2", channel=channels[1], nnodes=2,
                         on_table=records[1].stragglers_found, decider="10.0.0.1")  # fmt: skip
    mine, late = part(range(2), {}, "10.0.0.1"), part(range(2, 4), {3: 0.05}, "10.0.0.2")
    late.index = 1
    found = zero.decide([mine, late])
    one._relay(channels[1].heard())
    out = io.StringIO()
    main([str(tmp_path / "log1"), str(tmp_path / "log0"), "--stragglers"], out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == found.stragglers[0].line, out.getvalue()
    assert lines[1].startswith("lateness at the last 49 collectives"), out.getvalue()
