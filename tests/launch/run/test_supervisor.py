"""The supervisor, driven with hand-built plans and real worker processes.

Workers are tests/support/workers/behave.py and dump_env.py; each test waits on files the
workers write (deadlines, never bare sleeps) and checks what a user sees: exit
codes, summary.json, the console report, surviving processes.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from paddlike.launch.console.output import Console
from paddlike.launch.console.report import report_failure
from paddlike.launch.plan.plan import LaunchPlan, ProcessSpec, Role
from paddlike.launch.run.job import conclude_round
from paddlike.launch.run.logdir import LogDir
from paddlike.launch.run.record import RunRecord
from paddlike.launch.run.supervisor import Supervisor
from paddlike.summary import RootCause, read_summary

WORKERS = Path(__file__).resolve().parents[2] / "support" / "workers"
BEHAVE = str(WORKERS / "behave.py")


def make_plan(
    argv_tail: list[str],
    n: int,
    *,
    script: str = BEHAVE,
    roles: list[Role] | None = None,
) -> LaunchPlan:
    roles = roles or [Role.TRAINER] * n
    specs = []
    counters: dict[Role, int] = {}
    for slot, role in enumerate(roles):
        local = counters.get(role, 0)
        counters[role] = local + 1
        specs.append(
            ProcessSpec(
                role=role,
                rank=local,
                local_index=local,
                device_ids=(),
                endpoint=f"127.0.0.1:{7000 + slot}",
                env={"PADDLE_TRAINER_ID": str(slot), "PADDLE_TRAINERS_NUM": str(n)},
                argv=(sys.executable, "-u", script, *argv_tail),
                log_name=f"{role.log_prefix}.{local}",
            )
        )
    return LaunchPlan(
        job_id="job-test",
        run_mode="ps" if Role.SERVER in roles else "collective",
        node_index=0,
        nnodes=1,
        host="127.0.0.1",
        processes=tuple(specs),
        trainer_endpoints=tuple(s.endpoint for s in specs if s.role is Role.TRAINER),
    )


class Run:
    """One supervised round; console output captured."""

    def __init__(self, tmp_path: Path, plan: LaunchPlan, *, kill_timeout=5.0, tee="none"):
        self.log = tmp_path / "log"
        self.err = io.StringIO()
        self.out = io.StringIO()
        self.plan = plan
        self.kill_timeout = kill_timeout
        # --tee's text as the options give it to the supervisor
        self.tee = (
            "all" if tee == "all" else frozenset(int(i) for i in tee.split(",") if i.isdigit())
        )

    def __call__(self, restart_count: int = 0, **kwargs):
        """Supervise the plan, then conclude the round as a one-node job does (summary,
        report): the job-wide cause of one node is its own."""
        console = Console(err=self.err)
        with LogDir.open(self.log, overwrite=False, host="127.0.0.1") as logdir:
            sup = Supervisor(
                self.plan,
                logdir,
                base_env=os.environ,
                kill_timeout=self.kill_timeout,
                tee=self.tee,
                console=console,
                tee_out=self.out,
            )
            record = RunRecord(logdir.path, warn=console.warn)
            outcome = sup.run(
                restart_count=restart_count,
                on_started=lambda records: record.running(self.plan, records, restart_count),
                **kwargs,
            )
            if outcome.root_cause is not None:
                report_failure(console, outcome.root_cause, logdir.path)
            conclude_round(console, record, self.plan, outcome, outcome.root_cause, restart_count)
            return outcome


def pids_in(work: Path, n: int) -> list[int]:
    return [int((work / f"pid.{r}").read_text()) for r in range(n)]


def assert_gone(pids: list[int], deadline: float = 5.0) -> None:
    _, alive = psutil.wait_procs(
        [p for p in (_proc(pid) for pid in pids) if p is not None], timeout=deadline
    )
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"still running: {alive}"


def _proc(pid: int):
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


@pytest.mark.parametrize("n", [2, 4])
def test_every_worker_gets_its_environment_and_the_job_succeeds(tmp_path, n):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work)], n, script=str(WORKERS / "dump_env.py")))
    outcome = run()
    assert outcome.exit_code == 0
    for rank in range(n):
        env = json.loads((work / f"env.{rank}.json").read_text())
        assert env["PADDLE_TRAINERS_NUM"] == str(n)
        assert env["PADDLIKE_RESTART_COUNT"] == "0"
        assert env["PADDLIKE_RESTART_COUNT"] == env["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert env["PATH"] == os.environ["PATH"]  # the inherited environment too
        assert "dumped its environment" in (run.log / f"workerlog.{rank}").read_text()
    assert f"OK: {n} workers finished" in run.err.getvalue()
    summary = read_summary(run.log)
    assert summary.status == "succeeded" and summary.exit_code == 0
    assert [p.status for p in summary.processes] == ["ok"] * n
    assert all(p.pid and p.exit_code == 0 for p in summary.processes)


def test_worker_exit_code_becomes_the_launchers_and_the_others_are_stopped(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "wait", "exit:3", "wait"], 3))
    outcome = run()
    assert outcome.exit_code == 3
    assert_gone(pids_in(work, 3))
    cause = outcome.root_cause
    assert (cause.rank, cause.local_index, cause.exit_code) == (1, 1, 3)
    assert cause.reason == "trainer rank 1 exited with code 3"
    assert cause.tail[-1] == "RuntimeError: rank 1 failed on purpose"
    assert not any("====" in line for line in cause.tail)  # this run only, no header
    console = run.err.getvalue()
    assert "FAILED: trainer rank 1 exited with code 3" in console
    assert "local index 1" in console and "workerlog.1" in console
    assert "RuntimeError: rank 1 failed on purpose" in console
    summary = read_summary(run.log)
    assert summary.status == "failed" and summary.exit_code == 3
    assert [p.status for p in summary.processes] == ["killed", "failed", "killed"]
    assert summary.root_cause.rank == 1


def test_worker_killed_by_sigkill_gives_137_and_names_the_signal(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "sigkill", "wait"], 2))
    outcome = run()
    assert outcome.exit_code == 137
    assert outcome.root_cause.signal == "SIGKILL"
    assert "trainer rank 0 was killed by SIGKILL" in run.err.getvalue()
    assert "SIGKILL (9)" in run.err.getvalue()
    record = read_summary(run.log).processes[0]
    assert (record.signal, record.exit_code, record.status) == ("SIGKILL", None, "failed")


def test_worker_ignoring_sigterm_is_named_then_sigkilled_after_the_grace(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "exit:3", "ignore_term"], 2), kill_timeout=0.5)
    started = time.monotonic()
    outcome = run()
    assert outcome.exit_code == 3
    assert time.monotonic() - started < 10
    assert (
        "trainer rank 1" in run.err.getvalue() and "did not exit within 0.5 s" in run.err.getvalue()
    )
    record = outcome.records[1]
    assert (record.status, record.signal) == ("killed", "SIGKILL")
    assert_gone(pids_in(work, 2))


def _signal_when_stopped(work: Path, sig: int, deadline: float = 20.0) -> None:
    """`sig` to this process once rank 1 is stopped (state T) and rank 0 is ready."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        p = _proc(int((work / "pid.1").read_text())) if (work / "ready.1").exists() else None
        if p is not None and (work / "ready.0").exists() and p.status() == psutil.STATUS_STOPPED:
            os.kill(os.getpid(), sig)
            return
        time.sleep(0.01)


def test_a_stopped_worker_is_continued_after_sigterm_and_exits_without_waiting_for_sigkill(
    tmp_path,
):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "wait", "stop:0"], 2), kill_timeout=30)
    sender = threading.Thread(target=_signal_when_stopped, args=(work, signal.SIGTERM))
    sender.start()
    try:
        started = time.monotonic()
        outcome = run()
        took = time.monotonic() - started
    finally:
        sender.join()
    assert outcome.exit_code == 143
    assert took < 15, f"the stopped worker held the teardown {took:.1f} s"
    err = run.err.getvalue()
    pid = int((work / "pid.1").read_text())
    assert (
        f"trainer rank 1 (pid {pid}) is stopped (SIGSTOP, or held by a debugger): "
        "sending SIGCONT after SIGTERM so that it can exit"
    ) in err
    assert "make it exit on SIGTERM" not in err and "sending SIGKILL" not in err
    assert_gone(pids_in(work, 2))


def test_a_stopped_worker_that_ignores_sigterm_is_sigkilled_without_advice_about_sigterm(
    tmp_path,
):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "wait", "stop:ignore"], 2), kill_timeout=0.5)
    sender = threading.Thread(target=_signal_when_stopped, args=(work, signal.SIGTERM))
    sender.start()
    try:
        outcome = run()
    finally:
        sender.join()
    assert outcome.exit_code == 143
    err = run.err.getvalue()
    assert (
        "was stopped and did not exit within 0.5 s of SIGTERM and SIGCONT; sending SIGKILL\n"
    ) in err
    assert "make it exit on SIGTERM" not in err
    assert (outcome.records[1].status, outcome.records[1].signal) == ("killed", "SIGKILL")
    assert_gone(pids_in(work, 2))


def test_grandchildren_are_stopped_with_their_worker(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "exit:5", "grandchild"], 2))
    assert run().exit_code == 5
    assert_gone([int((work / "grandchild.1").read_text())])


def test_launcher_sigterm_stops_the_job_with_143(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "wait", "wait"], 2))
    ready = [work / "ready.0", work / "ready.1"]
    before = signal.getsignal(signal.SIGTERM)
    sender = threading.Thread(target=_signal_when_ready, args=(ready, signal.SIGTERM))
    sender.start()
    try:
        outcome = run()
    finally:
        sender.join()
    assert outcome.exit_code == 143
    assert outcome.status == "interrupted"
    assert outcome.root_cause.reason == "launcher on 127.0.0.1 received SIGTERM"
    assert [r.status for r in outcome.records] == ["killed", "killed"]
    assert_gone(pids_in(work, 2))
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored


def _signal_when_ready(files: list[Path], sig: int, deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while not all(f.exists() for f in files) and time.monotonic() < end:
        time.sleep(0.01)
    os.kill(os.getpid(), sig)


def test_remote_cause_from_an_extra_fd_tears_the_job_down(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    rfd, wfd = os.pipe()
    remote = RootCause(reason="trainer rank 3 exited with code 7", host="198.18.0.2", exit_code=7)
    published: list[RootCause] = []
    run = Run(tmp_path, make_plan([str(work), "wait"], 1))
    writer = threading.Thread(target=_write_when_ready, args=(work / "ready.0", wfd))
    writer.start()
    try:
        outcome = run(
            extra_fds={rfd: lambda: (os.read(rfd, 1), remote)[1]},
            on_failure=published.append,
        )
    finally:
        writer.join()
        os.close(rfd)
        os.close(wfd)
    assert outcome.exit_code == 7
    assert outcome.root_cause is remote
    assert published == []  # a remote cause is not this node's to publish
    assert "FAILED: trainer rank 3 exited with code 7" in run.err.getvalue()


def _write_when_ready(ready: Path, fd: int, deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while not ready.exists() and time.monotonic() < end:
        time.sleep(0.01)
    os.write(fd, b"x")


def test_local_failure_is_published_before_teardown(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    published: list[RootCause] = []
    run = Run(tmp_path, make_plan([str(work), "exit:4", "wait"], 2))
    outcome = run(on_failure=published.append)
    assert outcome.exit_code == 4
    assert published == [outcome.root_cause]


def test_command_that_cannot_start_fails_the_job_with_127(tmp_path):
    plan = make_plan([], 1)
    spec = plan.processes[0]
    broken = spec._replace(argv=(str(tmp_path / "no-such-program"),))
    run = Run(tmp_path, plan._replace(processes=(broken,)))
    outcome = run()
    assert outcome.exit_code == 127
    assert "could not start trainer rank 0" in run.err.getvalue()
    assert "no-such-program" in (run.log / "workerlog.0").read_text()


def test_restart_round_appends_with_a_new_header_and_restart_count(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work)], 1, script=str(WORKERS / "dump_env.py")))
    with LogDir.open(run.log, overwrite=True, host="127.0.0.1") as logdir:
        sup = Supervisor(run.plan, logdir, base_env=os.environ, console=Console(err=run.err))
        assert sup.run().exit_code == 0
        assert sup.run(restart_count=1).exit_code == 0
    env = json.loads((work / "env.0.json").read_text())
    assert env["PADDLIKE_RESTART_COUNT"] == "1"
    text = (run.log / "workerlog.0").read_text()
    assert text.count("==== paddlike run") == 2 and "restart 1:" in text


# ---------------------------------------------------------------- --tee
def test_tee_echoes_one_worker_without_prefix(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "lines:50", "lines:3"], 2), tee="0")
    assert run().exit_code == 0
    assert run.out.getvalue() == "".join(f"line {i} of rank 0\n" for i in range(50))


def test_tee_of_several_workers_prefixes_each_line_with_its_rank(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "lines:5", "lines:5"], 2), tee="all")
    assert run().exit_code == 0
    lines = run.out.getvalue().splitlines()
    assert sorted(lines) == sorted(
        f"[rank {r}] line {i} of rank {r}" for r in (0, 1) for i in range(5)
    )
    for r in (0, 1):  # each worker's lines in order
        mine = [line for line in lines if line.startswith(f"[rank {r}]")]
        assert mine == [f"[rank {r}] line {i} of rank {r}" for i in range(5)]


def test_tee_none_shows_no_worker_output(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "lines:5"], 1), tee="none")
    assert run().exit_code == 0
    assert run.out.getvalue() == ""


def test_tee_shows_the_failing_workers_output_before_the_report(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    run = Run(tmp_path, make_plan([str(work), "exit:3", "wait"], 2), tee="0")
    assert run().exit_code == 3
    assert "rank 0 is about to fail" in run.out.getvalue()
    assert "RuntimeError: rank 0 failed on purpose" in run.out.getvalue()


# ---------------------------------------------------------------- PS lifecycle
PS_ROLES = [Role.SERVER, Role.SERVER, Role.TRAINER, Role.TRAINER]


def test_ps_servers_are_stopped_once_every_trainer_succeeded(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    argv = [str(work), "term_exit:0", "wait", "ok", "ok"]
    run = Run(tmp_path, make_plan(argv, 4, roles=PS_ROLES))
    outcome = run()
    assert outcome.exit_code == 0, run.err.getvalue()
    assert [r.status for r in outcome.records] == ["ok"] * 4
    assert [r.role for r in outcome.records] == ["server", "server", "trainer", "trainer"]
    assert (run.log / "serverlog.1").exists() and (run.log / "workerlog.1").exists()
    assert "OK: 2 workers finished" in run.err.getvalue()


def test_ps_failing_trainer_ends_the_job_with_its_code(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    argv = [str(work), "wait", "wait", "exit:3", "wait"]
    run = Run(tmp_path, make_plan(argv, 4, roles=PS_ROLES))
    outcome = run()
    assert outcome.exit_code == 3
    assert outcome.root_cause.role == "trainer" and outcome.root_cause.rank == 0
    assert_gone(pids_in(work, 4))


def test_ps_failing_server_ends_the_job_with_its_code(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    argv = [str(work), "wait", "exit:6", "wait", "wait"]
    run = Run(tmp_path, make_plan(argv, 4, roles=PS_ROLES))
    outcome = run()
    assert outcome.exit_code == 6
    assert outcome.root_cause.reason == "server rank 1 exited with code 6"


def test_ps_server_ignoring_the_stop_request_is_sigkilled_and_the_job_still_succeeds(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    argv = [str(work), "ignore_term", "exit:0"]  # the trainer ends once the server is ready
    run = Run(tmp_path, make_plan(argv, 2, roles=[Role.SERVER, Role.TRAINER]), kill_timeout=0.3)
    outcome = run()
    assert outcome.exit_code == 0
    assert "server rank 0" in run.err.getvalue() and "sending SIGKILL" in run.err.getvalue()
    assert [r.status for r in outcome.records] == ["killed", "ok"]
