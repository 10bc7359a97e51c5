"""Signals to the launcher: which end the job, which go on to the workers, which take
stacks.

    signal                               what the launcher does
    SIGINT, SIGTERM, SIGHUP, SIGQUIT     ends the job: 130, 143, 129 or 131, the other nodes
                                         told (SIGINT goes on to this node's workers as
                                         SIGINT first: `run.teardown`); listed in
                                         --signals_to_handle or not (a SIGQUIT unhandled
                                         would dump the launcher's core and leave its
                                         workers without a report)
    SIGHUP, when started ignored         stays ignored, the workers' too (`nohup ... &`:
                                         the job outlives the terminal; `kept_ignored`)
    SIGUSR1 under Slurm, by default      a preemption notice, as SIGTERM (`sbatch
                                         --signal=USR1@90`: Slurm's warning): every rank
                                         saves the job's stop step; exit 138
    others in --signals_to_handle        passed on to every running worker; the job goes on
      (default under Slurm: SIGUSR2)
    STACKS_SIGNAL (SIGRTMIN+4)           writes the stacks of the workers (what
                                         `python -m paddlike.logs --stacks` sends)
    SIGUSR1, unless passed on            the same (the older trigger)

Under Slurm with cgroup process tracking, Slurm signals every process of the step itself,
the workers included: a signal passed on would arrive twice, so there it is not
(`slurm_reaches_workers`).

Two regimes, never both at once, both installed in the main thread only:

- while workers run, `signals_to_pipe` routes the signals into a pipe that the
  supervisor's event loop watches, and the supervisor tears the round down, passes the
  signal on or takes the stacks;
- anywhere else (opening the log directory, connecting to node 0's store, the
  rendezvous, waiting for the other nodes to finish), `signals_raise` makes the ending
  ones raise `LauncherSignal`, which the job pipeline turns into one line and an exit
  code; the others are noted and dropped (there are no workers to pass them to).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator, Mapping

from paddlike.launch import HANGUP_IGNORED, NamedTuple

# Always handled. SIGQUIT is among them whatever --signals_to_handle says: its default
# action kills the launcher with a core dump, with no summary and no word to the other
# nodes, which is never what a user sending it wants.
LAUNCHER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# Stacks on request: a real-time signal that nothing else sends, so that a scheduler's
# SIGUSR1 (Slurm's warning before a time limit) can be the workers' without a collision.
STACKS_SIGNAL = signal.SIGRTMIN + 4
STACKS_SIGNAL_NAME = "SIGRTMIN+4"
# SIGUSR1: the older trigger for stacks, while it is not passed on to the workers.
DUMP_SIGNAL = signal.SIGUSR1
# torchrun's default --signals_to_handle; Slurm jobs pass SIGUSR1 and SIGUSR2 on too.
TORCHRUN_DEFAULT = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
SLURM_DEFAULT = (*TORCHRUN_DEFAULT, signal.SIGUSR1, signal.SIGUSR2)
_ENDING = frozenset({*LAUNCHER_SIGNALS, signal.SIGQUIT})
# The ending signals the cluster starter passed on (its `signal N` lines on this launcher's
# stdin, `cluster.eofwatch`): Ctrl-C on the login node reaches every host's launcher, and
# each names the start command as the cause, in the same words, rather than itself.
FROM_STARTER: set[int] = set()
# Slurm's warning signal (`--signal=USR1@N`): under Slurm by default a preemption notice
SLURM_NOTICE = (signal.SIGUSR1,)


class SignalPolicy(NamedTuple):
    """What each signal does to this launcher (the table above), decided once per job."""

    ending: tuple[int, ...] = LAUNCHER_SIGNALS  # end the job
    forward: tuple[int, ...] = ()  # to every worker, the job goes on
    stacks: tuple[int, ...] = (STACKS_SIGNAL, DUMP_SIGNAL)  # take the workers' stacks
    # the workers get Slurm's signals from Slurm itself: forward nothing, drop them
    slurm_delivers: bool = False

    @property
    def caught(self) -> tuple[int, ...]:
        return (*self.ending, *self.forward, *self.stacks)


def slurm_reaches_workers(environ: Mapping[str, str], cgroup_text: str) -> bool:
    """Under Slurm: does Slurm signal the workers itself? It does where it tracks a step's
    processes by cgroup (every process of the step, whatever its session): the launcher's
    own cgroup path (/proc/self/cgroup) then names the job's step."""
    job = environ.get("SLURM_JOB_ID")
    return bool(job) and f"/job_{job}/step_" in cgroup_text


def _own_cgroup() -> str:
    try:
        with open("/proc/self/cgroup") as f:
            return f.read()
    except OSError:
        return ""


def signal_policy(
    handled: tuple[int, ...] | None,
    environ: Mapping[str, str],
    cgroup_text: str | None = None,
) -> SignalPolicy:
    """The job's policy from --signals_to_handle (`handled`; None: the default, torchrun's,
    plus SIGUSR1 and SIGUSR2 under Slurm, SIGUSR1 there a preemption notice that ends the
    job as SIGTERM does) and the environment."""
    under_slurm = bool(environ.get("SLURM_JOB_ID"))
    notice: tuple[int, ...] = ()
    if handled is None:
        handled = SLURM_DEFAULT if under_slurm else TORCHRUN_DEFAULT
        notice = SLURM_NOTICE if under_slurm else ()
    ending = tuple(
        dict.fromkeys((*LAUNCHER_SIGNALS, *(s for s in handled if s in _ENDING), *notice))
    )
    handled = tuple(s for s in handled if s not in notice)
    forward = tuple(dict.fromkeys(s for s in handled if s not in _ENDING))
    taken = DUMP_SIGNAL in forward or DUMP_SIGNAL in ending
    stacks = (STACKS_SIGNAL,) if taken else (STACKS_SIGNAL, DUMP_SIGNAL)
    delivers = False
    if under_slurm and forward:
        text = _own_cgroup() if cgroup_text is None else cgroup_text
        delivers = slurm_reaches_workers(environ, text)
    return SignalPolicy(ending, forward, stacks, delivers)


def kept_ignored(signals: tuple[int, ...]) -> tuple[int, ...]:
    """`signals` less SIGHUP when the launcher started with it ignored (under nohup): no
    handler of ours replaces nohup's promise that a closed terminal ends nothing."""
    return tuple(s for s in signals if not (s == signal.SIGHUP and HANGUP_IGNORED))


def forward_signal(pids: list[int], signum: int) -> list[int]:
    """`signum` to each worker (the process, not its group: a worker's own children, such
    as data loaders, are its business, as under torchrun); the pids it reached."""
    reached = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
            reached.append(pid)
    return reached


def signal_label(signum: int) -> str:
    """A signal's name, STACKS_SIGNAL by the name `kill -s` takes."""
    if signum == STACKS_SIGNAL:
        return STACKS_SIGNAL_NAME
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def ending_again(seen: list[int], signum: int) -> bool:
    """Is the ending signal `signum` a repeat that means "kill the workers now"? Only when
    this launcher itself received an ending signal before (`seen`, which this adds to): a
    job already ending for another node's cause (its SIGINT, heard through the rendezvous)
    keeps its grace when this node's own SIGINT comes. And never a SIGHUP: a hang-up reports
    a session that is gone, and one session's end can come as several (the cluster stage's
    stdin watch at end of file, sshd's hang-up)."""
    again = bool(seen) and signum != signal.SIGHUP
    seen.append(signum)
    return again


class LauncherSignal(BaseException):
    """An ending signal arrived outside a supervised round. A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _raise_signal(signum: int, frame: object) -> None:
    raise LauncherSignal(signum)


@contextlib.contextmanager
def signals_raise(policy: SignalPolicy | None = None) -> Iterator[None]:
    """Make the ending signals raise `LauncherSignal` in the main thread; the others are
    caught and dropped (no workers to pass them to, no stacks to take)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    policy = policy if policy is not None else SignalPolicy()
    old = {sig: signal.signal(sig, _raise_signal) for sig in kept_ignored(policy.ending)}
    for sig in kept_ignored((*policy.forward, *policy.stacks)):
        old[sig] = signal.signal(sig, _note_signal)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_to_pipe(policy: SignalPolicy | None = None) -> Iterator[int | None]:
    """Route the policy's signals to a pipe an event loop watches; restore on exit.

    Yields the read end (each byte read is a signal number), or None off the main thread
    (where Python cannot install handlers; the caller then owns signal handling).
    """
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    policy = policy if policy is not None else SignalPolicy()
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_handlers = {}
    old_wakeup = -1
    try:
        old_wakeup = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        for sig in kept_ignored(policy.caught):
            old_handlers[sig] = signal.signal(sig, _note_signal)
        yield rfd
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_wakeup)
        os.close(rfd)
        os.close(wfd)


def _note_signal(signum: int, frame: object) -> None:
    """The C-level handler already wrote `signum` to the wake-up pipe (if one is set);
    nothing else to do."""


def read_signals(fd: int, policy: SignalPolicy | None = None) -> list[int]:
    """The policy's signals waiting in the pipe of `signals_to_pipe`."""
    try:
        data = os.read(fd, 512)
    except BlockingIOError:
        return []
    wanted = set((policy if policy is not None else SignalPolicy()).caught)
    return [s for s in data if s in wanted]
