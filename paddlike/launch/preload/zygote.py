"""The preload zygote: `python -u zygote.py FD`, started by the launcher (client.py) in a
session of its own. It imports the --preload modules once, checks that forking after them
is safe, then forks one worker per request until the launcher closes its end.

    1. the config (modules, the workers' argv and cwd); sys.path as the script's would be:
       the script's directory (the cwd for -m), then PYTHONPATH and the interpreter's
    2. each module's top-level package looked up without importing: one missing is
       answered at once ("missing"), so the launcher exits 2 before anything starts
    3. the imports, then the safety check: a second thread (/proc/self/task, native
       threads too), torch's CUDA initialized, a GPU device file open: "unsafe", naming
       the module after whose import it was seen; else "ready"
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
        if _threads() > 1:
            import threading

            names = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
            which = ", ".join(names) if names else "a native thread"
            return f"{name} started a thread at import ({which})"
        gpu = _gpu_touched()
        if gpu is not None:
            return f"after importing {name}, {gpu}"
    return None


def _fork_worker(fresh, sock: socket.socket, request: dict, fds: list[int], handlers) -> int:
    """Fork the worker through a middle process; its pid, once the launcher is its parent."""
    go_r, go_w = os.pipe()
    pid_r, pid_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(go_w)
            os.close(pid_r)
            worker = os.fork()
            if worker == 0:
                os.close(pid_w)
                fresh.become(request, fds, go_r, [sock.fileno()], handlers)
            os.write(pid_w, str(worker).encode())
        finally:
            os._exit(0)
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
    return int(data)


def main() -> None:
    here = sys.path.pop(0)  # this file's directory: never the workers'
    wire = _sibling(here, "wire")
    fresh = _sibling(here, "fresh")
    handlers = fresh.dispositions()  # a fresh interpreter's, before any module changes them
    sock = socket.socket(fileno=int(sys.argv[1]))
    config, _ = wire.receive(sock)
    if config is None:
        return
    modules = list(config["modules"])
    sys.path.insert(0, script_path0(config["argv"], config["cwd"]))
    missing = _missing(modules)
    if missing is not None:
        wire.send(sock, {"missing": missing, "path": sys.path})
        return
    wire.send(sock, {"found": True})
    began = time.monotonic()
    unsafe = _import_all(modules)
    if unsafe is not None:
        wire.send(sock, {"unsafe": unsafe})
        return
    wire.send(sock, {"ready": round(time.monotonic() - began, 3)})
    while True:
        request, fds = wire.receive(sock)
        if request is None:
            return
        try:
            reply = {"pid": _fork_worker(fresh, sock, request, fds, handlers)}
        except OSError as exc:
            reply = {"error": str(exc)}
        finally:
            for fd in fds:
                os.close(fd)
        wire.send(sock, reply)


if __name__ == "__main__":
    main()
