"""OpenSSH as the remote starter: one master connection per host, reused by every session.

The preflight (pdsh's) opens each host's master connection (ControlMaster) and runs the
check through it, all hosts at once (each host's script, `pdsh.writer_script`, on its
session's stdin, read by /bin/sh there: `remote.REMOTE_SHELL`); the job's sessions then reuse those
connections (no second handshake), and `close_masters` ends them. BatchMode: ssh never
asks a question (password, unknown host key) that nobody is there to answer; it fails,
and `ssh_failure` turns its message into one line a user acts on.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence

from paddlike.launch.cluster.remote import REMOTE_SHELL, check_failure
from paddlike.launch.cluster.stopping import spawning

SSH_FAILED = 255  # ssh's own failure (the remote command's codes are passed through)
CONNECT_TIMEOUT = 10  # seconds, the TCP connect and the handshake
# How long an idle master waits for the next session: covers the gap between the
# preflight and the job, and ends a master left behind by a starter killed with SIGKILL.
CONTROL_PERSIST = 60


def ssh_base(ssh_args: str | None, control_dir: str, port: int | None = None) -> list[str]:
    """ssh and its options; the user's --ssh_args first (ssh keeps an option's first value),
    then --ssh_port's -p (DeepSpeed's), then ours."""
    return [
        "ssh",
        *shlex.split(ssh_args or ""),
        *(["-p", str(port)] if port else []),
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={CONNECT_TIMEOUT}",
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={control_dir}/%C",
        "-o",
        f"ControlPersist={CONTROL_PERSIST}",
        "-o",
        "ServerAliveInterval=5",
        "-o",
        "ServerAliveCountMax=3",
    ]


def users_masters(ssh_args: str | None) -> bool:
    """The user named their own ControlPath (``--ssh_args='-o ControlPath=~/.ssh/cm-%C -o
    ControlPersist=1h'``): the master connections are theirs to keep between jobs (a
    later job then starts without new handshakes), and are not closed at the end."""
    return any(a.lower().startswith("controlpath=") for a in shlex.split(ssh_args or ""))


def session_argv(base: Sequence[str], host: str, command: str = REMOTE_SHELL) -> list[str]:
    """One host's session: no terminal (-T), no X11 (-x), ``--`` before the host (a name
    is never an option); the command is `REMOTE_SHELL`, the script comes on its stdin."""
    return [*base, "-T", "-x", "--", host, command]


def kill_group(proc: subprocess.Popen) -> None:
    """An ssh started in its own session, and what it started (a ProxyCommand, a Match
    exec), killed and reaped."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def ssh_failure(host: str, stderr: str) -> str:
    """ssh's complaint as one line naming the host."""
    text = stderr.strip()
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return (
            f"host {host}: its ssh host key has changed since it was recorded in known_hosts "
            f"(check why; then ssh-keygen -R {host})"
        )
    if "Host key verification failed" in text or "No ED25519 host key is known" in text:
        return (
            f"host {host}: its ssh host key is not known here (known_hosts): connect once by "
            f"hand (ssh {host}) or add it with ssh-keyscan"
        )
    if "Permission denied" in text:
        return (
            f"host {host}: ssh refused the login without a password (no key accepted): "
            f"install a key (ssh-copy-id {host}); the job cannot answer password prompts"
        )
    for words, meaning in (
        ("Could not resolve hostname", "its name does not resolve"),
        ("No route to host", "no route to it (unreachable)"),
        ("Network is unreachable", "its network is unreachable"),
        ("Connection timed out", f"no answer within {CONNECT_TIMEOUT} s (unreachable)"),
        ("Connection refused", "connection refused on the ssh port (is sshd running there?)"),
    ):
        if words in text:
            return f"host {host}: ssh: {meaning}"
    last = text.splitlines()[-1] if text else "no message"
    return f"host {host}: ssh failed: {last}"


def preflight(
    base: Sequence[str],
    hosts: Sequence[str],
    scripts: Sequence[str],
    cwd: str,
    python: str,
    timeout: float,
    script: str | None = None,
) -> list[str]:
    """Connect to every host at once (opening the master connections) and run its check
    script (given on the session's stdin); the problems, one line each in host order
    (empty: every host is ready)."""
    procs: list[subprocess.Popen[bytes]] = []
    deadline = time.monotonic() + timeout
    problems = []
    try:
        for host, text in zip(hosts, scripts, strict=True):
            read, write = os.pipe()
            try:
                with spawning():  # a signal meanwhile: raised once the Popen is kept
                    procs.append(
                        subprocess.Popen(
                            session_argv(base, host),
                            stdin=read,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            start_new_session=True,  # a Ctrl-C here is the starter's
                        )
                    )
                os.close(read)
                read = -1
                with contextlib.suppress(BrokenPipeError):  # ssh failed at once: its message
                    os.write(write, text.encode())
            finally:
                for fd in (read, write):
                    if fd >= 0:
                        os.close(fd)
        for host, proc in zip(hosts, procs, strict=True):
            try:
                _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                problems.append(f"host {host}: no answer from ssh within {timeout:g} s")
                continue
            text = err.decode(errors="replace")
            if proc.returncode == SSH_FAILED:
                problems.append(ssh_failure(host, text))
                continue
            failure = check_failure(proc.returncode, cwd, python, script)
            if failure:
                problems.append(f"host {host}: {failure}")
    finally:  # also on Ctrl-C, SIGTERM, SIGHUP: no check left running
        for proc in procs:
            kill_group(proc)
            if proc.stderr is not None:
                proc.stderr.close()
    return problems


def run_everywhere(
    base: Sequence[str], hosts: Sequence[str], commands: Sequence[str], timeout: float = 10
) -> None:
    """One short fixed command on each host (over its master connection); quietly."""
    procs = [
        subprocess.Popen(
            session_argv(base, host, command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for host, command in zip(hosts, commands, strict=True)
    ]
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            kill_group(proc)


def close_masters(
    base: Sequence[str], hosts: Sequence[str], control: str, timeout: float = 10
) -> None:
    """End each host's master connection; quietly. None when no master was opened (no
    socket in `control`): `ssh -O exit` reads the config too, Match exec included, and a
    start stopped while `ssh -G` ran would wait on that again for nothing."""
    try:
        with os.scandir(control) as entries:
            if not any(entries):
                return
    except OSError:
        return
    procs = [
        subprocess.Popen(
            [*base, "-O", "exit", "--", host],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its Match exec commands go with it
        )
        for host in hosts
    ]
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            kill_group(proc)


def connected_names(
    base: Sequence[str], hosts: Sequence[str], timeout: float = 10
) -> tuple[str, ...]:
    """The name (or address) ssh connects to for each host: `ssh -G` applies ~/.ssh/config
    (and --ssh_args' -F) as the session will, so an alias (`Host node-a` / `HostName tc0`)
    becomes tc0 in every launcher's --ips; a host ssh cannot resolve this way keeps its
    name (the check then names it). Local: no connection is made."""
    procs: list[subprocess.Popen[bytes]] = []
    names = []
    deadline = time.monotonic() + timeout
    try:
        for host in hosts:
            with spawning():  # a signal meanwhile: raised once the Popen is kept
                procs.append(
                    subprocess.Popen(
                        [*base, "-G", "--", host],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,  # its Match exec commands go with it
                    )
                )
        for host, proc in zip(hosts, procs, strict=True):
            try:
                out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                kill_group(proc)
                out, _ = proc.communicate()
            names.append(resolved_hostname(out.decode(errors="replace")) or host)
    finally:  # also on SIGTERM or SIGHUP meanwhile: nothing left running
        for proc in procs:
            kill_group(proc)
            if proc.stdout is not None:
                proc.stdout.close()
    return tuple(names)


def resolved_hostname(config: str) -> str | None:
    """The `hostname` line of `ssh -G`'s output."""
    for line in config.splitlines():
        key, _, value = line.partition(" ")
        if key.lower() == "hostname" and value.strip():
            return value.strip()
    return None
