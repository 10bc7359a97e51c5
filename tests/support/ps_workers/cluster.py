"""A test-only PS job spawner: servers and trainers as real processes on 127.0.0.1.

It gives every process the environment contract the launcher gives (role, server and
trainer lists, ids, POD_IP/PADDLE_PORT), with ports from tests/support/fixed_ports.py, and
kills whatever is still running when the test ends, pass or fail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.fixed_ports import fixed_ports

REPO = Path(__file__).resolve().parents[3]
WORKERS = Path(__file__).resolve().parent


def free_ports(n: int) -> list[int]:
    """`n` ports no other test or launcher is handed before our servers bind them."""
    start = fixed_ports(n)
    return list(range(start, start + n))


@dataclass
class Job:
    servers: list[subprocess.Popen[bytes]]
    trainers: list[subprocess.Popen[bytes]]
    logs: dict[str, Path]
    server_endpoints: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def wait_trainers(self, timeout: float) -> list[int]:
        codes = []
        for i, p in enumerate(self.trainers):
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"trainer {i} still running:\n{self.log(f't{i}')}") from None
        return codes

    def wait_servers(self, timeout: float) -> list[int]:
        codes = []
        for i, p in enumerate(self.servers):
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"server {i} still running:\n{self.log(f's{i}')}") from None
        return codes

    def check(self, timeout: float = 60) -> None:
        """Every trainer and then every server exits 0, else fail with their logs."""
        codes = self.wait_trainers(timeout)
        for i, c in enumerate(codes):
            assert c == 0, f"trainer {i} exited {c}:\n{self.log(f't{i}')}"
        for i, c in enumerate(self.wait_servers(timeout)):
            assert c == 0, f"server {i} exited {c}:\n{self.log(f's{i}')}"


def base_env(server_eps: Sequence[str], trainer_eps: Sequence[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE", "TRAINING_ROLE"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), str(WORKERS)]),
        PADDLE_PSERVERS_IP_PORT_LIST=",".join(server_eps),
        PADDLE_TRAINER_ENDPOINTS=",".join(trainer_eps),
        PADDLE_TRAINERS_NUM=str(len(trainer_eps)),
    )
    return env


def start_server(
    script: Path, args: Sequence[str], env: dict[str, str], index: int, endpoint: str, log: Path
) -> subprocess.Popen[bytes]:
    ip, port = endpoint.rsplit(":", 1)
    e = dict(env, TRAINING_ROLE="PSERVER", PADDLE_ROLE="PSERVER", POD_IP=ip, PADDLE_PORT=port)
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            env=e,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_trainer(
    script: Path, args: Sequence[str], env: dict[str, str], index: int, log: Path
) -> subprocess.Popen[bytes]:
    e = dict(env, TRAINING_ROLE="TRAINER", PADDLE_ROLE="TRAINER", PADDLE_TRAINER_ID=str(index))
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            env=e,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    p.wait(30)


@contextlib.contextmanager
def ps_job(
    tmp: Path,
    script: str | Path,
    args: Sequence[str] = (),
    servers: int = 2,
    trainers: int = 2,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Job]:
    """Start `servers` servers and `trainers` trainers of `script`; kill leftovers at exit."""
    script = Path(script) if Path(script).is_absolute() else WORKERS / script
    ports = free_ports(servers + trainers)
    server_eps = [f"127.0.0.1:{p}" for p in ports[:servers]]
    trainer_eps = [f"127.0.0.1:{p}" for p in ports[servers:]]
    env = base_env(server_eps, trainer_eps)
    env.update(extra_env or {})
    job = Job([], [], {}, server_eps, env)
    try:
        for i, ep in enumerate(server_eps):
            job.logs[f"s{i}"] = tmp / f"serverlog.{i}"
            job.servers.append(start_server(script, args, env, i, ep, job.logs[f"s{i}"]))
        for i in range(trainers):
            job.logs[f"t{i}"] = tmp / f"workerlog.{i}"
            job.trainers.append(start_trainer(script, args, env, i, job.logs[f"t{i}"]))
        yield job
    finally:
        for p in job.trainers + job.servers:
            kill(p)


def launch_ps(
    tmp: Path,
    script: str | Path,
    args: Sequence[str] = (),
    servers: int = 2,
    workers: int = 2,
    extra_env: dict[str, str] | None = None,
    timeout: float = 90,
) -> subprocess.CompletedProcess[str]:
    """Run `script` under the real launcher in PS mode; the log directory is tmp/log."""
    script = Path(script) if Path(script).is_absolute() else WORKERS / script
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE", "TRAINING_ROLE"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(WORKERS)])
    env.update(extra_env or {})
    cmd = [
        sys.executable,
        "-m",
        "paddlike.launch",
        "--server_num",
        str(servers),
        "--worker_num",
        str(workers),
        "--log_dir",
        str(tmp / "log"),
        str(script),
        *args,
    ]
    return subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=timeout)


def logs_of(tmp: Path) -> str:
    """Every log file of a launched job, for assertion messages."""
    return "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')}"
        for p in sorted((tmp / "log").glob("*log.*"))
    )


@contextlib.contextmanager
def serving(tmp: Path, servers: int, trainers: int = 1) -> Iterator[Job]:
    """Only the servers of a job (serve.py); the test process plays the trainers.

    `job.env` plus TRAINING_ROLE=TRAINER and PADDLE_TRAINER_ID is a trainer's environment.
    """
    ports = free_ports(servers + trainers)
    server_eps = [f"127.0.0.1:{p}" for p in ports[:servers]]
    env = base_env(server_eps, [f"127.0.0.1:{p}" for p in ports[servers:]])
    job = Job([], [], {}, server_eps, env)
    try:
        for i, ep in enumerate(server_eps):
            job.logs[f"s{i}"] = tmp / f"serverlog.{i}"
            job.servers.append(
                start_server(WORKERS / "serve.py", [], env, i, ep, job.logs[f"s{i}"])
            )
        yield job
    finally:
        for p in job.servers:
            kill(p)


def trainer_env(job: Job, trainer_id: int = 0) -> dict[str, str]:
    return dict(job.env, TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID=str(trainer_id))
