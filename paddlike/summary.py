"""The run summary: the JSON file a launcher leaves in its log directory.

Written by `paddlike.launch` (at start with status "running", again at the end)
and read by `python -m paddlike.logs`. One schema, one module, so that writer and
reader cannot drift apart. The file is replaced atomically (temporary name, then
rename), so a reader never sees half a summary.

Schema (version 1) — `summary.json`:

    {
      "schema": 1,
      "job_id": "job-20261122-1058-ab12",
      "mode": "collective" | "ps",
      "status": "running" | "succeeded" | "failed" | "interrupted",
      "exit_code": 0 | null,              # the launcher's exit code, null while running
      "node_index": 0, "nnodes": 2,
      "host": "198.18.0.1",               # this node's matched address
      "hostname": "nodea",
      "log_dir": "/abs/path/log",
      "start_time": 1795000000.0,         # Unix time, seconds
      "end_time": null | float,
      "restarts": 0,                      # restart rounds this launcher ran
      "processes": [ProcessRecord, ...],  # this node's processes, last round
      "root_cause": RootCause | null      # job-wide: may name another node's process
    }

ProcessRecord: role ("trainer" | "server" | "heter"), rank (global rank within
its role; a trainer's is its PADDLE_TRAINER_ID), local_index, host, pid,
start_time, end_time, exit_code (null if killed by a signal or still running),
signal (name such as "SIGKILL", or null), status ("running" | "ok" | "failed" |
"killed" — killed means stopped by the launcher during teardown), restarts,
log_file (name relative to the log directory), endpoint.

RootCause: host, node_index, role, rank, local_index, exit_code, signal,
log_file, tail (the last lines of that log, list of str), time, duration (how
long the failed process ran), reason (one sentence:
"trainer rank 1 exited with code 3", "launcher on nodeb received SIGTERM",
"node 1 (198.18.0.2) stopped sending heartbeats").
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SUMMARY_FILE = "summary.json"
SCHEMA_VERSION = 1


@dataclass
class ProcessRecord:
    role: str
    rank: int
    local_index: int
    host: str
    log_file: str
    endpoint: str = ""
    pid: int | None = None
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    status: str = "running"
    restarts: int = 0


@dataclass
class RootCause:
    reason: str
    host: str = ""
    node_index: int | None = None
    role: str | None = None
    rank: int | None = None
    local_index: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    log_file: str | None = None
    tail: list[str] = field(default_factory=list)
    time: float | None = None  # Unix time of the failure
    duration: float | None = None  # how long the failed process ran, seconds


@dataclass
class RunSummary:
    job_id: str
    mode: str
    node_index: int
    nnodes: int
    host: str
    hostname: str
    log_dir: str
    start_time: float
    status: str = "running"
    exit_code: int | None = None
    end_time: float | None = None
    restarts: int = 0
    processes: list[ProcessRecord] = field(default_factory=list)
    root_cause: RootCause | None = None
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSummary:
        fields = dict(data)
        fields["processes"] = [ProcessRecord(**p) for p in data.get("processes", [])]
        cause = data.get("root_cause")
        fields["root_cause"] = RootCause(**cause) if cause else None
        return cls(**fields)


def write_summary(log_dir: str | os.PathLike[str], summary: RunSummary) -> Path:
    """Replace `summary.json` atomically: readers see the old or the new file."""
    path = Path(log_dir) / SUMMARY_FILE
    tmp = path.with_name(f".{SUMMARY_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_summary(log_dir: str | os.PathLike[str]) -> RunSummary | None:
    """The summary in `log_dir`, or None where there is none (e.g. Paddle's own logs)."""
    path = Path(log_dir) / SUMMARY_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return RunSummary.from_json(json.loads(text))
