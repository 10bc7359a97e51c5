"""The probe `--hang_timeout` puts in every worker (`paddlike.logs.worker_probe`) and the
launcher's side of it (`paddlike.logs.torch_flight`): what the plan adds to the workers'
environment, that the script sees its own PYTHONPATH and sitecustomize, that a real
process answers with its stack (and torch's flight record once it uses torch), and how
torch's JSON record reads."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlike.launch.context.devices import DeviceAssignment
from paddlike.launch.context.options import parse_options
from paddlike.launch.plan.plan import EndpointLayout, JobFacts, plan_collective
from paddlike.launch.specs import plan_spec
from paddlike.logs import torch_flight, worker_probe
from paddlike.logs.stacks import Target
from paddlike.logs.torch_flight import TorchOp, parse_record

REPO = Path(__file__).resolve().parents[2]
LAYOUT = EndpointLayout(hosts=("10.0.0.1",), node_index=0, ports=((6070, 6071),), master_port=6072)
CPU2 = DeviceAssignment("cpu", ((), ()))


def worker_env(argv: list[str], environ: dict[str, str]) -> dict[str, str]:
    facts = JobFacts(job_id="j", python="/py", log_dir="/abs/log", environ=environ)
    options = parse_options([*argv, "train.py"], environ)
    return plan_collective(plan_spec(options), LAYOUT, CPU2, facts).processes[1].env


def test_hang_timeout_turns_on_torchs_flight_recorder_and_the_probe():
    env = worker_env(["--hang_timeout", "30"], {"PYTHONPATH": "/mine"})
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert env["PYTHONPATH"] == f"{worker_probe.DIRECTORY}{os.pathsep}/mine"
    assert env["PADDLIKE_PROBE_PYTHONPATH"] == "/mine"
    assert env["PADDLIKE_PROBE"] == "1"


@pytest.mark.parametrize("name", ["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"])
def test_a_flight_recorder_size_the_user_set_is_kept(name):
    env = worker_env(["--hang_timeout", "30"], {name: "0"})
    assert "TORCH_FR_BUFFER_SIZE" not in env
    assert "PADDLIKE_PROBE_PYTHONPATH" not in env  # the user had no PYTHONPATH


def test_without_hang_timeout_and_straggler_check_the_workers_get_neither():
    env = worker_env(["--straggler_check", "0"], {"PYTHONPATH": "/mine"})
    assert not {"TORCH_FR_BUFFER_SIZE", "PADDLIKE_PROBE", "PYTHONPATH"} & set(env)


def test_straggler_check_alone_puts_the_probe_in_as_hang_timeout_does():
    env = worker_env(["--straggler_check", "10"], {})
    assert env["PADDLIKE_PROBE"] == "1" and env["TORCH_FR_BUFFER_SIZE"] == "2000"


SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import sitecustomize
    print(os.environ.get("PYTHONPATH"), os.environ.get("PADDLIKE_PROBE"),
          sitecustomize.__file__, flush=True)
    if sys.argv[1] == "torch":
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        import torch
        dist.all_reduce(torch.ones(3))
    child = os.fork()
    if child == 0:  # a DataLoader-like child: it must not answer for its parent
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)

    def load_batch():
        print("in load_batch", flush=True)
        sys.stdin.read()

    load_batch()
    os.kill(child, 9)
    """
)


@pytest.fixture
def worker(tmp_path: Path, request) -> Iterator[tuple[subprocess.Popen[str], int, str]]:
    """A process started with the probe's environment, the user's own sitecustomize on
    its PYTHONPATH; (process, forked child's pid, its first line)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("MINE = True\n")
    (tmp_path / "train.py").write_text(SCRIPT)
    user_path = os.pathsep.join([str(mine), str(REPO)])
    env = {**os.environ, **worker_probe.probe_env({"PYTHONPATH": user_path})}
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "train.py"), request.param], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        child = int(proc.stdout.readline())
        assert proc.stdout.readline() == "in load_batch\n"
        yield proc, child, first
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and its forked child
        proc.communicate()


@pytest.mark.parametrize("worker", ["plain"], indirect=True)
def test_the_script_sees_its_own_pythonpath_and_sitecustomize(worker, tmp_path):
    _, _, first = worker
    path, probe, site = first.split()
    assert path == os.pathsep.join([str(tmp_path / "mine"), str(REPO)])
    assert probe == "None"  # the probe's variables are gone: children inherit none
    assert site == str(tmp_path / "mine" / "sitecustomize.py")


@pytest.mark.parametrize("worker", ["plain"], indirect=True)
def test_a_worker_answers_with_its_main_threads_stack_and_its_forked_child_does_not(worker):
    proc, child, _ = worker
    answers = torch_flight.ask([Target(0, proc.pid), Target(1, child)])
    assert [f.function for f in answers[0].stack[:2]] == ["load_batch", "<module>"]
    assert answers[0].stack[0].filename.endswith("train.py")
    assert (answers[0].torch, answers[0].record, answers[0].error) == (False, (), "")
    assert answers[1].error.startswith("no probe in it")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("worker", ["torch"], indirect=True)
def test_a_torch_worker_answers_with_torchs_flight_record(worker):
    proc, _, _ = worker
    (answer,) = torch_flight.ask([Target(0, proc.pid)]).values()
    assert answer.torch and answer.initialized
    assert answer.record == (TorchOp(1, 0, "all_reduce", 12, "float32", state="done"),)
    # when the rank entered it (the page's last sign of life): after the worker started
    assert answer.record[0].created is not None
    assert time.time() - 120 < answer.record[0].created <= time.time()


def test_a_process_without_a_probe_is_named_in_one_line():
    (answer,) = torch_flight.ask([Target(3, os.getpid())]).values()
    assert answer.error == (
        "no probe in it (started without --hang_timeout, or not a Python worker)"
    )


def test_torchs_json_record_reads_as_collectives_of_their_groups():
    entry = {
        "collective_seq_id": 4, "p2p_seq_id": 0, "is_p2p": False, "pg_id": 0,
        "process_group": ["0", "default_pg"], "profiling_name": "gloo:all_reduce",
        "input_sizes": [[4, 2]], "input_dtypes": ["Float"], "retired": False,
        "state": "scheduled",
    }  # fmt: skip
    record = {
        "entries": [
            {**entry, "collective_seq_id": 3, "retired": True},
            entry,
            {**entry, "profiling_name": "nccl:barrier", "input_sizes": [], "input_dtypes": [],
             "process_group": ["2", "tp"], "pg_id": 1, "collective_seq_id": 1},
            {**entry, "is_p2p": True, "profiling_name": "gloo:send", "p2p_seq_id": 1},
        ]
    }  # fmt: skip
    assert parse_record(record) == [
        TorchOp(3, 0, "all_reduce", 32, "float32", state="done"),
        TorchOp(4, 0, "all_reduce", 32, "float32", state="running"),
        TorchOp(1, 2, "barrier", 0, "", state="running"),
    ]
    assert [op.created for op in parse_record(record)] == [None, None, None]  # no time given
    timed = {"entries": [{**entry, "time_created_ns": 1_795_000_000_250_000_000}]}
    assert parse_record(timed)[0].created == pytest.approx(1_795_000_000.25, abs=1e-6)
