"""spawn and start_processes: a job started from Python on the launcher's own pipeline.

The children run the functions of tests/support/spawn_fns.py. What a user notices: return
values in rank order, the launched environment contract, the first failure raised in the
parent with the child's index, rank and traceback (or its exit code / signal) within a
second and no child left behind, join=False returning at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

import paddlike.distributed as dist
from paddlike.distributed import ProcessExitedException, ProcessRaisedException
from tests.support import spawn_fns as fns
from tests.support.logwait import wait_until

REPO = Path(__file__).resolve().parents[2]
DUMP_ENV = REPO / "tests" / "support" / "workers" / "dump_env.py"
# Values that differ between any two jobs: ports, the job id, the log directory, and the
# secret a one-node job gets (its presence is compared, not its value).
PER_JOB = {
    "PADDLIKE_JOB_TOKEN",
    "TORCHELASTIC_ERROR_FILE",
    "PADDLE_TRAINER_ENDPOINTS",
    "PADDLE_CURRENT_ENDPOINT",
    "PADDLE_MASTER",
    "MASTER_PORT",
    "PADDLIKE_JOB_ID",
    "PADDLE_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "PADDLE_LOG_DIR",
}


def assert_gone(pids: list[int]) -> None:
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(procs, timeout=5)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"children outlived the spawn: {alive}"


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_spawn_returns_every_processes_value_in_rank_order(nprocs):
    context = dist.spawn(fns.where_am_i, args=("hi",), nprocs=nprocs)
    values = context.return_values
    assert [v[:3] for v in values] == [("hi", rank, nprocs) for rank in range(nprocs)]
    assert len({v[3] for v in values}) == nprocs  # one process each
    assert_gone([v[3] for v in values])


def test_a_child_whose_function_needs_no_runtime_does_not_import_it():
    # The runtime package (numpy's users, the store, the collectives) is imported by a
    # child only if its function asks for it: a child starts no slower than it must.
    context = dist.spawn(fns.paddlike_modules, nprocs=1)
    assert context.return_values == [["paddlike", "paddlike._spawn_child"]]


def test_start_processes_calls_fn_with_the_process_index_first():
    context = dist.start_processes(fns.index_first, args=("x",), nprocs=2)
    assert context.return_values == [(0, "x", 0), (1, "x", 1)]


def test_a_spawned_job_gets_the_same_environment_contract_as_a_launched_one(tmp_path):
    spawned = dist.spawn(fns.contract, nprocs=2).return_values
    out = tmp_path / "out"
    out.mkdir()
    launch = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2"]
    run = subprocess.run(
        [*launch, "--log_dir", str(tmp_path / "log"), "--tee", "none", str(DUMP_ENV), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    for rank in range(2):
        launched = fns.contract_of(json.loads((out / f"env.{rank}.json").read_text()))
        # the same names; spawn adds only where its children find the call
        assert set(spawned[rank]) - set(launched) == {"PADDLIKE_SPAWN_JOBDIR"}
        assert set(launched) - set(spawned[rank]) == set()
        stable = {k for k in launched if k not in PER_JOB}
        assert {k: spawned[rank][k] for k in stable} == {k: launched[k] for k in stable}
        assert spawned[rank]["RANK"] == str(rank) and spawned[rank]["WORLD_SIZE"] == "2"


def test_a_child_raising_reaches_the_parent_with_its_rank_and_traceback_within_a_second(
    tmp_path,
):
    with pytest.raises(ProcessRaisedException) as info:
        dist.start_processes(fns.rank_one_raises, args=(str(tmp_path),), nprocs=2)
    caught = time.time()
    exc = info.value
    assert (exc.error_index, exc.rank) == (1, 1)
    assert exc.exc_type == "ValueError"
    assert exc.exc_message == f"rank 1 failed on purpose with {str(tmp_path)!r}"
    assert "Traceback (most recent call last)" in exc.traceback
    assert "in rank_one_raises" in exc.traceback and "ValueError: rank 1" in str(exc)
    assert caught - float((tmp_path / "raised_at").read_text()) < 1.0
    assert_gone([int((tmp_path / "pid.0").read_text()), exc.error_pid])


def test_a_child_killed_by_a_signal_is_named_with_its_exit_code_and_signal(tmp_path):
    with pytest.raises(ProcessExitedException) as info:
        dist.start_processes(fns.rank_one_killed, args=(str(tmp_path),), nprocs=2)
    exc = info.value
    assert (exc.error_index, exc.exit_code, exc.signal_name) == (1, -9, "SIGKILL")
    assert str(exc).startswith("process 1 terminated with signal SIGKILL (rank 1, pid ")
    assert_gone([int((tmp_path / "pid.0").read_text()), exc.error_pid])


def test_join_false_returns_at_once_and_join_collects_the_values(tmp_path):
    context = dist.start_processes(fns.wait_for_go, args=(str(tmp_path),), nprocs=2, join=False)
    try:
        assert context.join(timeout=0.05) is False  # the children wait for "go"
        (tmp_path / "go").write_text("")
        assert context.join(timeout=60) is True
        assert context.return_values == [0, 10]
    finally:
        context.terminate()
        with contextlib.suppress(Exception):
            context.join(timeout=30)
    assert_gone([int((tmp_path / f"pid.{i}").read_text()) for i in range(2)])


def test_the_logs_stay_where_log_dir_names_them(tmp_path):
    dist.spawn(fns.where_am_i, args=("x",), nprocs=1, log_dir=str(tmp_path / "log"))
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert (tmp_path / "log" / "workerlog.0").exists()


def test_start_method_fork_starts_fresh_interpreters_too(monkeypatch):
    monkeypatch.setattr(fns, "MARK", "changed in the parent")
    context = dist.start_processes(fns.module_state, nprocs=1, start_method="fork")
    assert context.return_values == ["set in the module"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nprocs": 1, "xpus": "0", "foo": 1}, "spawn: unknown option(s) foo, xpus"),
        ({"start_method": "thread"}, "start_method: expected one of spawn, forkserver, fork"),
        ({"nprocs": 0}, "nprocs: expected a positive integer or -1 (every device), got 0"),
        ({"nprocs": 3, "gpus": "0,1"}, "nprocs: 3 processes but gpus lists 2 (0,1)"),
        ({"backend": "mpi"}, "backend: expected one of auto, gloo, nccl, got 'mpi'"),
        ({"nprocs": 1, "ips": "127.0.0.1,127.0.0.1"}, "--ips: entry '127.0.0.1' appears twice"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(kwargs, message, tmp_path, monkeypatch):
    # a temporary directory of this test's own: spawn tests on the other xdist worker make
    # their job directories meanwhile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ValueError) as info:
        dist.spawn(fns.where_am_i, **kwargs)
    assert message in str(info.value)
    assert not list(tmp_path.glob("paddlike-spawn-*"))


def test_a_function_of_an_interactive_main_is_refused_with_the_fix():
    code = (
        "import paddlike.distributed as d\n"
        "def f(): pass\n"
        "try:\n    d.spawn(f, nprocs=1)\nexcept ValueError as e:\n    print(e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "f is defined in an interactive __main__" in run.stdout, run.stderr
    assert "define it in a module file" in run.stdout


@pytest.mark.timeout(180)
def test_a_torch_distributed_script_runs_inside_start_processes():
    pytest.importorskip("torch")
    context = dist.start_processes(fns.torch_all_reduce, nprocs=2)
    # all_reduce of 1 + 2; all_gather of the ranks
    assert context.return_values == [[3.0, 0.0, 1.0], [3.0, 0.0, 1.0]]


def test_spawn_is_the_function_even_after_its_module_is_imported():
    from paddlike.distributed.spawn import start_processes  # loads the module by name

    module = sys.modules["paddlike.distributed.spawn"]
    assert callable(dist.spawn) and dist.spawn is module.spawn
    assert dist.start_processes is start_processes


MAIN_SCRIPT = """
import paddlike.distributed as dist

def double(i, x):
    return i * x

if __name__ == "__main__":
    print(dist.start_processes(double, args=(2,), nprocs=2).return_values)
"""

UNGUARDED_SCRIPT = """
import paddlike.distributed as dist

def double(i):
    return i

try:
    dist.start_processes(double, nprocs=1)
except dist.ProcessRaisedException as exc:
    print(exc.exc_type, exc.exc_message)
"""


def test_a_function_of_the_scripts_main_runs_when_the_call_is_guarded(tmp_path):
    (tmp_path / "main.py").write_text(MAIN_SCRIPT)
    run = subprocess.run(
        [sys.executable, "main.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "[0, 2]"


def test_an_unguarded_call_in_the_main_script_is_refused_in_the_child_with_the_fix(tmp_path):
    (tmp_path / "main.py").write_text(UNGUARDED_SCRIPT)
    run = subprocess.run(
        [sys.executable, "main.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert "RuntimeError spawn: called while a spawned child was still importing" in run.stdout
    assert "if __name__ == '__main__':" in run.stdout, run.stdout + run.stderr


def test_join_false_raises_the_failure_from_join(tmp_path):
    context = dist.start_processes(fns.rank_one_raises, args=(str(tmp_path),), nprocs=2, join=False)
    try:
        with pytest.raises(ProcessRaisedException) as info:
            context.join(timeout=60)
        assert (info.value.error_index, info.value.exc_type) == (1, "ValueError")
        with pytest.raises(ProcessRaisedException):  # and again: the failure is kept
            context.join()
    finally:
        context.terminate()
    assert_gone([int((tmp_path / "pid.0").read_text())])


INTERRUPTED_SCRIPT = """
import sys
import paddlike.distributed as dist
from tests.support import spawn_fns as fns

if __name__ == "__main__":
    try:
        dist.start_processes(fns.wait_for_go, args=(sys.argv[1],), nprocs=2)
    except KeyboardInterrupt as exc:
        print("KeyboardInterrupt:", exc, flush=True)
"""


def test_ctrl_c_in_the_parent_stops_every_child_and_raises_keyboard_interrupt(tmp_path):
    (tmp_path / "main.py").write_text(INTERRUPTED_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "main.py"), str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pid_files = [tmp_path / f"pid.{i}" for i in range(2)]
        wait_until(
            lambda: all(p.exists() for p in pid_files),
            under=tmp_path,
            timeout=60,
            what="the children's pid files",
            writer=proc,
        )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert "KeyboardInterrupt: the spawned job was interrupted (SIGINT)" in out, err
    assert_gone([int(p.read_text()) for p in pid_files])


def test_the_spawn_example_prints_the_sum_on_every_rank():
    run = subprocess.run(
        [sys.executable, str(REPO / "examples" / "spawn_allreduce.py"), "2"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-2:] == ["rank 0: sum of ranks = 1", "rank 1: sum of ranks = 1"]


def test_a_return_value_that_cannot_be_pickled_is_the_childs_error():
    with pytest.raises(ProcessRaisedException) as info:
        dist.start_processes(fns.unpicklable_result, nprocs=1)
    assert info.value.exc_type in ("PicklingError", "AttributeError")
    assert "lambda" in info.value.exc_message


@pytest.mark.skipif((os.cpu_count() or 1) > 8, reason="one process per CPU would be too many")
def test_nprocs_minus_one_on_cpu_starts_one_process_per_cpu():
    context = dist.spawn(fns.where_am_i, args=("x",), backend="gloo")
    assert [v[1] for v in context.return_values] == list(range(os.cpu_count() or 1))


def test_print_config_shows_the_launchers_lines_on_stderr(capfd):
    context = dist.spawn(fns.where_am_i, args=("x",), nprocs=1, print_config=True)
    err = capfd.readouterr().err
    assert "paddlike.launch: job " in err and "1 worker on this node" in err
    assert context.launcher_output == ""
    quiet = dist.spawn(fns.where_am_i, args=("x",), nprocs=1)
    assert "paddlike.launch: job " not in capfd.readouterr().err
    assert "paddlike.launch: job " in quiet.launcher_output


def test_a_closure_is_refused_even_with_start_method_fork():
    def closure(i: int) -> int:
        return i

    with pytest.raises(ValueError, match=r"start_method='fork': the function and its arguments"):
        dist.start_processes(closure, nprocs=1, start_method="fork")
