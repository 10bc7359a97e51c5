"""The messages between the launcher and its preload zygote: one JSON object per datagram
of a SOCK_SEQPACKET socketpair, file descriptors (a worker's stdout and stderr) riding
along as SCM_RIGHTS. Standard library only: the zygote loads this file by path.

    launcher -> zygote   {"modules": [...], "argv": [...], "cwd": ...}     (once, first)
    zygote -> launcher   {"found": true} | {"missing": name, "path": [...]}
    zygote -> launcher   {"ready": seconds} | {"unsafe": why}               (imports done)
    launcher -> zygote   {"argv", "env", "cwd", "cpus", "launcher"} + fds  (a worker)
    zygote -> launcher   {"pid": n} | {"error": why}
"""

from __future__ import annotations

import array
import json
import socket
from collections.abc import Sequence

MAX_MESSAGE = 4 << 20  # a worker's environment is the big part: tens of KiB at most
MAX_FDS = 4


def pair() -> tuple[socket.socket, socket.socket]:
    """The launcher's end and the zygote's end (inheritable: it crosses an exec)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for end in (ours, theirs):
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_MESSAGE)
    theirs.set_inheritable(True)
    return ours, theirs


def send(sock: socket.socket, message: dict, fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode()
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], ancillary)


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """The next message and the descriptors that came with it; (None, []) at EOF."""
    data, ancillary, _flags, _addr = sock.recvmsg(
        MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
    )
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got = array.array("i")
            got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
            fds.extend(got)
    if not data:
        return None, fds
    return json.loads(data), fds
