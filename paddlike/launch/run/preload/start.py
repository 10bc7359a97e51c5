"""--preload at the launcher's start: the zygote started before anything else (its imports
overlap the rendezvous), or the job refused with exit 2 when a module does not exist."""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.launch.console.output import Console
from paddlike.launch.plan.exitcode import CANNOT_START
from paddlike.launch.plan.jobspec import PlanSpec
from paddlike.launch.run.preload.client import Preload, PreloadMissing

__all__ = ["Preload", "preview_preload", "start_preload"]


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


def preview_preload(
    modules: tuple[str, ...], workers: PlanSpec | None, python: str, environ: Mapping[str, str]
) -> tuple[str, bool]:
    """--dry_run's word on --preload: ("", True) without it; else the line to print and
    whether the job could start (a module the real start would refuse, found as it
    would look: not imported, nothing started)."""
    if not modules or workers is None:
        return "", True
    import os

    from paddlike.launch.run.preload.client import missing_line
    from paddlike.launch.run.preload.lookup import missing_module, same_interpreter, search_path

    argv = list(workers.argv(python))
    if same_interpreter(argv[0]):
        path = search_path(argv, os.getcwd(), environ)
        missing = missing_module(modules, path)
        if missing is not None:
            return missing_line(missing, path), False
    return (
        f"(--preload {','.join(modules)}: a zygote imports them once when the job starts; "
        "each worker is forked from it)",
        True,
    )
