"""--dry_run of a cluster start: what would run where, secrets shown as `<hidden>`.

ssh: each host's ssh command line, then the script its /bin/sh would read on its stdin,
each line under ``[host]``. pdsh: its one command line, then each host's script that the
check would write to its run file. Slurm: srun's line, after the variables of its
environment. A carried variable's value and the token are never printed (paddlike's own
variables, `remote.OWN_SHOWN`, are: none is a secret).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from paddlike.launch.cluster import pdsh, remote, ssh
from paddlike.launch.cluster.remote import HIDDEN, RemoteJob


def shell_line(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def srun_line(argv: Sequence[str], job: RemoteJob) -> str:
    """srun's command line, after the variables it is given in its environment."""
    names = " ".join(
        shlex.quote(f"{name}={value}") if name in remote.OWN_SHOWN else f"{name}={HIDDEN}"
        for name, value in job.environment.items()
    )
    return f"{names} {shell_line(argv)}" if names else shell_line(argv)


def _script_lines(host: str, script: str) -> list[str]:
    return [f"[{host}]   {line}" for line in script.splitlines()]


def print_commands(job: RemoteJob, launcher: str, base: Sequence[str], tag: str) -> None:
    """Each host's ssh command and script, or pdsh's one command and the hosts' scripts."""
    lines = []
    if launcher == "pdsh":
        env = pdsh.pdsh_environment({}, base)
        lines.append(
            f"PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS={shlex.quote(env['PDSH_SSH_ARGS'])} "
            + shell_line(pdsh.pdsh_argv(job, tag))
        )
        for i, host in enumerate(job.hosts):
            path = pdsh.run_file(tag, host)
            lines.append(f"[{host}] {path} (mode 0600, written by the check over ssh):")
            lines += _script_lines(host, remote.host_script(job, i, hide=True))
    else:
        for i, host in enumerate(job.hosts):
            lines.append(f"[{host}] {shell_line(ssh.session_argv(base, host))} <<'SCRIPT'")
            lines += _script_lines(host, remote.gated_script(job, i, hide=True))
            lines.append(f"[{host}] SCRIPT")
    print("\n".join(lines), flush=True)
