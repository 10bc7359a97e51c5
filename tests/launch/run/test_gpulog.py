"""run/gpulog.py: Paddle's GPU log (--enable_gpu_log, --gpu_log_interval), with a fake
nvidia-smi on PATH (the real one needs an NVIDIA driver): a script that answers
--query-gpu / --query-compute-apps in nvidia-smi's CSV form and records each call."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlike.launch.context.options import parse_options
from paddlike.launch.run.gpulog import GpuLog, job_gpus

REPO = Path(__file__).resolve().parents[3]
FAKE_SMI = r"""#!/bin/sh
echo "$@" >> "$SMI_CALLS"
case "$1" in
  --query-gpu=index,uuid*) echo "0, GPU-aaaa, 550.54, Fake GPU, 123, Disabled, Enabled"
                           echo "1, GPU-bbbb, 550.54, Fake GPU, 124, Disabled, Enabled" ;;
  --query-compute-apps=*) echo "4242, python, GPU-aaaa, Fake GPU, 1024" ;;
  --query-gpu=index,utilization*) echo "0, 87, 81559, 40211, 41348, 2026/11/25 23:59:01.123"
                                  echo "1, 12, 81559, 1024, 80535, 2026/11/25 23:59:01.124" ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"""


@pytest.fixture
def smi_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH starts with the fake nvidia-smi; SMI_CALLS its call log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    calls = tmp_path / "calls"
    calls.write_text("")
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SMI_CALLS": str(calls)}


def wait_for_rows(path: Path, rows: int, deadline_s: float = 20.0) -> list[str]:
    """The file's lines once it holds `rows` usage rows after the header (or the deadline)."""
    end = time.monotonic() + deadline_s
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        header = "index,utilization_gpu,memory_total,memory_used,memory_free,timestamp"
        if header in lines and len(lines) - lines.index(header) - 1 >= rows:
            return lines
        assert time.monotonic() < end, f"{rows} rows not written in {deadline_s} s: {lines}"
        time.sleep(0.02)  # the file is written by another thread: nothing to wait on but it


def test_the_log_has_paddles_header_then_a_row_per_gpu_each_interval(tmp_path, smi_path):
    path = tmp_path / "job.gpu.log"
    log = GpuLog(str(path), 0.05, ("1", "0"), smi_path, warn=print).start()
    try:
        lines = wait_for_rows(path, 4)  # two rounds of two GPUs
    finally:
        log.stop()
    assert not log.thread.is_alive()
    assert lines[:3] == [
        "index,uuid,driver_version,name,gpu_serial,display_active,display_mode",
        "0, GPU-aaaa, 550.54, Fake GPU, 123, Disabled, Enabled",
        "1, GPU-bbbb, 550.54, Fake GPU, 124, Disabled, Enabled",
    ]
    assert "pid,process_name,gpu_uuid,gpu_name,used_memory" in lines
    assert "0, 87, 81559, 40211, 41348, 2026/11/25 23:59:01.123" in lines
    calls = Path(smi_path["SMI_CALLS"]).read_text().splitlines()
    assert calls[-1] == (
        "--query-gpu=index,utilization.gpu,memory.total,memory.used,memory.free,timestamp "
        "--format=csv,noheader,nounits -i 1,0"
    )


def test_stop_ends_the_thread_at_once_even_with_a_long_interval(tmp_path, smi_path):
    path = tmp_path / "job.gpu.log"
    log = GpuLog(str(path), 3600, (), smi_path, warn=print).start()
    wait_for_rows(path, 2)
    started = time.monotonic()
    log.stop()
    assert not log.thread.is_alive() and time.monotonic() - started < 5


def test_without_nvidia_smi_the_file_says_so_and_the_console_warns_once(tmp_path):
    """The file and the warning agree: the file is there, with the note and no rows."""
    path = tmp_path / "job.gpu.log"
    warnings: list[str] = []
    log = GpuLog(str(path), 0.05, (), {"PATH": str(tmp_path)}, warn=warnings.append).start()
    log.thread.join(10)
    assert path.read_text() == "# nvidia-smi not found on PATH: no GPU rows\n"
    assert warnings == [
        f"--gpu_log_interval: nvidia-smi not found on PATH; {path} holds only that note, "
        "no GPU rows"
    ]


def test_a_link_at_the_gpu_log_is_not_written_through(tmp_path, smi_path):
    """A shared log directory: another user's link where <job id>.gpu.log goes."""
    victim = tmp_path / "root-only"
    victim.write_text("root's secret\n")
    path = tmp_path / "job.gpu.log"
    path.symlink_to(victim)
    warnings: list[str] = []
    log = GpuLog(str(path), 0.05, (), smi_path, warn=warnings.append).start()
    log.thread.join(10)
    assert victim.read_text() == "root's secret\n"
    assert len(warnings) == 1 and warnings[0].startswith(f"--gpu_log_interval: cannot write {path}")


def test_a_fifo_at_the_gpu_log_is_not_written_into_and_does_not_block(tmp_path, smi_path):
    """Issue 31: another user's FIFO where <job id>.gpu.log goes blocked the writer."""
    path = tmp_path / "job.gpu.log"
    os.mkfifo(path)
    warnings: list[str] = []
    log = GpuLog(str(path), 0.05, (), smi_path, warn=warnings.append).start()
    log.thread.join(10)
    assert not log.thread.is_alive()
    assert warnings == [
        f"--gpu_log_interval: cannot write {path} ([Errno 22] it is a FIFO, not a regular "
        f"file: '{path}'); GPU log stopped"
    ]


def test_the_warning_names_the_option_the_user_gave(tmp_path):
    path = tmp_path / "job.gpu.log"
    warnings: list[str] = []
    environ = {"PATH": str(tmp_path)}
    GpuLog(str(path), 1, (), environ, warnings.append, "--enable_gpu_log").start().thread.join(10)
    assert warnings[0].startswith("--enable_gpu_log: nvidia-smi not found on PATH;")


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [(["--enable_gpu_log", "true"], {}, "--enable_gpu_log"),
     (["--gpu_log_interval", "5"], {}, "--gpu_log_interval"),
     (["--enable_gpu_log", "true", "--gpu_log_interval", "5"], {}, "--gpu_log_interval"),
     ([], {"PADDLIKE_GPU_LOG_INTERVAL": "5"},
      "--gpu_log_interval (from PADDLIKE_GPU_LOG_INTERVAL)")],
)  # fmt: skip
def test_the_options_record_which_option_turned_the_gpu_log_on(argv, env, named):
    assert parse_options([*argv, "train.py"], env).gpu_log_from == named


@pytest.mark.parametrize(
    ("gpus", "environ", "ids"),
    [(("2", "3"), {"CUDA_VISIBLE_DEVICES": "0"}, ("2", "3")),
     (None, {"CUDA_VISIBLE_DEVICES": "GPU-aa, 1"}, ("GPU-aa", "1")),
     (None, {}, ())],
)  # fmt: skip
def test_the_gpus_logged_are_the_jobs(gpus, environ, ids):
    assert job_gpus(gpus, environ) == ids


@pytest.mark.timeout(90)
def test_a_launch_with_paddles_enable_gpu_log_writes_job_id_gpu_log(tmp_path, smi_path):
    """The worker runs until the launcher's GPU log has two rows, then exits."""
    worker = tmp_path / "w.py"
    worker.write_text(
        "import sys, time\n"
        "end = time.monotonic() + 30\n"
        "while time.monotonic() < end:\n"
        "    lines = open(sys.argv[1]).read().splitlines()\n"
        "    if len(lines) >= 9: break\n"
        "    time.sleep(0.05)\n"
    )
    log = tmp_path / "log" / "j1.gpu.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PADDLE_"))}
    env.update(smi_path, PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="1,0")
    run = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp_path / "log"),
         "--job_id", "j1", "--enable_gpu_log", "True", "--gpu_log_interval", "0.1",
         str(worker), str(log)],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = log.read_text().splitlines()
    assert lines[-1].startswith("1, 12, 81559") and len(lines) >= 9
    assert "-i 1,0" in Path(smi_path["SMI_CALLS"]).read_text()
