"""Whether every --preload module exists, looked up in the launcher without importing it,
on the path the script's own imports would search, so that a typo ends the launch (exit 2)
before anything starts, without waiting for the zygote's interpreter to start.

The path of a fresh `python -u script.py` under the workers' environment: the script's
directory (the working directory for `-m`), PYTHONPATH's entries, then the interpreter's
own (the launcher's sys.path after its first entry and its own PYTHONPATH's). Only when the
workers' interpreter is the launcher's; else the zygote's own answer is waited for.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Mapping, Sequence

from paddlike.launch.run.preload.zygote import script_path0


def same_interpreter(python: str) -> bool:
    try:
        return os.path.samefile(python, sys.executable)
    except OSError:
        return False


def search_path(argv: Sequence[str], cwd: str, environ: Mapping[str, str]) -> list[str]:
    ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    theirs = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    rest = [p for p in sys.path[1:] if p not in ours]
    return [script_path0(list(argv), cwd), *theirs, *rest]


def missing_module(modules: Sequence[str], path: Sequence[str]) -> str | None:
    """The first module whose top-level package is not on `path` (builtin and frozen
    modules count as found)."""
    for name in modules:
        top = name.partition(".")[0]
        if top in sys.builtin_module_names:
            continue
        if importlib.machinery.FrozenImporter.find_spec(top) is not None:
            continue
        if importlib.machinery.PathFinder.find_spec(top, list(path)) is None:
            return top
    return None
