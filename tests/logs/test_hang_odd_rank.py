"""Which rank holds the others up (`hang.name_odd_ranks`), as a table: ranks waiting in a
collective, ranks outside any, stopped processes, unknown stacks, flight records; and
the report's first line (`hang.summarize`), which a hang abort makes the root cause."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from paddlike.logs.hang import (
    Frame,
    Location,
    RankStack,
    ThreadStack,
    flight_findings,
    name_odd_ranks,
    summarize,
)

IN_ALL_REDUCE = Location("train.py:88", "main", "all_reduce", waiting=True)
IN_BARRIER = Location("train.py:90", "main", "barrier", waiting=True)
IN_INIT = Location("train.py:10", "main", "init_process_group", waiting=True)
IN_LOAD_BATCH = Location("data.py:41", "load_batch")
IN_SAVE = Location("ckpt.py:7", "save")
UNKNOWN = Location("", "", unknown="py-spy did not answer before the deadline")
NO_PY_SPY = Location("", "", unknown="py-spy not found (pip install py-spy)")
STOPPED = Location("", "", unknown="stopped", stopped=True)


@dataclass(frozen=True)
class Op:
    group_seq: int
    op: str = "all_reduce"
    nbytes: int = 16
    dtype: str = "float32"
    peer: int = -1
    state: str = "done"
    group_id: int = 0


def record(*ops: Op) -> list[Op]:
    return list(ops)


DONE_3 = [Op(1), Op(2), Op(3)]
# rank 1 skipped the 4th all_reduce and went on to barrier (issue 21's job)
SKIPPED = {
    0: record(*DONE_3, Op(4, state="running")),
    1: record(*DONE_3, Op(4, "barrier", nbytes=0, dtype="", state="running")),
    2: record(*DONE_3, Op(4, state="running")),
}
TWO_RANK_MISMATCH = {r: SKIPPED[r] for r in (0, 1)}
# rank 1 never entered the 4th: it is elsewhere (load_batch, stopped, not started)
BEHIND = {0: record(*DONE_3, Op(4, state="running")), 1: record(*DONE_3)}


@pytest.mark.parametrize(
    ("locations", "flights", "odd", "rule"),
    [
        # two ranks: told apart by what they do, never by which is lower
        ({0: IN_ALL_REDUCE, 1: IN_LOAD_BATCH}, {}, (1,), "elsewhere"),
        ({0: IN_LOAD_BATCH, 1: IN_ALL_REDUCE}, {}, (0,), "elsewhere"),
        ({0: IN_INIT, 1: IN_LOAD_BATCH}, {}, (1,), "elsewhere"),  # stuck before init
        ({0: IN_ALL_REDUCE, 1: STOPPED}, {}, (1,), "stopped"),
        ({0: IN_ALL_REDUCE, 1: UNKNOWN}, {}, (1,), "unknown"),
        ({0: NO_PY_SPY, 1: NO_PY_SPY}, BEHIND, (1,), "behind"),  # without py-spy
        ({0: IN_ALL_REDUCE, 1: IN_ALL_REDUCE}, BEHIND, (1,), "behind"),
        ({0: NO_PY_SPY, 1: NO_PY_SPY}, {}, (), ""),
        ({0: IN_ALL_REDUCE, 1: IN_BARRIER}, TWO_RANK_MISMATCH, (), ""),
        ({0: IN_ALL_REDUCE, 1: IN_ALL_REDUCE}, {}, (), ""),
        ({0: IN_LOAD_BATCH, 1: IN_SAVE}, {}, (), ""),
        ({0: STOPPED, 1: STOPPED}, {}, (), ""),
        # three and four ranks
        ({0: IN_ALL_REDUCE, 1: IN_BARRIER, 2: IN_ALL_REDUCE}, SKIPPED, (1,), "mismatch"),
        ({0: IN_ALL_REDUCE, 1: IN_BARRIER, 2: IN_ALL_REDUCE}, {}, (1,), "fewest"),
        ({r: IN_ALL_REDUCE for r in (0, 1, 3)} | {2: STOPPED}, {}, (2,), "stopped"),
        ({r: IN_ALL_REDUCE for r in (0, 1, 3)} | {2: UNKNOWN}, {}, (2,), "unknown"),
        ({0: IN_ALL_REDUCE, 1: IN_LOAD_BATCH, 2: STOPPED}, {}, (2,), "stopped"),
        ({0: IN_ALL_REDUCE, 1: IN_LOAD_BATCH, 2: IN_SAVE}, {}, (1, 2), "elsewhere"),
        ({0: IN_LOAD_BATCH, 1: IN_LOAD_BATCH, 2: IN_SAVE}, {}, (2,), "fewest"),
        ({0: IN_LOAD_BATCH, 1: IN_SAVE, 2: UNKNOWN}, {}, (), ""),
        ({r: IN_ALL_REDUCE for r in range(4)}, {}, (), ""),
        ({0: IN_ALL_REDUCE}, {}, (), ""),  # one rank: nobody to compare with
    ],
)
def test_the_odd_rank_is_named_by_the_first_rule_that_applies(locations, flights, odd, rule):
    verdict = name_odd_ranks(locations, flight_findings(flights))
    assert (verdict.odd, verdict.rule) == (odd, rule)


@pytest.mark.parametrize(
    ("locations", "flights", "why"),
    [
        (
            {0: IN_ALL_REDUCE, 1: IN_BARRIER},
            TWO_RANK_MISMATCH,
            "rank 0 and rank 1 entered different collectives as #4, as many on each side: "
            "either went astray",
        ),
        (
            {0: NO_PY_SPY, 1: NO_PY_SPY},
            {},
            "no rank's stack could be read, and no flight record shows where they part",
        ),
        (
            {r: IN_ALL_REDUCE for r in range(4)},
            {},
            "every rank waits at the same place (a network or backend problem?)",
        ),
        (
            {0: IN_LOAD_BATCH, 1: IN_LOAD_BATCH},
            {},
            "every rank is at the same place, outside any collective",
        ),
        (
            {0: IN_LOAD_BATCH, 1: IN_SAVE},
            {},
            "the ranks are at different places, as many at each, and none waits for the others",
        ),
    ],
)
def test_where_it_cannot_be_told_the_verdict_says_why_instead_of_naming_one(
    locations, flights, why
):
    verdict = name_odd_ranks(locations, flight_findings(flights))
    assert (verdict.odd, verdict.why) == ((), why)


# --- the report's first line -------------------------------------------------------------

SITE = "/venv/lib/python3.11/site-packages"
TORCH_ALL_REDUCE = (
    ("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 3252),
    ("_exception_logger.<locals>.wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 83),
    ("main", "/home/u/train.py", 88),
)
TORCH_BARRIER = (
    ("barrier", f"{SITE}/torch/distributed/distributed_c10d.py", 4800),
    ("main", "/home/u/train.py", 90),
)
LOAD_BATCH = (("load_batch", "/home/u/data.py", 41), ("main", "/home/u/train.py", 80))


def stack(rank: int, frames=(), **kw) -> RankStack:
    fs = tuple(Frame(name, path, line) for name, path, line in frames)
    threads = (ThreadStack("MainThread", fs),) if fs else ()
    return RankStack(rank, host="vm", log_file=f"workerlog.{rank}", threads=threads, **kw)


def test_a_two_rank_job_names_the_rank_in_load_batch_not_the_lower_one_that_waits():
    lines = summarize({0: stack(0, TORCH_ALL_REDUCE), 1: stack(1, LOAD_BATCH)})
    assert lines == [
        "rank 1 (vm, workerlog.1) is in `load_batch` at data.py:41",
        "rank 0 (vm, workerlog.0) waits in `all_reduce` called from train.py:88 (main)",
    ]


def test_a_stopped_rank_comes_first_though_the_others_are_fewer_than_it_is_alone():
    stacks = {r: stack(r, TORCH_ALL_REDUCE) for r in (0, 1, 3)}
    stacks[2] = stack(2, error="py-spy cannot read a stopped process", stopped=True)
    flights = {r: record(*DONE_3, Op(4, state="running")) for r in (0, 1, 3)}
    flights[2] = record(*DONE_3)
    lines = summarize(stacks, flights)
    assert (
        lines[0] == "rank 2 (vm, workerlog.2) is stopped (SIGSTOP, or held by a debugger): no stack"
    )
    assert lines[1:] == [
        "ranks 0–1, 3 (3 of 4) wait in `all_reduce` called from train.py:88 (main)",
        "rank 2 never entered collective #4 (all_reduce, which ranks 0–1, 3 are waiting in); "
        "rank 2's last was #3 (all_reduce, done)",
    ]


def test_without_stacks_the_flight_record_names_the_rank_and_comes_first():
    stacks = {r: stack(r, error="py-spy not found (pip install py-spy)") for r in (0, 1)}
    lines = summarize(stacks, BEHIND)
    assert lines[0] == (
        "rank 1 (vm, workerlog.1) never entered collective #4 (all_reduce, which rank 0 is "
        "waiting in); rank 1's last was #3 (all_reduce, done)"
    )
    assert len(lines) == 2  # and the (shared) unknown-stack line, once


def test_a_minority_in_another_collective_is_named_with_where_the_records_part():
    stacks = {
        0: stack(0, TORCH_ALL_REDUCE),
        1: stack(1, TORCH_BARRIER),
        2: stack(2, TORCH_ALL_REDUCE),
    }
    assert summarize(stacks, SKIPPED) == [
        "rank 1 (vm, workerlog.1) entered barrier as #4 (default group); ranks 0, 2 are in "
        "all_reduce #4",
        "rank 1 (vm, workerlog.1) waits in `barrier` called from train.py:90 (main)",
        "ranks 0, 2 (2 of 3) wait in `all_reduce` called from train.py:88 (main)",
    ]


def test_two_ranks_in_different_collectives_are_both_shown_and_neither_is_blamed():
    stacks = {0: stack(0, TORCH_ALL_REDUCE), 1: stack(1, TORCH_BARRIER)}
    lines = summarize(stacks, TWO_RANK_MISMATCH)
    assert lines[0].startswith("no single rank stands out: rank 0 and rank 1 entered different")
    assert lines[1:] == [
        "rank 0 (vm, workerlog.0) waits in `all_reduce` called from train.py:88 (main)",
        "rank 1 (vm, workerlog.1) waits in `barrier` called from train.py:90 (main)",
        "rank 0 entered all_reduce as #4 (default group); rank 1 is in barrier #4",
    ]


def test_a_rank_with_no_stack_while_the_others_wait_is_named_in_its_own_words():
    stacks = {r: stack(r, TORCH_ALL_REDUCE) for r in (0, 1, 3)}
    stacks[2] = stack(2, error="py-spy did not answer before the deadline")
    lines = summarize(stacks)
    assert lines[0] == "rank 2 (vm, workerlog.2) gave no stack while the others wait"
    assert lines[1:] == [
        "rank 2 (vm, workerlog.2) — stack unknown: py-spy did not answer before the deadline",
        "ranks 0–1, 3 (3 of 4) wait in `all_reduce` called from train.py:88 (main)",
    ]
