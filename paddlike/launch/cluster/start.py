"""The cluster flow: plan every host's launcher, check every host, start them, stream their
consoles, end them together, exit with the job's code.

    options ─► hosts (hostfile, filters) ─► each host's command (remote)
            ─► --dry_run: print them | slurm: exec srun
            ─► ssh: one session per host: the check, then GO when every host passed it
               (`gate`) | pdsh: the check of every host, then pdsh
            ─► the console loop ─► the job's exit code
    A host that fails the check: one line each, exit 2, nothing started anywhere.

Ending: Ctrl-C (SIGINT), SIGTERM or SIGHUP here: the same signal, once, to every host's
launcher (a ``signal N`` line on its stdin, `eofwatch`), whose workers then get their full
--kill_timeout; the same signal again: again to every launcher, which kills its workers
at once. A host's ssh connection lost (ssh's 255), or a host's launcher failing without
the others ending within the grace: every session's stdin is closed, which every host's
launcher takes as its hang-up. Sessions still there after the kill timeout and a margin
are killed. SIGUSR1 and SIGRTMIN+4 (stacks) and the other --signals_to_handle signals are
passed on to every host's launcher, which does with them what it does on its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from paddlike.launch.cluster import gate, pdsh, remote, spares, srun, ssh, stopping
from paddlike.launch.cluster.hostfile import refuse_loopback_among_others
from paddlike.launch.cluster.picks import forwarded_args, hostfile_picks, picked_gpus_named
from paddlike.launch.cluster.remote import RemoteJob
from paddlike.launch.cluster.selection import spare_count
from paddlike.launch.cluster.stream import Consoles, Session
from paddlike.launch.context.options.record import PROG, LaunchOptions, UsageError
from paddlike.launch.plan.exitcode import CANNOT_START, signal_exit_code

PREFLIGHT_TIMEOUT = ssh.CONNECT_TIMEOUT + 20  # seconds, for every host at once
# a host's launcher failed: the others end on their own (they are told through the
# rendezvous); past this many seconds more than --kill_timeout, their sessions are closed
FAILURE_GRACE = 10.0
SESSIONS_MARGIN = 15.0  # closed sessions still running after --kill_timeout + this: killed
AGAIN_MARGIN = 5.0  # after a second signal: sessions still running after this are killed
ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def plan_remote_job(
    options: LaunchOptions,
    argv: Sequence[str],
    environ: Mapping[str, str],
    *,
    python: str = sys.executable,
    cwd: str | None = None,
    home: str | None = None,
) -> RemoteJob:
    """Everything decided before anything is touched; `UsageError` on bad input. The
    job's token: the one given (--job_token, --job_token_file or their variables), else a
    fresh random one; it travels with the carried variables, never in an argv."""
    import secrets

    from paddlike.contract import GPUS_GIVEN_AS, JOB_TOKEN, JOB_TOKEN_FILE
    from paddlike.launch.cluster.envfile import carried_environment
    from paddlike.launch.plan.nodejob import new_job_id

    launcher_args, script = forwarded_args(argv, pass_local_rank=options.pass_local_rank)
    picks: tuple = ()
    if options.hostfile:
        picks = hostfile_picks(options, argv)
        refuse_loopback_among_others([p.name for p in picks])
    elif options.launcher != "slurm":
        raise UsageError(
            f"--launcher {options.launcher}: needs --hostfile FILE (the hosts to start)",
            "--launcher",
        )
    elif options.include or options.exclude:
        raise UsageError("--include/--exclude: need --hostfile", "--include")
    cwd = cwd or os.getcwd()
    environment = carried_environment(
        options.export,
        environ,
        home=home or os.path.expanduser("~"),
        cwd=cwd,
        prefixes=options.export_prefixes,
    )
    environment[JOB_TOKEN] = options.job_token or secrets.token_hex(16)
    if any(p.devices is not None for p in picks):  # the --gpus a host is given: as typed
        environment[GPUS_GIVEN_AS] = picked_gpus_named(options)
    environment.pop(JOB_TOKEN_FILE, None)  # the token itself travels
    return RemoteJob(
        picks=picks,
        launcher_args=launcher_args,
        script=script,
        cwd=cwd,
        python=options.remote_python or python,
        environment=environment,
        job_id=options.job_id or new_job_id(),
        spares=spare_count(picks, options.num_nodes, options.preflight, options.launcher),
    )


def start_cluster(options: LaunchOptions, argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """python -m paddlike.launch --hostfile ... : the whole job from here; the exit code."""
    from paddlike.launch.cluster import preview

    try:
        job = plan_remote_job(options, argv, environ)
        launcher = options.launcher or "ssh"
        if launcher == "slurm":
            command = srun.srun_argv(job, options.num_nodes, environ)
        if launcher == "pdsh":
            pdsh.check_hosts(job)
    except UsageError as exc:
        return _fail(str(exc))
    if any(a == "--job_token" or a.startswith("--job_token=") for a in argv):
        _say(
            "--job_token on the command line can be read by every user of this machine "
            "(ps); give it by PADDLIKE_JOB_TOKEN or --job_token_file (the hosts get it in "
            "their environment, never on their command lines)"
        )
    if launcher == "slurm":
        if options.dry_run:
            print(preview.srun_line(command, job), flush=True)
            return 0
        try:  # srun owns the job from here: its signals; the secrets in its environment
            os.execvpe(command[0], command, srun.srun_environment(environ, job))
        except OSError as exc:
            return _fail(f"--launcher slurm: cannot run {command[0]} ({exc.strerror})", 1)
    # Ctrl-C, SIGTERM or SIGHUP while ssh resolves names or pdsh's check runs: `Stopped`
    with stopping.stop_on_signals():
        try:
            return _over_ssh(job, launcher, options, environ)
        except stopping.Stopped as stopped:  # before the sessions started: none runs anywhere
            name = signal.Signals(stopped.signum).name
            _say(f"{name}: stopped before the job started on any host")
            return signal_exit_code(stopped.signum)


def _over_ssh(
    job: RemoteJob, launcher: str, options: LaunchOptions, environ: Mapping[str, str]
) -> int:
    """The job over ssh or pdsh, from resolving the hosts' names to the last session's
    end; every master connection and control file gone after."""
    import shutil
    import tempfile

    from paddlike.launch.cluster import preview

    control = ""
    base: list[str] = []
    tag = pdsh.run_tag()
    checked = False  # pdsh's check ran: its run files may be on the hosts
    everyone: tuple[str, ...] = ()  # every host, spares too: their ssh masters to close
    try:
        control = tempfile.mkdtemp(prefix="paddlike-ssh-")
        base = ssh.ssh_base(options.ssh_args, control, options.ssh_port)
        job = job._replace(addresses=ssh.connected_names(base, job.hosts))
        everyone = job.hosts
        if options.dry_run:
            shown = spares.check_job(job) if job.spares else job
            preview.print_commands(shown, launcher, base, tag)
            if job.spares:
                print(spares.dry_run_line(job), flush=True)
            return 0
        script = None if options.module or options.no_python else options.training_script
        relayed = _relayed_signals(options.signals_to_handle, environ)
        if job.spares:  # the check on every host first, then the job on N of them
            chosen = _choose_hosts(job, base, environ, options, script, relayed)
            if isinstance(chosen, int):
                return chosen
            job = chosen  # (the masters of every host are closed below: `everyone`)
        if launcher == "pdsh":  # pdsh cannot hold its hosts at a gate: check them first
            checked = True
            problems = ssh.preflight(
                base,
                job.hosts,
                [pdsh.writer_script(job, i, tag, script) for i in range(len(job.hosts))],
                job.cwd,
                job.python,
                PREFLIGHT_TIMEOUT,
                script,
            )
            if problems:
                return _refuse(problems)
        return _run_sessions(
            job, launcher, base, environ, options.kill_timeout, script, relayed, tag
        )
    finally:
        stopping.ignore_signals()  # the cleanup below is not cut short by a second signal
        if checked:
            ssh.run_everywhere(
                base, job.hosts, [f"rm -f -- {pdsh.run_file(tag, h)}" for h in job.hosts]
            )
        if base and not options.dry_run and not ssh.users_masters(options.ssh_args):
            ssh.close_masters(base, everyone or job.hosts, control)
        if control:
            shutil.rmtree(control, ignore_errors=True)


def _refuse(problems: Sequence[str]) -> int:
    for line in problems:
        _fail(f"--hostfile: {line}; nothing was started")
    return CANNOT_START


def _run_sessions(
    job: RemoteJob,
    launcher: str,
    base: Sequence[str],
    environ: Mapping[str, str],
    kill_timeout: float,
    script: str | None,
    relayed: tuple[int, ...] = (),
    tag: str = "",
) -> int:
    from paddlike.launch.run.signals import SignalPolicy, signals_to_pipe

    # the signals this command takes: a byte each on the wake-up pipe its loops watch
    sessions: list[Session] = []
    with signals_to_pipe(SignalPolicy(ending=ENDING, forward=relayed, stacks=())) as wake_r:
        assert wake_r is not None  # the main thread's (python -m paddlike.launch)
        try:
            sessions = _start_sessions(job, launcher, base, environ, script, tag)
            if launcher == "ssh":
                verdict = gate.wait_ready(
                    sessions, wake_r, PREFLIGHT_TIMEOUT, job.cwd, job.python, script
                )
                if verdict.problems or verdict.signal is not None:
                    _end_unstarted(sessions)
                    if verdict.signal is not None:
                        name = signal.Signals(verdict.signal).name
                        _say(f"{name}: stopped before the job started on any host")
                        return signal_exit_code(verdict.signal)
                    return _refuse(verdict.problems)
                _show_warnings(verdict.stderr)
                gate.start(sessions)
            consoles = Consoles(sessions, wake_r)
            try:
                return _watch(consoles, kill_timeout, relayed)
            finally:
                consoles.close()
        finally:
            for s in sessions:
                if s.proc.poll() is None:
                    s.proc.kill()
                    s.proc.wait()
                for pipe in (s.proc.stdin, s.proc.stdout, s.proc.stderr):
                    if pipe is not None:
                        pipe.close()


def _choose_hosts(
    job: RemoteJob,
    base: Sequence[str],
    environ: Mapping[str, str],
    options: LaunchOptions,
    script: str | None,
    relayed: tuple[int, ...],
) -> RemoteJob | int:
    """Every host's launcher in check-only mode (`spares`), until each has ended: the job
    on the hosts chosen, or the exit code of a job that does not start."""
    from paddlike.launch.run.signals import SignalPolicy, signals_to_pipe

    check = spares.check_job(job)
    sessions: list[Session] = []
    codes: dict[str, int | None] = {}
    # the launchers' own deadlines bound the check (rendezvous, figures); this is a backstop
    backstop = time.monotonic() + options.rdzv_timeout + options.heartbeat_timeout + 60
    with signals_to_pipe(SignalPolicy(ending=ENDING, forward=relayed, stacks=())) as wake_r:
        assert wake_r is not None
        try:
            sessions = _start_sessions(check, "ssh", base, environ, script)
            verdict = gate.wait_ready(
                sessions, wake_r, PREFLIGHT_TIMEOUT, job.cwd, job.python, script
            )
            if verdict.problems or verdict.signal is not None:
                _end_unstarted(sessions)
                if verdict.signal is not None:
                    name = signal.Signals(verdict.signal).name
                    _say(f"{name}: stopped before the job started on any host")
                    return signal_exit_code(verdict.signal)
                return _refuse(verdict.problems)
            _show_warnings(verdict.stderr)
            gate.start(sessions)
            consoles = Consoles(sessions, wake_r)
            stopped: int | None = None
            try:
                while consoles.running and time.monotonic() < backstop:
                    events = consoles.wait(backstop)
                    for signum in events.signals:
                        if signum in ENDING and stopped is None:
                            stopped = signum
                            _signal_hosts(consoles.running, signum, ending=True)
            finally:
                consoles.close()
            if stopped is not None:
                _say(f"{signal.Signals(stopped).name}: stopped during the pre-flight check")
                return signal_exit_code(stopped)
            codes = {s.host: s.returncode for s in sessions}
        finally:
            for s in sessions:
                if s.proc.poll() is None:
                    s.proc.kill()
                    s.proc.wait()
                for pipe in (s.proc.stdin, s.proc.stdout, s.proc.stderr):
                    if pipe is not None:
                        pipe.close()
    choice = spares.choose(job.hosts, codes, job.nodes)
    if choice.refusal is not None:
        code, line = choice.refusal
        return _fail(line, code)
    _say(spares.choice_line(choice, job.nodes))
    return spares.chosen_job(job, choice)


def _show_warnings(stderr: Mapping[str, bytes]) -> None:
    """ssh's warnings of the hosts that passed the check, as they came."""
    for host, text in stderr.items():
        lines = text.decode(errors="replace").splitlines()
        sys.stderr.write("".join(f"[{host}] {line}\n" for line in lines))


def _end_unstarted(sessions: Sequence[Session], timeout: float = 10) -> None:
    """Sessions held at the gate: their stdin closed, they end without starting."""
    for s in sessions:
        s.end()
    deadline = time.monotonic() + timeout
    for s in sessions:
        try:
            s.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()


def _start_sessions(
    job: RemoteJob,
    launcher: str,
    base: Sequence[str],
    environ: Mapping[str, str],
    script: str | None,
    tag: str = "",
) -> list[Session]:
    """Every host's session (ssh: its script written on its stdin, the launcher's GO and
    signal lines follow there), or pdsh's one."""
    common = dict(
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C is ours to pass on, not the terminal's to ssh
    )
    if launcher == "pdsh":
        proc = subprocess.Popen(
            pdsh.pdsh_argv(job, tag), env=pdsh.pdsh_environment(environ, base), **common
        )
        return [Session("pdsh", proc, pdsh.host_of_line, ended_by_sigterm=True)]
    sessions = []
    for i, host in enumerate(job.hosts):
        proc = subprocess.Popen(ssh.session_argv(base, host), **common)
        sessions.append(Session(host, proc))
        assert proc.stdin is not None
        try:  # small: in the pipe at once; ssh failing at once is its own message
            proc.stdin.write(remote.gated_script(job, i, script).encode())
            proc.stdin.flush()
        except BrokenPipeError:
            pass
    return sessions


def _relayed_signals(handled: tuple[int, ...] | None, environ: Mapping[str, str]) -> tuple:
    """The signals passed on to every host's launcher as they are (not ending the job
    here): stacks (SIGUSR1, SIGRTMIN+4) and --signals_to_handle's others; each host's
    launcher has the same --signals_to_handle, and so does with them what it would do."""
    from paddlike.launch.run.signals import signal_policy

    policy = signal_policy(handled, environ, cgroup_text="")
    return tuple(s for s in (*policy.forward, *policy.stacks) if s not in ENDING)


def _stacks_signals(relayed: tuple[int, ...]) -> tuple[int, ...]:
    """Those of `relayed` that take stacks: sent to one host's launcher only, which asks
    every node for theirs (one set of stacks for the job, not one per host)."""
    from paddlike.launch.run.signals import DUMP_SIGNAL, STACKS_SIGNAL

    forwarded = relayed[: relayed.index(STACKS_SIGNAL)] if STACKS_SIGNAL in relayed else ()
    return tuple(s for s in (STACKS_SIGNAL, DUMP_SIGNAL) if s in relayed and s not in forwarded)


def _watch(consoles: Consoles, kill_timeout: float, relayed: tuple[int, ...] = ()) -> int:
    """The loop, until every session has exited; the job's exit code: 128 + a signal's
    number when the job was ended from here, else the first non-zero exit of a host (its
    launcher's code, or ssh's 255 when the connection was lost), else 0."""
    from paddlike.launch.run.signals import signal_label

    stacks = _stacks_signals(relayed)
    cause: int | None = None
    stopped_by: int | None = None  # the signal this command got first, when it ended the job
    close_at: float | None = None  # when the sessions' stdins are to be closed
    kill_at: float | None = None  # when sessions still running are killed
    closed = signalled = False
    while consoles.running:
        now = time.monotonic()
        if close_at is not None and now >= close_at and not closed:
            _close_stdins(consoles.sessions)
            closed, kill_at = True, now + kill_timeout + SESSIONS_MARGIN
        if kill_at is not None and now >= kill_at:
            _kill(consoles.running)
            kill_at = None
        events = consoles.wait(None if closed else close_at, kill_at)
        for signum in events.signals:
            if signum in relayed:
                targets = consoles.running[:1] if signum in stacks else consoles.running
                reached = _signal_hosts(targets, signum)
                _say(f"{signal_label(signum)}: passed on to the launchers of {reached}")
                continue
            if signalled:  # the user's second signal: every launcher kills its workers now
                _signal_hosts(consoles.running, signum, ending=True)
                soon = time.monotonic() + AGAIN_MARGIN
                kill_at = soon if kill_at is None else min(kill_at, soon)
                continue
            signalled = True
            if cause is None:
                cause, stopped_by = signal_exit_code(signum), signum
            _say(f"{signal.Signals(signum).name}: ending the job on every host")
            _signal_hosts(consoles.running, signum, ending=True)  # one signal each
            if not closed:  # a backstop: their stdin closed (their hang-up), then killed
                close_at = time.monotonic() + kill_timeout + SESSIONS_MARGIN
        for s in events.exited:
            code = s.returncode
            if not code:
                continue
            if code < 0:  # our ssh (or pdsh) client itself was killed: the host is lost to us
                code = ssh.SSH_FAILED
            if cause is not None:
                continue  # a consequence of the first cause
            cause = code
            if code == ssh.SSH_FAILED:
                _say(f"host {s.host}: the ssh connection failed or was lost; ending the job")
                close_at = time.monotonic()
            elif consoles.running:
                _say(f"host {s.host}: its launcher ended first (exit {code}); ending the others")
                close_at = time.monotonic() + kill_timeout + FAILURE_GRACE
    if stopped_by is not None:  # the hosts' reports name their own launchers: it was us
        name = signal.Signals(stopped_by).name
        _say(f"exit {cause}: STOPPED: this command received {name}; every host ended its job")
    elif cause and consoles.root_cause:  # each host printed it: once more, in one line
        _say(f"exit {cause}: {consoles.root_cause}")
    return cause or 0


def _signal_hosts(sessions: Sequence[Session], signum: int, *, ending: bool = False) -> str:
    """`signum` to the launcher of every running session (`Session.signal`); pdsh's,
    whose hosts' stdins are pdsh's own, ends by SIGTERM (`ending`) and is killed on a
    second ending signal. What was reached, in words."""
    hosts = []
    for s in sessions:
        if s.ended_by_sigterm:
            if not ending:
                continue
            if s.proc.stdin is None or s.proc.stdin.closed:
                s.proc.kill()  # pdsh asked once already: its second signal
            else:
                s.end()
            continue
        if s.signal(signum):
            hosts.append(s.host)
    return f"{len(hosts)} host{'' if len(hosts) == 1 else 's'}" + (
        f" ({', '.join(hosts)})" if hosts else " (pdsh cannot pass signals on)"
    )


def _kill(sessions: Sequence[Session]) -> None:
    for s in sessions:
        s.proc.kill()


def _close_stdins(sessions: Sequence[Session]) -> None:
    for s in sessions:
        s.end()


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return code
