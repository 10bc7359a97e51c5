"""The job directory of one `spawn` / `start_processes` call, and the child's side of it.

The parent (acting as the launcher) writes ``call.pkl``; every child is started by the
launcher as its training script, ``python -u -m paddlike._spawn_child``, with
the launched environment contract and ``PADDLIKE_SPAWN_JOBDIR=JOBDIR`` (an environment
variable, not an argument: the script's arguments are part of the configuration every
node of a many-node job must share, and each node has its own job directory), and
answers by its local index:

    call.pkl          two pickles: how to prepare the interpreter (sys.path, cwd, the
                      parent's __main__, as multiprocessing's spawn does), then
                      (fn, args, convention)
    result.N          the pickled return value of local process N
    error.N.json      {"type", "message", "traceback"}: what local process N raised

A child that raises also prints its traceback to stderr, so its log file and the
launcher's failure report show it. Files are written under a temporary name and
renamed: the parent never reads half a file.

Import-light on purpose (json and pickle are imported where used), and outside
`paddlike.distributed`: it is every child's first import, and a child imports that
package only if its function does (the package's import was a third of what `spawn`
cost over multiprocessing).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CALL_FILE = "call.pkl"
JOBDIR_ENV = "PADDLIKE_SPAWN_JOBDIR"
# "paddle": fn(*args); "torch": fn(i, *args) with i the process index
CONVENTIONS = ("paddle", "torch")
_LOCAL_RANK = "PADDLE_LOCAL_RANK"  # also LOCAL_RANK; the contract's local index

# True while this process unpickles its function (and with it, maybe, the parent's
# __main__): a `spawn` started then would start processes from every child, recursively.
bootstrapping = False


def result_path(jobdir: str | os.PathLike[str], index: int) -> Path:
    return Path(jobdir) / f"result.{index}"


def error_path(jobdir: str | os.PathLike[str], index: int) -> Path:
    return Path(jobdir) / f"error.{index}.json"


def preparation(main_module: Any = None) -> dict[str, Any]:
    """What a fresh interpreter needs to unpickle the parent's function: the parent's
    sys.path (with '' made absolute), its working directory, and how to re-import its
    __main__ (by module name, or by path; never as __main__, so a script's guarded
    ``if __name__ == "__main__":`` block does not run again). The keys are those of
    `multiprocessing.spawn.prepare`, which the child uses."""
    main = sys.modules["__main__"] if main_module is None else main_module
    cwd = os.getcwd()
    data: dict[str, Any] = {
        "sys_path": [p or cwd for p in sys.path],
        "dir": cwd,
    }
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        data["init_main_from_name"] = name
    else:
        path = getattr(main, "__file__", None)
        if path is not None:
            data["init_main_from_path"] = os.path.normpath(os.path.join(cwd, path))
    return data


def write_call(
    jobdir: str | os.PathLike[str], fn: Any, args: tuple[Any, ...], convention: str
) -> None:
    """Pickle the call for the children; raises pickle.PicklingError / TypeError /
    AttributeError (from pickle) when fn or args cannot be pickled."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention: expected one of {CONVENTIONS}, got {convention!r}")
    import pickle

    payload = pickle.dumps((fn, tuple(args), convention), protocol=pickle.HIGHEST_PROTOCOL)
    path = Path(jobdir) / CALL_FILE
    with open(path, "wb") as f:
        pickle.dump(preparation(), f, protocol=pickle.HIGHEST_PROTOCOL)
        f.write(payload)


def read_error(jobdir: str | os.PathLike[str], index: int) -> dict[str, str] | None:
    import json

    try:
        return dict(json.loads(error_path(jobdir, index).read_text()))
    except (OSError, ValueError):
        return None


def read_result(jobdir: str | os.PathLike[str], index: int) -> Any:
    """The child's return value; None when it wrote none (e.g. it called sys.exit(0))."""
    try:
        data = result_path(jobdir, index).read_bytes()
    except FileNotFoundError:
        return None
    import pickle

    return pickle.loads(data)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _report(jobdir: Path, index: int, exc: BaseException) -> None:
    import json
    import traceback

    text = "".join(traceback.format_exception(exc))
    sys.stderr.write(text)
    sys.stderr.flush()
    record = {
        "type": type(exc).__qualname__,
        "module": type(exc).__module__,
        "message": str(exc),
        "traceback": text,
    }
    _write_atomic(error_path(jobdir, index), json.dumps(record).encode())


def _load_call(jobdir: Path) -> tuple[Any, tuple[Any, ...], str]:
    global bootstrapping
    import pickle

    with open(jobdir / CALL_FILE, "rb") as f:
        data = pickle.load(f)
        if data.get("init_main_from_name") or data.get("init_main_from_path"):
            from multiprocessing import spawn as mp_spawn

            bootstrapping = True
            try:
                mp_spawn.prepare(data)
                return pickle.load(f)
            finally:
                bootstrapping = False
        sys.path[:] = data["sys_path"]
        os.chdir(data["dir"])
        bootstrapping = True
        try:
            return pickle.load(f)
        finally:
            bootstrapping = False


def main(argv: list[str], environ: Mapping[str, str] = os.environ) -> int:
    """Run the call as local process N (the launcher's PADDLE_LOCAL_RANK); the exit code."""
    if argv or not environ.get(JOBDIR_ENV):
        sys.stderr.write(
            f"usage: {JOBDIR_ENV}=JOBDIR python -m paddlike._spawn_child "
            "(started by paddlike.distributed.spawn, not by hand)\n"
        )
        return 2
    jobdir = Path(environ[JOBDIR_ENV])
    index = int(environ.get(_LOCAL_RANK) or environ.get("LOCAL_RANK") or 0)
    try:
        fn, args, convention = _load_call(jobdir)
    except Exception as exc:  # the function's module did not import here: say so
        _report(jobdir, index, exc)
        return 1
    import pickle

    try:
        value = fn(index, *args) if convention == "torch" else fn(*args)
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (SystemExit, KeyboardInterrupt):
        raise  # an exit code (or an interrupt) of the process, not an error of fn
    except BaseException as exc:
        _report(jobdir, index, exc)
        return 1
    _write_atomic(result_path(jobdir, index), data)
    return 0


if __name__ == "__main__":
    # Run through the module's real name: the `bootstrapping` flag that `spawn` checks
    # must live in `paddlike._spawn_child`, not in this `__main__` copy
    # (which the parent's re-imported __main__ also replaces in sys.modules).
    from paddlike._spawn_child import main as _main

    sys.stdout.flush()
    sys.exit(_main(sys.argv[1:]))
