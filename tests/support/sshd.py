"""A real OpenSSH server in each namespace node, with keys made for the test.

`ssh_cluster` gives every node of a `netns_cluster` its own sshd (port 22 on the node's
address, root login by key only) and writes, in a temporary directory, what a user's
~/.ssh would hold: a key pair, `known_hosts` naming every node by hostname and address,
and an ssh config (`ssh_config`) that points at them. Tests pass that config to the
launcher with ``--ssh_args=-F <ssh_config>`` (OpenSSH reads ~/.ssh from the passwd
entry, not $HOME, so a test cannot redirect it otherwise).

Everything is removed at the end, also when the test fails: each sshd is killed with the
namespace's other processes by `netns_cluster`, and here by its own process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.netns import Cluster, Node

SSHD = "/usr/sbin/sshd"


def sshd_unavailable_reason() -> str | None:
    """Why an sshd cannot be run here, or None."""
    if not os.path.exists(SSHD):
        return f"OpenSSH's server is not installed ({SSHD}; Debian: openssh-server)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"the OpenSSH client's {tool} is not installed"
    return None


@dataclass
class SshSetup:
    """The client side the test hands to the launcher."""

    directory: Path
    config: Path  # an ssh_config: identity, known_hosts, no agent, no password prompts
    known_hosts: Path
    key: Path
    daemons: dict[str, int]  # hostname -> the sshd's pid (the listener, not a session)

    @property
    def ssh_args(self) -> str:
        """The launcher's option that makes its ssh (and pdsh's) use this setup."""
        return f"--ssh_args=-F {self.config}"


def _keygen(path: Path, kind: str = "ed25519") -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _wait_listening(node: Node, proc: subprocess.Popen[bytes], deadline: float) -> None:
    """sshd is up when its port answers inside the namespace (checked from the namespace)."""
    probe = (
        "import socket,sys\n"
        "s=socket.socket(); s.settimeout(0.5)\n"
        f"sys.exit(s.connect_ex(({node.addr!r}, 22)))\n"
    )
    import sys

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd on {node.hostname} exited with {proc.returncode}")
        if node.run([sys.executable, "-c", probe], timeout=10).returncode == 0:
            return
        time.sleep(0.05)  # sshd gives no readiness signal in -D mode but its port
    raise TimeoutError(f"sshd on {node.hostname} did not listen within the deadline")


def write_sshd_config(directory: Path, node: Node, host_key: Path, authorized: Path) -> Path:
    config = directory / f"sshd_config.{node.hostname}"
    config.write_text(
        "\n".join(
            [
                "Port 22",
                f"ListenAddress {node.addr}",
                f"HostKey {host_key}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                f"AuthorizedKeysFile {authorized}",
                "StrictModes no",
                "UsePAM no",
                "PidFile none",
                "LogLevel ERROR",
                "MaxSessions 64",
                "MaxStartups 64",
                "",
            ]
        )
    )
    return config


@contextlib.contextmanager
def ssh_cluster(cluster: Cluster, nodes: Sequence[Node] | None = None) -> Iterator[SshSetup]:
    """An sshd on each of `nodes` (default: every node of `cluster`), and the client's files."""
    reason = sshd_unavailable_reason()
    if reason:
        pytest.skip(reason)
    servers = list(cluster.nodes if nodes is None else nodes)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    directory = Path(tempfile.mkdtemp(prefix="plk-ssh-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        key = directory / "id_ed25519"
        _keygen(key)
        authorized = directory / "authorized_keys"
        shutil.copy(f"{key}.pub", authorized)
        known_hosts = directory / "known_hosts"
        lines = []
        for node in servers:
            host_key = directory / f"host_key.{node.hostname}"
            _keygen(host_key)
            public = Path(f"{host_key}.pub").read_text().split()
            lines.append(f"{node.hostname},{node.addr} {public[0]} {public[1]}\n")
            config = write_sshd_config(directory, node, host_key, authorized)
            procs.append(
                node.popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
            )
        known_hosts.write_text("".join(lines))
        client = directory / "ssh_config"
        client.write_text(
            "\n".join(
                [
                    "Host *",
                    "  User root",
                    f"  IdentityFile {key}",
                    "  IdentitiesOnly yes",
                    f"  UserKnownHostsFile {known_hosts}",
                    "  GlobalKnownHostsFile /dev/null",
                    "  StrictHostKeyChecking yes",
                    "  PasswordAuthentication no",
                    "  KbdInteractiveAuthentication no",
                    "  LogLevel ERROR",
                    "",
                ]
            )
        )
        deadline = time.monotonic() + 30
        for node, proc in zip(servers, procs, strict=True):
            _wait_listening(node, proc, deadline)
        daemons = {node.hostname: proc.pid for node, proc in zip(servers, procs, strict=True)}
        yield SshSetup(client.parent, client, known_hosts, key, daemons)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
