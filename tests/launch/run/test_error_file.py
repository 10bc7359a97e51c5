"""TORCHELASTIC_ERROR_FILE: every worker gets one next to its log, and the failure report
shows what a worker's torch `@record` wrote there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlike.logs.report import cause_error_file, format_root_cause, read_error_file
from paddlike.summary import RootCause

ROOT = Path(__file__).resolve().parents[3]


def torch_error(message: str, callstack: str, timestamp: float) -> dict:
    """The JSON torch's ErrorHandler.record_exception writes."""
    return {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": callstack, "timestamp": str(int(timestamp))},
        }
    }


def failed(log_dir: Path, started: float, **extra: object) -> RootCause:
    now = time.time()
    return RootCause(
        reason="trainer rank 1 exited with code 1", node_index=0, role="trainer", rank=1,
        local_index=1, exit_code=1, log_file="workerlog.1", tail=["last line"], time=now,
        duration=now - started, **extra,
    )  # fmt: skip


TRACE = 'Traceback (most recent call last):\n  File "t.py", line 3, in main\nValueError: bad lr\n'


def test_reads_torchs_error_file_format(tmp_path):
    path = tmp_path / "workerlog.1.error.json"
    path.write_text(json.dumps(torch_error("ValueError: bad lr", TRACE, 1700000000)))
    error = read_error_file(path)
    assert error is not None
    assert (error.message, error.traceback, error.timestamp) == ("ValueError: bad lr", TRACE,
                                                                  1700000000.0)  # fmt: skip


def test_reads_the_message_as_text_form_too(tmp_path):
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"message": "worker ran out of data", "timestamp": 5}))
    error = read_error_file(path)
    assert error is not None and error.message == "worker ran out of data" and not error.traceback


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_fifo_or_link_planted_as_the_error_file_is_no_error_file(tmp_path, kind):
    """A shared log directory: a FIFO would block the launcher's report forever; a link
    would show it a file of another user's choosing."""
    path = tmp_path / "workerlog.1.error.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        real = tmp_path / "elsewhere.json"
        real.write_text(json.dumps(torch_error("ValueError: planted", TRACE, 1700000000)))
        path.symlink_to(real)
    assert read_error_file(path) is None


@pytest.mark.parametrize("content", ["", "not json", "[]", '{"other": 1}', '{"message": 3}'])
def test_an_unreadable_error_file_is_no_error_file(tmp_path, content):
    path = tmp_path / "e.json"
    path.write_text(content)
    assert read_error_file(path) is None
    assert read_error_file(tmp_path / "missing.json") is None


def test_the_failure_report_shows_the_workers_message_and_traceback(tmp_path):
    started = time.time() - 2
    (tmp_path / "workerlog.1.error.json").write_text(
        json.dumps(torch_error("ValueError: bad lr", TRACE, time.time()))
    )
    text = format_root_cause(failed(tmp_path, started), log_dir=tmp_path)
    lines = text.splitlines()
    assert "  error    ValueError: bad lr" in lines
    assert "  traceback from workerlog.1.error.json:" in lines
    assert "    | ValueError: bad lr" in lines
    assert lines.index("  traceback from workerlog.1.error.json:") < lines.index(
        "  last line of workerlog.1:"
    )


def test_the_traceback_is_not_quoted_twice_when_the_log_already_ends_in_it(tmp_path):
    (tmp_path / "workerlog.1.error.json").write_text(
        json.dumps(torch_error("ValueError: bad lr", TRACE, time.time()))
    )
    cause = failed(tmp_path, time.time() - 2)
    cause.tail = TRACE.splitlines()
    text = format_root_cause(cause, log_dir=tmp_path)
    assert "  error    ValueError: bad lr" in text.splitlines()
    assert "traceback from" not in text
    assert text.count("| ValueError: bad lr") == 1


def test_an_error_file_from_an_earlier_run_in_the_same_directory_is_not_shown(tmp_path):
    (tmp_path / "workerlog.1.error.json").write_text(
        json.dumps(torch_error("OldError: yesterday", TRACE, time.time() - 86400))
    )
    cause = failed(tmp_path, time.time() - 2)
    assert cause_error_file(cause, tmp_path) is None
    assert "OldError" not in format_root_cause(cause, log_dir=tmp_path)


def test_without_an_error_file_the_report_is_unchanged(tmp_path):
    cause = failed(tmp_path, time.time() - 2)
    text = format_root_cause(cause, log_dir=tmp_path)
    assert "error " not in text and "traceback" not in text


def _launch(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp / "log"), *argv],
        capture_output=True, text=True, timeout=100, cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return proc


def test_every_worker_gets_its_error_file_next_to_its_log(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    run = _launch(tmp_path, "--dry_run", "--nproc_per_node", "2", str(script))
    assert run.returncode == 0, run.stderr
    log = tmp_path / "log"
    for n in (0, 1):
        assert f"TORCHELASTIC_ERROR_FILE={log}/workerlog.{n}.error.json" in run.stdout


def test_parameter_servers_and_trainers_get_error_files_too(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    run = _launch(tmp_path, "--dry_run", "--server_num", "1", "--worker_num", "1", str(script))
    assert run.returncode == 0, run.stderr
    assert f"TORCHELASTIC_ERROR_FILE={tmp_path / 'log'}/serverlog.0.error.json" in run.stdout
    assert f"TORCHELASTIC_ERROR_FILE={tmp_path / 'log'}/workerlog.0.error.json" in run.stdout


@pytest.mark.timeout(120)
def test_a_torch_record_scripts_exception_is_in_the_launchers_failure_report(tmp_path):
    pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")
    script = tmp_path / "t.py"
    script.write_text(
        "import os\n"
        "from torch.distributed.elastic.multiprocessing.errors import record\n\n"
        "@record\n"
        "def main():\n"
        "    if os.environ['RANK'] == '1':\n"
        "        raise ValueError('batch size 7 does not divide 64')\n\n"
        "main()\n"
    )
    run = _launch(tmp_path, "--nproc_per_node", "2", str(script))
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert "error    ValueError: batch size 7 does not divide 64" in out
    assert out.count("| ValueError: batch size 7 does not divide 64") == 1  # not quoted twice
    error = read_error_file(tmp_path / "log" / "workerlog.1.error.json")
    assert error is not None and "raise ValueError" in error.traceback
    assert not (tmp_path / "log" / "workerlog.0.error.json").exists()


RAISER = ROOT / "tests" / "support" / "fault_workers" / "raise_train.py"


@pytest.mark.timeout(120)
def test_a_rank_that_raises_is_the_cause_though_its_peers_exit_first(tmp_path):
    """Rank 2 raises and lingers 1 s at exit after its runtime closed its connections:
    ranks 0 and 1 fail at once (PeerExitedError) and exit long before it. Their error
    files say so, and the launcher waits for rank 2's failure instead of taking theirs."""
    run = _launch(tmp_path, "--devices", "cpu", "--nproc_per_node", "3", "--tee", "none",
                  str(RAISER), "--raise_rank", "2", "--raise_step", "7", "--slow_exit", "1",
                  "--steps", "30", "--checkpoint_every", "5", "--checkpoint",
                  str(tmp_path / "ckpt"), "--step_time", "0.02")  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "FAILED: trainer rank 2 exited with code 1" in out
    assert "error    ValueError: rank 2 raised at step 7 (injected)" in out
    log = tmp_path / "log"
    summary = json.loads((log / "summary.json").read_text())
    assert summary["root_cause"]["rank"] == 2, summary["root_cause"]
    ends = {p["rank"]: p["end_time"] for p in summary["processes"]}
    assert max(ends[0], ends[1]) < ends[2]  # the race the old rule lost: the peers went first
    for rank in (0, 1):
        error = read_error_file(log / f"workerlog.{rank}.error.json")
        assert error is not None and error.peer_exited == 2 and "PeerExitedError" in error.message
    own = read_error_file(log / "workerlog.2.error.json")
    assert own is not None and own.peer_exited is None and "ValueError" in own.message


def test_a_consequence_is_read_only_from_this_runs_error_file(tmp_path):
    from paddlike.launch.run.consequence import peer_exited

    path = tmp_path / "workerlog.0.error.json"
    env = {"TORCHELASTIC_ERROR_FILE": str(path)}
    assert peer_exited(env, time.time()) is None  # none written
    path.write_text(json.dumps({**torch_error("PeerExitedError: x", TRACE, time.time()),
                                "paddlike": {"peer_exited": 0}}))  # fmt: skip
    assert peer_exited(env, time.time() - 5) == 0  # rank 0: a rank, not "none"
    assert peer_exited(env, time.time() + 5) is None  # written before the worker started
    path.write_text(json.dumps(torch_error("ValueError: own", TRACE, time.time())))
    assert peer_exited(env, time.time() - 5) is None
