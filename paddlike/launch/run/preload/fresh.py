"""In a fork of the zygote: become the rank's worker as a fresh `python -u script ...`
would be, then run the script as `__main__` and exit as that interpreter would.

What a fresh interpreter is, and what is done here to match it:

    own session, pgid == pid            setsid(), as Popen's start_new_session
    stdin /dev/null, stdout/stderr      dup2 of the launcher's log descriptors
    parent: the launcher                the zygote confirms the reparenting first;
    parent-death signal SIGKILL          then prctl, and a dead launcher means exit
    CPUs (--numa_binding)               sched_setaffinity, memory node preferred
    os.environ                          replaced by the rank's (putenv/unsetenv too)
    cwd                                 chdir to the launcher's
    signal dispositions                 the zygote's before its imports (a fresh one's),
                                        but those the launcher ignores ignored
    sys.argv, sys.orig_argv, sys.path[0] script: [script, args], dirname(realpath);
                                        -m: runpy sets argv[0], sys.path[0] = cwd
    __main__                            a new module: __file__ absolute, __spec__ None
    exit                                the interpreter's own: the script runs at the
                                        zygote's top level, outside its loop's frames

What stays the zygote's: the hash seed (PYTHONHASHSEED), interpreter flags, variables a
module read at import, and anything the preloaded modules did at import.
Standard library only: the zygote loads this file by path.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import importlib.machinery
import os
import signal
import sys
import types
from collections.abc import Mapping, Sequence

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
# set_mempolicy(MPOL_PREFERRED) as run.affinity makes it, for --numa_binding's memory node
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "s390x": 270}
_MASK_LONGS = 16


def dispositions() -> dict[int, object]:
    """Every catchable signal's handler now (the zygote calls it before any import)."""
    found: dict[int, object] = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            found[sig] = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
    return found


def _as_exec_leaves(handlers: Mapping[int, object], ignored: Sequence[int]) -> dict[int, object]:
    """A fresh interpreter's handlers (`handlers`, the zygote's at its start) as a cold
    start from the launcher now would leave them: its ignored signals ignored; one the
    zygote inherited ignored (from the launcher's own start, under nohup, say) but the
    launcher handles now as Python sets it up from the default (SIGPIPE and SIGXFSZ
    Python ignores itself)."""
    fresh: dict[int, object] = {}
    for sig, handler in handlers.items():
        if sig in ignored:
            fresh[sig] = signal.SIG_IGN
        elif handler is signal.SIG_IGN and sig not in (signal.SIGPIPE, signal.SIGXFSZ):
            fresh[sig] = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        else:
            fresh[sig] = handler
    return fresh


def become(
    request: Mapping[str, object],
    fds: Sequence[int],
    go: int,
    inherited: Sequence[int],
    handlers: Mapping[int, object],
) -> None:
    """Set this fork up as `request` says (its script runs next: `run`); a failure here is
    written to the worker's log and ends it with 127."""
    try:
        os.setsid()
        stdout, stderr = fds[0], fds[1]
        devnull = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((devnull, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
        for fd in {devnull, *fds, *inherited}:
            if fd > 2:
                os.close(fd)
        # The zygote says "g" once the middle process is reaped, so that the kernel has
        # made the launcher (a child subreaper) this worker's parent; a parent-death
        # signal set before that would fire when the middle process exits.
        confirmed = os.read(go, 1) == b"g"
        os.close(go)
        launcher = int(request["launcher"])  # type: ignore[call-overload]
        if not confirmed:
            os._exit(1)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:  # the launcher died in between
            os.kill(os.getpid(), signal.SIGKILL)
        _bind(request.get("cpus"), request.get("memory_node"))
        os.chdir(str(request["cwd"]))
        zygote_path = os.environ.get("PYTHONPATH", "")
        os.environ.clear()
        os.environ.update(request["env"])  # type: ignore[arg-type]
        wanted = _as_exec_leaves(handlers, request.get("ignored") or ())  # type: ignore[arg-type]
        for sig, handler in wanted.items():
            if signal.getsignal(sig) is not handler:
                with contextlib.suppress(OSError, ValueError, TypeError):
                    signal.signal(sig, handler)  # type: ignore[arg-type]
    except BaseException as exc:  # the worker's log says why it never ran
        os.write(2, f"paddlike.launch: preloaded start failed: {exc!r}\n".encode())
        os._exit(127)
    _rank_pythonpath(zygote_path, os.environ.get("PYTHONPATH", ""))


def _entries(pythonpath: str) -> list[str]:
    return [p for p in pythonpath.split(os.pathsep) if p]


def _rank_pythonpath(zygote: str, rank: str) -> None:
    """The rank's PYTHONPATH where it differs from the zygote's (--hang_timeout's probe
    directory, above all): its entries where a fresh interpreter has them (after
    sys.path[0]), and the sitecustomize a fresh interpreter would import run here, before
    the script, when it is not the one the zygote imported."""
    if zygote == rank:
        return
    old, new = _entries(zygote), _entries(rank)
    rest = sys.path[1:]
    for entry in old:
        if entry in rest:
            rest.remove(entry)
    sys.path[1:] = [*new, *rest]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path[1:])
    loaded = sys.modules.get("sitecustomize")
    if spec is None or getattr(loaded, "__file__", None) == spec.origin:
        return
    sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401
    except Exception as exc:  # as site.py says it
        said = f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{said}\n")


def _bind(cpus: object, memory_node: object) -> None:
    if not cpus:
        return
    try:
        os.sched_setaffinity(0, set(cpus))  # type: ignore[call-overload]
    except OSError as exc:
        os.write(2, f"paddlike.launch: --numa_binding: CPUs not set ({exc})\n".encode())
    number = _SET_MEMPOLICY.get(os.uname().machine)
    if isinstance(memory_node, int) and number is not None and 0 <= memory_node < 1024:
        mask = (ctypes.c_ulong * _MASK_LONGS)()
        mask[memory_node // 64] = 1 << (memory_node % 64)
        _libc.syscall(number, 1, mask, _MASK_LONGS * 64 + 1)  # MPOL_PREFERRED


def run(argv: list[str]) -> None:
    """Run `argv` ([python, flags..., script | -m module, args...]) here. SystemExit and
    KeyboardInterrupt go up to the interpreter, which ends the process with them as it
    would a fresh one; any other exception is printed with the script's frames only (not
    the zygote's), as the interpreter prints it, and ends the process with exit code 1."""
    rest = argv[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[1:]  # -u: the zygote runs with the workers' flags already
    sys.orig_argv[:] = argv
    main = types.ModuleType("__main__")
    main.__dict__.update(__annotations__={}, __builtins__=builtins)
    sys.modules["__main__"] = main
    try:
        if rest[0] == "-m":
            import runpy

            sys.argv[:] = ["-m", *rest[2:]]
            sys.path[0] = os.getcwd()
            runpy._run_module_as_main(rest[1], alter_argv=True)  # what `python -m` calls
        else:
            _run_file(argv[0], rest[0], rest[1:], main)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # this module's frames: a fresh interpreter has none
        exc.__traceback__ = tb  # hooks that format the exception itself read this
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        sys.excepthook(type(exc), exc, tb)
        raise SystemExit(1) from None


def _run_file(python: str, script: str, args: list[str], main: types.ModuleType) -> None:
    path = os.path.abspath(script)
    sys.argv[:] = [script, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:  # the fresh interpreter's own words and exit code
        sys.stderr.write(
            f"{python}: can't open file {path!r}: [Errno {exc.errno}] {exc.strerror}\n"
        )
        raise SystemExit(2) from None
    main.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
    )
    code = compile(source, path, "exec", dont_inherit=True)
    exec(code, main.__dict__)
