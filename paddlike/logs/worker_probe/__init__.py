"""paddlike's probe in each worker, for `--hang_timeout`: its Python stack and torch's
flight record, asked for over a socket when a hang is looked for.

Why a probe: torch keeps each rank's flight record (`TORCH_FR_BUFFER_SIZE`) in the
worker's memory. For NCCL, torch's watchdog can write it to `TORCH_FR_DUMP_TEMP_FILE`
on a timeout or when its debug pipe is written to; for gloo (torch 2.13, CPU) nothing
outside the process can ask for it: the record comes out only through
`torch._C._distributed_c10d._dump_fr_trace_json()` called inside the worker, which is
what torch's debug server (`torch.distributed.debug.start_debug_server`) and worker
server (`torch.distributed.elastic.control_plane.worker_main`) do — both need the script
to start them. The probe calls the same function without the script's help.

How it gets in: the launcher puts this directory first on the workers' PYTHONPATH, so
Python imports its `sitecustomize` at start-up (stdlib only, never imports torch). It
puts PYTHONPATH and sys.path back as they were, runs the user's own sitecustomize if
there is one, and answers on an abstract Unix socket named after the worker's pid
(no file; gone with the process; processes of other users are refused). The launcher's
side is `paddlike.logs.torch_flight`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["ON_ENV", "PYTHONPATH_ENV", "probe_env", "socket_name"]

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
ON_ENV = "PADDLIKE_PROBE"  # "1" in the workers that carry the probe
PYTHONPATH_ENV = "PADDLIKE_PROBE_PYTHONPATH"  # the user's PYTHONPATH (absent: had none)
# torch's flight recorder: on with the size torch's own documentation recommends, unless
# the user sized it (either name; 0 turns it off)
FR_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
FR_BUFFER_NAMES = (FR_BUFFER_ENV, "TORCH_NCCL_TRACE_BUFFER_SIZE")
FR_BUFFER_SIZE = "2000"


def socket_name(pid: int) -> str:
    """The abstract Unix socket worker `pid`'s probe listens on (sitecustomize.py)."""
    return f"\0paddlike-probe-{pid}"


def probe_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The workers' additions for the probe and torch's flight recorder, given the
    launcher's environment (read only)."""
    env = {ON_ENV: "1"}
    user = environ.get("PYTHONPATH")
    env["PYTHONPATH"] = DIRECTORY + (os.pathsep + user if user else "")
    if user is not None:
        env[PYTHONPATH_ENV] = user
    if not any(name in environ for name in FR_BUFFER_NAMES):
        env[FR_BUFFER_ENV] = FR_BUFFER_SIZE
    return env
