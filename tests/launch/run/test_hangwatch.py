"""The hang watch's rule (`launch.run.hangwatch.HangWatch`) on step clocks: no sleeps, no
processes. Workers are log files whose modification times the test sets; CPU time and
the stack collection are given in; the clocks move only when the test moves them."""

from __future__ import annotations

import ast
import io
import os
from pathlib import Path

import pytest

from paddlike.launch.console.output import Console
from paddlike.launch.run import hangwatch
from paddlike.launch.run.hangwatch import HangWatch, Watched
from paddlike.logs.hang import Frame, RankStack, ThreadStack
from tests.support.fakes import StepClock

TIMEOUT = 5.0
HEADER = b"==== paddlike run header ====\n"
SITE = "/venv/lib/python3.11/site-packages"


class Clocks:
    """A monotonic and a wall clock that move together."""

    def __init__(self) -> None:
        self.mono = StepClock(1000.0)
        self.wall = StepClock(1_800_000_000.0)

    def advance(self, seconds: float) -> None:
        self.mono.advance(seconds)
        self.wall.advance(seconds)


class Job:
    """Two ranks' log files, a fake CPU meter, and a stack collection that counts calls:
    rank 0 waits in all_reduce, rank 1 is in load_batch."""

    def __init__(self, tmp: Path, clocks: Clocks) -> None:
        self.dir, self.clocks = tmp, clocks
        self.cpu = {0: 0.0, 1: 0.0}
        self.collected = 0
        self.pause = 0.0  # seconds a collection takes (py-spy holds the ranks meanwhile)
        self.workers = []
        for rank in (0, 1):
            (tmp / f"workerlog.{rank}").write_bytes(HEADER)  # the launcher's, at the start
            os.utime(tmp / f"workerlog.{rank}", (clocks.wall.now, clocks.wall.now))
            self.workers.append(Watched(rank, 100 + rank, f"workerlog.{rank}", len(HEADER)))

    def write(self, rank: int) -> None:
        """Rank `rank` prints a line now (by the wall clock)."""
        path = self.dir / f"workerlog.{rank}"
        with path.open("ab") as f:
            f.write(b"step\n")
        os.utime(path, (self.clocks.wall.now, self.clocks.wall.now))

    def collect(self, targets, timeout):
        self.collected += 1
        self.clocks.advance(self.pause)
        waits = (
            Frame("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 3252),
            Frame("main", "/home/u/train.py", 88),
        )
        loads = (Frame("load_batch", "/home/u/train.py", 41), Frame("main", "/home/u/train.py", 80))
        stacks = {
            t.rank: RankStack(t.rank, "vm", t.log_file, t.pid, (ThreadStack("MainThread", f),))
            for t, f in zip(targets, (waits, loads), strict=False)
        }
        return stacks, {}


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def job(tmp_path: Path, clocks: Clocks) -> Job:
    return Job(tmp_path, clocks)


def watch(
    job: Job, clocks: Clocks, on_hang: str = "dump", on_diagnosis=None
) -> tuple[HangWatch, io.StringIO]:
    out = io.StringIO()
    w = HangWatch(
        job.dir, Console(out), host="127.0.0.1", node_index=0, host_label="vm",
        timeout=TIMEOUT, on_hang=on_hang, clock=clocks.mono, wall=clocks.wall,
        cpu_seconds=lambda pid: job.cpu[pid - 100], collect=job.collect,
        on_diagnosis=on_diagnosis,
    )  # fmt: skip
    w.start_round("job-1", lambda: job.workers)
    return w, out


def test_no_hang_while_a_rank_wrote_within_the_timeout_and_it_looks_again_when_one_could(
    job, clocks
):
    w, _ = watch(job, clocks)
    job.write(0)
    job.write(1)
    clocks.advance(4.5)
    assert w.check(job.workers) is None
    assert job.collected == 0
    assert w.next_check() == pytest.approx(clocks.mono.now + 0.5)  # when both reach 5 s


def test_a_stall_is_dumped_once_and_again_only_after_a_new_sign_of_life(job, clocks):
    w, out = watch(job, clocks)
    job.write(0)
    job.write(1)
    clocks.advance(TIMEOUT + 0.1)
    assert w.check(job.workers) is None  # --on_hang dump: the job goes on
    assert job.collected == 1
    assert "hang: no progress for 5 s on any rank" in out.getvalue()
    assert "--on_hang dump: the job keeps running" in out.getvalue()
    clocks.advance(3 * TIMEOUT)  # past the quiet time after the collection
    assert w.check(job.workers) is None
    assert job.collected == 1  # the same stall: not dumped twice
    job.write(1)  # life, then silence again
    clocks.advance(TIMEOUT + 0.1)
    w.check(job.workers)
    assert job.collected == 2


def test_each_hang_diagnosed_is_handed_on_for_the_summary_with_its_rank_and_dump(job, clocks):
    kept: list[dict] = []
    w, _ = watch(job, clocks, on_diagnosis=kept.append)  # the launcher's: RunRecord
    job.write(0)
    job.write(1)
    clocks.advance(TIMEOUT + 0.1)
    assert w.check(job.workers) is None  # --on_hang dump: the job goes on
    (hang,) = kept
    assert hang["rank"] == 1 and hang["summary"][0].startswith("rank 1 (vm, workerlog.1) is in")
    assert hang["stalled"].startswith("no progress for 5 s on any rank")
    assert (job.dir / hang["stacks"] / "summary.txt").is_file()
    assert hang["time"] == clocks.wall()


def test_with_on_hang_abort_the_cause_names_the_rank_in_load_batch_not_rank_0(job, clocks):
    w, _ = watch(job, clocks, on_hang="abort")
    job.write(0)
    job.write(1)
    clocks.advance(TIMEOUT + 0.1)
    cause = w.check(job.workers)
    assert cause is not None
    assert cause.reason == "rank 1 (vm, workerlog.1) is in `load_batch` at train.py:41"
    assert cause.exit_code == 124
    assert cause.time == clocks.wall.now
    # the odd rank is the cause's process, as for a failure (docs/logdir.md)
    assert (cause.role, cause.rank, cause.host, cause.node_index) == ("trainer", 1, "127.0.0.1", 0)
    assert cause.log_file == "workerlog.1"
    assert cause.stacks is not None and (job.dir / cause.stacks).name == "summary.txt"
    assert (job.dir / cause.stacks).read_text().splitlines()[0] == cause.reason
    assert cause.hung


def test_the_time_py_spy_held_the_ranks_is_not_silence_and_nothing_else_delays_the_rule(
    job, clocks
):
    w, _ = watch(job, clocks)
    job.write(0)
    job.write(1)
    clocks.advance(3.0)
    job.pause = 3.0  # py-spy holds the ranks 3 s while it reads their stacks
    w.dump(job.workers, "received SIGUSR1")
    assert job.collected == 1
    assert w.next_check() <= clocks.mono.now + 1.0  # no quiet time after the collection
    # 6 s since the last write, 3 of them held by py-spy: 3 s of silence, not a hang
    assert w.check(job.workers) is None
    assert job.collected == 1
    assert w.next_check() == pytest.approx(clocks.mono.now + 1.0)
    clocks.advance(TIMEOUT - 3.0 + 0.1)  # 5.1 s of silence of the ranks' own
    w.check(job.workers)
    assert job.collected == 2


def test_one_ranks_stacks_are_counted_in_the_singular(job, clocks):
    w, out = watch(job, clocks)
    w.dump(job.workers[:1], "received SIGUSR1")
    assert "received SIGUSR1: taking the stacks of 1 worker\n" in out.getvalue()
    assert "stacks of 1 rank in " in out.getvalue()


class Channel:
    """Another node (node 0) and the store, as `peers.stackreq.StackChannel` shows them:
    node 0's ranks 2 and 3 stopped first and it asks about hang 1."""

    fd = -1

    def __init__(self, other_idle: float) -> None:
        self.hangs = 0
        self.asked: list[tuple[int, str]] = []
        self.pending = [(1, {"by": 0, "why": "no progress for 5 s on any rank", "hang": 1})]
        self.answers: dict[int, dict] = {}
        self.other = {"activity": [[2, -other_idle, None, False], [3, -other_idle, None, False]]}

    def take(self):
        out, self.pending = self.pending, []
        return out

    def answer(self, n, report):
        self.answers[n] = report

    def gather(self, n, timeout):
        return [self.other, self.answers[n]], []

    def request_hang(self, why):
        self.hangs += 1
        self.asked.append((self.hangs, why))
        return True


def test_when_another_node_asked_too_early_this_node_asks_s_after_its_ranks_last_life(job, clocks):
    """The asker's ranks stopped 0.3 s before this node's: no hang yet. This node asks as
    soon as its own ranks reach S (plus the time py-spy held them), not S after that."""
    w, out = watch(job, clocks, on_hang="abort")
    w.channel = Channel(other_idle=TIMEOUT)  # type: ignore[assignment]
    job.write(0)
    job.write(1)
    last = clocks.mono.now
    clocks.advance(TIMEOUT - 0.3)  # node 0's ranks: 5 s of silence, ours 4.7 s
    job.pause = 0.5
    assert w.answer() is None  # ranks on this node still show life: no hang yet
    assert "hang:" not in out.getvalue()
    while not w.channel.asked:
        due = w.next_check()
        assert due is not None and due <= last + TIMEOUT + 0.5 + 0.2 + 1e-6
        clocks.advance(max(0.0, due - clocks.mono.now))
        assert w.check(job.workers) is None  # the job decides, from every node's answer
    assert clocks.mono.now - last <= TIMEOUT + 0.5 + 0.2 + 1e-6  # not 2 × --hang_timeout
    ((k, why),) = w.channel.asked
    assert k == 2  # hang 1 was node 0's
    assert why.startswith("no progress for 6 s on any rank")  # 5.5 s: 0.5 s in py-spy


def test_a_silent_rank_that_uses_cpu_is_starting_and_hung_once_its_cpu_time_stops(job, clocks):
    w, _ = watch(job, clocks)
    job.write(0)
    for _ in range(4):  # rank 1 prints nothing but imports torch: CPU time grows
        clocks.advance(2.0)
        job.write(0)
        job.cpu[1] += 0.5
        assert w.check(job.workers) is None
    assert job.collected == 0
    clocks.advance(TIMEOUT + 0.1)  # now neither writes nor computes
    w.check(job.workers)
    assert job.collected == 1


def test_a_rank_silent_and_idle_from_its_start_is_hung_a_timeout_after_its_log_opened(job, clocks):
    w, _ = watch(job, clocks)
    job.write(0)  # rank 1: no output past the launcher's header, no CPU time
    clocks.advance(TIMEOUT - 0.5)
    assert w.check(job.workers) is None
    clocks.advance(1.0)
    w.check(job.workers)
    assert job.collected == 1


def test_the_hang_watch_does_not_import_the_supervisor_even_for_type_checking():
    tree = ast.parse(Path(hangwatch.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "paddlike.launch.run.supervisor" not in imported


def test_a_job_wide_hang_names_the_odd_ranks_node_and_log_in_its_cause(job, clocks):
    w, out = watch(job, clocks, on_hang="abort")
    w.channel = Channel(other_idle=TIMEOUT + 1)  # type: ignore[assignment]
    job.write(0)
    job.write(1)
    clocks.advance(TIMEOUT + 0.5)
    cause = w.answer()
    assert cause is not None and cause.hung
    assert cause.reason == "rank 1 (vm, workerlog.1) is in `load_batch` at train.py:41"
    assert (cause.role, cause.rank, cause.host, cause.node_index) == ("trainer", 1, "127.0.0.1", 0)
    assert cause.log_file == os.path.abspath(job.dir / "workerlog.1")  # as every node reads it
    assert cause.stacks is not None and os.path.isabs(cause.stacks)
    assert Path(cause.stacks).read_text().splitlines()[0] == cause.reason
    assert "stacks of 2 ranks of this node in " in out.getvalue()
