"""pdsh as the remote starter: one pdsh for every host, over ssh (its `ssh` rcmd).

pdsh runs one command on every host, so the command picks each host's own launcher line
by the host's name (pdsh puts it in place of ``%h``):

    case %h in h0) <h0's command>;; h1) <h1's command>;; esac

Its ssh uses our options (PDSH_SSH_ARGS: the master connections the preflight opened),
`-S` makes pdsh exit with the largest exit code of the hosts, and its ``host: line``
output is shown as ``[host] line`` like the ssh launcher's. pdsh keeps each ssh's stdin
open while it runs: killing pdsh closes them, which ends every host's launcher
(`eofwatch`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from paddlike.launch.cluster.remote import RemoteJob, host_command

PDSH = "pdsh"


def pdsh_command(job: RemoteJob) -> str:
    """The one command pdsh runs on every host (``%`` doubled: pdsh's escape)."""
    cases = " ".join(
        f"{shlex.quote(host)}) {host_command(job, i).replace('%', '%%')};;"
        for i, host in enumerate(job.hosts)
    )
    return f"case %h in {cases} esac"


def pdsh_argv(job: RemoteJob) -> list[str]:
    return [
        PDSH,
        "-S",
        "-f",
        str(max(32, len(job.hosts))),
        "-w",
        ",".join(job.hosts),
        pdsh_command(job),
    ]


def pdsh_environment(environ: Mapping[str, str], ssh_base: Sequence[str]) -> dict[str, str]:
    """pdsh's own variables: its ssh and our ssh options (which it splits at spaces)."""
    env = dict(environ)
    env["PDSH_RCMD_TYPE"] = "ssh"
    env["PDSH_SSH_ARGS"] = " ".join([*ssh_base[1:], "-T", "-x", "%h"])
    env.pop("PDSH_SSH_ARGS_APPEND", None)
    return env


def host_of_line(line: bytes) -> tuple[str, bytes] | None:
    """pdsh's ``host: text`` -> (host, text); None for pdsh's own lines (``pdsh@x: ...``)."""
    head, sep, rest = line.partition(b": ")
    if not sep or b"@" in head or b" " in head:
        return None
    return head.decode(errors="replace"), rest
