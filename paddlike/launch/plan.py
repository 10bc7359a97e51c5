"""The plan: every process this node starts, decided without I/O.

(options, node, ports, environ) in, a frozen `LaunchPlan` out. No clock, no
filesystem, no `os.environ`: the caller passes in what the plan depends on, so the
whole thing is tested exhaustively and printed by `--dry_run`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class Role(enum.Enum):
    """What a process is in the job; the value is the name used in logs and summaries."""

    TRAINER = "trainer"
    SERVER = "server"
    HETER = "heter"

    @property
    def log_prefix(self) -> str:
        return {"trainer": "workerlog", "server": "serverlog", "heter": "heterlog"}[self.value]


@dataclass(frozen=True)
class ProcessSpec:
    """The blueprint of one process (the supervisor owns the running instance)."""

    role: Role
    rank: int  # global rank within its role; a trainer's PADDLE_TRAINER_ID
    local_index: int  # index among this node's processes of the same role (the N of the log name)
    device_ids: tuple[str, ...]  # device ids as the worker sees them ("" entries never appear)
    endpoint: str  # host:port of this process
    env: Mapping[str, str]  # variables the launcher adds on top of the inherited environment
    argv: tuple[str, ...]  # the full command line
    log_name: str  # e.g. "workerlog.0"; with --redirect_stdout_and_stderr, the stdout file
    err_log_name: str | None = None  # the stderr file with --redirect_stdout_and_stderr

    @property
    def label(self) -> str:
        return f"{self.role.value} rank {self.rank}"


@dataclass(frozen=True)
class LaunchPlan:
    """Everything one node's launcher will start, plus the job-wide facts it prints."""

    job_id: str
    run_mode: str  # "collective" | "ps"
    node_index: int
    nnodes: int
    host: str  # this node's address
    processes: tuple[ProcessSpec, ...]
    trainer_endpoints: tuple[str, ...]  # all nodes', in rank order
    server_endpoints: tuple[str, ...] = ()  # PS mode
    master: str = ""  # host:port of the workers' runtime store (PADDLE_MASTER)
