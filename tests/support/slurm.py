"""A real Slurm for the tests: slurmctld in one namespace node, a slurmd in each of the
others, one munged for all of them.

Slurm's own environment (SLURM_JOB_NODELIST, SLURM_NODEID, ...) and its signals
(`scancel`, `--signal`) are what a launcher under Slurm must read and survive; setting
`SLURM_*` by hand tests only what the test's author believed Slurm sets. Every daemon runs
where a site would have it: slurmctld on the controller's address, each slurmd on its
node's (`slurmd -N NAME`, so that several share this machine, each with its own spool,
pid and log under one temporary directory). munged's socket is a file, so one munged
(outside every namespace, no network) serves them all. Clients (`srun`, `sbatch`,
`scancel`, `sinfo`) run in the controller's namespace with ``SLURM_CONF`` set.

`slurm_cluster` is a context manager: it skips (with the reason) where Slurm cannot
start here, waits for every node to be idle with a deadline, and on exit kills every
daemon and job in every namespace and removes its files.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.netns import Cluster, Node, netns_cluster, skip_without_netns

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")
CLIENTS = ("srun", "sbatch", "scancel", "sinfo", "squeue")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
CONTROLLER = "slurmctl"
START_DEADLINE = 60.0
# What slurmd's cgroup detection looks at, mounted in its own mount namespace (see below)
CGROUP_MOUNTS = (
    "mount -t tmpfs -o mode=755 plkcg /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd && "
    "mount -t cgroup -o none,name=systemd plkcg /sys/fs/cgroup/systemd"
)


def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in SBIN:
        path = Path(folder) / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def slurm_unavailable_reason() -> str | None:
    """Why a Slurm cluster cannot be started here, or None when it can be tried."""
    if os.geteuid() != 0:
        return "a test Slurm cluster needs root (slurmd, network namespaces)"
    missing = [n for n in (*DAEMONS, *CLIENTS) if _which(n) is None]
    if missing:
        return f"Slurm or munge is not installed (missing: {', '.join(missing)})"
    return None


@dataclass
class SlurmCluster:
    """A running Slurm: the controller's namespace node, the compute nodes, the config."""

    net: Cluster
    controller: Node
    nodes: list[Node]
    conf: Path
    root: Path
    partition: str = "test"
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment of every Slurm command: this cluster's config, nothing of the
        test process's own Slurm job (if the suite itself runs under one)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def command(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a client (`sinfo`, `sbatch`, `scancel`, ...) in the controller's namespace."""
        return self.controller.run(
            argv,
            timeout=timeout,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
        )

    def popen(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None, **kwargs
    ) -> subprocess.Popen[bytes]:
        """Start a client (`srun`) in the controller's namespace; killed at the end."""
        return self.controller.popen(argv, env={**self.env, **(env or {})}, **kwargs)

    def node_states(self) -> dict[str, str]:
        """Each compute node's state as sinfo says it ("idle", "alloc", "down*", ...)."""
        out = self.command(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=15)
        states = {}
        for line in out.stdout.splitlines():
            name, _, state = line.strip().partition(" ")
            states[name] = state
        return states

    def wait_idle(self, deadline: float) -> None:
        """Until every compute node is idle (no job left on it); AssertionError at the
        deadline naming the nodes and their states."""
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                states = self.node_states()
            if len(states) == len(self.nodes) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.2)  # sinfo asks slurmctld; there is nothing to wait on
        raise AssertionError(f"Slurm nodes not idle in time: {states}; {self.logs_tail()}")

    def logs_tail(self, lines: int = 15) -> str:
        """The end of every daemon's log, for a failure message."""
        parts = []
        for log in sorted(self.root.glob("**/*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def job_processes(self) -> dict[str, list[str]]:
        """Processes of jobs still alive in each compute namespace (not the daemons): the
        command lines of everything but slurmd and munged."""
        left: dict[str, list[str]] = {}
        for node in self.nodes:
            pids = subprocess.run(
                ["ip", "netns", "pids", node.netns], capture_output=True, text=True, timeout=15
            ).stdout.split()
            for pid in pids:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                text = cmd.decode(errors="replace").strip()
                if text and not text.startswith(("slurmd", "/usr/sbin/slurmd")):
                    left.setdefault(node.hostname, []).append(f"{pid}: {text}")
        return left


    def job_processes_left(self, timeout: float = 15.0) -> dict[str, list[str]]:
        """`job_processes` once those found have exited, or what is left at `timeout`:
        Slurm's slurmstepd tidies up for a moment after srun returns. Waits on each
        process's pidfd (they work across network namespaces), never for time."""
        deadline = time.monotonic() + timeout
        while left := self.job_processes():
            fds = []
            for entry in (e for entries in left.values() for e in entries):
                with contextlib.suppress(ProcessLookupError):
                    fds.append(os.pidfd_open(int(entry.split(":", 1)[0])))
            try:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return left
                if fds:
                    select.select(fds, [], [], wait)  # until one of them exits
            finally:
                for fd in fds:
                    os.close(fd)
        return {}

def _hardware() -> str:
    """This machine's CPUs as slurmd counts them (`slurmd -C`): a node whose config differs
    from its hardware is drained."""
    out = subprocess.run(
        [_which("slurmd") or "slurmd", "-C"], capture_output=True, text=True, timeout=30
    ).stdout
    words = out.split()
    wanted = ("CPUs=", "Boards=", "SocketsPerBoard=", "CoresPerSocket=", "ThreadsPerCore=")
    found = [w for w in words if w.startswith(wanted)]
    return " ".join(found) if found else f"CPUs={os.cpu_count() or 1}"


def _conf(root: Path, controller: Node, nodes: Sequence[Node], partition: str) -> str:
    hardware = _hardware()
    names = ",".join(n.hostname for n in nodes)
    lines = [
        "ClusterName=paddliketest",
        # slurmctld starts only on a host its config names: this machine, at the
        # controller namespace's address
        f"SlurmctldHost={socket.gethostname().split('.')[0]}({controller.addr})",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={root / 'ctld' / 'state'}",
        f"SlurmctldPidFile={root / 'ctld' / 'slurmctld.pid'}",
        f"SlurmctldLogFile={root / 'ctld' / 'slurmctld.log'}",
        # %n: each slurmd's own node name, so that several share one machine
        f"SlurmdSpoolDir={root / 'nodes' / '%n' / 'spool'}",
        f"SlurmdPidFile={root / 'nodes' / '%n' / 'slurmd.pid'}",
        f"SlurmdLogFile={root / 'nodes' / '%n' / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "SelectType=select/linear",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/builtin",
        "ReturnToService=2",
        "PropagateResourceLimits=NONE",
        # a job's SIGTERM before its SIGKILL: short, so that a scancel test ends quickly
        # but the launcher's own teardown (SIGTERM, grace, SIGKILL) fits inside it
        "KillWait=10",
        "MinJobAge=2",
        "InactiveLimit=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "MessageTimeout=10",
        "TreeWidth=64",
    ]
    for node in nodes:
        lines.append(
            f"NodeName={node.hostname} NodeAddr={node.addr} {hardware} RealMemory=100 State=UNKNOWN"
        )
    lines.append(f"PartitionName={partition} Nodes={names} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _start_munged(root: Path, daemons: list[subprocess.Popen[bytes]]) -> None:
    folder = root / "munge"
    folder.mkdir()
    folder.chmod(0o711)  # munged: the socket's folder searchable by all, writable by none
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = folder / "munge.socket"
    log = open(folder / "munged.log", "wb")  # noqa: SIM115 (the daemon's, closed below)
    try:
        proc = subprocess.Popen(
            [
                _which("munged") or "munged",
                "--foreground",
                "--force",
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--pid-file={folder / 'munged.pid'}",
                f"--seed-file={folder / 'munged.seed'}",
                f"--log-file={folder / 'munged.log'}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()
    daemons.append(proc)
    deadline = time.monotonic() + 15
    while not socket_path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            text = (folder / "munged.log").read_text(errors="replace")[-800:]
            pytest.skip(f"munged did not start (exit {proc.poll()}): {text}")
        time.sleep(0.05)  # a daemon's socket file: nothing to wait on before it exists


def _daemon(node: Node, argv: Sequence[str], env: Mapping[str, str], log: Path):
    out = open(log, "wb")  # noqa: SIM115 (the daemon's, closed below)
    try:
        return node.popen(argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT)
    finally:
        out.close()


@contextlib.contextmanager
def slurm_cluster(n_nodes: int) -> Iterator[SlurmCluster]:
    """slurmctld on node `slurmctl`, slurmd on `sn0..sn{n-1}`; yields once every node is
    idle. Skips with the reason where Slurm cannot start here."""
    reason = slurm_unavailable_reason()
    if reason:
        pytest.skip(reason)
    skip_without_netns()
    names = [CONTROLLER, *(f"sn{i}" for i in range(n_nodes))]
    root = Path(tempfile.mkdtemp(prefix="plk-slurm-"))
    root.chmod(0o711)  # munged refuses a socket in a folder others cannot search
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        with netns_cluster(n_nodes + 1, hostnames=names) as net:
            controller, nodes = net.nodes[0], net.nodes[1:]
            _start_munged(root, daemons)
            for sub in ("ctld/state", *(f"nodes/{n.hostname}/spool" for n in nodes)):
                (root / sub).mkdir(parents=True)
            conf = root / "slurm.conf"
            conf.write_text(_conf(root, controller, nodes, "test"))
            cluster = SlurmCluster(net, controller, nodes, conf, root, daemons=daemons)
            env = cluster.env
            _daemon(
                controller,
                [_which("slurmctld") or "slurmctld", "-D", "-c", "-i"],
                env,
                root / "ctld" / "stdout.txt",
            )
            for node in nodes:
                # `ip netns exec` mounts a fresh /sys, without the cgroup tree slurmd looks
                # for; a tmpfs there (in that command's own mount namespace, gone with it)
                # makes it find cgroup v1 with nothing to manage (task/none, proctrack/pgid)
                slurmd = f"{_which('slurmd') or 'slurmd'} -D -N {node.hostname}"
                _daemon(
                    node,
                    ["sh", "-c", f"{CGROUP_MOUNTS} && exec {slurmd}"],
                    env,
                    root / "nodes" / node.hostname / "stdout.txt",
                )
            try:
                cluster.wait_idle(time.monotonic() + START_DEADLINE)
            except AssertionError as exc:
                pytest.skip(f"the test Slurm cluster did not start: {exc}")
            try:
                yield cluster
            finally:
                _stop_all(cluster)
    finally:
        for proc in daemons:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def _stop_all(cluster: SlurmCluster) -> None:
    """Jobs cancelled, then every process of every namespace killed (netns_cluster does
    the latter too; the jobs first, so that no step outlives its slurmd's log)."""
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        cluster.command(["scancel", "--full", "--partition", cluster.partition], timeout=15)
    for node in (cluster.controller, *cluster.nodes):
        pids = subprocess.run(
            ["ip", "netns", "pids", node.netns], capture_output=True, text=True, timeout=15
        ).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
