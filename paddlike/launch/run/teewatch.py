"""--tee on this node: which workers' log files the console echoes, and how it learns
that they grew: one inotify descriptor on the supervisor's loop, or polling every
`TEE_POLL` s where inotify is unavailable.

Apart from the event loop (`run.supervisor`), which only pumps the echo when the
descriptor this registers is readable (or at each poll).
"""

from __future__ import annotations

import contextlib
import selectors
from collections.abc import Sequence

from paddlike.launch.console.tee import TeeEcho, tee_targets
from paddlike.launch.run import linux

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

    from paddlike.launch.context.options import TeeSelection
    from paddlike.launch.plan.plan import ProcessSpec
    from paddlike.launch.run.roundstate import Proc

# Without inotify, how often the console re-reads the --tee files.
TEE_POLL = 0.1


def start_tee(
    procs: Sequence[Proc],
    selection: TeeSelection,
    specs: Sequence[ProcessSpec],
    out: TextIO,
    sel: selectors.BaseSelector,
    stack: contextlib.ExitStack,
    *,
    among_hosts: bool = False,
) -> tuple[TeeEcho | None, float | None]:
    """The echo of the started processes that `selection` names, or None; and the poll
    interval, None when inotify watches the files (registered on `sel` as "tee").
    `among_hosts`: started by the one-command cluster start (`TeeEcho.finish_setup`)."""
    targets = {id(s) for s in tee_targets(selection, specs)}
    echo = TeeEcho(out)
    for proc in procs:
        if id(proc.spec) in targets and proc.popen is not None:
            shown = proc.spec.console_streams  # torchrun's -t/-r: one stream, or both
            if shown & 1 or proc.log.err_path is None:
                echo.follow(proc.spec, proc.log.path, proc.log.start)
            if proc.log.err_path is not None and shown & 2:
                echo.follow(proc.spec, proc.log.err_path, proc.log.err_start)
    if not echo:
        return None, None
    echo.finish_setup(selection, among_hosts=among_hosts)
    try:
        inotify = _shared_inotify()
    except OSError:
        return echo, TEE_POLL
    stack.callback(inotify.unwatch_all)
    try:
        for path in echo.paths:
            inotify.watch(path)
    except OSError:
        return echo, TEE_POLL
    sel.register(inotify.fd, selectors.EVENT_READ, ("tee", inotify))
    echo.pump()
    return echo, None


_INOTIFY: linux.Inotify | None = None


def _shared_inotify() -> linux.Inotify:
    """One inotify descriptor for every round of this process, never closed: closing one
    waits for the kernel's RCU grace period (5-15 ms), which a spawn() per test or a
    restart round would pay each time. The process's exit releases it."""
    global _INOTIFY
    if _INOTIFY is None:
        _INOTIFY = linux.Inotify()
    return _INOTIFY
