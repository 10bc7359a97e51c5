"""Paddle's --enable_gpu_log (--gpu_log_interval S): the job's GPU use, one row per GPU
every S seconds, in ``<log_dir>/<job id>.gpu.log``, as Paddle's launcher writes it.

The file, in Paddle's layout (its launch/controllers/watcher.py), from nvidia-smi's CSV:

    index,uuid,driver_version,name,gpu_serial,display_active,display_mode
    0, GPU-..., 550.54, NVIDIA H100 80GB HBM3, ..., Disabled, Enabled
    <blank line>
    pid,process_name,gpu_uuid,gpu_name,used_memory
    ...
    <blank line>
    index,utilization_gpu,memory_total,memory_used,memory_free,timestamp
    0, 87, 81559, 40211, 41348, 2026/11/25 23:59:01.123     (every S seconds)

Which GPUs: --gpus, else CUDA_VISIBLE_DEVICES's entries (nvidia-smi -i takes indices and
UUIDs alike), else every GPU nvidia-smi sees. A thread of its own, started when the job
starts and stopped when it ends (an event, not a sleep, paces it); each nvidia-smi has a
deadline. Without nvidia-smi the file holds one line saying so (no rows) and the console
warns once, naming the option the user gave: the job runs on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from paddlike.logformat import append_fd

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

    from paddlike.launch.console.output import Console
    from paddlike.launch.run.runspec import GpuLogSpec

INFO_FIELDS = "index,uuid,driver_version,name,serial,display_active,display_mode"
INFO_HEADER = "index,uuid,driver_version,name,gpu_serial,display_active,display_mode"
PROCESS_FIELDS = "pid,process_name,gpu_uuid,gpu_name,used_memory"
USE_FIELDS = "index,utilization.gpu,memory.total,memory.used,memory.free,timestamp"
USE_HEADER = "index,utilization_gpu,memory_total,memory_used,memory_free,timestamp"
NVIDIA_SMI = "nvidia-smi"
CALL_DEADLINE = 10.0  # seconds one nvidia-smi may take


def gpu_log_name(job_id: str) -> str:
    """Paddle's name for the file: <job id>.gpu.log, in the log directory."""
    return f"{job_id}.gpu.log"


def job_gpus(gpus: Sequence[str] | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The GPUs to log as nvidia-smi -i takes them; () for every GPU."""
    if gpus:
        return tuple(gpus)
    visible = environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return tuple(t.strip() for t in visible.split(",") if t.strip()) if visible else ()


class GpuLog:
    """The writer thread; `stop` ends it (at once: it waits on an event between rows)."""

    def __init__(
        self,
        path: str,
        interval: float,
        gpus: Sequence[str],
        environ: Mapping[str, str],
        warn: Callable[[str], None],
        name: str = "--gpu_log_interval",
    ) -> None:
        self.name = name  # the option as the user gave it: --enable_gpu_log, PADDLIKE_...
        self.path = path
        self.interval = interval
        self.gpus = tuple(gpus)
        self.environ = dict(environ)
        self.warn = warn
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._write, name="paddlike-gpu-log", daemon=True)

    def start(self) -> GpuLog:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(CALL_DEADLINE + 1)

    def _query(self, what: str, fields: str) -> list[str] | None:
        """nvidia-smi's CSV rows (no header, no units), or None after saying why."""
        command = [self.smi, f"--query-{what}={fields}", "--format=csv,noheader,nounits"]
        if self.gpus and what == "gpu":
            command += ["-i", ",".join(self.gpus)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=CALL_DEADLINE, env=self.environ
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._note(f"nvidia-smi failed: {exc}")
            return None
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()
            self._note(f"nvidia-smi exited {done.returncode}: {why[-1] if why else ''}")
            return None
        return [line.strip() for line in done.stdout.splitlines() if line.strip()]

    def _append(self) -> TextIO:
        """The log opened for append, never through a link (the log directory may be shared)."""
        return open(append_fd(Path(self.path)), "a", encoding="utf-8")

    def _note(self, line: str) -> None:
        with self._append() as f:
            f.write(f"# {line}\n")

    def _write(self) -> None:
        found = shutil.which(NVIDIA_SMI, path=self.environ.get("PATH"))
        try:
            if found is None:
                self._note("nvidia-smi not found on PATH: no GPU rows")
                self.warn(
                    f"{self.name}: nvidia-smi not found on PATH; {self.path} holds only "
                    "that note, no GPU rows"
                )
                return
            self.smi = found
            self._header()
            while not self.stopped.is_set():
                rows = self._query("gpu", USE_FIELDS)
                if rows is not None:
                    with self._append() as f:
                        f.write("".join(row + "\n" for row in rows))
                self.stopped.wait(self.interval)
        except OSError as exc:  # the log directory's disk: the job runs on without its log
            self.warn(f"{self.name}: cannot write {self.path} ({exc}); GPU log stopped")

    def _header(self) -> None:
        info = self._query("gpu", INFO_FIELDS) or []
        procs = self._query("compute-apps", PROCESS_FIELDS) or []
        with self._append() as f:
            f.write("".join(line + "\n" for line in (INFO_HEADER, *info, "")))
            f.write("".join(line + "\n" for line in (PROCESS_FIELDS, *procs, "")))
            f.write(USE_HEADER + "\n")


@contextmanager
def gpu_log(
    interval: float | None,
    log_dir: str | os.PathLike[str],
    job_id: str,
    gpus: Sequence[str],
    environ: Mapping[str, str],
    warn: Callable[[str], None],
    name: str = "--gpu_log_interval",
) -> Iterator[GpuLog | None]:
    """The GPU log while the block runs (the job's rounds); nothing when `interval` is None.
    `name`: the option as the user gave it, for the warnings."""
    if interval is None:
        yield None
        return
    path = os.path.join(os.fspath(log_dir), gpu_log_name(job_id))
    log = GpuLog(path, interval, gpus, environ, warn, name).start()
    try:
        yield log
    finally:
        log.stop()


def job_gpu_log(
    spec: GpuLogSpec,
    environ: Mapping[str, str],
    log_dir: str | os.PathLike[str],
    job_id: str,
    console: Console,
) -> AbstractContextManager[object]:
    """Paddle's --enable_gpu_log (--gpu_log_interval): <job id>.gpu.log while the job runs,
    for GPU jobs; one line for CPU workers."""
    if spec.cpu_workers:
        console.say(f"{spec.named}: CPU workers, no GPU log")
        return nullcontext()
    gpus = job_gpus(spec.gpus, environ)
    return gpu_log(spec.interval, log_dir, job_id, gpus, environ, console.warn, spec.named)
