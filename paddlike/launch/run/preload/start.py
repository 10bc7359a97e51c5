"""--preload at the launcher's start: the zygote started before anything else (its imports
overlap the rendezvous), or the job refused with exit 2 when a module does not exist."""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.launch.console.output import Console
from paddlike.launch.plan.exitcode import CANNOT_START
from paddlike.launch.plan.jobspec import PlanSpec
from paddlike.launch.run.preload.client import Preload, PreloadMissing

__all__ = ["Preload", "start_preload"]


def start_preload(
    modules: tuple[str, ...],
    workers: PlanSpec | None,
    python: str,
    environ: Mapping[str, str],
    console: Console,
) -> Preload | int | None:
    """The zygote for --preload's `modules`, for the `workers` (what they run); None
    without --preload; 2 (after one line) when a module is not found where the script's
    imports would look."""
    if not modules or workers is None:
        return None
    argv = list(workers.argv(python))
    try:
        return Preload.start(modules, argv, environ, warn=console.warn, say=console.say)
    except PreloadMissing as exc:
        console.error(str(exc))
        return CANNOT_START
    except OSError as exc:  # no subreaper, no interpreter: the job runs, cold
        console.warn(f"--preload: cannot start the zygote ({exc}); workers start cold")
        return None
