"""Starting one worker: its own session, a parent-death signal, its log file as output.

start(spec, env, log, preexec) -> Popen       (own process group: teardown reaches
                                               grandchildren; PR_SET_PDEATHSIG: a
                                               SIGKILLed launcher takes it along)
exit_status(pidfd) -> code                     (Popen's form, read without reaping)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Mapping

from paddlike.launch.run.affinity import bound_preexec

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.plan import ProcessSpec
    from paddlike.launch.run.logdir import WorkerLog


def start(
    spec: ProcessSpec, env: Mapping[str, str], log: WorkerLog, preexec: Callable[[], None]
) -> subprocess.Popen[bytes]:
    """Start `spec` with stdout/stderr on its log; raises OSError when it cannot start."""
    return subprocess.Popen(
        list(spec.argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log.stdout,
        stderr=log.stderr,
        start_new_session=True,  # own process group: teardown reaches grandchildren
        preexec_fn=bound_preexec(spec, preexec),  # --numa_binding's CPUs and memory, if any
        close_fds=True,
    )


def note_start_failure(log: WorkerLog, spec: ProcessSpec, exc: OSError) -> int:
    """Write why `spec` could not start into its log; return the shell's exit code for it
    (127: not found, 126: not executable)."""
    message = f"paddlike.launch: cannot start {spec.label}: {exc}\n"
    with contextlib.suppress(OSError):
        os.write(log.stderr, message.encode())
    return 127 if isinstance(exc, FileNotFoundError) else 126


def exit_status(pidfd: int) -> int:
    """The exited child's status in Popen's form (negative: killed by that signal),
    read without reaping it (WNOWAIT: a zombie keeps its process-group id in use)."""
    info = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)
    if info is None:  # not exited after all (cannot happen for a readable pidfd)
        raise ChildProcessError(f"pidfd {pidfd} readable but the child has not exited")
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def signal_group(pgid: int, sig: int) -> None:
    """Signal a whole process group; one that is gone already is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
