"""Start a job from Python: Paddle's `spawn` and torch's `start_processes`, on the
launcher's own pipeline.

The calling process acts as the launcher. It describes the job exactly as
``PADDLIKE_SPAWN_JOBDIR=JOBDIR python -m paddlike.launch --nproc_per_node N --log_dir DIR
-m paddlike._spawn_child`` would (`paddlike.launch.main.describe`) and
runs it (`paddlike.launch.run.job.run_job`), so the children get the launched
environment contract, endpoints, log files, deadlines, teardown (SIGTERM to every
process group, a grace period, SIGKILL) and `summary.json`. The function and its
arguments travel pickled in a temporary job directory; each child writes its return
value or its traceback there (`_spawn_child`). On the first failure the others are torn
down and the parent raises `ProcessRaisedException` or `ProcessExitedException` (torch's
names and attributes) naming the child's index, rank, pid, exit code or signal.

    join=True   the job runs in this process; signal handlers are installed while it
                runs when this is the main thread (Ctrl-C tears the job down and raises
                KeyboardInterrupt)
    join=False  the same command runs as a launcher subprocess; `join()` waits for it

Every start method starts fresh interpreters (the launcher execs each child), so the
function must be importable, as with multiprocessing's "spawn"; see docs/programmatic.md
for what "fork" means here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .spawn_outcome import (
    ProcessException,
    ProcessExitedException,
    ProcessRaisedException,
    SpawnError,
    outcome,
)

if TYPE_CHECKING:
    import subprocess

# Imported with `paddlike.distributed` (the package exports spawn eagerly, so that the
# name is the function and never this module): subprocess, tempfile and shutil are
# imported by the functions that use them, keeping the launcher's start-up untouched.

__all__ = [
    "MultiprocessContext",
    "ProcessException",
    "ProcessExitedException",
    "ProcessRaisedException",
    "SpawnContext",
    "SpawnError",
    "spawn",
    "start_processes",
]

START_METHODS = ("spawn", "forkserver", "fork")
SPAWN_OPTIONS = ("start_method", "gpus", "ips", "backend", "print_config", "log_dir")
BACKENDS = ("auto", "gloo", "nccl")
# The children's bootstrap (`python -m` it). Imported here only where used: were the
# package to import it, `-m` would run a module already in sys.modules (runpy warns).
# The children's first import: outside `paddlike.distributed`, so that a child imports only
# what its function needs, not the whole runtime package (issue 38: spawn's start-up).
_CHILD_MODULE = "paddlike._spawn_child"


# --- the context ------------------------------------------------------------------------


class SpawnContext:
    """The spawned job: `return_values` (rank order, once joined), `log_dir`, `join()`.

    Paddle calls it MultiprocessContext and torch ProcessContext; `join(timeout)` returns
    True once every process has finished successfully, False if the timeout passed first,
    and raises the first failure's exception.
    """

    def __init__(self, jobdir: Path, log_dir: str, nprocs: int) -> None:
        self.jobdir = jobdir
        self.log_dir = log_dir
        self.nprocs = nprocs
        self.return_values: list[Any] | None = None
        self.exit_code: int | None = None
        self.launcher_output = ""  # the launcher's own lines (banner, report), when captured
        self._popen: subprocess.Popen[bytes] | None = None
        self._launcher_err: Path | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def pids(self) -> list[int]:
        """The children's pids by local index, from the launcher's summary ([] before they
        started)."""
        from paddlike.summary import read_summary

        try:
            summary = read_summary(self.log_dir)
        except (OSError, ValueError):
            return []
        if summary is None:
            return []
        by_index = {p.local_index: p.pid for p in summary.processes if p.pid is not None}
        return [by_index[i] for i in sorted(by_index)]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the job; True when done and successful (then `return_values` is set),
        False when `timeout` seconds passed first; raises the failure's exception."""
        with self._lock:
            if self._error is not None:
                raise self._error
            if self.exit_code is not None:
                return True
            if self._popen is not None:
                import subprocess

                try:
                    code = self._popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    return False
                err = self._launcher_err
                text = err.read_text(errors="replace") if err is not None and err.exists() else ""
                self._finish(code, text)
            if self._error is not None:
                raise self._error
            return True

    def terminate(self) -> None:
        """Stop a join=False job now (SIGTERM to its launcher: the usual teardown)."""
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signal.SIGTERM)

    def _finish(self, code: int, launcher_text: str) -> None:
        """The launcher is done: collect return values or build the failure."""
        self.exit_code = code
        self.launcher_output = launcher_text
        try:
            self.return_values = outcome(
                self.jobdir, self.log_dir, code, launcher_text, self.nprocs
            )
        except BaseException as exc:
            self._error = exc
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        import shutil

        # the logs stay only where the caller named a log_dir (outside the job directory)
        shutil.rmtree(self.jobdir, ignore_errors=True)


MultiprocessContext = SpawnContext  # Paddle's name


# --- the two entry points ----------------------------------------------------------------


def spawn(
    func: Callable[..., Any],
    args: Iterable[Any] = (),
    nprocs: int = -1,
    join: bool = True,
    daemon: bool = False,
    **options: Any,
) -> SpawnContext:
    """Paddle's ``paddle.distributed.spawn``: run ``func(*args)`` in `nprocs` processes.

    nprocs=-1: one per visible GPU, else one per CPU (the launcher's
    ``--nproc_per_node auto``). Options: start_method ("spawn", "forkserver", "fork"),
    gpus ("0,1"), ips ("a,b": every node runs the same program), backend ("auto",
    "gloo": CPU workers, "nccl": GPUs required), print_config (show the launcher's lines
    on stderr; default False), log_dir (keep the logs there; default: a temporary
    directory removed afterwards). Unknown options raise ValueError naming them.
    """
    unknown = sorted(set(options) - set(SPAWN_OPTIONS))
    if unknown:
        raise ValueError(
            f"spawn: unknown option(s) {', '.join(unknown)}; expected some of "
            f"{', '.join(SPAWN_OPTIONS)}"
        )
    return _start(
        func,
        tuple(args),
        nprocs,
        join=join,
        daemon=daemon,
        convention="paddle",
        start_method=options.get("start_method", "spawn"),
        gpus=options.get("gpus"),
        ips=options.get("ips"),
        backend=options.get("backend"),
        print_config=bool(options.get("print_config", False)),
        log_dir=options.get("log_dir"),
    )


def start_processes(
    fn: Callable[..., Any],
    args: Iterable[Any] = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
    *,
    log_dir: str | os.PathLike[str] | None = None,
    print_config: bool = False,
) -> SpawnContext:
    """torch's ``torch.multiprocessing.start_processes``: ``fn(i, *args)`` in `nprocs`
    processes, i = 0..nprocs-1 (each child's local rank)."""
    return _start(
        fn,
        tuple(args),
        nprocs,
        join=join,
        daemon=daemon,
        convention="torch",
        start_method=start_method,
        print_config=print_config,
        log_dir=log_dir,
    )


# --- the pipeline -------------------------------------------------------------------------


def _check_call(fn: Any, nprocs: Any, start_method: Any) -> None:
    """Everything about the call that can be wrong, before anything is created."""
    mod = sys.modules.get(_CHILD_MODULE)
    if mod is not None and getattr(mod, "bootstrapping", False):
        raise RuntimeError(
            "spawn: called while a spawned child was still importing the parent's main "
            "module; protect the call with  if __name__ == '__main__':"
        )
    if not callable(fn):
        raise TypeError(f"spawn: the function must be callable, got {fn!r}")
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or (nprocs < 1 and nprocs != -1):
        raise ValueError(
            f"nprocs: expected a positive integer or -1 (every device), got {nprocs!r}"
        )
    if start_method not in START_METHODS:
        raise ValueError(
            f"start_method: expected one of {', '.join(START_METHODS)}, got {start_method!r}"
        )
    if getattr(fn, "__module__", None) == "__main__":
        main = sys.modules["__main__"]
        if getattr(main, "__spec__", None) is None and getattr(main, "__file__", None) is None:
            name = getattr(fn, "__qualname__", repr(fn))
            raise ValueError(
                f"spawn: {name} is defined in an interactive __main__ (a notebook, the REPL "
                "or python -c), which the children cannot import; define it in a module "
                "file and import it from there"
            )


def _launch_argv(
    nprocs: int,
    log_dir: str,
    *,
    gpus: Any,
    ips: Any,
    backend: Any,
) -> list[str]:
    argv = ["--log_dir", log_dir, "--tee", "all"]
    if ips is not None:
        argv += ["--ips", ips if isinstance(ips, str) else ",".join(ips)]
    if backend not in (None, *BACKENDS):
        raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if gpus is not None:
        ids = [g.strip() for g in (gpus.split(",") if isinstance(gpus, str) else map(str, gpus))]
        if nprocs != -1:
            if nprocs > len(ids):
                raise ValueError(
                    f"nprocs: {nprocs} processes but gpus lists {len(ids)} ({','.join(ids)}); "
                    "give one GPU per process"
                )
            ids = ids[:nprocs]
        argv += ["--gpus", ",".join(ids)]
    elif backend == "gloo":
        argv += ["--devices", "cpu"]
        if nprocs == -1:
            argv += ["--nproc_per_node", "auto"]
    if gpus is None and not (backend == "gloo" and nprocs == -1):
        argv += ["--nproc_per_node", "auto" if nprocs == -1 else str(nprocs)]
    return [*argv, "-m", _CHILD_MODULE]


def _start(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    nprocs: int,
    *,
    join: bool,
    daemon: bool,
    convention: str,
    start_method: str,
    gpus: Any = None,
    ips: Any = None,
    backend: Any = None,
    print_config: bool = False,
    log_dir: str | os.PathLike[str] | None = None,
) -> SpawnContext:
    _check_call(fn, nprocs, start_method)
    import shutil
    import tempfile

    from paddlike.launch.context.options import UsageError
    from paddlike.launch.main import describe
    from paddlike.launch.run.ports import PortError

    jobdir = Path(tempfile.mkdtemp(prefix="paddlike-spawn-"))
    logs = os.path.abspath(log_dir) if log_dir is not None else str(jobdir / "log")
    try:
        argv = _launch_argv(nprocs, logs, gpus=gpus, ips=ips, backend=backend)
        from .. import _spawn_child as child

        try:
            child.write_call(jobdir, fn, args, convention)
        except Exception as exc:
            raise ValueError(
                f"start_method={start_method!r}: the function and its arguments must be "
                f"picklable, because every child is a fresh interpreter ({exc}); define the "
                "function at the top level of a module"
            ) from exc
        environ = {**os.environ, child.JOBDIR_ENV: str(jobdir)}
        try:
            described = describe(argv, environ)
        except (UsageError, PortError) as exc:
            raise ValueError(str(exc)) from None
        if backend == "nccl" and not any(p.device_ids for p in described.preview.processes):
            raise ValueError(
                "backend: 'nccl' needs GPUs, and this job got CPU workers "
                f"({described.preview.devices_why}); use backend='gloo' or give gpus"
            )
        count = len(described.preview.processes)
    except BaseException:
        shutil.rmtree(jobdir, ignore_errors=True)
        raise
    context = SpawnContext(jobdir, described.log_dir, count)
    if join:
        code, text = _run_here(described, environ, print_config)
        context._finish(code, text)
        context.join()
        return context
    _run_subprocess(context, argv, environ, print_config, daemon)
    return context


def _run_here(described: Any, environ: Mapping[str, str], print_config: bool) -> tuple[int, str]:
    """run_job in this process; the launcher's lines captured unless print_config."""
    import io

    from paddlike.launch.run.job import run_job

    if print_config:
        return run_job(described.run, described.job, environ, python=sys.executable), ""
    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer):
        code = run_job(described.run, described.job, environ, python=sys.executable)
    return code, buffer.getvalue()


def _run_subprocess(
    context: SpawnContext,
    argv: Sequence[str],
    environ: Mapping[str, str],
    print_config: bool,
    daemon: bool,
) -> None:
    """join=False: the same launch as a subprocess (`python -m paddlike.launch ARGV`)."""
    import atexit
    import subprocess

    preexec = None
    if threading.current_thread() is threading.main_thread():
        from paddlike.launch.run.linux import parent_death_preexec

        # The launcher, and with it the job, ends if this process dies (the kernel ties
        # the signal to the forking thread: only the main thread is sure to outlive it).
        preexec = parent_death_preexec(signal.SIGTERM)
    err_path = context.jobdir / "launcher.err"
    with contextlib.ExitStack() as stack:
        err = None if print_config else stack.enter_context(open(err_path, "wb"))
        context._popen = subprocess.Popen(
            [sys.executable, "-m", "paddlike.launch", *argv],
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=preexec,
            close_fds=True,
        )
    context._launcher_err = None if print_config else err_path
    atexit.register(_at_exit, context, daemon)


def _at_exit(context: SpawnContext, daemon: bool) -> None:
    """Like multiprocessing at interpreter exit: daemonic jobs are stopped, the others
    waited for (their failure is not raised here: nobody would catch it)."""
    if context.exit_code is not None:
        return
    if daemon:
        context.terminate()
    with contextlib.suppress(BaseException):
        context.join()
