"""Which rank stopped, as tables: locating ranks in their stacks, grouping them, comparing
flight records, stragglers from step counters, and hang detection with an injected clock."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from paddlike.logs.hang import (
    Activity,
    Frame,
    Location,
    RankStack,
    ThreadStack,
    compare_flights,
    describe_groups,
    detect_hang,
    find_stragglers,
    is_library,
    locate,
    ordinal,
    rank_ranges,
    rebase,
    summarize,
)

STDLIB = "/usr/lib/python3.11"
SITE = "/venv/lib/python3.11/site-packages"


def stack(rank: int, *frames: tuple[str, str, int], **kw) -> RankStack:
    """A main thread with `frames` innermost first, as py-spy lists them."""
    fs = tuple(Frame(name, path, line, native=path.endswith(".so")) for name, path, line in frames)
    return RankStack(rank, threads=(ThreadStack("MainThread", fs),), **kw)


TORCH_ALL_REDUCE = (
    ("pthread_cond_wait", "/lib/libc.so", 0),
    ("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 3252),
    ("_exception_logger.<locals>.wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 83),
    ("main", "/home/u/train.py", 88),
    ("<module>", "/home/u/train.py", 95),
)
LOAD_BATCH = (
    ("clock_nanosleep", "/lib/libc.so", 0),
    ("load_batch", "/home/u/data.py", 41),
    ("main", "/home/u/train.py", 80),
    ("<module>", "/home/u/train.py", 95),
)


@pytest.mark.parametrize(
    ("filename", "library"),
    [
        ("/usr/lib/python3.11/threading.py", True),
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/selectors.py", True),
        (f"{SITE}/torch/distributed/distributed_c10d.py", True),
        ("/usr/lib/python3/dist-packages/numpy/core/numeric.py", True),
        ("<frozen runpy>", True),
        ("/home/u/train.py", False),
        ("/home/u/lib/mymodel.py", False),
    ],
)
def test_library_files_are_the_interpreters_installed_packages_and_paddlike(filename, library):
    assert is_library(filename) is library


def test_paddlike_itself_counts_as_library_code():
    import paddlike.distributed.collective.ops as ops

    assert is_library(ops.__file__)


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        # waiting in torch: the user frame, and torch's call name past its logging wrapper
        (TORCH_ALL_REDUCE, Location("train.py:88", "main", "all_reduce", waiting=True)),
        # user code innermost (time.sleep is a C call: native frames never count)
        (LOAD_BATCH, Location("data.py:41", "load_batch", "")),
        # paddlike's own collective: the function the user called, not its internals
        (
            (
                ("Mesh.recv", "/src/paddlike/distributed/collective/tcp.py", 200),
                ("_run", "/src/paddlike/distributed/collective/ops.py", 87),
                ("all_reduce", "/src/paddlike/distributed/collective/ops.py", 110),
                ("step", "/home/u/train.py", 12),
            ),
            Location("train.py:12", "step", "all_reduce", waiting=True),
        ),
        # only library frames (a thread pool's idle worker): the innermost one's name
        (
            (("Condition.wait", f"{STDLIB}/threading.py", 320),),
            Location("", "wait", ""),
        ),
    ],
)
def test_a_rank_is_located_at_its_innermost_user_frame_and_the_library_call_it_is_in(
    frames, expected, monkeypatch
):
    roots = ("/src/paddlike/",)
    assert locate(stack(0, *frames), roots) == expected


def test_a_rank_without_a_stack_is_located_by_the_reason_and_the_kernels_view():
    s = RankStack(5, error="py-spy: Permission denied", kernel="kernel: main thread sleeping")
    loc = locate(s)
    assert loc.unknown == "py-spy: Permission denied; kernel: main thread sleeping"


def test_the_main_thread_is_located_not_a_helper_thread():
    helper = ThreadStack("Thread-1", (Frame("loop", "/home/u/helper.py", 5),))
    main = ThreadStack("MainThread", (Frame("load_batch", "/home/u/data.py", 41),))
    assert locate(RankStack(0, threads=(helper, main))).function == "load_batch"


@pytest.mark.parametrize(
    ("ranks", "text"),
    [
        ([3], "3"),
        ([0, 1, 2, 4, 5, 6, 7], "0–2, 4–7"),
        ([7, 0, 2], "0, 2, 7"),
        ([0, 1], "0–1"),
    ],
)
def test_rank_lists_read_as_ranges(ranks, text):
    assert rank_ranges(ranks) == text


def test_the_odd_rank_out_comes_first_with_its_node_and_log():
    stacks = {r: stack(r, *TORCH_ALL_REDUCE) for r in range(8) if r != 3}
    stacks[3] = stack(3, *LOAD_BATCH, host="nodeb", log_file="workerlog.1")
    assert summarize(stacks) == [
        "rank 3 (nodeb, workerlog.1) is in `load_batch` at data.py:41",
        "ranks 0–2, 4–7 (7 of 8) wait in `all_reduce` called from train.py:88 (main)",
    ]


def test_ranks_with_unknown_stacks_come_after_the_located_ones():
    locations = {
        0: Location("train.py:88", "main", "all_reduce"),
        1: Location("train.py:88", "main", "all_reduce"),
        2: Location("", "", "", unknown="process 42 is not running"),
    }
    assert describe_groups(locations) == [
        "ranks 0–1 (2 of 3) wait in `all_reduce` called from train.py:88 (main)",
        "rank 2 — stack unknown: process 42 is not running",
    ]


@pytest.mark.parametrize(
    ("n", "text"),
    [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"), (13, "13th"),
     (21, "21st"), (112, "112th"), (1204, "1,204th")],
)  # fmt: skip
def test_ordinals(n, text):
    assert ordinal(n) == text


@dataclass(frozen=True)
class Op:
    group_seq: int
    op: str = "all_reduce"
    nbytes: int = 4096
    dtype: str = "float32"
    peer: int = -1
    state: str = "done"
    group_id: int = 0


def ops(*items: Op) -> list[Op]:
    return list(items)


def test_flight_records_name_the_rank_whose_collective_differs():
    agreed = [Op(s) for s in range(1200, 1204)]
    flights = {r: [*agreed, Op(1204, state="running")] for r in (0, 1, 3)}
    flights[2] = [*agreed, Op(1204, "broadcast", peer=0, state="running")]
    assert compare_flights(flights) == [
        "rank 2 entered broadcast from rank 0 as #1204 (default group); ranks 0–1, 3 are in "
        "all_reduce #1204"
    ]


def test_flight_records_name_a_size_mismatch_with_the_sizes():
    flights = {0: [Op(7)], 1: [Op(7)], 2: [Op(7, nbytes=8192)]}
    assert compare_flights(flights) == [
        "rank 2 entered all_reduce of 8,192 B float32 as #7 (default group); ranks 0–1 "
        "entered all_reduce of 4,096 B float32 as #7"
    ]


def test_flight_records_name_the_rank_that_never_entered_the_collective_the_others_wait_in():
    flights = {r: [Op(4), Op(5, state="running")] for r in (0, 2, 3)}
    flights[1] = [Op(3), Op(4)]
    assert compare_flights(flights) == [
        "rank 1 never entered collective #5 (all_reduce, which ranks 0, 2–3 are waiting in); "
        "rank 1's last was #4 (all_reduce, done)"
    ]


def test_a_rank_one_collective_ahead_of_a_running_job_is_no_finding():
    flights = {0: [Op(4), Op(5)], 1: [Op(4)]}  # rank 0 finished #5 as rank 1 records it
    assert compare_flights(flights) == []


def test_flight_records_that_agree_say_nothing_and_groups_are_compared_apart():
    flights = {
        0: [Op(1), Op(1, group_id=1)],
        1: [Op(1), Op(1, group_id=1)],
        2: [Op(1)],  # not a member of group 1
    }
    assert compare_flights(flights) == []


def test_a_subgroups_mismatch_names_the_group():
    flights = {0: [Op(3, group_id=2)], 1: [Op(3, "barrier", nbytes=0, dtype="", group_id=2)]}
    assert compare_flights(flights) == [
        "rank 0 entered all_reduce as #3 (group 2); rank 1 entered barrier as #3"
    ]


@dataclass(frozen=True)
class Steps:
    rank: int
    step: int
    step_time: float = 0.1
    busy_time: float = 0.1
    beats: int = 1


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        # all in step
        ([Steps(r, 100) for r in range(4)], {}),
        # lagging by more than K=5 steps
        (
            [Steps(0, 100), Steps(1, 100), Steps(2, 88), Steps(3, 99)],
            {2: "12 steps behind the median (step 88 vs 100)"},
        ),
        # a synchronous job: equal step times, but rank 2 computes 3x longer per step
        (
            [Steps(r, 100, 0.3, 0.1) for r in (0, 1, 3)] + [Steps(2, 100, 0.3, 0.3)],
            {2: "3.0× the median time per step (300 ms vs 100 ms)"},
        ),
        # no collectives: the plain step time
        (
            [Steps(0, 50, 0.1, 0.1), Steps(1, 50, 0.25, 0.25)],
            {1: "2.5× the median time per step (250 ms vs 100 ms)"},
        ),
        # ranks that never called heartbeat() are left out
        ([Steps(0, 100), Steps(1, 0, 0.0, 0.0, beats=0)], {}),
    ],
)
def test_stragglers_lag_the_median_step_or_take_longer_per_step(samples, expected):
    found = {s.rank: s.reason for s in find_stragglers(samples, lag_steps=5, slow_factor=2.0)}
    assert found == expected


def test_a_job_that_keeps_calling_heartbeat_is_not_hung_however_quiet_its_log():
    clock = 1000.0
    timeout = 5.0
    for _ in range(60):  # a minute of silence in the logs, one beat a second
        clock += 1.0
        activity = [
            Activity(r, last_log=1000.0, last_progress=clock - 0.5, uses_heartbeat=True)
            for r in range(4)
        ]
        assert detect_hang(activity, clock, timeout) is None


def test_a_job_whose_heartbeat_stopped_is_hung_even_if_a_thread_keeps_logging():
    activity = [
        Activity(r, last_log=1059.0, last_progress=1050.0, uses_heartbeat=True) for r in range(4)
    ]
    hang = detect_hang(activity, now=1060.0, timeout=5.0)
    assert hang is not None and hang.stalled_for == pytest.approx(10.0)


def test_without_heartbeats_the_logs_and_collectives_are_the_signs_of_life():
    quiet = [Activity(r, last_log=1000.0, last_progress=None) for r in range(2)]
    assert detect_hang(quiet, now=1004.0, timeout=5.0) is None
    hang = detect_hang(quiet, now=1006.0, timeout=5.0)
    assert hang is not None
    talking = [*quiet[:1], Activity(1, last_log=1005.5)]
    assert detect_hang(talking, now=1006.0, timeout=5.0) is None


def test_a_hang_says_when_each_rank_last_showed_life_without_blaming_one():
    activity = [Activity(r, last_progress=1050.0, uses_heartbeat=True) for r in (0, 1, 2)]
    activity.append(Activity(3, last_progress=1041.0, uses_heartbeat=True))
    hang = detect_hang(activity, now=1060.0, timeout=5.0)
    assert hang is not None
    assert hang.describe() == (
        "no progress for 10 s on any rank; last sign of life: rank 3 19.0 s ago, the others "
        "10.0 s ago"
    )


def test_a_job_still_starting_is_not_hung():
    activity = [Activity(0, last_log=1000.0), Activity(1)]
    assert detect_hang(activity, now=2000.0, timeout=5.0) is None


def test_nodes_with_different_clocks_are_judged_together_by_their_ages():
    node_a = rebase([Activity(0, last_progress=1000.0, uses_heartbeat=True)], now=1010.0)
    node_b = rebase([Activity(1, last_progress=5003.0, uses_heartbeat=True)], now=5010.0)
    hang = detect_hang(node_a + node_b, now=0.0, timeout=5.0)
    assert hang is not None and hang.order == [(0, 10.0), (1, 7.0)]
    fresh = rebase([Activity(1, last_progress=5009.0, uses_heartbeat=True)], now=5010.0)
    assert detect_hang(node_a + fresh, now=0.0, timeout=5.0) is None
