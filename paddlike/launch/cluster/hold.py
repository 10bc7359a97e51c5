"""A host's launcher held at the cluster starter's gate: described, READY, then GO.

The starter (`gate`) sets `contract.HELD_AT_GATE` in each host's command. That host's
launcher parses and describes its own job (exactly what it would refuse, it refuses now,
before any host starts: a device it lacks, a name that does not resolve there, a bad
option), prints READY and waits for one line on its stdin: ``go`` runs the job; end of
file (another host failed, or the starter ended) ends it with nothing started. The check
is the launcher itself: no second Python start-up per host.
"""

from __future__ import annotations

import os
import select
import sys
import time

from paddlike.contract import GPUS_GIVEN_AS, HELD_AT_GATE
from paddlike.launch.cluster.remote import GO, READY

GO_TIMEOUT = 120.0  # seconds: the starter sends GO once every host is READY (30 s at most)


def wait_for_go(fd: int = 0, timeout: float = GO_TIMEOUT) -> bool:
    """READY on stdout, then True on GO; False on end of file, another word or the deadline.
    Reads one byte at a time, so that nothing past GO is taken from stdin (`eofwatch`
    watches it next)."""
    os.environ.pop(HELD_AT_GATE, None)  # not the workers' to inherit
    os.environ.pop(GPUS_GIVEN_AS, None)  # nor how the starter's --gpus was given (checked)
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            print("paddlike.launch: no GO from the cluster starter in time; not started",
                  file=sys.stderr, flush=True)  # fmt: skip
            return False
        try:
            byte = os.read(fd, 1)
        except InterruptedError:
            continue
        if not byte:
            return False
        line += byte
    return line == GO
