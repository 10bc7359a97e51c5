"""A test-only ps-heter job spawner: servers, CPU trainers and heter trainers on 127.0.0.1.

`heter_env` builds every process's environment exactly per issue 16's table, as a pure
function (so the launcher's plan can later be compared with it); `heter_job` starts the
processes with it, ports picked by binding port 0, and kills whatever is still running
when the test ends, pass or fail.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ps_workers.cluster import REPO, WORKERS, free_ports, kill

_OURS = ("PADDLE", "TRAINING_ROLE", "STAGE_", "HETER_", "POD_IP", "FLAGS_selected_gpus")


def heter_env(
    servers: Sequence[str],
    trainers: Sequence[str],
    stages: Sequence[Sequence[str]],
    devices: Sequence[str],
) -> dict[str, dict[str, str]]:
    """Every process's contract variables, keyed "server.N", "trainer.N", "heter.S.N".

    `stages` holds the heter stages' endpoints (stage 2 first), `devices` their device
    kind ("cpu" or "gpu"); heter trainer N of a gpu stage gets FLAGS_selected_gpus=N.
    """
    every = {
        "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(servers),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(trainers),
        "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST": ",".join(ep for s in stages for ep in s),
        "PADDLE_TRAINERS_NUM": str(len(trainers)),
        "STAGE_NUM": str(len(stages) + 1),
        "PADDLE_STAGE_TRAINERS_NUM": str([len(trainers), *(len(s) for s in stages)]),
    }

    def at(endpoint: str) -> dict[str, str]:
        ip, port = endpoint.rsplit(":", 1)
        return dict(every, POD_IP=ip, PADDLE_PORT=port)

    out: dict[str, dict[str, str]] = {}
    for i, ep in enumerate(servers):
        out[f"server.{i}"] = dict(at(ep), TRAINING_ROLE="PSERVER")
    for i, ep in enumerate(trainers):
        out[f"trainer.{i}"] = dict(
            at(ep),
            TRAINING_ROLE="TRAINER",
            PADDLE_TRAINER_ID=str(i),
            STAGE_ID="1",
            PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST="",
            PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST=",".join(stages[0]),
            HETER_DEVICE_TYPE="cpu",
        )
    for k, members in enumerate(stages):
        stage = k + 2
        previous = trainers if k == 0 else stages[k - 1]
        nxt = stages[k + 1] if k + 1 < len(stages) else []
        for i, ep in enumerate(members):
            env = dict(
                at(ep),
                TRAINING_ROLE="HETER_TRAINER",
                STAGE_ID=str(stage),
                PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST=",".join(previous),
                PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST=",".join(nxt),
                HETER_DEVICE_TYPE=devices[k],
            )
            if devices[k] == "gpu":
                env["FLAGS_selected_gpus"] = str(i)
            out[f"heter.{stage}.{i}"] = env
    return out


@dataclass
class HeterJob:
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)

    def log(self, name: str) -> str:
        path = self.logs[name]
        return path.read_text(errors="replace") if path.exists() else "(not started)"

    def all_logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)}" for n in self.logs)

    def wait(self, name: str, timeout: float) -> int:
        try:
            return self.procs[name].wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{name} still running after {timeout} s:\n{self.all_logs()}"
            ) from None

    def check(self, timeout: float = 60) -> None:
        """Every trainer, then every heter trainer, then every server exits 0."""
        rank = {"trainer": 0, "heter": 1, "server": 2}
        for name in sorted(self.procs, key=lambda n: rank[n.split(".")[0]]):
            code = self.wait(name, timeout)
            assert code == 0, f"{name} exited {code}:\n{self.all_logs()}"


@contextlib.contextmanager
def heter_job(
    tmp: Path,
    script: str | Path,
    args: Sequence[str] = (),
    servers: int = 1,
    trainers: int = 2,
    stages: Sequence[int] = (1,),
    extra_env: Mapping[str, str] | None = None,
    skip: Sequence[str] = (),
) -> Iterator[HeterJob]:
    """Start a job of `script`: `servers` servers, `trainers` CPU trainers, `stages[k]` heter
    trainers in stage k+2 (all cpu); `skip` names processes not to start (they never come)."""
    script = Path(script) if Path(script).is_absolute() else WORKERS / script
    ports = [f"127.0.0.1:{p}" for p in free_ports(servers + trainers + sum(stages))]
    server_eps, ports = ports[:servers], ports[servers:]
    trainer_eps, ports = ports[:trainers], ports[trainers:]
    stage_eps = []
    for n in stages:
        stage_eps.append(ports[:n])
        ports = ports[n:]
    base = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    base["PYTHONPATH"] = os.pathsep.join([str(REPO), str(WORKERS)])
    base.update(extra_env or {})
    job = HeterJob(envs=heter_env(server_eps, trainer_eps, stage_eps, ["cpu"] * len(stages)))
    counters = {"server": 0, "trainer": 0, "heter": 0}  # log files numbered per role
    files = {"server": "serverlog", "trainer": "workerlog", "heter": "heterlog"}
    try:
        for name, env in job.envs.items():
            role = name.split(".")[0]
            job.logs[name] = tmp / f"{files[role]}.{counters[role]}"
            counters[role] += 1
            if name in skip:
                continue
            with job.logs[name].open("wb") as out:
                job.procs[name] = subprocess.Popen(
                    [sys.executable, str(script), *args],
                    env={**base, **env},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        yield job
    finally:
        for p in job.procs.values():
            kill(p)
