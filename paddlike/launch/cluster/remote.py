"""Each host's script: the ordinary per-node launcher, as if typed on that host.

    cd /the/same/dir || exit 201
    export NAME=VALUE ...              (carried variables and PADDLIKE_JOB_TOKEN)
    exec /the/same/python -m paddlike.launch --ips h0,h1,h2 --node_rank 1 --job_id J \
        --nproc_per_node 4 <the user's options> train.py <its args>

The script is POSIX sh, run by the host's /bin/sh reading it from its stdin (ssh's fixed
remote command `REMOTE_SHELL`), never by the user's login shell: fish or tcsh there
change nothing, and no secret is in any process's argv (a variable set by `export` lives
in the environment, which only its owner can read). Every host gets the same options and
the same job id; what differs is its `--node_rank` and its own worker count
(`Pick.launcher_args`). Pure: the text is built here and printed by --dry_run (values
`HIDDEN`); `ssh`, `pdsh` and `srun` only carry it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from paddlike.contract import (
    GPUS_GIVEN_AS,
    HELD_AT_GATE,
    JOB_TOKEN_FILE,
    PREFLIGHT_CHOSEN,
    PREFLIGHT_ONLY,
    STDIN_EOF_ENDS,
)
from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.cluster.selection import Pick

# ssh's remote command, the same for every job: the login shell only starts /bin/sh,
# which reads the host's script from the session's stdin (what follows the script on that
# stdin is the launcher's: GO, then `eofwatch`'s signal lines)
REMOTE_SHELL = "exec /bin/sh -s"
HIDDEN = "<hidden>"  # a carried value or the token, as --dry_run shows it
# paddlike's own variables of a host's script: never a secret, so --dry_run shows them
OWN_SHOWN = frozenset(
    {STDIN_EOF_ENDS, HELD_AT_GATE, PREFLIGHT_ONLY, PREFLIGHT_CHOSEN, GPUS_GIVEN_AS}
)
# A gated session's word that its host passed the check and waits for GO on its stdin.
READY, GO = b"paddlike-cluster-ready\n", b"go\n"
# The check before anything starts, and what each of its exit codes means.
NO_DIRECTORY, NO_PYTHON, NO_PADDLIKE, NO_SCRIPT, NO_RUN_FILE = 201, 202, 203, 204, 205


class RemoteJob(NamedTuple):
    """What every host's launcher is given."""

    picks: tuple[Pick, ...]
    launcher_args: tuple[str, ...]  # the user's launcher options, less the cluster ones
    script: tuple[str, ...]  # the training script (or module, or command) and its args
    cwd: str
    python: str
    environment: Mapping[str, str]  # carried: env files and --export
    job_id: str
    # what each host's launcher is told in --ips: the names ssh connects to (`ssh -G`
    # resolves ~/.ssh/config aliases); empty: the hostfile's names
    addresses: tuple[str, ...] = ()
    spares: int = 0  # hosts past --num_nodes: the pre-flight check chooses (`spares`)

    @property
    def nodes(self) -> int:
        """How many of the hosts run the job (--num_nodes)."""
        return len(self.picks) - self.spares

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.picks)


def host_argv(job: RemoteJob, index: int) -> list[str]:
    """The launcher's argv on the host of node `index`."""
    script = list(job.script)
    if script and script[0].startswith("-"):
        script.insert(0, "--")
    return [
        job.python,
        "-m",
        "paddlike.launch",
        "--ips",
        ",".join(job.addresses or job.hosts),
        "--node_rank",
        str(index),
        "--job_id",
        job.job_id,
        *job.picks[index].launcher_args(),
        *job.launcher_args,
        *script,
    ]


def host_script(
    job: RemoteJob,
    index: int,
    *,
    end_on_eof: bool = True,
    held: bool = False,
    hide: bool = False,
    checks: str = "",
) -> str:
    """The sh script for one host: its directory, its environment, its launcher
    (`held`: it describes its job, says READY and waits for GO: `hold`; `hide`: the
    values of the environment shown as `HIDDEN`, for --dry_run; `checks`: lines run
    in the directory before the launcher)."""
    env = dict(job.environment)
    if end_on_eof:
        env[STDIN_EOF_ENDS] = "1"
    if held:
        env[HELD_AT_GATE] = "1"
    lines = [f"cd {shlex.quote(job.cwd)} 2>/dev/null || exit {NO_DIRECTORY}"]
    lines += checks.splitlines()
    lines.append(f"unset {JOB_TOKEN_FILE}")  # the host's own: not the job's token
    for name, value in env.items():
        hidden = hide and name not in OWN_SHOWN
        shown = f"{name}={HIDDEN}" if hidden else shlex.quote(f"{name}={value}")
        lines.append(f"export {shown}")
    lines.append("exec " + " ".join(shlex.quote(a) for a in host_argv(job, index)))
    return "\n".join(lines) + "\n"


def check_command(cwd: str, python: str, script: str | None = None) -> str:
    """The preflight: the directory, the Python, paddlike and the training script (a file,
    when it is one: not for -m or --no_python) are there (exit codes above)."""
    py = shlex.quote(python)
    found = f"[ -x {py} ]" if "/" in python else f"command -v {py} >/dev/null 2>&1"
    text = (
        f"cd {shlex.quote(cwd)} 2>/dev/null || exit {NO_DIRECTORY}; "
        f"{found} || exit {NO_PYTHON}; "
        f"{py} -c 'import paddlike.launch' 2>/dev/null || exit {NO_PADDLIKE}"
    )
    if script:
        text += f"; [ -f {shlex.quote(script)} ] || exit {NO_SCRIPT}"
    return text


def check_failure(code: int, cwd: str, python: str, script: str | None = None) -> str | None:
    """The preflight's exit code as the sentence a user acts on (None: it passed)."""
    return {
        0: None,
        NO_DIRECTORY: f"the working directory {cwd} does not exist there (the job runs "
        "in the same directory on every host)",
        NO_PYTHON: f"no Python at {python} there (give --remote_python PATH)",
        NO_PADDLIKE: f"{python} there cannot import paddlike (install it there, or give "
        "--remote_python)",
        NO_SCRIPT: f"the training script {script} is not there (in {cwd})",
        NO_RUN_FILE: "cannot write pdsh's run file in the login directory there (a full "
        "disk, or a file of that name already there)",
    }.get(code, f"the check of the directory and Python exited with {code}")


def gated_script(job: RemoteJob, index: int, script: str | None = None, hide: bool = False) -> str:
    """The check, then the launcher once every host has passed it: one session per host.

    The shell checks what it can say best (the directory, the Python, the script); then
    the host's launcher itself parses and describes its job, as it will run it, refusing
    what it would refuse (`hold`), prints `READY` and waits for one line on its stdin:
    ``go`` starts its job; end of file (another host failed its check, or Ctrl-C) ends it
    with nothing started. One Python start-up per host: the check is the launcher.
    """
    py = shlex.quote(job.python)
    found = f"[ -x {py} ]" if "/" in job.python else f"command -v {py} >/dev/null 2>&1"
    text = f"{found} || exit {NO_PYTHON}\n"
    if script:
        text += f"[ -f {shlex.quote(script)} ] || exit {NO_SCRIPT}\n"
    return host_script(job, index, held=True, hide=hide, checks=text)


def launcher_refusal(code: int, stderr: str, python: str) -> str | None:
    """A held launcher's own refusal (its one error line), or paddlike missing there."""
    if "No module named paddlike" in stderr or "No module named 'paddlike" in stderr:
        return f"{python} there cannot import paddlike (install it there, or give --remote_python)"
    errors = [line for line in stderr.splitlines() if ": error: " in line]
    if errors:
        return errors[-1].split(": error: ", 1)[1]
    return None
