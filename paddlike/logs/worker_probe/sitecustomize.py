"""paddlike's probe, imported by Python at a worker's start-up (see __init__.py).

Standard library only; never imports torch or paddlike. One connection, one answer:

    {"pid": 123,
     "stack": [[filename, line, function], ...],   # the main thread, innermost first
     "torch": null | {"initialized": bool, "record": {...}, "nccl_record": {...},
                      "error": ""}}

`record` is torch's own JSON flight record (`_dump_fr_trace_json()`), `nccl_record`
NCCL's where torch has one (`_dump_nccl_trace_json()`, CUDA builds); `torch` is null
while the script has not imported torch.distributed.
"""

import json
import os
import socket
import struct
import sys
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_ON_ENV = "PADDLIKE_PROBE"
_PYTHONPATH_ENV = "PADDLIKE_PROBE_PYTHONPATH"
_MAX_FRAMES = 256
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _restore() -> bool:
    """PYTHONPATH and sys.path as the user had them; whether the launcher asked for the
    probe (a child that inherited nothing of it does nothing)."""
    on = os.environ.pop(_ON_ENV, None) == "1"
    if not on:
        return False
    user = os.environ.pop(_PYTHONPATH_ENV, None)
    if user is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = user
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    return True


def _main_stack() -> list:
    frame = sys._current_frames().get(threading.main_thread().ident)
    out = []
    while frame is not None and len(out) < _MAX_FRAMES:
        code = frame.f_code
        out.append([code.co_filename, frame.f_lineno, getattr(code, "co_qualname", code.co_name)])
        frame = frame.f_back
    return out


def _torch() -> dict | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    answer = {"initialized": False, "record": None, "error": ""}
    try:
        answer["initialized"] = bool(dist.is_available() and dist.is_initialized())
        c10d = getattr(sys.modules.get("torch._C"), "_distributed_c10d", None)
        dump = getattr(c10d, "_dump_fr_trace_json", None)  # gloo (and other CPU backends)
        if dump is not None:
            answer["record"] = json.loads(dump())
        nccl = getattr(c10d, "_dump_nccl_trace_json", None)  # CUDA builds: NCCL's own recorder
        if nccl is not None:
            answer["nccl_record"] = json.loads(nccl())
    except Exception as exc:  # the answer says why; the worker goes on untouched
        answer["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return answer


def _same_user(conn: socket.socket) -> bool:
    _, uid, _ = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return uid in (0, os.getuid())


def _serve(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return  # closed (a fork's child) or the interpreter is ending
        with conn:
            try:
                if not _same_user(conn):
                    continue
                conn.settimeout(10.0)
                conn.recv(64)
                answer = {"pid": os.getpid(), "stack": _main_stack(), "torch": _torch()}
                conn.sendall(json.dumps(answer).encode())
            except Exception:
                pass  # the launcher names this rank as not answering


def _listen() -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(f"\0paddlike-probe-{os.getpid()}")  # worker_probe.socket_name
        listener.listen(8)
    except OSError:
        listener.close()
        return
    # A forked child (a DataLoader worker) must not hold its parent's name.
    os.register_at_fork(after_in_child=listener.close)
    threading.Thread(target=_serve, args=(listener,), name="paddlike-probe", daemon=True).start()


def _chain() -> None:
    """The user's own sitecustomize, which this one shadowed on sys.path."""
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if _restore():
    _listen()
_chain()
