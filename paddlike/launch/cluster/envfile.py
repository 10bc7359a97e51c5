"""The environment carried to every host: env files' NAME=VALUE lines and --export.

Read in this order, a later one winning for the same name:

    this shell's NCCL_*, PYTHON*, ... (`carried`: DeepSpeed's prefixes, --export_prefixes)
    ~/.deepspeed_env   ./.deepspeed_env   ~/.paddlike_env   ./.paddlike_env   --export NAME

(DeepSpeed's file first so that a paddlike-specific file can override it; the working
directory's over the home's, as DeepSpeed reads them; --export takes the value from the
starting shell, last, because it is typed for this run.) A line is ``NAME=VALUE``; blank
lines and lines starting with ``#`` are skipped; the value is taken as written, to the end
of the line (no quotes removed). A file that others can read or write is refused
(`secretfile`): its values travel as secrets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from paddlike.launch.context.options.record import UsageError
from paddlike.launch.context.secretfile import LooseFile, read_private

ENV_FILES = (".deepspeed_env", ".paddlike_env")


def env_file_paths(home: str, cwd: str) -> tuple[str, ...]:
    """The files read, in order (lowest first)."""
    return tuple(os.path.join(d, name) for name in ENV_FILES for d in (home, cwd))


def parse_env_file(text: str, path: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        name = name.strip()
        if not eq or not name.isidentifier():
            raise UsageError(
                f"--hostfile: {path} line {number}: expected NAME=VALUE, got {line!r}",
                "--hostfile",
            )
        found[name] = value
    return found


def carried_environment(
    exported: Sequence[str],
    environ: Mapping[str, str],
    *,
    home: str,
    cwd: str,
    prefixes: Sequence[str] | None = None,
) -> dict[str, str]:
    """NAME -> VALUE for every host's launcher (see the module's order); `prefixes`:
    --export_prefixes (None: DeepSpeed's)."""
    from paddlike.launch.cluster.carried import carried_by_prefix

    carried = carried_by_prefix(environ, prefixes)
    for path in dict.fromkeys(env_file_paths(home, cwd)):  # home == cwd: read once
        try:
            carried.update(parse_env_file(read_private(path), path))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(
                f"--hostfile: cannot read {path} ({exc.strerror})", "--hostfile"
            ) from None
        except LooseFile as exc:
            raise UsageError(
                f"--hostfile: refused {path}, whose values every host gets as secrets: {exc}",
                "--hostfile",
            ) from None
    for name in exported:
        if name not in environ:
            raise UsageError(
                f"--export: {name} is not set in this shell (nothing to carry)", "--export"
            )
        carried[name] = environ[name]
    return carried
