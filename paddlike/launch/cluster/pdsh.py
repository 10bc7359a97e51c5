"""pdsh as the remote starter: one pdsh for every host, over ssh (its `ssh` rcmd).

pdsh cannot give its hosts a stdin, and its command is in its argv (and each ssh's) for
every local user to see; so the check (`ssh.preflight`, over ssh, the script on its stdin)
writes each host's script to a file only its owner can read, in the login directory
there, and pdsh's one command runs it:

    exec /bin/sh .paddlike-run-<random>-%h.sh       (pdsh puts each host's name for %h)

The script removes its file as it starts; the starter removes any that are left (a host
that failed its check, a pdsh that never started). The command is the same words in
every login shell (sh, bash, fish, tcsh), and no secret is in any argv.

Its ssh uses our options (PDSH_SSH_ARGS: the master connections the preflight opened),
`-S` makes pdsh exit with the largest exit code of the hosts, and its ``host: line``
output is shown as ``[host] line`` like the ssh launcher's. pdsh keeps each ssh's stdin
open while it runs: killing pdsh closes them, which ends every host's launcher
(`eofwatch`).
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Mapping, Sequence

from paddlike.launch.cluster.remote import NO_RUN_FILE, RemoteJob, check_command, host_script
from paddlike.launch.context.options.record import UsageError

PDSH = "pdsh"
# the names pdsh's %h may stand for in a file name, in every shell, without quotes
SAFE_HOST = re.compile(r"[A-Za-z0-9_.:][A-Za-z0-9_.:-]*")


def run_tag() -> str:
    """The random part of this job's run files' names."""
    return secrets.token_hex(8)


def run_file(tag: str, host: str) -> str:
    """A host's run file, relative to the login directory there."""
    return f".paddlike-run-{tag}-{host}.sh"


def check_hosts(job: RemoteJob) -> None:
    """pdsh names each host's run file by its name: only names that need no quoting."""
    for host in job.hosts:
        if not SAFE_HOST.fullmatch(host):
            raise UsageError(
                f"--launcher pdsh: host {host!r}: only letters, digits and . _ : - can be "
                "in a host's name with pdsh (use --launcher ssh)",
                "--launcher",
            )


def writer_script(job: RemoteJob, index: int, tag: str, script: str | None = None) -> str:
    """The check's script for one host (run by sh from its stdin, over ssh): its run file
    written, readable by its owner only and never over another file, then the check."""
    path = run_file(tag, job.hosts[index])
    body = f"rm -f -- {path}\n" + host_script(job, index)
    text = shlex.quote(body)
    write = f"(umask 077 && set -C && printf '%s' {text} > {path}) || exit {NO_RUN_FILE}"
    return f"{write}\n{check_command(job.cwd, job.python, script)}\n"


def pdsh_command(tag: str) -> str:
    """The one command pdsh runs on every host (its %h: the host's name)."""
    return f"exec /bin/sh {run_file(tag, '%h')}"


def pdsh_argv(job: RemoteJob, tag: str) -> list[str]:
    return [
        PDSH,
        "-S",
        "-f",
        str(max(32, len(job.hosts))),
        "-w",
        ",".join(job.hosts),
        pdsh_command(tag),
    ]


def pdsh_environment(environ: Mapping[str, str], ssh_base: Sequence[str]) -> dict[str, str]:
    """pdsh's own variables: its ssh and our ssh options (which it splits at spaces)."""
    env = dict(environ)
    env["PDSH_RCMD_TYPE"] = "ssh"
    env["PDSH_SSH_ARGS"] = " ".join([*ssh_base[1:], "-T", "-x", "--", "%h"])
    env.pop("PDSH_SSH_ARGS_APPEND", None)
    return env


def host_of_line(line: bytes) -> tuple[str, bytes] | None:
    """pdsh's ``host: text`` -> (host, text); None for pdsh's own lines (``pdsh@x: ...``)."""
    head, sep, rest = line.partition(b": ")
    if not sep or b"@" in head or b" " in head:
        return None
    return head.decode(errors="replace"), rest
