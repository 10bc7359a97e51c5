"""--preload at the launcher's start: the zygote started before anything else (its imports
overlap the rendezvous), or the job refused with exit 2 when a module does not exist."""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.launch.console.output import Console
from paddlike.launch.context.options.record import LaunchOptions
from paddlike.launch.preload.client import Preload, PreloadMissing, workers_argv

__all__ = ["Preload", "start_preload"]


def start_preload(
    options: LaunchOptions, environ: Mapping[str, str], python: str, console: Console
) -> Preload | int | None:
    """The zygote for `options.preload`; None without --preload; 2 (after one line) when a
    module is not found where the script's imports would look."""
    if not options.preload:
        return None
    argv = workers_argv(
        python, options.training_script, options.module, options.training_script_args
    )
    try:
        return Preload.start(options.preload, argv, environ, warn=console.warn, say=console.say)
    except PreloadMissing as exc:
        console.error(str(exc))
        return 2
    except OSError as exc:  # no subreaper, no interpreter: the job runs, cold
        console.warn(f"--preload: cannot start the zygote ({exc}); workers start cold")
        return None
