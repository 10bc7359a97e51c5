"""Ports a test names before the process that binds them starts (`--master 127.0.0.1:P`,
`--master_port P`, a server's address in an environment variable).

A port found free by binding port 0 and closing the socket comes from the kernel's
ephemeral range: until the launcher or server binds it, any outgoing connection, any
launcher's port reservation and any other test's bind(0) may be handed the same port
("Address already in use" under load, passing alone), and a neighbour such as P+1 (where
torchrun-style launchers meet) was never checked at all. These ports come from below that
range, where the kernel hands out nothing by itself; a run of `n` is checked bindable as a
whole and recorded in a registry that every test process on the machine consults under
one lock, so two tests (pytest-xdist workers) never get the same port.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import time
from pathlib import Path

REGISTRY = Path(os.environ.get("TMPDIR") or "/tmp") / "paddlike-test-ports"
# Above the fixed ports tests and launchers use by default (6070, 6170, 29400, 29500, ...).
LOW = 30000
# A test's ports stay its own this long (longer than any test's timeout), or until the
# process that took them is gone.
TTL = 600.0


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    """Bindable on every address (a plain bind, as the launcher's store makes it)."""
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def _held(entry: Path, now: float) -> bool:
    try:
        pid, stamp = entry.read_text().split()
        owner, since = int(pid), float(stamp)
    except (OSError, ValueError):
        return False
    if now - since >= TTL:
        return False
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def fixed_ports(n: int = 1) -> int:
    """The first of `n` consecutive ports, free on every address now and given to no other
    test: P for `--master 127.0.0.1:P`; `fixed_ports(2)` for `--master_port P`, whose
    launchers meet at P+1."""
    high = _ephemeral_low()
    if high - LOW < 64 * n:  # an unusual ephemeral range: above it instead
        low, high = max(high, 61000), 65536
    else:
        low = LOW
    REGISTRY.mkdir(mode=0o777, parents=True, exist_ok=True)
    with open(REGISTRY / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        for _ in range(500):
            start = random.randrange(low, high - n + 1)
            run = range(start, start + n)
            if any(_held(REGISTRY / str(p), now) for p in run):
                continue
            if not all(_bindable(p) for p in run):
                continue
            for p in run:
                (REGISTRY / str(p)).write_text(f"{os.getpid()} {now}\n")
            return start
    raise RuntimeError(f"no {n} consecutive free ports in {low}-{high - 1} after 500 tries")
