"""The preload zygote: `python -u zygote.py FD`, started by the launcher (client.py) in a
session of its own. It imports the --preload modules once, checks that forking after them
is safe, then forks one worker per request until the launcher closes its end.

    1. the config (modules, the workers' argv and cwd); sys.path as the script's would be:
       the script's directory (the cwd for -m), then PYTHONPATH and the interpreter's
    2. each module's top-level package looked up without importing: one missing is
       answered at once ("missing"), so the launcher exits 2 before anything starts
    3. the imports, then the safety check: a second thread (/proc/self/task, native
       threads too) still running after a fork's handlers ran, torch's CUDA initialized, a
       GPU device file open: "unsafe", naming the module after whose import it was seen;
       else "ready"
    4. per request: fork a middle process, which forks the worker and exits; once the
       middle one is reaped the worker's parent is the launcher (PR_SET_CHILD_SUBREAPER),
       which then waits for it, signals and reaps it as any worker it started itself

Standard library only, and nothing of it left in the workers' sys.modules under a name a
script could use: wire.py and fresh.py are loaded by path under private names.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
from collections.abc import Callable


def _sibling(here: str, name: str):
    spec = importlib.util.spec_from_file_location(
        f"_paddlike_preload_{name}", os.path.join(here, f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_path0(argv: list[str], cwd: str) -> str:
    """sys.path[0] of a fresh `python [flags] script|-m module ...`."""
    rest = argv[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[1:]
    if not rest or rest[0] == "-m":
        return cwd
    return os.path.dirname(os.path.realpath(os.path.join(cwd, rest[0])))


def _missing(modules: list[str]) -> str | None:
    for name in modules:
        top = name.partition(".")[0]
        try:
            if importlib.util.find_spec(top) is None:
                return top
        except (ImportError, ValueError):
            return top
    return None


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _threads_after_a_fork() -> int:
    """The threads left once a fork's handlers ran: a library that stops its thread pool
    before a fork (OpenBLAS, loaded by numpy and torch, starts one at import and stops it
    in its pthread_atfork handler, restarting it at its next call) is safe to fork after;
    a thread still running then is not."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12's multi-threaded fork
        pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return _threads()


def _gpu_touched() -> str | None:
    """Why forking now would copy a GPU context into every worker, or None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            return "torch.cuda.is_initialized() is True"
    except Exception:
        pass
    try:
        for fd in os.listdir("/proc/self/fd"):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(("/dev/nvidia", "/dev/kfd", "/dev/dri/")):
                return f"a GPU device ({target}) is open"
    except OSError:
        pass
    return None


def _import_all(modules: list[str]) -> str | None:
    """Import every module; why forking after them is unsafe, or None."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # the workers would raise it themselves, cold
            return f"importing {name} raised {type(exc).__name__}: {exc}"
        if _threads() > 1 and _threads_after_a_fork() > 1:
            import threading

            names = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
            which = ", ".join(names) if names else "a native thread"
            return f"{name} started a thread at import ({which})"
        gpu = _gpu_touched()
        if gpu is not None:
            return f"after importing {name}, {gpu}"
    return None


def _fork_worker(request: dict) -> tuple[int, int]:
    """Fork the worker through a middle process: (its pid, -1) here once the launcher is its
    parent; (0, the read end of its go-ahead pipe) in the worker."""
    go_r, go_w = os.pipe()
    pid_r, pid_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        worker = -1
        try:
            os.close(go_w)
            os.close(pid_r)
            worker = os.fork()
        finally:
            if worker != 0:  # the middle process: say the pid, go
                if worker > 0:
                    os.write(pid_w, str(worker).encode())
                os._exit(0)
        os.close(pid_w)
        return 0, go_r
    os.close(go_r)
    os.close(pid_w)
    try:
        data = os.read(pid_r, 32)
    finally:
        os.close(pid_r)
        os.waitpid(middle, 0)  # from here on the worker is the launcher's child
    try:
        if not data:
            raise OSError("the worker could not be forked")
        os.write(go_w, b"g")
    finally:
        os.close(go_w)
    return int(data), -1


def main() -> Callable[[], None] | None:
    """Serve until the launcher closes its end (None); in a worker, return what runs the
    script, to be called outside every frame of the zygote's loop (`__main__` below)."""
    here = sys.path.pop(0)  # this file's directory: never the workers'
    wire = _sibling(here, "wire")
    fresh = _sibling(here, "fresh")
    handlers = fresh.dispositions()  # a fresh interpreter's, before any module changes them
    sock = socket.socket(fileno=int(sys.argv[1]))
    config, _ = wire.receive(sock)
    if config is None:
        return None
    modules = list(config["modules"])
    sys.path.insert(0, script_path0(config["argv"], config["cwd"]))
    missing = _missing(modules)
    if missing is not None:
        wire.send(sock, {"missing": missing, "path": sys.path})
        return None
    wire.send(sock, {"found": True})
    began = time.monotonic()
    unsafe = _import_all(modules)
    if unsafe is not None:
        wire.send(sock, {"unsafe": unsafe})
        return None
    wire.send(sock, {"ready": round(time.monotonic() - began, 3)})
    while True:
        request, fds = wire.receive(sock)
        if request is None:
            return None
        try:
            pid, go = _fork_worker(request)
        except OSError as exc:
            pid, go = -1, -1
            reply = {"error": str(exc)}
        if pid == 0:  # the worker
            fresh.become(request, fds, go, [sock.fileno()], handlers)
            return lambda: fresh.run(request["argv"])
        for fd in fds:
            os.close(fd)
        wire.send(sock, {"pid": pid} if pid > 0 else reply)


if __name__ == "__main__":
    # A worker runs its script here, at the top: the interpreter's own shutdown then ends
    # it, as it ends a fresh one (SystemExit's code, KeyboardInterrupt's SIGINT, non-daemon
    # threads joined, atexit, module and C++ static teardown).
    try:
        worker = main()
    except (BrokenPipeError, ConnectionResetError):  # the launcher went first: nothing to say
        worker = None
    if worker is not None:
        del main, _fork_worker, _import_all
        worker()
    else:  # the zygote itself ends: not joining a thread a module started (it would hold
        sys.stdout.flush()  # the launcher, which waits for the zygote, 5 s), no atexit
        sys.stderr.flush()
        os._exit(0)
